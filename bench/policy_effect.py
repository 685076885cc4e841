"""Issue 15: time from a policy write to its effect, observed from outside the sidecar.

The writer is a PolicyService in this process (what ``policyctl`` and the REST API use);
the effect is observed on a separate ``broker-shim run`` process:

* ``kafka_config``: ``retentionPolicies`` written → the Kafka topic's ``retention.ms``
  changed by the owner's reconciler (polled with the admin API every 2 ms);
* ``data_path``: ``delayedDeliveryMaxDelayInMillis`` written (then removed) → a WebSocket
  send delayed by 11 days is refused (then accepted) by the sidecar (probed back to back).

The propagation of a write to a cache (``policy.propagation``) is the floor of both.

``compaction``: what one compaction costs (``compactionThreshold`` / ``topics compact``;
its effect waits for the owner's check, every 60 s as Pulsar's): N keyed records over K
keys compacted into the companion topic (measure the bytes since the horizon, read and
write in one transaction, re-read the view), beside a raw confluent-kafka read of the
same N records.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from typing import Any

import websockets

from sync import PolicyService, PolicyTarget, ServiceConfig, TopicName, kafka_topic_of
from sync.messaging import CompactedView, Compactor, compacted_topic_of
from sync.transport import KafkaConfig, KafkaTransport, TopicSpec

from .messaging import _sidecar

_FAR_MS = 11 * 24 * 3600 * 1000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(_pct(values, 0.5) * 1000, 1),
        "p99_ms": round(_pct(values, 0.99) * 1000, 1),
    }


def _kafka_config(svc: PolicyService, bootstrap: str, topic: TopicName, n: int) -> list[float]:
    admin = KafkaTransport(KafkaConfig(bootstrap)).admin()
    kafka_topic = kafka_topic_of(topic)
    target = PolicyTarget.for_topic(topic)
    out = []
    for i in range(n):
        minutes = 10 + i + int(time.time()) % 100_000 * 100  # never the current value
        start = time.monotonic()
        svc.set(target, {"retentionPolicies": {"retentionTimeInMinutes": minutes,
                                               "retentionSizeInMB": 1}})  # fmt: skip
        want = str(minutes * 60_000)
        deadline = start + 60
        while (admin.topic_overrides(kafka_topic) or {}).get("retention.ms") != want:
            if time.monotonic() > deadline:
                raise RuntimeError("retention never reached the Kafka topic config")
            time.sleep(0.002)
        out.append(time.monotonic() - start)
    return out


async def _data_path(svc: PolicyService, ws_url: str, topic: TopicName, n: int) -> list[float]:
    target = PolicyTarget.for_topic(topic)
    url = f"{ws_url}/producer/persistent/{topic.tenant}/{topic.namespace}/{topic.local_name}"
    payload = base64.b64encode(b"probe").decode()
    out = []
    async with websockets.connect(url, open_timeout=30) as prod:

        async def refused() -> bool:
            at = int(time.time() * 1000) + _FAR_MS
            await prod.send(json.dumps({"payload": payload, "deliverAt": at}))
            answer: dict[str, Any] = json.loads(await prod.recv())
            return bool(answer["result"] != "ok")

        for i in range(n):
            value = None if i % 2 else 60_000
            start = time.monotonic()
            await asyncio.to_thread(svc.set, target, {"delayedDeliveryMaxDelayInMillis": value})
            deadline = start + 60
            while await refused() != (value is not None):
                if time.monotonic() > deadline:
                    raise RuntimeError("the max delivery delay never took effect")
            out.append(time.monotonic() - start)
    return out


def _compaction(bootstrap: str, records: int = 50_000, keys: int = 1_000) -> dict[str, Any]:
    transport = KafkaTransport(KafkaConfig(bootstrap))
    admin = transport.admin()
    kafka_topic = f"p.public.default.pc{uuid.uuid4().hex[:10]}"
    admin.ensure_topic(TopicSpec(kafka_topic, 1))
    producer = transport.producer(linger_ms=5)
    try:
        for i in range(records):
            producer.produce(kafka_topic, f"k{i % keys}".encode(), b"x" * 100, partition=0)
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush(60)
    finally:
        producer.close()
    try:
        consumer = transport.consumer(read_committed=True)
        t0 = time.monotonic()
        consumer.assign(kafka_topic, {0: 0})
        seen = 0
        while seen < records:
            seen += len(consumer.consume(1000, 0.2))
        raw_s = time.monotonic() - t0
        consumer.close()
        compactor = Compactor(kafka_topic)
        t0 = time.monotonic()
        size = compactor.bytes_since_horizon(transport, admin, 1)[0]
        t1 = time.monotonic()
        compactor.compact(transport, admin, 1)
        t2 = time.monotonic()
        view = CompactedView(kafka_topic)
        view.refresh(transport, admin)
        t3 = time.monotonic()
        return {
            "records": records,
            "keys": keys,
            "bytes": size,
            "raw_confluent_kafka_read_s": round(raw_s, 3),
            "measure_bytes_since_horizon_s": round(t1 - t0, 3),
            "compact_s": round(t2 - t1, 3),
            "read_compacted_view_s": round(t3 - t2, 3),
            "view_records": len(view.records_from(0, 0)),
        }
    finally:
        admin.delete_topic(kafka_topic)
        if admin.describe_topic(compacted_topic_of(kafka_topic)) is not None:
            admin.delete_topic(compacted_topic_of(kafka_topic))


def run(bootstrap: str, *, n: int = 40) -> dict[str, Any]:
    """Write → effect latencies (p50/p99) on one sidecar process."""
    name = f"pe{uuid.uuid4().hex[:10]}"
    topic = TopicName.parse(f"persistent://public/default/{name}")
    KafkaTransport(KafkaConfig(bootstrap)).admin().ensure_topic(TopicSpec(kafka_topic_of(topic), 1))
    svc = PolicyService(KafkaTransport(KafkaConfig(bootstrap)), ServiceConfig()).start()
    try:
        with _sidecar(bootstrap) as ws_url:
            # The first write also waits for the sidecar's ownership service to be ready:
            # reported on its own, not in the steady-state percentiles.
            first = _kafka_config(svc, bootstrap, topic, 1)[0]
            kafka = _kafka_config(svc, bootstrap, topic, n)
            data = asyncio.run(_data_path(svc, ws_url, topic, n))
    finally:
        svc.close()
    return {
        "write_to_kafka_topic_config": _summary(kafka),
        "first_write_to_kafka_topic_config_ms": round(first * 1000, 1),
        "write_to_data_path": _summary(data),
        "compaction": _compaction(bootstrap),
        "note": "compare with policy.propagation (write -> every cache)",
    }
