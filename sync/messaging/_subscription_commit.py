"""Writing a subscription's position to Kafka: what survives a restart, a crash or a move.

A durable subscription's position is its consumer group's committed offset per served
partition, with the individual-ack set and a dispatch mark in the commit metadata (see
:mod:`._cursor`). At-least-once, as Pulsar:

* **Nothing unacknowledged is lost.** The committed offset never passes a message that is
  not acknowledged, and the commit metadata only lists acknowledged offsets, so every
  message not acknowledged at the last successful commit is delivered again by whichever
  sidecar loads the subscription next. The commit also carries the dispatch mark (the
  first offset never dispatched): a message below it may have reached a consumer before
  the move, so it comes back with ``redeliveryCount`` >= 1 (Pulsar keeps the count in
  memory only and says 0 after a broker crash). The mark is written *ahead*: nothing at
  or above the committed mark is dispatched. The reader thread commits a mark over each
  fetched batch before it hands the batch over (:mod:`._reader`); if that commit fails,
  the messages it did not cover are held (:meth:`SubscriptionCommitter.hold_for_mark`),
  a commit is asked for at once, and they go when one succeeds. So after a kill -9 or a
  move, every message that may have reached a consumer comes back with
  ``redeliveryCount`` >= 1. While commits fail, nothing new is dispatched; they are
  retried every ``commit_interval_s``.
  Bounded by Kafka, not by us: messages the topic's ``retention.ms``/``retention.bytes``
  deletes are gone acknowledged or not (Pulsar keeps unacknowledged messages unless a
  backlog quota or TTL says otherwise); a subscription whose group commits nothing for
  ``offsets.retention.minutes`` (7 days by default) is forgotten by Kafka — a loaded
  subscription re-commits every ``commit_keepalive_s``, an unloaded one does not.
* **Nothing acknowledged is delivered again** once its acknowledgement is committed:
  at most ``commit_interval_s`` (100 ms) after the ack frame arrives, at once when a
  partition's last consumer leaves, and before a clean shutdown or unload returns (and
  before the consumers of a moved topic are told to reconnect). Two exceptions
  give duplicates, never losses: acknowledgements newer than the last commit when the
  process dies (a ≤ 100 ms window), and acknowledged ranges or partially acknowledged
  entries (batch indexes, ``ps2``) that do not fit in the commit metadata budget
  (``ack_metadata_max_bytes``; logged, counted in
  :attr:`SubscriptionCommitter.dropped_ack_ranges`).
* Two sidecars serving one partition of a subscription at once (a zombie old owner that
  has not noticed its session expired: a moving bundle's topics are otherwise closed
  before the new owner may claim it) both commit; the last commit wins, which can only
  re-deliver messages, never skip an unacknowledged one (each commit covers only what a
  client acknowledged). Only here can a message come back with ``redeliveryCount`` 0:
  the newer owner read the dispatch mark before the older one moved it on.

Runs on the event loop; the Kafka calls run on the subscription's reader thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping

from ._config import MessagingConfig
from ._dispatch_part import DispatchPart
from ._reader import SubscriptionReader

logger = logging.getLogger(__name__)

__all__ = ["SubscriptionCommitter"]

#: A committed position: the offset and the commit metadata.
Position = tuple[int, str]


class SubscriptionCommitter:
    """Commits the positions of a subscription's served partitions (see the module)."""

    def __init__(
        self,
        label: str,
        config: MessagingConfig,
        parts: Mapping[int, DispatchPart],
        on_covered: Callable[[], None],
    ) -> None:
        self._label = label
        self._config = config
        #: The subscription's served partitions (its own dict, read here).
        self._parts = parts
        #: Called when a commit covered the messages held for a mark: dispatch again.
        self._on_covered = on_covered
        self.reader: SubscriptionReader | None = None
        #: Something changed since the last commit.
        self.dirty = False
        #: Dispatch waits for a commit's mark (see :meth:`hold_for_mark`).
        self._held = False
        self._wanted = asyncio.Event()
        #: Per partition: the last position written.
        self.last: dict[int, Position] = {}
        self.last_at = 0.0
        #: Since when commits fail (None: the last one succeeded).
        self.failing_since: float | None = None
        self.commits = 0
        self.dropped_ack_ranges = 0

    def changed(self) -> None:
        """A position changed (an ack, an expiry, a skip or a dispatch mark)."""
        self.dirty = True

    def hold_for_mark(self) -> None:
        """Dispatch is held until a commit's dispatch mark covers what was read: commit
        now, and call ``on_covered`` once one succeeds."""
        if not self._held:
            self._held = True
            self.dirty = True  # the next commit moves the mark over what was read
            self._wanted.set()

    def taken_up(self, positions: Mapping[int, Position]) -> None:
        """Partitions were taken up at ``positions`` (read from Kafka)."""
        self.last.update(positions)
        self.last_at = time.monotonic()

    def given_up(self, partition: int) -> None:
        """A partition is no longer served here."""
        self.last.pop(partition, None)

    async def run(self) -> None:
        """Commit every ``commit_interval_s`` when something changed, and at once when a
        dispatch waits for its mark; a failed commit is retried after the interval."""
        interval = self._config.commit_interval_s
        wanted = self._wanted
        while True:
            if not wanted.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval):
                        await wanted.wait()
            wanted.clear()
            keepalive = time.monotonic() - self.last_at >= self._config.commit_keepalive_s
            if self.dirty or keepalive:
                await self.commit(force=keepalive)
                if self.failing_since is not None:
                    await asyncio.sleep(interval)

    async def commit(self, *, force: bool = False, only: Collection[int] | None = None) -> None:
        """Commit the acknowledged prefix and the individual-ack set of every served
        partition (or of those in ``only``).

        Only partitions whose position changed are written, unless ``force``. A failure
        is logged and retried at the next interval (the acks stay in memory).
        """
        reader = self.reader
        if reader is None or not self._parts:
            return
        if only is None:
            self.dirty = False
            parts = list(self._parts.values())
        else:
            parts = [self._parts[p] for p in only if p in self._parts]
        offsets: dict[int, Position] = {}
        marks: dict[int, int] = {}
        for part in parts:
            position, mark = self._position(part)
            marks[part.index] = mark
            if force or self.last.get(part.index) != position:
                offsets[part.index] = position
        if not offsets:
            return
        try:
            await reader.commit(offsets)
        except Exception as exc:
            self.dirty = True
            if self.failing_since is None:
                self.failing_since = time.monotonic()
            logger.warning("%s: commit failed (will retry): %s", self._label, exc)
            return
        self.failing_since = None
        for part in parts:
            if part.index in offsets:
                part.cursor.durable = max(part.cursor.durable, marks[part.index])
        self.last.update((p, o) for p, o in offsets.items() if p in self._parts)
        self.last_at = time.monotonic()
        self.commits += 1
        if self._held and only is None:
            self._held = False
            self._on_covered()

    def _position(self, part: DispatchPart) -> tuple[Position, int]:
        """What to commit for ``part``: its position and its dispatch mark."""
        cursor = part.cursor
        if self._held and cursor.read_pos > cursor.dispatched:
            # Dispatch is held for a durable mark: write the mark ahead, over what was
            # read, so the messages held can go once this commit succeeds.
            cursor.dispatched = cursor.read_pos
        offset, metadata, dropped = cursor.commit_point(self._config.ack_metadata_max_bytes)
        if dropped:
            self.dropped_ack_ranges += dropped
            logger.warning(
                "%s[%d]@%d: %d acknowledged range(s) or partially acknowledged entries "
                "do not fit in the commit metadata; "
                "they would be redelivered after a restart",
                self._label,
                part.index,
                offset,
                dropped,
            )
        return (offset, metadata), cursor.dispatched
