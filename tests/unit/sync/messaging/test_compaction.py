"""Topic compaction on the in-memory twin: the companion topic, the compacted view and
``readCompacted`` subscriptions (the same paths run on real Kafka in
``tests/integration/sync/messaging/test_compaction.py``)."""

from __future__ import annotations

import asyncio

import pytest

from sync import PolicyTarget
from sync._errors import InvalidTopicNameError, NotAllowedError
from sync.messaging import Delivery, SubscriptionType
from sync.messaging._compaction import (
    CompactedView,
    CompactionState,
    Compactor,
    compacted_topic_of,
    over_threshold,
)
from sync.messaging._producer import PartitionedProducer, ProducerConfig
from sync.naming._kafka_names import kafka_topic_of, pulsar_topic_of
from tests.unit.sync.messaging.test_subscriptions import Env, quiet, run, take


def _producer(env: Env, topic_name: str, partitions: int = 1) -> PartitionedProducer:
    topic = env.topic(topic_name, partitions)
    config = ProducerConfig(routing_mode="RoundRobinPartition", batching_enabled=False)
    return PartitionedProducer.open(env.transport, topic, config)


def _payloads(deliveries: list[Delivery]) -> list[tuple[str | None, bytes]]:
    return [(d.entry.key, d.entry.payload) for d in deliveries]


def test_compaction_keeps_the_latest_per_key_and_drops_deleted_and_keyless() -> None:
    async def scenario() -> None:
        async with Env() as env:
            producer = _producer(env, "c1")
            kafka_topic = kafka_topic_of(env.topic("c1"))
            ids = [
                producer.send(b"a1", key="a"),
                producer.send(b"b1", key="b"),
                producer.send(b"nokey"),
                producer.send(b"a2", key="a"),
                producer.send(b"c1", key="c"),
                producer.send(b"", key="b"),  # deletes b
            ]
            producer.close()
            compactor = Compactor(kafka_topic)
            admin = env.transport.admin()
            moved = compactor.compact(env.transport, admin, 1)
            assert moved == {0: ids[-1].offset + 1}
            view = CompactedView(kafka_topic)
            view.refresh(env.transport, admin)
            records = view.records_from(0, 0)
            assert [(r.key, r.value, r.offset) for r in records] == [
                (b"a", b"a2", ids[3].offset),
                (b"c", b"c1", ids[4].offset),
            ]
            assert view.horizon(0) == ids[-1].offset + 1
            # The data topic keeps every message.
            sizes = compactor.bytes_since_horizon(env.transport, admin, 1)
            assert sizes == {0: 0}

    run(scenario())


def test_a_later_compaction_deletes_and_overrides_earlier_keys() -> None:
    async def scenario() -> None:
        async with Env() as env:
            producer = _producer(env, "c2")
            kafka_topic = kafka_topic_of(env.topic("c2"))
            admin = env.transport.admin()
            compactor = Compactor(kafka_topic)
            producer.send(b"a1", key="a")
            producer.send(b"b1", key="b")
            compactor.compact(env.transport, admin, 1)
            producer.send(b"", key="a")
            b2 = producer.send(b"b2", key="b")
            producer.close()
            assert compactor.bytes_since_horizon(env.transport, admin, 1)[0] > 0
            compactor.compact(env.transport, admin, 1)
            view = CompactedView(kafka_topic)
            view.refresh(env.transport, admin)
            assert [(r.key, r.value, r.offset) for r in view.records_from(0, 0)] == [
                (b"b", b"b2", b2.offset)
            ]
            assert compacted_topic_of(kafka_topic) in admin.list_topics("cmp.")

    run(scenario())


def test_over_threshold_is_strictly_above() -> None:
    assert over_threshold({0: 100, 1: 101, 2: 5}, 100) == [1]
    assert over_threshold({0: 100}, 0) == []


def test_read_compacted_subscription_reads_the_view_then_the_topic() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("c3")
            producer = _producer(env, "c3")
            producer.send(b"a1", key="a")
            producer.send(b"a2", key="a")
            producer.send(b"b1", key="b")
            await env.engine.compact(topic)
            assert env.engine.compaction_status(topic).status is CompactionState.SUCCESS
            producer.send(b"a3", key="a")
            producer.send(b"tail")
            compacted = await env.subscribe(topic, "rc", read_compacted=True)
            got = await take(compacted, 4)
            assert _payloads(got) == [("a", b"a2"), ("b", b"b1"), ("a", b"a3"), (None, b"tail")]
            for d in got:
                compacted.ack(d.message_id)
            assert await quiet(compacted) == []
            # A subscription without readCompacted reads the whole topic.
            full = await env.subscribe(topic, "full")
            assert len(await take(full, 5)) == 5
            producer.close()

    run(scenario())


