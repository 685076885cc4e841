"""Pulsar topic compaction (``compactionThreshold``, ``topics compact``) on Kafka.

Pulsar compacts a topic without touching it: the broker writes a separate compacted
ledger holding the latest message of every key up to a *horizon*, and consumers that
ask for ``readCompacted`` read that ledger up to the horizon and the topic from there.
An empty payload deletes its key; messages without a key are not in the compacted view.

Kafka's own compaction (``cleanup.policy=compact``) rewrites the topic itself and refuses
batches holding a keyless record, so it is not used on the data topic. Instead each data
topic ``T`` gets a **companion** ``cmp.T`` (``cleanup.policy=compact``, same partition
count; partition p compacts data partition p):

* A **compaction** of partition p reads the data partition from its horizon to its end
  offset (read-committed), keeps the latest record per key, and writes, in ONE Kafka
  transaction, those records (key, payload, headers plus the source offset and publish
  time as headers; an empty payload becomes a Kafka tombstone) followed by a **horizon
  record** (:data:`COMPACTION_HORIZON_KEY`, value = the new horizon). A crash mid-way
  aborts the transaction: read-committed readers never see half a compaction, and Kafka's
  cleaner discards aborted records. The transactional id is per topic, so a new owner's
  compactor fences a previous one.
* The **view** (:class:`CompactedView`) is the companion read with "last record per key
  wins": Kafka's cleaner removes superseded versions lazily (never from the active
  segment), so the reader itself keeps only the latest, which is exactly Pulsar's view.
  Records are served in source-offset order with their data-topic message ids, so
  acknowledgements and cursors stay those of the data topic.
* **Stored entries** (one record per client batch): with an :class:`~._entry_codec.EntryCodec`
  the compactor keeps the latest message per key *inside* batches, as Pulsar's
  ``TwoPhaseCompactor`` does: each message kept becomes one companion record (a
  one-message entry with its batch index and the batch's size as headers), a message with
  an empty or null value deletes its key, keyless messages are left out, and an encrypted
  batch (which Pulsar cannot read either, ``RawBatchConverter.isReadableBatch``) is one
  message under its batch key. The view rebuilds one batch per source entry from the
  records it holds, the other indexes marked ``compacted_out`` (Pulsar's
  ``rebatchMessage``), so message ids keep their batch indexes.
* **When**: the owner of the topic's bundle measures, per partition, the bytes of the
  data records between the horizon and the end offset (key + value + headers, the same
  measure as ``backLogQuotaMap``'s ``limitSize``, indexed incrementally by
  :class:`~._backlog.RecordSizes`) and compacts the partitions above the threshold (as
  Pulsar's ``checkCompaction`` against the ``__compaction`` cursor's backlog).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from sync._constants import (
    COMPACTED_TABLE_CREATE_CONFIG,
    COMPACTED_TABLE_REQUIRED_CONFIG,
    COMPACTION_HORIZON_KEY,
    COMPACTOR_TRANSACTIONAL_ID_PREFIX,
    ENTRY_FORMAT_VERSION,
    HEADER_COMPACTED_INDEX,
    HEADER_COMPACTED_KEPT,
    HEADER_COMPACTED_OFFSET,
    HEADER_COMPACTED_PUBLISH_TIME,
    HEADER_COMPACTED_SIZE,
    HEADER_ENTRY,
    HEADER_ENTRY_COUNT,
)
from sync._errors import TransportError
from sync.naming._kafka_names import compacted_topic_of
from sync.transport import Admin, Message, TopicSpec, Transport

from ._backlog import RecordSizes
from ._entry_codec import EntryCodec

logger = logging.getLogger(__name__)

__all__ = [
    "CompactedRecord",
    "CompactedView",
    "CompactionState",
    "CompactionStatus",
    "Compactor",
    "compacted_topic_of",
    "delete_companion",
]

_COMPANION_HEADERS = frozenset(
    {
        HEADER_COMPACTED_OFFSET,
        HEADER_COMPACTED_PUBLISH_TIME,
        HEADER_COMPACTED_INDEX,
        HEADER_COMPACTED_SIZE,
    }
)


def delete_companion(admin: Admin, kafka_topic: str) -> None:
    """Blocking: delete a data topic's companion, if it has one (with the topic: a topic
    created again under that name must not serve the old compacted view)."""
    companion = compacted_topic_of(kafka_topic)
    if admin.describe_topic(companion) is not None:
        admin.delete_topic(companion)
        logger.info("%s deleted with %s", companion, kafka_topic)


@dataclass(frozen=True, slots=True)
class CompactedRecord:
    """The latest message of one key as of the horizon (its data-topic offset); for a
    message of a stored batch, its batch index and the batch's size (else -1 and 0)."""

    offset: int
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    publish_ms: int
    index: int = -1
    size: int = 0


