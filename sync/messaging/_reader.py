"""The thread that owns a subscription's Kafka consumer.

A librdkafka consumer is driven from one thread: this one. The event loop sends it
commands (read committed offsets, assign, pause, resume, commit) and awaits their
futures; in between, it fetches and posts batches to the loop. Messages posted after a
re-assignment may repeat earlier ones; the cursor drops anything below its read position.
(A confluent-kafka consumer blocks any call from another thread while one thread is in
``consume()``: measured, a commit from a second thread never returned.)

Write-ahead dispatch mark (``write_ahead=True``, durable subscriptions; issue 11): before
a fetched batch is posted, this thread commits a dispatch mark over it (the last committed
position and ack set, with ``~d<end of the batch>``, see :mod:`._cursor`), and posts the
batch with the marks that are now durable. So nothing reaches a consumer that a crash
would bring back with redeliveryCount 0, at the price of one commit round trip per
fetched batch. A commit from the loop never lowers a mark this thread committed. If the
write-ahead commit fails, the batch goes without coverage and the subscription holds
those messages until one of its own commits covers them. The mark reaches about a
second of recent traffic beyond the batch (16 to 10,000 messages), so at a steady rate
most batches arrive covered: after a crash, messages that were read or even produced
within that window but never dispatched may also come back with redeliveryCount 1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sync._errors import TransportError
from sync.transport import Consumer, Message, Transport

from ._cursor import DISPATCHED_MARK, split_dispatched

logger = logging.getLogger(__name__)

__all__ = ["SubscriptionReader"]

_T = TypeVar("_T")
#: ``{partition: first offset never dispatched}`` durable in Kafka as of a posted batch.
Marks = dict[int, int]
#: A write-ahead mark reaches this many seconds of the recent read rate beyond its batch,
#: at least _AHEAD_MIN and at most _AHEAD_MAX messages.
_AHEAD_S = 1.0
_AHEAD_MIN = 16
_AHEAD_MAX = 10_000
Offsets = dict[int, tuple[int, str]]
#: A function to run on the reader thread, and the future awaiting it (None: nobody waits).
_Command = tuple[Callable[[Consumer], Any], concurrent.futures.Future[Any] | None]


class SubscriptionReader:
    """Fetches a topic's records for one consumer group on a dedicated thread."""

    def __init__(
        self,
        transport: Transport,
        kafka_topic: str,
        group_id: str,
        on_batch: Callable[[Sequence[Message], Marks], None],
        *,
        batch_size: int = 500,
        poll_s: float = 0.05,
        write_ahead: bool = False,
    ) -> None:
        self.kafka_topic = kafka_topic
        self.group_id = group_id
        self._transport = transport
        self._on_batch = on_batch
        self._write_ahead = write_ahead
        #: Per partition (this thread only): the last committed position and ack set
        #: (without a mark), and the highest dispatch mark committed.
        self._base: Offsets = {}
        self._ahead: Marks = {}
        self.write_ahead_commits = 0
        self.write_ahead_failures = 0
        #: Messages read so far, and as of the last write-ahead commit (its rate sizes
        #: how far ahead the next one reaches).
        self._read = 0
        self._read_at_ahead = 0
        self._ahead_at = time.monotonic()
        #: Per partition: the end of the last batch read (the next offset to read), and
        #: how many messages a mark reaches beyond it (sized by the read rate).
        self._read_end: Marks = {}
        self._window = _AHEAD_MIN
        self._consumer: Consumer | None = None
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._commands: queue.SimpleQueue[_Command | None] = queue.SimpleQueue()
        self._assigned: set[int] = set()
        self._paused: set[int] = set()
        self._stop = False
        self._stopping = False
        self._failure: Exception | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"sub-reader:{group_id}", daemon=True
        )
        self._thread.start()

    def call(self, fn: Callable[[Consumer], _T]) -> asyncio.Future[_T]:
        """Run ``fn(consumer)`` on the reader thread; await the returned future."""
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        if self._failure is not None:
            future.set_exception(self._failure)
        elif not self._thread.is_alive() or self._stopping:
            future.set_exception(TransportError(f"{self.group_id}: the reader is stopped"))
        else:
            self._commands.put((fn, future))
        return asyncio.wrap_future(future)

    def committed(self, partitions: Sequence[int]) -> asyncio.Future[Offsets]:
        """The group's committed ``(offset, metadata)`` per partition (absent: none)."""

        def read(c: Consumer) -> Offsets:
            found = {
                p: entry
                for p, entry in c.committed(self.kafka_topic, list(partitions)).items()
                if entry is not None
            }
            for p, (offset, metadata) in found.items():
                self._remember(p, offset, metadata)
            return found

        return self.call(read)

    def commit(self, offsets: Offsets) -> asyncio.Future[None]:
        """Commit ``{partition: (offset, metadata)}``, never lowering a dispatch mark
        this thread committed ahead of the loop."""
        return self.call(lambda c: self._commit(c, offsets))

    def _commit(self, consumer: Consumer, offsets: Offsets) -> None:
        merged: Offsets = {}
        due = {p for p in offsets if self._mark_due(p)} if self._write_ahead else set()
        window = self._next_window() if due else 0
        for p, (offset, metadata) in offsets.items():
            acks, mark = split_dispatched(metadata)
            mark = max(mark, self._ahead.get(p, 0))
            if p in due:
                # Less than half a window is still covered: this commit, which is paid
                # for anyway, moves the mark on, so the next batches arrive covered and
                # wait for no commit of their own (measured: every batch crossing the
                # mark waited for one, a tail of +10-20 ms once a second at 1,000 msg/s).
                mark = max(mark, self._read_end[p] + window)
            merged[p] = (offset, acks + (f"{DISPATCHED_MARK}{mark}" if mark > offset else ""))
        consumer.commit(self.kafka_topic, merged)
        for p, (offset, metadata) in merged.items():
            self._remember(p, offset, metadata)

    def _mark_due(self, partition: int) -> bool:
        """Whether less than half a window of reading is still covered by the mark."""
        end = self._read_end.get(partition)
        return end is not None and self._ahead.get(partition, 0) - end < self._window // 2

    def _next_window(self) -> int:
        """How far the next mark reaches beyond what was read: about :data:`_AHEAD_S`
        of the read rate since the last extension (between the bounds)."""
        now = time.monotonic()
        elapsed = max(0.05, now - self._ahead_at)
        rate = (self._read - self._read_at_ahead) / elapsed
        self._window = int(min(_AHEAD_MAX, max(_AHEAD_MIN, rate * _AHEAD_S)))
        self._ahead_at, self._read_at_ahead = now, self._read
        return self._window

    def _remember(self, partition: int, offset: int, metadata: str) -> None:
        acks, mark = split_dispatched(metadata)
        self._base[partition] = (offset, acks)
        if mark > self._ahead.get(partition, 0):
            self._ahead[partition] = mark

    def _mark_ahead(self, consumer: Consumer, batch: Sequence[Message]) -> Marks:
        """Commit a dispatch mark over ``batch``; the marks durable now, per partition."""
        ends: Marks = {}
        self._read += len(batch)
        for m in batch:
            p, offset = m.partition(), m.offset()
            if p is not None and offset is not None and offset + 1 > ends.get(p, 0):
                ends[p] = offset + 1
        self._read_end.update(ends)
        want = {
            p: end
            for p, end in ends.items()
            if p in self._base and end > max(self._ahead.get(p, 0), self._base[p][0])
        }
        if want:
            # Cover about a second of traffic beyond the batch, so at a steady rate most
            # batches arrive covered and wait for no commit (a commit queues behind the
            # connection's long-polling fetch: measured +6 ms p50 end to end when every
            # batch waited for one). The subscription's regular commits move it on
            # before it is reached (see _commit).
            window = self._next_window()
            want = {p: end + window for p, end in want.items()}
            offsets = {
                p: (self._base[p][0], f"{self._base[p][1]}{DISPATCHED_MARK}{end}")
                for p, end in want.items()
            }
            try:
                consumer.commit(self.kafka_topic, offsets)
            except Exception as exc:  # noqa: BLE001 - the loop holds what is not covered
                self.write_ahead_failures += 1
                logger.warning(
                    "%s: committing the dispatch mark over %s failed (%s); dispatch waits "
                    "for a commit that covers it",
                    self.group_id,
                    ", ".join(f"{self.kafka_topic}[{p}]@{end}" for p, end in want.items()),
                    exc,
                )
            else:
                self.write_ahead_commits += 1
                self._ahead.update(want)
        return {p: self._ahead[p] for p in ends if p in self._ahead}

    def post(self, fn: Callable[[Consumer], object]) -> None:
        """Run ``fn(consumer)`` on the reader thread without waiting (errors are logged)."""
        self._commands.put((fn, None))

    def assign(self, offsets: dict[int, int]) -> asyncio.Future[None]:
        """Read these partitions from these offsets (replaces the assignment). A partition
        left out is forgotten: no write-ahead mark is committed for it any more, and its
        position is read again (:meth:`committed`) before it is assigned again."""

        def do(c: Consumer) -> None:
            c.assign(self.kafka_topic, offsets)
            self._assigned = set(offsets)
            for p in offsets:  # read again from these offsets: a new end comes with it
                self._read_end.pop(p, None)
            for p in set(self._base) - self._assigned:
                del self._base[p]
                self._ahead.pop(p, None)
                self._read_end.pop(p, None)
            self._paused &= self._assigned
            if self._paused:
                c.pause(self.kafka_topic, sorted(self._paused))

        return self.call(do)

    def pause(self, partitions: Sequence[int]) -> None:
        """Stop fetching these partitions (the read-ahead buffer is full)."""
        parts = list(partitions)

        def do(c: Consumer) -> None:
            c.pause(self.kafka_topic, parts)
            self._paused.update(parts)

        self.post(do)

    def resume(self, partitions: Sequence[int]) -> None:
        """Fetch these partitions again."""
        parts = list(partitions)

        def do(c: Consumer) -> None:
            c.resume(self.kafka_topic, parts)
            self._paused.difference_update(parts)

        self.post(do)

    def stop(self) -> None:
        """Close the Kafka consumer and end the thread (after queued commands ran)."""
        self._stopping = True
        self._commands.put(None)

    def join(self, timeout_s: float = 10.0) -> None:
        """Wait for the thread to end."""
        self._thread.join(timeout_s)

    def _drain(self, consumer: Consumer, block_s: float) -> bool:
        """Run queued commands; False once stop was requested."""
        try:
            if block_s > 0:
                item = self._commands.get(timeout=block_s)
            else:
                item = self._commands.get_nowait()
        except queue.Empty:
            return True
        while True:
            if item is None:
                self._stop = True
                return False
            fn, future = item
            if future is None:
                try:
                    fn(consumer)
                except Exception as exc:
                    logger.warning("%s: reader command failed: %s", self.group_id, exc)
            elif future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(consumer))
                except BaseException as exc:  # handed to the awaiting side
                    future.set_exception(exc)
            try:
                item = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _run(self) -> None:
        try:
            consumer = self._transport.consumer(read_committed=True, group_id=self.group_id)
        except Exception as exc:
            logger.exception("%s: cannot create a Kafka consumer", self.group_id)
            self._failure = TransportError(
                f"{self.group_id}: cannot create a Kafka consumer: {exc}"
            )
            self._fail_queued()
            return
        self._consumer = consumer
        try:
            while not self._stop:
                active = bool(self._assigned - self._paused)
                if not self._drain(consumer, 0.0 if active else 0.1):
                    break
                if not (self._assigned - self._paused):
                    continue
                try:
                    batch = consumer.consume(self._batch_size, self._poll_s)
                except Exception:
                    logger.exception("%s: fetching %s failed", self.group_id, self.kafka_topic)
                    self._drain(consumer, 1.0)  # back off, still serving commands
                    continue
                if batch:
                    marks = self._mark_ahead(consumer, batch) if self._write_ahead else {}
                    self._on_batch(batch, marks)
        finally:
            try:
                consumer.close()
            except Exception:
                logger.exception("%s: closing the Kafka consumer failed", self.group_id)

    def _fail_queued(self) -> None:
        assert self._failure is not None  # noqa: S101 - set by the caller
        while True:
            try:
                item = self._commands.get(timeout=0.5)
            except queue.Empty:
                if self._stopping:
                    return
                continue
            if item is None:
                return
            future = item[1]
            if future is not None and future.set_running_or_notify_cancel():
                future.set_exception(self._failure)
