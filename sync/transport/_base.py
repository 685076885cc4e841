"""The transport seam: the only surface policy-sync needs from Kafka.

Everything above this module talks to :class:`Transport`; the real implementation
(:mod:`sync.transport._kafka`) wraps confluent-kafka and the twin
(:mod:`sync.transport._memory`) keeps an in-memory log with the same semantics
(partitioning, compaction, read-committed visibility, producer fencing), so one
contract test suite runs against both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from sync._errors import ConfigurationError

from ._reachability import ReachabilityConfig, ReachabilityMonitor

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_INVALID",
    "Admin",
    "BatchCallback",
    "BatchReport",
    "Consumer",
    "DeliveryCallback",
    "DeliveryReport",
    "GroupConsumer",
    "GroupDescription",
    "GroupMember",
    "GroupMetadata",
    "Header",
    "KafkaConfig",
    "Message",
    "Producer",
    "RebalanceListener",
    "Record",
    "TopicDescription",
    "TopicSpec",
    "Transport",
]

#: Start offset meaning "the first offset still in the log".
OFFSET_BEGINNING = -2
#: What ``GroupConsumer.committed`` reports for a partition the group never committed.
OFFSET_INVALID = -1001

#: The group coordinator's token for "this member, in this generation" (opaque: pass it back
#: to ``Producer.send_offsets_to_transaction`` unchanged).
GroupMetadata = object

Header = tuple[str, bytes]
ConfigValue = str | int | float | bool


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """Where Kafka is and how to talk to it.

    ``extra`` is a librdkafka passthrough (e.g. security settings). It is copied on
    construction and never mutated, so one config can safely be shared.
    """

    bootstrap_servers: str
    client_id: str = "policy-sync"
    extra: Mapping[str, ConfigValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigurationError("bootstrap_servers is empty; pass host:port[,host:port]")
        for host_port in self.bootstrap_servers.split(","):
            host, sep, port = host_port.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigurationError(
                    f"bootstrap server {host_port!r} is not host:port "
                    f"(in bootstrap_servers={self.bootstrap_servers!r})"
                )
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic as policy-sync needs it.

    ``config`` is used when creating the topic; ``required_config`` are the keys an
    existing topic must match exactly (``ensure_topic`` raises otherwise).
    """

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    required_config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = -1  # -1: the broker's default.replication.factor

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ConfigurationError(f"topic {self.name!r}: partitions must be >= 1")
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))
        object.__setattr__(self, "required_config", MappingProxyType(dict(self.required_config)))


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """What the broker says a topic is."""

    name: str
    partitions: int
    config: Mapping[str, str]
    topic_id: str
    replication_factor: int = -1  # replicas of partition 0; -1: unknown


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """Outcome of one produced record."""

    topic: str
    partition: int
    offset: int
    error: str | None = None
    key: bytes | None = None


DeliveryCallback = Callable[[DeliveryReport], None]

#: One record of :meth:`Producer.produce_many`: ``(partition, key, value, headers)``.
Record = tuple[int, bytes | None, bytes | None, list[Header] | None]


@dataclass(frozen=True, slots=True)
class BatchReport:
    """Outcome of one :meth:`Producer.produce_many` call, once every record is answered.

    ``partition``/``offset``: the lowest ``(partition, offset)`` stored (-1/-1 when none
    was). ``error``: the first error reported (``None``: every record was stored), with the
    partition it concerned in ``error_partition``.
    """

    topic: str
    count: int
    partition: int
    offset: int
    error: str | None = None
    error_partition: int = -1


BatchCallback = Callable[[BatchReport], None]