@dataclass(frozen=True, slots=True)
class _Latest:
    """Phase one's answer for a key: its latest message (``index`` -1: the whole record)
    or its deletion."""

    msg: Message
    index: int
    size: int
    deleted: bool


@dataclass(slots=True)
class _PartView:
    horizon: int = 0
    #: Companion offset to read next.
    read_upto: int = 0
    records: dict[bytes, CompactedRecord] = field(default_factory=dict)
    #: Records read after the last horizon record (not part of the view until one comes).
    pending: dict[bytes, CompactedRecord | None] = field(default_factory=dict)


class CompactedView:
    """A topic's compacted view as its companion holds it.

    Blocking methods; call them from one thread at a time (the engine runs them with
    ``asyncio.to_thread`` under a per-topic lock).
    """

    def __init__(self, kafka_topic: str, codec: EntryCodec | None = None) -> None:
        self.kafka_topic = kafka_topic
        self.companion = compacted_topic_of(kafka_topic)
        self.codec = codec
        self._parts: dict[int, _PartView] = {}

    def snapshot(self) -> CompactedView:
        """A copy that later refreshes do not change (what a loading subscription reads
        while the compactor may refresh the original on another thread)."""
        copy = CompactedView(self.kafka_topic, self.codec)
        for p, part in self._parts.items():
            copy._parts[p] = _PartView(part.horizon, part.read_upto, dict(part.records), {})
        return copy

    def horizon(self, partition: int) -> int:
        """The data offset compaction has covered on ``partition`` (0: never compacted)."""
        part = self._parts.get(partition)
        return 0 if part is None else part.horizon

    @property
    def horizons(self) -> dict[int, int]:
        """Every partition's horizon (partitions never compacted are absent)."""
        return {p: v.horizon for p, v in self._parts.items() if v.horizon > 0}

    def records_from(self, partition: int, offset: int) -> list[CompactedRecord]:
        """The view's records of ``partition`` at or above ``offset``, in offset order;
        the messages it holds of one stored batch come as one rebuilt batch."""
        part = self._parts.get(partition)
        if part is None:
            return []
        whole: list[CompactedRecord] = []
        batches: dict[int, list[CompactedRecord]] = {}
        for r in part.records.values():
            if r.offset < offset:
                continue
            if r.index < 0:
                whole.append(r)
            else:
                batches.setdefault(r.offset, []).append(r)
        for source, members in batches.items():
            rebuilt = self._rebatch(partition, source, members)
            if rebuilt is not None:
                whole.append(rebuilt)
        return sorted(whole, key=lambda r: r.offset)

    def _rebatch(
        self, partition: int, source: int, members: list[CompactedRecord]
    ) -> CompactedRecord | None:
        """One batch of the source entry's size holding ``members`` at their indexes."""
        size = max(r.size for r in members)
        if self.codec is None or size < 1 or any(r.index >= size for r in members):
            logger.warning(
                "%s[%d]@%d: %d compacted message(s) of a batch cannot be rebuilt; left out",
                self.kafka_topic,
                partition,
                source,
                len(members),
            )
            return None
        members.sort(key=lambda r: r.index)
        try:
            value = self.codec.rebatch({r.index: r.value for r in members}, size)
        except ValueError as exc:
            logger.warning(
                "%s[%d]@%d: compacted batch cannot be rebuilt (%s); left out",
                self.kafka_topic,
                partition,
                source,
                exc,
            )
            return None
        headers = [(HEADER_ENTRY, ENTRY_FORMAT_VERSION), (HEADER_ENTRY_COUNT, str(size).encode())]
        if len(members) < size:
            kept = sum(1 << r.index for r in members)
            headers.append((HEADER_COMPACTED_KEPT, format(kept, "x").encode()))
        first = members[0]
        return CompactedRecord(source, first.key, value, headers, first.publish_ms)

    def keys(self, partition: int) -> set[bytes]:
        """The keys in the view of ``partition``."""
        part = self._parts.get(partition)
        return set() if part is None else set(part.records)

    def refresh(self, transport: Transport, admin: Admin, timeout_s: float = 30.0) -> None:
        """Read what the companion gained since the last refresh.

        Raises:
            TransportError: the companion could not be read to its end in ``timeout_s``.
        """
        desc = admin.describe_topic(self.companion)
        if desc is None:
            self._parts.clear()  # no companion (never compacted, or deleted with the topic)
            return
        parts = list(range(desc.partitions))
        consumer = transport.consumer(read_committed=True)
        try:
            ends = consumer.end_offsets(self.companion, parts)
            starts = consumer.start_offsets(self.companion, parts)
            wanted: dict[int, int] = {}
            for p in parts:
                view = self._parts.setdefault(p, _PartView())
                if view.read_upto > ends[p] or 0 < view.read_upto < starts[p]:
                    # Deleted and re-created meanwhile: start over.
                    self._parts[p] = view = _PartView()
                if view.read_upto < ends[p]:
                    wanted[p] = max(view.read_upto, starts[p])
            if not wanted:
                return
            consumer.assign(self.companion, wanted)
            deadline = time.monotonic() + timeout_s
            todo = set(wanted)
            while todo:
                if time.monotonic() > deadline:
                    raise TransportError(
                        f"{self.companion}: partitions {sorted(todo)} not read to their "
                        f"end in {timeout_s:.0f} s"
                    )
                for msg in consumer.consume(1000, 0.2):
                    self._apply(msg)
                positions = consumer.positions(self.companion, sorted(todo))
                for p in list(todo):
                    pos = positions.get(p, -1)
                    if pos >= ends[p]:
                        self._parts[p].read_upto = max(self._parts[p].read_upto, pos)
                        todo.discard(p)
        finally:
            consumer.close()

    def _apply(self, msg: Message) -> None:
        p, offset, key = msg.partition(), msg.offset(), msg.key()
        if p is None or offset is None or key is None:
            return
        view = self._parts.setdefault(p, _PartView())
        view.read_upto = max(view.read_upto, offset + 1)
        value = msg.value()
        if key == COMPACTION_HORIZON_KEY:
            try:
                horizon = int((value or b"0").decode("ascii"))
            except ValueError:
                logger.warning("%s[%d]@%d: bad horizon record", self.companion, p, offset)
                return
            for k, record in view.pending.items():
                if record is None:
                    view.records.pop(k, None)
                else:
                    view.records[k] = record
            view.pending.clear()
            view.horizon = max(view.horizon, horizon)
            return
        if value is None:
            view.pending[key] = None
            return
        source = -1
        publish_ms = 0
        index, size = -1, 0
        headers: list[tuple[str, bytes]] = []
        try:
            for name, raw in msg.headers() or ():
                if name == HEADER_COMPACTED_OFFSET:
                    source = int(raw)
                elif name == HEADER_COMPACTED_PUBLISH_TIME:
                    publish_ms = int(raw)
                elif name == HEADER_COMPACTED_INDEX:
                    index = int(raw)
                elif name == HEADER_COMPACTED_SIZE:
                    size = int(raw)
                else:
                    headers.append((name, raw))
        except ValueError:
            source = -1
        if source < 0:
            logger.warning("%s[%d]@%d: record without a source offset", self.companion, p, offset)
            return
        view.pending[key] = CompactedRecord(source, key, value, headers, publish_ms, index, size)


