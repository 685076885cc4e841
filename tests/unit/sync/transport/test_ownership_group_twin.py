"""The in-memory twin of Kafka's consumer-group protocol, as ownership relies on it.

The same behaviours are checked against a real broker in
``tests/integration/sync/transport/test_ownership_group_contract.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from sync._errors import GroupFencedError
from sync.transport import OFFSET_INVALID, GroupConsumer, MemoryTransport, TopicSpec
from sync.transport._memory_group import sticky_assignment


class Recorder:
    """A RebalanceListener that remembers what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[int, ...]]] = []
        self.owned: set[int] = set()

    def on_assign(self, partitions: Sequence[int]) -> None:
        self.events.append(("assign", tuple(partitions)))
        self.owned.update(partitions)

    def on_revoke(self, partitions: Sequence[int]) -> None:
        self.events.append(("revoke", tuple(partitions)))
        self.owned.difference_update(partitions)

    def on_lost(self, partitions: Sequence[int]) -> None:
        self.events.append(("lost", tuple(partitions)))
        self.owned.difference_update(partitions)


def _pump(*members: GroupConsumer, rounds: int = 20) -> None:
    for _ in range(rounds):
        for member in members:
            member.consume(10, 0.0)


@pytest.fixture
def transport() -> MemoryTransport:
    t = MemoryTransport()
    t.admin().ensure_topic(TopicSpec("slots", 6))
    return t


def test_sticky_assignment_is_balanced_and_keeps_owners() -> None:
    target = sticky_assignment({"a": set(range(6)), "b": set()}, 6)
    assert sorted(map(len, target.values())) == [3, 3]
    assert target["a"] <= set(range(6)) and target["a"] | target["b"] == set(range(6))
    again = sticky_assignment({"a": target["a"], "b": target["b"], "c": set()}, 6)
    assert sorted(map(len, again.values())) == [2, 2, 2]
    assert again["a"] <= target["a"] and again["b"] <= target["b"]


def test_cooperative_rebalance_revokes_only_what_moves(transport: MemoryTransport) -> None:
    a, ra = transport.group_consumer("g", client_id="a"), Recorder()
    a.subscribe("slots", ra)
    _pump(a)
    assert ra.owned == set(range(6))
    gen_before = a.generation()
    b, rb = transport.group_consumer("g", client_id="b"), Recorder()
    b.subscribe("slots", rb)
    _pump(a, b)
    assert len(ra.owned) == 3 and len(rb.owned) == 3 and not ra.owned & rb.owned
    revoked = [p for kind, ps in ra.events if kind == "revoke" for p in ps]
    assert sorted(revoked) == sorted(rb.owned)  # a gave up exactly what b got
    assert a.generation() > gen_before
    description = transport.admin().describe_group("g")
    assert description.state == "Stable"
    assert {m.client_id for m in description.members} == {"a", "b"}


def test_stale_generation_cannot_commit_and_its_writes_stay_invisible(
    transport: MemoryTransport,
) -> None:
    admin = transport.admin()
    admin.ensure_topic(TopicSpec("out", 1))
    a, ra = transport.group_consumer("g", client_id="a"), Recorder()
    a.subscribe("slots", ra)
    _pump(a)
    stale = a.group_metadata()
    b = transport.group_consumer("g", client_id="b")
    b.subscribe("slots", Recorder())
    _pump(a, b)  # the group moved to a newer generation
    producer = transport.producer(transactional_id="zombie")
    producer.init_transactions(5)
    producer.begin_transaction()
    producer.produce("out", b"k", b"zombie")
    with pytest.raises(GroupFencedError, match="stale"):
        producer.send_offsets_to_transaction("slots", {0: 1}, stale, 5)
    producer.abort_transaction(5)
    # The current generation commits fine.
    producer.begin_transaction()
    producer.produce("out", b"k", b"current")
    producer.send_offsets_to_transaction("slots", {min(ra.owned): 1}, a.group_metadata(), 5)
    producer.commit_transaction(5)
    assert [v for _, _, _, v in transport.broker.records("out")] == [b"current"]


def test_expired_member_loses_everything_and_the_other_takes_over(
    transport: MemoryTransport,
) -> None:
    a, ra = transport.group_consumer("g", client_id="a"), Recorder()
    b, rb = transport.group_consumer("g", client_id="b"), Recorder()
    a.subscribe("slots", ra)
    b.subscribe("slots", rb)
    _pump(a, b)
    stale = a.group_metadata()
    assert transport.broker.expire_group_member("g", "a") == 1
    _pump(b)
    assert rb.owned == set(range(6))
    _pump(a, rounds=1)
    assert any(kind == "lost" for kind, _ in ra.events)
    producer = transport.producer(transactional_id="a")
    producer.init_transactions(5)
    producer.begin_transaction()
    with pytest.raises(GroupFencedError, match="not in group"):
        producer.send_offsets_to_transaction("slots", {0: 1}, stale, 5)
    producer.abort_transaction(5)


def test_committed_waits_until_an_open_transaction_with_offsets_ends(
    transport: MemoryTransport,
) -> None:
    a, ra = transport.group_consumer("g", client_id="a"), Recorder()
    a.subscribe("slots", ra)
    _pump(a)
    assert a.committed([0], 1.0) == {0: OFFSET_INVALID}
    producer = transport.producer(transactional_id="a")
    producer.init_transactions(5)
    producer.begin_transaction()
    producer.send_offsets_to_transaction("slots", {0: 7}, a.group_metadata(), 5)
    results: list[dict[int, int]] = []
    waiter = threading.Thread(target=lambda: results.append(a.committed([0], 5.0)))
    waiter.start()
    time.sleep(0.1)
    assert not results  # still waiting: the transaction is open
    producer.commit_transaction(5)
    waiter.join(5)
    assert results == [{0: 7}]


def test_close_delivers_the_final_revocation(transport: MemoryTransport) -> None:
    a, ra = transport.group_consumer("g", client_id="a"), Recorder()
    a.subscribe("slots", ra)
    _pump(a)
    a.close()
    assert ra.events[-1] == ("revoke", tuple(range(6)))
    assert transport.admin().describe_group("g").state == "Empty"
