"""Each producer's records go through a shared Kafka producer with the ``linger.ms`` it
asks for: the engine default for sends that arrive one by one (WebSocket), 0 for sends
that arrive batched by their client (the binary protocol); both are served."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sync import ConfigurationError, PolicyService, TopicName
from sync.messaging import MessageId, MessagingConfig, MessagingEngine, ProducerConfig
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import MemoryTransport, TopicSpec
from sync.transport._memory_producer import MemoryProducer


class _Recording(MemoryTransport):
    """Remembers the ``linger_ms`` of every producer it made."""

    def __init__(self) -> None:
        super().__init__()
        self.lingers: list[int] = []

    def producer(self, **kwargs: Any) -> MemoryProducer:
        self.lingers.append(int(kwargs.get("linger_ms", 0)))
        return super().producer(**kwargs)


async def _scenario() -> tuple[list[int], list[MessageId | None]]:
    transport = _Recording()
    svc = PolicyService(transport).start(timeout_s=10)
    topic = TopicName.parse("persistent://t/ns/linger")
    transport.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), 1))
    engine = MessagingEngine(transport, lambda: svc, config=MessagingConfig(producer_linger_ms=5))
    await engine.start()
    try:
        before = len(transport.lingers)
        one_by_one = await engine.create_producer(topic, ProducerConfig(batching_enabled=False))
        batched = await engine.create_producer(topic, ProducerConfig(linger_ms=0))
        again = await engine.create_producer(topic, ProducerConfig(linger_ms=0))
        lingers = transport.lingers[before:]
        loop = asyncio.get_running_loop()
        done: list[asyncio.Future[MessageId | None]] = [loop.create_future() for _ in range(3)]

        def answer(fut: asyncio.Future[MessageId | None]) -> Any:
            return lambda mid, err: fut.set_result(None if err else mid)

        for handle, fut in zip((one_by_one, batched, again), done, strict=True):
            handle.send(b"x", answer(fut))
        ids = await asyncio.wait_for(asyncio.gather(*done), 10)
        return lingers, ids
    finally:
        await engine.close()
        svc.close()


def test_producers_share_one_client_per_linger_and_every_send_is_confirmed() -> None:
    lingers, ids = asyncio.run(_scenario())
    assert lingers == [5, 0]  # one shared client each, the second linger-0 producer reuses
    assert all(mid is not None for mid in ids)
    assert sorted(mid.offset for mid in ids if mid is not None) == [0, 1, 2]


def test_a_negative_linger_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="linger_ms"):
        ProducerConfig(linger_ms=-1)
