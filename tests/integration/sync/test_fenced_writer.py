"""Group commit of the fenced writer, on the in-memory twin and real Kafka alike.

Each test holds the writer thread inside a decision (an update function waiting on an
event) so that the writes queued meanwhile go out together in the next transaction:
batching is forced, never left to timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sync import (
    CacheConfig,
    InvalidPolicyError,
    NotFoundError,
    Policies,
    PolicyCache,
    PolicyService,
    PolicyTarget,
    ServiceConfig,
    WriteResult,
)
from sync.transport import Transport
from tests.support.waits import wait_for

ORDERS = PolicyTarget.parse("persistent://acme/ops/orders")
LIVENESS_S = 60.0


@pytest.fixture
def topic(unique_name: Callable[[str], str]) -> str:
    return unique_name("fw")


@pytest.fixture
def services(transport: Transport, topic: str) -> Iterator[Callable[[], PolicyService]]:
    started: list[PolicyService] = []

    def make() -> PolicyService:
        svc = PolicyService(transport, ServiceConfig(cache=CacheConfig(topic=topic)))
        started.append(svc.start(timeout_s=60))
        return svc

    yield make
    for svc in started:
        svc.close()


class _Gate:
    """An update function that blocks the writer thread until opened (first call only)."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.calls = 0
        self.fields = fields

    def __call__(self, current: Policies | None) -> Policies | None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.opened.wait(LIVENESS_S)
        return (current or Policies()).merged(self.fields)


