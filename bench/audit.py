"""Benchmark: the Spark audit of N change events vs Spark merely reading and counting them.

Both run in the same Spark session, on the same topic, one after the other (after an
untimed warm-up read, so neither pays for JVM class loading and JIT). The issue's target:
the audit takes at most 3x the plain read.

Each round also times two floors the audit cannot beat, so a miss can be located: read +
Avro decode of every record (nothing written), and read + decode + writing the history's
required columns that need no per-key window (``key`` ... ``after``) to Parquet.

    python -m bench.audit --bootstrap-servers 127.0.0.1:9092 -n 1000000

The events are real change events (current schema, single-object encoding) with a unique
event id each, spread over ``keys`` keys in 100 namespaces: the first event of a key is an
INSERT, the rest UPDATEs that change one or two fields, so the audit has diffs to compute.
To write a million of them quickly, every (key, variant) is Avro-encoded once and the
36-byte event id is patched per record (a UUID string keeps its length, so the Avro
encoding stays valid).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from pyspark.sql import SparkSession

from sync import Codec, PolicyTarget
from sync.audit import (
    KafkaSource,
    SparkConfig,
    SparkSchemas,
    decode_records,
    read_log,
    run_audit,
    spark_session,
    write_parquet,
)
from sync.constants import (
    BOOTSTRAP_ENV_VAR,
    CHANGE_EVENTS_CREATE_CONFIG,
    CHANGE_EVENTS_PARTITIONS,
    DEFAULT_BOOTSTRAP_SERVERS,
)
from sync.transport import KafkaConfig, KafkaTransport, TopicSpec

__all__ = ["BenchResult", "produce_events", "run"]

_PLACEHOLDER = "00000000-0000-4000-8000-000000000000"
_VARIANTS = 8


@dataclass(frozen=True, slots=True)
class BenchResult:
    events: int
    produce_s: float
    count_s: float
    audit_s: float
    #: Every round's (read+count, audit) seconds, and the 1-minute load average before
    #: and after the timed rounds (the host may be shared: the load says how much).
    rounds: tuple[tuple[float, float], ...] = ()
    load_before: float = 0.0
    load_after: float = 0.0
    #: Floors, best of the rounds: read + Avro decode only (nothing written), and read +
    #: decode + the history's required columns written to Parquet with no diffs (no
    #: window, no anomalies, no report). The audit cannot take less than either.
    decode_s: float = 0.0
    write_s: float = 0.0

    @property
    def ratio(self) -> float:
        return self.audit_s / self.count_s if self.count_s else float("inf")

    def as_dict(self) -> dict[str, Any]:
        floors = {
            "decode_ratio": round(self.decode_s / self.count_s, 2) if self.count_s else None,
            "write_ratio": round(self.write_s / self.count_s, 2) if self.count_s else None,
        }
        return {**asdict(self), "ratio": round(self.ratio, 2), "target_ratio": 3.0, **floors}


def _event(codec: Codec, target: PolicyTarget, action: str, variant: int) -> bytes:
    policies: dict[str, Any] = {
        "isGlobal": False,
        "maxConsumerPerTopic": 10 + variant,
        "messageTTLInSeconds": 3600 * (1 + variant % 3),
    }
    if variant % 2:
        policies["retentionPolicies"] = {"retentionTimeInMinutes": variant, "retentionSizeInMB": 64}
    assert target.topic is not None
    return codec.encode(
        {
            "eventType": "TOPIC_POLICY",
            "actionType": action,
            "topicPoliciesEvent": {
                "domain": target.topic.domain.value,
                "tenant": target.tenant,
                "namespace": target.namespace,
                "topic": target.topic.local_name,
                "policies": policies,
            },
            "replicateTo": ["standalone"],
            "metadata": {
                "eventId": _PLACEHOLDER,
                "author": "bench",
                "timestampMillis": int(time.time() * 1000),
                "origin": "bench.audit",
            },
        }
    )


def produce_events(bootstrap: str, topic: str, n: int, keys: int = 10_000) -> float:
    """Write ``n`` change events to a new ``topic``; returns the seconds it took."""
    KafkaTransport(KafkaConfig(bootstrap)).admin().ensure_topic(
        TopicSpec(topic, CHANGE_EVENTS_PARTITIONS, config=CHANGE_EVENTS_CREATE_CONFIG)
    )
    codec = Codec()
    keys = max(1, min(keys, n))
    targets = [PolicyTarget.parse(f"persistent://bench/ns{k % 100}/topic-{k}") for k in range(keys)]
    inserts = [_event(codec, t, "INSERT", 0) for t in targets]
    updates = [[_event(codec, t, "UPDATE", v) for v in range(1, _VARIANTS)] for t in targets]
    placeholder = _PLACEHOLDER.encode()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "compression.type": "lz4",
            "enable.idempotence": True,
        }
    )
    started = time.monotonic()
    for i in range(n):
        k, version = i % keys, i // keys
        template = inserts[k] if version == 0 else updates[k][(version - 1) % (_VARIANTS - 1)]
        value = template.replace(placeholder, str(uuid.uuid4()).encode(), 1)
        while True:
            try:
                producer.produce(topic, value, targets[k].key_bytes)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("not every benchmark event was delivered")
    return time.monotonic() - started


#: The history columns the issue requires, less the ones that need the per-key window.
_REQUIRED_UNDIFFED = (
    "key", "topic", "scope", "partition", "offset", "timestamp", "action", "author", "after"
)


def _floors(spark: SparkSession, source: KafkaSource, schemas: SparkSchemas) -> tuple[float, float]:
    """Seconds for read+decode (noop sink) and for read+decode+undiffed history Parquet."""
    started = time.monotonic()
    decoded = decode_records(read_log(spark, source), schemas).drop("value_sha256")
    decoded.write.format("noop").mode("overwrite").save()
    decode_s = time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="bench-audit-floor-") as out:
        started = time.monotonic()
        frame = decode_records(read_log(spark, source), schemas).select(*_REQUIRED_UNDIFFED)
        write_parquet(frame, Path(out) / "history")
        write_s = time.monotonic() - started
    return decode_s, write_s


def run(
    bootstrap: str,
    n: int = 1_000_000,
    *,
    master: str = "local[*]",
    warmup: int = 20_000,
    rounds: int = 3,
) -> dict[str, Any]:
    """Produce ``n`` events, then time Spark's read+count and the full audit of them.

    An untimed audit of a separate ``warmup``-event topic comes first (JIT, class loading,
    code generation); then ``rounds`` of (read+count, audit) alternate and the best of each
    is reported, so both sides are compared in the same steady state.
    """
    if n < 1 or rounds < 1:
        raise ValueError("n and rounds must be >= 1")
    topic = f"bench-audit-{uuid.uuid4().hex[:8]}"
    produce_s = produce_events(bootstrap, topic, n)
    print(f"produced {n:,} change events to {topic} in {produce_s:.1f}s", flush=True)
    warm_topic = f"{topic}-warmup"
    produce_events(bootstrap, warm_topic, warmup, keys=max(1, warmup // 8))
    spark = spark_session(
        SparkConfig(master=master, conf={"spark.driver.memory": "2g", "spark.ui.enabled": "false"})
    )
    source = KafkaSource(bootstrap, topic)
    counts: list[float] = []
    audits: list[float] = []
    floors: list[tuple[float, float]] = []
    schemas = SparkSchemas.load()
    load_before = load_after = 0.0
    try:
        with tempfile.TemporaryDirectory(prefix="bench-audit-warmup-") as out:
            started = time.monotonic()
            run_audit(spark, KafkaSource(bootstrap, warm_topic), out)
            print(f"warm-up audit of {warmup:,} events: {time.monotonic() - started:.1f}s")
        load_before = os.getloadavg()[0]
        for _ in range(rounds):
            started = time.monotonic()
            counted = read_log(spark, source).count()
            counts.append(time.monotonic() - started)
            floors.append(_floors(spark, source, schemas))
            with tempfile.TemporaryDirectory(prefix="bench-audit-") as out:
                started = time.monotonic()
                summary = run_audit(spark, source, out)
                audits.append(time.monotonic() - started)
            print(
                f"  round: read+count {counts[-1]:.2f}s, read+decode {floors[-1][0]:.2f}s, "
                f"read+decode+write {floors[-1][1]:.2f}s, audit {audits[-1]:.2f}s",
                flush=True,
            )
        load_after = os.getloadavg()[0]
    finally:
        spark.stop()
    if counted != n or summary.records != n:
        raise RuntimeError(
            f"expected {n} records, Spark counted {counted}, audited {summary.records}"
        )
    count_s, audit_s = min(counts), min(audits)
    pairs = tuple(zip(counts, audits, strict=True))
    decode_s, write_s = min(f[0] for f in floors), min(f[1] for f in floors)
    result = BenchResult(
        n, produce_s, count_s, audit_s, pairs, load_before, load_after, decode_s, write_s
    )
    print(f"spark read+count : {count_s:8.2f}s  ({n / count_s:,.0f} records/s, best of {rounds})")
    print(f"spark audit      : {audit_s:8.2f}s  ({n / audit_s:,.0f} records/s, best of {rounds})")
    print(f"audit / count    : {result.ratio:8.2f}x  (target <= 3x)")
    print(f"floors / count   : read+decode {decode_s / count_s:.2f}x, read+decode+write "
          f"{write_s / count_s:.2f}x (no diffs, anomalies or report)")
    cores = os.cpu_count()
    print(f"load average     : {load_before:.1f} before, {load_after:.1f} after ({cores} cores)")
    return result.as_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get(BOOTSTRAP_ENV_VAR, DEFAULT_BOOTSTRAP_SERVERS),
    )
    parser.add_argument("-n", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    run(args.bootstrap_servers, args.n, master=args.master, warmup=args.warmup, rounds=args.rounds)


if __name__ == "__main__":
    main()
