"""The merged global table of one cluster: its own ``policy-sync-global-events`` and every
mirror ``<peer>.policy-sync-global-events``, folded into one last-writer-wins table.

Each topic is read by the one compacted-table reader (:class:`sync.table.TableReader`:
replay to the captured end offsets, READY, tail, one quarantine), all into one
:class:`~sync.geo._lww.LwwTable`. A record's stamp comes from its headers
(``policy-sync.hlc``, ``policy-sync.cluster``, ``policy-sync.event-id``; MirrorMaker 2 copies
headers as they are). A record without a readable stamp, or whose cluster is not the
topic's origin (own topic: this cluster; mirror ``R.…``: R), is quarantined and does not
compete: it never wedges the reader and never wins. The order records arrive in, duplicates
and replays do not change the table (see :mod:`._lww`), so every cluster's table is the
same once each has read every origin's records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from sync._constants import (
    CHANGE_EVENTS_CREATE_CONFIG,
    GLOBAL_EVENTS_TOPIC,
    HEADER_CLUSTER,
    HEADER_EVENT_ID,
    HEADER_HLC,
)
from sync.table import PoisonKind, TableReader, TableState
from sync.transport import Message, TopicSpec, Transport

from ._lww import LwwTable, Stamp, Version

logger = logging.getLogger(__name__)

__all__ = [
    "GlobalRecord",
    "GlobalTable",
    "judge_global",
    "mirror_topic",
    "stamp_from_headers",
    "stamp_of",
]

V = TypeVar("V")
#: A record's value as the table keeps it, from its key and value (None: deleted); raises on
#: a value it cannot read (the record is then quarantined and does not compete).
Decode = Callable[[bytes, bytes | None], V | None]
#: Partitions of the global topic and its mirrors (MM2 keeps partition numbers).
GLOBAL_PARTITIONS = 4


def mirror_topic(origin: str) -> str:
    """The name MirrorMaker 2 (DefaultReplicationPolicy) gives ``origin``'s global topic."""
    return f"{origin}.{GLOBAL_EVENTS_TOPIC}"


def stamp_of(message: Message) -> Stamp | None:
    """The record's stamp from its headers, or None if it has no readable one."""
    return stamp_from_headers(message.headers() or ())


def stamp_from_headers(headers: Iterable[tuple[str, bytes | None]]) -> Stamp | None:
    """The stamp carried by ``headers`` (a record's, as Kafka gives them: the last of each
    name counts), or None if they hold no readable one."""
    found: dict[str, bytes] = {}
    for name, raw in headers:
        if name in (HEADER_HLC, HEADER_CLUSTER, HEADER_EVENT_ID) and raw is not None:
            found[name] = bytes(raw)
    try:
        hlc = int(found[HEADER_HLC].decode("ascii"))
        cluster = found[HEADER_CLUSTER].decode("utf-8")
        event_id = found[HEADER_EVENT_ID].decode("utf-8")
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
    return Stamp(hlc, cluster, event_id) if hlc >= 0 and cluster and event_id else None


@dataclass(frozen=True, slots=True)
class GlobalRecord(Generic[V]):
    """What a global topic's record is to the merge: its stamp and value if it competes,
    else why not (``refused``: the record is quarantined and never wins)."""

    stamp: Stamp | None
    value: V | None
    refused: tuple[PoisonKind, str] | None = None


def judge_global(
    origin: str,
    key: bytes | None,
    raw: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
    decode: Decode[V],
) -> GlobalRecord[V]:
    """The one rule for a record of ``origin``'s global topic (or its mirror): it competes
    with its stamp and decoded value, unless it has no key, no readable stamp, a stamp of
    another cluster than ``origin``, or a value ``decode`` refuses. The readers apply it,
    and so does ``policy-audit geo``."""
    if key is None:
        return GlobalRecord(None, None, (PoisonKind.NO_KEY, "no key"))
    stamp = stamp_from_headers(headers)
    if stamp is None:
        return GlobalRecord(None, None, (PoisonKind.UNDECODABLE, "no readable stamp headers"))
    if stamp.cluster != origin:
        detail = f"stamped by {stamp.cluster!r} in {origin!r}'s topic"
        return GlobalRecord(stamp, None, (PoisonKind.UNDECODABLE, detail))
    try:
        value = decode(key, raw)
    except Exception as exc:  # noqa: BLE001 - no record may stop the reader
        return GlobalRecord(stamp, None, (PoisonKind.UNDECODABLE, f"undecodable: {exc}"))
    return GlobalRecord(stamp, value)


