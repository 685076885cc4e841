"""The Kafka reachability signal on the in-memory twin: explicit states, hysteresis both
ways, and the twin's broker taken down and back (the real broker's side is
tests/integration/broker_shim/test_kafka_unreachable.py)."""

from __future__ import annotations

import pytest

from sync.errors import ConfigurationError
from sync.transport import (
    MemoryTransport,
    Reachability,
    ReachabilityConfig,
    ReachabilityMonitor,
    ReachabilityStatus,
)
from tests.support.waits import wait_for

CONFIG = ReachabilityConfig(
    interval_s=0.01, probe_timeout_s=0.5, failures_to_unreachable=3, successes_to_reachable=2
)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _monitor(clock: _Clock) -> ReachabilityMonitor:
    def never_called(timeout_s: float) -> None:
        raise AssertionError("observe() only")

    return ReachabilityMonitor(never_called, CONFIG, clock=clock)


def test_hysteresis_down_and_up() -> None:
    clock = _Clock()
    m = _monitor(clock)
    assert m.status().state is Reachability.UNKNOWN
    m.observe(None)
    assert m.status().state is Reachability.UNKNOWN  # one answer is not yet a verdict
    clock.now = 1001.0
    assert m.observe(None).state is Reachability.REACHABLE
    assert m.status().since == 1001.0
    # One, then two slow probes: still REACHABLE; an answer resets the count.
    clock.now = 1002.0
    m.observe("timed out")
    m.observe("timed out")
    assert m.status().state is Reachability.REACHABLE
    m.observe(None)
    m.observe("timed out")
    m.observe("timed out")
    assert m.status().state is Reachability.REACHABLE
    assert m.status().last_error == "timed out"
    assert m.status().since == 1001.0
    clock.now = 1003.0
    down = m.observe("all brokers down")
    assert down == ReachabilityStatus(Reachability.UNREACHABLE, 1003.0, "all brokers down", 3, 0)
    # Back: one answer between failures does not make it REACHABLE.
    clock.now = 1004.0
    m.observe(None)
    m.observe("refused")
    m.observe(None)
    assert m.status().state is Reachability.UNREACHABLE
    assert m.status().since == 1003.0
    clock.now = 1005.0
    up = m.observe(None)
    assert (up.state, up.since, up.last_error) == (Reachability.REACHABLE, 1005.0, "refused")


def test_unknown_to_unreachable_when_started_during_an_outage() -> None:
    m = _monitor(_Clock())
    for _ in range(3):
        m.observe("down")
    assert m.status().state is Reachability.UNREACHABLE


def test_listeners_are_told_each_move_once() -> None:
    m = _monitor(_Clock())
    seen: list[Reachability] = []
    m.on_change(lambda s: seen.append(s.state))

    def failing(_status: ReachabilityStatus) -> None:
        raise RuntimeError("a broken listener does not stop the others")

    m.on_change(failing)
    for outcome in [None, None, None, "x", "x", "x", "x", None, None, None]:
        m.observe(outcome)
    assert seen == [Reachability.REACHABLE, Reachability.UNREACHABLE, Reachability.REACHABLE]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"interval_s": 0},
        {"probe_timeout_s": -1},
        {"failures_to_unreachable": 0},
        {"successes_to_reachable": 0},
    ],
)
def test_bad_config_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        ReachabilityConfig(**kwargs)  # type: ignore[arg-type]


def test_the_twin_broker_down_and_back_probe_by_probe() -> None:
    transport = MemoryTransport()
    m = transport.reachability(CONFIG)
    m.probe_once()
    m.probe_once()
    assert m.status().state is Reachability.REACHABLE
    transport.broker.set_available(False)
    m.probe_once()
    m.probe_once()
    assert m.status().state is Reachability.REACHABLE
    status = m.probe_once()
    assert status.state is Reachability.UNREACHABLE
    assert status.last_error is not None and "unavailable" in status.last_error
    transport.broker.set_available(True)
    m.probe_once()
    assert m.probe_once().state is Reachability.REACHABLE


def test_the_probing_thread_follows_the_twin_broker() -> None:
    transport = MemoryTransport()
    m = transport.reachability(CONFIG).start()
    try:
        wait_for(lambda: m.status().state is Reachability.REACHABLE, "REACHABLE", timeout_s=30)
        transport.broker.set_available(False)
        wait_for(lambda: m.status().state is Reachability.UNREACHABLE, "UNREACHABLE", timeout_s=30)
        transport.broker.set_available(True)
        wait_for(
            lambda: m.status().state is Reachability.REACHABLE, "REACHABLE again", timeout_s=30
        )
    finally:
        m.close()
