"""A slot owner's fenced writes: its transactional producer, the offsets of the slots it
processed and committed, and what it wrote per bundle ahead of its own view of the
ownership topic.

Every transaction that writes records also commits offsets of the slots it is fenced by
(``send_offsets_to_transaction`` with the group metadata): the group coordinator checks
the member's generation, so a zombie's writes are refused (see
:mod:`sync.cluster._ownership_member`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence

from sync._constants import OWNERSHIP_TRANSACTIONAL_ID_PREFIX
from sync._errors import (
    ConfigurationError,
    GroupFencedError,
    PolicySyncError,
    ProducerFencedError,
    TransportError,
)
from sync.table._fenced_writer import commit_records
from sync.transport import GroupConsumer, Producer, Transport

from ._ownership_model import OwnershipConfig, Write, slot_of, slots_topic
from ._ownership_table import OwnershipTable
from ._records import OwnershipRecord

logger = logging.getLogger(__name__)

__all__ = ["SlotTransactions"]


class SlotTransactions:
    """The member's fenced writes, and its view of its slots' bundles (the ownership
    table with what it committed on top)."""

    def __init__(
        self,
        transport: Transport,
        config: OwnershipConfig,
        *,
        cluster: str,
        broker_id: str,
        table: OwnershipTable,
    ) -> None:
        self.config = config
        self.table = table
        self._transport = transport
        self._transactional_id = f"{OWNERSHIP_TRANSACTIONAL_ID_PREFIX}{cluster}.{broker_id}"
        self._slots_topic = slots_topic(cluster)
        self.producer: Producer | None = None
        #: What we committed for bundles of our slots (ahead of our own table view).
        self._overlay: dict[str, OwnershipRecord | None] = {}
        self._next_offset: dict[int, int] = {}
        self._committed: dict[int, int] = {}

    # -- the transactional producer ---------------------------------------------------
    def open_producer(self) -> None:
        """A new transactional producer, its transactions initialised."""
        self.producer = self._transport.producer(
            transactional_id=self._transactional_id,
            transaction_timeout_ms=self.config.effective_transaction_timeout_ms,
        )
        # Also fences a previous incarnation of this broker: its open transaction is
        # aborted now instead of after the transaction timeout.
        self.producer.init_transactions(self.config.timeout_s)

    def renew_producer(self) -> None:
        """Replace the producer (fenced by its own timed-out transaction) with a new one."""
        old, self.producer = self.producer, None
        if old is not None:
            try:
                old.close()
            except PolicySyncError:
                logger.debug("closing the fenced ownership producer failed", exc_info=True)
        self.open_producer()

    def close_producer(self) -> None:
        """Close the producer, if any, when the member stops (errors are logged)."""
        if self.producer is not None:
            try:
                self.producer.close()
            except PolicySyncError:
                logger.debug("closing the ownership producer failed", exc_info=True)

    # -- slots ---------------------------------------------------------------------------
    def started(self, offsets: dict[int, int]) -> None:
        """We decide for these slots from these (committed) offsets on."""
        for slot, offset in offsets.items():
            self._next_offset[slot] = offset
            self._committed[slot] = offset

    def read(self, slot: int, offset: int) -> None:
        """A request of ``slot`` at ``offset`` was read (the first one, if none was
        committed yet, is where an aborted transaction seeks back to)."""
        self._committed.setdefault(slot, offset)

    def forget(self, slots: set[int]) -> None:
        """Drop what we know of ``slots`` (they are no longer ours)."""
        for bundle in [b for b in self._overlay if slot_of(b, self.config.slots) in slots]:
            del self._overlay[bundle]
        for slot in slots:
            self._next_offset.pop(slot, None)
            self._committed.pop(slot, None)

    # -- our view ------------------------------------------------------------------------
    def bundles_in(self, slot: int) -> list[str]:
        """Bundles of ``slot`` with a record in the table or written by us."""
        names = set(self.table.in_slot(slot))
        names.update(b for b in self._overlay if slot_of(b, self.config.slots) == slot)
        return sorted(names)

    def current(
        self, bundle: str, staged: dict[str, OwnershipRecord | None] | None = None
    ) -> OwnershipRecord | None:
        """The record of ``bundle``: ``staged`` (decided, not yet committed), else what we
        committed, else the table's."""
        if staged is not None and bundle in staged:
            return staged[bundle]
        if bundle in self._overlay:
            return self._overlay[bundle]
        return self.table.get(bundle)

    def view(self, slots: Iterable[int]) -> Iterator[tuple[str, OwnershipRecord | None]]:
        """Every bundle of ``slots`` with its current record, as we decide on them."""
        for slot in slots:
            for bundle in self.bundles_in(slot):
                yield bundle, self.current(bundle)

    # -- the fenced write ------------------------------------------------------------
    def fence(self, slots: Iterable[int]) -> dict[int, int]:
        """Offsets to commit for ``slots`` (what we processed): the group coordinator checks
        our generation when they are sent, which is what fences a zombie's writes."""
        return {s: self._next_offset.get(s, self._committed.get(s, 0)) for s in slots}

    def commit(
        self, consumer: GroupConsumer | None, writes: Sequence[Write], offsets: dict[int, int]
    ) -> None:
        """Write ``writes`` and commit ``offsets`` in one transaction; aborted (and the
        slots sought back) if it fails."""
        assert self.producer is not None and consumer is not None  # noqa: S101
        if not writes and not offsets:
            return
        if writes and not offsets:
            raise ConfigurationError(
                "refusing to write ownership records without committing slot offsets: "
                "the write would not be fenced by the group generation"
            )
        try:
            # The fenced writer's commit; the fence here is the group generation.
            commit_records(
                self.producer,
                [(w.topic, w.key.encode("utf-8"), w.value, None) for w in writes],
                self.config.timeout_s,
                offsets=(
                    (self._slots_topic, offsets, consumer.group_metadata()) if offsets else None
                ),
            )
        except (GroupFencedError, TransportError):
            self._abort(consumer, offsets)
            raise
        for slot, offset in offsets.items():
            self._committed[slot] = offset
            self._next_offset[slot] = max(offset, self._next_offset.get(slot, offset))
        for w in writes:
            if w.topic == self.table.table.spec.name:
                self._overlay[w.key] = w.record

    def _abort(self, consumer: GroupConsumer, offsets: dict[int, int]) -> None:
        assert self.producer is not None  # noqa: S101 - checked by commit
        try:
            self.producer.abort_transaction(self.config.timeout_s)
        except ProducerFencedError:
            raise
        except TransportError:
            logger.debug("abort_transaction failed", exc_info=True)
        # Read the aborted requests again if the slots are still ours.
        assigned = set(consumer.assignment())
        for slot in offsets:
            base = self._committed.get(slot)
            if slot in assigned and base is not None:
                try:
                    consumer.seek(slot, base)
                    self._next_offset[slot] = base
                except TransportError:
                    logger.debug("seek back of slot %d failed", slot, exc_info=True)
