"""Admission of consumers and producers (on connect), with Pulsar's refusals.

=============================== ================================================ ==========
check                           refusal (``reason``)                              error
=============================== ================================================ ==========
subscriptionTypesEnabled        ``Topic[{<topic>}] doesn't support <T> sub type!`` NotAllowed
maxSubscriptionsPerTopic        ``Exceed the maximum number of subscriptions of   NotAllowed
                                the topic: <topic>``
maxConsumerPerTopic             ``Topic reached max consumers limit``             ConsumerBusy
other type on the subscription  ``Subscription is of different type``             SubscriptionBusy
Exclusive already taken         ``Exclusive consumer is already connected``       ConsumerBusy
maxConsumersPerSubscription     ``Subscription reached max consumers limit``      ConsumerBusy
maxProducerPerTopic             ``Topic reached max producers limit``             ProducerBusy
a Shared producer, an exclusive ``Topic has an existing exclusive producer: <n>`` ProducerBusy
one holds the topic (or waits)
an Exclusive producer, another  ``Topic has an existing exclusive producer: <n>`` Producer-
exclusive / shared ones         / ``Topic has existing shared producers``        Fenced
=============================== ================================================ ==========

A ``WaitForExclusive`` producer is queued while the topic has other producers
(:mod:`._exclusive_wait`) and holds it once it is its turn.

An ``ExclusiveWithFencing`` producer closes every other producer of its partitions (as
Pulsar fences them) and then holds them.

Counts are per partition, as in Pulsar where every partition is a topic: a connection to
the base topic counts on every partition, one to ``…-partition-N`` on partition N only.
``maxSubscriptionsPerTopic`` counts durable subscriptions (Kafka consumer groups), not
just connected ones.

Each check raises the refusal; the engine calls them under the topic's lock.
"""

from __future__ import annotations

from sync._errors import (
    ConsumerBusyError,
    NotAllowedError,
    ProducerAccessFencedError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusyError,
    SubscriptionBusyError,
)
from sync.naming._names import TopicName

from ._backlog import BACKLOG_EXCEEDED, BacklogAction
from ._exclusive_wait import MustWait
from ._policy import TopicLimits
from ._ratelimit import RateLimiter
from ._subscription import Subscription
from ._topic_state import TopicProducer, TopicState
from ._types import ProducerAccessMode, SubscriptionType

__all__ = [
    "admit_consumer",
    "admit_new_subscription",
    "admit_producer",
    "admit_producer_access",
    "admit_producer_backlog",
    "admit_read_compacted",
    "admit_topic_epoch",
    "admit_sub_type",
    "take_subscribe_permit",
]


def admit_read_compacted(topic: TopicName, sub_type: SubscriptionType) -> None:
    """``readCompacted`` is for Exclusive and Failover subscriptions only (as Pulsar)."""
    if not sub_type.single_active:
        raise NotAllowedError(
            "readCompacted only allowed on failover or exclusive subscriptions",
            topic=str(topic),
        )


def admit_sub_type(topic: TopicName, limits: TopicLimits, sub_type: SubscriptionType) -> None:
    """``subscriptionTypesEnabled``."""
    if not limits.type_enabled(sub_type):
        raise NotAllowedError(
            f"Topic[{{{topic}}}] doesn't support {sub_type.value} sub type!",
            topic=str(topic),
        )


def take_subscribe_permit(
    ts: TopicState, topic: TopicName, limits: TopicLimits, consumer_name: str | None
) -> None:
    """``subscribeRate``: one bucket per consumer name."""
    if limits.subscribe_rate.unlimited:
        return
    who = consumer_name or ""
    limiter = ts.subscribe_limiters.get(who)
    if limiter is None:
        limiter = ts.subscribe_limiters[who] = RateLimiter(limits.subscribe_rate)
    if limiter.wait_s(0) > 0.0:
        raise NotAllowedError(
            "Subscribe limited by subscribe rate limit per consumer.",
            topic=str(topic),
        )
    limiter.consume(0)


def admit_new_subscription(
    topic: TopicName, limits: TopicLimits, subscription: str, existing: set[str]
) -> None:
    """``maxSubscriptionsPerTopic``, counting the durable subscriptions ``existing``."""
    if subscription not in existing and len(existing) >= limits.max_subscriptions_per_topic:
        raise NotAllowedError(
            f"Exceed the maximum number of subscriptions of the topic: {topic.base}",
            topic=str(topic),
        )