def _in_thread(fn: Callable[[], WriteResult]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _queued(svc: PolicyService, n: int) -> None:
    wait_for(
        lambda: svc.writer.fence.queued == n,
        f"{n} writes queued",
        timeout_s=LIVENESS_S,
        interval_s=0.005,
    )


def _merge(field: str, value: int) -> Callable[[Policies | None], Policies | None]:
    return lambda current: (current or Policies()).merged({field: value})


def _writes(
    svc: PolicyService, target: PolicyTarget, field: str, value: int
) -> Callable[[], WriteResult]:
    return lambda: svc.writer.update(target, _merge(field, value))


def _fresh(transport: Transport, topic: str) -> PolicyCache:
    return PolicyCache(transport, config=CacheConfig(topic=topic, dead_letter=False)).start()


FIELDS = [
    "maxProducerPerTopic",
    "maxConsumerPerTopic",
    "maxSubscriptionsPerTopic",
    "maxUnackedMessagesOnConsumer",
    "maxUnackedMessagesOnSubscription",
]


def test_conflicting_writes_to_one_key_share_a_transaction_and_lose_nothing(
    services: Callable[[], PolicyService], transport: Transport, topic: str
) -> None:
    svc = services()
    gate = _Gate({"messageTTLInSeconds": 60})
    first, first_out = _in_thread(lambda: svc.writer.update(ORDERS, gate))
    assert gate.entered.wait(LIVENESS_S)
    # While the first transaction is held, five writers queue updates of the same key.
    threads = [_in_thread(_writes(svc, ORDERS, f, i + 1)) for i, f in enumerate(FIELDS)]
    _queued(svc, len(FIELDS))
    before = svc.writer.fence.transactions
    gate.opened.set()
    for thread, _ in [(first, first_out), *threads]:
        thread.join(LIVENESS_S)
    results = [out[0] for _, out in threads]
    assert all(isinstance(r, WriteResult) for r in results), results
    # One transaction for the held write, one for the five queued ones.
    assert svc.writer.fence.transactions - before == 2
    assert svc.writer.fence.batched_writes >= len(FIELDS)
    # Each caller got its own record, decided on top of the ones before it.
    offsets = [r.offset for r in results]
    assert len(set(offsets)) == len(FIELDS)
    seen: set[str] = {"messageTTLInSeconds"}
    for r in sorted(results, key=lambda r: r.offset or 0):
        assert r.changed and r.policies is not None
        names = set(r.policies)
        assert names >= seen  # every earlier decision of the batch is in this one
        seen = names
    # Read-your-writes: each caller's record is applied when its call returns.
    final = Policies({"messageTTLInSeconds": 60} | {f: i + 1 for i, f in enumerate(FIELDS)})
    assert svc.get(ORDERS) == final
    fresh = _fresh(transport, topic)
    try:
        fresh.wait_ready(60)
        assert fresh.get(ORDERS.key) == final
        assert fresh.digest() == svc.cache.digest()
    finally:
        fresh.close()


def test_a_refused_write_in_a_batch_does_not_fail_the_others(
    services: Callable[[], PolicyService], transport: Transport, topic: str
) -> None:
    svc = services()
    gate = _Gate({"messageTTLInSeconds": 60})
    held, _ = _in_thread(lambda: svc.writer.update(ORDERS, gate))
    assert gate.entered.wait(LIVENESS_S)

    def refuse(_current: Policies | None) -> Policies | None:
        raise InvalidPolicyError("maxProducerPerTopic must be >= 0")

    other = PolicyTarget.parse("persistent://acme/ops/other")
    ok1, out1 = _in_thread(lambda: svc.writer.update(ORDERS, _merge("maxConsumerPerTopic", 3)))
    _queued(svc, 1)
    bad, bad_out = _in_thread(lambda: svc.writer.update(ORDERS, refuse))
    _queued(svc, 2)
    gone, gone_out = _in_thread(lambda: svc.delete(other))  # nothing there: NotFound
    _queued(svc, 3)
    ok2, out2 = _in_thread(lambda: svc.writer.update(other, _merge("maxProducerPerTopic", 7)))
    _queued(svc, 4)
    before = svc.writer.fence.transactions
    gate.opened.set()
    for thread in (held, ok1, bad, gone, ok2):
        thread.join(LIVENESS_S)
    assert isinstance(bad_out[0], InvalidPolicyError)
    assert isinstance(gone_out[0], NotFoundError)
    assert isinstance(out1[0], WriteResult) and out1[0].changed
    assert isinstance(out2[0], WriteResult) and out2[0].changed
    assert svc.writer.fence.transactions - before == 2
    assert svc.get(ORDERS) == Policies({"messageTTLInSeconds": 60, "maxConsumerPerTopic": 3})
    assert svc.get(other) == Policies({"maxProducerPerTopic": 7})
    # The refused writes left nothing in the log: a fresh replay holds exactly this.
    fresh = _fresh(transport, topic)
    try:
        fresh.wait_ready(60)
        assert fresh.digest() == svc.cache.digest()
        assert len(fresh) == 2
    finally:
        fresh.close()


def test_fence_lost_mid_batch_decides_the_whole_batch_again(
    services: Callable[[], PolicyService], transport: Transport, topic: str
) -> None:
    svc, rival = services(), services()
    first = _Gate({"messageTTLInSeconds": 60})
    held, _ = _in_thread(lambda: svc.writer.update(ORDERS, first))
    assert first.entered.wait(LIVENESS_S)
    # The next batch: a write that holds the writer inside its decision, and three more.
    second = _Gate({"maxConsumerPerTopic": 1})
    g, g_out = _in_thread(lambda: svc.writer.update(ORDERS, second))
    _queued(svc, 1)
    queued = [_in_thread(_writes(svc, ORDERS, f, 9)) for f in FIELDS[2:]]
    _queued(svc, 1 + len(queued))
    first.opened.set()
    held.join(LIVENESS_S)
    assert second.entered.wait(LIVENESS_S)
    # Mid-batch (decided, not committed), another writer takes the fence and commits.
    rival.writer.update(ORDERS, _merge("maxProducerPerTopic", 5))
    retries = svc.writer.fenced_retries
    second.opened.set()
    for thread, _ in [(g, g_out), *queued]:
        thread.join(LIVENESS_S)
    assert all(isinstance(out[0], WriteResult) for _, out in [(g, g_out), *queued])
    assert svc.writer.fenced_retries > retries
    assert second.calls == 2  # decided again on the fresh view after the fence was lost
    final = Policies(
        {"messageTTLInSeconds": 60, "maxConsumerPerTopic": 1, "maxProducerPerTopic": 5}
        | dict.fromkeys(FIELDS[2:], 9)
    )
    assert svc.get(ORDERS) == final
    rival.cache.sync(30)
    assert rival.get(ORDERS) == final
    fresh = _fresh(transport, topic)
    try:
        fresh.wait_ready(60)
        assert fresh.get(ORDERS.key) == final
    finally:
        fresh.close()


def test_a_log_behind_at_the_fence_is_retried_not_failed(
    services: Callable[[], PolicyService],
) -> None:
    """Taking the fence re-syncs the log; a reader still behind (BootstrapTimeout, as the
    chaos soak saw under a broker restart) is retried within the write's deadline, not
    failed as an 'unexpected failure'."""
    from sync.errors import BootstrapTimeout

    svc = services()
    real = svc.cache.sync
    calls: list[float] = []

    def behind_once(timeout_s: float = 30.0) -> None:
        calls.append(timeout_s)
        if len(calls) == 1:
            raise BootstrapTimeout("policy cache did not reach {0: 9} within 7.0s (test)")
        real(timeout_s)

    svc.cache.sync = behind_once  # type: ignore[method-assign]
    svc.set(ORDERS, {"maxConsumerPerTopic": 3})
    assert len(calls) >= 2
    got = svc.get(ORDERS)
    assert got is not None and got["maxConsumerPerTopic"] == 3
