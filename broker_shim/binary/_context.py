"""What a connection and its role handlers share, without importing one another.

The connection core (:mod:`._connection`) owns the socket, the handshake and the dispatch
table; the lookups, producers and consumers (:mod:`._lookups`, :mod:`._producers`,
:mod:`._consumers`) see it only through :class:`Session`. The listener's collaborators
(:class:`CommandTrace`-like counters, Kafka offset look-ups) are typed here as small
protocols, so nothing below the server imports :mod:`._server`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sync import TopicName
from sync.cluster import TopicOperation
from sync.errors import InvalidInputError
from sync.messaging import MessagingEngine

from . import PulsarApi_pb2 as api

if TYPE_CHECKING:
    from sync.cluster import ClusterService

__all__ = [
    "BinaryConfig",
    "LastIds",
    "ProtocolViolation",
    "ServerContext",
    "Session",
    "Trace",
    "parse_topic",
]


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
        max_message_size: announced in CONNECTED (Pulsar's ``maxMessageSize``), at most
            the engine's ``default_max_message_size``.
        close_drain_s: how long closing a producer waits for its sends in flight.
        store_entries: store each SEND as one entry, as sent (``--entry-format entry``,
            :mod:`._entries`); False: one record per message (``message``).
    """

    keepalive_s: float = 30.0
    server_version: str = "policy-sync-0.1.0"
    protocol_version: int = 21
    max_message_size: int = 5 * 1024 * 1024
    close_drain_s: float = 10.0
    store_entries: bool = False


class Trace(Protocol):
    """Counts commands by type and direction (:class:`._server.CommandTrace`)."""

    def received(self, kind: int) -> None: ...

    def sent(self, kind: int, count: int = 1) -> None: ...

    def unreadable(self) -> None:
        """A stored record could not be made into a MESSAGE (it was skipped)."""
        ...


class LastIds(Protocol):
    """Kafka partition counts and offsets (:class:`._server.LastMessageIds`)."""

    async def partitions(self, topic: TopicName) -> int | None: ...

    async def end_offsets(self, kafka_topic: str, partitions: Sequence[int]) -> dict[int, int]: ...

    async def start_offsets(
        self, kafka_topic: str, partitions: Sequence[int]
    ) -> dict[int, int]: ...

    async def offsets_at(
        self, kafka_topic: str, partitions: Sequence[int], time_ms: int
    ) -> dict[int, int]: ...

    async def entry_count(self, kafka_topic: str, partition: int, offset: int) -> int: ...


@dataclass(frozen=True, slots=True)
class ServerContext:
    """What every connection of one listener shares."""

    engine: MessagingEngine
    cluster: Callable[[], ClusterService | None]
    advertised_url: str
    producer_name_prefix: str
    config: BinaryConfig
    trace: Trace
    last_ids: LastIds
    #: This sidecar's ``pulsar+ssl://`` URL when it serves TLS (lookup answers).
    advertised_url_tls: str | None = None
    #: Without a cluster registry (Pulsar's standalone): whether the advertised URL is a
    #: loopback address, which makes Connect answers ``proxy_through_service_url``.
    advertises_loopback: bool = False
    names: itertools.count[int] = field(default_factory=lambda: itertools.count(0))


class Session(Protocol):
    """The connection as its role handlers see it (implemented by ``Connection``)."""

    @property
    def ctx(self) -> ServerContext: ...

    @property
    def peer(self) -> str: ...

    @property
    def writer(self) -> asyncio.StreamWriter: ...

    @property
    def closed(self) -> bool: ...

    def write_command(self, cmd: api.BaseCommand) -> None:
        """Queue one simple command (dropped once the connection is closed)."""

    def error(self, request_id: int, exc: BaseException) -> None:
        """Answer a request with ERROR."""

    def success(self, request_id: int) -> None:
        """Answer a request with SUCCESS."""

    def spawn(self, coro: Coroutine[object, object, None], name: str) -> asyncio.Task[None]:
        """Run a task that lives no longer than the connection."""
        ...

    def authorize(
        self, topic: TopicName, operation: TopicOperation, subscription: str = ""
    ) -> None:
        """Refuse an operation on a topic the authenticated role is not allowed (Pulsar's
        AuthorizationError and text)."""

    async def require_owned(self, topic: TopicName) -> None:
        """Refuse a topic this sidecar does not own (the client redoes its lookup)."""


@functools.lru_cache(maxsize=65_536)  # clients repeat the same few names on every request
def parse_topic(text: str) -> TopicName:
    """The topic a command names."""
    return TopicName.parse(text)
