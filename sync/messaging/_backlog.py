"""Backlog quotas: measuring a topic's backlog on Kafka and deciding what a quota does.

The backlog of a partition is what its slowest durable subscription has not acknowledged,
counted exactly from what the subscriptions' Kafka groups committed: the partition's end
offset, minus the group's committed offset (a group without a commit on the partition
counts from the log start), minus the messages individually acknowledged above it (the
ack ranges in the commit metadata, see ``_cursor``). A topic's backlog is the sum over its
partitions of the largest such count. A topic without subscriptions has no backlog, as in
Pulsar. Acknowledgements younger than the commit interval (``commit_interval_s``) are not
counted yet.

* ``limitSize`` (``destination_storage``): Kafka reports no byte count between two offsets
  (``DescribeLogDirs`` gives whole partitions, and confluent-kafka has no call for it), so
  the owner reads the records of the backlog once and keeps their sizes
  (:class:`RecordSizes`, 8 bytes per record, updated incrementally by reading only the new
  records at each check). "Size" is the sum, over the unacknowledged records, of their
  key + value + header bytes as stored in Kafka: not Kafka's batch framing, compression or
  index overhead (Pulsar counts the entries' stored bytes, framing included). Beyond
  ``max_indexed`` records per partition, the oldest part is estimated from the average
  size of the records read;
* ``limitTime`` (``destination_storage`` or ``message_age``), seconds: exact — the quota is
  exceeded when a subscription's position is below the first offset Kafka reports for
  ``now - limitTime`` (``ListOffsets`` by timestamp), i.e. an older message is unacked.

What an exceeded quota does (``policy``), as Pulsar:

* ``producer_request_hold``: new producers are refused (``Cannot create producer on topic
  with backlog quota exceeded``, ``ProducerBlockedQuotaExceededError``, which clients
  retry); the engine marks the topic's sends held (``ProducerHandle.held``) until the
  backlog is back under the quota, and each front end maps that as Pulsar's clients see it:
  the WebSocket front end keeps the send waiting, up to ``backlog_hold_timeout_s`` (what
  Pulsar's WebSocket proxy does through its internal client), the binary front end
  disconnects the producer (CLOSE_PRODUCER) without answering the send, so the client keeps
  it pending, retries its reconnection and resends it once admitted, or fails it at its
  own ``sendTimeout`` (what Pulsar's broker does: ``disconnectProducers``);
* ``producer_exception``: new producers are refused with the same text and connected ones
  are closed with it;
* ``consumer_backlog_eviction``: the slowest subscriptions' positions are moved forward
  until the quota holds (a subscription served here moves its cursor; others have their
  Kafka group offsets altered).
"""

from __future__ import annotations

import enum
import logging
import time
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sync.transport import Admin, Message, Transport

from ._cursor import Partial, decode_ack_ranges, encode_ack_state

logger = logging.getLogger(__name__)

__all__ = [
    "BACKLOG_EXCEEDED",
    "BacklogAction",
    "BacklogMeasure",
    "BacklogQuotas",
    "PartitionSizes",
    "RecordSizes",
    "measure_backlog",
    "moved_position",
]

#: Pulsar's refusal of a producer on a topic over its backlog quota.
BACKLOG_EXCEEDED = "Cannot create producer on topic with backlog quota exceeded"


class BacklogAction(enum.Enum):
    """``BacklogQuota.policy``."""

    producer_request_hold = "producer_request_hold"
    producer_exception = "producer_exception"
    consumer_backlog_eviction = "consumer_backlog_eviction"


@dataclass(frozen=True, slots=True)
class BacklogQuotas:
    """The backlog quotas of a topic (``0``/``-1`` limits: none)."""

    limit_bytes: int = 0
    size_action: BacklogAction = BacklogAction.producer_request_hold
    limit_time_s: int = 0
    time_action: BacklogAction = BacklogAction.producer_request_hold

    @property
    def active(self) -> bool:
        """Whether any quota is set."""
        return self.limit_bytes > 0 or self.limit_time_s > 0

    @classmethod
    def from_policy(cls, value: Mapping[str, Any] | None) -> BacklogQuotas:
        """From a ``backLogQuotaMap`` (absent: no quota)."""
        if not value:
            return cls()
        storage = value.get("destination_storage") or {}
        age = value.get("message_age") or {}
        limit_bytes = int(storage.get("limitSize") or 0)
        size_action = BacklogAction(storage.get("policy") or "producer_request_hold")
        limit_time_s, time_action = 0, size_action
        if int(age.get("limitTime") or 0) > 0:
            limit_time_s = int(age["limitTime"])
            time_action = BacklogAction(age.get("policy") or "producer_request_hold")
        elif int(storage.get("limitTime") or 0) > 0:
            limit_time_s = int(storage["limitTime"])
        return cls(max(0, limit_bytes), size_action, max(0, limit_time_s), time_action)


