"""Every sidecar's view of its cluster's compacted ownership topic, indexed by slot.

Lookups and the admin read it; the slot owners write it (see
:mod:`sync.cluster._ownership_member`).
"""

from __future__ import annotations

from sync._constants import COMPACTED_TABLE_CREATE_CONFIG, COMPACTED_TABLE_REQUIRED_CONFIG
from sync.transport import TopicSpec, Transport

from ._ownership_model import ownership_topic, slot_of
from ._records import BundleState, OwnershipRecord
from ._table import TableView

__all__ = ["OwnershipTable"]


class OwnershipTable:
    """Every sidecar's view of a cluster's ownership topic, indexed by slot."""

    def __init__(
        self,
        transport: Transport,
        cluster: str,
        slots: int,
        *,
        replication_factor: int = -1,
        bootstrap_timeout_s: float = 120.0,
    ) -> None:
        self.cluster = cluster
        self.slots = slots
        spec = TopicSpec(
            ownership_topic(cluster),
            1,
            config=COMPACTED_TABLE_CREATE_CONFIG,
            required_config=COMPACTED_TABLE_REQUIRED_CONFIG,
            replication_factor=replication_factor,
        )
        self.table: TableView[OwnershipRecord] = TableView(
            transport,
            spec,
            lambda _key, raw: OwnershipRecord.from_json(raw),
            bootstrap_timeout_s=bootstrap_timeout_s,
        )
        #: slot -> bundles with a record (kept by the reader thread).
        self.by_slot: dict[int, set[str]] = {}
        #: Bumped after every change.
        self.version = 0
        self.table.add_listener(self._index)

    def _index(self, key: str, old: OwnershipRecord | None, new: OwnershipRecord | None) -> None:
        slot = slot_of(key, self.slots)
        if new is None:
            members = self.by_slot.get(slot)
            if members is not None:
                members.discard(key)
        else:
            self.by_slot.setdefault(slot, set()).add(key)
        self.version += 1

    def get(self, bundle: str) -> OwnershipRecord | None:
        """The current record of ``bundle``."""
        return self.table.get(bundle)

    def in_slot(self, slot: int) -> list[str]:
        """Bundles with a record in ``slot``."""
        return sorted(self.by_slot.get(slot, ()))

    def owned_by(self) -> dict[str, int]:
        """How many bundles each broker owns."""
        counts: dict[str, int] = {}
        for _, rec in self.table.items():
            if rec.state is BundleState.OWNED:
                counts[rec.broker] = counts.get(rec.broker, 0) + 1
        return counts
