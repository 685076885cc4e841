"""An unloaded bundle closes its topics' clients even when this sidecar claims it again
(Pulsar's unload always closes the topic): the engine compares ownership terms."""

from __future__ import annotations

import asyncio

from sync import PolicyService, TopicName
from sync._kafka_names import kafka_topic_of
from sync.messaging import (
    CloseCause,
    InitialPosition,
    MessagingConfig,
    MessagingEngine,
    OwnerInfo,
    ProducerConfig,
)
from sync.transport import MemoryTransport, TopicSpec


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
        deadline = asyncio.get_running_loop().time() + 5
        while not consumer.closed and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
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
