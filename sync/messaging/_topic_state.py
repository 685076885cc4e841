"""A base topic served here: its partitions, live limits, producers and subscriptions.

Pulsar's ``PersistentTopic``: the state every role of the engine shares (the publish
path, the monitors, admission). Producers are held through the :class:`TopicProducer`
protocol so that this module needs nothing from the publish path.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from sync._errors import InvalidInputError, TopicNotFoundError
from sync.naming._names import TopicName

from ._backlog import BacklogAction, BacklogMeasure
from ._consumer import CloseReason, Consumer
from ._dedup import Deduplicator
from ._policy import TopicLimits
from ._producer import MessageId, PartitionedProducer
from ._ratelimit import RateLimiter
from ._subscription import Subscription

__all__ = ["TopicProducer", "TopicState", "partitions_of", "start_offsets"]


class TopicProducer(Protocol):
    """What a topic knows of a producer connection (``_publish.ProducerHandle``)."""

    seq: int
    partitions: frozenset[int]
    producer: PartitionedProducer

    def mark_closed(self, reason: CloseReason | None) -> None:
        """Enter CLOSED (idempotent)."""


@dataclass(eq=False)
class TopicState:
    """A base topic served here: partitions, live limits, producers and subscriptions."""

    topic: TopicName
    kafka_topic: str
    num_partitions: int
    limits: TopicLimits
    dispatch_limiters: list[RateLimiter]
    #: ``publishRate``, one bucket per partition (every partition is a topic in Pulsar).
    publish_limiters: list[RateLimiter] = field(default_factory=list)
    #: ``subscribeRate``: one bucket per consumer name.
    subscribe_limiters: dict[str, RateLimiter] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    producers: dict[int, TopicProducer] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Clear while a ``producer_request_hold`` backlog quota holds the sends.
    writable: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set while a ``producer_request_hold`` backlog quota holds the sends (``writable``'s
    #: complement, to wait on).
    holding: asyncio.Event = field(default_factory=asyncio.Event)
    #: The backlog action in force (None: within every quota).
    backlog_state: BacklogAction | None = None
    backlog: BacklogMeasure | None = None
    backlog_checking: bool = False
    published_msgs: int = 0
    published_bytes: int = 0
    #: Deduplication state, loaded while ``deduplicationEnabled`` applies.
    dedup: Deduplicator | None = None
    #: The ownership term each name in use is served under (:attr:`OwnerInfo.bundle` and
    #: ``claim``), by the name the clients used (absent: unknown).
    owner_claims: dict[TopicName, tuple[str | None, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.writable.set()

    @property
    def partitioned(self) -> bool:
        """More than one partition: message ids carry the partition index."""
        return self.num_partitions > 1

    def consumers(self) -> list[Consumer]:
        """Every attached (not closed) consumer, oldest first."""
        return sorted(
            (c for s in self.subscriptions.values() for c in s.consumers.values() if not c.closed),
            key=lambda c: c.seq,
        )

    def names(self) -> set[TopicName]:
        """The names the live connections used: the base topic and/or its partitions."""
        names = {c.topic for c in self.consumers()}
        names.update(h.producer.topic for h in self.producers.values())
        return names

    def consumers_on(self, partition: int) -> list[Consumer]:
        """Consumers of every subscription attached to ``partition``, oldest first."""
        return [c for c in self.consumers() if partition in c.partitions]

    def producers_on(self, partition: int) -> list[TopicProducer]:
        """Producers writing to ``partition``, oldest first."""
        return sorted(
            (h for h in self.producers.values() if partition in h.partitions),
            key=lambda h: h.seq,
        )


def start_offsets(message_id: MessageId | None, count: int) -> dict[int, int]:
    """A reader's first offset: right after ``message_id`` on its partition."""
    if message_id is None:
        return {}
    partition = message_id.kafka_partition
    if partition >= count:
        raise InvalidInputError(f"messageId names partition {partition}; the topic has {count}")
    return {partition: message_id.offset + 1}


def partitions_of(topic: TopicName, count: int) -> frozenset[int]:
    """The partitions a connection to ``topic`` uses (one, or all ``count``)."""
    if topic.partition_index >= 0:
        if topic.partition_index >= count:
            raise TopicNotFoundError(
                f"Topic {topic} does not exist: {topic.base} has {count} partition(s)",
                topic=str(topic),
            )
        return frozenset({topic.partition_index})
    return frozenset(range(count))