def test_read_compacted_is_refused_on_shared_subscriptions() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("c4")
            with pytest.raises(NotAllowedError, match="readCompacted only allowed"):
                await env.subscribe(
                    topic, "s", sub_type=SubscriptionType.Shared, read_compacted=True
                )

    run(scenario())


def test_the_sweep_compacts_only_above_the_threshold() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("c5")
            producer = _producer(env, "c5")
            producer.send(b"x" * 50, key="a")
            await env.set_policy(topic, {"compactionThreshold": 10_000})
            assert await env.engine.compact_due() == 0
            await env.set_policy(topic, {"compactionThreshold": 10})
            assert await env.engine.compact_due() == 1
            assert env.engine.compaction_status(topic).horizons == {0: 1}
            assert await env.engine.compact_due() == 0  # nothing new since
            producer.close()

    run(scenario())


def test_a_threshold_removed_while_the_sweep_measures_compacts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sweep reads the threshold, then measures the bytes since the horizon (a
    # Kafka round trip): a removal applied meanwhile, followed by new messages, must
    # not compact them (seen on real Kafka: the horizon jumped past them).
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("c7")
            producer = _producer(env, "c7")
            await env.set_policy(topic, {"compactionThreshold": 10})
            measure = Compactor.bytes_since_horizon

            def removed_then_sent(self: Compactor, *args: object) -> dict[int, int]:
                env.svc.set(PolicyTarget.for_topic(topic), {"compactionThreshold": None})
                producer.send(b"x" * 50, key="a")
                return measure(self, *args)  # type: ignore[arg-type]

            monkeypatch.setattr(Compactor, "bytes_since_horizon", removed_then_sent)
            assert await env.engine.compact_due() == 0
            assert env.engine.compaction_status(topic).horizons.get(0, 0) == 0
            producer.close()

    run(scenario())


def test_the_companion_is_no_mapped_topic_name() -> None:
    companion = compacted_topic_of("p.t.ns.x")
    assert companion == "cmp.p.t.ns.x"
    with pytest.raises(InvalidTopicNameError):
        pulsar_topic_of(companion)


def test_a_namespace_threshold_applies_and_the_topic_one_wins() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("c6")
            producer = _producer(env, "c6")
            producer.send(b"x" * 50, key="a")
            ns = PolicyTarget.namespace_of("t", "ns")
            await asyncio.to_thread(env.svc.set, ns, {"compactionThreshold": 10})
            await env.set_policy(topic, {"compactionThreshold": 10_000})
            assert await env.engine.compact_due() == 0  # the topic's own policy wins
            await env.set_policy(topic, {"compactionThreshold": None})
            assert await env.engine.compact_due() == 1  # the namespace's applies
            await asyncio.to_thread(env.svc.set, ns, {"compactionThreshold": None})
            producer.close()

    run(scenario())


def test_partitions_compact_on_their_own_and_a_new_owner_starts_from_the_horizon() -> None:
    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("c7", partitions=2)
            kafka_topic = kafka_topic_of(topic)
            producer = _producer(env, "c7", 2)
            sent = {key: producer.send(f"{key}1".encode(), key=key) for key in "abcdef"}
            admin = env.transport.admin()
            first = Compactor(kafka_topic)
            moved = first.compact(env.transport, admin, 2, partitions=[0])
            assert set(moved) == {0}
            # The next owner's compactor reads the horizon back from the companion.
            second = Compactor(kafka_topic)
            sizes = second.bytes_since_horizon(env.transport, admin, 2)
            assert sizes[0] == 0 and sizes[1] > 0
            second.compact(env.transport, admin, 2)
            consumer = await env.subscribe(topic, "rc", read_compacted=True)
            got = await take(consumer, 6)
            assert {(d.entry.key, d.message_id) for d in got} == {
                (k, mid) for k, mid in sent.items()
            }
            producer.close()

    run(scenario())
