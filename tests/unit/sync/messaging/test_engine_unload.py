"""An unloaded bundle closes its topics' clients even when this sidecar claims it again
(Pulsar's unload always closes the topic): the engine compares ownership terms. Ownership
is asked by the name each client used (a partition is owned on its own)."""

from __future__ import annotations

import asyncio

from sync import PolicyService, TopicName
from sync.messaging import (
    CloseCause,
    InitialPosition,
    MessageId,
    MessagingConfig,
    MessagingEngine,
    OwnerInfo,
    ProducerConfig,
    SubscriptionType,
    decode_ack_ranges,
)
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import MemoryTransport, TopicSpec
from tests.support.waits import eventually


class _Terms:
    """Always local; the ownership term changes when the test says so."""

    def __init__(self) -> None:
        self.bundle = "t/ns/0x00000000_0xffffffff"
        self.claim: str | None = "1"

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        return OwnerInfo(local=True, bundle=self.bundle, claim=self.claim)


async def _scenario(
    terms: _Terms, new_claim: str | None, new_bundle: str | None = None
) -> tuple[bool, bool]:
    transport = MemoryTransport()
    svc = PolicyService(transport).start(timeout_s=10)
    topic = TopicName.parse("persistent://t/ns/unload")
    transport.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), 1))
    engine = MessagingEngine(
        transport,
        lambda: svc,
        ownership=terms,
        config=MessagingConfig(ownership_check_s=0.05, policy_check_s=0.05),
    )
    await engine.start()
    try:
        consumer = await engine.subscribe(
            topic, "s", initial_position=InitialPosition.Earliest, pull_mode=True
        )
        producer = await engine.create_producer(topic, ProducerConfig(batching_enabled=False))
        await asyncio.sleep(0.3)  # several ownership checks under the same term
        assert not consumer.closed and not producer.closed
        terms.claim = new_claim
        if new_bundle is not None:
            terms.bundle = new_bundle
        await eventually(
            lambda: consumer.closed, "the consumer closed", timeout_s=5, required=False
        )
        if consumer.closed:
            assert consumer.close_reason is not None
            assert consumer.close_reason.cause is CloseCause.UNLOADED
            assert producer.close_reason is not None
            assert producer.close_reason.cause is CloseCause.UNLOADED
        return consumer.closed, producer.closed
    finally:
        await engine.close()
        svc.close()


def test_a_new_ownership_term_closes_consumers_and_producers() -> None:
    """Unloaded and claimed again by this sidecar: the record's version moved on."""
    terms = _Terms()
    assert asyncio.run(_scenario(terms, "3")) == (True, True)


def test_a_split_that_keeps_the_topic_here_closes_nothing() -> None:
    """Pulsar keeps topics loaded across a split that does not unload."""
    terms = _Terms()
    assert asyncio.run(_scenario(terms, "1", "t/ns/0x00000000_0x80000000")) == (False, False)


def test_an_unknown_term_keeps_the_topic() -> None:
    """No term known (e.g. the bundle is between owners): nothing is closed for it."""
    terms = _Terms()
    assert asyncio.run(_scenario(terms, None)) == (False, False)


class _ByName:
    """Ownership decided per name, as bundles do: the base name lives elsewhere, the
    partitions here until the test moves one."""

    def __init__(self, elsewhere: set[TopicName]) -> None:
        self.elsewhere = elsewhere

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        if topic in self.elsewhere:
            return OwnerInfo(local=False, http_url="http://127.0.0.1:1")
        return OwnerInfo(local=True, bundle="t/ns/0x00000000_0xffffffff", claim="1")


def test_ownership_is_asked_by_the_name_the_client_used() -> None:
    """Consumers of one partition stay while their partition is owned here, wherever the
    base name lives; when the partition moves they are closed, what they acknowledged is
    committed before they are told (they reconnect to the new owner, which reads that),
    and none of them is handed what another one held."""

    async def scenario() -> None:
        transport = MemoryTransport()
        svc = PolicyService(transport).start(timeout_s=10)
        topic = TopicName.parse("persistent://t/ns/by-name")
        kafka_topic = kafka_topic_of(topic)
        transport.admin().ensure_topic(TopicSpec(kafka_topic, 2))
        partition = TopicName.parse(f"{topic}-partition-1")
        ownership = _ByName({topic})
        engine = MessagingEngine(
            transport,
            lambda: svc,
            ownership=ownership,
            config=MessagingConfig(ownership_check_s=0.05, policy_check_s=0.05),
        )
        await engine.start()
        try:
            consumers = [
                await engine.subscribe(
                    partition,
                    "s",
                    sub_type=SubscriptionType.Shared,
                    initial_position=InitialPosition.Earliest,
                )
                for _ in range(2)
            ]
            producer = await engine.create_producer(partition)
            sent: list[MessageId | None] = []
            for payload in (b"m0", b"m1", b"m2", b"m3"):
                producer.send(payload, lambda mid, err: sent.append(None if err else mid))
            while len(sent) < 4:
                await asyncio.sleep(0.01)
            assert None not in sent
            first = [d.message_id for d in await consumers[0].receive_batch()]
            second = [d.message_id for d in await consumers[1].receive_batch()]
            assert (first, second) == (sent[0::2], sent[1::2])  # round robin
            for c, ids in ((consumers[0], first[:1]), (consumers[1], second)):
                for message_id in ids:
                    c.ack(message_id)  # the first consumer still holds m2
            await asyncio.sleep(0.3)  # several ownership checks: the base name is elsewhere
            assert not any(c.closed for c in consumers) and not producer.closed
            ownership.elsewhere.add(partition)
            while not all(c.closed for c in consumers):  # the next check (30 s bound)
                await asyncio.sleep(0)
            # What Kafka holds as the consumers learn that they must reconnect:
            group = consumers[0].subscription.group_id
            position = transport.consumer(group_id=group).committed(kafka_topic, [1])[1]
            assert position is not None
            m2, m3 = (m.offset for m in sent[2:] if m is not None)
            assert position[0] == m2  # acknowledged up to m2, and m3
            assert decode_ack_ranges(*position) == [(m3, m3 + 1)]
            assert [c.delivered_total for c in consumers] == [2, 2]  # m2 not handed on
            for c in consumers:
                assert c.close_reason is not None
                assert c.close_reason.cause is CloseCause.UNLOADED
            assert producer.closed
        finally:
            await engine.close()
            svc.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_release_closes_the_moving_names_before_it_returns() -> None:
    """The ownership member's thread tells the engine which names move away and waits:
    when the call returns their clients are closed (cause UNLOADED), the rest stay. The
    periodic ownership check (an hour here) plays no part."""

    async def scenario() -> None:
        transport = MemoryTransport()
        svc = PolicyService(transport).start(timeout_s=10)
        moving, staying = (TopicName.parse(f"persistent://t/ns/{n}") for n in ("moving", "staying"))
        for topic in (moving, staying):
            transport.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), 1))
        engine = MessagingEngine(
            transport,
            lambda: svc,
            ownership=_Terms(),
            config=MessagingConfig(ownership_check_s=3600),
        )
        await engine.start()
        try:
            consumers = {
                t: await engine.subscribe(
                    t, "s", initial_position=InitialPosition.Earliest, pull_mode=True
                )
                for t in (moving, staying)
            }
            await asyncio.to_thread(engine.release_blocking, lambda name: name == moving)
            reason = consumers[moving].close_reason
            assert consumers[moving].closed
            assert reason is not None and reason.cause is CloseCause.UNLOADED
            assert not consumers[staying].closed
        finally:
            await engine.close()
            svc.close()

    asyncio.run(scenario())
