"""The dispatch state of one partition of a subscription, and its bookkeeping.

A served partition (see :class:`~._subscription.Subscription`) keeps what is read and not
acknowledged (its :class:`PartitionCursor`), a pending queue (read, never delivered), a
replay heap (to deliver again, lowest offset first), the consumers attached to it and
what the subscription type's dispatcher needs (the single active consumer; Key_Shared's
ring and which consumer holds each key). Changed only on the event loop.
"""

from __future__ import annotations

import heapq
from collections import deque

from ._consumer import Consumer
from ._cursor import Entry, PartitionCursor
from ._ratelimit import RateLimiter
from ._selectors import KeySharedSelector, message_sticky_hash

__all__ = ["DispatchPart", "sticky_hash"]


def sticky_hash(entry: Entry) -> int:
    """The Key_Shared hash of ``entry`` (computed once, kept on the entry)."""
    h = entry.sticky_hash
    if h < 0:
        h = entry.sticky_hash = message_sticky_hash(entry.key, entry.headers)
    return h


class DispatchPart:
    """Dispatch state of one served partition."""

    __slots__ = (
        "active",
        "consumers",
        "cursor",
        "index",
        "inflight_by_hash",
        "limiter",
        "paused",
        "pending",
        "pulsar_index",
        "replay",
        "rr",
        "selector",
        "topic_limiter",
    )

    def __init__(
        self, index: int, pulsar_index: int, cursor: PartitionCursor, topic_limiter: RateLimiter
    ) -> None:
        #: The Kafka partition, and the Pulsar partition index (-1: not partitioned).
        self.index = index
        self.pulsar_index = pulsar_index
        self.cursor = cursor
        self.pending: deque[Entry] = deque()
        self.replay: list[Entry] = []
        self.consumers: list[Consumer] = []
        #: Exclusive/Failover: the consumer this partition dispatches to.
        self.active: Consumer | None = None
        #: Shared: where the round robin goes on.
        self.rr = 0
        #: Key_Shared: the hash ring, and per key hash its holder and how many it holds.
        self.selector: KeySharedSelector | None = None
        self.inflight_by_hash: dict[int, tuple[Consumer, int]] = {}
        #: Fetching paused: the pending queue is full.
        self.paused = False
        self.limiter = RateLimiter()
        self.topic_limiter = topic_limiter

    @property
    def limiters(self) -> tuple[RateLimiter, RateLimiter]:
        """The topic's and the subscription's dispatch-rate limiters of this partition."""
        return self.topic_limiter, self.limiter

    def take(self, entry: Entry) -> None:
        """Remove ``entry``, the head of the replay heap or of the pending queue."""
        if self.replay and self.replay[0] is entry:
            heapq.heappop(self.replay)
        else:
            self.pending.popleft()

    def hold(self, entry: Entry, consumer: Consumer) -> None:
        """``entry`` is out with ``consumer`` now (Key_Shared: its key is held too)."""
        entry.holder = consumer
        if self.selector is not None:
            h = sticky_hash(entry)
            hold = self.inflight_by_hash.get(h)
            self.inflight_by_hash[h] = (consumer, 1 if hold is None else hold[1] + 1)

    def release(self, entry: Entry) -> None:
        """``entry`` is no longer out with a consumer (acknowledged or returned)."""
        if entry.holder is None:
            return
        entry.holder = None
        if self.selector is not None:
            hold = self.inflight_by_hash.get(entry.sticky_hash)
            if hold is not None:
                if hold[1] <= 1:
                    del self.inflight_by_hash[entry.sticky_hash]
                else:
                    self.inflight_by_hash[entry.sticky_hash] = (hold[0], hold[1] - 1)

    def requeue(self, entry: Entry) -> None:
        """Deliver ``entry`` again (counted), unless it was acknowledged meanwhile."""
        self.release(entry)
        entry.nacked = False
        if entry.acked:
            return
        entry.redeliveries += 1
        heapq.heappush(self.replay, entry)

    def held_by(self, consumer: Consumer) -> list[Entry]:
        """What ``consumer`` holds of this partition (delivered or negatively acked)."""
        return [
            e
            for e in (*consumer.delivered.values(), *consumer.nack_pending.values())
            if e.holder is consumer and e.partition == self.index
        ]