class Message(Protocol):
    """A consumed record. confluent-kafka's ``Message`` satisfies this structurally,
    so hot loops touch librdkafka's objects without copying them."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> list[tuple[str, bytes]] | None: ...


class Producer(Protocol):
    """Idempotent, optionally transactional producer; keys partitioned as Kafka's Java client."""

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        headers: Sequence[Header] | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None: ...
    def produce_many(self, topic: str, records: Sequence[Record], on_done: BatchCallback) -> None:
        """Queue ``records`` in order, each to its explicit partition; ``on_done`` runs
        once, where delivery reports are served, when the last of them is answered (one
        completion instead of one callback object per record). An empty ``records``
        answers at the next poll."""
        ...

    def poll(self, timeout_s: float = 0.0) -> int: ...
    def flush(self, timeout_s: float) -> int: ...
    def partition_for(self, topic: str, key: bytes) -> int: ...
    def init_transactions(self, timeout_s: float) -> None: ...
    def begin_transaction(self) -> None: ...
    def send_offsets_to_transaction(
        self,
        topic: str,
        offsets: Mapping[int, int],
        group_metadata: GroupMetadata,
        timeout_s: float,
    ) -> None:
        """Commit consumer offsets in the open transaction (Kafka's KIP-447 fencing).

        The group coordinator checks ``group_metadata`` (member id and generation): a member
        whose generation is stale gets :class:`~sync._errors.GroupFencedError` and must abort,
        so nothing it produced in the transaction becomes visible.
        """
        ...

    def commit_transaction(self, timeout_s: float) -> None: ...
    def abort_transaction(self, timeout_s: float) -> None: ...
    def close(self) -> None: ...


class Consumer(Protocol):
    """A manually assigned consumer (no group membership, no rebalancing).

    Created with a ``group_id`` it can also read and write that group's committed
    offsets: ``(offset, metadata)`` per partition, as Kafka's ``OffsetAndMetadata``
    (the metadata string is limited by the broker's ``offset.metadata.max.bytes``,
    4096 by default; a longer one raises :class:`TransportError`).
    """

    def assign(self, topic: str, offsets: Mapping[int, int]) -> None: ...
    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]: ...
    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, int]: ...
    def end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]: ...
    def start_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]: ...
    def pause(self, topic: str, partitions: Sequence[int]) -> None: ...
    def resume(self, topic: str, partitions: Sequence[int]) -> None: ...
    def committed(
        self, topic: str, partitions: Sequence[int], timeout_s: float = 10.0
    ) -> dict[int, tuple[int, str] | None]: ...
    def commit(
        self, topic: str, offsets: Mapping[int, tuple[int, str]], timeout_s: float = 10.0
    ) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a consumer group as the group coordinator describes it."""

    member_id: str
    client_id: str
    host: str
    #: topic -> partitions currently assigned to this member.
    assignment: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group's state (``Stable``, ``PreparingRebalance``, ``CompletingRebalance``,
    ``Empty``, ``Dead`` or ``Unknown``) and members, from the group coordinator."""

    group_id: str
    state: str
    members: tuple[GroupMember, ...]


class RebalanceListener(Protocol):
    """Told about partition movements; called from inside :meth:`GroupConsumer.consume`.

    With the cooperative protocol only partitions that move are revoked, and ``on_revoke``
    runs while this member's generation is still valid (it may still commit). ``on_lost``
    means the member was already thrown out (e.g. its session expired): it must not write.
    """

    def on_assign(self, partitions: Sequence[int]) -> None: ...
    def on_revoke(self, partitions: Sequence[int]) -> None: ...
    def on_lost(self, partitions: Sequence[int]) -> None: ...


class GroupConsumer(Protocol):
    """A member of a Kafka consumer group (cooperative-sticky assignor) reading one topic.

    Liveness is the group's: a member that stops heartbeating for ``session_timeout_ms`` is
    removed and its partitions are given to the others. Offsets are never auto-committed;
    commit them with :meth:`Producer.send_offsets_to_transaction`.
    """

    def subscribe(self, topic: str, listener: RebalanceListener) -> None: ...
    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]: ...
    def assignment(self) -> list[int]: ...
    def committed(self, partitions: Sequence[int], timeout_s: float) -> dict[int, int]:
        """Committed offsets (``OFFSET_INVALID`` if none); with read_committed this waits
        until no transaction that commits offsets for these partitions is still open."""
        ...

    def seek(self, partition: int, offset: int) -> None: ...
    def group_metadata(self) -> GroupMetadata: ...
    def generation(self) -> int:
        """The group generation this member last joined (-1 before the first join)."""
        ...

    def member_id(self) -> str: ...
    def close(self) -> None:
        """Leave the group; revocations are delivered to the listener before returning."""
        ...