Range = tuple[int, int]


class PartitionSizes:
    """The sizes of one partition's records from ``base`` on, as prefix sums."""

    __slots__ = ("base", "cum")

    def __init__(self, base: int) -> None:
        self.base = base
        #: ``cum[i]``: bytes of the records in ``[base, base + i)``.
        self.cum = array("q", [0])

    @property
    def upto(self) -> int:
        """The first offset not indexed yet."""
        return self.base + len(self.cum) - 1

    @property
    def avg(self) -> float:
        """Average size of the indexed records (offsets without a record count too)."""
        n = len(self.cum) - 1
        return self.cum[-1] / n if n > 0 else 0.0

    def add(self, offset: int, size: int) -> None:
        """Index the record at ``offset`` (offsets must come in increasing order)."""
        if offset < self.upto:
            return
        last = self.cum[-1]
        while self.upto < offset:  # no record there (transaction marker, compacted)
            self.cum.append(last)
        self.cum.append(last + size)

    def drop_below(self, offset: int) -> None:
        """Forget the records below ``offset``."""
        if offset <= self.base:
            return
        if offset >= self.upto:
            self.base, self.cum = offset, array("q", [0])
            return
        cut = offset - self.base
        first = self.cum[cut]
        self.cum = array("q", (c - first for c in self.cum[cut:]))
        self.base = offset

    def bytes_between(self, lo: int, hi: int) -> int:
        """Bytes of the records in ``[lo, hi)``; the part outside the index is estimated
        from the average indexed record size."""
        if hi <= lo:
            return 0
        total = 0.0
        avg = self.avg
        if lo < self.base:
            total += (min(hi, self.base) - lo) * avg
            lo = self.base
        if hi > self.upto:
            total += (hi - max(lo, self.upto)) * avg
            hi = self.upto
        if hi > lo:
            total += self.cum[hi - self.base] - self.cum[lo - self.base]
        return int(total)

    def floor_for(self, end: int, keep_bytes: int) -> int:
        """The smallest offset ``f`` with ``bytes_between(f, end) <= keep_bytes``."""
        low, high = self.base, end  # bytes_between(high, end) == 0 <= keep
        if self.bytes_between(low, end) <= keep_bytes:
            return low
        while high - low > 1:  # invariant: low too much, high fits
            mid = (low + high) // 2
            if self.bytes_between(mid, end) <= keep_bytes:
                high = mid
            else:
                low = mid
        return high


def record_size(message: Message) -> int:
    """What a record counts for ``limitSize``: its key, value and header bytes."""
    size = len(message.key() or b"") + len(message.value() or b"")
    for name, value in message.headers() or ():
        size += len(name) + len(value or b"")
    return size