def admit_consumer(
    ts: TopicState,
    topic: TopicName,
    limits: TopicLimits,
    parts: frozenset[int],
    sub: Subscription | None,
    sub_type: SubscriptionType,
) -> None:
    """``maxConsumerPerTopic``, then what the subscription ``sub`` (None: new) allows."""
    if limits.max_consumers_per_topic > 0 and any(
        len(ts.consumers_on(p)) >= limits.max_consumers_per_topic for p in parts
    ):
        raise ConsumerBusyError("Topic reached max consumers limit", topic=str(topic))
    if sub is not None and sub.consumers:
        if sub.sub_type is not sub_type:
            raise SubscriptionBusyError("Subscription is of different type", topic=str(topic))
        if sub_type is SubscriptionType.Exclusive and any(sub.consumers_on(p) for p in parts):
            raise ConsumerBusyError("Exclusive consumer is already connected", topic=str(topic))
        if limits.max_consumers_per_subscription > 0 and any(
            len(sub.consumers_on(p)) >= limits.max_consumers_per_subscription for p in parts
        ):
            raise ConsumerBusyError("Subscription reached max consumers limit", topic=str(topic))


def admit_producer(
    ts: TopicState, topic: TopicName, limits: TopicLimits, parts: frozenset[int]
) -> None:
    """``maxProducerPerTopic``."""
    if limits.max_producers_per_topic > 0 and any(
        len(ts.producers_on(p)) >= limits.max_producers_per_topic for p in parts
    ):
        raise ProducerBusyError("Topic reached max producers limit", topic=str(topic))


def admit_producer_access(
    ts: TopicState,
    topic: TopicName,
    mode: ProducerAccessMode,
    parts: frozenset[int],
    *,
    waiting: bool = False,
) -> list[TopicProducer]:
    """Pulsar's producer access modes, per partition; returns the producers an
    ``ExclusiveWithFencing`` producer closes (none for the other modes). ``waiting``: a
    ``WaitForExclusive`` producer is queued for these partitions (it counts as an
    exclusive holder for Shared and Exclusive producers, as in Pulsar).

    Raises:
        MustWait: a ``WaitForExclusive`` producer while others write to ``parts``.
    """
    others: dict[int, TopicProducer] = {}
    for p in parts:
        for handle in ts.producers_on(p):
            others[handle.seq] = handle
    shared = ProducerAccessMode.Shared
    holder = next((h for h in others.values() if h.producer.config.access_mode is not shared), None)
    if mode is ProducerAccessMode.ExclusiveWithFencing:
        return list(others.values())
    if mode is ProducerAccessMode.WaitForExclusive:
        if others:
            raise MustWait(topic)
        return []
    if holder is not None or waiting:
        name = "null" if holder is None else holder.producer.config.producer_name
        text = f"Topic has an existing exclusive producer: {name}"
        if mode is ProducerAccessMode.Shared:
            raise ProducerBusyError(text, topic=str(topic))
        raise ProducerAccessFencedError(text, topic=str(topic))
    if mode is ProducerAccessMode.Exclusive and others:
        raise ProducerAccessFencedError("Topic has existing shared producers", topic=str(topic))
    return []


def admit_topic_epoch(topic: TopicName, current: int | None, presented: int | None) -> int:
    """Pulsar's topic epoch for an exclusive producer (``AbstractTopic.
    incrementTopicEpochIfNeeded``): one that reconnects with the epoch it held the topic
    under is refused once another exclusive producer has held it since; otherwise the
    epoch it holds the topic under: the one it presents, else the next (0 first).

    Raises:
        ProducerAccessFencedError: "Topic epoch has already moved. …".
    """
    if presented is not None and presented < (-1 if current is None else current):
        raise ProducerAccessFencedError(
            f"Topic epoch has already moved. Current epoch: {current}, Producer epoch: "
            f"{presented}",
            topic=str(topic),
        )
    return presented if presented is not None else (-1 if current is None else current) + 1


def admit_producer_backlog(ts: TopicState, topic: TopicName) -> None:
    """A backlog quota in force refuses new producers (exception, or held: error)."""
    if ts.backlog_state is BacklogAction.producer_exception:
        raise ProducerBlockedQuotaExceededException(BACKLOG_EXCEEDED, topic=str(topic))
    if ts.backlog_state is not None:
        raise ProducerBlockedQuotaExceededError(BACKLOG_EXCEEDED, topic=str(topic))