class Admin(Protocol):
    """Topic administration."""

    def ensure_topic(self, spec: TopicSpec, timeout_s: float = 30.0) -> TopicDescription: ...
    def describe_topic(self, topic: str, timeout_s: float = 30.0) -> TopicDescription | None: ...
    def delete_topic(self, topic: str, timeout_s: float = 30.0) -> None: ...
    def grow_topic(self, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
        """Raise ``topic``'s partition count to ``partitions`` (Kafka never shrinks one)."""
        ...

    def describe_group(self, group_id: str, timeout_s: float = 10.0) -> GroupDescription:
        """The group's state and members (state ``Dead`` with no members if unknown)."""
        ...

    def list_groups(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]: ...
    def delete_group(self, group: str, timeout_s: float = 30.0) -> None: ...
    def list_topics(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        """Names of the topics starting with ``prefix``, sorted."""
        ...

    def topic_overrides(self, topic: str, timeout_s: float = 30.0) -> dict[str, str] | None:
        """The topic's own (dynamic, per-topic) configuration entries; None: no such topic."""
        ...

    def alter_topic_config(
        self,
        topic: str,
        set_: Mapping[str, str],
        delete: Collection[str] = (),
        timeout_s: float = 30.0,
    ) -> None:
        """Set some per-topic entries and remove others (back to the broker default),
        incrementally: entries not named are left alone."""
        ...

    def list_offsets(
        self, topic: str, partitions: Sequence[int], at: int | str, timeout_s: float = 30.0
    ) -> dict[int, int]:
        """Per partition: ``at="earliest"`` the log start, ``"latest"`` the end (high
        watermark), or an epoch-ms timestamp: the first offset whose record is at least
        that recent (the end offset when none is)."""
        ...

    def group_offsets(self, group: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
        """The offsets ``group`` committed on ``topic`` (partitions without one omitted)."""
        ...

    def alter_group_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], timeout_s: float = 30.0
    ) -> None:
        """Move a group's committed offsets (the group must have no active members)."""
        ...

    def group_positions(
        self, group: str, topic: str, timeout_s: float = 30.0
    ) -> dict[int, tuple[int, str]]:
        """Like :meth:`group_offsets`, with each commit's metadata string:
        ``(offset, metadata)`` per partition (partitions without a commit omitted)."""
        ...

    def alter_group_positions(
        self,
        group: str,
        topic: str,
        positions: Mapping[int, tuple[int, str]],
        timeout_s: float = 30.0,
    ) -> None:
        """Like :meth:`alter_group_offsets`, setting each commit's metadata string too."""
        ...


class Transport(Protocol):
    """Factory for producers, consumers and admin clients bound to one cluster."""

    @property
    def description(self) -> str: ...
    def producer(
        self,
        *,
        transactional_id: str | None = None,
        linger_ms: float = 0,
        transaction_timeout_ms: int | None = None,
    ) -> Producer: ...
    def consumer(
        self,
        *,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
        group_id: str | None = None,
    ) -> Consumer:
        """A consumer (assign to start). ``fetch_wait_max_ms`` only bounds an *empty*
        fetch: a long poll returns as soon as data arrives, so it costs no latency, while
        each idle consumer sends one fetch per broker per period (measured on an idle
        3-sidecar cluster: its 3 brokers used ~65% of a core with 10 ms, ~45% with 100 ms,
        and the sidecars 20% against 12%)."""
        ...

    def group_consumer(
        self,
        group_id: str,
        *,
        client_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int | None = None,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
    ) -> GroupConsumer:
        """Join ``group_id`` as a cooperative-sticky member (subscribe to start)."""
        ...

    def admin(self) -> Admin: ...
    def reachability(self, config: ReachabilityConfig | None = None) -> ReachabilityMonitor:
        """A monitor (not started) of whether this cluster's brokers answer: a consumer
        whose brokers are all gone just stops receiving, so this is the only signal."""
        ...


def config_differences(
    spec: TopicSpec, partitions: int, config: Mapping[str, str]
) -> dict[str, tuple[str | None, str]]:
    """What an existing topic gets wrong against ``spec`` (empty when it fits)."""
    diff: dict[str, tuple[str | None, str]] = {}
    if partitions != spec.partitions:
        diff["partitions"] = (str(partitions), str(spec.partitions))
    for key, need in spec.required_config.items():
        found = config.get(key)
        if found != need:
            diff[key] = (found, need)
    return diff
