"""Topic epochs outlive the engine that gave them (Pulsar keeps them in the ledger's
properties): on the in-memory twin of the epoch store, a second engine (a restart, or the
next owner of the bundle) gives a new exclusive producer an epoch above every one given
before, fences a producer that comes back with an epoch moved past, and tells a Shared
producer the epoch the topic is at."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from sync import PolicyService, TopicName
from sync._errors import ProducerAccessFencedError
from sync.messaging import (
    MemoryTopicEpochs,
    MessagingEngine,
    ProducerAccessMode,
    ProducerConfig,
    TopicEpochStore,
)
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import MemoryTransport, TopicSpec

TOPIC = TopicName.parse("persistent://t/ns/epochs")
Mode = ProducerAccessMode


def _config(mode: ProducerAccessMode, name: str, epoch: int | None = None) -> ProducerConfig:
    return ProducerConfig(
        access_mode=mode, producer_name=name, topic_epoch=epoch, batching_enabled=False
    )


@asynccontextmanager
async def _engine(
    transport: MemoryTransport, epochs: TopicEpochStore
) -> AsyncIterator[MessagingEngine]:
    svc = PolicyService(transport).start(timeout_s=10)
    engine = MessagingEngine(transport, lambda: svc, epochs=epochs)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.close()
        svc.close()


def _transport() -> MemoryTransport:
    transport = MemoryTransport()
    transport.admin().ensure_topic(TopicSpec(kafka_topic_of(TOPIC), 1))
    return transport


def test_epochs_outlive_the_engine_that_gave_them() -> None:
    async def scenario() -> None:
        transport, epochs = _transport(), MemoryTopicEpochs()
        async with _engine(transport, epochs) as first:
            ex1 = await first.create_producer(TOPIC, _config(Mode.Exclusive, "ex-1"))
            assert ex1.topic_epoch == 0
            first.close_producer(ex1)
            ex2 = await first.create_producer(TOPIC, _config(Mode.ExclusiveWithFencing, "ex-2"))
            assert ex2.topic_epoch == 1
        # restarted (or moved): a new engine, the same store
        async with _engine(transport, epochs) as second:
            shared = await second.create_producer(TOPIC, _config(Mode.Shared, "sh"))
            assert shared.topic_epoch == 1  # Pulsar tells a Shared producer the epoch too
            second.close_producer(shared)
            ex3 = await second.create_producer(TOPIC, _config(Mode.Exclusive, "ex-3"))
            assert ex3.topic_epoch == 2  # above every epoch given before the restart
            # ex-2 comes back presenting the epoch it held: fenced, ex-3 keeps the topic
            with pytest.raises(ProducerAccessFencedError) as fenced:
                await second.create_producer(TOPIC, _config(Mode.ExclusiveWithFencing, "ex-2", 1))
            assert str(fenced.value) == (
                "Topic epoch has already moved. Current epoch: 2, Producer epoch: 1"
            )
            assert not ex3.closed
            assert epochs.current(TOPIC) == 2
            second.close_producer(ex3)
            # the holder of the current epoch takes it back: nothing moves
            back = await second.create_producer(TOPIC, _config(Mode.WaitForExclusive, "ex-3", 2))
            assert back.topic_epoch == 2

    asyncio.run(scenario())


def test_without_the_store_a_restart_forgets_and_the_old_producer_wins() -> None:
    """What the store is for: a fresh store (Pulsar without its ledger properties) lets
    the producer that came back fence the one that came after it."""

    async def scenario() -> None:
        transport = _transport()
        async with _engine(transport, MemoryTopicEpochs()) as first:
            old = await first.create_producer(TOPIC, _config(Mode.ExclusiveWithFencing, "old"))
            assert old.topic_epoch == 0
        async with _engine(transport, MemoryTopicEpochs()) as second:
            new = await second.create_producer(TOPIC, _config(Mode.ExclusiveWithFencing, "new"))
            assert new.topic_epoch == 0  # the same epoch as the producer before it
            again = await second.create_producer(
                TOPIC, _config(Mode.ExclusiveWithFencing, "old", 0)
            )
            assert again.topic_epoch == 0 and new.closed

    asyncio.run(scenario())


class _Failing(MemoryTopicEpochs):
    """A store that cannot write (the registry unreachable)."""

    def take(self, topic: TopicName, decide: Callable[[int | None], int]) -> int:
        raise ProducerAccessFencedError("no store", topic=str(topic))


def test_a_refused_epoch_opens_no_producer_and_moves_nothing() -> None:
    async def scenario() -> None:
        transport, epochs = _transport(), MemoryTopicEpochs()
        async with _engine(transport, epochs) as engine:
            ex = await engine.create_producer(TOPIC, _config(Mode.Exclusive, "ex"))
            engine.close_producer(ex)
            with pytest.raises(ProducerAccessFencedError):
                await engine.create_producer(TOPIC, _config(Mode.Exclusive, "late", -5))
            assert epochs.current(TOPIC) == 0
            ts = engine.topic_state(TOPIC)
            assert ts is None or not ts.producers
        async with _engine(transport, _Failing()) as engine:
            with pytest.raises(ProducerAccessFencedError, match="no store"):
                await engine.create_producer(TOPIC, _config(Mode.Exclusive, "ex"))
            ts = engine.topic_state(TOPIC)
            assert ts is None or not ts.producers

    asyncio.run(scenario())


def test_the_twin_keeps_each_name_apart_and_a_refusal_changes_nothing() -> None:
    epochs = MemoryTopicEpochs()
    part = TOPIC.partition(1)
    assert epochs.take(TOPIC, lambda cur: (-1 if cur is None else cur) + 1) == 0
    assert epochs.take(part, lambda cur: (-1 if cur is None else cur) + 1) == 0
    assert epochs.take(part, lambda cur: (-1 if cur is None else cur) + 1) == 1

    def refuse(_current: int | None) -> int:
        raise ProducerAccessFencedError("fenced")

    with pytest.raises(ProducerAccessFencedError):
        epochs.take(TOPIC, refuse)
    assert (epochs.current(TOPIC), epochs.current(part)) == (0, 1)
    assert epochs.current(TOPIC.partition(0)) is None
