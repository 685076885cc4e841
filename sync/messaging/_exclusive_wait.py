"""Pulsar's ``WaitForExclusive`` producers: queued while their topic has other producers,
then the topic's exclusive producer, in the order they came.

As Pulsar's ``AbstractTopic.incrementTopicEpochIfNeeded``: a ``WaitForExclusive``
producer on a topic with producers is queued (Pulsar's broker answers the client at once
that it is queued, ``PRODUCER_SUCCESS`` with ``producer_ready`` false, and keeps the
request open); while any producer is queued, a new ``Shared`` producer is refused
(ProducerBusy) and a new ``Exclusive`` one fenced, as when an exclusive producer holds the
topic; an ``ExclusiveWithFencing`` producer fails the queued ones (ProducerFenced "Fenced
out"). The first queued producer takes the topic once no other producer writes to its
partitions. Pulsar hands the topic over when its exclusive producer leaves
(``handleProducerRemoved``), and only then: a producer queued behind shared producers
waits there until some exclusive producer comes and goes; here it takes the topic when
the last of them leaves.

Queues are per base topic; two waiters compete when their names overlap (the same name,
or one of them the base topic, whose producers write to every partition). A queued
producer looks again whenever a producer of the engine closes (:meth:`ExclusiveQueue.
notify`) and at least every :data:`RECHECK_S` seconds (a close on another thread, an
unload: then its attempt raises and the client reconnects).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sync._errors import ProducerAccessFencedError
from sync.naming._names import TopicName

__all__ = ["RECHECK_S", "ExclusiveQueue", "MustWait"]

#: The longest a queued producer waits before it looks at its topic again.
RECHECK_S = 1.0

_H = TypeVar("_H")


class MustWait(Exception):
    """A ``WaitForExclusive`` producer's topic has other producers: it stays queued."""


def _overlap(a: TopicName, b: TopicName) -> bool:
    """Whether producers on names ``a`` and ``b`` (of one base topic) share a partition."""
    return a == b or not a.is_partition or not b.is_partition


class _Entry:
    """One queued producer (its own object: two may queue for the same name)."""

    __slots__ = ("fenced", "topic")

    def __init__(self, topic: TopicName) -> None:
        self.topic = topic
        self.fenced = False


class ExclusiveQueue:
    """The queued ``WaitForExclusive`` producers of one engine, by base topic."""

    def __init__(self) -> None:
        self._queues: dict[TopicName, list[_Entry]] = {}
        self._changed = asyncio.Event()

    def waiting(self, topic: TopicName) -> bool:
        """Whether a producer is queued for a partition a producer on ``topic`` uses."""
        return any(_overlap(topic, e.topic) for e in self._queues.get(topic.base, ()))

    def fence(self, topic: TopicName) -> None:
        """An ``ExclusiveWithFencing`` producer took ``topic``: the producers queued for
        its partitions fail with ProducerFenced "Fenced out", as in Pulsar."""
        for entry in self._queues.get(topic.base, ()):
            if _overlap(topic, entry.topic):
                entry.fenced = True
        self.notify()

    def notify(self) -> None:
        """A producer left: every queued producer looks again (on the loop's thread only;
        elsewhere the periodic look suffices)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_turn(
        self,
        topic: TopicName,
        attempt: Callable[[], Awaitable[_H]],
        on_queued: Callable[[], None],
    ) -> _H:
        """Queue a producer for ``topic`` and return what ``attempt`` gives once it is the
        first of the overlapping queued producers and ``attempt`` no longer raises
        :class:`MustWait`; ``on_queued`` is called once, when it first has to wait. Any
        other error of ``attempt`` ends the wait. Leaving the queue (served, refused,
        cancelled) lets the next one look.

        Raises:
            ProducerAccessFencedError: "Fenced out" by an ``ExclusiveWithFencing`` producer.
        """
        queue = self._queues.setdefault(topic.base, [])
        entry = _Entry(topic)
        queue.append(entry)
        queued = False
        try:
            while True:
                changed = self._changed  # taken before looking: a close after it wakes us
                if entry.fenced:
                    raise ProducerAccessFencedError("Fenced out", topic=str(topic))
                ahead = queue[: queue.index(entry)]
                if not any(_overlap(topic, other.topic) for other in ahead):
                    try:
                        return await attempt()
                    except MustWait:
                        pass
                if not queued:
                    queued = True
                    on_queued()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(RECHECK_S):
                        await changed.wait()
        finally:
            queue.remove(entry)
            if not queue and self._queues.get(topic.base) is queue:
                del self._queues[topic.base]
            self.notify()
