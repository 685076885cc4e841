"""Pulsar's WebSocket API on the sidecar (aiohttp), over :mod:`sync.messaging`.

Endpoints (Pulsar's paths and JSON frames; ``messageId`` is standard base64 of a
serialized ``MessageIdData`` — see :class:`sync.messaging._producer.MessageId`):

``GET /ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}``
    Query: ``messageRoutingMode`` (``RoundRobinPartition`` default, Pulsar's client
    default: each unkeyed message to the next partition; or ``SinglePartition``),
    ``hashingScheme`` (``JavaStringHash`` default or ``Murmur3_32Hash``),
    ``batchingEnabled`` (default false), ``batchingMaxPublishDelay`` (ms),
    ``maxPendingMessages``, ``producerName``. Other Pulsar parameters are ignored.
    Client → ``{"payload": base64, "key"?, "properties"?, "context"?, "eventTime"?,
    "sequenceId"?, "deliverAt"?, "deliverAfterMs"?}`` (``sequenceId`` with
    ``producerName``: deduplication; ``deliverAt`` epoch ms: delayed delivery);
    server → ``{"result": "ok", "messageId", "context"?}`` or
    ``{"result": "send-error:<code>", "errorMsg", "context"?}`` with Pulsar's codes
    (3 bad JSON, 7 bad payload encoding, 8 anything else, e.g. ``maxMessageSize``).
    Sends may be pipelined (up to ``maxPendingMessages``, then the connection is not read
    until answers went out); every send gets exactly one answer, in send order, and an
    ``ok`` only once Kafka acknowledged the message (``acks=all``).

``GET /ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}``
    Query: ``subscriptionType`` (``Exclusive`` default, ``Failover``, ``Shared``,
    ``Key_Shared``), ``receiverQueueSize`` (capped at 1000), ``consumerName``,
    ``pullMode``, ``negativeAckRedeliveryDelay`` (ms) and, an extension,
    ``subscriptionInitialPosition`` (``Latest`` default, or ``Earliest``).
    Server → ``{"messageId", "payload", "properties", "publishTime", "redeliveryCount",
    "key"?, "eventTime"?}``; client → ``{"messageId"}`` (ack),
    ``{"type": "negativeAcknowledge", "messageId"}``, ``{"type": "permit",
    "permitMessages": N}`` (pull mode), ``{"type": "isEndOfTopic"}`` (answered
    ``{"endOfTopic": false}``: Kafka topics never end), ``{"type": "unsubscribe"}``.

``GET /ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}``
    Query: ``messageId`` (``latest`` default, ``earliest``, or the base64 id of a message
    to start after), ``receiverQueueSize``, ``readerName``. The consumer's message frames,
    on a non-durable subscription (nothing committed, gone with the connection); the
    client's ``{"messageId"}`` frames only make room for more messages, as Pulsar's
    ReaderHandler; ``{"type": "isEndOfTopic"}`` is answered.

``GET /ws/pingpong``
    Answers WebSocket pings (and echoes text frames).

Refusals at the handshake are HTTP errors with ``{"reason": ...}``, as Pulsar's proxy
answers: 400 bad name or query parameter (``Invalid query params: …``), 404 no such topic,
409 busy (``Failed to subscribe: Exclusive consumer is already connected``,
``… Subscription reached max consumers limit``, ``… Topic reached max producers limit``,
``… Subscription is of different type``), 403 forbidden by a policy (``Topic[{…}] doesn't
support Shared sub type!``, ``Exceed the maximum number of subscriptions …``; Pulsar's
proxy says 500 here, which hides that the client must change something), 503 policies not
loaded yet, the bundle moving, Kafka failing or the sidecar shutting down (retry): the
table of :func:`broker_shim._http_errors.handshake_refusal`.

A topic owned by another sidecar is answered ``307 Temporary Redirect`` to the same path
and query on the owner (``ws://``/``wss://`` from its HTTP URL), which WebSocket clients
follow; a Pulsar client's proxy would instead connect to the owner itself.

Close codes: 1000 normal (and after ``unsubscribe``), 1001 the sidecar is shutting down,
1008 a policy change closed this connection (reason: Pulsar's refusal text), 1012 the topic
moved to another sidecar (reconnect and follow the redirect), 4003 an undecodable frame
(Pulsar's ``FailedToDeserializeFromJSON``, code 3, in the private range). Reasons are cut
to the 123 bytes a close frame allows.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import datetime as dt
import functools
import json
import logging
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

import orjson
from aiohttp import WSMsgType, web
from yarl import URL

from sync import PolicySyncError, TopicName, UnavailableError
from sync.errors import (
    InvalidInputError,
    MessageTooLargeError,
    MessagingError,
    TransportError,
)
from sync.messaging import (
    CloseCause,
    CloseReason,
    Consumer,
    Delivery,
    InitialPosition,
    MessageId,
    MessagingEngine,
    ProducerConfig,
    ProducerHandle,
    SubscriptionType,
    decode_properties,
)
from sync.routing import HashingScheme, MessageRoutingMode

from ._http_errors import handshake_refusal
from ._http_shell import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    query_flag,
    topic_from_path,
)

logger = logging.getLogger(__name__)

#: The engine's protocol-neutral close causes as WebSocket close codes (the one table).
WS_CLOSE_CODES: Final[Mapping[CloseCause, int]] = {
    CloseCause.NORMAL: 1000,
    CloseCause.SHUTDOWN: 1001,
    CloseCause.POLICY: 1008,
    CloseCause.UNLOADED: 1012,
}

__all__ = ["add_ws_routes"]

PRODUCER_PATH = "/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}"
CONSUMER_PATH = "/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}"
READER_PATH = "/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}"

#: Pulsar ``WebSocketError`` codes used in ``send-error:<code>`` results.
ERR_BAD_JSON = 3
ERR_PAYLOAD_ENCODING = 7
ERR_UNKNOWN = 8
#: Close code for an undecodable frame: 4000 + Pulsar's FailedToDeserializeFromJSON.
CLOSE_BAD_FRAME = 4003
_MAX_FRAME_BYTES = 16 * 1024 * 1024
#: A send held by a ``producer_request_hold`` backlog quota for longer than allowed.
_HELD_TOO_LONG = "ProducerBlockedQuotaExceededError: backlog quota exceeded, send timed out"
_MAX_CLOSE_REASON = 123
#: Stop writing (and wait) while this much is queued in the socket's write buffer.
_WRITE_BUFFER_HIGH = 1024 * 1024


#: Pulsar's WebSocket liveness endpoint: a client pings, the server pongs.
PINGPONG_PATH = "/ws/pingpong"


async def pingpong_endpoint(request: web.Request) -> web.StreamResponse:
    """Pulsar ``/ws/pingpong``: answers every WebSocket ping with a pong (and echoes text),
    until the client closes."""
    ws = web.WebSocketResponse(autoping=True)
    await ws.prepare(request)
    async for message in ws:
        if message.type == WSMsgType.TEXT:
            await ws.send_str(message.data)
    return ws


def add_ws_routes(app: web.Application, engine: MessagingEngine) -> None:
    """Serve Pulsar's WebSocket producer, consumer and reader endpoints on ``app`` with
    ``engine`` (started and closed by whoever built it: the sidecar's composition root)."""
    app.add_routes(
        [
            web.get(PRODUCER_PATH, functools.partial(producer_endpoint, engine)),
            web.get(CONSUMER_PATH, functools.partial(consumer_endpoint, engine)),
            web.get(READER_PATH, functools.partial(reader_endpoint, engine)),
            web.get(PINGPONG_PATH, pingpong_endpoint),
        ]
    )


# --------------------------------------------------------------------------- helpers


def _ws_response() -> web.WebSocketResponse:
    # No permessage-deflate: small JSON frames gain nothing from it, and it costs a zlib
    # call per frame on both ends.
    return web.WebSocketResponse(max_msg_size=_MAX_FRAME_BYTES, heartbeat=30.0, compress=False)


def _text_frame(text: str) -> bytes:
    """One unmasked, uncompressed text frame (RFC 6455 §5.2), as a server sends it."""
    data = text.encode("utf-8")
    n = len(data)
    if n < 126:
        return bytes((0x81, n)) + data
    if n < 65536:
        return struct.pack("!BBH", 0x81, 126, n) + data
    return struct.pack("!BBQ", 0x81, 127, n) + data


class _FrameBatcher:
    """Writes many text frames with one ``transport.write``.

    aiohttp writes every frame on its own, which is one ``send()`` system call per
    message; a consumer receiving thousands of messages a second spends most of its time
    there. Frames built here are complete and uncompressed (compression is off), so they
    interleave safely with aiohttp's own control frames (pings, close).
    """

    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        self._ws = ws
        self._transport = request.transport

    async def send(self, texts: list[str]) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self._ws.closed:
            raise ConnectionResetError("the WebSocket is closed")
        transport.write(b"".join([_text_frame(t) for t in texts]))
        while transport.get_write_buffer_size() > _WRITE_BUFFER_HIGH:
            if transport.is_closing():
                raise ConnectionResetError("the WebSocket is closed")
            await asyncio.sleep(0.001)


# orjson: about six times faster than the json module both ways, on every frame.
_json_loads = orjson.loads


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode("utf-8")


def _error_frame(code: int, message: str, context: Any) -> str:
    """A producer's ``send-error`` answer (Pulsar's ``ProducerAck`` with an error)."""
    frame: dict[str, Any] = {"result": f"send-error:{code}", "errorMsg": message}
    if context is not None:
        frame["context"] = context
    return _json_dumps(frame)


def _reason_text(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) <= _MAX_CLOSE_REASON:
        return data
    return data[: _MAX_CLOSE_REASON - 3].decode("utf-8", "ignore").encode("utf-8") + b"..."


def _topic_of(request: web.Request) -> TopicName:
    # /ws/v2/{producer|consumer}/{domain}/{tenant}/{namespace}/{topic}: decoded like REST.
    return topic_from_path(request, 4)


def _int_param(query: Mapping[str, str], name: str, default: int, low: int = 0) -> int:
    """A query parameter Pulsar reads with ``Integer.parseInt`` (a Java int)."""
    text = query.get(name)
    if text is None:
        return default
    try:
        # No int() of a 5,000-digit text (over 4,300 digits it raises; long before, it
        # costs): an int has at most 10 digits and a sign.
        value = int(text) if len(text) <= 11 else None
    except ValueError:
        value = None
    if value is None:
        raise InvalidInputError(f"{name} must be an integer, got {text[:40]!r}")
    if not low <= value <= JAVA_INT_MAX:
        raise InvalidInputError(f"{name} must be between {low} and {JAVA_INT_MAX}, got {value}")
    return value


def _java_long(value: Any) -> bool:
    """A JSON frame's integer that Pulsar's Jackson binds to a Java long (orjson reads up
    to 2**64 - 1)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int)
        and JAVA_LONG_MIN <= value <= JAVA_LONG_MAX
    )


def _enum_param(query: Mapping[str, str], name: str, kind: type[Any], default: Any) -> Any:
    text = query.get(name)
    if text is None:
        return default
    try:
        return kind(text)
    except ValueError:
        raise InvalidInputError(f"Invalid {name} {text}") from None


async def _redirect(request: web.Request, engine: MessagingEngine, topic: TopicName) -> None:
    owner = await engine.owner_of(topic)
    if owner.local:
        return
    if not owner.http_url:
        raise UnavailableError(f"No broker was available to own {topic}")
    base = URL(owner.http_url)
    scheme = "wss" if base.scheme in ("https", "wss") else "ws"
    target = base.with_scheme(scheme).with_path(request.rel_url.raw_path, encoded=True)
    target = target.with_query(request.rel_url.query_string)
    raise web.HTTPTemporaryRedirect(str(target))


@functools.lru_cache(maxsize=4096)  # messages published in the same millisecond share it
def _iso(epoch_ms: int) -> str:
    # Pulsar's DateFormatter: ISO-8601 with milliseconds and the zone offset (UTC here).
    stamp = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_deliver_at(at: Any, after: Any) -> int | None:
    """``deliverAt`` (epoch ms) or ``deliverAfterMs`` (a delay) as an epoch-ms due time."""
    for name, value in (("deliverAt", at), ("deliverAfterMs", after)):
        if value is not None and not (_java_long(value) and value >= 0):
            raise InvalidInputError(f"{name} must be an integer >= 0 (a long), got {value!r}")
    if at is not None:
        return int(at)
    return min(int(time.time() * 1000) + int(after), JAVA_LONG_MAX)


def _parse_event_time(value: Any) -> int | None:
    if value is None:
        return None
    if _java_long(value):
        return int(value)
    if isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(f"eventTime {value!r} is not an ISO-8601 time") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.UTC)
        return int(stamp.timestamp() * 1000)
    raise InvalidInputError(f"eventTime must be an ISO-8601 string, got {value!r}")


def encode_message_frame(delivery: Delivery, message_id: str | None = None) -> str:
    """The JSON frame a consumer receives for one delivery (``message_id``: its base64)."""
    entry = delivery.entry
    properties, event_time = decode_properties(entry.headers)
    frame: dict[str, Any] = {
        "messageId": message_id or delivery.message_id.to_base64(),
        "payload": binascii.b2a_base64(entry.payload, newline=False).decode("ascii"),
        "properties": properties,
        "publishTime": _iso(entry.publish_ms),
        "redeliveryCount": delivery.redelivery_count,
    }
    if event_time is not None:
        frame["eventTime"] = _iso(event_time)
    if entry.key is not None:
        frame["key"] = entry.key
    return _json_dumps(frame)


# --------------------------------------------------------------------------- producer


def _producer_config(query: Mapping[str, str]) -> tuple[ProducerConfig, int]:
    mode = _enum_param(query, "messageRoutingMode", MessageRoutingMode, None)
    routing: dict[str, Any] = {}
    if mode is not None and mode is not MessageRoutingMode.CustomPartition:
        routing["routing_mode"] = mode
    # Absent (or CustomPartition, which Pulsar's proxy cannot load and drops): the client
    # default of sync.routing, RoundRobinPartition: without batching, each unkeyed message
    # goes to the next partition; keyed ones by the hash of their key.
    config = ProducerConfig(
        **routing,
        hashing_scheme=_enum_param(
            query, "hashingScheme", HashingScheme, HashingScheme.JavaStringHash
        ),
        batching_enabled=query_flag(query, "batchingEnabled", lenient=True),
        batching_max_publish_delay_ms=_int_param(query, "batchingMaxPublishDelay", 1, 1),
        producer_name=query.get("producerName"),
    )
    return config, _int_param(query, "maxPendingMessages", 0, 0)


async def producer_endpoint(
    engine: MessagingEngine, request: web.Request
) -> web.StreamResponse:
    """``/ws/v2/producer/...``: publish JSON frames to a topic."""
    try:
        topic = _topic_of(request)
        config, max_pending = _producer_config(request.query)
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to create producer")
    await _redirect(request, engine, topic)
    try:
        handle = await engine.create_producer(topic, config)
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to create producer")
    ws = _ws_response()
    try:
        await ws.prepare(request)
        session = _ProducerSession(
            ws,
            _FrameBatcher(ws, request),
            handle,
            max_pending or engine.config.max_pending_per_producer,
        )
        await session.run()
    finally:
        engine.close_producer(handle)
    return ws


class _Send:
    """One send of a producer connection, in arrival order, until its answer is written.

    Its bound :meth:`answer` is the message's delivery callback: one small object per
    message in flight (thousands are), rather than a partial and its argument tuple.
    """

    __slots__ = ("context", "session", "text")

    def __init__(
        self, session: _ProducerSession, context: Any = None, text: str | None = None
    ) -> None:
        self.session = session
        self.context = context
        #: The frame answering the send (``None`` while Kafka has not answered).
        self.text = text

    def answer(self, message_id: MessageId | None, error: PolicySyncError | None) -> None:
        """Delivery callback: Kafka stored the message (or refused it)."""
        context = self.context
        if error is None and message_id is not None:
            # The hot path, formatted by hand: base64 needs no JSON escaping.
            text = '{"result":"ok","messageId":"' + message_id.to_base64()
            if context is None:
                self.text = text + '"}'
            else:
                self.text = text + '","context":' + _json_dumps(context) + "}"
        else:
            self.text = _error_frame(ERR_UNKNOWN, str(error), context)
        self.session.answered()


class _ProducerSession:
    """Reads send frames, queues them on Kafka, writes one answer per send, in send order.

    Every send gets a slot in ``_pending`` when its frame is read; Kafka's delivery report
    (run on the loop by the engine) or a refusal fills it, and the writer sends the filled
    slots at the head, many frames per socket write. So answers keep the order of the
    sends — as a Pulsar producer's receipts do — even when a round-robin producer's
    partitions answer out of order, and an ``ok`` is only ever written after Kafka
    acknowledged that message and every message sent before it was answered.
    """

    def __init__(
        self,
        ws: web.WebSocketResponse,
        frames: _FrameBatcher,
        handle: ProducerHandle,
        max_pending: int,
    ) -> None:
        self.ws = ws
        self.frames = frames
        self.handle = handle
        self.max_pending = max_pending
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._pending: deque[_Send] = deque()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    @property
    def in_flight(self) -> int:
        """Sends read whose answer is not written yet."""
        return len(self._pending)

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        closer = asyncio.create_task(self._close_on_eviction())
        try:
            async for msg in self.ws:
                if msg.type is WSMsgType.TEXT:
                    text = msg.data
                elif msg.type is WSMsgType.BINARY:
                    text = msg.data.decode("utf-8", "replace")
                else:
                    break
                refuse = None
                if self.handle.held and not await self.handle.wait_writable():
                    refuse = _HELD_TOO_LONG
                self._on_frame(text, refuse)
                wait = self.handle.publish_wait_s()
                if wait > 0.0:
                    await asyncio.sleep(wait)  # publishRate: stop reading this producer
                if len(self._pending) >= self.max_pending:
                    self._room.clear()
                    await self._room.wait()
        finally:
            closer.cancel()
            # Let queued sends finish so their acks reach a client still listening.
            if self._pending and not self.ws.closed:
                try:
                    async with asyncio.timeout(10.0):
                        await self._drained()
                except TimeoutError:
                    logger.warning(
                        "%s: closing with %d unacknowledged sends", self.handle, self.in_flight
                    )
            writer.cancel()

    async def _drained(self) -> None:
        while self._pending:
            self._room.clear()
            await self._room.wait()

    async def _close_on_eviction(self) -> None:
        await self.handle.wait_closed()
        reason = self.handle.close_reason
        if reason is not None and not self.ws.closed:
            code = WS_CLOSE_CODES[reason.cause]
            await self.ws.close(code=code, message=_reason_text(reason.reason))

    def _error(self, code: int, message: str, context: Any) -> None:
        self._pending.append(_Send(self, context, _error_frame(code, message, context)))
        self._wake.set()

    def _on_frame(self, text: str, refuse: str | None = None) -> None:
        try:
            obj = _json_loads(text)
        except ValueError as exc:
            self._error(ERR_BAD_JSON, str(exc), None)
            return
        if not isinstance(obj, dict):
            self._error(ERR_BAD_JSON, "a send request must be a JSON object", None)
            return
        context = obj.get("context")
        payload_text = obj.get("payload")
        if not isinstance(payload_text, str):
            self._error(ERR_PAYLOAD_ENCODING, "payload is missing", context)
            return
        try:
            payload = binascii.a2b_base64(payload_text, strict_mode=True)
        except (binascii.Error, ValueError) as exc:
            self._error(
                ERR_PAYLOAD_ENCODING, f"Invalid Base64 message-payload error={exc}", context
            )
            return
        key = obj.get("key")
        properties = obj.get("properties")
        event_time = obj.get("eventTime")
        sequence_id = obj.get("sequenceId")
        deliver_at = obj.get("deliverAt")
        deliver_after = obj.get("deliverAfterMs")
        if deliver_at is not None or deliver_after is not None:
            try:
                deliver_at = _parse_deliver_at(deliver_at, deliver_after)
            except InvalidInputError as exc:
                self._error(ERR_BAD_JSON, str(exc), context)
                return
        if key is not None or properties is not None or event_time is not None:
            try:
                if key is not None and not isinstance(key, str):
                    raise InvalidInputError(f"key must be a string, got {key!r}")
                if properties is not None and not isinstance(properties, dict):
                    raise InvalidInputError("properties must be a JSON object of strings")
                event_time = _parse_event_time(event_time)
            except InvalidInputError as exc:
                self._error(ERR_BAD_JSON, str(exc), context)
                return
        if sequence_id is not None and not (_java_long(sequence_id) and sequence_id >= 0):
            self._error(
                ERR_BAD_JSON, f"sequenceId must be an integer >= 0: {sequence_id!r}", context
            )
            return
        if self.handle.closed:
            self._error(ERR_UNKNOWN, "Producer is closed", context)
            return
        if refuse is not None:
            self._error(ERR_UNKNOWN, refuse, context)
            return
        send = _Send(self, context)
        try:
            self.handle.send(
                payload,
                send.answer,
                key=key,
                properties=properties,
                event_time_ms=event_time,
                sequence_id=sequence_id,
                deliver_at_ms=deliver_at,
            )
        except MessageTooLargeError as exc:
            self._error(ERR_UNKNOWN, f"Exceed maximum message size: {exc}", context)
        except InvalidInputError as exc:
            self._error(ERR_BAD_JSON, str(exc), context)
        except PolicySyncError as exc:
            self._error(ERR_UNKNOWN, str(exc), context)
        else:
            self._pending.append(send)

    def answered(self) -> None:
        """A send was answered: wake the writer (from any thread)."""
        if threading.get_ident() == self._loop_thread:
            self._wake.set()
        else:  # a report served off the loop (a flush while the sidecar shuts down)
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self.loop.call_soon_threadsafe(self._wake.set)

    async def _write(self) -> None:
        pending = self._pending
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch: list[str] = []
            while pending:
                text = pending[0].text
                if text is None:
                    break
                batch.append(text)
                pending.popleft()
            if batch:
                try:
                    await self.frames.send(batch)
                except (ConnectionResetError, RuntimeError):
                    pass  # the client is gone: its answers have nowhere to go
            if len(pending) < self.max_pending:
                self._room.set()


# --------------------------------------------------------------------------- consumer


async def consumer_endpoint(
    engine: MessagingEngine, request: web.Request
) -> web.StreamResponse:
    """``/ws/v2/consumer/.../{subscription}``: receive messages, acknowledge them."""
    query = request.query
    try:
        topic = _topic_of(request)
        subscription = request.match_info["subscription"]
        sub_type = _enum_param(
            query, "subscriptionType", SubscriptionType, SubscriptionType.Exclusive
        )
        initial = _enum_param(
            query, "subscriptionInitialPosition", InitialPosition, InitialPosition.Latest
        )
        queue_size = _int_param(query, "receiverQueueSize", 0, 0)
        pull_mode = query_flag(query, "pullMode", lenient=True)
        nack_ms = query.get("negativeAckRedeliveryDelay")
        nack_delay = None if nack_ms is None else _int_param(query, "negativeAckRedeliveryDelay", 0)
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to subscribe")
    await _redirect(request, engine, topic)
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
    ws = _ws_response()
    try:
        await ws.prepare(request)
        await _ConsumerSession(ws, _FrameBatcher(ws, request), consumer, engine).run()
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
    engine: MessagingEngine, request: web.Request
) -> web.StreamResponse:
    """``/ws/v2/reader/...``: read a topic from a position, without a durable subscription.

    The same engine as the consumer endpoint, on a non-durable subscription named
    ``reader-<random>``: nothing is committed and it ends with the connection. The
    client's ``{"messageId"}`` frames only open the window for more messages (Pulsar's
    ReaderHandler counts them for flow control; a reader acknowledges nothing).
    """
    query = request.query
    try:
        topic = _topic_of(request)
        initial, start = _reader_start(query)
        queue_size = _int_param(query, "receiverQueueSize", 0, 0)
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to create reader")
    await _redirect(request, engine, topic)
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
    ws = _ws_response()
    try:
        await ws.prepare(request)
        session = _ConsumerSession(ws, _FrameBatcher(ws, request), consumer, engine, reader=True)
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
        frames: _FrameBatcher,
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

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            async for msg in self.ws:
                if msg.type is WSMsgType.TEXT:
                    text = msg.data
                elif msg.type is WSMsgType.BINARY:
                    text = msg.data.decode("utf-8", "replace")
                else:
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
            await self.ws.close(code=code, message=_reason_text(reason))

    async def _on_frame(self, text: str) -> bool:
        consumer = self.consumer
        try:
            obj = _json_loads(text)
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
                message_id = self._sent_ids.pop(text_id, None) if isinstance(text_id, str) else None
                if message_id is None:
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
                frames = []
                for delivery in batch:
                    text_id = delivery.message_id.to_base64()
                    sent_ids[text_id] = delivery.message_id
                    frames.append(encode_message_frame(delivery, text_id))
                await self.frames.send(frames)
        except (ConnectionResetError, RuntimeError):
            return
        reason: CloseReason | None = consumer.close_reason
        if reason is not None:
            await self._close(WS_CLOSE_CODES[reason.cause], reason.reason)