class RecordSizes:
    """The record sizes of a topic's backlog, per partition (owned by one engine; blocking
    methods: run them in a thread, one at a time per topic)."""

    def __init__(self, kafka_topic: str, max_indexed: int = 1_000_000) -> None:
        self.kafka_topic = kafka_topic
        self.max_indexed = max_indexed
        self.parts: dict[int, PartitionSizes] = {}

    def update(
        self,
        transport: Transport,
        lows: Mapping[int, int],
        ends: Mapping[int, int],
        timeout_s: float = 30.0,
    ) -> dict[int, PartitionSizes]:
        """Index the records of ``[lows[p], ends[p])`` (reading only what is new)."""
        wanted: dict[int, int] = {}
        for p, end in ends.items():
            low = max(lows.get(p, end), end - self.max_indexed)
            sizes = self.parts.get(p)
            # Indexed beyond the end: the topic was deleted and created again; start over.
            if sizes is None or sizes.upto < low or sizes.base > low or sizes.upto > end:
                sizes = self.parts[p] = PartitionSizes(low)
            sizes.drop_below(low)
            if sizes.upto < end:
                wanted[p] = sizes.upto
        if wanted:
            self._read(transport, wanted, ends, timeout_s)
        return {p: self.parts[p] for p in ends if p in self.parts}

    def _read(
        self,
        transport: Transport,
        wanted: dict[int, int],
        ends: Mapping[int, int],
        timeout_s: float,
    ) -> None:
        consumer = transport.consumer(read_committed=False)
        try:
            consumer.assign(self.kafka_topic, wanted)
            todo = set(wanted)
            deadline = time.monotonic() + timeout_s
            while todo and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 0.2):
                    p, offset = msg.partition(), msg.offset()
                    if p is None or offset is None or p not in todo:
                        continue
                    self.parts[p].add(offset, record_size(msg))
                    if offset + 1 >= ends[p]:
                        todo.discard(p)
                for p in list(todo):
                    if self.parts[p].upto >= ends[p]:
                        todo.discard(p)
            if todo:
                logger.warning(
                    "%s: record sizes of partitions %s not read to the end in %.0f s; "
                    "the rest is estimated from the average",
                    self.kafka_topic,
                    sorted(todo),
                    timeout_s,
                )
        finally:
            consumer.close()


@dataclass(frozen=True, slots=True)
class BacklogMeasure:
    """One measurement of a topic's backlog (per Kafka partition)."""

    end: dict[int, int]
    #: Per partition: the committed offset of every durable subscription (group id).
    positions: dict[int, dict[str, int]]
    #: Per partition: the first offset recent enough for ``limitTime`` (empty: no limit).
    time_floor: dict[int, int] = field(default_factory=dict)
    #: Average record size, used where no record sizes were read (``sizes``).
    avg_bytes: float = 0.0
    #: Per partition and group: the ranges individually acknowledged above the position.
    acked: dict[int, dict[str, list[Range]]] = field(default_factory=dict)
    #: Per partition: the sizes of the records of the backlog (``limitSize`` only).
    sizes: dict[int, PartitionSizes] = field(default_factory=dict)

    def _ranges(self, p: int, group: str) -> list[Range]:
        return (self.acked.get(p) or {}).get(group) or []

    def _bytes(self, p: int, lo: int, hi: int) -> int:
        sizes = self.sizes.get(p)
        if sizes is not None:
            return sizes.bytes_between(lo, hi)
        return int(max(0, hi - lo) * self.avg_bytes)

    def unacked(self, p: int, group: str) -> int:
        """Messages of partition ``p`` that ``group`` has not acknowledged."""
        end = self.end.get(p, 0)
        pos = (self.positions.get(p) or {}).get(group, end)
        count = max(0, end - pos)
        for start, stop in self._ranges(p, group):
            count -= max(0, min(stop, end) - max(start, pos))
        return max(0, count)

    def unacked_bytes(self, p: int, group: str) -> int:
        """Bytes of the records of partition ``p`` that ``group`` has not acknowledged."""
        end = self.end.get(p, 0)
        pos = (self.positions.get(p) or {}).get(group, end)
        total = self._bytes(p, pos, end)
        for start, stop in self._ranges(p, group):
            total -= self._bytes(p, max(start, pos), min(stop, end))
        return max(0, total)

    def messages(self) -> int:
        """Messages not acknowledged by the slowest durable subscription, all partitions."""
        return sum(
            max((self.unacked(p, g) for g in subs), default=0)
            for p, subs in self.positions.items()
            if p in self.end
        )

    def size_bytes(self) -> int:
        """Bytes not acknowledged by the slowest durable subscription, all partitions."""
        return sum(
            max((self.unacked_bytes(p, g) for g in subs), default=0)
            for p, subs in self.positions.items()
            if p in self.end
        )

    def over_size(self, quotas: BacklogQuotas) -> bool:
        return quotas.limit_bytes > 0 and self.size_bytes() > quotas.limit_bytes

    def over_time(self, quotas: BacklogQuotas) -> bool:
        if quotas.limit_time_s <= 0:
            return False
        for p, floor in self.time_floor.items():
            subs = self.positions.get(p) or {}
            if any(pos < min(floor, self.end.get(p, floor)) for pos in subs.values()):
                return True
        return False

    def eviction_targets(self, quotas: BacklogQuotas) -> dict[str, dict[int, int]]:
        """Per group, the partitions to move forward (and where) for the quotas to hold."""
        floors: dict[int, int] = {}
        if self.over_time(quotas) and quotas.time_action is BacklogAction.consumer_backlog_eviction:
            floors = {p: min(f, self.end.get(p, f)) for p, f in self.time_floor.items()}
        if (
            self.over_size(quotas)
            and quotas.size_action is BacklogAction.consumer_backlog_eviction
            and (self.sizes or self.avg_bytes > 0)
        ):
            # Keep at most limitSize bytes, spread over the partitions as they are now.
            per_part = {
                p: max((self.unacked_bytes(p, g) for g in subs), default=0)
                for p, subs in self.positions.items()
                if subs and p in self.end
            }
            total = max(1, sum(per_part.values()))
            for p, backlog in per_part.items():
                end = self.end[p]
                keep = backlog * quotas.limit_bytes // total
                sizes = self.sizes.get(p)
                if sizes is not None:
                    floor = sizes.floor_for(end, keep)
                else:
                    floor = end - int(keep / self.avg_bytes)
                floors[p] = max(floors.get(p, 0), floor)
        out: dict[str, dict[int, int]] = {}
        for p, floor in floors.items():
            for group, pos in (self.positions.get(p) or {}).items():
                if pos < floor:
                    out.setdefault(group, {})[p] = floor
        return out

    def moved_positions(self, group: str, targets: Mapping[int, int]) -> dict[int, tuple[int, str]]:
        """Commit positions for ``group`` moved forward to ``targets``, keeping the ranges
        individually acknowledged above the new offset (Pulsar's cursor keeps its
        individually deleted messages above a mark-delete position that moves forward)."""
        return {p: moved_position(target, self._ranges(p, group)) for p, target in targets.items()}


