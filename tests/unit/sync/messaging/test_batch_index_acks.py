"""Batch-index acknowledgements of stored entries (docs/entry-design.md step 2) in the
engine, over the in-memory broker: a partially acknowledged entry keeps its acknowledged
indexes, comes again without them (nack, leave, restart), counts only its unacknowledged
messages against permits and ``maxUnacked*``, and is acknowledged whole once all its
indexes are."""

from __future__ import annotations

from sync import TopicName
from sync.messaging import Consumer, Delivery, MessageId, SubscriptionType
from sync.messaging.headers import HEADER_ENTRY, HEADER_ENTRY_COUNT
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import MemoryTransport
from tests.unit.sync.messaging.test_subscriptions import (
    Earliest,
    Env,
    Shared,
    quiet,
    run,
    take,
)


def _publish_entries(env: Env, topic: TopicName, counts: list[int]) -> None:
    """One stored-entry record per count (the engine reads only the headers)."""
    producer = env.transport.producer()
    for i, count in enumerate(counts):
        producer.produce(
            kafka_topic_of(topic),
            None,
            b"entry %d" % i,
            partition=0,
            headers=[(HEADER_ENTRY, b"1"), (HEADER_ENTRY_COUNT, b"%d" % count)],
        )
    producer.flush(5)


def _all_but(count: int, *acked: int) -> int:
    """The ack set acknowledging ``acked``: every other index still unacknowledged."""
    bits = (1 << count) - 1
    for index in acked:
        bits &= ~(1 << index)
    return bits


def test_a_partially_acked_entry_comes_again_without_its_acked_indexes() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("partial")
            c = await env.subscribe(topic, sub_type=Shared, negative_ack_delay_s=0.05)
            _publish_entries(env, topic, [5, 3])
            first, second = await take(c, 2)
            assert (first.acked_bits, first.messages, c.held_messages) == (0, 5, 8)
            c.ack(first.message_id, _all_but(5, 0, 3))
            assert c.held_messages == 6  # two of its messages are acknowledged
            c.ack(first.message_id, _all_but(5, 3))  # again: nothing new
            assert c.held_messages == 6
            c.nack(first.message_id)
            (again,) = await take(c, 1)
            assert again.message_id == first.message_id
            assert (again.acked_bits, again.messages, again.redelivery_count) == (0b01001, 3, 1)
            c.ack(second.message_id, _all_but(3, 0, 1, 2))  # every index: the whole entry
            c.ack(again.message_id, _all_but(5, 1, 2, 4))
            assert c.held_messages == 0
            assert await quiet(c, 0.3) == []
            sub = c.subscription
            assert sub.backlog() == 0 and sub.mark_delete_position(0) == 1

    run(scenario())


def test_acked_indexes_survive_an_engine_restart() -> None:
    transport = MemoryTransport()

    async def first() -> None:
        async with Env(transport) as env:
            topic = env.topic("durable-indexes")
            c = await env.subscribe(topic, sub_type=Shared)
            _publish_entries(env, topic, [4, 70, 2])
            got = await take(c, 3)
            c.ack(got[0].message_id, _all_but(4, 1))
            c.ack(got[1].message_id, _all_but(70, *range(0, 70, 2)))
            c.ack(got[2].message_id)
            # closed cleanly: the final commit carries the acknowledged indexes (ps2)

    async def second() -> list[Delivery]:
        async with Env(transport) as env:
            topic = TopicName.parse("persistent://t/ns/durable-indexes")
            c = await env.subscribe(topic, sub_type=Shared)
            got = await take(c, 2)
            assert await quiet(c, 0.3) == []
            assert c.held_messages == 3 + 35
            return got

    run(first())
    again = run(second())
    assert [d.message_id for d in again] == [MessageId(-1, 0), MessageId(-1, 1)]
    assert again[0].acked_bits == 0b10
    assert again[1].acked_bits == int("01" * 35, 2)
    assert [d.redelivery_count for d in again] == [1, 1]


def test_pull_permits_count_only_unacked_messages() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("permits")
            c: Consumer = await env.subscribe(
                topic, sub_type=Shared, pull_mode=True, negative_ack_delay_s=0.05
            )
            _publish_entries(env, topic, [10])
            c.add_permits(10)
            (d,) = await take(c, 1)
            assert c.permits == 0
            c.ack(d.message_id, _all_but(10, *range(7)))
            c.nack(d.message_id)
            await quiet(c, 0.1)
            c.add_permits(3)
            (again,) = await take(c, 1)
            assert again.messages == 3 and c.permits == 0  # 10 - 7 acknowledged

    run(scenario())


