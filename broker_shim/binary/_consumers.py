"""Consumers of one connection: SUBSCRIBE, FLOW, ACK, REDELIVER, UNSUBSCRIBE, SEEK,
GET_LAST_MESSAGE_ID, CLOSE_CONSUMER and the MESSAGE push (Pulsar's ``Consumer`` and its
dispatcher), over the messaging engine's consumers. A consumer's schema is checked
against the topic's (:mod:`._schemas`) before it subscribes.

Each consumer has one dispatch task: it receives batches from the engine (as the FLOW
permits allow) and writes them as unbatched MESSAGE frames; when the engine closes the
consumer, the close table (:mod:`._errors`) decides whether the client is told
(CLOSE_CONSUMER) or the connection is dropped.

Batch-index acknowledgements (a client with ``batchIndexAckEnabled``: an ACK's
``ack_set``) are handed to the engine, which keeps a stored entry's acknowledged indexes;
a redelivered entry carries the rest in ``CommandMessage.ack_set``
(:func:`._entries.entry_frame`), as Pulsar's broker with
``acknowledgmentAtBatchIndexLevelEnabled``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator

from sync.cluster import TopicOperation
from sync.errors import ConsumerBusyError, InvalidInputError, PolicySyncError
from sync.messaging import (
    CloseCause,
    Consumer,
    Delivery,
    InitialPosition,
    MessageId,
    SubscriptionType,
)

from . import PulsarApi_pb2 as api
from . import _commands as commands
from ._commands import EARLIEST_LEDGER, LATEST_LEDGER
from ._context import Session, parse_topic
from ._errors import CloseAction, close_action_of
from ._schemas import Schemas

logger = logging.getLogger(__name__)

__all__ = ["Consumers"]

_T = api.BaseCommand
_SUB_TYPES = {
    api.CommandSubscribe.Exclusive: SubscriptionType.Exclusive,
    api.CommandSubscribe.Shared: SubscriptionType.Shared,
    api.CommandSubscribe.Failover: SubscriptionType.Failover,
    api.CommandSubscribe.Key_Shared: SubscriptionType.Key_Shared,
}
_WRITE_BUFFER_HIGH = 4 * 1024 * 1024
#: Entry ids from here up are negative as Java's ``long`` (the protocol's field is uint64).
_BEFORE_FIRST = 1 << 63


class _Consumer:
    """A consumer of this connection: the engine's consumer and its dispatch task."""

    def __init__(self, consumer_id: int, consumer: Consumer, *, durable: bool, skip_below: int):
        self.consumer_id = consumer_id
        self.consumer = consumer
        self.durable = durable
        #: A reader's start position: messages before this offset are acknowledged unseen.
        self.skip_below = skip_below
        self.task: asyncio.Task[None] | None = None
        self.closed_by_client = False

    def message_id(self, data: api.MessageIdData) -> MessageId:
        """The engine's id of a message this consumer received."""
        sub = self.consumer.subscription
        part = next(iter(self.consumer.partitions)) if len(self.consumer.partitions) == 1 else None
        if part is None:
            part = data.partition if data.partition >= 0 else 0
        return MessageId(part if sub.partitioned else -1, data.entryId)


def _ack_set(data: api.MessageIdData) -> int | None:
    """A batch-index acknowledgement's ack set as one bit set (bit ``i``: batch index
    ``i`` still unacknowledged by the client; int64 words, bit ``i`` in word ``i // 64``),
    or None when the id acknowledges its whole entry (no ack set, or an empty one).

    The engine keeps the acknowledged indexes of a stored entry (and commits them), as
    Pulsar's broker does with ``acknowledgmentAtBatchIndexLevelEnabled``; a client without
    batch-index acks only ever acknowledges whole entries."""
    words = data.ack_set
    if not any(words):
        return None
    bits = 0
    for i, word in enumerate(words):
        bits |= (word & 0xFFFFFFFFFFFFFFFF) << (64 * i)
    return bits


