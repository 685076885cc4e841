"""Dispatch per subscription type: which consumer gets a partition's next message.

As Pulsar's ``PersistentDispatcherSingleActiveConsumer``, ``…MultipleConsumers`` and
``…StickyKeyConsumers``, one dispatcher per subscription, over each served partition's
:class:`~._dispatch_part.DispatchPart`:

* **Exclusive** – one consumer; a second one is refused by the engine.
* **Failover** – per partition the active consumer is ``sorted(consumers)[p % n]`` (by
  name); the others stand by. When the active consumer changes (one joins or leaves),
  what the old one holds unacknowledged is delivered again to the new one, in order.
* **Shared** – round robin over the consumers that have permits; acknowledgements are
  individual; a leaving consumer's unacknowledged messages go to the others.
* **Key_Shared** – Pulsar's consistent-hash ring (100 points per consumer name) maps a
  message's sticky key (its ordering key, else its partition key) to one consumer by its
  Murmur3 hash. A key is never out with two consumers at once: while a consumer holds
  unacknowledged messages of a key, that key's later messages wait for it even if the
  ring now points elsewhere, so per-key order holds across joins.

A dispatcher decides; the subscription (:class:`DispatchHost`) owns what a decision
touches: the TTL, delayed delivery, the durable dispatch mark and the delivery itself.
Every delivery takes its messages (a stored entry's messages not acknowledged yet by batch
index) from the topic's
``dispatchRate`` limiter of that partition and from the subscription's
``subscriptionDispatchRate`` limiter of that partition.
"""

from __future__ import annotations

import abc
import heapq
import logging
from typing import Protocol

from ._consumer import Consumer
from ._cursor import Entry
from ._dispatch_part import DispatchPart, sticky_hash
from ._ratelimit import acquire_all
from ._selectors import KeySharedSelector, failover_active
from ._types import SubscriptionType

logger = logging.getLogger(__name__)

__all__ = ["DispatchHost", "Dispatcher", "dispatcher_for"]


class DispatchHost(Protocol):
    """What a dispatcher asks of its subscription."""

    @property
    def label(self) -> str:
        """``topic/subscription``, for the log."""
        ...

    @property
    def unacked_blocked(self) -> bool:
        """Dispatch paused by ``maxUnackedMessagesOnSubscription``."""
        ...

    def ttl_cutoff_ms(self) -> int:
        """Messages published at or before this time are expired (-1: no TTL)."""
        ...

    def expire(self, part: DispatchPart, entry: Entry) -> None:
        """Acknowledge ``entry`` without delivering it (``messageTTLInSeconds``)."""
        ...

    def hold_back(self, part: DispatchPart, entry: Entry) -> bool:
        """Put ``entry`` aside if it is not due yet (delayed delivery)."""
        ...

    def undurable(self, part: DispatchPart, entry: Entry) -> bool:
        """True if ``entry`` must wait for a commit's dispatch mark to cover it."""
        ...

    def deliver(self, part: DispatchPart, entry: Entry, consumer: Consumer) -> None:
        """Hand ``entry`` to ``consumer``."""
        ...


class Dispatcher(abc.ABC):
    """The dispatch of one subscription type (see the module docstring)."""

    #: Whether messages with a delivery time wait for it (Pulsar: Shared and Key_Shared).
    delays = False

    def __init__(self, host: DispatchHost) -> None:
        self._host = host

    def prepare(self, part: DispatchPart) -> None:
        """Set ``part`` up for this type (served anew, or the type was just set)."""
        part.selector = None
        part.inflight_by_hash.clear()
        part.active = None

    def add(self, part: DispatchPart, consumer: Consumer) -> None:
        """``consumer`` was attached to ``part`` (it is in ``part.consumers``)."""
        return  # only Key_Shared keeps per-consumer state (its ring)

    def remove(self, part: DispatchPart, consumer: Consumer) -> None:
        """``consumer`` was detached from ``part`` (no longer in ``part.consumers``)."""
        return  # only Key_Shared keeps per-consumer state (its ring)

    def repick(self, part: DispatchPart) -> None:
        """The consumers of ``part`` changed: choose again whom it dispatches to."""
        return  # only the single-active types pick one consumer

    @abc.abstractmethod
    def dispatch(self, part: DispatchPart) -> float:
        """Deliver what ``part`` can deliver now; returns how long a rate limit asks to
        wait before the next try (0: nothing waits for a rate)."""

    def next_entry(self, part: DispatchPart) -> Entry | None:
        """The message ``part`` delivers next, replays first (expired ones are
        acknowledged, delayed ones put aside on the way); None if there is none or it
        must wait for a durable mark."""
        host = self._host
        if host.unacked_blocked:
            return None
        cutoff = host.ttl_cutoff_ms()
        replay = part.replay
        while replay:
            entry = replay[0]
            if entry.acked or entry.holder is not None or entry.nacked:
                heapq.heappop(replay)
                continue
            if entry.publish_ms <= cutoff:
                heapq.heappop(replay)
                host.expire(part, entry)
                continue
            return None if host.undurable(part, entry) else entry
        pending = part.pending
        while pending:
            entry = pending[0]
            if entry.acked or entry.holder is not None:
                pending.popleft()
                continue
            if entry.publish_ms <= cutoff:
                pending.popleft()
                host.expire(part, entry)
                continue
            if self.delays and entry.deliver_at and host.hold_back(part, entry):
                pending.popleft()
                continue
            return None if host.undurable(part, entry) else entry
        return None


