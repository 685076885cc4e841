"""/health while Kafka is unreachable, on the in-memory twin: 503 with ``"kafka":
"UNREACHABLE"`` (since when, last error) during the outage, 200 again once Kafka answers
and the policy cache has caught up (on real Kafka:
tests/integration/broker_shim/test_kafka_unreachable.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from broker_shim._kafka_readiness import KafkaReadiness
from broker_shim._sidecar import Sidecar, SidecarConfig
from sync import CacheState, PolicyService
from sync.transport import (
    MemoryTransport,
    Reachability,
    ReachabilityConfig,
    ReachabilityMonitor,
)
from tests.support.apps import app_client
from tests.support.waits import eventually

FAST = ReachabilityConfig(
    interval_s=0.02, probe_timeout_s=0.5, failures_to_unreachable=3, successes_to_reachable=2
)


def test_health_is_503_while_kafka_is_unreachable_and_200_once_back() -> None:
    transport = MemoryTransport()
    sidecar = Sidecar(
        SidecarConfig(
            broker_id="b0",
            http_port=8080,
            bootstrap_servers="unused:9092",
            topic="__change_events.reachability",
            restart_backoff_s=0.05,
            reachability=FAST,
        ),
        transport=transport,
    )

    async def main() -> None:
        async with app_client(sidecar) as client:
            seen: list[tuple[int, dict[str, Any]]] = []

            async def health_is(status: int, kafka: str) -> bool:
                resp = await client.get("/health")
                body = await resp.json()
                seen[:] = [(resp.status, body)]
                return resp.status == status and body.get("kafka") == kafka

            await eventually(
                lambda: health_is(200, "REACHABLE"), lambda: f"/health 200 REACHABLE: {seen}"
            )
            transport.broker.set_available(False)
            try:
                await eventually(
                    lambda: health_is(503, "UNREACHABLE"),
                    lambda: f"/health 503 UNREACHABLE: {seen}",
                )
                body = seen[0][1]
                assert "unavailable" in body["kafkaLastError"], body
                assert body["kafkaSince"].endswith("+00:00"), body
                # Every field /health had before is still there.
                assert {"state", "brokerId", "writer"} <= body.keys(), body
            finally:
                transport.broker.set_available(True)
            await eventually(
                lambda: health_is(200, "REACHABLE"), lambda: f"/health 200 again: {seen}"
            )

    asyncio.run(main())


@dataclass
class _Cache:
    """What KafkaReadiness asks of a policy cache."""

    ends: dict[int, int]
    applied: dict[int, int] = field(default_factory=dict)
    state: CacheState = CacheState.READY

    def end_offsets(self) -> dict[int, int]:
        return dict(self.ends)

    def positions(self) -> dict[int, int]:
        return dict(self.applied)

    def reached(self, positions: dict[int, int]) -> bool:
        return all(self.applied.get(p, -1) >= o for p, o in positions.items())


@dataclass
class _Service:
    cache: _Cache


def _never(timeout_s: float) -> None:
    raise AssertionError("driven by observe()")


def test_back_from_an_outage_waits_for_the_cache_to_catch_up() -> None:
    """Another client wrote while only this sidecar was cut off: ready again only once the
    cache has applied up to the end offsets read when Kafka answered again."""
    monitor = ReachabilityMonitor(_never, FAST)
    cache = _Cache(ends={0: 10, 1: 4}, applied={0: 10, 1: 4})
    service = _Service(cache)
    readiness = KafkaReadiness(monitor, lambda: cast(PolicyService, service))
    for _ in range(2):
        monitor.observe(None)
    assert readiness.report()[0]
    for _ in range(3):
        monitor.observe("Kafka down")
    ok, fields = readiness.report()
    assert not ok and fields["kafka"] == "UNREACHABLE" and fields["kafkaLastError"] == "Kafka down"
    cache.ends = {0: 15, 1: 4}  # written meanwhile by a sidecar that could reach Kafka
    for _ in range(2):
        monitor.observe(None)
    assert monitor.status().state is Reachability.REACHABLE
    ok, fields = readiness.report()
    assert not ok and fields["kafka"] == "REACHABLE", fields
    assert fields["kafkaCatchUp"] == {"positions": {"0": 10, "1": 4}, "target": {"0": 15, "1": 4}}
    cache.applied = {0: 15, 1: 4}
    assert readiness.report() == (True, {k: fields[k] for k in fields if k != "kafkaCatchUp"})


def test_a_cache_replaced_during_the_outage_needs_no_catch_up() -> None:
    monitor = ReachabilityMonitor(_never, FAST)
    service = _Service(_Cache(ends={0: 3}, applied={0: 3}))
    readiness = KafkaReadiness(monitor, lambda: cast(PolicyService, service))
    for outcome in [None, None, "x", "x", "x"]:
        monitor.observe(outcome)
    service.cache = _Cache(ends={0: 3}, state=CacheState.BOOTSTRAPPING)
    monitor.observe(None)
    monitor.observe(None)
    assert readiness.report()[0]  # the cache's own state gates readiness now


def test_end_offsets_unread_after_the_outage_do_not_wedge_readiness() -> None:
    class _Failing(_Cache):
        def end_offsets(self) -> dict[int, int]:
            raise RuntimeError("Kafka flapped")

    monitor = ReachabilityMonitor(_never, FAST)
    service = _Service(_Failing(ends={0: 3}, applied={0: 1}))
    readiness = KafkaReadiness(monitor, lambda: cast(PolicyService, service))
    for outcome in [None, None, "x", "x", "x", None, None]:
        monitor.observe(outcome)
    assert readiness.report()[0]
