"""The asyncio server of Pulsar's binary protocol, and what its connections share."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from sync import TopicName, kafka_topic_of
from sync.messaging import MessagingEngine
from sync.transport import Admin, Consumer, Transport

from . import PulsarApi_pb2 as api
from ._connection import Connection
from ._context import BinaryConfig, ServerContext
from ._entries import entry_count_of

if TYPE_CHECKING:
    from sync.cluster import ClusterService

logger = logging.getLogger(__name__)

__all__ = ["BinaryServer", "CommandTrace", "LastMessageIds"]


class CommandTrace:
    """Counts the commands served, by type and direction (the demo prints them; the
    sidecar's ``/metrics`` shows them as ``pulsar_binary_commands_total``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.received_counts: Counter[str] = Counter()
        self.sent_counts: Counter[str] = Counter()
        #: Received command types in first-seen order (CONNECT … CLOSE_CONSUMER).
        self.order: list[str] = []
        #: Stored records that could not be sent as a MESSAGE (acknowledged, skipped).
        self.unreadable_count = 0
        self._metric: PromCounter | None = None
        self._unreadable: PromCounter | None = None
        #: Per (direction, command type): its name and labelled counter, looked up once
        #: (the enum's Name() and Prometheus' labels() cost ~4% of the loop per command).
        self._by_kind: dict[tuple[str, int], tuple[str, PromCounter | None]] = {}
        if registry is not None:
            self._metric = PromCounter(
                "pulsar_binary_commands",
                "Pulsar binary-protocol commands served, by direction and type",
                ["direction", "command"],
                registry=registry,
            )
            self._unreadable = PromCounter(
                "pulsar_binary_unreadable_records",
                "stored records no MESSAGE could be made of: acknowledged and skipped",
                registry=registry,
            )

    @staticmethod
    def _name(kind: int) -> str:
        try:
            return api.BaseCommand.Type.Name(kind)
        except ValueError:
            return f"UNKNOWN_{kind}"

    def _of(self, direction: str, kind: int) -> tuple[str, PromCounter | None]:
        known = self._by_kind.get((direction, kind))
        if known is None:
            name = self._name(kind)
            child = None if self._metric is None else self._metric.labels(direction, name)
            known = self._by_kind[(direction, kind)] = (name, child)
        return known

    def received(self, kind: int) -> None:
        name, child = self._of("in", kind)
        if name not in self.received_counts:
            self.order.append(name)
        self.received_counts[name] += 1
        if child is not None:
            child.inc()

    def sent(self, kind: int, count: int = 1) -> None:
        name, child = self._of("out", kind)
        self.sent_counts[name] += count
        if child is not None:
            child.inc(count)

    def unreadable(self) -> None:
        self.unreadable_count += 1
        if self._unreadable is not None:
            self._unreadable.inc()


class LastMessageIds:
    """Kafka facts the protocol asks for: partition counts and end offsets (blocking
    Kafka calls run in a thread, one at a time, on one reused client)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._lock = threading.Lock()
        self._consumer: Consumer | None = None
        self._admin: Admin | None = None
        #: Stored entries' message counts by (Kafka topic, partition, offset).
        self._counts: dict[tuple[str, int, int], int] = {}

    async def partitions(self, topic: TopicName) -> int | None:
        """Kafka partitions of ``topic`` (None: no such topic)."""

        def describe() -> int | None:
            with self._lock:
                if self._admin is None:
                    self._admin = self._transport.admin()
                desc = self._admin.describe_topic(kafka_topic_of(topic.base))
            return None if desc is None else desc.partitions

        return await asyncio.to_thread(describe)

    async def end_offsets(self, kafka_topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """High watermarks of ``partitions``."""
        return await self._offsets(kafka_topic, partitions, earliest=False)

    async def start_offsets(self, kafka_topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """First offsets still stored in ``partitions``."""
        return await self._offsets(kafka_topic, partitions, earliest=True)

    async def offsets_at(
        self, kafka_topic: str, partitions: Sequence[int], time_ms: int
    ) -> dict[int, int]:
        """Per partition, the offset of the first record whose timestamp (the publish
        time) is ``>= time_ms``; the end offset where no record is that recent (Kafka's
        ``ListOffsets`` by timestamp, as ``offsets_for_times``)."""

        def query() -> dict[int, int]:
            with self._lock:
                if self._admin is None:
                    self._admin = self._transport.admin()
                return self._admin.list_offsets(kafka_topic, list(partitions), time_ms)

        return await asyncio.to_thread(query)

    async def entry_count(self, kafka_topic: str, partition: int, offset: int) -> int:
        """The messages of the record at ``offset`` when it is a stored entry, else 0
        (read once per record, then remembered: records never change)."""
        key = (kafka_topic, partition, offset)
        cached = self._counts.get(key)
        if cached is not None:
            return cached

        def read() -> int | None:
            with self._lock:
                if self._consumer is None:
                    self._consumer = self._transport.consumer()
                self._consumer.assign(kafka_topic, {partition: offset})
                for _ in range(5):  # the record exists: a fetch or two finds it
                    for record in self._consumer.consume(1, 1.0):
                        if record.offset() == offset:
                            return entry_count_of(record.headers())
                return None

        count = await asyncio.to_thread(read)
        if count is None:  # not read in time (a loaded broker, or gone): asked again later
            logger.warning(
                "%s[%d]@%d: not read in 5 s; its batch size is unknown this time",
                kafka_topic,
                partition,
                offset,
            )
            return 0
        if len(self._counts) >= 4096:
            self._counts.clear()
        self._counts[key] = count
        return count

    async def _offsets(
        self, kafka_topic: str, partitions: Sequence[int], *, earliest: bool
    ) -> dict[int, int]:
        def query() -> dict[int, int]:
            with self._lock:
                if self._consumer is None:
                    self._consumer = self._transport.consumer()
                if earliest:
                    return self._consumer.start_offsets(kafka_topic, list(partitions))
                return self._consumer.end_offsets(kafka_topic, list(partitions))

        return await asyncio.to_thread(query)

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


def _is_loopback(url: str) -> bool:
    """Whether ``url``'s host is a loopback address (Java's ``InetAddress.getByName(host)
    .isLoopbackAddress()``; a host that does not resolve is not)."""
    host = urllib.parse.urlsplit(url).hostname
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


class BinaryServer:
    """Serves Pulsar's binary protocol over the messaging engine.

    Args:
        engine: the same engine the WebSocket API uses.
        cluster: the current cluster service (lookups, auth), or None without one.
        advertised_url: this sidecar's ``pulsar://host:port`` (lookup answers).
        producer_name_prefix: generated producer names are ``<prefix>-<n>``.
        advertised_url_tls: its ``pulsar+ssl://host:port`` when it serves TLS too.
    """

    def __init__(
        self,
        engine: MessagingEngine,
        *,
        cluster: Callable[[], ClusterService | None],
        advertised_url: str,
        producer_name_prefix: str,
        config: BinaryConfig | None = None,
        registry: CollectorRegistry | None = None,
        advertised_url_tls: str | None = None,
    ) -> None:
        self.trace = CommandTrace(registry)
        self.last_ids = LastMessageIds(engine.transport)
        self.ctx = ServerContext(
            engine=engine,
            cluster=cluster,
            advertised_url=advertised_url,
            advertised_url_tls=advertised_url_tls,
            producer_name_prefix=producer_name_prefix,
            config=config or BinaryConfig(),
            trace=self.trace,
            last_ids=self.last_ids,
            advertises_loopback=_is_loopback(advertised_url),
        )
        self.connections: set[Connection] = set()
        self._servers: list[asyncio.Server] = []
        #: The bound ports of the plain and the TLS listener (None: not listening).
        self.port: int | None = None
        self.tls_port: int | None = None

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> int:
        """Listen (on ``sock`` if given, else ``host:port``), over TLS with ``tls``;
        returns the bound port. A server may listen twice: plain and TLS."""
        if sock is not None:
            server = await asyncio.start_server(self._accept, sock=sock, ssl=tls)
        else:
            server = await asyncio.start_server(self._accept, host, port, ssl=tls)
        self._servers.append(server)
        bound = int(server.sockets[0].getsockname()[1])
        if tls is None:
            self.port = bound
        else:
            self.tls_port = bound
        logger.info("Pulsar binary protocol listening on port %d%s", bound, " (TLS)" if tls else "")
        return bound

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self.ctx, reader, writer)
        self.connections.add(conn)
        try:
            await conn.serve()
        except Exception:
            logger.exception("binary connection %s failed", conn.peer)
            await conn.close()
        finally:
            self.connections.discard(conn)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for conn in list(self.connections):
            await conn.close()
        for server in servers:
            await server.wait_closed()
        await asyncio.to_thread(self.last_ids.close)
