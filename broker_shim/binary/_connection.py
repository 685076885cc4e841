"""One client connection of Pulsar's binary protocol, as Pulsar's ``ServerCnx`` serves it.

State machine (every move goes through :meth:`Connection._move`)::

    AWAITING_CONNECT ──CONNECT accepted──▶ CONNECTED ──peer gone / bad frame / shutdown──▶ CLOSED
    AWAITING_CONNECT ──anything else, bad auth, bad frame──▶ CLOSED

A command other than CONNECT before CONNECTED, a second CONNECT, an unparsable or oversized
frame, a SEND for an unknown producer, or an unsupported command type closes the
connection (Pulsar's decoder does the same); refusals of a well-formed request are answered
with Pulsar's ``ServerError`` codes and texts (:mod:`._errors`). Nothing a bad frame carried
is ever written to Kafka: a SEND is unpacked completely before its first message is queued.

Producers and consumers are the messaging engine's (:mod:`broker_shim.messaging`), exactly
as the WebSocket API uses them; this module only translates. See :mod:`broker_shim.binary`
for the message mapping.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sync import NamespaceName, TopicName
from sync.errors import (
    AuthenticationError,
    ConsumerBusyError,
    InvalidInputError,
    PolicySyncError,
    UnavailableError,
)
from sync.messaging import (
    CloseCause,
    Consumer,
    InitialPosition,
    MessageId,
    MessagingEngine,
    ProducerConfig,
    ProducerHandle,
    SubscriptionType,
)
from sync.routing import MessageRoutingMode

from . import PulsarApi_pb2 as api
from . import _commands as commands
from ._commands import EARLIEST_LEDGER, LATEST_LEDGER, NO_REQUEST
from ._errors import CloseAction, close_action_of, server_error_of
from ._framing import (
    MAX_FRAME_SIZE,
    ChecksumError,
    FrameError,
    encode_command,
    parse_frame,
    unpack_messages,
)

if TYPE_CHECKING:
    from sync.cluster import ClusterService

    from ._server import CommandTrace, LastMessageIds

logger = logging.getLogger(__name__)

__all__ = ["BinaryConfig", "Connection", "ConnectionState", "ServerContext"]

_T = api.BaseCommand
_SUB_TYPES = {
    api.CommandSubscribe.Exclusive: SubscriptionType.Exclusive,
    api.CommandSubscribe.Shared: SubscriptionType.Shared,
    api.CommandSubscribe.Failover: SubscriptionType.Failover,
    api.CommandSubscribe.Key_Shared: SubscriptionType.Key_Shared,
}
_WRITE_BUFFER_HIGH = 4 * 1024 * 1024


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


class ProtocolViolation(InvalidInputError):
    """The client broke the protocol: the connection is closed."""


@dataclass(frozen=True, slots=True)
class BinaryConfig:
    """Settings of the binary-protocol listener.

    Attributes:
        keepalive_s: send a PING after this long without traffic; a peer that answered
            nothing an interval later is dropped (Pulsar's ``keepAliveIntervalSeconds``).
        server_version: the CONNECTED ``server_version``.
        protocol_version: the highest protocol version served (negotiated down to the
            client's).
        max_message_size: announced in CONNECTED (Pulsar's ``maxMessageSize``).
        close_drain_s: how long closing a producer waits for its sends in flight.
    """

    keepalive_s: float = 30.0
    server_version: str = "policy-sync-0.1.0"
    protocol_version: int = 21
    max_message_size: int = 5 * 1024 * 1024
    close_drain_s: float = 10.0


@dataclass(frozen=True, slots=True)
class ServerContext:
    """What every connection of one listener shares."""

    engine: MessagingEngine
    cluster: Callable[[], ClusterService | None]
    advertised_url: str
    producer_name_prefix: str
    config: BinaryConfig
    trace: CommandTrace
    last_ids: LastMessageIds
    #: Without a cluster registry (Pulsar's standalone): whether the advertised URL is a
    #: loopback address, which makes Connect answers ``proxy_through_service_url``.
    advertises_loopback: bool = False
    names: itertools.count[int] = field(default_factory=lambda: itertools.count(0))


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

    def __init__(self, conn: Connection, producer_id: int, name: str, handle: ProducerHandle):
        self.conn = conn
        self.producer_id = producer_id
        self.name = name
        self.handle = handle
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
        self.producers: dict[int, _Producer] = {}
        #: Producers this side closed because a backlog quota holds their sends: their
        #: SENDs still in flight are dropped unanswered (the client resends them).
        self._held_ids: set[int] = set()
        self.consumers: dict[int, _Consumer] = {}
        #: Consumers the engine disconnected to reconnect (unload, seek), until they do.
        self._reset_by_seek: dict[int, _Consumer] = {}
        self._last_read = time.monotonic()
        self._tasks: set[asyncio.Task[None]] = set()

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

    def _error(self, request_id: int, exc: BaseException) -> None:
        self.write_command(commands.error(request_id, exc))

    def _success(self, request_id: int) -> None:
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
                self._send_refused(exc.command.send, exc)
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
        entry = _TABLE.get(cmd.type)
        if entry is None:
            raise ProtocolViolation(f"unsupported command {_name(cmd.type)} from {self.peer}")
        handler, field_name = entry
        if field_name and not cmd.HasField(field_name):
            raise ProtocolViolation(f"{_name(cmd.type)} without its {field_name} command")
        if handler is None:  # SEND: synchronous, carries a payload
            self._send(cmd.send, frame.metadata, frame.payload)
            prod = self.producers.get(cmd.send.producer_id)
            wait = 0.0 if prod is None else prod.handle.publish_wait_s()
            if wait > 0.0:
                # publishRate: stop reading the connection, as Pulsar turns off auto-read
                await asyncio.sleep(wait)
        else:
            await handler(self, cmd)

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
        for prod in list(self.producers.values()):
            self._drop_producer(prod)
        for cons in list(self.consumers.values()):
            await self._drop_consumer(cons)
        self.producers.clear()
        self.consumers.clear()
        self._reset_by_seek.clear()
        self.writer.close()

    def _spawn(self, coro: Coroutine[object, object, None], name: str) -> asyncio.Task[None]:
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
                if method != "token":
                    raise AuthenticationError(
                        f"Unsupported authentication method: [{method}] (use token)"
                    )
                token = c.auth_data.decode("utf-8", "replace")
                self.role = auth.authenticate(f"Bearer {token}")
            except AuthenticationError as exc:
                logger.info("binary connection %s: authentication failed: %s", self.peer, exc)
                self._error(NO_REQUEST, exc)
                raise ProtocolViolation(str(exc)) from None
        self.protocol_version = min(c.protocol_version, self.ctx.config.protocol_version)
        self._move(ConnectionState.CONNECTED)
        config = self.ctx.config
        self.write_command(
            commands.connected(
                config.server_version, self.protocol_version, config.max_message_size
            )
        )
        logger.debug("binary connection %s: CONNECTED (%s)", self.peer, c.client_version)

    async def on_ping(self, _cmd: api.BaseCommand) -> None:
        self.write_command(commands.pong())

    async def on_pong(self, _cmd: api.BaseCommand) -> None:
        return  # any frame counts as life (``_last_read``)

    async def on_unexpected_connect(self, _cmd: api.BaseCommand) -> None:
        raise ProtocolViolation(f"second CONNECT on connection {self.peer}")

    # -- lookups -----------------------------------------------------------------------
    def _check_lookup(self, topic: TopicName) -> None:
        svc = self.ctx.cluster()
        if svc is not None and svc.auth is not None and self.role is not None:
            svc.auth.check_lookup(self.role, topic.tenant)

    async def on_partitioned_metadata(self, cmd: api.BaseCommand) -> None:
        m = cmd.partitionMetadata
        try:
            topic = _topic(m.topic)
            self._check_lookup(topic)
            svc = self.ctx.cluster()
            if svc is not None:
                svc.require_ready()
                partitions = await svc.lookups.partitions_fresh(topic)
                if partitions == 0 and not topic.is_partition and svc.store.topic(topic) is None:
                    # Never created? Pulsar creates it here when the partitioned type is
                    # allowed, refuses it when auto-creation is off (TopicNotFound).
                    await self.ctx.engine.prepare_metadata(topic)
                    partitions = await svc.lookups.partitions_fresh(topic)
            else:
                partitions = await self._kafka_partitions(topic)
            out = commands.partitioned_metadata_response(m.request_id, partitions)
        except PolicySyncError as exc:
            out = commands.partitioned_metadata_failed(m.request_id, exc)
        self.write_command(out)

    async def _kafka_partitions(self, topic: TopicName) -> int:
        """Without a cluster registry: Kafka's partition count (1 means not partitioned)."""
        if topic.is_partition:
            return 0
        await self.ctx.engine.prepare_metadata(topic)
        count = await self.ctx.last_ids.partitions(topic)
        return count if count is not None and count > 1 else 0

    async def on_lookup(self, cmd: api.BaseCommand) -> None:
        m = cmd.lookupTopic
        try:
            topic = _topic(m.topic)
            self._check_lookup(topic)
            svc = self.ctx.cluster()
            # Pulsar (TopicLookupBase.shouldRedirectThroughServiceUrl): a Redirect never
            # proxies; a Connect does when the broker runs standalone and advertises a
            # loopback address, so the client keeps using the address it reached us by.
            proxy = False
            if svc is None:
                url, local = self.ctx.advertised_url, True
                proxy = self.ctx.advertises_loopback
            else:
                svc.require_ready()
                await svc.lookups.layout_fresh(topic.namespace_name)
                live = await svc.lookups.owner_of(topic)
                local = (
                    live.broker_id == svc.identity.broker_id and live.incarnation == svc.incarnation
                )
                reg = live.registration
                url = reg.service_url
                listener = m.advertised_listener_name
                if listener and listener in reg.advertised_listeners:
                    url = reg.advertised_listeners[listener].service_url or url
            out = commands.lookup_response(m.request_id, url, local=local, proxy=proxy)
        except PolicySyncError as exc:
            out = commands.lookup_failed(m.request_id, exc)
        self.write_command(out)

    async def on_topics_of_namespace(self, cmd: api.BaseCommand) -> None:
        m = cmd.getTopicsOfNamespace
        try:
            namespace = NamespaceName.parse(m.namespace)
            svc = self.ctx.cluster()
            if svc is None:
                raise UnavailableError(
                    "GET_TOPICS_OF_NAMESPACE needs the cluster registry: run the sidecar "
                    "with lookups enabled"
                )
            svc.require_ready()
            await svc.lookups.refresh()
            prefix = f"/{namespace.tenant}/{namespace.namespace}/"
            names = [t for t in svc.admin.topics() if prefix in t]
            if m.mode == api.CommandGetTopicsOfNamespace.PERSISTENT:
                names = [t for t in names if t.startswith("persistent://")]
            elif m.mode == api.CommandGetTopicsOfNamespace.NON_PERSISTENT:
                names = [t for t in names if t.startswith("non-persistent://")]
        except PolicySyncError as exc:
            self._error(m.request_id, exc)
            return
        self.write_command(commands.topics_of_namespace(m.request_id, names))

    async def on_get_schema(self, cmd: api.BaseCommand) -> None:
        self.write_command(commands.schema_not_found(cmd.getSchema.request_id))

    async def _require_owned(self, topic: TopicName) -> None:
        owner = await self.ctx.engine.owner_of(topic)
        if not owner.local:
            raise UnavailableError(
                f"Namespace bundle for topic ({topic}) not served by this instance. "
                "Please redo the lookup."
            )

    # -- producers ---------------------------------------------------------------------
    async def on_producer(self, cmd: api.BaseCommand) -> None:
        m = cmd.producer
        self._held_ids.discard(m.producer_id)
        existing = self.producers.get(m.producer_id)
        if existing is not None:  # a retried request: same answer
            self._producer_success(m.request_id, existing.name)
            return
        try:
            topic = _topic(m.topic)
            self._check_lookup(topic)
            await self._require_owned(topic)
            if m.encrypted:
                raise InvalidInputError("Encrypted messages are not supported by policy-sync")
            name = (
                m.producer_name
                if m.HasField("producer_name") and m.producer_name
                else (f"{self.ctx.producer_name_prefix}-{next(self.ctx.names)}")
            )
            handle = await self.ctx.engine.create_producer(
                topic,
                ProducerConfig(
                    routing_mode=MessageRoutingMode.SinglePartition,
                    batching_enabled=False,
                    producer_name=name,
                    # A SEND is the client's batch, lingered over once already: a second
                    # wait in Kafka's producer delayed every receipt (docs/binary-send-path.md)
                    linger_ms=0,
                ),
            )
        except PolicySyncError as exc:
            self._error(m.request_id, exc)
            return
        if self.closed:
            self.ctx.engine.close_producer(handle)
            return
        prod = _Producer(self, m.producer_id, name, handle)
        self.producers[m.producer_id] = prod
        prod.watcher = self._spawn(self._watch_producer(prod), f"binary-producer {name}")
        self._producer_success(m.request_id, name)

    def _producer_success(self, request_id: int, name: str) -> None:
        self.write_command(commands.producer_success(request_id, name))

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
            self.writer.close()
        elif action is CloseAction.NOTIFY_CLIENT:
            self.write_command(commands.close_producer(prod.producer_id))

    def _send_refused(self, send: api.CommandSend, exc: BaseException) -> None:
        prod = self.producers.get(send.producer_id)
        if prod is None and send.producer_id in self._held_ids:
            return  # held by a backlog quota: the client resends it after reconnecting
        if prod is None:
            raise ProtocolViolation(f"SEND for unknown producer {send.producer_id}")
        pending = _Send(prod, send.sequence_id, send.highest_sequence_id, 0)
        pending.error = (server_error_of(exc), str(exc))
        prod.pending.append(pending)
        prod.drained.clear()
        prod.flush()

    def _send(
        self, send: api.CommandSend, metadata: api.MessageMetadata | None, payload: bytes
    ) -> None:
        prod = self.producers.get(send.producer_id)
        if prod is None and send.producer_id in self._held_ids:
            return  # held by a backlog quota: the client resends it after reconnecting
        if prod is None:
            # Pulsar: "Received message, but the producer is not ready. Closing the connection."
            raise ProtocolViolation(f"SEND for unknown producer {send.producer_id}")
        if metadata is None:
            raise ProtocolViolation("SEND without message metadata")
        try:
            if send.is_chunk or metadata.HasField("chunk_id"):
                raise InvalidInputError("Chunked messages are not supported by policy-sync")
            if metadata.encryption_keys:
                raise InvalidInputError("Encrypted messages are not supported by policy-sync")
            messages = unpack_messages(metadata, payload)
        except FrameError as exc:
            raise ProtocolViolation(f"producer {prod.name}: {exc}") from None
        except InvalidInputError as exc:
            self._send_refused(send, exc)
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

    def _hold(self, prod: _Producer) -> None:
        """``producer_request_hold``, as Pulsar's broker applies it: the producer is
        disconnected (CLOSE_PRODUCER, once the sends before this one are answered) and
        this send is not answered; the client keeps it pending and reconnects, the engine
        refuses the producer with ``ProducerBlockedQuotaExceededError`` (retriable) while
        the backlog is over the quota, and once it is back under, the client's reconnect
        succeeds and it resends what is pending. A send still pending at the client's
        ``sendTimeout`` fails there with a timeout."""
        logger.info("producer %s held by a backlog quota: disconnecting it", prod.name)
        self._held_ids.add(prod.producer_id)
        if self.producers.get(prod.producer_id) is prod:
            del self.producers[prod.producer_id]
        if prod.watcher is not None:
            prod.watcher.cancel()
        self._spawn(self._disconnect_held(prod), f"binary-producer-hold {prod.name}")

    async def _disconnect_held(self, prod: _Producer) -> None:
        try:
            async with asyncio.timeout(self.ctx.config.close_drain_s):
                await prod.drained.wait()
        except TimeoutError:
            logger.warning("held producer %s disconnected with sends in flight", prod.name)
        finally:
            self.ctx.engine.close_producer(prod.handle)
        if prod.producer_id in self._held_ids and not self.closed:
            self.write_command(commands.close_producer(prod.producer_id))

    async def on_close_producer(self, cmd: api.BaseCommand) -> None:
        m = cmd.close_producer
        prod = self.producers.pop(m.producer_id, None)
        if prod is not None:
            try:
                async with asyncio.timeout(self.ctx.config.close_drain_s):
                    await prod.drained.wait()
            except TimeoutError:
                logger.warning("producer %s closed with sends in flight", prod.name)
            self._drop_producer(prod)
        self._success(m.request_id)

    def _drop_producer(self, prod: _Producer) -> None:
        if prod.watcher is not None:
            prod.watcher.cancel()
        self.ctx.engine.close_producer(prod.handle)

    # -- consumers ---------------------------------------------------------------------
    async def on_subscribe(self, cmd: api.BaseCommand) -> None:
        m = cmd.subscribe
        existing = self.consumers.get(m.consumer_id)
        if existing is not None:
            self._success(m.request_id)
            return
        try:
            topic = _topic(m.topic)
            self._check_lookup(topic)
            await self._require_owned(topic)
            sub_type = _SUB_TYPES.get(m.subType)
            if sub_type is None:
                raise InvalidInputError(f"unknown subscription type {m.subType}")
            initial = (
                InitialPosition.Earliest
                if m.initialPosition == api.CommandSubscribe.Earliest
                else InitialPosition.Latest
            )
            skip_below = 0
            if m.HasField("start_message_id"):
                start = m.start_message_id
                if start.ledgerId == EARLIEST_LEDGER:
                    initial = InitialPosition.Earliest
                elif start.ledgerId >= LATEST_LEDGER:
                    initial = InitialPosition.Latest
                else:
                    initial = InitialPosition.Earliest
                    skip_below = start.entryId
            consumer = await self.ctx.engine.subscribe(
                topic,
                m.subscription,
                sub_type=sub_type,
                consumer_name=m.consumer_name or None,
                pull_mode=True,
                initial_position=initial,
                negative_ack_delay_s=0.0,  # the client waits its nack delay itself
                durable=m.durable,  # readers: nothing committed, no Kafka group left
                read_compacted=m.read_compacted,
            )
        except PolicySyncError as exc:
            self._error(m.request_id, exc)
            return
        if self.closed:
            await consumer.close()
            return
        cons = _Consumer(m.consumer_id, consumer, durable=m.durable, skip_below=skip_below)
        self.consumers[m.consumer_id] = cons
        self._reset_by_seek.pop(m.consumer_id, None)
        self._success(m.request_id)
        if consumer.sub_type is SubscriptionType.Failover:
            self._spawn(self._announce_active(cons), f"binary-active {consumer.name}")
        cons.task = self._spawn(self._dispatch(cons), f"binary-consumer {consumer.name}")

    async def _dispatch(self, cons: _Consumer) -> None:
        consumer = cons.consumer
        trace = self.ctx.trace
        while True:
            batch = await consumer.receive_batch()
            if not batch:
                break
            frames: list[bytes] = []
            for delivery in batch:
                if delivery.message_id.offset < cons.skip_below:
                    consumer.ack(delivery.message_id)
                    consumer.add_permits(1)
                    continue
                frames.append(commands.message_frame(cons.consumer_id, delivery))
            if frames and not self.closed:
                trace.sent(_T.MESSAGE, len(frames))
                self.writer.write(b"".join(frames))
                if self.writer.transport.get_write_buffer_size() > _WRITE_BUFFER_HIGH:
                    await self.writer.drain()  # a client that stops reading stops dispatch
        if self.consumers.get(cons.consumer_id) is not cons or cons.closed_by_client:
            return
        del self.consumers[cons.consumer_id]
        reason = consumer.close_reason
        if reason is not None and reason.cause is CloseCause.UNLOADED:
            self._reset_by_seek[cons.consumer_id] = cons
        action = close_action_of(reason)
        if action is CloseAction.CLOSE_CONNECTION:
            self.writer.close()
        elif action is CloseAction.NOTIFY_CLIENT:
            self.write_command(commands.close_consumer(cons.consumer_id))

    async def _announce_active(self, cons: _Consumer) -> None:
        """Failover: ACTIVE_CONSUMER_CHANGE to this consumer when it subscribes and whenever
        it becomes or stops being the active one (Pulsar's ``notifyActiveConsumerChanged``),
        at the moment the subscription changes its pick."""
        consumer = cons.consumer
        announced: bool | None = None
        while not consumer.closed and not self.closed:
            consumer.active_changed.clear()
            active = consumer.is_active()
            if active != announced:
                announced = active
                self.write_command(commands.active_consumer_change(cons.consumer_id, active=active))
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
            consumer = cons.consumer
            if m.ack_type == api.CommandAck.Cumulative:
                for data in m.message_id:
                    upto = cons.message_id(data)
                    part = upto.kafka_partition
                    for p, offset in sorted(consumer.delivered):
                        if p == part and offset <= upto.offset:
                            consumer.ack(MessageId(upto.partition, offset))
            else:
                for data in m.message_id:
                    consumer.ack(cons.message_id(data))
        if m.HasField("request_id"):
            self.write_command(
                commands.ack_response(m.consumer_id, m.request_id, found=cons is not None)
            )

    async def on_redeliver(self, cmd: api.BaseCommand) -> None:
        m = cmd.redeliverUnacknowledgedMessages
        cons = self._consumer(m.consumer_id)
        if cons is None:
            return
        consumer = cons.consumer
        if m.message_ids:
            ids = [cons.message_id(d) for d in m.message_ids]
        else:
            pid = cons.consumer.subscription.partitioned
            ids = [MessageId(p if pid else -1, o) for p, o in sorted(consumer.delivered)]
        for mid in ids:
            consumer.nack(mid)

    async def on_unsubscribe(self, cmd: api.BaseCommand) -> None:
        m = cmd.unsubscribe
        cons = self._consumer(m.consumer_id)
        if cons is None:
            self._error(m.request_id, ConsumerBusyError(f"Consumer {m.consumer_id} not found"))
            return
        try:
            await self.ctx.engine.unsubscribe(cons.consumer)
        except PolicySyncError as exc:
            self._error(m.request_id, exc)
            return
        cons.closed_by_client = True
        self.consumers.pop(m.consumer_id, None)
        self._success(m.request_id)

    async def on_close_consumer(self, cmd: api.BaseCommand) -> None:
        m = cmd.close_consumer
        self._reset_by_seek.pop(m.consumer_id, None)
        cons = self.consumers.pop(m.consumer_id, None)
        if cons is not None:
            cons.closed_by_client = True
            await self._drop_consumer(cons)
        self._success(m.request_id)

    async def _drop_consumer(self, cons: _Consumer) -> None:
        cons.closed_by_client = True
        if not cons.durable:
            # A reader's subscription lives as long as the reader (Pulsar: non-durable).
            try:
                await self.ctx.engine.unsubscribe(cons.consumer)
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
        cons = live or self._reset_by_seek.get(m.consumer_id)
        try:
            if cons is None:
                raise ConsumerBusyError(f"Consumer {m.consumer_id} not found")
            consumer = cons.consumer
            sub = consumer.subscription
            if live is None:
                await self._require_owned(consumer.topic)  # it was closed: maybe by a move
            parts = sorted(consumer.partitions)
            kafka_topic = sub.kafka_topic
            if not m.HasField("message_id"):
                if not m.HasField("message_publish_time"):
                    raise InvalidInputError("SEEK needs a message id or a publish time")
                # Pulsar: the first message published at or after the time, per partition.
                offsets = await self.ctx.last_ids.offsets_at(
                    kafka_topic, parts, m.message_publish_time
                )
                await self.ctx.engine.reset_subscription(sub.topic, sub.name, offsets)
                self._success(m.request_id)
                return
            target = m.message_id
            if target.ledgerId == EARLIEST_LEDGER:
                offsets = await self.ctx.last_ids.start_offsets(kafka_topic, parts)
            elif target.ledgerId >= LATEST_LEDGER:
                offsets = await self.ctx.last_ids.end_offsets(kafka_topic, parts)
            else:
                mid = cons.message_id(target)
                offsets = {mid.kafka_partition: mid.offset}
            await self.ctx.engine.reset_subscription(sub.topic, sub.name, offsets)
        except PolicySyncError as exc:
            self._error(m.request_id, exc)
            return
        self._success(m.request_id)

    async def on_last_message_id(self, cmd: api.BaseCommand) -> None:
        m = cmd.getLastMessageId
        cons = self._consumer(m.consumer_id)
        if cons is None:
            self._error(m.request_id, ConsumerBusyError(f"Consumer {m.consumer_id} not found"))
            return
        sub = cons.consumer.subscription
        parts = sorted(cons.consumer.partitions)
        try:
            ends = await self.ctx.last_ids.end_offsets(sub.kafka_topic, parts)
        except PolicySyncError as exc:
            self._error(m.request_id, exc)
            return
        end, part = max(((ends.get(p, 0), p) for p in parts), default=(0, 0))
        last = None if end <= 0 else (end - 1, part)
        self.write_command(
            commands.last_message_id_response(m.request_id, last, partitioned=sub.partitioned)
        )


@functools.lru_cache(maxsize=65_536)  # clients repeat the same few names on every request
def _topic(text: str) -> TopicName:
    return TopicName.parse(text)


def _name(kind: int) -> str:
    try:
        return _T.Type.Name(kind)
    except ValueError:
        return str(kind)


_Handler = Callable[[Connection, api.BaseCommand], Awaitable[None]]

#: Command type → (handler, the BaseCommand field it needs); SEND is served inline.
_TABLE: dict[int, tuple[_Handler | None, str]] = {
    _T.CONNECT: (Connection.on_unexpected_connect, ""),
    _T.PING: (Connection.on_ping, ""),
    _T.PONG: (Connection.on_pong, ""),
    _T.PARTITIONED_METADATA: (Connection.on_partitioned_metadata, "partitionMetadata"),
    _T.LOOKUP: (Connection.on_lookup, "lookupTopic"),
    _T.GET_TOPICS_OF_NAMESPACE: (Connection.on_topics_of_namespace, "getTopicsOfNamespace"),
    _T.GET_SCHEMA: (Connection.on_get_schema, "getSchema"),
    _T.PRODUCER: (Connection.on_producer, "producer"),
    _T.SEND: (None, "send"),
    _T.CLOSE_PRODUCER: (Connection.on_close_producer, "close_producer"),
    _T.SUBSCRIBE: (Connection.on_subscribe, "subscribe"),
    _T.FLOW: (Connection.on_flow, "flow"),
    _T.ACK: (Connection.on_ack, "ack"),
    _T.REDELIVER_UNACKNOWLEDGED_MESSAGES: (
        Connection.on_redeliver,
        "redeliverUnacknowledgedMessages",
    ),
    _T.UNSUBSCRIBE: (Connection.on_unsubscribe, "unsubscribe"),
    _T.CLOSE_CONSUMER: (Connection.on_close_consumer, "close_consumer"),
    _T.SEEK: (Connection.on_seek, "seek"),
    _T.GET_LAST_MESSAGE_ID: (Connection.on_last_message_id, "getLastMessageId"),
}
