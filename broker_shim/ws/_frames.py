"""What the WebSocket endpoints share: constants, handshake parameters, the redirect to a
topic's owner, and the JSON frames (encoded once, written many to one ``transport.write``)."""

from __future__ import annotations

import asyncio
import binascii
import datetime as dt
import functools
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import orjson
from aiohttp import WSMessage, WSMsgType, web
from yarl import URL

from sync import TopicName, UnavailableError
from sync.cluster import TopicOperation
from sync.errors import (
    InvalidInputError,
)
from sync.messaging import (
    CloseCause,
    Delivery,
    MessagingEngine,
    decode_properties,
)

from .._http_shell import (
    JAVA_INT_MAX,
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    owner_base_url,
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


PRODUCER_PATH = "/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}"
CONSUMER_PATH = "/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}"
READER_PATH = "/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}"

#: Pulsar ``WebSocketError`` codes used in ``send-error:<code>`` results.
ERR_BAD_JSON = 3
ERR_PAYLOAD_ENCODING = 7
ERR_UNKNOWN = 8
#: Close code for an undecodable frame: 4000 + Pulsar's FailedToDeserializeFromJSON.
CLOSE_BAD_FRAME = 4003
MAX_FRAME_BYTES = 16 * 1024 * 1024
#: A send held by a ``producer_request_hold`` backlog quota for longer than allowed.
HELD_TOO_LONG = "ProducerBlockedQuotaExceededError: backlog quota exceeded, send timed out"
MAX_CLOSE_REASON = 123
#: Stop writing (and wait) while this much is queued in the socket's write buffer.
WRITE_BUFFER_HIGH = 1024 * 1024


def ws_response() -> web.WebSocketResponse:
    # No permessage-deflate: small JSON frames gain nothing from it, and it costs a zlib
    # call per frame on both ends.
    return web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES, heartbeat=30.0, compress=False)


def frame_text(msg: WSMessage) -> str | None:
    """The text of a data frame from a client (a binary frame read as UTF-8); None for
    anything else (a close or an error ends the session)."""
    if msg.type is WSMsgType.TEXT:
        return str(msg.data)
    if msg.type is WSMsgType.BINARY:
        return bytes(msg.data).decode("utf-8", "replace")
    return None


def text_frame(text: str) -> bytes:
    """One unmasked, uncompressed text frame (RFC 6455 §5.2), as a server sends it."""
    data = text.encode("utf-8")
    n = len(data)
    if n < 126:
        return bytes((0x81, n)) + data
    if n < 65536:
        return struct.pack("!BBH", 0x81, 126, n) + data
    return struct.pack("!BBQ", 0x81, 127, n) + data


class FrameBatcher:
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
        transport.write(b"".join([text_frame(t) for t in texts]))
        while transport.get_write_buffer_size() > WRITE_BUFFER_HIGH:
            if transport.is_closing():
                raise ConnectionResetError("the WebSocket is closed")
            await asyncio.sleep(0.001)


# orjson: about six times faster than the json module both ways, on every frame.
json_loads = orjson.loads


def json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode("utf-8")


def error_frame(code: int, message: str, context: Any) -> str:
    """A producer's ``send-error`` answer (Pulsar's ``ProducerAck`` with an error)."""
    frame: dict[str, Any] = {"result": f"send-error:{code}", "errorMsg": message}
    if context is not None:
        frame["context"] = context
    return json_dumps(frame)


def reason_text(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) <= MAX_CLOSE_REASON:
        return data
    return data[: MAX_CLOSE_REASON - 3].decode("utf-8", "ignore").encode("utf-8") + b"..."


#: Refuses (raising AuthenticationError or AuthorizationError) a handshake whose role may
#: not do the operation on the topic (consuming: on the subscription named last).
Authorize = Callable[[web.Request, TopicName, TopicOperation, str], None]


def allow_all(
    _request: web.Request, _topic: TopicName, _operation: TopicOperation, _subscription: str
) -> None:
    """No authorization (the sidecar runs without an auth config)."""


#: Refuses (raising a PolicySyncError) a producer the topic does not take before it is
#: created, on the topic's owner: Pulsar's schema checks of a producer without a schema.
AdmitProducer = Callable[[TopicName], Awaitable[None]]


async def admit_any(_topic: TopicName) -> None:
    """No schema registry (the sidecar runs without the cluster): every producer."""


def topic_of(request: web.Request) -> TopicName:
    # /ws/v2/{producer|consumer}/{domain}/{tenant}/{namespace}/{topic}: decoded like REST.
    return topic_from_path(request, 4)


def int_param(query: Mapping[str, str], name: str, default: int, low: int = 0) -> int:
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


def java_long(value: Any) -> bool:
    """A JSON frame's integer that Pulsar's Jackson binds to a Java long (orjson reads up
    to 2**64 - 1)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int)
        and JAVA_LONG_MIN <= value <= JAVA_LONG_MAX
    )


def enum_param(query: Mapping[str, str], name: str, kind: type[Any], default: Any) -> Any:
    text = query.get(name)
    if text is None:
        return default
    try:
        return kind(text)
    except ValueError:
        raise InvalidInputError(f"Invalid {name} {text}") from None


async def redirect(request: web.Request, engine: MessagingEngine, topic: TopicName) -> None:
    owner = await engine.owner_of(topic)
    if owner.local:
        return
    if not owner.http_url:
        raise UnavailableError(f"No broker was available to own {topic}")
    base = URL(owner_base_url(request, owner.http_url))
    scheme = "wss" if base.scheme in ("https", "wss") else "ws"
    target = base.with_scheme(scheme).with_path(request.rel_url.raw_path, encoded=True)
    target = target.with_query(request.rel_url.query_string)
    raise web.HTTPTemporaryRedirect(str(target))


@functools.lru_cache(maxsize=4096)  # messages published in the same millisecond share it
def iso(epoch_ms: int) -> str:
    # Pulsar's DateFormatter: ISO-8601 with milliseconds and the zone offset (UTC here).
    stamp = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_deliver_at(at: Any, after: Any) -> int | None:
    """``deliverAt`` (epoch ms) or ``deliverAfterMs`` (a delay) as an epoch-ms due time."""
    for name, value in (("deliverAt", at), ("deliverAfterMs", after)):
        if value is not None and not (java_long(value) and value >= 0):
            raise InvalidInputError(f"{name} must be an integer >= 0 (a long), got {value!r}")
    if at is not None:
        return int(at)
    return min(int(time.time() * 1000) + int(after), JAVA_LONG_MAX)


def parse_event_time(value: Any) -> int | None:
    if value is None:
        return None
    if java_long(value):
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
        "publishTime": iso(entry.publish_ms),
        "redeliveryCount": delivery.redelivery_count,
    }
    if event_time is not None:
        frame["eventTime"] = iso(event_time)
    if entry.key is not None:
        frame["key"] = entry.key
    return json_dumps(frame)


# --------------------------------------------------------------------------- producer
