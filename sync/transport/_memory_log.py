"""The in-memory twin's broker: topics, partitions and their logs (offsets with gaps
after compaction and transaction markers, the last stable offset, producer epochs).

See :mod:`sync.transport._memory` for the twin as a whole."""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field

from sync._errors import TransportError

from ._base import (
    Header,
)
from ._memory_group import GroupCoordinator

__all__ = ["MemoryBroker", "OFFSET_METADATA_MAX_BYTES"]

#: Kafka's default ``offset.metadata.max.bytes``: the longest commit metadata string.
OFFSET_METADATA_MAX_BYTES = 4096


class _State(enum.Enum):
    COMMITTED = "committed"
    PENDING = "pending"
    ABORTED = "aborted"
    MARKER = "marker"


@dataclass(slots=True)
class _Entry:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[Header, ...]
    state: _State
    txn: tuple[str, int] | None = None


@dataclass(slots=True)
class _Partition:
    entries: list[_Entry] = field(default_factory=list)
    next_offset: int = 0
    start_offset: int = 0

    def last_stable(self) -> int:
        for entry in self.entries:
            if entry.state is _State.PENDING:
                return entry.offset
        return self.next_offset


@dataclass(slots=True)
class _Topic:
    partitions: list[_Partition]
    config: dict[str, str]
    topic_id: str


class _MemMessage:
    """A consumed record with confluent-kafka's accessor names."""

    __slots__ = ("_entry", "_partition", "_topic")

    def __init__(self, topic: str, partition: int, entry: _Entry) -> None:
        self._topic = topic
        self._partition = partition
        self._entry = entry

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._entry.offset

    def key(self) -> bytes | None:
        return self._entry.key

    def value(self) -> bytes | None:
        return self._entry.value

    def timestamp(self) -> tuple[int, int]:
        return (1, self._entry.timestamp_ms)

    def headers(self) -> list[tuple[str, bytes]] | None:
        return list(self._entry.headers) or None


class MemoryBroker:
    """A whole in-memory 'cluster': topics, transactions, compaction."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._topics: dict[str, _Topic] = {}
        self._epochs: dict[str, int] = {}
        #: Committed offsets per consumer group: (topic, partition) -> (offset, metadata).
        self._groups: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
        self._available = True
        #: Consumer groups with members (subscribe / rebalance / generations).
        self._coordinator = GroupCoordinator(self._lock, self._partition_count)

    def _partition_count(self, topic: str) -> int:
        with self._lock:
            found = self._topics.get(topic)
            return 0 if found is None else len(found.partitions)

    def expire_group_member(self, group_id: str, client_id: str) -> int:
        """Expire the session of ``client_id`` in ``group_id`` now, as Kafka does to a
        member killed with ``kill -9``; returns how many members were dropped."""
        return self._coordinator.expire_member(group_id, client_id)

    # -- test controls -------------------------------------------------------------
    def set_available(self, available: bool) -> None:
        """Simulate the broker going away (every call raises TransportError) and back."""
        with self._lock:
            self._available = available
            self._lock.notify_all()

    def compact(self, topic: str, *, drop_tombstones: bool = False) -> None:
        """Keep only the last committed record per key (and, optionally, drop tombstones)."""
        with self._lock:
            for part in self._topic(topic).partitions:
                last: dict[bytes | None, int] = {}
                for entry in part.entries:
                    if entry.state is _State.COMMITTED:
                        last[entry.key] = entry.offset
                keep = set(last.values())
                part.entries = [
                    e
                    for e in part.entries
                    if e.state is _State.PENDING
                    or (
                        e.offset in keep
                        and e.state is _State.COMMITTED
                        and not (drop_tombstones and e.value is None)
                    )
                ]

    def records(self, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
        """Every committed record as (partition, offset, key, value), for assertions."""
        with self._lock:
            return [
                (p, e.offset, e.key, e.value)
                for p, part in enumerate(self._topic(topic).partitions)
                for e in part.entries
                if e.state is _State.COMMITTED
            ]

    # -- internals used by the clients ---------------------------------------------
    def _check(self) -> None:
        if not self._available:
            raise TransportError("memory broker is unavailable")

    def _topic(self, name: str) -> _Topic:
        try:
            return self._topics[name]
        except KeyError:
            raise TransportError(f"unknown topic {name!r}") from None
