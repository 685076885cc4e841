"""A subscription's position on one partition, and how it is made durable in Kafka.

Pulsar keeps, per subscription, a *mark-delete position* (everything up to it is
acknowledged) plus the *individually deleted ranges* above it. Here the position lives in
the subscription's Kafka consumer group:

* the committed **offset** is the first offset not acknowledged (Kafka's "next offset to
  read" for the contiguous acknowledged prefix);
* the commit **metadata** string carries the acknowledged ranges above that offset:
  ``"ps1:" + base64url(flag + body)`` (no padding), ``flag`` 0 = raw body, 1 = zlib, and
  ``body`` = varint(count) then, per range, varint(start - previous end) and
  varint(end - start), the first "previous end" being the committed offset. Ranges are
  half-open ``[start, end)``.

Version 2, ``"ps2:"``, is written when a stored entry (a client's batch kept as one
record) is partially acknowledged by batch index (Pulsar's ``batchDeletedIndexes``): the
same body, then varint(number of partial entries) and, per entry in offset order,
varint(offset - previous end) (the first "previous end" being the committed offset, the
next ones the offset after the previous partial entry), varint(messages in the entry),
varint(n) and ``n`` bytes: the acknowledged indexes as a little-endian bit set (bit ``i``:
batch index ``i`` acknowledged), trailing zero bytes cut. ``ps1`` is written whenever no
entry is partially acknowledged, so older readers keep reading it; both are read.

On load, offsets inside the ranges are skipped as already acknowledged; everything else
from the committed offset on is delivered again, a partially acknowledged entry with its
acknowledged indexes left out (Pulsar's ``CommandMessage.ack_set``). Kafka bounds the
metadata string (``offset.metadata.max.bytes``, 4096 by default): when the ranges and
partial entries do not fit, those nearest the committed offset are kept and the rest
dropped, so those acknowledged messages would be delivered again after a restart
(at-least-once; Pulsar's ``managedLedgerMaxUnackedRangesToPersist`` and
``managedLedgerMaxBatchDeletedIndexToPersist`` make the same trade).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import logging
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sync._constants import ACK_SET_METADATA_PREFIX, ACK_SET_METADATA_PREFIX_V2

from ._varint import get_varint, put_varint

if TYPE_CHECKING:
    from ._consumer import Consumer

logger = logging.getLogger(__name__)

__all__ = [
    "DISPATCHED_MARK",
    "Entry",
    "Partial",
    "PartitionCursor",
    "decode_ack_ranges",
    "decode_ack_state",
    "encode_ack_ranges",
    "encode_ack_state",
    "split_dispatched",
]

#: Separates the ack set from the dispatch mark in commit metadata: ``<ack set>~d<offset>``,
#: the first offset never dispatched as of the commit ("~" is not in base64url).
DISPATCHED_MARK = "~d"

Range = tuple[int, int]
#: A partially acknowledged stored entry: ``(offset, messages, acknowledged indexes)``, the
#: indexes as a bit set (bit ``i``: batch index ``i`` acknowledged).
Partial = tuple[int, int, int]


class Entry:
    """One message read from Kafka and not yet acknowledged by the subscription."""

    __slots__ = (
        "acked",
        "acked_bits",
        "count",
        "deliver_at",
        "headers",
        "holder",
        "key",
        "nacked",
        "offset",
        "partition",
        "payload",
        "publish_ms",
        "redeliveries",
        "sticky_hash",
        "stored_entry",
    )

    def __init__(
        self,
        partition: int,
        offset: int,
        key: str | None,
        payload: bytes,
        headers: list[tuple[str, bytes]] | None,
        publish_ms: int,
    ) -> None:
        self.partition = partition
        self.offset = offset
        self.key = key
        self.payload = payload
        self.headers = headers
        self.publish_ms = publish_ms
        self.redeliveries = 0
        #: The consumer the message is out with (delivered, not acked, not returned).
        self.holder: Consumer | None = None
        #: Negatively acknowledged; waiting for its redelivery delay.
        self.nacked = False
        self.acked = False
        #: Key_Shared hash of the key, computed on first need (-1: not yet).
        self.sticky_hash = -1
        #: Delayed delivery: not before this epoch-ms time (0: at once).
        self.deliver_at = 0
        #: Messages in the record: 1, or a stored entry's batch (docs/entry-design.md).
        self.count = 1
        #: A record of the stored-entry format: its payload is a Pulsar entry as sent.
        self.stored_entry = False
        #: The batch indexes acknowledged so far (bit ``i``: index ``i``), while the entry
        #: is not acknowledged whole (Pulsar's batch-index acknowledgements).
        self.acked_bits = 0

    @property
    def size(self) -> int:
        """Payload bytes (what dispatch rates count)."""
        return len(self.payload)

    @property
    def unacked(self) -> int:
        """Messages of the entry not acknowledged yet (what permits and limits count)."""
        return self.count - self.acked_bits.bit_count()

    def __lt__(self, other: Entry) -> bool:
        return self.offset < other.offset

    def __repr__(self) -> str:
        return f"Entry({self.partition}@{self.offset}, key={self.key!r})"


# --------------------------------------------------------------------------- encoding


def _encode(base: int, ranges: Sequence[Range], partials: Sequence[Partial] = ()) -> str:
    body = bytearray()
    put_varint(len(ranges), body)
    prev = base
    for start, end in ranges:
        put_varint(start - prev, body)
        put_varint(end - start, body)
        prev = end
    prefix = ACK_SET_METADATA_PREFIX
    if partials:
        prefix = ACK_SET_METADATA_PREFIX_V2
        put_varint(len(partials), body)
        prev = base
        for offset, count, bits in partials:
            raw_bits = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
            put_varint(offset - prev, body)
            put_varint(count, body)
            put_varint(len(raw_bits), body)
            body += raw_bits
            prev = offset + 1
    raw = bytes(body)
    packed = zlib.compress(raw, 6)
    blob = b"\x01" + packed if len(packed) < len(raw) else b"\x00" + raw
    return prefix + base64.urlsafe_b64encode(blob).rstrip(b"=").decode("ascii")


def encode_ack_ranges(base: int, ranges: Sequence[Range], max_bytes: int) -> tuple[str, int]:
    """Commit metadata for acknowledged ``ranges`` above ``base``; ``(metadata, kept)``.

    ``ranges`` must be sorted, disjoint, non-empty and start at or after ``base``. If the
    whole set does not fit in ``max_bytes``, the longest prefix that fits is kept;
    ``kept`` says how many ranges made it.
    """
    text, kept, _ = encode_ack_state(base, ranges, (), max_bytes)
    return text, kept


def encode_ack_state(
    base: int, ranges: Sequence[Range], partials: Sequence[Partial], max_bytes: int
) -> tuple[str, int, int]:
    """Commit metadata for acknowledged ``ranges`` and partially acknowledged entries
    above ``base``: ``(metadata, ranges kept, partials kept)``; ``ps1`` without partials,
    ``ps2`` with.

    Both must be sorted and lie at or after ``base``; a partial entry's offset is in no
    range, and its bits are neither 0 nor all of its messages. If everything does not fit
    in ``max_bytes``, the longest prefix (ranges and partials in one offset order) that
    fits is kept.
    """
    if not ranges and not partials:
        return "", 0, 0
    text = _encode(base, ranges, partials)
    if len(text) <= max_bytes:
        return text, len(ranges), len(partials)
    # One list in offset order: a prefix of it keeps what is nearest the committed offset.
    order = sorted([(r[0], 0) for r in ranges] + [(p[0], 1) for p in partials])
    starts_r = [0] * (len(order) + 1)
    starts_p = [0] * (len(order) + 1)
    for k, (_, kind) in enumerate(order, 1):
        starts_r[k] = starts_r[k - 1] + (kind == 0)
        starts_p[k] = starts_p[k - 1] + (kind == 1)

    def prefix(k: int) -> str:
        return _encode(base, ranges[: starts_r[k]], partials[: starts_p[k]])

    low, high = 0, len(order)  # invariant: prefix `low` fits, prefix `high` does not
    while high - low > 1:
        mid = (low + high) // 2
        if len(prefix(mid)) <= max_bytes:
            low = mid
        else:
            high = mid
    return (prefix(low) if low else ""), starts_r[low], starts_p[low]


def split_dispatched(metadata: str) -> tuple[str, int]:
    """``(ack-set metadata, first offset never dispatched)`` of a commit (0: not recorded).

    Messages below the mark may have reached a consumer before the subscription moved
    (an ownership move, a restart): delivered again, they carry ``redeliveryCount`` >= 1.
    """
    text, sep, mark = metadata.rpartition(DISPATCHED_MARK)
    if not sep:
        return metadata, 0
    try:
        return text, max(0, int(mark))
    except ValueError:
        logger.warning("ignoring an undecodable dispatch mark: %.40r", metadata)
        return text, 0


def decode_ack_ranges(base: int, metadata: str) -> list[Range]:
    """Inverse of :func:`encode_ack_ranges`; an empty or foreign string means no ranges.

    Malformed metadata is logged and treated as "no ranges": the messages are delivered
    again rather than skipped (at-least-once). A dispatch mark is ignored here, and so are
    the partially acknowledged entries of ``ps2`` metadata (see :func:`decode_ack_state`).
    """
    return decode_ack_state(base, metadata)[0]


def decode_ack_state(base: int, metadata: str) -> tuple[list[Range], list[Partial]]:
    """Inverse of :func:`encode_ack_state` (``ps1`` or ``ps2``): the acknowledged ranges
    and the partially acknowledged entries; ``([], [])`` for an empty, foreign or
    malformed string (logged: the messages are delivered again)."""
    metadata = split_dispatched(metadata)[0]
    if not metadata:
        return [], []
    if metadata.startswith(ACK_SET_METADATA_PREFIX):
        v2 = False
    elif metadata.startswith(ACK_SET_METADATA_PREFIX_V2):
        v2 = True
    else:
        logger.warning("ignoring commit metadata in an unknown format: %.40r", metadata)
        return [], []
    text = metadata[len(ACK_SET_METADATA_PREFIX) :]
    try:
        blob = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        if not blob:
            return [], []
        raw = zlib.decompress(blob[1:]) if blob[0] == 1 else blob[1:]
        count, pos = get_varint(raw, 0)
        ranges: list[Range] = []
        prev = base
        for _ in range(count):
            gap, pos = get_varint(raw, pos)
            length, pos = get_varint(raw, pos)
            start = prev + gap
            end = start + length
            if length <= 0:
                raise ValueError("empty range")
            ranges.append((start, end))
            prev = end
        partials: list[Partial] = []
        if v2:
            count, pos = get_varint(raw, pos)
            prev = base
            for _ in range(count):
                gap, pos = get_varint(raw, pos)
                size, pos = get_varint(raw, pos)
                nbytes, pos = get_varint(raw, pos)
                if pos + nbytes > len(raw):
                    raise ValueError("truncated bit set")
                bits = int.from_bytes(raw[pos : pos + nbytes], "little")
                pos += nbytes
                offset = prev + gap
                if size <= 0 or bits.bit_length() > size:
                    raise ValueError("bit set larger than its entry")
                if bits:
                    partials.append((offset, size, bits))
                prev = offset + 1
        if pos != len(raw):
            raise ValueError("trailing bytes")
        return ranges, partials
    except (ValueError, IndexError, binascii.Error, zlib.error) as exc:
        logger.warning("ignoring undecodable ack-set metadata (%s): %.40r", exc, metadata)
        return [], []


# --------------------------------------------------------------------------- cursor


class PartitionCursor:
    """Acknowledgement state of one subscription on one partition.

    ``entries`` holds every message read and not acknowledged, in offset order (messages
    are added in the order Kafka returns them and a dict keeps insertion order). The
    committed offset is the first of them, or the read position when there is none.
    """

    __slots__ = (
        "_partials",
        "_skip",
        "_skip_idx",
        "dispatched",
        "durable",
        "entries",
        "partition",
        "read_pos",
        "restored_dispatched",
    )

    def __init__(self, partition: int, committed: int, metadata: str = "") -> None:
        self.partition = partition
        #: The next offset to read (everything below was read, or skipped as acked).
        self.read_pos = committed
        self.entries: dict[int, Entry] = {}
        acks, self.restored_dispatched = split_dispatched(metadata)
        #: First offset never dispatched to a consumer (by us or, as committed, before us).
        self.dispatched = self.restored_dispatched
        #: The dispatch mark as of the last successful commit: a message at or above it
        #: that reached a consumer would come back after a move with redeliveryCount 0.
        self.durable = max(committed, self.restored_dispatched)
        skip, partials = decode_ack_state(committed, acks)
        self._skip = skip
        self._skip_idx = 0
        #: Partially acknowledged entries restored from the commit, not read again yet:
        #: offset -> (messages, acknowledged indexes).
        self._partials: dict[int, tuple[int, int]] = {o: (n, b) for o, n, b in partials}

    def possibly_delivered(self, offset: int) -> bool:
        """Whether ``offset`` may have reached a consumer before this cursor was loaded."""
        return offset < self.restored_dispatched

    def mark_dispatched(self, offset: int) -> bool:
        """Record a dispatch of ``offset``; True if the mark moved (worth a commit)."""
        if offset < self.dispatched:
            return False
        self.dispatched = offset + 1
        return True

    def accept(self, offset: int) -> bool:
        """Account for a message read at ``offset``; False means drop it.

        Drops duplicates (below the read position, e.g. fetched again after a
        re-assignment) and messages acknowledged before a restart.
        """
        if offset < self.read_pos:
            return False
        self.read_pos = offset + 1
        skip = self._skip
        while self._skip_idx < len(skip) and skip[self._skip_idx][1] <= offset:
            self._skip_idx += 1
        return not (self._skip_idx < len(skip) and skip[self._skip_idx][0] <= offset)

    def skip_to(self, offset: int) -> None:
        """Treat every offset below ``offset`` not read yet as acknowledged (compacted
        out of a ``readCompacted`` subscription's view: the position moves past them)."""
        if offset > self.read_pos:
            self.read_pos = offset

    def add(self, entry: Entry) -> None:
        """Track an accepted message until it is acknowledged (a stored entry partially
        acknowledged before the cursor was loaded takes its acknowledged indexes back)."""
        self.entries[entry.offset] = entry
        if self._partials:
            restored = self._partials.pop(entry.offset, None)
            if restored is not None and restored[0] == entry.count:
                entry.acked_bits |= restored[1] & ((1 << entry.count) - 1)

    def ack(self, offset: int) -> Entry | None:
        """Acknowledge ``offset``; returns its entry, or None if unknown or acked already."""
        entry = self.entries.pop(offset, None)
        if entry is not None:
            entry.acked = True
        return entry

    def ack_indexes(self, offset: int, acked: int) -> tuple[Entry | None, int]:
        """Acknowledge the batch indexes ``acked`` (a bit set) of the entry at ``offset``;
        ``(entry, newly acknowledged messages)``, entry None if unknown or acked already.

        Once every index is acknowledged the entry is acknowledged whole (``acked``).
        """
        entry = self.entries.get(offset)
        if entry is None:
            return None, 0
        full = (1 << entry.count) - 1
        new = acked & full & ~entry.acked_bits
        if not new:
            return entry, 0
        bits = entry.acked_bits | new
        if bits == full:
            del self.entries[offset]
            entry.acked = True
        entry.acked_bits = bits
        return entry, new.bit_count()

    def is_acked(self, offset: int) -> bool:
        """Whether ``offset`` is known to be acknowledged (or does not need delivery)."""
        if offset in self.entries:
            return False
        if offset < self.read_pos:
            return True
        i = bisect.bisect_right(self._skip, (offset, 1 << 63)) - 1
        return i >= 0 and self._skip[i][0] <= offset < self._skip[i][1]

    def mark_delete(self) -> int:
        """Pulsar's mark-delete position: the last offset of the acknowledged prefix (the
        one before the first message not acknowledged or not read yet; -1 for none)."""
        first = next(iter(self.entries), None)
        return (self.read_pos if first is None else first) - 1

    def commit_point(self, max_metadata_bytes: int) -> tuple[int, str, int]:
        """``(offset, metadata, dropped_ranges)`` to commit for this partition now."""
        it = iter(self.entries.items())
        head = next(it, None)
        base = self.read_pos if head is None else head[0]
        ranges: list[Range] = []
        partials: list[Partial] = []
        if head is not None:
            first, entry = head
            if entry.acked_bits:
                partials.append((first, entry.count, entry.acked_bits))
            cur = first + 1
            for offset, entry in it:
                if offset > cur:
                    ranges.append((cur, offset))
                cur = offset + 1
                if entry.acked_bits:
                    partials.append((offset, entry.count, entry.acked_bits))
            if self.read_pos > cur:
                ranges.append((cur, self.read_pos))
        # Partial entries restored from the last commit that were not read again yet.
        if self._partials:
            for offset in sorted(self._partials):
                if offset >= self.read_pos:
                    count, bits = self._partials[offset]
                    partials.append((offset, count, bits))
        # Ranges restored from the last commit that were not read again yet.
        for start, end in self._skip[self._skip_idx :]:
            start = max(start, self.read_pos)
            if end <= start:
                continue
            if ranges and ranges[-1][1] >= start:
                ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
            else:
                ranges.append((start, end))
        mark = f"{DISPATCHED_MARK}{self.dispatched}" if self.dispatched > base else ""
        metadata, kept, kept_partials = encode_ack_state(
            base, ranges, partials, max_metadata_bytes - len(mark)
        )
        return base, metadata + mark, len(ranges) - kept + len(partials) - kept_partials
