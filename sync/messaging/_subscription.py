"""One Pulsar subscription on one topic: reading, dispatching, acknowledging, committing.

A subscription owns one Kafka consumer (on a :class:`SubscriptionReader` thread) in the
consumer group ``policy-sync.sub/<kafka topic>/<subscription>``, assigned the partitions
it *serves*: those a consumer attached here reads. The partitions of one topic are owned
one by one (a Pulsar client looks each up on its own), so two sidecars may serve one
subscription, each its own partitions; a partition is taken up from its committed
position when its first consumer attaches and given up (committed, no longer read,
forgotten) when its last one leaves, so only one sidecar at a time reads, dispatches and
commits it (see :meth:`Subscription.serve`). Per served partition it keeps a
:class:`PartitionCursor` (what is read and not yet acknowledged), a pending queue (read,
never delivered), a replay heap (to deliver again, lowest offset first) and the consumers
attached to that partition.

Dispatch per subscription type is :mod:`._dispatchers`' (Exclusive, Failover, Shared,
Key_Shared, as Pulsar's dispatchers); the position written to Kafka and what it
guarantees across restarts, crashes and moves is :mod:`._subscription_commit`'s.
Redelivery counts are kept per message while its partition is served and, for the
messages it held, when it is given up and served again here; a message that may have
reached a consumer elsewhere or before a restart comes back with at least 1.

A ``readCompacted`` subscription (Exclusive/Failover, readers) takes, on load, the
compacted view's messages below each partition's compaction horizon instead of the
topic's, then reads the topic from the horizon (see :mod:`._compaction`).

Runs on the event loop; only :meth:`_post_batch` is called from the reader thread.

Why this file is past 600 lines: it is one state machine (loading, serving and giving
up partitions, attaching consumers, reading, acks, TTL, delayed delivery) whose parts
share the per-partition state, changed only on the loop; what could leave without
spreading those invariants has (dispatch per type, commits, the partition state).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence

from sync._constants import (
    HEADER_COMPACTED_KEPT,
    HEADER_ENTRY,
    HEADER_ENTRY_COUNT,
    SUBSCRIPTION_GROUP_PREFIX,
)
from sync._errors import TransportError
from sync.messaging._message_id import MessageId
from sync.naming._names import TopicName
from sync.transport import Message, Transport

from ._compaction import CompactedRecord, CompactedView
from ._config import MessagingConfig
from ._consumer import CloseReason, Consumer, Delivery
from ._cursor import Entry, PartitionCursor
from ._delayed import HEADER_DELIVER_AT, DelayedQueue
from ._dispatch_part import DispatchPart
from ._dispatchers import Dispatcher, dispatcher_for
from ._policy import TopicLimits
from ._ratelimit import RateLimiter
from ._reader import SubscriptionReader
from ._subscription_commit import SubscriptionCommitter
from ._types import InitialPosition, SubscriptionState, SubscriptionType, transition

logger = logging.getLogger(__name__)

__all__ = ["Subscription", "subscription_group"]


_INGESTING = frozenset(
    {SubscriptionState.LOADING, SubscriptionState.ACTIVE, SubscriptionState.IDLE}
)


def subscription_group(kafka_topic: str, subscription: str) -> str:
    """The Kafka consumer group that holds a subscription's position."""
    return f"{SUBSCRIPTION_GROUP_PREFIX}{kafka_topic}/{subscription}"