class _GlobalTopicReader(TableReader, Generic[V]):
    """One global topic (own or a mirror) folded into the shared table."""

    def __init__(
        self,
        transport: Transport,
        topic: str,
        origin: str,
        table: LwwTable[V],
        decode: Decode[V],
        on_win: Callable[[str, V | None], None],
        *,
        bootstrap_timeout_s: float,
    ) -> None:
        spec = TopicSpec(topic, GLOBAL_PARTITIONS, config=dict(CHANGE_EVENTS_CREATE_CONFIG))
        super().__init__(
            transport,
            spec,
            what=f"global table {topic}",
            bootstrap_timeout_s=bootstrap_timeout_s,
            thread_name=f"global-{topic}",
        )
        self.origin = origin
        self._table = table
        self._decode = decode
        self._on_win = on_win
        self.records = 0

    def sync(self, timeout_s: float) -> None:
        """Wait until everything committed to the topic before this call is applied."""
        self.wait_ready(timeout_s)
        self.wait_for(self.end_offsets(), timeout_s)

    def check_ready(self) -> None:
        """Raises CacheStateError unless the topic is READY."""
        self._check_ready()

    def start(self) -> _GlobalTopicReader[V]:
        """Check (or create) the topic and begin replay in a background thread."""
        self._start_reader()
        return self

    def _apply_replay(self, batch: Sequence[Message]) -> None:
        for msg in batch:
            self.records += 1
            source = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
            key, raw = msg.key(), msg.value()
            record = judge_global(self.origin, key, raw, msg.headers() or (), self._decode)
            if record.refused is not None or record.stamp is None or key is None:
                kind, detail = record.refused or (PoisonKind.UNDECODABLE, "no stamp")
                self.quarantine.record(key, raw, kind.value, detail, source)
                continue
            text = key.decode("utf-8", "replace")
            if self._table.offer(text, record.stamp, record.value):
                logger.debug("global %r won at %s (%s)", key, source, record.stamp)
                self._on_win(text, record.value)


class GlobalTable(Generic[V]):
    """Cluster ``cluster``'s view of every global policy: its own topic and the mirrors of
    ``peers``, merged by last writer wins."""

    def __init__(
        self,
        transport: Transport,
        cluster: str,
        peers: Sequence[str],
        decode: Decode[V],
        *,
        bootstrap_timeout_s: float = 120.0,
    ) -> None:
        self.cluster = cluster
        self.table: LwwTable[V] = LwwTable()
        topics = [(GLOBAL_EVENTS_TOPIC, cluster)] + [(mirror_topic(p), p) for p in peers]
        self._listeners: list[Callable[[str, V | None], None]] = []
        self.readers = [
            _GlobalTopicReader(
                transport,
                t,
                o,
                self.table,
                decode,
                self._changed,
                bootstrap_timeout_s=bootstrap_timeout_s,
            )
            for t, o in topics
        ]

    def add_listener(self, listener: Callable[[str, V | None], None]) -> Callable[[], None]:
        """Call ``listener(key, value)`` (on a reader thread) whenever a key gets a new
        winner; returns the function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _changed(self, key: str, value: V | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(key, value)
            except Exception:
                logger.exception("global table listener failed for %r", key)

    def start(self) -> GlobalTable[V]:
        """Begin replaying every topic (see :meth:`wait_ready`)."""
        for reader in self.readers:
            reader.start()
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until every topic was replayed to its end offsets at start."""
        for reader in self.readers:
            reader.wait_ready(timeout_s)

    def close(self) -> None:
        """Stop every reader."""
        for reader in self.readers:
            reader.close()

    def check_ready(self) -> None:
        """Raises CacheStateError (503) until every topic has been replayed: before that the
        table may miss a winner, as the policy cache refuses reads before READY."""
        for reader in self.readers:
            reader.check_ready()

    def states(self) -> dict[str, TableState]:
        """Each topic's reader state (own topic and mirrors), by topic."""
        return {reader.spec.name: reader.state for reader in self.readers}

    def failure(self) -> str | None:
        """Why a topic's reader FAILED (the first one found), else None.

        A reader stops for good when it fails, and the table then misses that topic's
        records from then on: whoever owns the table must replace it (the sidecar's
        supervisor restarts the policy service, see ``broker_shim._sidecar``).
        """
        for reader in self.readers:
            if reader.state is TableState.FAILED:
                return f"{reader.what} failed: {reader.failure}"
        return None

    def get(self, key: str) -> V | None:
        """The key's effective value (None: never written, or deleted).

        Raises:
            CacheStateError: a topic is not replayed yet.
        """
        self.check_ready()
        return self.table.get(key)

    def version(self, key: str) -> Version[V] | None:
        """The key's winning record (stamp and value), ghosts included.

        Raises:
            CacheStateError: a topic is not replayed yet.
        """
        self.check_ready()
        return self.table.version(key)

    def winners(self) -> list[tuple[str, Version[V]]]:
        """Every key's winning record (stamp and value; ghosts of deletes included), by key.

        Raises:
            CacheStateError: a topic is not replayed yet.
        """
        self.check_ready()
        return list(self.table.items())

    def digest(self, encode: Callable[[V], bytes]) -> str:
        """SHA-256 over every key's winner (key, stamp, value's hash or ``absent``): equal
        in every cluster once they have read the same origins' records."""
        return self.table.digest(encode)

    def positions(self) -> dict[str, dict[int, int]]:
        """Per topic (own and mirrors), the next offset to apply per partition."""
        return {reader.spec.name: reader.positions() for reader in self.readers}

    def stalls(self) -> dict[str, int]:
        """Per topic, how often its reader's stall watchdog recreated its consumer."""
        return {reader.spec.name: reader.stalls for reader in self.readers}

    @property
    def poison(self) -> int:
        """Records quarantined by every reader."""
        return sum(r.quarantine.total for r in self.readers)