class SingleActiveDispatcher(Dispatcher):
    """Exclusive and Failover: one active consumer per partition."""

    def __init__(self, host: DispatchHost, *, exclusive: bool) -> None:
        super().__init__(host)
        self._exclusive = exclusive

    def repick(self, part: DispatchPart) -> None:
        if self._exclusive:
            new = part.consumers[0] if part.consumers else None
        else:
            new = failover_active(part.consumers, part.pulsar_index)
        old = part.active
        if new is old:
            return
        part.active = new
        for changed in (old, new):
            if changed is not None:
                changed.active_changed.set()
        if old is not None:
            # Like Pulsar's cursor rewind: what the old active consumer holds goes again
            # to the new one, in offset order (acknowledged ones are skipped).
            for entry in part.held_by(old):
                part.requeue(entry)
        if new is not None:
            logger.info("%s[%d]: active consumer is now %s", self._host.label, part.index, new.name)

    def dispatch(self, part: DispatchPart) -> float:
        consumer = part.active
        if consumer is None:
            return 0.0
        limiters = part.limiters
        while consumer.can_receive():
            entry = self.next_entry(part)
            if entry is None:
                return 0.0
            wait = acquire_all(limiters, entry.size, entry.unacked)
            if wait > 0.0:
                return wait
            part.take(entry)
            self._host.deliver(part, entry, consumer)
        return 0.0


class SharedDispatcher(Dispatcher):
    """Shared: round robin over the consumers with permits."""

    delays = True

    def dispatch(self, part: DispatchPart) -> float:
        consumers = part.consumers
        limiters = part.limiters
        while True:
            entry = self.next_entry(part)
            if entry is None:
                return 0.0
            n = len(consumers)
            chosen = -1
            for i in range(n):
                if consumers[(part.rr + i) % n].can_receive():
                    chosen = (part.rr + i) % n
                    break
            if chosen < 0:
                return 0.0
            wait = acquire_all(limiters, entry.size, entry.unacked)
            if wait > 0.0:
                return wait
            part.rr = (chosen + 1) % n  # round robin advances only on a delivery
            part.take(entry)
            self._host.deliver(part, entry, consumers[chosen])


class KeySharedDispatcher(Dispatcher):
    """Key_Shared: a key's messages go to the consumer its hash maps to, in order."""

    delays = True

    def __init__(self, host: DispatchHost, *, lookahead: int) -> None:
        super().__init__(host)
        #: Messages scanned past a blocked key per dispatch.
        self._lookahead = lookahead

    def prepare(self, part: DispatchPart) -> None:
        super().prepare(part)
        selector = part.selector = KeySharedSelector()
        for consumer in part.consumers:
            selector.add(consumer)

    def add(self, part: DispatchPart, consumer: Consumer) -> None:
        if part.selector is not None:
            part.selector.add(consumer)

    def remove(self, part: DispatchPart, consumer: Consumer) -> None:
        if part.selector is not None:
            part.selector.remove(consumer)

    def _scan(self, part: DispatchPart) -> tuple[list[Entry], list[Entry]]:
        """Take the replays and up to ``lookahead`` pending messages, in order (expired
        ones acknowledged, delayed ones put aside)."""
        host = self._host
        replay = sorted(e for e in part.replay if not (e.acked or e.holder or e.nacked))
        part.replay = []
        cutoff = host.ttl_cutoff_ms()
        if cutoff >= 0:
            for entry in replay:
                if entry.publish_ms <= cutoff:
                    host.expire(part, entry)
            replay = [e for e in replay if not e.acked]
        scanned: list[Entry] = []
        pending = part.pending
        while pending and len(scanned) < self._lookahead:
            entry = pending.popleft()
            if entry.acked or entry.holder is not None:
                continue
            if entry.publish_ms <= cutoff:
                host.expire(part, entry)
                continue
            if entry.deliver_at and host.hold_back(part, entry):
                continue
            scanned.append(entry)
        return replay, scanned

    def dispatch(self, part: DispatchPart) -> float:
        selector = part.selector
        if selector is None or not any(c.can_receive() for c in part.consumers):
            return 0.0
        host = self._host
        limiters = part.limiters
        replay, scanned = self._scan(part)
        kept_replay: list[Entry] = []
        kept_pending: list[Entry] = []
        blocked: set[int] = set()
        wait = 0.0
        for entries, keep in ((replay, kept_replay), (scanned, kept_pending)):
            for entry in entries:
                if wait > 0.0 or host.unacked_blocked:
                    keep.append(entry)
                    continue
                h = sticky_hash(entry)
                if h in blocked:
                    keep.append(entry)
                    continue
                if host.undurable(part, entry):
                    blocked.add(h)  # keeps the key's order
                    keep.append(entry)
                    continue
                consumer = selector.select(h)
                hold = part.inflight_by_hash.get(h)
                if (
                    consumer is None
                    or (hold is not None and hold[0] is not consumer)
                    or not consumer.can_receive()
                ):
                    blocked.add(h)
                    keep.append(entry)
                    continue
                wait = acquire_all(limiters, entry.size, entry.unacked)
                if wait > 0.0:
                    keep.append(entry)
                    continue
                host.deliver(part, entry, consumer)
        part.replay = kept_replay  # sorted, hence a valid heap
        part.pending.extendleft(reversed(kept_pending))
        return wait


def dispatcher_for(
    sub_type: SubscriptionType, host: DispatchHost, *, key_shared_lookahead: int
) -> Dispatcher:
    """The dispatcher of ``sub_type``."""
    if sub_type is SubscriptionType.Exclusive:
        return SingleActiveDispatcher(host, exclusive=True)
    if sub_type is SubscriptionType.Failover:
        return SingleActiveDispatcher(host, exclusive=False)
    if sub_type is SubscriptionType.Shared:
        return SharedDispatcher(host)
    return KeySharedDispatcher(host, lookahead=key_shared_lookahead)
