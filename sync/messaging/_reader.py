"""The thread that owns a subscription's Kafka consumer.

A librdkafka consumer is driven from one thread: this one. The event loop sends it
commands (read committed offsets, assign, pause, resume) and awaits their futures; in
between, it fetches and posts batches to the loop. Messages posted after a re-assignment
may repeat earlier ones; the cursor drops anything below its read position.

Commits are the exception (:meth:`SubscriptionReader.commit`): a message waits for the
commit that covers its dispatch (see :mod:`._subscription`), so a commit must not queue
behind the thread's fetch wait (up to ``poll_s``). librdkafka's commit is thread-safe; it
runs on a worker thread, and the consumer is closed only once no commit is under way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sync._errors import TransportError
from sync.transport import Consumer, Message, Transport

logger = logging.getLogger(__name__)

__all__ = ["SubscriptionReader"]

_T = TypeVar("_T")
#: A function to run on the reader thread, and the future awaiting it (None: nobody waits).
_Command = tuple[Callable[[Consumer], Any], concurrent.futures.Future[Any] | None]


class SubscriptionReader:
    """Fetches a topic's records for one consumer group on a dedicated thread."""

    def __init__(
        self,
        transport: Transport,
        kafka_topic: str,
        group_id: str,
        on_batch: Callable[[Sequence[Message]], None],
        *,
        batch_size: int = 500,
        poll_s: float = 0.05,
    ) -> None:
        self.kafka_topic = kafka_topic
        self.group_id = group_id
        self._transport = transport
        self._on_batch = on_batch
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._commands: queue.SimpleQueue[_Command | None] = queue.SimpleQueue()
        self._assigned: set[int] = set()
        self._paused: set[int] = set()
        self._stop = False
        self._stopping = False
        self._failure: Exception | None = None
        #: The consumer once created; None again once closed (under ``_use``).
        self._consumer: Consumer | None = None
        self._use = threading.Lock()
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

    async def commit(self, offsets: dict[int, tuple[int, str]]) -> None:
        """Commit ``{partition: (offset, metadata)}`` for the group now, not after the
        thread's current fetch wait.

        Raises:
            TransportError: the commit failed, or the reader is stopped.
        """
        if self._consumer is None:  # not created yet: in order, after the creation
            await self.call(lambda c: c.commit(self.kafka_topic, offsets))
            return

        def commit() -> None:
            with self._use:
                consumer = self._consumer
                if consumer is None or self._stopping:
                    raise TransportError(f"{self.group_id}: the reader is stopped")
                consumer.commit(self.kafka_topic, offsets)

        await asyncio.to_thread(commit)

    def post(self, fn: Callable[[Consumer], object]) -> None:
        """Run ``fn(consumer)`` on the reader thread without waiting (errors are logged)."""
        self._commands.put((fn, None))

    def assign(self, offsets: dict[int, int]) -> asyncio.Future[None]:
        """Read these partitions from these offsets (replaces the assignment)."""

        def do(c: Consumer) -> None:
            c.assign(self.kafka_topic, offsets)
            self._assigned = set(offsets)
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
                    self._on_batch(batch)
        finally:
            with self._use:
                self._consumer = None
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