def test_max_unacked_counts_acked_indexes() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("unacked-indexes")
            await env.set_policy(topic, {"maxUnackedMessagesOnConsumer": 8})
            c = await env.subscribe(topic, sub_type=Shared)
            _publish_entries(env, topic, [8, 1])
            (d,) = await take(c, 1)
            assert await quiet(c, 0.3) == []  # 8 held: blocked
            c.ack(d.message_id, _all_but(8, *range(5)))  # 3 left: below half
            (nxt,) = await take(c, 1)
            assert nxt.message_id == MessageId(-1, 1)

    run(scenario())


def test_an_ack_set_larger_than_the_entry_is_ignored() -> None:
    """A record the engine counts as one message (an old ``message``-format record holding
    an encrypted batch) acknowledged by index: it stays until acknowledged whole."""

    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("one-message")
            c = await env.subscribe(topic, sub_type=Shared)
            env.publish(topic, 1)
            (d,) = await take(c, 1)
            c.ack(d.message_id, _all_but(3, 0))
            assert c.held_messages == 1 and c.subscription.backlog() == 1
            c.ack(d.message_id)
            assert c.subscription.backlog() == 0

    run(scenario())


def test_an_unload_commits_the_acked_indexes_before_consumers_are_told() -> None:
    """A topic moving away (unload): what its consumers acknowledged by batch index is in
    Kafka (``ps2``) before they are closed to reconnect to the next owner."""
    import asyncio

    from sync import PolicyService
    from sync.messaging import CloseCause, MessagingConfig, MessagingEngine, SubscriptionType
    from sync.messaging._cursor import decode_ack_state
    from sync.transport import TopicSpec
    from tests.unit.sync.messaging.test_engine_unload import _Terms

    async def scenario() -> None:
        transport = MemoryTransport()
        svc = PolicyService(transport).start(timeout_s=10)
        topic = TopicName.parse("persistent://t/ns/unload-indexes")
        kafka_topic = kafka_topic_of(topic)
        transport.admin().ensure_topic(TopicSpec(kafka_topic, 1))
        terms = _Terms()
        engine = MessagingEngine(
            transport,
            lambda: svc,
            ownership=terms,
            config=MessagingConfig(ownership_check_s=0.05, policy_check_s=0.05),
        )
        await engine.start()
        try:
            c = await engine.subscribe(
                topic, "s", sub_type=SubscriptionType.Shared, initial_position=Earliest
            )
            producer = transport.producer()
            headers = [(HEADER_ENTRY, b"1"), (HEADER_ENTRY_COUNT, b"6")]
            producer.produce(kafka_topic, None, b"entry", partition=0, headers=headers)
            producer.flush(5)
            (d,) = await take(c, 1)
            c.ack(d.message_id, _all_but(6, 1, 4))
            terms.claim = "2"  # unloaded (and claimed again): the consumer must reconnect
            while not c.closed:
                await asyncio.sleep(0.01)
            assert c.close_reason is not None and c.close_reason.cause is CloseCause.UNLOADED
            group = c.subscription.group_id
            position = transport.consumer(group_id=group).committed(kafka_topic, [0])[0]
            assert position is not None
            assert decode_ack_state(*position) == ([], [(0, 6, 0b010010)])
        finally:
            await engine.close()
            svc.close()

    run(scenario())


def test_a_consumer_that_lost_failover_gives_back_what_it_was_charged() -> None:
    """The old active consumer of a Failover subscription still holds its copy of an entry
    the new one got again; indexes its client acknowledges then leave neither consumer
    holding messages (a count that leaked would keep it blocked under maxUnacked)."""

    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("failover-charge")
            failover = SubscriptionType.Failover
            z = await env.subscribe(
                topic, sub_type=failover, consumer_name="z", initial_position=Earliest
            )
            _publish_entries(env, topic, [4])
            (first,) = await take(z, 1)
            assert z.held_messages == 4
            m = await env.subscribe(
                topic, sub_type=failover, consumer_name="m", initial_position=Earliest
            )
            await take(m, 1)  # the entry goes again to the new active consumer
            z.ack(first.message_id, _all_but(4, 0))
            z.ack(first.message_id, _all_but(4, 0, 1, 2, 3))
            assert (z.held_messages, m.held_messages) == (0, 0)
            assert z.subscription.backlog() == 0

    run(scenario())