class Subscription:
    """A subscription served by this sidecar (create and attach via the engine).

    Durable by default: its position is a Kafka consumer group's committed offsets. A
    non-durable one (``durable=False``: Pulsar's readers) starts at ``start_offsets`` /
    the initial position, commits nothing and is closed as soon as its consumer leaves.
    """

    def __init__(
        self,
        *,
        topic: TopicName,
        kafka_topic: str,
        name: str,
        num_partitions: int,
        partitioned: bool,
        transport: Transport,
        config: MessagingConfig,
        topic_limiters: Sequence[RateLimiter],
        limits: Callable[[], TopicLimits],
        on_idle: Callable[[Subscription], None],
        durable: bool = True,
        start_offsets: Mapping[int, int] | None = None,
        compacted: CompactedView | None = None,
    ) -> None:
        self.topic = topic
        #: ``readCompacted``: the compacted view read below each partition's horizon.
        self._compacted = compacted
        self.durable = durable
        self._start_offsets = dict(start_offsets or {})
        self.kafka_topic = kafka_topic
        self.name = name
        self.group_id = subscription_group(kafka_topic, name)
        self.label = f"{topic}/{name}"
        self.num_partitions = num_partitions
        self.partitioned = partitioned
        self.config = config
        self.state = SubscriptionState.LOADING
        self.sub_type: SubscriptionType | None = None
        self.consumers: dict[int, Consumer] = {}
        self._dispatcher: Dispatcher | None = None
        #: Messages acknowledged on the subscription's behalf by ``messageTTLInSeconds``.
        self.expired = 0
        #: Dispatch paused by ``maxUnackedMessagesOnSubscription``.
        self._unacked_blocked = False
        #: Delayed delivery: messages put aside until due, and the timer that wakes them.
        self._delayed = DelayedQueue()
        self._delayed_timer: asyncio.TimerHandle | None = None
        self._transport = transport
        self._topic_limiters = list(topic_limiters)
        self._limits = limits
        self._on_idle = on_idle
        #: The partitions served here (a consumer of each is attached), by index.
        self._parts: dict[int, DispatchPart] = {}
        #: Taking partitions up and giving them up, one at a time.
        self._serving = asyncio.Lock()
        self._initial_position = InitialPosition.Latest
        #: Per partition given up: the redelivery counts of the messages it held, taken
        #: again when it is served again (Pulsar's redelivery tracker is per subscription).
        self._counts: dict[int, dict[int, int]] = {}
        self._giving_up: set[asyncio.Task[None]] = set()
        self._loop = asyncio.get_running_loop()
        self._reader: SubscriptionReader | None = None
        self._committer = SubscriptionCommitter(
            self.label, config, self._parts, self.schedule_dispatch
        )
        self._dispatch_scheduled = False
        self._throttle_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._commit_task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------
    def _set_state(self, new: SubscriptionState) -> None:
        self.state = transition(self.state, new, f"subscription {self.label}")

    async def load(self, initial_position: InitialPosition, partitions: Collection[int]) -> None:
        """Start reading: create the position where there is none, serve ``partitions``
        (see :meth:`serve`).

        Raises:
            TransportError: Kafka failed (the subscription is FAILED; close it).
        """
        self._initial_position = initial_position
        self._reader = SubscriptionReader(
            self._transport,
            self.kafka_topic,
            self.group_id,
            self._post_batch,
            batch_size=self.config.fetch_batch,
            write_ahead=self.durable,
        )
        if self.durable:
            self._committer.reader = self._reader
        try:
            await self.serve(partitions)
        except BaseException:
            self._set_state(SubscriptionState.FAILED)
            self._reader.stop()
            raise
        self._set_state(SubscriptionState.ACTIVE)
        self.apply_limits(self._limits())  # also dispatches what arrived while loading
        if self.durable:
            self._commit_task = asyncio.create_task(
                self._committer.run(), name=f"commit:{self.label}"
            )
        logger.debug("subscription %s loaded: %s", self.label, self._committer.last)

    def start_at(self, offsets: Mapping[int, int]) -> None:
        """A non-durable subscription: partitions not served yet start at these offsets
        when taken up (each reader of a partitioned topic names its own start)."""
        for p, offset in offsets.items():
            if p not in self._parts:
                self._start_offsets[p] = offset

    async def serve(self, partitions: Collection[int]) -> None:
        """Read, dispatch and commit ``partitions`` too (those served already are kept).

        A partition is served while a consumer of it is attached here, and its position is
        read from Kafka each time it is taken up, never kept from an earlier time: another
        sidecar may have served it meanwhile (each partition is owned on its own). So
        exactly one sidecar writes a partition's position at a time, and what it delivers
        again is marked by the dispatch mark the last one committed (see :mod:`._cursor`).

        Raises:
            TransportError: Kafka failed; nothing was taken up.
        """
        reader = self._reader
        if reader is None:
            raise TransportError(f"{self.label}: not loaded")
        async with self._serving:
            new = sorted(p for p in set(partitions) if p not in self._parts)
            if not new:
                return
            positions = await self._positions(reader, new)
            limits = self._limits()
            for p in new:
                offset, metadata = positions[p]
                part = DispatchPart(
                    p,
                    p if self.partitioned else -1,
                    PartitionCursor(p, offset, metadata),
                    self._topic_limiters[p],
                )
                part.limiter.update(limits.subscription_dispatch_rate)
                if self._dispatcher is not None:
                    self._dispatcher.prepare(part)
                counts = self._counts.pop(p, None)
                if counts:
                    self._counts[p] = {o: n for o, n in counts.items() if o >= offset}
                self._parts[p] = part
            self._committer.taken_up({p: positions[p] for p in new})
            if self._compacted is not None:
                self._read_compacted(self._compacted, [self._parts[p] for p in new])
            try:
                await reader.assign({p: part.cursor.read_pos for p, part in self._parts.items()})
            except BaseException:
                for p in new:
                    del self._parts[p]
                    self._committer.given_up(p)
                raise
        if self.state is not SubscriptionState.LOADING:
            logger.info("%s: partitions %s taken up at %s", self.label, new, positions)

    async def _positions(
        self, reader: SubscriptionReader, parts: list[int]
    ) -> dict[int, tuple[int, str]]:
        """The committed ``(offset, metadata)`` of ``parts``; where there is none, the
        initial position (committed at once when durable)."""
        topic = self.kafka_topic
        if self.durable:
            found = await reader.committed(parts)
            committed = {p: found.get(p) for p in parts}
        else:
            given = self._start_offsets
            committed = {p: (given[p], "") if p in given else None for p in parts}
        missing = [p for p in parts if committed.get(p) is None]
        if missing:
            if self._initial_position is InitialPosition.Earliest:
                starts = await reader.call(lambda c: c.start_offsets(topic, missing))
            else:
                starts = await reader.call(lambda c: c.end_offsets(topic, missing))
            created = {p: (starts[p], "") for p in missing}
            if self.durable:
                # Durable from the start: messages published from now on belong to it.
                await reader.commit(created)
            committed.update(created)
            logger.info(
                "created subscription %s at %s (%s)",
                self.label,
                {p: o for p, (o, _) in created.items()},
                self._initial_position.value,
            )
        return {p: entry for p, entry in committed.items() if entry is not None}

    def _give_up_soon(self) -> None:
        """Give up the partitions left without a consumer, on a task (see :meth:`_give_up`)."""
        task = asyncio.create_task(self._give_up(), name=f"give-up:{self.label}")
        self._giving_up.add(task)
        task.add_done_callback(self._giving_up.discard)

    async def _settle(self) -> None:
        """Wait until the partitions given up so far are committed and no longer read."""
        if self._giving_up:
            await asyncio.gather(*self._giving_up)

    async def _give_up(self) -> None:
        """Give up the partitions no consumer here reads any more: commit their position,
        stop reading them and forget them (what they held is read again from Kafka when
        they are served again). The redelivery counts of the messages they held are kept."""
        async with self._serving:
            gone = [p for p, part in self._parts.items() if not part.consumers]
            if not gone or not self.attached:
                return
            await self.commit(force=True, only=gone)
            if not self.attached:
                return  # closing: close() commits and stops reading
            for p in gone:
                part = self._parts.pop(p)
                self._committer.given_up(p)
                counts = self._counts.pop(p, {})  # of messages not read again yet
                counts.update(
                    (e.offset, e.redeliveries)
                    for e in part.cursor.entries.values()
                    if e.redeliveries
                )
                if counts:
                    self._counts[p] = counts
            reader = self._reader
            if reader is not None:
                try:
                    await reader.assign(
                        {p: part.cursor.read_pos for p, part in self._parts.items()}
                    )
                except Exception as exc:  # noqa: BLE001 - the reader failed; close() follows
                    logger.warning("%s: giving up partitions %s failed: %s", self.label, gone, exc)
        logger.info("%s: partitions %s given up (no consumer here)", self.label, gone)

    async def close(self, reason: CloseReason | None = None) -> None:
        """Commit the position, then disconnect every consumer and stop reading.

        The consumers are told last, so where they reconnect (here or, after a move, on
        the next owner) their acknowledgements are committed already.
        """
        if self.state in (SubscriptionState.CLOSING, SubscriptionState.CLOSED):
            await self._closed.wait()
            return
        loaded = self.state in (SubscriptionState.ACTIVE, SubscriptionState.IDLE)
        if self.state is not SubscriptionState.FAILED:
            self._set_state(SubscriptionState.CLOSING)
        for timer in (self._throttle_timer, self._idle_timer, self._delayed_timer):
            if timer is not None:
                timer.cancel()
        if self._commit_task is not None:
            self._commit_task.cancel()
        try:
            if loaded:
                await self.commit(force=True)
        finally:
            for consumer in list(self.consumers.values()):
                consumer.mark_closed(reason)
            self.consumers.clear()
            if self._reader is not None:
                self._reader.stop()
                await asyncio.to_thread(self._reader.join)
            self._set_state(SubscriptionState.CLOSED)
            self._closed.set()
            logger.info("subscription %s closed", self.label)

    # -- consumers ---------------------------------------------------------------------
    @property
    def attached(self) -> bool:
        """Whether the subscription can take consumers (loaded and not closing)."""
        return self.state in (SubscriptionState.ACTIVE, SubscriptionState.IDLE)

    @property
    def served(self) -> frozenset[int]:
        """The partitions served here now (see :meth:`serve`)."""
        return frozenset(self._parts)

    def consumers_on(self, partition: int) -> list[Consumer]:
        """Consumers attached to a partition and not closed, in connection order."""
        part = self._parts.get(partition)
        return [] if part is None else [c for c in part.consumers if not c.closed]

    def active_consumer(self, partition: int) -> Consumer | None:
        """Exclusive/Failover: the consumer ``partition`` dispatches to now (if any)."""
        part = self._parts.get(partition)
        return None if part is None else part.active

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer (the engine has checked types and limits, and its partitions
        are served: see :meth:`serve`)."""
        dispatcher = self._dispatcher
        if not self.consumers or dispatcher is None:
            dispatcher = self._set_type(consumer.sub_type)
        if self.state is SubscriptionState.IDLE:
            self._set_state(SubscriptionState.ACTIVE)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self.consumers[consumer.seq] = consumer
        for p in sorted(consumer.partitions):
            part = self._parts[p]
            part.consumers.append(consumer)
            dispatcher.add(part, consumer)
            dispatcher.repick(part)
        consumer.update_blocked(self._limits().max_unacked_per_consumer)
        logger.info(
            "consumer %s joined %s (%s, partitions %s)",
            consumer.name,
            self.label,
            consumer.sub_type.value,
            sorted(consumer.partitions),
        )
        self.dispatch()

    def _set_type(self, sub_type: SubscriptionType) -> Dispatcher:
        self.sub_type = sub_type
        dispatcher = self._dispatcher = dispatcher_for(
            sub_type, self, key_shared_lookahead=self.config.key_shared_lookahead
        )
        for part in self._parts.values():
            dispatcher.prepare(part)
        return dispatcher

    async def remove_consumer(self, consumer: Consumer, reason: CloseReason | None = None) -> None:
        """Detach a consumer; the partitions it leaves without a consumer have their
        position committed before this returns (the next consumer may come to another
        sidecar, or after a restart)."""
        self.detach(consumer, reason)
        await self._settle()

    async def hand_over(self, consumers: Collection[Consumer], reason: CloseReason) -> None:
        """Detach consumers whose topic is served elsewhere now. The partitions they leave
        are committed and no longer read here *before* the consumers are told to close,
        so the owner they reconnect to loads what they acknowledged here."""
        for consumer in consumers:  # none of them gets what another one held
            self._detach(consumer, dispatch=False)
        self.dispatch()
        await self._settle()
        for consumer in consumers:
            consumer.mark_closed(reason)

    def detach(self, consumer: Consumer, reason: CloseReason | None = None) -> bool:
        """Detach a consumer now; what it holds unacknowledged goes to the others, and the
        partitions it leaves without a consumer are given up (on a task).

        Returns True if the subscription has no consumer left (it turned IDLE).
        """
        idle = self._detach(consumer)
        consumer.mark_closed(reason)
        return idle

    def _detach(self, consumer: Consumer, *, dispatch: bool = True) -> bool:
        if self.consumers.pop(consumer.seq, None) is None:
            return False
        held = [*consumer.unhold_all(), *consumer.nack_pending.values()]
        consumer.nack_pending.clear()
        dispatcher = self._dispatcher
        for p in consumer.partitions:
            part = self._parts[p]
            part.consumers.remove(consumer)
            if dispatcher is not None:
                dispatcher.remove(part, consumer)
        for entry in held:
            if entry.holder is consumer:
                self._parts[entry.partition].requeue(entry)
        if dispatcher is not None:
            for p in consumer.partitions:
                dispatcher.repick(self._parts[p])
        if any(not self._parts[p].consumers for p in consumer.partitions):
            self._give_up_soon()
        logger.info(
            "consumer %s left %s (%d unacked message(s) to redeliver)",
            consumer.name,
            self.label,
            sum(1 for e in held if not e.acked),
        )
        idle = False
        if not self.consumers and self.state is SubscriptionState.ACTIVE:
            self._set_state(SubscriptionState.IDLE)
            self._idle_timer = self._loop.call_later(
                self.config.idle_subscription_close_s if self.durable else 0.0,
                self._idle_expired,
            )
            idle = True
        if dispatch:
            self.dispatch()
        return idle

    def _idle_expired(self) -> None:
        self._idle_timer = None
        if self.state is SubscriptionState.IDLE and not self.consumers:
            self._on_idle(self)

    # -- policies ----------------------------------------------------------------------
    def apply_limits(self, limits: TopicLimits) -> None:
        """Apply changed policies: dispatch rates and the unacked-messages limit."""
        for part in self._parts.values():
            part.limiter.update(limits.subscription_dispatch_rate)
        for consumer in self.consumers.values():
            consumer.update_blocked(limits.max_unacked_per_consumer)
        self.dispatch()

    # -- reading -----------------------------------------------------------------------
    def _post_batch(self, batch: Sequence[Message], marks: Mapping[int, int]) -> None:
        # Reader thread: hand the batch to the loop, with the dispatch marks now durable.
        try:
            self._loop.call_soon_threadsafe(self._ingest, batch, marks)
        except RuntimeError:  # loop closed while shutting down
            pass

    def _ingest(self, batch: Sequence[Message], marks: Mapping[int, int]) -> None:
        # A batch may arrive before load() resumes (LOADING): keep it, cursors exist.
        if not self._parts or self.state not in _INGESTING:
            return
        parts = self._parts
        for index, mark in marks.items():
            served = parts.get(index)
            if served is not None:
                cursor = served.cursor
                cursor.durable = max(cursor.durable, mark)
                cursor.dispatched = max(cursor.dispatched, mark)
        for m in batch:
            p = m.partition()
            offset = m.offset()
            part = None if p is None else parts.get(p)
            if part is None or offset is None:
                continue  # a partition given up since it was fetched
            if not part.cursor.accept(offset):
                continue
            self._add_entry(part, offset, m.key(), m.value() or b"", m.headers(), m.timestamp()[1])
        self.dispatch()

    def _read_compacted(self, view: CompactedView, parts: Sequence[DispatchPart]) -> None:
        """``readCompacted``: below a partition's compaction horizon, take the compacted
        view's messages (latest per key, their data-topic offsets) instead of the topic,
        then read the topic from the horizon (Pulsar's ``CompactorSubscription`` read)."""
        for part in parts:
            horizon = view.horizon(part.index)
            if part.cursor.read_pos >= horizon:
                continue
            records: list[CompactedRecord] = view.records_from(part.index, part.cursor.read_pos)
            for r in records:
                if part.cursor.accept(r.offset):
                    self._add_entry(part, r.offset, r.key, r.value, r.headers, r.publish_ms)
            part.cursor.skip_to(horizon)
            logger.info(
                "%s[%d]: %d message(s) from the compacted view, then the topic from %d",
                self.label,
                part.index,
                len(records),
                horizon,
            )

    def _add_entry(
        self,
        part: DispatchPart,
        offset: int,
        raw_key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes]] | None,
        publish_ms: int,
    ) -> None:
        entry = Entry(
            part.index,
            offset,
            None if raw_key is None else raw_key.decode("utf-8", "replace"),
            value,
            headers,
            publish_ms,
        )
        if headers:
            kept: int | None = None
            for name, raw in headers:
                if name == HEADER_DELIVER_AT:
                    with contextlib.suppress(ValueError, TypeError):
                        entry.deliver_at = int(raw)
                elif name == HEADER_ENTRY:
                    entry.stored_entry = True  # its version is checked at dispatch
                elif name == HEADER_ENTRY_COUNT:
                    with contextlib.suppress(ValueError, TypeError):
                        entry.count = max(1, int(raw))
                elif name == HEADER_COMPACTED_KEPT:
                    with contextlib.suppress(ValueError, TypeError):
                        kept = int(raw, 16)
            if kept is not None:  # a rebuilt batch of the compacted view: the messages
                # compacted out count as acknowledged (dispatched in the entry's ack_set)
                entry.acked_bits = ((1 << entry.count) - 1) & ~kept
        counts = self._counts.get(part.index)
        if counts:
            entry.redeliveries = counts.pop(offset, 0)  # redelivered before it was given up
        if part.cursor.possibly_delivered(offset) and not entry.redeliveries:
            entry.redeliveries = 1  # it may have reached a consumer before a move
        part.cursor.add(entry)
        if entry.acked_bits and not entry.unacked:  # restored with every index acked
            part.cursor.ack(offset)
            self._committer.changed()
            return
        part.pending.append(entry)

    def _flow_control(self) -> None:
        reader = self._reader
        if reader is None:
            return
        high = self.config.read_ahead
        low = high // 2
        parts = self._parts.values()
        pause = [p.index for p in parts if not p.paused and len(p.pending) >= high]
        resume = [p.index for p in parts if p.paused and len(p.pending) <= low]
        for p in pause:
            self._parts[p].paused = True
        for p in resume:
            self._parts[p].paused = False
        if pause:
            reader.pause(pause)
        if resume:
            reader.resume(resume)

    # -- dispatching -------------------------------------------------------------------
    def schedule_dispatch(self) -> None:
        """Dispatch once on the next loop iteration (coalesces bursts of acks)."""
        if not self._dispatch_scheduled:
            self._dispatch_scheduled = True
            self._loop.call_soon(self._scheduled_dispatch)

    def _scheduled_dispatch(self) -> None:
        self._dispatch_scheduled = False
        self.dispatch()

    def _check_unacked(self) -> bool:
        """Apply ``maxUnackedMessagesOnSubscription``: True while dispatch is paused
        (from the limit until the unacknowledged messages drop to half of it, as Pulsar)."""
        limit = self._limits().max_unacked_per_subscription
        if limit <= 0:
            self._unacked_blocked = False
            return False
        held = sum(c.held_messages for c in self.consumers.values())
        if self._unacked_blocked:
            if held * 2 < limit or held == 0:
                self._unacked_blocked = False
                logger.info("%s: dispatch resumed (%d unacked)", self.label, held)
        elif held >= limit:
            self._unacked_blocked = True
            logger.info(
                "%s: dispatch paused: %d unacked (maxUnackedMessagesOnSubscription %d)",
                self.label,
                held,
                limit,
            )
        return self._unacked_blocked

    def dispatch(self) -> None:
        """Hand pending messages to consumers that can take them, within the rates."""
        if not self.attached:
            return
        if self._check_unacked():
            return
        wait = 0.0
        dispatcher = self._dispatcher
        if self.consumers and dispatcher is not None:
            for part in self._parts.values():
                if not part.consumers:
                    continue
                w = dispatcher.dispatch(part)
                if w > 0.0 and (wait == 0.0 or w < wait):
                    wait = w
        if wait > 0.0 and self._throttle_timer is None:
            self._throttle_timer = self._loop.call_later(wait, self._throttle_expired)
        self._flow_control()

    def _throttle_expired(self) -> None:
        self._throttle_timer = None
        self.dispatch()

    # -- what the dispatcher asks (see _dispatchers.DispatchHost) ----------------------
    @property
    def unacked_blocked(self) -> bool:
        """Dispatch paused by ``maxUnackedMessagesOnSubscription``."""
        return self._unacked_blocked

    def undurable(self, part: DispatchPart, entry: Entry) -> bool:
        """Hold a message back until a commit's dispatch mark covers it: delivered
        before, it would come back after a crash or an ownership move with
        redeliveryCount 0. Asks for a commit now; dispatch resumes after it."""
        if not self.durable or entry.offset < part.cursor.durable:
            return False
        self._committer.hold_for_mark()
        return True

    def deliver(self, part: DispatchPart, entry: Entry, consumer: Consumer) -> None:
        """Hand ``entry`` to ``consumer`` (it holds it until it acks or returns it)."""
        part.hold(entry, consumer)
        if part.cursor.mark_dispatched(entry.offset):
            self._committer.changed()  # the next commit carries the dispatch mark
        consumer.hold((part.index, entry.offset), entry)
        consumer.push(
            Delivery(
                MessageId(part.pulsar_index, entry.offset),
                entry,
                entry.redeliveries,
                entry.acked_bits,
            )
        )
        limits = self._limits()
        consumer.update_blocked(limits.max_unacked_per_consumer)
        if limits.max_unacked_per_subscription > 0:
            self._check_unacked()

    # -- delayed delivery --------------------------------------------------------------
    def hold_back(self, part: DispatchPart, entry: Entry) -> bool:
        """Put a message not due yet aside (asked by Shared and Key_Shared), while
        delayed delivery is enabled."""
        limits = self._limits()
        if not limits.delayed_enabled:
            return False
        if entry.deliver_at <= int(time.time() * 1000):
            return False
        self._delayed.add(part.index, entry, limits.delayed_tick_ms)
        self._arm_delayed()
        return True

    def _arm_delayed(self) -> None:
        due = self._delayed.next_due_s()
        if due is None:
            return
        if self._delayed_timer is not None:
            if self._delayed_timer.when() <= self._loop.time() + due:
                return
            self._delayed_timer.cancel()
        self._delayed_timer = self._loop.call_later(due, self._release_delayed)

    def _release_delayed(self) -> None:
        self._delayed_timer = None
        for p, entry in self._delayed.pop_due():
            part = self._parts.get(p)
            if part is not None and part.cursor.entries.get(entry.offset) is entry:
                heapq.heappush(part.replay, entry)  # unacked, and not from an earlier serve
        self._arm_delayed()
        self.dispatch()

    # -- message TTL -------------------------------------------------------------------
    def ttl_cutoff_ms(self) -> int:
        """Messages published at or before this time are expired (-1: no TTL)."""
        ttl = self._limits().message_ttl_s
        if ttl <= 0:
            return -1
        return int(time.time() * 1000) - ttl * 1000

    def expire(self, part: DispatchPart, entry: Entry) -> None:
        """Pulsar's expiry: acknowledge the message without delivering it."""
        if part.cursor.ack(entry.offset) is not None:
            self.expired += 1
            self._committer.changed()

    def skip_to(self, offsets: dict[int, int]) -> int:
        """Move the position of some served partitions forward (backlog eviction): every
        message below the offset is acknowledged, read or not; returns how many were in
        memory. Partitions not served here are left alone."""
        skipped = 0
        for p, target in offsets.items():
            part = self._parts.get(p)
            if part is None:
                continue  # not served here: its position is not this sidecar's to move
            for entry in list(part.cursor.entries.values()):
                if entry.offset >= target:
                    break
                if part.cursor.ack(entry.offset) is not None:
                    part.release(entry)
                    skipped += 1
            part.cursor.read_pos = max(part.cursor.read_pos, target)  # unread: dropped
            part.pending = deque(e for e in part.pending if not e.acked)
            self._committer.changed()
        if offsets:
            logger.info("%s: positions moved forward to %s (backlog eviction)", self.label, offsets)
            self._flow_control()
            self.schedule_dispatch()
        return skipped

    def expire_messages(self) -> int:
        """Acknowledge every buffered message older than ``messageTTLInSeconds`` that is
        not out with a consumer (the periodic check); returns how many."""
        cutoff = self.ttl_cutoff_ms()
        if cutoff < 0 or not self.attached:
            return 0
        before = self.expired
        for part in self._parts.values():
            expired = self.expired
            for entry in list(part.cursor.entries.values()):
                if entry.holder is None and entry.publish_ms <= cutoff:
                    self.expire(part, entry)
            if self.expired != expired:  # the buffer shrinks: reading may resume
                part.pending = deque(e for e in part.pending if not e.acked)
        count = self.expired - before
        if count:
            logger.info("%s: %d message(s) expired by messageTTLInSeconds", self.label, count)
            self._flow_control()
            self.schedule_dispatch()
        return count

    # -- acknowledgements --------------------------------------------------------------
    def _part_of(self, message_id: MessageId) -> DispatchPart | None:
        return self._parts.get(message_id.kafka_partition)

    def ack(self, consumer: Consumer, message_id: MessageId, unacked: int | None = None) -> None:
        """Individual acknowledgement from ``consumer`` (from any consumer of the sub);
        ``unacked``: by batch index (see :meth:`Consumer.ack`)."""
        part = self._part_of(message_id)
        if part is None or not self.attached:
            return
        if unacked is not None and not self._ack_indexes(part, message_id.offset, unacked):
            return  # the entry is not acknowledged whole yet (or unknown)
        key = (part.index, message_id.offset)
        had = consumer.unhold(key)
        if had is None:
            had = consumer.nack_pending.pop(key, None)
        entry = part.cursor.ack(message_id.offset)
        if entry is not None:
            holder = entry.holder
            part.release(entry)
            if holder is not None and holder is not consumer:
                holder.unhold(key)
                holder.nack_pending.pop(key, None)
                holder.update_blocked(self._limits().max_unacked_per_consumer)
            self._committer.changed()
        consumer.acked_total += 1
        if had is not None or entry is not None:
            consumer.update_blocked(self._limits().max_unacked_per_consumer)
            self.schedule_dispatch()

    def _ack_indexes(self, part: DispatchPart, offset: int, unacked: int) -> bool:
        """A batch-index acknowledgement of the entry at ``offset``: the indexes not in
        ``unacked`` are acknowledged (Pulsar's ``batchDeletedIndexes``; kept across
        restarts by the ``ps2`` commit metadata). True if that acknowledges the whole
        entry, or the entry is not in the cursor (acknowledged already): the caller
        acknowledges it as one (which also forgets a consumer's stale hold of it).

        An ack set naming indexes past the entry's messages is for a batch this engine
        counts as one message (a record of the ``message`` format holding an encrypted
        batch): ignored, the entry is acknowledged when the client acknowledges all of it.
        """
        entry = part.cursor.entries.get(offset)
        if entry is None:
            return True
        if unacked >> entry.count:
            return False
        full = (1 << entry.count) - 1
        acked = full & ~unacked
        if (entry.acked_bits | acked) == full:
            return True
        entry, newly = part.cursor.ack_indexes(offset, acked)
        if entry is None or not newly:
            return False
        holder = entry.holder
        limits = self._limits()
        if holder is not None:
            holder.indexes_acked((part.index, offset), entry, newly)
            holder.update_blocked(limits.max_unacked_per_consumer)
        self._committer.changed()
        self.schedule_dispatch()
        return False

    def nack(self, consumer: Consumer, message_id: MessageId) -> None:
        """Negative acknowledgement: deliver again after the consumer's nack delay."""
        part = self._part_of(message_id)
        if part is None or not self.attached:
            return
        key = (part.index, message_id.offset)
        entry = consumer.unhold(key)
        if entry is None:
            return
        consumer.update_blocked(self._limits().max_unacked_per_consumer)
        if entry.holder is consumer and not entry.acked:
            entry.nacked = True
            consumer.nack_pending[key] = entry
            self._loop.call_later(
                consumer.negative_ack_delay_s, self._nack_expired, part, entry, consumer
            )
        self.schedule_dispatch()

    def _nack_expired(self, part: DispatchPart, entry: Entry, consumer: Consumer) -> None:
        consumer.nack_pending.pop((part.index, entry.offset), None)
        if entry.acked or entry.holder is not consumer or not entry.nacked:
            return
        part.requeue(entry)
        self.dispatch()

    # -- committing --------------------------------------------------------------------
    async def commit(self, *, force: bool = False, only: Collection[int] | None = None) -> None:
        """Commit the position of every partition served here (or of those in ``only``;
        see :meth:`SubscriptionCommitter.commit`)."""
        await self._committer.commit(force=force, only=only)

    # -- introspection -----------------------------------------------------------------
    def backlog(self) -> int:
        """Messages read and not acknowledged (in memory; not the Kafka lag)."""
        return sum(len(p.cursor.entries) for p in self._parts.values())

    def mark_delete_position(self, partition: int) -> int | None:
        """The last offset of the acknowledged prefix of ``partition`` (Pulsar's
        mark-delete position; -1 before the first message), None if not served here."""
        part = self._parts.get(partition)
        return None if part is None else part.cursor.mark_delete()

    def committed_positions(self) -> dict[int, tuple[int, str]]:
        """The last positions written to Kafka, per partition."""
        return dict(self._committer.last)

    @property
    def commits(self) -> int:
        """Successful commits so far."""
        return self._committer.commits

    @property
    def dropped_ack_ranges(self) -> int:
        """Acknowledged ranges left out of commits for want of metadata room."""
        return self._committer.dropped_ack_ranges

    def __repr__(self) -> str:
        kind = None if self.sub_type is None else self.sub_type.value
        return f"Subscription({self.label!r}, {kind}, {self.state.value})"
