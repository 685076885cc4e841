"""The consumer-group seam, the same on the in-memory twin and a real broker.

Bundle ownership rests on these Kafka behaviours: cooperative-sticky assignment that
splits partitions among members and revokes only what moves, a final revocation on
close, committed offsets that only a transaction commits, and -- the fence -- a
transaction carrying a stale member's group metadata is refused, so nothing it produced
is ever visible to a read_committed reader.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest

from sync._errors import GroupFencedError
from sync.transport import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    GroupConsumer,
    TopicSpec,
    Transport,
)

SESSION_MS = 1500  # heartbeat 500 ms: rebalances are noticed quickly


class Recorder:
    def __init__(self) -> None:
        self.owned: set[int] = set()
        self.events: list[tuple[str, tuple[int, ...]]] = []

    def on_assign(self, partitions: Sequence[int]) -> None:
        self.events.append(("assign", tuple(partitions)))
        self.owned.update(partitions)

    def on_revoke(self, partitions: Sequence[int]) -> None:
        self.events.append(("revoke", tuple(partitions)))
        self.owned.difference_update(partitions)

    def on_lost(self, partitions: Sequence[int]) -> None:
        self.events.append(("lost", tuple(partitions)))
        self.owned.difference_update(partitions)


def pump_until(
    members: Sequence[GroupConsumer], done: Callable[[], bool], timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for member in members:
            member.consume(10, 0.02)
        if done():
            return
    raise AssertionError("group did not settle in time")


def join(transport: Transport, group: str, topic: str, name: str) -> tuple[GroupConsumer, Recorder]:
    consumer = transport.group_consumer(group, client_id=name, session_timeout_ms=SESSION_MS)
    recorder = Recorder()
    consumer.subscribe(topic, recorder)
    return consumer, recorder


@pytest.fixture
def topics(transport: Transport, unique_name: Callable[[str], str]) -> tuple[str, str, str]:
    slots, out, group = unique_name("slots"), unique_name("out"), unique_name("group")
    admin = transport.admin()
    admin.ensure_topic(TopicSpec(slots, 4))
    admin.ensure_topic(TopicSpec(out, 1))
    return slots, out, group


def test_members_split_the_partitions_and_close_revokes_everything(
    transport: Transport, topics: tuple[str, str, str]
) -> None:
    slots, _, group = topics
    a, ra = join(transport, group, slots, "member-a")
    pump_until([a], lambda: ra.owned == {0, 1, 2, 3})
    b, rb = join(transport, group, slots, "member-b")
    pump_until([a, b], lambda: len(ra.owned) == 2 and len(rb.owned) == 2)
    assert not ra.owned & rb.owned
    # Cooperative: a gave up exactly the two partitions b got, nothing else.
    revoked = {p for kind, ps in ra.events if kind == "revoke" for p in ps}
    assert revoked == rb.owned
    pump_until([a, b], lambda: transport.admin().describe_group(group).state == "Stable")
    described = transport.admin().describe_group(group)
    assert {m.client_id for m in described.members} == {"member-a", "member-b"}
    assert sorted(p for m in described.members for p in m.assignment[slots]) == [0, 1, 2, 3]
    b.close()
    assert rb.events[-1][0] == "revoke" and not rb.owned
    pump_until([a], lambda: ra.owned == {0, 1, 2, 3})
    a.close()


def test_a_stale_generation_is_fenced_and_its_writes_never_show(
    transport: Transport, topics: tuple[str, str, str], unique_name: Callable[[str], str]
) -> None:
    slots, out, group = topics
    a, ra = join(transport, group, slots, "member-a")
    pump_until([a], lambda: ra.owned == {0, 1, 2, 3})
    stale = a.group_metadata()
    assert a.committed([0], 10.0) == {0: OFFSET_INVALID}
    b, rb = join(transport, group, slots, "member-b")
    pump_until([a, b], lambda: len(ra.owned) == 2 and len(rb.owned) == 2)

    producer = transport.producer(transactional_id=unique_name("txn"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(out, b"bundle", b"zombie")
    with pytest.raises(GroupFencedError):
        producer.send_offsets_to_transaction(slots, {min(ra.owned): 1}, stale, 30)
    producer.abort_transaction(30)

    mine = min(ra.owned)
    producer.begin_transaction()
    producer.produce(out, b"bundle", b"owner")
    producer.send_offsets_to_transaction(slots, {mine: 5}, a.group_metadata(), 30)
    producer.commit_transaction(30)
    assert a.committed([mine], 30.0) == {mine: 5}

    reader = transport.consumer(read_committed=True)
    reader.assign(out, {0: OFFSET_BEGINNING})
    seen: list[bytes | None] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and b"owner" not in seen:
        seen.extend(m.value() for m in reader.consume(100, 0.2))
    reader.close()
    assert seen == [b"owner"]
    a.close()
    b.close()
