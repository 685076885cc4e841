"""Pulsar's WebSocket producer endpoint: one session per connection, sends pipelined up to
``maxPendingMessages``, every send answered once, in order, after Kafka acknowledged it."""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from sync import PolicySyncError
from sync.cluster import TopicOperation
from sync.errors import (
    InvalidInputError,
    MessageTooLargeError,
)
from sync.messaging import (
    MessageId,
    MessagingEngine,
    ProducerConfig,
    ProducerHandle,
)
from sync.routing import HashingScheme, MessageRoutingMode

from .._http_errors import handshake_refusal
from .._http_shell import (
    query_flag,
)
from ._frames import (
    ERR_BAD_JSON,
    ERR_PAYLOAD_ENCODING,
    ERR_UNKNOWN,
    HELD_TOO_LONG,
    WS_CLOSE_CODES,
    AdmitProducer,
    Authorize,
    FrameBatcher,
    enum_param,
    error_frame,
    frame_text,
    int_param,
    java_long,
    json_dumps,
    json_loads,
    parse_deliver_at,
    parse_event_time,
    reason_text,
    redirect,
    topic_of,
    ws_response,
)

logger = logging.getLogger(__name__)


def _producer_config(query: Mapping[str, str]) -> tuple[ProducerConfig, int]:
    mode = enum_param(query, "messageRoutingMode", MessageRoutingMode, None)
    routing: dict[str, Any] = {}
    if mode is not None and mode is not MessageRoutingMode.CustomPartition:
        routing["routing_mode"] = mode
    # Absent (or CustomPartition, which Pulsar's proxy cannot load and drops): the client
    # default of sync.routing, RoundRobinPartition: without batching, each unkeyed message
    # goes to the next partition; keyed ones by the hash of their key.
    config = ProducerConfig(
        **routing,
        hashing_scheme=enum_param(
            query, "hashingScheme", HashingScheme, HashingScheme.JavaStringHash
        ),
        batching_enabled=query_flag(query, "batchingEnabled", lenient=True),
        batching_max_publish_delay_ms=int_param(query, "batchingMaxPublishDelay", 1, 1),
        producer_name=query.get("producerName"),
    )
    return config, int_param(query, "maxPendingMessages", 0, 0)


async def producer_endpoint(
    engine: MessagingEngine,
    authorize: Authorize,
    admit: AdmitProducer,
    request: web.Request,
) -> web.StreamResponse:
    """``/ws/v2/producer/...``: publish JSON frames to a topic."""
    try:
        topic = topic_of(request)
        config, max_pending = _producer_config(request.query)
        authorize(request, topic, TopicOperation.PRODUCE, "")
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to create producer")
    await redirect(request, engine, topic)
    try:
        # Pulsar's proxy creates its producer with Schema.BYTES (no schema sent): the
        # owner's schema checks of a producer without one (schemaValidationEnforced).
        await admit(topic)
        handle = await engine.create_producer(topic, config)
    except PolicySyncError as exc:
        return handshake_refusal(exc, "Failed to create producer")
    ws = ws_response()
    try:
        await ws.prepare(request)
        session = _ProducerSession(
            ws,
            FrameBatcher(ws, request),
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
                self.text = text + '","context":' + json_dumps(context) + "}"
        else:
            self.text = error_frame(ERR_UNKNOWN, str(error), context)
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
        frames: FrameBatcher,
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
                text = frame_text(msg)
                if text is None:
                    break
                refuse = None
                if self.handle.held and not await self.handle.wait_writable():
                    refuse = HELD_TOO_LONG
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
            await self.ws.close(code=code, message=reason_text(reason.reason))

    def _error(self, code: int, message: str, context: Any) -> None:
        self._pending.append(_Send(self, context, error_frame(code, message, context)))
        self._wake.set()

    def _on_frame(self, text: str, refuse: str | None = None) -> None:
        try:
            obj = json_loads(text)
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
                deliver_at = parse_deliver_at(deliver_at, deliver_after)
            except InvalidInputError as exc:
                self._error(ERR_BAD_JSON, str(exc), context)
                return
        if key is not None or properties is not None or event_time is not None:
            try:
                if key is not None and not isinstance(key, str):
                    raise InvalidInputError(f"key must be a string, got {key!r}")
                if properties is not None and not isinstance(properties, dict):
                    raise InvalidInputError("properties must be a JSON object of strings")
                event_time = parse_event_time(event_time)
            except InvalidInputError as exc:
                self._error(ERR_BAD_JSON, str(exc), context)
                return
        if sequence_id is not None and not (java_long(sequence_id) and sequence_id >= 0):
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
