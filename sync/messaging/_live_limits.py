"""Policies applied to a topic's live connections (the engine's periodic re-read and its
policy listener call :func:`apply_live_limits`): rates updated, and the connections a
new policy forbids closed, newest first, with cause POLICY and Pulsar's reason text (a
disabled subscription type; more consumers or producers than a lowered maximum).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from ._consumer import CloseCause, CloseReason, Consumer
from ._policy import TopicLimits
from ._topic_state import TopicProducer, TopicState

logger = logging.getLogger(__name__)

__all__ = ["apply_live_limits"]

_T = TypeVar("_T")


def apply_live_limits(
    ts: TopicState,
    limits: TopicLimits,
    close_producer: Callable[[TopicState, TopicProducer, CloseReason], None],
) -> None:
    """Make ``limits`` the topic's limits and close what they forbid now (producers
    through ``close_producer``); subscriptions and deduplication are the caller's."""
    old, ts.limits = ts.limits, limits
    if old != limits:
        logger.info("%s: applying changed policies %s", ts.topic, limits)
    for limiter in ts.dispatch_limiters:
        limiter.update(limits.dispatch_rate)
    for limiter in ts.publish_limiters:
        limiter.update(limits.publish_rate)
    if limits.subscribe_rate != old.subscribe_rate:
        ts.subscribe_limiters.clear()
    evicted: set[int] = set()
    topic = ts.topic
    for c in ts.consumers():
        if not limits.type_enabled(c.sub_type):
            _evict(c, f"Topic[{{{topic}}}] doesn't support {c.sub_type.value} sub type!")
            evicted.add(c.seq)
    if limits.max_consumers_per_subscription > 0:
        for sub in ts.subscriptions.values():
            for p in range(ts.num_partitions):
                live = [c for c in sub.consumers_on(p) if c.seq not in evicted]
                for c in _newest(live, len(live) - limits.max_consumers_per_subscription):
                    _evict(c, "Subscription reached max consumers limit")
                    evicted.add(c.seq)
    if limits.max_consumers_per_topic > 0:
        for p in range(ts.num_partitions):
            live = [c for c in ts.consumers_on(p) if c.seq not in evicted]
            for c in _newest(live, len(live) - limits.max_consumers_per_topic):
                _evict(c, "Topic reached max consumers limit")
                evicted.add(c.seq)
    if limits.max_producers_per_topic > 0:
        gone: set[int] = set()
        for p in range(ts.num_partitions):
            live_p = [h for h in ts.producers_on(p) if h.seq not in gone]
            for h in _newest(live_p, len(live_p) - limits.max_producers_per_topic):
                reason = CloseReason(CloseCause.POLICY, "Topic reached max producers limit")
                close_producer(ts, h, reason)
                gone.add(h.seq)


def _evict(consumer: Consumer, reason: str) -> None:
    logger.info("closing consumer %s on %s: %s", consumer.name, consumer.subscription.label, reason)
    # What it leaves unserved is committed by the subscription (on a task).
    consumer.subscription.detach(consumer, CloseReason(CloseCause.POLICY, reason))


def _newest(items: list[_T], excess: int) -> list[_T]:
    """The ``excess`` newest of ``items`` (which are oldest first)."""
    if excess <= 0:
        return []
    return items[-excess:]
