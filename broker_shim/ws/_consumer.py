"""Pulsar's WebSocket consumer and reader endpoints: one session per connection, message
frames written in batches, acknowledgements, negative acknowledgements and permits read."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping

from aiohttp import web

from sync import PolicySyncError
from sync.cluster import TopicOperation
from sync.errors import (
    InvalidInputError,
    MessagingError,
    TransportError,
)
from sync.messaging import (
    CloseReason,
    Consumer,
    Delivery,
    InitialPosition,
    MessageId,
    MessagingEngine,
    SubscriptionType,
)

from .._http_errors import handshake_refusal
from .._http_shell import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    query_flag,
)
from ._entries import EntryAcks, EntryError
from ._frames import (
    CLOSE_BAD_FRAME,
    WS_CLOSE_CODES,
    Authorize,
    FrameBatcher,
    encode_message_frame,
    enum_param,
    frame_text,
    int_param,
    json_loads,
    reason_text,
    redirect,
    topic_of,
    ws_response,
)

logger = logging.getLogger(__name__)


async def consumer_endpoint(
    engine: MessagingEngine, authorize: Authorize, request: web.Request
) -> web.StreamResponse:
    """``/ws/v2/consumer/.../{subscription}``: receive messages, acknowledge them."""
    query = request.query
    try:
        topic = topic_of(request)
        subscription = request.match_info["subscription"]
        sub_type = enum_param(
            query, "subscriptionType", SubscriptionType, SubscriptionType.Exclusive
        )
        initial = enum_param(
            query, "subscriptionInitialPosition", InitialPosition, InitialPosition.Latest
        )
        queue_size = int_param(query, "receiverQueueSize", 0, 0)
        pull_mode = query_flag(query, "pullMode", lenient=True)
        nack_ms = query.get("negativeAckRedeliveryDelay")
        nack_delay = None if nack_ms is None else int_param(query, "negativeAckRedeliveryDelay", 0)
        authorize(request, topic, TopicOperation.CONSUME, subscription)
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to subscribe")
    await redirect(request, engine, topic)
    try:
        consumer = await engine.subscribe(
            topic,
            subscription,
            sub_type=sub_type,
            consumer_name=query.get("consumerName"),
            receiver_queue_size=queue_size or None,
            pull_mode=pull_mode,
            initial_position=initial,
            negative_ack_delay_s=None if nack_delay is None else nack_delay / 1000.0,
        )
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to subscribe")
    ws = ws_response()
    try:
        await ws.prepare(request)
        await _ConsumerSession(ws, FrameBatcher(ws, request), consumer, engine).run()
    finally:
        await consumer.close()
    return ws


# --------------------------------------------------------------------------- reader


def _reader_start(query: Mapping[str, str]) -> tuple[InitialPosition, MessageId | None]:
    """Pulsar ReaderHandler's ``messageId``: ``latest`` (default), ``earliest`` or the
    base64 id of a message to start after."""
    text = (query.get("messageId") or "").strip()
    if text in ("", "latest"):
        return InitialPosition.Latest, None
    if text == "earliest":
        return InitialPosition.Earliest, None
    try:
        return InitialPosition.Earliest, MessageId.from_base64(text)
    except InvalidInputError as exc:
        raise InvalidInputError(f"messageId: {exc}") from exc


async def reader_endpoint(
    engine: MessagingEngine, authorize: Authorize, request: web.Request
) -> web.StreamResponse:
    """``/ws/v2/reader/...``: read a topic from a position, without a durable subscription.

    The same engine as the consumer endpoint, on a non-durable subscription named
    ``reader-<random>``: nothing is committed and it ends with the connection. The
    client's ``{"messageId"}`` frames only open the window for more messages (Pulsar's
    ReaderHandler counts them for flow control; a reader acknowledges nothing).
    """
    query = request.query
    try:
        topic = topic_of(request)
        initial, start = _reader_start(query)
        queue_size = int_param(query, "receiverQueueSize", 0, 0)
        authorize(request, topic, TopicOperation.CONSUME, "")
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to create reader")
    await redirect(request, engine, topic)
    try:
        consumer = await engine.subscribe(
            topic,
            f"reader-{uuid.uuid4().hex[:10]}",
            sub_type=SubscriptionType.Exclusive,
            consumer_name=query.get("readerName"),
            receiver_queue_size=queue_size or None,
            initial_position=initial,
            durable=False,
            start_message_id=start,
        )
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to create reader")
    ws = ws_response()
    try:
        await ws.prepare(request)
        session = _ConsumerSession(ws, FrameBatcher(ws, request), consumer, engine, reader=True)
        await session.run()
    finally:
        await consumer.close()
    return ws


class _ConsumerSession:
    """Writes deliveries to the client, reads its acks and commands.

    ``reader``: a reader's session: only ``{"messageId"}`` (flow control) and
    ``isEndOfTopic`` mean something; other commands are ignored, as Pulsar's ReaderHandler.
    """

    def __init__(
        self,
        ws: web.WebSocketResponse,
        frames: FrameBatcher,
        consumer: Consumer,
        engine: MessagingEngine,
        *,
        reader: bool = False,
    ) -> None:
        self.reader = reader
        self.ws = ws
        self.frames = frames
        self.consumer = consumer
        self.engine = engine
        #: Ids of delivered messages as sent, so an ack needs no decoding (bounded by
        #: the consumer's window; forgotten on ack or nack).
        self._sent_ids: dict[str, MessageId] = {}
        #: The messages of stored entries out with the client.
        self._entries = EntryAcks()

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            async for msg in self.ws:
                text = frame_text(msg)
                if text is None:
                    break
                if not await self._on_frame(text):
                    break
        finally:
            await self.consumer.close()
            try:
                await asyncio.wait_for(writer, 5.0)
            except (TimeoutError, asyncio.CancelledError):
                writer.cancel()

    async def _close(self, code: int, reason: str) -> None:
        if not self.ws.closed:
            await self.ws.close(code=code, message=reason_text(reason))

    async def _on_frame(self, text: str) -> bool:
        consumer = self.consumer
        try:
            obj = json_loads(text)
            if not isinstance(obj, dict):
                raise InvalidInputError("a consumer command must be a JSON object")
            kind = obj.get("type")
            if self.reader and kind not in (None, "isEndOfTopic"):
                return True  # a reader has no permits, negative acks or unsubscribe
            if kind == "permit":
                permits = obj.get("permitMessages")
                if not isinstance(permits, int) or isinstance(permits, bool):
                    raise InvalidInputError("Missing required permitMessages field for 'permit'")
                if not JAVA_INT_MIN <= permits <= JAVA_INT_MAX:  # Pulsar's Integer field
                    raise InvalidInputError(f"permitMessages {permits} is out of int range")
                consumer.add_permits(permits)
            elif kind == "isEndOfTopic":
                await self.ws.send_str(json.dumps({"endOfTopic": False}))
            elif kind == "unsubscribe":
                try:
                    await self.engine.unsubscribe(consumer)
                except MessagingError as exc:
                    label = consumer.subscription.label
                    logger.warning("unsubscribe refused on %s: %s", label, exc)
                    return True
                await self._close(1000, "Unsubscribed")
                return False
            else:
                text_id = obj.get("messageId")
                if isinstance(text_id, str) and self._entries.knows(text_id):
                    # A message of a stored entry: a batch-index acknowledgement (the
                    # engine acknowledges the entry once all of it is).
                    if kind == "negativeAcknowledge":
                        entry_id = self._entries.nack(text_id)
                        if entry_id is not None:
                            consumer.nack(entry_id)
                    else:
                        found = self._entries.ack(text_id)
                        if found is not None:
                            consumer.ack(*found)
                    return True
                message_id = self._sent_ids.pop(text_id, None) if isinstance(text_id, str) else None
                if message_id is None:
                    # Not out with this session (sent before a reconnect, or forgotten):
                    # a message of an entry still acknowledges only its own index.
                    batch = MessageId.batch_from_base64(str(text_id))
                    if batch is not None:
                        entry_id, index, size = batch
                        if kind == "negativeAcknowledge":
                            consumer.nack(entry_id)
                        else:
                            consumer.ack(entry_id, ((1 << size) - 1) & ~(1 << index))
                        return True
                    message_id = MessageId.from_base64(str(text_id))
                if kind == "negativeAcknowledge":
                    consumer.nack(message_id)
                else:
                    consumer.ack(message_id)
        except (ValueError, InvalidInputError) as exc:
            logger.info("closing consumer %s: undecodable frame (%s)", consumer.name, exc)
            await self._close(CLOSE_BAD_FRAME, "Failed to de-serialize from JSON")
            return False
        except TransportError as exc:
            logger.warning("consumer %s command failed: %s", consumer.name, exc)
        return True

    def _skip_unreadable(self, delivery: Delivery, exc: Exception) -> None:
        """A stored entry no frame can be made of: logged, acknowledged and skipped, so
        it never wedges the subscription."""
        consumer = self.consumer
        mid = delivery.message_id
        logger.warning(
            "%s[%d]@%d: stored entry cannot be sent to %s (%s); acknowledged and skipped",
            consumer.subscription.kafka_topic,
            mid.kafka_partition,
            mid.offset,
            consumer.name,
            exc,
        )
        consumer.ack(mid)
        consumer.add_permits(delivery.messages)

    async def _write(self) -> None:
        consumer = self.consumer
        sent_ids = self._sent_ids
        try:
            while True:
                batch = await consumer.receive_batch()
                if not batch:
                    break
                if len(sent_ids) > 100_000:  # a client that never acks: stop remembering
                    sent_ids.clear()
                if len(self._entries) > 1_000_000:
                    self._entries.clear()
                frames = []
                for delivery in batch:
                    if delivery.entry.stored_entry:
                        try:
                            frames += self._entries.frames(delivery)
                        except EntryError as exc:
                            self._skip_unreadable(delivery, exc)
                        continue
                    text_id = delivery.message_id.to_base64()
                    sent_ids[text_id] = delivery.message_id
                    frames.append(encode_message_frame(delivery, text_id))
                await self.frames.send(frames)
        except (ConnectionResetError, RuntimeError):
            return
        reason: CloseReason | None = consumer.close_reason
        if reason is not None:
            await self._close(WS_CLOSE_CODES[reason.cause], reason.reason)
