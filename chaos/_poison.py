"""Poison fuzz of ``__change_events``: mutated copies of real records, with a plain producer.

Real records are written first (``policyctl import`` of topic-, namespace- and global-level
policies in a namespace of their own), read back from Kafka, and then produced again,
mutated, to the same key and partition. Kinds: truncated, bit flips, bad magic, unknown
fingerprint, an undecodable body behind a valid-looking classification, and a valid
INSERT/UPDATE right after a poison record of the same key. The soak's final check (every
cache equals a fresh replay) is what judges how the sidecars took it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition

from ._world import POISON_NAMESPACE, World
from .procs import BIN

TOPIC = "__change_events"
HEADER = 10  # c3 01 + 8-byte fingerprint
# (eventType, actionType) bytes of valid classes: zig-zag enum indexes
CLASSES = ((0, 0), (0, 2), (0, 4), (2, 0), (2, 2), (2, 4), (4, 0), (4, 6), (0, 6))
KINDS = ("truncated", "bitflip", "bad_magic", "unknown_fingerprint", "undecodable_class")


@dataclass
class PoisonStats:
    produced: Counter[str] = field(default_factory=Counter)
    templates: int = 0
    delivery_errors: int = 0
    seed_error: str = ""

    @property
    def total(self) -> int:
        return sum(v for k, v in self.produced.items() if k != "valid_reinsert")


def seed_lines(n_topics: int = 40, n_namespaces: int = 8) -> str:
    lines: list[dict[str, object]] = []
    for i in range(n_topics):
        lines.append({"target": f"persistent://{POISON_NAMESPACE}/t{i}",
                      "policies": {"maxConsumerPerTopic": i + 1, "messageTTLInSeconds": 60}})
        if i % 4 == 0:
            lines.append({"target": f"persistent://{POISON_NAMESPACE}/t{i}", "global": True,
                          "policies": {"maxProducerPerTopic": i + 2}})  # fmt: skip
    for i in range(n_namespaces):
        lines.append({"target": f"{POISON_NAMESPACE}-{i}",
                      "policies": {"maxConsumerPerTopic": i + 3}})  # fmt: skip
    return "\n".join(json.dumps(line) for line in lines) + "\n"


class PoisonFuzz:
    def __init__(self, world: World, spread_s: float) -> None:
        self.world = world
        self.spread_s = spread_s
        self.rng = world.rng("poison")
        self.stats = PoisonStats()
        self.templates: list[tuple[bytes, bytes, int]] = []  # key, value, partition
        self._thread = threading.Thread(target=self._run, name="poison", daemon=True)

    def seed(self) -> None:
        """Write the real records the fuzz mutates (before the faults start)."""
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=self.world.cluster.bootstrap)
        out = subprocess.run(  # noqa: S603 - our own program
            [str(BIN / "policyctl"), "import", "-"],
            input=seed_lines(), capture_output=True, text=True, env=env, timeout=180,
            check=False,
        )  # fmt: skip
        if out.returncode != 0:
            self.stats.seed_error = f"policyctl import exit {out.returncode}: {out.stderr[-500:]}"
        self.templates = self._read_templates()
        self.stats.templates = len(self.templates)

    def _read_templates(self) -> list[tuple[bytes, bytes, int]]:
        consumer = Consumer({
            "bootstrap.servers": self.world.cluster.bootstrap,
            "group.id": "chaos-poison-reader", "enable.auto.commit": False, "log_level": 2,
        })  # fmt: skip
        try:
            meta = consumer.list_topics(TOPIC, timeout=30)
            parts = sorted(meta.topics[TOPIC].partitions)
            ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                    for p in parts}  # fmt: skip
            consumer.assign([TopicPartition(TOPIC, p, 0) for p in parts])
            found: list[tuple[bytes, bytes, int]] = []
            done: set[int] = {p for p, end in ends.items() if end == 0}
            while len(done) < len(parts):
                msg = consumer.poll(5.0)
                if msg is None:
                    break
                if msg.error():
                    continue
                key, value = msg.key(), msg.value()
                if key and value and b"poison" in key and len(value) > HEADER + 2:
                    found.append((bytes(key), bytes(value), int(msg.partition() or 0)))
                part, offset = msg.partition(), msg.offset()
                if part is not None and offset is not None and offset + 1 >= ends[part]:
                    done.add(part)
            return found
        finally:
            consumer.close()

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(120)

    def mutate(self, kind: str, value: bytes) -> bytes:
        rng, data = self.rng, bytearray(value)
        if kind == "truncated":
            return bytes(data[: rng.randrange(1, len(data))])
        if kind == "bitflip":
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(HEADER, len(data))
                data[i] ^= 1 << rng.randrange(8)
            return bytes(data)
        if kind == "bad_magic":
            magic = bytes([rng.randrange(256), rng.randrange(256)])
            return (magic if magic != b"\xc3\x01" else b"\xc3\x02") + bytes(data[2:])
        if kind == "unknown_fingerprint":
            return bytes(data[:2]) + rng.randbytes(8) + bytes(data[HEADER:])
        # undecodable_class: a valid header and classification, then garbage
        cls = rng.choice(CLASSES)
        return bytes(data[:HEADER]) + bytes(cls) + rng.randbytes(rng.randrange(0, 40))

    def _run(self) -> None:
        if not self.templates:
            return
        producer = Producer({
            "bootstrap.servers": self.world.cluster.bootstrap, "linger.ms": 5,
            "acks": "all", "message.timeout.ms": 60000, "log_level": 2,
        })  # fmt: skip

        def delivered(err: object, _msg: object) -> None:
            if err is not None:
                self.stats.delivery_errors += 1

        target = self.world.config.poison_records
        batches = 50
        pause = self.spread_s / batches
        started = time.monotonic()
        while self.stats.total < target and not self.world.stop.is_set():
            # On schedule by the clock: a step that stalled (a broker down) is made up for
            # by the next one, so all ``target`` records are out after ``spread_s``.
            elapsed = time.monotonic() - started
            due_now = -(-target * min(1.0, (elapsed + pause) / self.spread_s) // 1)
            for _ in range(int(due_now) - self.stats.total):
                key, value, part = self.rng.choice(self.templates)
                kind = self.rng.choice((*KINDS, "insert_after_poison"))
                bad_kind = self.rng.choice(KINDS) if kind == "insert_after_poison" else kind
                try:
                    producer.produce(TOPIC, self.mutate(bad_kind, value), key, part,
                                     on_delivery=delivered)  # fmt: skip
                    self.stats.produced[kind] += 1
                    if kind == "insert_after_poison":
                        producer.produce(TOPIC, value, key, part, on_delivery=delivered)
                    elif self.rng.random() < 0.2:
                        producer.produce(TOPIC, value, key, part, on_delivery=delivered)
                        self.stats.produced["valid_reinsert"] += 1
                except BufferError:
                    producer.poll(1.0)  # not counted: the next step makes up for it
                producer.poll(0)
            # Paced by the clock, not by Kafka: while brokers stall, what is not confirmed
            # stays queued (the final flush waits for it) instead of delaying the fuzz.
            producer.flush(min(pause, 5.0))
            if self.world.sleep(max(0.0, pause - (time.monotonic() - started - elapsed))):
                break
        producer.flush(60)
