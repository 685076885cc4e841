"""The subscription engine on the in-memory twin with a real policy service.

Every subscription type, redelivery, durability of individual acks across an engine
restart, and policies applied to live consumers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

import pytest

from sync import PolicyService, PolicyTarget, TopicName
from sync._errors import TopicNotFoundError, TransportError
from sync.messaging import (
    CloseCause,
    Consumer,
    ConsumerBusyError,
    Delivery,
    EntryCodec,
    InitialPosition,
    MessagingConfig,
    MessagingEngine,
    NotAllowedError,
    ProducerBusyError,
    SubscriptionBusyError,
    SubscriptionType,
)
from sync.messaging._cursor import split_dispatched
from sync.messaging._producer import MessageId, PartitionedProducer, ProducerConfig
from sync.messaging._selectors import KeySharedSelector, sticky_key_hash
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import MemoryTransport, TopicSpec
from tests.support.waits import eventually

T = TypeVar("T")
Shared = SubscriptionType.Shared
Earliest = InitialPosition.Earliest


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


class Env:
    """A policy service and a messaging engine over one in-memory broker."""

    def __init__(
        self,
        transport: MemoryTransport | None = None,
        entry_codec: EntryCodec | None = None,
        **config: Any,
    ) -> None:
        self.transport = transport or MemoryTransport()
        self.svc = PolicyService(self.transport).start(timeout_s=10)
        settings: dict[str, Any] = {
            "commit_interval_s": 0.02,
            "policy_check_s": 0.1,
            "idle_subscription_close_s": 5.0,
        }
        settings.update(config)
        self.engine = MessagingEngine(
            self.transport,
            lambda: self.svc,
            config=MessagingConfig(**settings),
            entry_codec=entry_codec,
        )
        self._producers: dict[TopicName, PartitionedProducer] = {}

    async def __aenter__(self) -> Env:
        await self.engine.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.engine.close()
        for producer in self._producers.values():
            producer.close()
        self.svc.close()

    def topic(self, name: str, partitions: int = 1) -> TopicName:
        topic = TopicName.parse(f"persistent://t/ns/{name}")
        self.transport.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), partitions))
        return topic

    def publish(self, topic: TopicName, count: int, key: str | None = None) -> list[MessageId]:
        producer = self._producers.get(topic)
        if producer is None:
            config = ProducerConfig(routing_mode="RoundRobinPartition", batching_enabled=False)
            producer = PartitionedProducer.open(self.transport, topic, config)
            self._producers[topic] = producer
        return [producer.send(f"m{i}".encode(), key=key) for i in range(count)]

    async def set_policy(self, topic: TopicName, patch: dict[str, Any]) -> None:
        await asyncio.to_thread(self.svc.set, PolicyTarget.for_topic(topic), patch)

    async def subscribe(self, topic: TopicName, sub: str = "sub", **kw: Any) -> Consumer:
        kw.setdefault("initial_position", Earliest)
        return await self.engine.subscribe(topic, sub, **kw)


async def take(consumer: Consumer, count: int, timeout_s: float = 3.0) -> list[Delivery]:
    out: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{consumer.name}: got {len(out)} of {count} messages")
        try:
            out.extend(await asyncio.wait_for(consumer.receive_batch(count - len(out)), left))
        except TimeoutError:
            continue
    return out


async def quiet(consumer: Consumer, wait_s: float = 0.2) -> list[Delivery]:
    """Whatever arrives within ``wait_s`` (expected: nothing)."""
    try:
        return await asyncio.wait_for(consumer.receive_batch(), wait_s)
    except TimeoutError:
        return []


def ack_all(consumer: Consumer, deliveries: list[Delivery]) -> None:
    for d in deliveries:
        consumer.ack(d.message_id)


def payloads(deliveries: list[Delivery]) -> list[bytes]:
    return [d.entry.payload for d in deliveries]


# ------------------------------------------------------------------ subscription types


def test_exclusive_refuses_a_second_consumer_and_another_type() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("excl")
            first = await env.subscribe(topic)
            with pytest.raises(ConsumerBusyError, match="Exclusive consumer is already connected"):
                await env.subscribe(topic)
            with pytest.raises(SubscriptionBusyError, match="different type"):
                await env.subscribe(topic, sub_type=Shared)
            env.publish(topic, 3)
            got = await take(first, 3)
            assert payloads(got) == [b"m0", b"m1", b"m2"]
            await first.close()
            second = await env.subscribe(topic, sub_type=Shared)  # idle: the type may change
            again = await take(second, 3)  # nothing was acked: all delivered again
            assert [d.redelivery_count for d in again] == [1, 1, 1]

    run(scenario())


def test_failover_picks_sorted_consumer_per_partition_and_fails_over() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("fo", partitions=2)
            b = await env.subscribe(topic, sub_type=SubscriptionType.Failover, consumer_name="b")
            a = await env.subscribe(topic, sub_type=SubscriptionType.Failover, consumer_name="a")
            env.publish(topic, 6)  # round robin: 3 per partition
            got_a = await take(a, 3)
            got_b = await take(b, 3)
            # sorted(["a", "b"])[p % 2]: partition 0 -> a, partition 1 -> b
            assert {d.message_id.partition for d in got_a} == {0}
            assert {d.message_id.partition for d in got_b} == {1}
            assert [d.message_id.offset for d in got_a] == [0, 1, 2]
            a.ack(got_a[0].message_id)
            await a.close()  # holds offsets 1 and 2 of partition 0 unacked
            moved = await take(b, 2)
            assert [(d.message_id.partition, d.message_id.offset) for d in moved] == [
                (0, 1),
                (0, 2),
            ]
            assert [d.redelivery_count for d in moved] == [1, 1]

    run(scenario())


def test_failover_non_partitioned_uses_first_name_and_rewinds_when_it_changes() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("fo1")
            z = await env.subscribe(topic, sub_type=SubscriptionType.Failover, consumer_name="z")
            env.publish(topic, 2)
            held = await take(z, 2)
            # "m" sorts first: it becomes active and gets z's unacked messages, in order
            m = await env.subscribe(topic, sub_type=SubscriptionType.Failover, consumer_name="m")
            rewound = await take(m, 2)
            assert payloads(rewound) == payloads(held)
            assert [d.redelivery_count for d in rewound] == [1, 1]
            assert await quiet(z) == []
            ack_all(m, rewound)
            env.publish(topic, 1)
            assert payloads(await take(m, 1)) == [b"m0"]

    run(scenario())


def test_shared_round_robin_individual_acks_and_redelivery_on_leave() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("shared")
            c1 = await env.subscribe(topic, sub_type=Shared, consumer_name="c1")
            c2 = await env.subscribe(topic, sub_type=Shared, consumer_name="c2")
            env.publish(topic, 10)
            got1 = await take(c1, 5)
            got2 = await take(c2, 5)
            assert sorted(d.message_id.offset for d in got1 + got2) == list(range(10))
            ack_all(c1, got1)
            c2.ack(got2[0].message_id)  # individual ack; four stay unacked
            await c2.close()
            redelivered = await take(c1, 4)
            assert sorted(d.message_id for d in redelivered) == sorted(
                d.message_id for d in got2[1:]
            )
            assert {d.redelivery_count for d in redelivered} == {1}

    run(scenario())


def test_shared_respects_each_consumers_receiver_queue() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("permits")
            small = await env.subscribe(topic, sub_type=Shared, receiver_queue_size=2)
            env.publish(topic, 6)
            first = await take(small, 2)
            assert await quiet(small) == []
            small.ack(first[0].message_id)
            assert len(await take(small, 1)) == 1
            big = await env.subscribe(topic, sub_type=Shared)
            assert len(await take(big, 3)) == 3

    run(scenario())


def test_key_shared_keeps_each_key_on_one_consumer_in_order() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("ks", partitions=2)
            consumers = [
                await env.subscribe(
                    topic, sub_type=SubscriptionType.Key_Shared, consumer_name=f"c{i}"
                )
                for i in range(3)
            ]
            for rnd in range(4):
                for k in range(12):
                    env.publish(topic, 1, key=f"key-{k}")
                del rnd
            owners: dict[str, set[str]] = {}
            offsets: dict[str, list[int]] = {}
            total = 0
            while total < 48:
                for c in consumers:
                    for d in await quiet(c, 0.05):
                        assert d.entry.key is not None
                        owners.setdefault(d.entry.key, set()).add(c.name)
                        offsets.setdefault(d.entry.key, []).append(d.message_id.offset)
                        c.ack(d.message_id)
                        total += 1
            assert all(len(names) == 1 for names in owners.values())
            assert all(o == sorted(o) for o in offsets.values())
            assert len({n for names in owners.values() for n in names}) >= 2

    run(scenario())


def test_key_shared_holds_a_moved_key_until_the_old_owner_acks() -> None:
    # Find a key that c1 owns alone but c2 takes once it joins the ring.
    ring = KeySharedSelector()

    class _Named:
        def __init__(self, name: str, seq: int) -> None:
            self.name, self.seq = name, seq

    one, two = cast(Consumer, _Named("c1", 1)), cast(Consumer, _Named("c2", 2))
    ring.add(one)
    ring.add(two)
    key = next(f"k{i}" for i in range(1000) if ring.select(sticky_key_hash(f"k{i}")) is two)

    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("ks-move")
            c1 = await env.subscribe(
                topic, sub_type=SubscriptionType.Key_Shared, consumer_name="c1"
            )
            env.publish(topic, 2, key=key)
            held = await take(c1, 2)
            c2 = await env.subscribe(
                topic, sub_type=SubscriptionType.Key_Shared, consumer_name="c2"
            )
            env.publish(topic, 1, key=key)
            assert await quiet(c2) == []  # c1 still holds the key's earlier messages
            ack_all(c1, held)
            later = await take(c2, 1)
            assert later[0].message_id.offset == 2

    run(scenario())


# ------------------------------------------------------------------ acks and durability


def test_individual_acks_survive_an_engine_restart_exactly() -> None:
    transport = MemoryTransport()

    async def first() -> None:
        async with Env(transport) as env:
            topic = env.topic("durable", partitions=2)
            c = await env.subscribe(topic, sub_type=Shared)
            env.publish(topic, 20)
            got = await take(c, 20)
            for d in got:
                if d.message_id.offset % 3 != 1:  # leave holes in both partitions
                    c.ack(d.message_id)
            # closed cleanly: the final commit carries the ack set

    async def second() -> set[MessageId]:
        async with Env(transport) as env:
            topic = TopicName.parse("persistent://t/ns/durable")
            c = await env.subscribe(topic, sub_type=Shared)
            got = await take(c, 6)
            assert await quiet(c, 0.3) == []
            return {d.message_id for d in got}

    run(first())
    again = run(second())
    assert again == {MessageId(p, o) for p in (0, 1) for o in range(10) if o % 3 == 1}


def test_acks_are_committed_within_the_interval_without_a_clean_close() -> None:
    transport = MemoryTransport()
    group: list[str] = []

    async def crashy() -> None:
        env = Env(transport)
        await env.engine.start()
        topic = env.topic("crash")
        c = await env.subscribe(topic, sub_type=Shared)
        env.publish(topic, 5)
        got = await take(c, 5)
        for d in got[:2] + got[3:4]:
            c.ack(d.message_id)
        sub = env.engine.topic_state(topic).subscriptions["sub"]  # type: ignore[union-attr]
        group.append(sub.group_id)
        await eventually(
            lambda: sub.committed_positions()[0][0] == 2 and sub.commits > 0,
            "position 2 committed",
            3.0,
        )
        await asyncio.sleep(0.1)
        # No engine.close() and no final commit: the process "dies" here. Only stop the
        # threads so they do not outlive the test.
        assert sub._reader is not None
        sub._reader.stop()
        env.svc.close()

    run(crashy())
    committed = transport.consumer(group_id=group[0]).committed(
        kafka_topic_of(TopicName.parse("t/ns/crash")), [0]
    )
    offset, metadata = committed[0] or (None, "")
    assert offset == 2 and metadata.startswith("ps1:")

    async def after() -> list[int]:
        async with Env(transport) as env:
            c = await env.subscribe(TopicName.parse("t/ns/crash"), sub_type=Shared)
            got = await take(c, 2)
            assert await quiet(c) == []
            return [d.message_id.offset for d in got]

    assert run(after()) == [2, 4]


def test_messages_delivered_before_a_crash_come_back_with_a_redelivery_count() -> None:
    """What a consumer may already have seen when its sidecar died (or the subscription
    moved) is delivered again with redeliveryCount >= 1. The mark is written ahead of
    what was read (about a second of traffic), so messages read or produced within it
    but never dispatched may come back counted as well; everything beyond it keeps 0."""
    transport = MemoryTransport()
    group: list[str] = []
    marks: list[int] = []

    async def crashy() -> None:
        env = Env(transport)
        await env.engine.start()
        topic = env.topic("marked")
        c = await env.subscribe(topic, sub_type=Shared, receiver_queue_size=4)
        env.publish(topic, 10)
        got = await take(c, 4)  # 4 dispatched (its queue), 6 still pending
        c.ack(got[0].message_id)
        sub = env.engine.topic_state(topic).subscriptions["sub"]  # type: ignore[union-attr]
        group.append(sub.group_id)
        await eventually(
            lambda: sub.committed_positions()[0][0] == 1 and sub.commits > 0,
            "position 1 committed",
            3.0,
        )
        # the dispatch mark goes with a commit after the dispatch (5: the ack freed a permit)
        await eventually(
            lambda: persisted_mark() >= sub._parts[0].cursor.dispatched >= 5,
            "the persisted mark covers the 5 dispatched",
            3.0,
        )
        assert sub._reader is not None
        sub._reader.stop()  # "kill -9": no final commit
        env.svc.close()
        # What the next dispatcher reads: the mark as committed, whenever the last commit
        # before the crash ran (on a busy machine one can land after any in-memory read).
        marks.append(persisted_mark())

    def persisted_mark() -> int:
        if not group:
            return 0
        topic = kafka_topic_of(TopicName.parse("t/ns/marked"))
        found = transport.consumer(group_id=group[0]).committed(topic, [0])[0]
        return 0 if found is None else split_dispatched(found[1])[1]

    run(crashy())

    mark = marks[0]
    assert mark >= 10  # everything read, and a window beyond it
    later = mark - 10 + 3  # produced after the crash, up to 3 beyond the mark

    async def after() -> list[tuple[int, int]]:
        async with Env(transport) as env:
            topic = TopicName.parse("t/ns/marked")
            c = await env.subscribe(topic, sub_type=Shared, receiver_queue_size=later + 9)
            env.publish(topic, later)
            got = await take(c, 9 + later)
            return [(d.message_id.offset, d.redelivery_count) for d in got]

    redelivered = run(after())
    assert [o for o, _ in redelivered] == list(range(1, 10 + later))
    assert all(n == 1 for o, n in redelivered if o < mark)
    assert [n for o, n in redelivered if o >= mark] == [0, 0, 0]


def test_two_sidecars_serve_one_subscription_each_its_own_partitions() -> None:
    """Each partition is owned on its own (a Pulsar client looks each one up), so two
    sidecars serve one subscription: each reads and commits only the partitions its
    consumers read. When a partition moves, the other takes it up from its commit: what
    was acknowledged does not come again, what was delivered and not acknowledged comes
    again with a redelivery count."""
    transport = MemoryTransport()

    async def scenario() -> None:
        async with Env(transport) as a, Env(transport) as b:
            topic = a.topic("split", partitions=2)
            here, there = (TopicName.parse(f"{topic}-partition-{p}") for p in (0, 1))
            on_a = await a.subscribe(here, sub_type=Shared)
            on_b = await b.subscribe(there, sub_type=Shared)
            a.publish(topic, 20)  # round robin: 10 per partition
            got_a, got_b = await take(on_a, 10), await take(on_b, 10)
            assert {d.message_id.partition for d in got_a} == {0}
            ack_all(on_a, got_a[:6])
            ack_all(on_b, got_b)
            a.publish(topic, 4)  # b goes on reading its partition (and only that one)
            ack_all(on_b, await take(on_b, 2))
            await on_a.close()  # partition 0 moves: a commits it and gives it up
            moved = await b.subscribe(here, sub_type=Shared)
            again = await take(moved, 6)  # 10 and 11 reached a's consumer too
            assert [(d.message_id.offset, d.redelivery_count) for d in again] == [
                (6, 1), (7, 1), (8, 1), (9, 1), (10, 1), (11, 1)
            ]  # fmt: skip
            assert await quiet(moved) == []

    run(scenario())


def test_redelivery_counts_grow_across_reconnects() -> None:
    """A partition with no consumer left is given up (its position is read from Kafka
    when one comes back); the counts of the messages it held are kept, as Pulsar's
    redelivery tracker keeps them for the subscription."""

    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("counts")
            env.publish(topic, 2)
            counts = []
            for _ in range(3):
                c = await env.subscribe(topic, sub_type=Shared)
                got = await take(c, 2)
                counts.append([d.redelivery_count for d in got])
                await c.close()
            assert counts == [[0, 0], [1, 1], [2, 2]]

    run(scenario())


def test_new_subscription_starts_at_latest_and_is_durable_before_any_ack() -> None:
    transport = MemoryTransport()

    async def scenario() -> None:
        async with Env(transport) as env:
            topic = env.topic("latest")
            env.publish(topic, 3)
            c = await env.engine.subscribe(topic, "late")  # Latest by default
            assert await quiet(c) == []
            await c.close()
        async with Env(transport) as env:
            topic = TopicName.parse("t/ns/latest")
            env.publish(topic, 1)  # published while nobody was connected
            c = await env.engine.subscribe(topic, "late")
            assert payloads(await take(c, 1)) == [b"m0"]

    run(scenario())


def test_negative_ack_redelivers_after_the_delay() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("nack")
            c = await env.subscribe(topic, sub_type=Shared, negative_ack_delay_s=0.2)
            env.publish(topic, 1)
            (d,) = await take(c, 1)
            c.nack(d.message_id)
            assert await quiet(c, 0.1) == []
            (again,) = await take(c, 1, timeout_s=2.0)
            assert again.message_id == d.message_id and again.redelivery_count == 1

    run(scenario())


def test_pull_mode_delivers_exactly_the_permits() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("pull")
            c = await env.subscribe(topic, pull_mode=True)
            env.publish(topic, 5)
            assert await quiet(c) == []
            c.add_permits(2)
            assert len(await take(c, 2)) == 2
            assert await quiet(c) == []

    run(scenario())


def test_unsubscribe_deletes_the_subscription_group() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("unsub")
            c = await env.subscribe(topic, "gone", sub_type=Shared)
            other = await env.subscribe(topic, "gone", sub_type=Shared)
            with pytest.raises(ConsumerBusyError):
                await env.engine.unsubscribe(c)
            await other.close()
            await env.engine.unsubscribe(c)
            assert c.closed
            groups = env.transport.admin().list_groups("policy-sync.sub/")
            assert not [g for g in groups if g.endswith("/gone")]

    run(scenario())


def test_missing_topic_and_partition_are_refused() -> None:
    async def scenario() -> None:
        async with Env() as env:
            with pytest.raises(TopicNotFoundError):
                await env.subscribe(TopicName.parse("t/ns/none"))
            topic = env.topic("two", partitions=2)
            with pytest.raises(TopicNotFoundError):
                await env.subscribe(topic.partition(2))
            only1 = await env.subscribe(topic.partition(1), sub_type=Shared)
            env.publish(topic, 4)
            assert {d.message_id.partition for d in await take(only1, 2)} == {1}

    run(scenario())


# ------------------------------------------------------------------ policies, live


def test_disabling_a_subscription_type_closes_its_live_consumers() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("types")
            shared = await env.subscribe(topic, "a", sub_type=Shared)
            exclusive = await env.subscribe(topic, "b")
            await env.set_policy(topic, {"subscriptionTypesEnabled": ["Exclusive", "Failover"]})
            await eventually(lambda: shared.closed, "the Shared consumer closed", 3.0)
            assert shared.close_reason is not None
            assert shared.close_reason.cause is CloseCause.POLICY
            assert "doesn't support Shared sub type" in shared.close_reason.reason
            assert not exclusive.closed
            with pytest.raises(NotAllowedError, match=r"Topic\[\{persistent://t/ns/types\}\]"):
                await env.subscribe(topic, "c", sub_type=Shared)

    run(scenario())


def test_lowering_max_consumers_per_subscription_evicts_the_newest() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("maxcons")
            cs = [
                await env.subscribe(topic, sub_type=Shared, consumer_name=f"c{i}") for i in range(3)
            ]
            env.publish(topic, 3)
            held = [await take(c, 1) for c in cs]
            await env.set_policy(topic, {"maxConsumersPerSubscription": 1})
            await eventually(
                lambda: cs[1].closed and cs[2].closed, "the second and third consumers closed", 3.0
            )
            assert not cs[0].closed
            assert cs[2].close_reason is not None
            assert cs[2].close_reason.reason == "Subscription reached max consumers limit"
            moved = await take(cs[0], 2)  # what the evicted ones held comes back
            assert {d.message_id for d in moved} == {held[1][0].message_id, held[2][0].message_id}
            with pytest.raises(ConsumerBusyError, match="Subscription reached max consumers"):
                await env.subscribe(topic, sub_type=Shared)

    run(scenario())


def test_max_consumers_per_topic_counts_every_subscription() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("maxtopic")
            a = await env.subscribe(topic, "a")
            b = await env.subscribe(topic, "b")
            await env.set_policy(topic, {"maxConsumerPerTopic": 1})
            await eventually(lambda: b.closed, "the second subscription's consumer closed", 3.0)
            assert not a.closed
            with pytest.raises(ConsumerBusyError, match="Topic reached max consumers limit"):
                await env.subscribe(topic, "c")

    run(scenario())


def test_max_subscriptions_counts_durable_subscriptions() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("maxsubs")
            await env.set_policy(topic, {"maxSubscriptionsPerTopic": 1})
            first = await env.subscribe(topic, "one")
            await first.close()  # still exists in Kafka
            with pytest.raises(NotAllowedError, match="Exceed the maximum number of subscriptions"):
                await env.subscribe(topic, "two")
            again = await env.subscribe(topic, "one")
            assert not again.closed

    run(scenario())


def test_max_unacked_blocks_until_half_is_acked_and_follows_changes() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("unacked")
            await env.set_policy(topic, {"maxUnackedMessagesOnConsumer": 4})
            c = await env.subscribe(topic, sub_type=Shared)
            env.publish(topic, 10)
            got = await take(c, 4)
            assert await quiet(c) == []
            c.ack(got[0].message_id)  # 3 held: still above half of 4
            assert await quiet(c) == []
            c.ack(got[1].message_id)  # 2 held... unblocks below half
            c.ack(got[2].message_id)
            assert len(await take(c, 1)) >= 1
            await env.set_policy(topic, {"maxUnackedMessagesOnConsumer": 0})  # unlimited
            rest = await take(c, 5)
            assert len(rest) == 5

    run(scenario())


def test_dispatch_rate_throttles_and_a_change_applies_live() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("rate")
            rate = {"dispatchThrottlingRateInMsg": 5, "ratePeriodInSecond": 1}
            await env.set_policy(topic, {"dispatchRate": rate})
            c = await env.subscribe(topic, sub_type=Shared)
            env.publish(topic, 40)
            start = time.monotonic()
            got: list[Delivery] = []
            while time.monotonic() - start < 1.0:
                batch = await quiet(c, 0.05)
                ack_all(c, batch)
                got.extend(batch)
            assert 5 <= len(got) <= 11  # a burst of 5, then 5 per second
            await env.set_policy(topic, {"dispatchRate": None})
            rest = await take(c, 40 - len(got), timeout_s=3.0)
            assert len(got) + len(rest) == 40

    run(scenario())


def test_minus_one_rates_throttle_nothing() -> None:
    """What Pulsar's clients send for "no limit": every message is dispatched, the same
    consumer name subscribes again and again (a limit of 1 per hour would refuse it)."""

    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("unlimited")
            rate = {"dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": -1,
                    "relativeToPublishRate": False, "ratePeriodInSecond": 3600}  # fmt: skip
            await env.set_policy(
                topic,
                {
                    "dispatchRate": rate,
                    "subscriptionDispatchRate": {**rate, "dispatchThrottlingRateInMsg": -2},
                    "subscribeRate": {
                        "subscribeThrottlingRatePerConsumer": -1,
                        "ratePeriodInSecond": 3600,
                    },
                },
            )
            for _ in range(3):
                c = await env.subscribe(topic, sub_type=Shared, consumer_name="same")
                await c.close()
            c = await env.subscribe(topic, sub_type=Shared, consumer_name="same")
            env.publish(topic, 40)
            got = await take(c, 40, timeout_s=20.0)
            assert sorted(payloads(got)) == sorted(f"m{i}".encode() for i in range(40))

    run(scenario())


def test_subscription_dispatch_rate_in_bytes() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("byterate")
            # payloads are b"m0".."m9" (2 bytes): 4 bytes per second is 2 messages
            rate = {"dispatchThrottlingRateInByte": 4, "ratePeriodInSecond": 1}
            await env.set_policy(topic, {"subscriptionDispatchRate": rate})
            c = await env.subscribe(topic, sub_type=Shared)
            env.publish(topic, 10)
            start = time.monotonic()
            got: list[Delivery] = []
            while time.monotonic() - start < 1.0:
                got.extend(await quiet(c, 0.05))
            assert 2 <= len(got) <= 5

    run(scenario())


def test_max_producers_refuses_and_evicts_the_newest() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("maxprod")
            p1 = await env.engine.create_producer(topic)
            p2 = await env.engine.create_producer(topic)
            await env.set_policy(topic, {"maxProducerPerTopic": 1})
            await eventually(lambda: p2.closed, "the second producer closed", 3.0)
            assert not p1.closed
            assert p2.close_reason is not None and p2.close_reason.cause is CloseCause.POLICY
            with pytest.raises(ProducerBusyError, match="Topic reached max producers limit"):
                await env.engine.create_producer(topic)

    run(scenario())


def test_max_message_size_is_read_on_every_send() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("size")
            handle = await env.engine.create_producer(topic)
            results: list[object] = []
            handle.send(b"x" * 100, lambda mid, err: results.append(mid or err))
            await env.set_policy(topic, {"maxMessageSize": 50})
            await eventually(
                lambda: handle.max_message_size == 50,
                "maxMessageSize 50 applied to the producer",
                3.0,
            )
            from sync._errors import MessageTooLargeError

            with pytest.raises(MessageTooLargeError):
                handle.send(b"x" * 100, lambda *_: None)
            await eventually(lambda: len(results) == 1, "the first send answered", 3.0)

    run(scenario())


def test_no_policy_service_means_refusal_not_a_default() -> None:
    async def scenario() -> None:
        engine = MessagingEngine(MemoryTransport(), lambda: None)
        from sync._errors import CacheStateError

        with pytest.raises(CacheStateError, match="not READY"):
            await engine.subscribe(TopicName.parse("t/ns/x"), "s")
        await engine.close()

    run(scenario())


def test_state_machines_refuse_illegal_moves() -> None:
    from sync.messaging import ConsumerState, StateTransitionError, SubscriptionState
    from sync.messaging._types import transition

    assert transition(ConsumerState.ACTIVE, ConsumerState.BLOCKED, "c") is ConsumerState.BLOCKED
    with pytest.raises(StateTransitionError):
        transition(ConsumerState.CLOSED, ConsumerState.ACTIVE, "c")
    with pytest.raises(StateTransitionError):
        transition(SubscriptionState.CLOSED, SubscriptionState.ACTIVE, "s")


def test_a_refused_request_leaves_no_topic_state_behind() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("refused")
            await env.set_policy(topic, {"subscriptionTypesEnabled": ["Failover"]})
            with pytest.raises(NotAllowedError):
                await env.subscribe(topic, sub_type=Shared)
            assert env.engine.topic_state(topic) is None
            c = await env.subscribe(topic, sub_type=SubscriptionType.Failover)
            assert env.engine.topic_state(topic) is not None
            await c.close()

    run(scenario())


def test_idle_subscription_is_closed_and_reloaded_from_its_commit() -> None:
    async def scenario() -> None:
        async with Env(idle_subscription_close_s=0.1) as env:
            topic = env.topic("idle")
            c = await env.subscribe(topic, sub_type=Shared)
            env.publish(topic, 4)
            got = await take(c, 4)
            ack_all(c, got[:2])
            await c.close()
            await eventually(
                lambda: env.engine.topic_state(topic) is None, "the unused topic dropped", 3.0
            )
            again = await env.subscribe(topic, sub_type=Shared)
            back = await take(again, 2)
            assert [d.message_id for d in back] == [d.message_id for d in got[2:]]

    run(scenario())


def test_while_commits_fail_messages_wait_for_a_durable_dispatch_mark() -> None:
    """Issue 11: while the group coordinator does not take commits, a message the committed
    dispatch mark does not cover is not dispatched (after a move it would come back with
    redeliveryCount 0); it goes once a commit writes the mark over it, and after a crash
    everything dispatched comes back with redeliveryCount >= 1."""
    transport = MemoryTransport()

    async def stalled() -> None:
        env = Env(transport)
        await env.engine.start()
        topic = env.topic("stalled")
        c = await env.subscribe(topic, sub_type=Shared, receiver_queue_size=100)
        env.publish(topic, 2)
        ack_all(c, await take(c, 2))
        sub = env.engine.topic_state(topic).subscriptions["sub"]  # type: ignore[union-attr]
        await eventually(lambda: sub.committed_positions()[0][0] == 2, "position 2 committed", 3.0)
        assert sub._reader is not None
        consumer = sub._reader._consumer
        assert consumer is not None
        working = consumer.commit

        def coordinator_down(*args: Any, **kwargs: Any) -> None:
            raise TransportError("commit failed: coordinator not available")

        consumer.commit = coordinator_down  # type: ignore[method-assign]
        covered = sub._parts[0].cursor.durable - 2  # the mark was written ahead of 2
        env.publish(topic, covered + 5)
        ack_all(c, await take(c, covered))  # within the committed mark: dispatched
        await eventually(
            lambda: sub._committer.failing_since is not None, "the committer failing", 3.0
        )
        with pytest.raises(AssertionError, match="got 0 of 1"):
            await take(c, 1, timeout_s=1.0)  # held: the mark in Kafka does not cover them
        consumer.commit = working  # type: ignore[method-assign]
        held = await take(c, 5)
        assert [d.redelivery_count for d in held] == [0] * 5
        assert sub._parts[0].cursor.durable > max(d.message_id.offset for d in held)
        assert sub._reader.write_ahead_failures >= 1
        sub._reader.stop()  # "kill -9": no final commit
        env.svc.close()

    run(stalled())

    async def after() -> list[int]:
        async with Env(transport) as env:
            c = await env.subscribe(TopicName.parse("t/ns/stalled"), sub_type=Shared)
            return [d.redelivery_count for d in await take(c, 5)]

    assert run(after()) == [1] * 5


def test_a_kill_right_after_dispatch_redelivers_with_a_count() -> None:
    """Issue 11: the dispatch mark is committed before a message is dispatched, so a crash
    right after dispatch (no commit interval passed) redelivers every message a consumer
    may have seen with redeliveryCount >= 1, never 0."""
    transport = MemoryTransport()

    async def crash() -> list[int]:
        env = Env(transport, commit_interval_s=3600.0)  # only the write-ahead mark commits
        await env.engine.start()
        topic = env.topic("crash")
        c = await env.subscribe(topic, sub_type=Shared, receiver_queue_size=100)
        offsets: list[int] = []
        for _ in range(3):
            env.publish(topic, 4)
            offsets += [d.message_id.offset for d in await take(c, 4)]
        sub = env.engine.topic_state(topic).subscriptions["sub"]  # type: ignore[union-attr]
        assert sub._reader is not None
        sub._reader.stop()  # "kill -9" right after the dispatch: no commit after it
        env.svc.close()
        return offsets

    seen = run(crash())

    async def after() -> list[tuple[int, int]]:
        async with Env(transport) as env:
            c = await env.subscribe(TopicName.parse("t/ns/crash"), sub_type=Shared)
            return [(d.message_id.offset, d.redelivery_count) for d in await take(c, 12)]

    again = run(after())
    assert [o for o, _ in again] == seen
    assert all(count >= 1 for _, count in again), again


def test_regular_commits_move_the_dispatch_mark_on_before_a_batch_needs_it() -> None:
    """Issue 14: a batch past the dispatch mark waits for a commit of its own (a tail once
    per window on real Kafka); the subscription's regular commits move the mark on while
    half a window is still covered, so a consumer that acks never meets that wait."""

    async def scenario() -> None:
        async with Env(commit_interval_s=0.01) as env:
            topic = env.topic("ahead")
            c = await env.subscribe(topic, sub_type=Shared, receiver_queue_size=100)
            sub = env.engine.topic_state(topic).subscriptions["sub"]  # type: ignore[union-attr]
            reader = sub._reader
            assert reader is not None
            env.publish(topic, 1)
            ack_all(c, await take(c, 1))
            await eventually(
                lambda: sub.committed_positions()[0][0] == 1, "position 1 committed", 3.0
            )
            own_commits = reader.write_ahead_commits
            for n in range(2, 50):  # far beyond the smallest window (16 messages)
                env.publish(topic, 1)
                ack_all(c, await take(c, 1))
                await eventually(
                    lambda n=n: sub.committed_positions()[0][0] == n,  # type: ignore[misc]
                    f"position {n} committed",
                    3.0,
                )
            assert reader.write_ahead_commits == own_commits
            assert sub._parts[0].cursor.durable > 49

    run(scenario())