class CompactionState(Enum):
    """Pulsar's ``LongRunningProcessStatus.Status`` of a topic's last compaction."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@dataclass(slots=True)
class CompactionStatus:
    """What ``GET …/compaction`` answers (Pulsar's ``LongRunningProcessStatus``)."""

    status: CompactionState = CompactionState.NOT_RUN
    last_error: str = ""
    #: Horizons after the last successful compaction.
    horizons: dict[int, int] = field(default_factory=dict)
    runs: int = 0

    def as_pulsar(self) -> dict[str, str]:
        """The JSON body Pulsar's admin API answers."""
        return {"status": self.status.value, "lastError": self.last_error}


class Compactor:
    """Compacts one topic into its companion (blocking; one call at a time per topic)."""

    def __init__(
        self,
        kafka_topic: str,
        view: CompactedView | None = None,
        codec: EntryCodec | None = None,
    ) -> None:
        self.kafka_topic = kafka_topic
        self.view = view or CompactedView(kafka_topic, codec)
        if self.view.codec is None:
            self.view.codec = codec  # the view rebuilds the batches this one splits
        self.codec = self.view.codec
        self.sizes = RecordSizes(kafka_topic)
        self.status = CompactionStatus()

    def bytes_since_horizon(
        self, transport: Transport, admin: Admin, num_partitions: int
    ) -> dict[int, int]:
        """Per partition, the bytes of the data records above the horizon (Pulsar: the
        ``__compaction`` cursor's backlog size)."""
        parts = list(range(num_partitions))
        self.view.refresh(transport, admin)
        ends = admin.list_offsets(self.kafka_topic, parts, "latest")
        lows = {p: self.view.horizon(p) for p in parts}
        indexed = self.sizes.update(transport, lows, ends)
        out: dict[int, int] = {}
        for p in parts:
            sizes = indexed.get(p)
            out[p] = 0 if sizes is None else sizes.bytes_between(lows[p], ends.get(p, 0))
        return out

    def compact(
        self,
        transport: Transport,
        admin: Admin,
        num_partitions: int,
        partitions: Sequence[int] | None = None,
        timeout_s: float = 60.0,
    ) -> dict[int, int]:
        """Compact ``partitions`` (default: all) up to their end offsets now; returns the
        new horizons of the partitions that moved.

        Raises:
            TransportError: Kafka failed; nothing of this run is visible (aborted).
        """
        parts = sorted(partitions if partitions is not None else range(num_partitions))
        admin.ensure_topic(
            TopicSpec(
                self.view.companion,
                num_partitions,
                config=COMPACTED_TABLE_CREATE_CONFIG,
                required_config=COMPACTED_TABLE_REQUIRED_CONFIG,
            )
        )
        self.view.refresh(transport, admin)
        latest, ends = self._read_latest(transport, parts, timeout_s)
        moved = {p: ends[p] for p in parts if ends[p] > self.view.horizon(p)}
        if not moved:
            return {}
        producer = transport.producer(
            transactional_id=COMPACTOR_TRANSACTIONAL_ID_PREFIX + self.kafka_topic
        )
        try:
            producer.init_transactions(timeout_s)
            producer.begin_transaction()
            written = 0
            for p in sorted(moved):
                known = self.view.keys(p)
                for key, found in sorted(
                    latest[p].items(), key=lambda kv: (kv[1].msg.offset() or 0, kv[1].index)
                ):
                    if found.deleted:  # an empty or null payload deletes the key
                        if key in known:
                            producer.produce(self.view.companion, key, None, partition=p)
                            written += 1
                        continue
                    value, headers = self._companion_record(found)
                    producer.produce(self.view.companion, key, value, partition=p, headers=headers)
                    written += 1
                producer.produce(
                    self.view.companion,
                    COMPACTION_HORIZON_KEY,
                    str(moved[p]).encode("ascii"),
                    partition=p,
                )
            producer.commit_transaction(timeout_s)
        except BaseException:
            try:
                producer.abort_transaction(timeout_s)
            except Exception:
                logger.debug("aborting the compaction of %s failed", self.kafka_topic)
            raise
        finally:
            producer.close()
        self.view.refresh(transport, admin)
        logger.info(
            "%s compacted: %d record(s) written, horizons %s", self.kafka_topic, written, moved
        )
        return moved

    def _companion_record(self, found: _Latest) -> tuple[bytes, list[tuple[str, bytes]]]:
        """The value and headers of the companion record of a key's latest message."""
        msg = found.msg
        raw = msg.value() or b""
        if found.index < 0:
            value = raw
            headers = [
                (n, v)
                for n, v in (msg.headers() or ())
                if n not in _COMPANION_HEADERS and v is not None
            ]
        else:
            assert self.codec is not None  # noqa: S101 - only a codec gives batch indexes
            value = self.codec.single(raw, found.index)
            headers = [
                (HEADER_ENTRY, ENTRY_FORMAT_VERSION),
                (HEADER_ENTRY_COUNT, b"1"),
                (HEADER_COMPACTED_INDEX, str(found.index).encode()),
                (HEADER_COMPACTED_SIZE, str(found.size).encode()),
            ]
        headers.append((HEADER_COMPACTED_OFFSET, str(msg.offset()).encode()))
        headers.append((HEADER_COMPACTED_PUBLISH_TIME, str(msg.timestamp()[1]).encode()))
        return value, headers

    def _note(self, latest: dict[bytes, _Latest], msg: Message) -> None:
        """Phase one for one record: the latest message of each key it holds."""
        key = msg.key()
        headers = msg.headers()
        if self.codec is None or not _is_entry(headers):
            if key is not None:  # keyless messages are not in the compacted view
                latest[key] = _Latest(msg, -1, 0, deleted=not msg.value())
            return
        try:
            messages = self.codec.messages(msg.value() or b"")
        except ValueError as exc:
            logger.warning(
                "%s[%s]@%s: stored entry left out of the compaction (%s)",
                self.kafka_topic,
                msg.partition(),
                msg.offset(),
                exc,
            )
            return
        size = len(messages)
        for m in messages:
            if m.key is None:
                continue  # keyless: not in the view (Pulsar's topicCompactionRetainNullKey)
            latest[m.key] = _Latest(msg, m.index, size if m.index >= 0 else 0, m.size <= 0)

    def _read_latest(
        self, transport: Transport, parts: Sequence[int], timeout_s: float
    ) -> tuple[dict[int, dict[bytes, _Latest]], dict[int, int]]:
        """The latest keyed message per key of each partition in [horizon, end)."""
        consumer = transport.consumer(read_committed=True)
        latest: dict[int, dict[bytes, _Latest]] = {p: {} for p in parts}
        try:
            ends = consumer.end_offsets(self.kafka_topic, list(parts))
            starts = consumer.start_offsets(self.kafka_topic, list(parts))
            wanted = {
                p: max(self.view.horizon(p), starts[p])
                for p in parts
                if ends[p] > max(self.view.horizon(p), starts[p])
            }
            if not wanted:
                return latest, ends
            consumer.assign(self.kafka_topic, wanted)
            todo = set(wanted)
            deadline = time.monotonic() + timeout_s
            while todo:
                if time.monotonic() > deadline:
                    raise TransportError(
                        f"{self.kafka_topic}: partitions {sorted(todo)} not read to their "
                        f"end in {timeout_s:.0f} s; compaction not done"
                    )
                for msg in consumer.consume(1000, 0.2):
                    p, offset = msg.partition(), msg.offset()
                    if p is None or offset is None or p not in latest or offset >= ends[p]:
                        continue
                    self._note(latest[p], msg)
                positions = consumer.positions(self.kafka_topic, sorted(todo))
                for p in list(todo):
                    if positions.get(p, -1) >= ends[p]:
                        todo.discard(p)
            return latest, ends
        finally:
            consumer.close()


def _is_entry(headers: Sequence[tuple[str, bytes | None]] | None) -> bool:
    """Whether a record is a stored entry (format ``entry``), by its header."""
    return any(name == HEADER_ENTRY for name, _ in headers or ())


def over_threshold(sizes: Mapping[int, int], threshold: int) -> list[int]:
    """The partitions whose bytes since the horizon exceed ``threshold`` (Pulsar: ``>``)."""
    return sorted(p for p, size in sizes.items() if threshold > 0 and size > threshold)
