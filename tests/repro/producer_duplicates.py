"""Reproducer: does our idempotent producer write a message twice when a broker dies?

Usage (needs the 3-broker cluster; it is started, one broker faulted and restarted)::

    flock /tmp/ps-cluster.lock nice -n 15 .venv/bin/python -m tests.repro.producer_duplicates \
        [--fault kill|stop] [--broker 1] [--down-s 20] [--rate 300] [--rounds 3]

A child process produces unique payloads (``<run>:<n>``) with policy-sync's transport
(``KafkaTransport.producer(linger_ms=5)``: idempotent, acks=all, the messaging engine's
kind) to a fresh 6-partition topic, serving delivery reports. The parent SIGKILLs (or
SIGSTOPs) one broker, keeps it down ``--down-s`` seconds, restarts (or SIGCONTs) it, and
repeats ``--rounds`` times. Then it reads the whole topic (read_committed) and prints every
payload stored more than once, with its offsets, and the delivery reports by outcome.

Exit status 1 when a payload is stored twice (the bug this looks for), else 0.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKACTL = ROOT / "docker" / "kafka" / "kafkactl.py"
CLUSTER_STATE = ROOT / "docker" / "kafka" / ".state" / "cluster"
BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:29092,127.0.0.1:31092"
PARTITIONS = 6


def _child(topic: str, rate: float, extra: dict[str, str | int], report: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from sync._errors import TransportError
    from sync.transport import DeliveryReport, KafkaConfig, KafkaTransport

    transport = KafkaTransport(KafkaConfig(BOOTSTRAP, client_id="repro-dups", extra=extra))
    producer = transport.producer(linger_ms=5)
    outcomes: collections.Counter[str] = collections.Counter()
    stop = [False]

    def on_term(_sig: int, _frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)

    def on_delivery(rep: DeliveryReport) -> None:
        outcomes["ok" if rep.error is None else rep.error[:60]] += 1

    gap = 1.0 / rate
    n = 0
    nxt = time.monotonic()
    while not stop[0]:
        try:
            _produce_one(producer, topic, n, on_delivery)
        except TransportError as exc:  # a fatal client error: report it, make a new one
            outcomes[f"produce raised: {exc}"[:80]] += 1
            producer = transport.producer(linger_ms=5)
        n += 1
        nxt += gap
        producer.poll(max(0.0, nxt - time.monotonic()))
    left = producer.flush(60)
    report.write_text(json.dumps({"produced": n, "unanswered": left, "outcomes": outcomes}))


def _produce_one(producer: object, topic: str, n: int, on_delivery: object) -> None:
    producer.produce(  # type: ignore[attr-defined]
        topic, None, f"{topic}:{n}".encode(), partition=n % PARTITIONS, on_delivery=on_delivery
    )


def _kafkactl(*args: str) -> None:
    for attempt in range(3):
        out = subprocess.run([sys.executable, str(KAFKACTL), *args], capture_output=True, text=True)
        if out.returncode == 0:
            return
        print(f"kafkactl {' '.join(args)} failed (attempt {attempt + 1}): {out.stderr[-300:]}")
    raise SystemExit("kafkactl kept failing")


def _read_all(topic: str) -> dict[bytes, list[tuple[int, int]]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": "repro-dups-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])
    seen: dict[bytes, list[tuple[int, int]]] = collections.defaultdict(list)
    eof: set[int] = set()
    deadline = time.monotonic() + 120
    while len(eof) < PARTITIONS and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == -191:  # _PARTITION_EOF
                eof.add(msg.partition() or 0)
            continue
        seen[msg.value() or b""].append((msg.partition() or 0, msg.offset() or 0))
    consumer.close()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=("kill", "stop"), default="kill")
    parser.add_argument("--broker", type=int, default=1)
    parser.add_argument("--down-s", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    extra: dict[str, str | int] = {}
    for pair in args.set:
        key, _, value = pair.partition("=")
        extra[key] = int(value) if value.lstrip("-").isdigit() else value
    if args.child:
        _child(args.child[0], args.rate, extra, Path(args.child[1]))
        return 0
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    _kafkactl("cluster-up")
    topic = f"repro.dups.{int(time.time())}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})  # kept: a dropped client aborts
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result()
    report = Path(os.environ.get("TMPDIR", "/tmp")) / f"{topic}.json"
    cmd = [sys.executable, "-m", "tests.repro.producer_duplicates", "--rate", str(args.rate)]
    for pair in args.set:
        cmd += ["--set", pair]
    child = subprocess.Popen([*cmd, "--child", topic, str(report)], cwd=ROOT)
    print(f"topic {topic}; fault {args.fault} broker {args.broker}; extra {extra}", flush=True)
    try:
        time.sleep(8)
        for rnd in range(1, args.rounds + 1):
            pid = int((CLUSTER_STATE / f"node-{args.broker}" / "kafka.pid").read_text().strip())
            sig = signal.SIGKILL if args.fault == "kill" else signal.SIGSTOP
            print(f"round {rnd}: {sig.name} broker {args.broker} (pid {pid})", flush=True)
            os.kill(pid, sig)
            time.sleep(args.down_s)
            if args.fault == "kill":
                _kafkactl("cluster-up")
            else:
                os.kill(pid, signal.SIGCONT)
            time.sleep(10)
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(120)
    result = (
        json.loads(report.read_text())
        if report.exists()
        else {"child exit status": child.returncode}  # e.g. a fatal client error
    )
    seen = _read_all(topic)
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    print(f"producer: {result}")
    print(f"stored: {sum(len(v) for v in seen.values())} records, {len(seen)} distinct payloads")
    print(f"payloads stored more than once: {len(dups)}")
    for payload, where in sorted(dups.items(), key=lambda kv: kv[1])[:20]:
        print(f"  {payload.decode()}: {where}")
    return 1 if dups else 0


if __name__ == "__main__":
    raise SystemExit(main())