class Consumers:
    """The consumers of one connection, by the client's consumer id."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.schemas = Schemas(session)
        self.consumers: dict[int, _Consumer] = {}
        #: Consumers the engine disconnected to reconnect (unload, seek), until they do.
        self.reset_by_seek: dict[int, _Consumer] = {}
        #: Readers sought by publish time: where each starts when it reconnects (their
        #: SUBSCRIBE then names no start id, and a reader's position is not committed),
        #: until the reader seeks by id or closes.
        self.seek_starts: dict[int, dict[int, int]] = {}

    async def close_all(self) -> None:
        """The connection closes: release every consumer."""
        for cons in list(self.consumers.values()):
            await self._drop(cons)
        self.consumers.clear()
        self.reset_by_seek.clear()

    async def on_subscribe(self, cmd: api.BaseCommand) -> None:
        m = cmd.subscribe
        existing = self.consumers.get(m.consumer_id)
        if existing is not None:
            self.session.success(m.request_id)
            return
        try:
            topic = parse_topic(m.topic)
            self.session.authorize(topic, TopicOperation.CONSUME, m.subscription)
            await self.session.require_owned(topic)
            sub_type = _SUB_TYPES.get(m.subType)
            if sub_type is None:
                raise InvalidInputError(f"unknown subscription type {m.subType}")
            initial = (
                InitialPosition.Earliest
                if m.initialPosition == api.CommandSubscribe.Earliest
                else InitialPosition.Latest
            )
            skip_below = 0
            # Kept (not popped): a sibling partition's seek may disconnect it again.
            start_at = self.seek_starts.get(m.consumer_id)
            resume_after: MessageId | None = None
            if start_at is not None and not m.durable and not m.HasField("start_message_id"):
                # Pulsar keeps a reader's cursor across the seek's reconnect: here it starts
                # right before the offset found for the time (on its one partition).
                offset = start_at.get(max(topic.partition_index, 0), 0)
                initial = InitialPosition.Earliest
                if offset > 0:
                    resume_after = MessageId(topic.partition_index, offset - 1)
            elif m.HasField("start_message_id"):
                start = m.start_message_id
                if start.ledgerId == EARLIEST_LEDGER:
                    initial = InitialPosition.Earliest
                elif start.ledgerId >= LATEST_LEDGER:
                    initial = InitialPosition.Latest
                else:
                    initial = InitialPosition.Earliest
                    skip_below = start.entryId
            schema = m.schema if m.HasField("schema") else None
            if schema is not None:
                await self.schemas.check_consumer(topic, schema)
            consumer = await self.session.ctx.engine.subscribe(
                topic,
                m.subscription,
                sub_type=sub_type,
                consumer_name=m.consumer_name or None,
                pull_mode=True,
                initial_position=initial,
                negative_ack_delay_s=0.0,  # the client waits its nack delay itself
                durable=m.durable,  # readers: nothing committed, no Kafka group left
                start_message_id=resume_after,
                read_compacted=m.read_compacted,
            )
        except PolicySyncError as exc:
            self.session.error(m.request_id, exc)
            return
        if self.session.closed:
            await consumer.close()
            return
        self.schemas.note_consumer(consumer, schema)
        cons = _Consumer(m.consumer_id, consumer, durable=m.durable, skip_below=skip_below)
        self.consumers[m.consumer_id] = cons
        self.reset_by_seek.pop(m.consumer_id, None)
        self.session.success(m.request_id)
        if consumer.sub_type is SubscriptionType.Failover:
            self.session.spawn(self._announce_active(cons), f"binary-active {consumer.name}")
        cons.task = self.session.spawn(self._dispatch(cons), f"binary-consumer {consumer.name}")

    async def _dispatch(self, cons: _Consumer) -> None:
        consumer = cons.consumer
        trace = self.session.ctx.trace
        while True:
            batch = await consumer.receive_batch()
            if not batch:
                break
            frames: list[bytes] = []
            for delivery in batch:
                if delivery.message_id.offset < cons.skip_below:
                    consumer.ack(delivery.message_id)
                    consumer.add_permits(delivery.messages)
                    continue
                try:
                    frames.append(commands.message_frame(cons.consumer_id, delivery))
                except Exception as exc:  # noqa: BLE001 - one poison record, not the consumer
                    self._skip_unreadable(cons, delivery, exc)
            if frames and not self.session.closed:
                trace.sent(_T.MESSAGE, len(frames))
                self.session.writer.write(b"".join(frames))
                if self.session.writer.transport.get_write_buffer_size() > _WRITE_BUFFER_HIGH:
                    await self.session.writer.drain()  # a client that stops reading stops dispatch
        if self.consumers.get(cons.consumer_id) is not cons or cons.closed_by_client:
            return
        del self.consumers[cons.consumer_id]
        reason = consumer.close_reason
        if reason is not None and reason.cause is CloseCause.UNLOADED:
            self.reset_by_seek[cons.consumer_id] = cons
        action = close_action_of(reason)
        if action is CloseAction.CLOSE_CONNECTION:
            self.session.writer.close()
        elif action is CloseAction.NOTIFY_CLIENT:
            self.session.write_command(commands.close_consumer(cons.consumer_id))

    def _skip_unreadable(self, cons: _Consumer, delivery: Delivery, exc: Exception) -> None:
        """A stored record no MESSAGE can be made of: counted, logged, acknowledged and
        skipped, so it never wedges the subscription."""
        consumer = cons.consumer
        mid = delivery.message_id
        self.session.ctx.trace.unreadable()
        logger.warning(
            "%s[%d]@%d: stored record cannot be sent to %s (%s: %s); acknowledged and skipped",
            consumer.subscription.kafka_topic,
            mid.kafka_partition,
            mid.offset,
            consumer.name,
            type(exc).__name__,
            exc,
        )
        consumer.ack(mid)
        consumer.add_permits(delivery.messages)

    async def _announce_active(self, cons: _Consumer) -> None:
        """Failover: ACTIVE_CONSUMER_CHANGE to this consumer when it subscribes and whenever
        it becomes or stops being the active one (Pulsar's ``notifyActiveConsumerChanged``),
        at the moment the subscription changes its pick."""
        consumer = cons.consumer
        announced: bool | None = None
        while not consumer.closed and not self.session.closed:
            consumer.active_changed.clear()
            active = consumer.is_active()
            if active != announced:
                announced = active
                self.session.write_command(
                    commands.active_consumer_change(cons.consumer_id, active=active)
                )
            await consumer.active_changed.wait()

    def _consumer(self, consumer_id: int) -> _Consumer | None:
        return self.consumers.get(consumer_id)

    async def on_flow(self, cmd: api.BaseCommand) -> None:
        cons = self._consumer(cmd.flow.consumer_id)
        if cons is not None:
            cons.consumer.add_permits(cmd.flow.messagePermits)

    async def on_ack(self, cmd: api.BaseCommand) -> None:
        m = cmd.ack
        cons = self._consumer(m.consumer_id)
        if cons is not None:
            self._ack(cons, m)
        if m.HasField("request_id"):
            self.session.write_command(
                commands.ack_response(m.consumer_id, m.request_id, found=cons is not None)
            )

    def _ack(self, cons: _Consumer, m: api.CommandAck) -> None:
        consumer = cons.consumer
        for mid, data in self._ids_of(cons, m.message_id, "ack"):
            if m.ack_type == api.CommandAck.Cumulative:
                self._ack_cumulative(consumer, mid, data)
            else:
                consumer.ack(mid, _ack_set(data))

    def _ids_of(
        self, cons: _Consumer, ids: Iterable[api.MessageIdData], what: str
    ) -> Iterator[tuple[MessageId, api.MessageIdData]]:
        """The engine's ids of a client's message ids, each on its own: an id that names no
        message here is logged and left, never a reason to drop the connection (Pulsar's
        broker answers acks of unknown positions without closing it either)."""
        for data in ids:
            if data.entryId >= _BEFORE_FIRST:
                # Java's entry id -1, the position before the first entry: the Java client
                # acks it cumulatively for a batch's first message when batch-index acks
                # are off (``prevBatchMessageId``). Nothing to acknowledge.
                continue
            try:
                mid = cons.message_id(data)
            except InvalidInputError as exc:
                logger.info(
                    "%s from %s on %s ignored: %s", what, self.session.peer, cons.consumer.name, exc
                )
                continue
            yield mid, data  # outside the try: the caller's own errors are not caught here

    @staticmethod
    def _ack_cumulative(consumer: Consumer, upto: MessageId, data: api.MessageIdData) -> None:
        part = upto.kafka_partition
        # Up to a batch index: the entries before it whole, and the indexes up to it of its
        # own entry (the ack set keeps those after it).
        unacked = _ack_set(data)
        last = upto.offset - 1 if unacked is not None else upto.offset
        for p, offset in sorted(consumer.delivered):
            if p == part and offset <= last:
                consumer.ack(MessageId(upto.partition, offset))
        if unacked is not None:
            consumer.ack(upto, unacked)

    async def on_redeliver(self, cmd: api.BaseCommand) -> None:
        m = cmd.redeliverUnacknowledgedMessages
        cons = self._consumer(m.consumer_id)
        if cons is None:
            return
        consumer = cons.consumer
        if m.message_ids:
            ids = [mid for mid, _ in self._ids_of(cons, m.message_ids, "redelivery request")]
        else:
            pid = cons.consumer.subscription.partitioned
            ids = [MessageId(p if pid else -1, o) for p, o in sorted(consumer.delivered)]
        for mid in ids:
            consumer.nack(mid)

    async def on_unsubscribe(self, cmd: api.BaseCommand) -> None:
        m = cmd.unsubscribe
        cons = self._consumer(m.consumer_id)
        if cons is None:
            self.session.error(
                m.request_id, ConsumerBusyError(f"Consumer {m.consumer_id} not found")
            )
            return
        try:
            await self.session.ctx.engine.unsubscribe(cons.consumer)
        except PolicySyncError as exc:
            self.session.error(m.request_id, exc)
            return
        cons.closed_by_client = True
        self.consumers.pop(m.consumer_id, None)
        self.session.success(m.request_id)

    async def on_close_consumer(self, cmd: api.BaseCommand) -> None:
        m = cmd.close_consumer
        self.reset_by_seek.pop(m.consumer_id, None)
        self.seek_starts.pop(m.consumer_id, None)
        cons = self.consumers.pop(m.consumer_id, None)
        if cons is not None:
            cons.closed_by_client = True
            await self._drop(cons)
        self.session.success(m.request_id)

    async def _drop(self, cons: _Consumer) -> None:
        cons.closed_by_client = True
        if not cons.durable:
            # A reader's subscription lives as long as the reader (Pulsar: non-durable).
            try:
                await self.session.ctx.engine.unsubscribe(cons.consumer)
                return
            except PolicySyncError as exc:
                logger.info("reader subscription not deleted: %s", exc)
        await cons.consumer.close()

    async def on_seek(self, cmd: api.BaseCommand) -> None:
        """Pulsar's seek: the subscription moves, its consumers are disconnected
        (CLOSE_CONSUMER) and resume at the new position when they reconnect."""
        m = cmd.seek
        # A consumer disconnected by a seek of a sibling partition (the client seeks every
        # partition of a partitioned topic, one SEEK each) still seeks its own partition.
        live = self._consumer(m.consumer_id)
        cons = live or self.reset_by_seek.get(m.consumer_id)
        try:
            if cons is None:
                raise ConsumerBusyError(f"Consumer {m.consumer_id} not found")
            consumer = cons.consumer
            sub = consumer.subscription
            if live is None:
                await self.session.require_owned(consumer.topic)  # it was closed: maybe by a move
            parts = sorted(consumer.partitions)
            kafka_topic = sub.kafka_topic
            if not m.HasField("message_id"):
                if not m.HasField("message_publish_time"):
                    raise InvalidInputError("SEEK needs a message id or a publish time")
                # Pulsar: the first message published at or after the time, per partition.
                offsets = await self.session.ctx.last_ids.offsets_at(
                    kafka_topic, parts, m.message_publish_time
                )
                if not cons.durable:
                    self.seek_starts[m.consumer_id] = offsets
                await self.session.ctx.engine.reset_subscription(sub.topic, sub.name, offsets)
                self.session.success(m.request_id)
                return
            self.seek_starts.pop(m.consumer_id, None)  # the client names where it starts
            target = m.message_id
            if target.ledgerId == EARLIEST_LEDGER:
                offsets = await self.session.ctx.last_ids.start_offsets(kafka_topic, parts)
            elif target.ledgerId >= LATEST_LEDGER:
                offsets = await self.session.ctx.last_ids.end_offsets(kafka_topic, parts)
            else:
                mid = cons.message_id(target)
                offsets = {mid.kafka_partition: mid.offset}
            await self.session.ctx.engine.reset_subscription(sub.topic, sub.name, offsets)
        except PolicySyncError as exc:
            self.session.error(m.request_id, exc)
            return
        self.session.success(m.request_id)

    async def on_last_message_id(self, cmd: api.BaseCommand) -> None:
        m = cmd.getLastMessageId
        cons = self._consumer(m.consumer_id)
        if cons is None:
            self.session.error(
                m.request_id, ConsumerBusyError(f"Consumer {m.consumer_id} not found")
            )
            return
        sub = cons.consumer.subscription
        parts = sorted(cons.consumer.partitions)
        try:
            ends = await self.session.ctx.last_ids.end_offsets(sub.kafka_topic, parts)
        except PolicySyncError as exc:
            self.session.error(m.request_id, exc)
            return
        end, part = max(((ends.get(p, 0), p) for p in parts), default=(0, 0))
        last = None if end <= 0 else (end - 1, part)
        batch_index = -1
        if last is not None:
            # The last message of a stored batch, as Pulsar's
            # getLargestBatchIndexWhenPossible: a reader inside it is not at the end.
            try:
                count = await self.session.ctx.last_ids.entry_count(sub.kafka_topic, part, last[0])
            except PolicySyncError as exc:
                self.session.error(m.request_id, exc)
                return
            batch_index = count - 1 if count > 1 else -1
        mark = sub.mark_delete_position(part)
        self.session.write_command(
            commands.last_message_id_response(
                m.request_id,
                last,
                partitioned=sub.partitioned,
                mark_delete=None if mark is None else (mark, part),
                batch_index=batch_index,
            )
        )