def moved_position(
    target: int, ranges: list[Range], max_bytes: int = 4000, partials: Sequence[Partial] = ()
) -> tuple[int, str]:
    """A commit ``(offset, metadata)`` at ``target`` keeping the acknowledged ``ranges``
    above it (a range starting at ``target`` moves the offset past it), and the partially
    acknowledged entries at or above it (``ps2``)."""
    kept: list[Range] = []
    for start, stop in ranges:
        if stop <= target:
            continue
        start = max(start, target)
        if start == target and not kept:
            target = stop
            continue
        kept.append((start, stop))
    above = [p for p in partials if p[0] >= target]
    metadata, _n, _m = encode_ack_state(target, kept, above, max_bytes)
    return target, metadata


def measure_backlog(
    admin: Admin,
    kafka_topic: str,
    partitions: int,
    groups: list[str],
    quotas: BacklogQuotas,
    avg_bytes: float = 0.0,
    *,
    transport: Transport | None = None,
    sizes: RecordSizes | None = None,
) -> BacklogMeasure:
    """Measure (blocking: run it in a thread) the backlog of ``kafka_topic``.

    With ``transport`` and ``sizes`` and a ``limitSize`` quota, the records of the backlog
    are read (only the new ones) to know their sizes.
    """
    parts = list(range(partitions))
    end = admin.list_offsets(kafka_topic, parts, "latest")
    start = admin.list_offsets(kafka_topic, parts, "earliest") if groups else {}
    positions: dict[int, dict[str, int]] = {p: {} for p in parts}
    acked: dict[int, dict[str, list[Range]]] = {p: {} for p in parts}
    for group in groups:
        committed = admin.group_positions(group, kafka_topic)
        for p in parts:
            offset, metadata = committed.get(p, (start.get(p, 0), ""))
            pos = max(offset, start.get(p, 0))
            positions[p][group] = pos
            ranges = decode_ack_ranges(offset, metadata) if metadata else []
            if ranges:
                acked[p][group] = [(max(a, pos), b) for a, b in ranges if b > pos]
    floor: dict[int, int] = {}
    if quotas.limit_time_s > 0 and groups:
        cutoff_ms = int(time.time() * 1000) - quotas.limit_time_s * 1000
        floor = admin.list_offsets(kafka_topic, parts, cutoff_ms)
    indexed: dict[int, PartitionSizes] = {}
    if quotas.limit_bytes > 0 and groups and transport is not None and sizes is not None:
        lows = {p: min(positions[p].values()) for p in parts if positions[p]}
        indexed = sizes.update(transport, lows, end)
    return BacklogMeasure(end, positions, floor, avg_bytes, acked, indexed)
