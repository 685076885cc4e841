"""One client connection of Pulsar's binary protocol, as Pulsar's ``ServerCnx`` serves it.

State machine (every move goes through :meth:`Connection._move`)::

    AWAITING_CONNECT ──CONNECT accepted──▶ CONNECTED ──peer gone / bad frame / shutdown──▶ CLOSED
    AWAITING_CONNECT ──anything else, bad auth, bad frame──▶ CLOSED

A command other than CONNECT before CONNECTED, a second CONNECT, an unparsable or oversized
frame, a SEND for an unknown producer, or an unsupported command type closes the
connection (Pulsar's decoder does the same); refusals of a well-formed request are answered
with Pulsar's ``ServerError`` codes and texts (:mod:`._errors`).

This module is the connection core: the frame loop, the handshake, keepalive, the dispatch
table and the lifecycle. The commands themselves are served by one handler per role,
which sees the connection only as a :class:`._context.Session`:

* :mod:`._lookups` – PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE;
* :mod:`._schemas` – GET_SCHEMA, GET_OR_CREATE_SCHEMA, and the schemas of producers and
  consumers;
* :mod:`._producers` – PRODUCER, SEND, CLOSE_PRODUCER;
* :mod:`._consumers` – SUBSCRIBE, FLOW, ACK, REDELIVER, UNSUBSCRIBE, SEEK,
  GET_LAST_MESSAGE_ID, CLOSE_CONSUMER and the MESSAGE push;
* :mod:`._commands` – every outbound command, built in one place.

Producers and consumers are the messaging engine's (:mod:`sync.messaging`), exactly as the
WebSocket API uses them; this package only translates. See :mod:`broker_shim.binary` for
the message mapping.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine

from sync import TopicName
from sync.cluster import TopicOperation
from sync.errors import AuthenticationError, InvalidInputError, UnavailableError

from .._tls import peer_common_name
from . import PulsarApi_pb2 as api
from . import _commands as commands
from ._commands import NO_REQUEST
from ._consumers import Consumers
from ._context import BinaryConfig, ProtocolViolation, ServerContext
from ._framing import MAX_FRAME_SIZE, ChecksumError, FrameError, encode_command, parse_frame
from ._lookups import Lookups
from ._producers import Producers
from ._schemas import Schemas

logger = logging.getLogger(__name__)

__all__ = ["BinaryConfig", "Connection", "ConnectionState", "ServerContext"]

_T = api.BaseCommand
_Handler = Callable[[api.BaseCommand], Awaitable[None]]


class ConnectionState(enum.Enum):
    """Life of one binary-protocol connection."""

    AWAITING_CONNECT = "AWAITING_CONNECT"
    CONNECTED = "CONNECTED"
    CLOSED = "CLOSED"


_MOVES: dict[ConnectionState, frozenset[ConnectionState]] = {
    ConnectionState.AWAITING_CONNECT: frozenset(
        {ConnectionState.CONNECTED, ConnectionState.CLOSED}
    ),
    ConnectionState.CONNECTED: frozenset({ConnectionState.CLOSED}),
    ConnectionState.CLOSED: frozenset(),
}


class Connection:
    """Serves one TCP connection (create one per accepted socket, then :meth:`serve`)."""

    def __init__(
        self,
        ctx: ServerContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.ctx = ctx
        self.reader = reader
        self.writer = writer
        self.state = ConnectionState.AWAITING_CONNECT
        self.peer = str(writer.get_extra_info("peername"))
        self.role: str | None = None
        self.protocol_version = 0
        self._last_read = time.monotonic()
        self._tasks: set[asyncio.Task[None]] = set()
        self.lookups = Lookups(self)
        self.schemas = Schemas(self)
        self.producers = Producers(self)
        self.consumers = Consumers(self)
        #: Command type → (handler, the BaseCommand field it needs); SEND is served inline.
        self._table: dict[int, tuple[_Handler | None, str]] = {
            _T.CONNECT: (self.on_unexpected_connect, ""),
            _T.PING: (self.on_ping, ""),
            _T.PONG: (self.on_pong, ""),
            _T.PARTITIONED_METADATA: (self.lookups.on_partitioned_metadata, "partitionMetadata"),
            _T.LOOKUP: (self.lookups.on_lookup, "lookupTopic"),
            _T.GET_TOPICS_OF_NAMESPACE: (
                self.lookups.on_topics_of_namespace,
                "getTopicsOfNamespace",
            ),
            _T.GET_SCHEMA: (self.schemas.on_get_schema, "getSchema"),
            _T.GET_OR_CREATE_SCHEMA: (self.schemas.on_get_or_create_schema, "getOrCreateSchema"),
            _T.PRODUCER: (self.producers.on_producer, "producer"),
            _T.SEND: (None, "send"),
            _T.CLOSE_PRODUCER: (self.producers.on_close_producer, "close_producer"),
            _T.SUBSCRIBE: (self.consumers.on_subscribe, "subscribe"),
            _T.FLOW: (self.consumers.on_flow, "flow"),
            _T.ACK: (self.consumers.on_ack, "ack"),
            _T.REDELIVER_UNACKNOWLEDGED_MESSAGES: (
                self.consumers.on_redeliver,
                "redeliverUnacknowledgedMessages",
            ),
            _T.UNSUBSCRIBE: (self.consumers.on_unsubscribe, "unsubscribe"),
            _T.CLOSE_CONSUMER: (self.consumers.on_close_consumer, "close_consumer"),
            _T.SEEK: (self.consumers.on_seek, "seek"),
            _T.GET_LAST_MESSAGE_ID: (self.consumers.on_last_message_id, "getLastMessageId"),
        }

    # -- state -----------------------------------------------------------------------
    def _move(self, new: ConnectionState) -> None:
        if new not in _MOVES[self.state]:
            raise ProtocolViolation(f"connection {self.peer}: {self.state.value} → {new.value}")
        self.state = new

    @property
    def closed(self) -> bool:
        return self.state is ConnectionState.CLOSED

    # -- writing -----------------------------------------------------------------------
    def write_command(self, cmd: api.BaseCommand) -> None:
        """Queue one simple command (dropped once the connection is closed)."""
        if self.closed or self.writer.is_closing():
            return
        self.ctx.trace.sent(cmd.type)
        self.writer.write(encode_command(cmd))

    def error(self, request_id: int, exc: BaseException) -> None:
        """Answer a request with ERROR."""
        self.write_command(commands.error(request_id, exc))

    def success(self, request_id: int) -> None:
        """Answer a request with SUCCESS."""
        self.write_command(commands.success(request_id))

    # -- the loop ----------------------------------------------------------------------
    async def serve(self) -> None:
        """Read and serve frames until the peer leaves or breaks the protocol."""
        keepalive = asyncio.create_task(self._keepalive(), name=f"binary-keepalive {self.peer}")
        try:
            while not self.closed:
                header = await self.reader.readexactly(4)
                size = int.from_bytes(header, "big")
                if size < 4 or size > MAX_FRAME_SIZE:
                    raise FrameError(f"frame size {size} is outside 4..{MAX_FRAME_SIZE} bytes")
                body = await self.reader.readexactly(size)
                self._last_read = time.monotonic()
                await self._on_body(body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except InvalidInputError as exc:
            logger.info("closing binary connection %s: %s", self.peer, exc)
        finally:
            keepalive.cancel()
            await self.close()

    async def _on_body(self, body: bytes) -> None:
        try:
            frame = parse_frame(body)
        except ChecksumError as exc:
            if exc.command.type == _T.SEND and exc.command.HasField("send"):
                self.producers.refuse(exc.command.send, exc)
                return
            raise
        cmd = frame.command
        self.ctx.trace.received(cmd.type)
        if self.state is ConnectionState.AWAITING_CONNECT:
            if cmd.type != _T.CONNECT:
                raise ProtocolViolation(
                    f"{_T.Type.Name(cmd.type)} before CONNECT (connection {self.peer})"
                )
            await self._connect(cmd.connect)
            return
        entry = self._table.get(cmd.type)
        if entry is None:
            raise ProtocolViolation(f"unsupported command {_name(cmd.type)} from {self.peer}")
        handler, field_name = entry
        if field_name and not cmd.HasField(field_name):
            raise ProtocolViolation(f"{_name(cmd.type)} without its {field_name} command")
        if handler is None:  # SEND: synchronous, carries a payload
            self.producers.on_send(cmd.send, frame)
            wait = self.producers.publish_wait_s(cmd.send.producer_id)
            if wait > 0.0:
                # publishRate: stop reading the connection, as Pulsar turns off auto-read
                await asyncio.sleep(wait)
        else:
            await handler(cmd)

    async def _keepalive(self) -> None:
        """Every interval: a peer that left our PING unanswered is dropped; an idle one
        gets a PING (any frame it sends counts as an answer), as Pulsar's handler does."""
        interval = self.ctx.config.keepalive_s
        ping_sent_at: float | None = None
        while not self.closed:
            await asyncio.sleep(interval)
            if self.state is ConnectionState.AWAITING_CONNECT:
                logger.info("binary connection %s: no CONNECT; dropping", self.peer)
                self.writer.close()
                return
            if ping_sent_at is not None and self._last_read < ping_sent_at:
                logger.info("binary connection %s: PING unanswered; dropping", self.peer)
                self.writer.close()
                return
            ping_sent_at = None
            if time.monotonic() - self._last_read >= interval:
                ping_sent_at = time.monotonic()
                self.write_command(commands.ping())

    async def close(self) -> None:
        """Close the socket and release every producer and consumer (idempotent)."""
        if self.closed:
            return
        self._move(ConnectionState.CLOSED)
        for task in list(self._tasks):
            task.cancel()
        self.producers.close_all()
        await self.consumers.close_all()
        self.writer.close()

    def spawn(self, coro: Coroutine[object, object, None], name: str) -> asyncio.Task[None]:
        """Run a task that lives no longer than the connection."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- CONNECT / PING ----------------------------------------------------------------
    async def _connect(self, c: api.CommandConnect) -> None:
        svc = self.ctx.cluster()
        auth = None if svc is None else svc.auth
        if auth is not None:
            method = c.auth_method_name if c.HasField("auth_method_name") else "none"
            try:
                if method == "tls":
                    self.role = auth.authenticate_certificate(self._certificate_name())
                elif method == "token" and "token" in auth.config.providers:
                    token = c.auth_data.decode("utf-8", "replace")
                    self.role = auth.authenticate_token(token)
                elif method == "basic" and auth.config.basic is not None:
                    self.role = auth.authenticate_basic(c.auth_data.decode("utf-8", "replace"))
                elif auth.config.anonymous_role is not None:
                    self.role = auth.anonymous()  # Pulsar: no provider of that name
                else:
                    raise AuthenticationError(
                        f"Unsupported authentication method: [{method}] (use "
                        f"{' or '.join(sorted(auth.config.providers))})"
                    )
            except AuthenticationError as exc:
                logger.info("binary connection %s: authentication failed: %s", self.peer, exc)
                self.error(NO_REQUEST, exc)
                raise ProtocolViolation(str(exc)) from None
        self.protocol_version = min(c.protocol_version, self.ctx.config.protocol_version)
        self._move(ConnectionState.CONNECTED)
        config = self.ctx.config
        # Clients split larger messages into chunks of this size (chunking) or refuse
        # them: never more than a topic takes by default, so that every chunk fits Kafka.
        max_size = min(config.max_message_size, self.ctx.engine.config.default_max_message_size)
        self.write_command(
            commands.connected(config.server_version, self.protocol_version, max_size)
        )
        logger.debug("binary connection %s: CONNECTED (%s)", self.peer, c.client_version)

    def _certificate_name(self) -> str | None:
        """The common name of the client's verified TLS certificate (None: none)."""
        return peer_common_name(self.writer)

    async def on_ping(self, _cmd: api.BaseCommand) -> None:
        self.write_command(commands.pong())

    async def on_pong(self, _cmd: api.BaseCommand) -> None:
        return  # any frame counts as life (``_last_read``)

    async def on_unexpected_connect(self, _cmd: api.BaseCommand) -> None:
        raise ProtocolViolation(f"second CONNECT on connection {self.peer}")

    # -- what every role checks -------------------------------------------------------
    def authorize(
        self, topic: TopicName, operation: TopicOperation, subscription: str = ""
    ) -> None:
        """Refuse an operation on a topic the authenticated role is not allowed."""
        svc = self.ctx.cluster()
        if svc is not None and svc.auth is not None and self.role is not None:
            svc.auth.check_topic(self.role, topic, operation, subscription)

    async def require_owned(self, topic: TopicName) -> None:
        """Refuse a topic this sidecar does not own (the client redoes its lookup)."""
        owner = await self.ctx.engine.owner_of(topic)
        if not owner.local:
            raise UnavailableError(
                f"Namespace bundle for topic ({topic}) not served by this instance. "
                "Please redo the lookup."
            )


def _name(kind: int) -> str:
    try:
        return _T.Type.Name(kind)
    except ValueError:
        return str(kind)
