"""Producers of one connection: PRODUCER, SEND, CLOSE_PRODUCER (Pulsar's ``Producer`` and
``ServerCnx.handleSend``), over the messaging engine's producer handles. A producer's
schema is registered (:mod:`._schemas`) before the producer is created; its version goes
back in PRODUCER_SUCCESS, and the client stamps it on every message it sends.

A SEND is unpacked completely before its first message is queued, so nothing a bad frame
carried is ever written to Kafka; receipts are written in send order. A producer held by a
backlog quota is disconnected (CLOSE_PRODUCER) and its sends in flight are dropped
unanswered: the client resends them after reconnecting.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque

from sync.cluster import TopicOperation
from sync.errors import InvalidInputError, PolicySyncError
from sync.messaging import MessageId, ProducerAccessMode, ProducerConfig, ProducerHandle
from sync.messaging.headers import (
    ENTRY_FORMAT_VERSION,
    HEADER_ENTRY,
    HEADER_ENTRY_COUNT,
    HEADER_KEY_B64,
    HEADER_ORDERING_KEY,
)
from sync.routing import MessageRoutingMode

from . import PulsarApi_pb2 as api
from . import _commands as commands
from ._context import ProtocolViolation, Session, parse_topic
from ._entries import check_entry
from ._errors import CloseAction, close_action_of, server_error_of
from ._framing import Frame, FrameError, unpack_messages
from ._schemas import Schemas

logger = logging.getLogger(__name__)

__all__ = ["Producers"]


class _Send:
    """One SEND in flight: answered once every message of its batch is stored."""

    __slots__ = ("error", "first", "highest", "producer", "remaining", "sequence_id")

    def __init__(self, producer: _Producer, sequence_id: int, highest: int, count: int) -> None:
        self.producer = producer
        self.sequence_id = sequence_id
        self.highest = highest
        self.remaining = count
        self.first: MessageId | None = None
        self.error: tuple[int, str] | None = None

    @property
    def done(self) -> bool:
        return self.remaining <= 0 or self.error is not None

    def answer(self, message_id: MessageId | None, error: PolicySyncError | None) -> None:
        """The engine's one completion of the batch (runs on the loop)."""
        self.remaining -= 1
        if error is not None:
            if self.error is None:
                self.error = (server_error_of(error), str(error))
        elif message_id is not None and (self.first is None or message_id < self.first):
            self.first = message_id
        if self.remaining <= 0:
            self.producer.flush()


class _Producer:
    """A producer of this connection: the engine's handle and its receipts, in send order."""

    def __init__(
        self,
        conn: Session,
        producer_id: int,
        name: str,
        handle: ProducerHandle,
        schema_version: bytes = b"",
    ):
        self.conn = conn
        self.producer_id = producer_id
        self.name = name
        self.handle = handle
        #: The version of the producer's schema (PRODUCER_SUCCESS; empty: none).
        self.schema_version = schema_version
        self.pending: deque[_Send] = deque()
        self.drained = asyncio.Event()
        self.drained.set()
        self.watcher: asyncio.Task[None] | None = None

    def flush(self) -> None:
        """Write the answers at the head of the queue whose messages are all stored."""
        pending = self.pending
        while pending and pending[0].done:
            send = pending.popleft()
            if send.error is not None:
                cmd = commands.send_error(
                    self.producer_id, send.sequence_id, send.error[0], send.error[1]
                )
            else:
                cmd = commands.send_receipt(
                    self.producer_id,
                    send.sequence_id,
                    send.highest,
                    send.first or MessageId(-1, 0),
                )
            self.conn.write_command(cmd)
        if not pending:
            self.drained.set()


