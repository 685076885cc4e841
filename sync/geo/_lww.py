"""The one merge rule of global policies: last writer wins by ``(hlc, cluster, eventId)``.

Every reader, in every cluster, folds the records of its own global topic and of every mirror
into one register per key and keeps the record with the largest stamp (docs/geo-design.md
§3). ``max`` over a total order is commutative, associative and idempotent (a state-based LWW
register: Shapiro et al., "Conflict-free Replicated Data Types", 2011), so the order records
arrive in, MirrorMaker 2's duplicates and replays after a restart cannot change the result:
readers that have read the same records hold the same state.

Ties: equal hybrid timestamps are broken by the cluster name's UTF-8 bytes (the greater
wins: ``west`` over ``east``), then by the event id. A deleted key keeps its stamp (a ghost),
so an older value arriving later cannot bring it back.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "LATER_HLC",
    "TIE_CLUSTER",
    "TIE_EVENT_ID",
    "LwwTable",
    "Stamp",
    "Version",
    "why",
    "wins",
]

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Stamp:
    """Where a global record stands in the one total order."""

    hlc: int
    cluster: str
    event_id: str

    def order_key(self) -> tuple[int, bytes, str]:
        """The tuple the order compares: larger wins."""
        return (self.hlc, self.cluster.encode("utf-8"), self.event_id)


def wins(candidate: Stamp, held: Stamp | None) -> bool:
    """Whether a record stamped ``candidate`` replaces the one stamped ``held``."""
    return held is None or candidate.order_key() > held.order_key()


#: Why one record beats another (:func:`why`), as ``policy-audit geo`` reports it.
LATER_HLC = "later hybrid timestamp"
TIE_CLUSTER = "tie, higher cluster id"
TIE_EVENT_ID = "tie, same cluster, higher event id"


def why(winner: Stamp, loser: Stamp) -> str:
    """Which part of the order makes ``winner`` beat ``loser``.

    Raises:
        ValueError: ``winner`` does not win over ``loser``.
    """
    if not wins(winner, loser):
        raise ValueError(f"{winner} does not win over {loser}")
    if winner.hlc != loser.hlc:
        return LATER_HLC
    if winner.cluster != loser.cluster:
        return TIE_CLUSTER
    return TIE_EVENT_ID


@dataclass(frozen=True, slots=True)
class Version(Generic[V]):
    """A key's winning record: its stamp and its value (None: deleted, kept as a ghost)."""

    stamp: Stamp
    value: V | None


class LwwTable(Generic[V]):
    """One last-writer-wins register per key; :meth:`offer` is the only way in."""

    def __init__(self) -> None:
        self._entries: dict[str, Version[V]] = {}
        self._lock = threading.Lock()

    def offer(self, key: str, stamp: Stamp, value: V | None) -> bool:
        """Fold one record in; True if it became the key's winner."""
        with self._lock:
            held = self._entries.get(key)
            if not wins(stamp, None if held is None else held.stamp):
                return False
            self._entries[key] = Version(stamp, value)
            return True

    def version(self, key: str) -> Version[V] | None:
        """The key's winner, ghost included (None: no record of it was read)."""
        return self._entries.get(key)

    def get(self, key: str) -> V | None:
        """The key's effective value (None: absent or deleted)."""
        held = self._entries.get(key)
        return None if held is None else held.value

    def items(self) -> Iterator[tuple[str, Version[V]]]:
        """Every key's winner, ghosts included, by key."""
        with self._lock:
            snapshot = sorted(self._entries.items())
        yield from snapshot

    def __len__(self) -> int:
        """Keys held, ghosts included."""
        return len(self._entries)

    def digest(self, encode: Callable[[V], bytes]) -> str:
        """SHA-256 over every key's winner by key (key, stamp, sha256 of ``encode(value)`` or
        ``absent``): tables that read the same records have the same digest."""
        h = hashlib.sha256()
        for key, version in self.items():
            s = version.stamp
            value = (
                b"absent"
                if version.value is None
                else hashlib.sha256(encode(version.value)).digest()
            )
            h.update(f"{key}\0{s.hlc}\0{s.cluster}\0{s.event_id}\0".encode())
            h.update(value + b"\n")
        return h.hexdigest()
