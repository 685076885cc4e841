"""Issue 15: time from a policy write to its effect, observed from outside the sidecar.

The writer is a PolicyService in this process (what ``policyctl`` and the REST API use);
the effect is observed on a separate ``broker-shim run`` process:

* ``kafka_config``: ``retentionPolicies`` written → the Kafka topic's ``retention.ms``
  changed by the owner's reconciler (polled with the admin API every 2 ms);
* ``data_path``: ``delayedDeliveryMaxDelayInMillis`` written (then removed) → a WebSocket
  send delayed by 11 days is refused (then accepted) by the sidecar (probed back to back).

The propagation of a write to a cache (``policy.propagation``) is the floor of both.
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
        "note": "compare with policy.propagation (write -> every cache)",
    }
