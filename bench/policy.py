"""Issue 3 benchmarks: propagation, cold bootstrap (1M policies), RSS, policyctl import.

Every figure is measured side by side with raw confluent-kafka in the same run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from sync import (
    CacheConfig,
    Codec,
    Listener,
    Policies,
    PolicyCache,
    PolicyService,
    PolicyTarget,
    ServiceConfig,
)
from sync.constants import CHANGE_EVENTS_CREATE_CONFIG
from sync.transport import KafkaConfig, KafkaTransport, TopicSpec

CACHES = 4


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _raw_consumer(bootstrap: str, committed: bool) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "fetch.wait.max.ms": 10,
            "auto.offset.reset": "latest",
        }
    )


def _raw_propagation(bootstrap: str, n: int, transactional: bool) -> list[float]:
    """Raw produce -> seen by CACHES tailing consumers; seconds per record."""
    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    KafkaTransport(KafkaConfig(bootstrap)).admin().ensure_topic(
        TopicSpec(topic, 4, config=CHANGE_EVENTS_CREATE_CONFIG)
    )
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,
        "partitioner": "murmur2_random",
    }
    if transactional:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex}"
    producer = Producer(conf)
    if transactional:
        producer.init_transactions(30)
    seen: list[dict[bytes, float]] = [{} for _ in range(CACHES)]
    stop = threading.Event()
    ready = threading.Barrier(CACHES + 1)

    def tail(i: int) -> None:
        c = _raw_consumer(bootstrap, transactional)
        c.assign([TopicPartition(topic, p, -1) for p in range(4)])  # OFFSET_END
        c.poll(0.5)
        ready.wait()
        while not stop.is_set():
            m = c.poll(0.05)
            key = None if m is None or m.error() is not None else m.key()
            if key is not None:
                seen[i][key] = time.perf_counter()
        c.close()

    threads = [threading.Thread(target=tail, args=(i,)) for i in range(CACHES)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(0.5)
    value = b"x" * 120
    latencies = []
    for i in range(n):
        key = f"persistent://bench/ns/t{i}".encode()
        t0 = time.perf_counter()
        if transactional:
            producer.begin_transaction()
            producer.produce(topic, value, key)
            producer.commit_transaction(30)
        else:
            producer.produce(topic, value, key)
            producer.flush(30)
        deadline = time.perf_counter() + 10
        while not all(key in s for s in seen) and time.perf_counter() < deadline:
            time.sleep(0.0002)
        latencies.append(max(s.get(key, deadline) for s in seen) - t0)
    stop.set()
    for t in threads:
        t.join()
    return latencies


def _stamp(marks: dict[str, float]) -> Listener:
    def listener(key: str, _value: Policies | None) -> None:
        marks[key] = time.perf_counter()

    return listener


def _policy_propagation(bootstrap: str, n: int) -> list[float]:
    """PolicyService.set -> applied in CACHES other caches; seconds per write."""
    topic = f"bench-ce-{uuid.uuid4().hex[:8]}"
    config = ServiceConfig(cache=CacheConfig(topic=topic))
    writer = PolicyService(KafkaTransport(KafkaConfig(bootstrap)), config).start()
    caches = [
        PolicyCache(KafkaTransport(KafkaConfig(bootstrap)), config=CacheConfig(topic=topic)).start()
        for _ in range(CACHES)
    ]
    seen: list[dict[str, float]] = [{} for _ in range(CACHES)]
    for cache, marks in zip(caches, seen, strict=True):
        cache.wait_ready(60)
        cache.add_listener(_stamp(marks))
    latencies = []
    for i in range(n):
        target = PolicyTarget.parse(f"persistent://bench/ns/t{i}")
        t0 = time.perf_counter()
        writer.set(target, {"maxConsumerPerTopic": i})
        deadline = time.perf_counter() + 10
        while not all(target.key in s for s in seen) and time.perf_counter() < deadline:
            time.sleep(0.0002)
        latencies.append(max(s.get(target.key, deadline) for s in seen) - t0)
    for cache in caches:
        cache.close()
    writer.close()
    return latencies


def propagation(bootstrap: str, n: int = 300) -> dict[str, Any]:
    raw = _raw_propagation(bootstrap, n, transactional=False)
    raw_txn = _raw_propagation(bootstrap, n, transactional=True)
    ours = _policy_propagation(bootstrap, n)
    out: dict[str, Any] = {}
    for name, lat in (("raw", raw), ("raw_txn", raw_txn), ("policy_sync", ours)):
        out[name] = {"p50_ms": statistics.median(lat) * 1000, "p99_ms": _pct(lat, 0.99) * 1000}
    for base in ("raw", "raw_txn"):
        out[f"ratio_vs_{base}"] = {
            "p50": out["policy_sync"]["p50_ms"] / out[base]["p50_ms"],
            "p99": out["policy_sync"]["p99_ms"] / out[base]["p99_ms"],
        }
    return out


def seed_policies(bootstrap: str, topic: str, n: int) -> None:
    """Write n distinct, valid policy records fast (raw producer, real encoded events)."""
    transport = KafkaTransport(KafkaConfig(bootstrap))
    transport.admin().ensure_topic(CacheConfig(topic=topic).topic_spec())
    codec = Codec()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    for i in range(n):
        tenant, ns, name = f"tenant-{i % 50}", f"ns-{i % 7}", f"topic-{i}"
        event = {
            "eventType": "TOPIC_POLICY",
            "actionType": "INSERT",
            "topicPoliciesEvent": {
                "domain": "persistent",
                "tenant": tenant,
                "namespace": ns,
                "topic": name,
                "policies": {"isGlobal": False, "maxConsumerPerTopic": i % 100},
            },
            "replicateTo": ["standalone"],
            "metadata": {
                "eventId": str(uuid.uuid4()),
                "author": "bench",
                "timestampMillis": int(time.time() * 1000),
                "origin": "bench",
            },
        }
        key = f"persistent://{tenant}/{ns}/{name}".encode()
        while True:
            try:
                producer.produce(topic, codec.encode(event), key)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)


def _child(mode: str, bootstrap: str, topic: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench._bootstrap_child", mode, bootstrap, topic],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def bootstrap(bootstrap_servers: str, n: int = 1_000_000) -> dict[str, Any]:
    topic = f"bench-boot-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    seed_policies(bootstrap_servers, topic, n)
    seeded = time.perf_counter() - t0
    # Alternate the runs so neither side always gets the warm page cache.
    raw1 = _child("raw", bootstrap_servers, topic)
    ours1 = _child("cache", bootstrap_servers, topic)
    raw2 = _child("raw", bootstrap_servers, topic)
    ours2 = _child("cache", bootstrap_servers, topic)
    raw_s = min(raw1["seconds"], raw2["seconds"])
    ours_s = min(ours1["seconds"], ours2["seconds"])
    return {
        "policies": n,
        "seed_seconds": seeded,
        "raw_consume_seconds": raw_s,
        "raw_records_per_s": n / raw_s,
        "cache_ready_seconds": ours_s,
        "cache_records_per_s": n / ours_s,
        "throughput_ratio": raw_s / ours_s,
        "cache_size": ours1["size"],
        "cache_rss_growth_mb": max(ours1["rss_growth_mb"], ours2["rss_growth_mb"]),
        "raw_rss_growth_mb": max(raw1["rss_growth_mb"], raw2["rss_growth_mb"]),
    }


def policyctl_import(bootstrap_servers: str, n: int = 200_000) -> dict[str, Any]:
    topic = f"bench-import-{uuid.uuid4().hex[:8]}"
    with tempfile.NamedTemporaryFile("w", suffix=".ndjson", delete=False) as fh:
        for i in range(n):
            fh.write(
                json.dumps(
                    {
                        "target": f"persistent://tenant-{i % 50}/ns-{i % 7}/topic-{i}",
                        "policies": {"maxConsumerPerTopic": i % 100, "messageTTLInSeconds": 60},
                    }
                )
                + "\n"
            )
        path = fh.name
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap_servers)
    cli = str(Path(sys.executable).parent / "policyctl")
    t0 = time.perf_counter()
    out = subprocess.run(
        [cli, "--topic", topic, "import", path], capture_output=True, text=True, env=env
    )
    elapsed = time.perf_counter() - t0
    os.unlink(path)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return {"updates": n, "seconds": elapsed, "updates_per_s": n / elapsed}


def run(bootstrap_servers: str, *, policies: int = 1_000_000) -> dict[str, Any]:
    return {
        "propagation": propagation(bootstrap_servers),
        "bootstrap": bootstrap(bootstrap_servers, policies),
        "import": policyctl_import(bootstrap_servers),
    }