class Producers:
    """The producers of one connection, by the client's producer id."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.schemas = Schemas(session)
        self.producers: dict[int, _Producer] = {}
        #: Producers this side closed because a backlog quota holds their sends: their
        #: SENDs still in flight are dropped unanswered (the client resends them).
        self.held_ids: set[int] = set()
        #: Queued ``WaitForExclusive`` producers, by producer id: their creating task.
        self.waiting: dict[int, asyncio.Task[None]] = {}

    def publish_wait_s(self, producer_id: int) -> float:
        """How long to stop reading after a SEND (the topic's publish rate)."""
        prod = self.producers.get(producer_id)
        return 0.0 if prod is None else prod.handle.publish_wait_s()

    def close_all(self) -> None:
        """The connection closes: release every producer (queued ones leave the queue)."""
        for task in self.waiting.values():
            task.cancel()
        self.waiting.clear()
        for prod in list(self.producers.values()):
            self._drop(prod)
        self.producers.clear()

    async def on_producer(self, cmd: api.BaseCommand) -> None:
        m = cmd.producer
        self.held_ids.discard(m.producer_id)
        existing = self.producers.get(m.producer_id)
        if existing is not None:  # a retried request: same answer
            self._producer_success(m.request_id, existing)
            return
        if _access_mode(m) is ProducerAccessMode.WaitForExclusive:
            # It may wait for other producers, also of this connection: its own task.
            if m.producer_id not in self.waiting:
                task = self.session.spawn(self._open(m), f"binary-producer {m.producer_id}")
                self.waiting[m.producer_id] = task
                task.add_done_callback(lambda _t: self._waited(m.producer_id, task))
            return
        await self._open(m)

    def _waited(self, producer_id: int, task: asyncio.Task[None]) -> None:
        if self.waiting.get(producer_id) is task:
            del self.waiting[producer_id]

    async def _open(self, m: api.CommandProducer) -> None:
        """Create the producer of a PRODUCER command and answer it (a queued
        ``WaitForExclusive`` one: "not ready" first, as Pulsar's ``ServerCnx``)."""
        name = ""
        schema_version = b""

        def queued() -> None:
            if not self.session.closed:
                self.session.write_command(
                    commands.producer_success(m.request_id, name, -1, schema_version, ready=False)
                )

        try:
            topic = parse_topic(m.topic)
            self.session.authorize(topic, TopicOperation.PRODUCE)
            await self.session.require_owned(topic)
            name = (
                m.producer_name
                if m.HasField("producer_name") and m.producer_name
                else (f"{self.session.ctx.producer_name_prefix}-{next(self.session.ctx.names)}")
            )
            # The schema is registered (or found) before the producer exists, as Pulsar's
            # tryAddSchema: a refused schema leaves the topic's producers as they were.
            schema_version = await self.schemas.add(
                topic, m.schema if m.HasField("schema") else None
            )
            handle = await self.session.ctx.engine.create_producer(
                topic,
                ProducerConfig(
                    access_mode=_access_mode(m),
                    topic_epoch=m.topic_epoch if m.HasField("topic_epoch") else None,
                    routing_mode=MessageRoutingMode.SinglePartition,
                    batching_enabled=False,
                    producer_name=name,
                    # A SEND is the client's batch, lingered over once already: a second
                    # wait in Kafka's producer delayed every receipt (docs/binary-send-path.md)
                    linger_ms=0,
                ),
                on_queued=queued,
            )
        except PolicySyncError as exc:
            self.session.error(m.request_id, exc)
            return
        if self.session.closed:
            self.session.ctx.engine.close_producer(handle)
            return
        prod = _Producer(self.session, m.producer_id, name, handle, schema_version)
        self.producers[m.producer_id] = prod
        prod.watcher = self.session.spawn(self._watch_producer(prod), f"binary-producer {name}")
        self._producer_success(m.request_id, prod)

    def _producer_success(self, request_id: int, prod: _Producer) -> None:
        last = prod.handle.last_sequence_id
        self.session.write_command(
            commands.producer_success(
                request_id,
                prod.name,
                last,
                prod.schema_version,
                topic_epoch=prod.handle.topic_epoch,
            )
        )

    async def _watch_producer(self, prod: _Producer) -> None:
        closed = asyncio.ensure_future(prod.handle.wait_closed())
        held = asyncio.ensure_future(prod.handle.wait_held())
        try:
            await asyncio.wait((closed, held), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            held.cancel()
        if self.producers.get(prod.producer_id) is not prod:
            return  # closed by the client
        if not prod.handle.closed and prod.handle.held:
            self._hold(prod)  # disconnected at once, as Pulsar's backlog quota check does
            return
        del self.producers[prod.producer_id]
        action = close_action_of(prod.handle.close_reason)
        if action is CloseAction.CLOSE_CONNECTION:
            self.session.writer.close()
        elif action is CloseAction.NOTIFY_CLIENT:
            self.session.write_command(commands.close_producer(prod.producer_id))

    def refuse(self, send: api.CommandSend, exc: BaseException) -> None:
        prod = self.producers.get(send.producer_id)
        if prod is None and send.producer_id in self.held_ids:
            return  # held by a backlog quota: the client resends it after reconnecting
        if prod is None:
            raise ProtocolViolation(f"SEND for unknown producer {send.producer_id}")
        pending = _Send(prod, send.sequence_id, send.highest_sequence_id, 0)
        pending.error = (server_error_of(exc), str(exc))
        prod.pending.append(pending)
        prod.drained.clear()
        prod.flush()

    def on_send(self, send: api.CommandSend, frame: Frame) -> None:
        prod = self.producers.get(send.producer_id)
        if prod is None and send.producer_id in self.held_ids:
            return  # held by a backlog quota: the client resends it after reconnecting
        if prod is None:
            # Pulsar: "Received message, but the producer is not ready. Closing the connection."
            raise ProtocolViolation(f"SEND for unknown producer {send.producer_id}")
        metadata = frame.metadata
        if metadata is None:
            raise ProtocolViolation("SEND without message metadata")
        if self.session.ctx.config.store_entries:
            self._send_entry(prod, send, metadata, frame)
            return
        payload = frame.payload
        try:
            messages = unpack_messages(metadata, payload, is_chunk=send.is_chunk)
        except FrameError as exc:
            raise ProtocolViolation(f"producer {prod.name}: {exc}") from None
        except InvalidInputError as exc:
            self.refuse(send, exc)
            return
        if prod.handle.held and not prod.handle.closed:
            self._hold(prod)
            return
        highest = send.highest_sequence_id or metadata.highest_sequence_id or send.sequence_id
        # One completion per SEND: the engine answers once the last message is stored.
        pending = _Send(prod, send.sequence_id, highest, 1 if messages else 0)
        prod.pending.append(pending)
        prod.drained.clear()
        if not messages:
            pass  # every message of the batch was compacted out: answered at once
        elif prod.handle.closed:
            pending.error = (api.ServiceNotReady, "Producer is closed")
        else:
            # Every message is checked before the first one is queued: a batch is stored
            # whole or refused whole (nothing written).
            limit = prod.handle.max_message_size
            for msg in messages:
                if len(msg.payload) > limit:
                    pending.error = (
                        api.NotAllowedError,
                        f"Message size {len(msg.payload)} is larger than the topic's "
                        f"maxMessageSize {limit}",
                    )
                    break
            else:
                try:
                    prod.handle.send_batch(
                        messages,
                        pending.answer,
                        deliver_at_ms=(
                            metadata.deliver_at_time
                            if metadata.HasField("deliver_at_time")
                            else None
                        ),
                    )
                except PolicySyncError as exc:
                    pending.answer(None, exc)
        prod.flush()

    def _send_entry(
        self, prod: _Producer, send: api.CommandSend, metadata: api.MessageMetadata, frame: Frame
    ) -> None:
        """Store the SEND as one entry, as sent (:mod:`._entries`): checked whole first, so
        a refused SEND writes nothing."""
        try:
            count, stored_highest = check_entry(metadata, frame.payload, is_chunk=send.is_chunk)
        except FrameError as exc:
            raise ProtocolViolation(f"producer {prod.name}: {exc}") from None
        if prod.handle.held and not prod.handle.closed:
            self._hold(prod)
            return
        highest = send.highest_sequence_id or metadata.highest_sequence_id or send.sequence_id
        pending = _Send(prod, send.sequence_id, highest, 1)
        highest = max(highest, stored_highest)  # what deduplication persists
        prod.pending.append(pending)
        prod.drained.clear()
        value = frame.entry
        size = len(frame.payload)
        limit = prod.handle.max_message_size
        if prod.handle.closed:
            pending.error = (api.ServiceNotReady, "Producer is closed")
        elif size > limit:
            # The payload as the client sized it against the CONNECTED maxMessageSize (a
            # chunk, or a batch); its metadata does not count.
            pending.error = (
                api.NotAllowedError,
                f"Message size {size} is larger than the topic's maxMessageSize {limit}",
            )
        else:
            try:
                prod.handle.send(
                    value,
                    pending.answer,
                    key=metadata.partition_key if metadata.HasField("partition_key") else None,
                    # A chunk before the last one is not counted by deduplication (its
                    # sequence id is the whole message's, stored with the last chunk).
                    sequence_id=None if _early_chunk(metadata) else highest,
                    deliver_at_ms=(
                        metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None
                    ),
                    headers=_entry_headers(count, metadata),
                    count=count,
                    overhead=len(value) - size,
                )
            except PolicySyncError as exc:
                pending.answer(None, exc)
        prod.flush()

    def _hold(self, prod: _Producer) -> None:
        """``producer_request_hold``, as Pulsar's broker applies it: the producer is
        disconnected (CLOSE_PRODUCER, once the sends before this one are answered) and
        this send is not answered; the client keeps it pending and reconnects, the engine
        refuses the producer with ``ProducerBlockedQuotaExceededError`` (retriable) while
        the backlog is over the quota, and once it is back under, the client's reconnect
        succeeds and it resends what is pending. A send still pending at the client's
        ``sendTimeout`` fails there with a timeout."""
        logger.info("producer %s held by a backlog quota: disconnecting it", prod.name)
        self.held_ids.add(prod.producer_id)
        if self.producers.get(prod.producer_id) is prod:
            del self.producers[prod.producer_id]
        if prod.watcher is not None:
            prod.watcher.cancel()
        self.session.spawn(self._disconnect_held(prod), f"binary-producer-hold {prod.name}")

    async def _disconnect_held(self, prod: _Producer) -> None:
        try:
            async with asyncio.timeout(self.session.ctx.config.close_drain_s):
                await prod.drained.wait()
        except TimeoutError:
            logger.warning("held producer %s disconnected with sends in flight", prod.name)
        finally:
            self.session.ctx.engine.close_producer(prod.handle)
        if prod.producer_id in self.held_ids and not self.session.closed:
            self.session.write_command(commands.close_producer(prod.producer_id))

    async def on_close_producer(self, cmd: api.BaseCommand) -> None:
        m = cmd.close_producer
        waiting = self.waiting.pop(m.producer_id, None)
        if waiting is not None:
            waiting.cancel()  # a queued WaitForExclusive producer leaves the queue
        prod = self.producers.pop(m.producer_id, None)
        if prod is not None:
            try:
                async with asyncio.timeout(self.session.ctx.config.close_drain_s):
                    await prod.drained.wait()
            except TimeoutError:
                logger.warning("producer %s closed with sends in flight", prod.name)
            self._drop(prod)
        self.session.success(m.request_id)

    def _drop(self, prod: _Producer) -> None:
        if prod.watcher is not None:
            prod.watcher.cancel()
        self.session.ctx.engine.close_producer(prod.handle)


def _early_chunk(metadata: api.MessageMetadata) -> bool:
    """A chunk before the last one of its message."""
    return metadata.HasField("chunk_id") and metadata.chunk_id < metadata.num_chunks_from_msg - 1


@functools.lru_cache(maxsize=1024)
def _entry_header_tuple(count: int) -> tuple[tuple[str, bytes], ...]:
    return ((HEADER_ENTRY, ENTRY_FORMAT_VERSION), (HEADER_ENTRY_COUNT, b"%d" % count))


def _entry_headers(count: int, metadata: api.MessageMetadata) -> list[tuple[str, bytes]]:
    """The headers marking a stored entry of ``count`` messages, and what Key_Shared routes
    it by besides its key: its ordering key and a base64 key's flag (Pulsar's
    ``peekStickyKey`` reads the entry's metadata the same way)."""
    out = list(_entry_header_tuple(count))
    if metadata.HasField("ordering_key"):
        out.append((HEADER_ORDERING_KEY, metadata.ordering_key))
    if metadata.partition_key_b64_encoded:
        out.append((HEADER_KEY_B64, b"1"))
    return out


def _access_mode(m: api.CommandProducer) -> ProducerAccessMode:
    """The producer's access mode (Shared when absent or unknown to us)."""
    try:
        return ProducerAccessMode(m.producer_access_mode)
    except ValueError:
        return ProducerAccessMode.Shared
