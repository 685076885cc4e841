"""The in-memory twin of the Kafka transport, for fast unit tests.

It keeps what the layers above depend on: per-key partitioning with Kafka's
murmur2 partitioner, offsets with gaps after compaction and transaction markers,
read-committed visibility up to the last stable offset, producer fencing by
transactional id and epoch, and compaction that keeps the last value per key.
The contract suite in ``tests/`` runs against this and a real broker alike.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from sync._errors import ProducerFencedError, TopicConfigurationMismatch, TransportError

from ._base import (
    OFFSET_BEGINNING,
    BatchCallback,
    BatchReport,
    DeliveryCallback,
    DeliveryReport,
    GroupDescription,
    GroupMetadata,
    Header,
    Message,
    Record,
    TopicDescription,
    TopicSpec,
    config_differences,
)
from ._memory_group import GroupCoordinator, MemoryGroupConsumer, start_offset_of

__all__ = ["MemoryBroker", "MemoryTransport"]

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


class _MemoryBatch:
    """Counts the reports of one :meth:`MemoryProducer.produce_many` call down; answers once."""

    def __init__(self, topic: str, count: int, on_done: BatchCallback) -> None:
        self.topic = topic
        self.count = count
        self.remaining = count
        self.on_done = on_done
        self.lowest: tuple[int, int] | None = None
        self.error: tuple[str, int] | None = None

    def __call__(self, report: DeliveryReport) -> None:
        if report.error is None:
            at = (report.partition, report.offset)
            if self.lowest is None or at < self.lowest:
                self.lowest = at
        elif self.error is None:
            self.error = (report.error, report.partition)
        self.remaining -= 1
        if self.remaining == 0:
            self.finish()

    def cut(self, queued: int, error: str, partition: int, total: int) -> None:
        """Only the first ``queued`` records were queued: the rest failed with ``error``."""
        self.count = queued
        self.remaining -= total - queued
        if self.error is None:
            self.error = (error, partition)
        if self.remaining == 0:
            self.finish()

    def finish(self) -> None:
        partition, offset = self.lowest or (-1, -1)
        error, error_partition = self.error or (None, -1)
        self.on_done(BatchReport(self.topic, self.count, partition, offset, error, error_partition))


class MemoryProducer:
    """Producer twin; delivery reports are served on poll/flush as with librdkafka."""

    def __init__(self, broker: MemoryBroker, transactional_id: str | None) -> None:
        self._broker = broker
        self._tid = transactional_id
        self._epoch: int | None = None
        self._in_txn = False
        self._touched: set[tuple[str, int]] = set()
        self._reports: list[tuple[DeliveryCallback, DeliveryReport]] = []
        self._txn_reports: list[tuple[DeliveryCallback, DeliveryReport]] = []
        self._round_robin = itertools.count()

    def partition_for(self, topic: str, key: bytes) -> int:
        from sync.routing import kafka_partition

        with self._broker._lock:  # noqa: SLF001 - the twin's clients share its lock
            count = len(self._broker._topic(topic).partitions)  # noqa: SLF001
        return kafka_partition(key, count)

    def _fenced(self) -> bool:
        assert self._tid is not None  # noqa: S101 - only called for transactional producers
        return self._broker._epochs.get(self._tid) != self._epoch  # noqa: SLF001

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        headers: Sequence[Header] | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        b = self._broker
        with b._lock:  # noqa: SLF001
            b._check()  # noqa: SLF001
            t = b._topic(topic)  # noqa: SLF001
            if self._tid is not None:
                if not self._in_txn:
                    raise TransportError(
                        "produce outside a transaction on a transactional producer"
                    )
                if self._fenced():
                    raise ProducerFencedError(f"producer {self._tid!r} was fenced")
            if key is None and "compact" in t.config.get("cleanup.policy", ""):
                # Kafka's broker refuses keyless records on compacted topics.
                if on_delivery is not None:
                    self._reports.append(
                        (
                            on_delivery,
                            DeliveryReport(
                                topic, -1, -1, "Broker: Broker failed to validate record"
                            ),
                        )
                    )
                return
            if partition is None:
                if key is None:
                    partition = next(self._round_robin) % len(t.partitions)
                else:
                    from sync.routing import kafka_partition

                    partition = kafka_partition(key, len(t.partitions))
            part = t.partitions[partition]
            entry = _Entry(
                offset=part.next_offset,
                key=key,
                value=value,
                timestamp_ms=int(time.time() * 1000),
                headers=tuple(headers or ()),
                state=_State.PENDING if self._tid is not None else _State.COMMITTED,
                txn=(self._tid, self._epoch or 0) if self._tid is not None else None,
            )
            part.entries.append(entry)
            part.next_offset += 1
            self._touched.add((topic, partition))
            if on_delivery is not None:
                report = DeliveryReport(topic, partition, entry.offset, key=key)
                (self._txn_reports if self._tid else self._reports).append((on_delivery, report))
            b._lock.notify_all()  # noqa: SLF001

    def produce_many(self, topic: str, records: Sequence[Record], on_done: BatchCallback) -> None:
        if not records:
            raise ValueError("produce_many needs at least one record")
        batch = _MemoryBatch(topic, len(records), on_done)
        for index, (partition, key, value, headers) in enumerate(records):
            try:
                self.produce(
                    topic, key, value, partition=partition, headers=headers, on_delivery=batch
                )
            except TransportError as exc:
                if index == 0:
                    raise
                batch.cut(index, str(exc), partition, len(records))
                return

    def poll(self, timeout_s: float = 0.0) -> int:
        # Under the lock: produce() may append from another thread (librdkafka allows it).
        with self._broker._lock:  # noqa: SLF001
            reports, self._reports = self._reports, []
        for callback, report in reports:
            callback(report)
        return len(reports)

    def flush(self, timeout_s: float) -> int:
        self.poll()
        return 0

    def init_transactions(self, timeout_s: float) -> None:
        if self._tid is None:
            raise TransportError("init_transactions needs a transactional_id")
        b = self._broker
        with b._lock:  # noqa: SLF001
            b._check()  # noqa: SLF001
            epoch = b._epochs.get(self._tid, -1) + 1  # noqa: SLF001
            b._epochs[self._tid] = epoch  # noqa: SLF001
            # A new epoch aborts whatever an older incarnation left open.
            self._end_pending(lambda txn: txn[0] == self._tid and txn[1] < epoch, _State.ABORTED)
            b._coordinator.finish_older(self._tid, epoch)  # noqa: SLF001
            self._epoch = epoch

    def _end_pending(self, match: object, state: _State) -> None:
        b = self._broker
        for t in b._topics.values():  # noqa: SLF001
            for part in t.partitions:
                hit = False
                for e in part.entries:
                    if e.state is _State.PENDING and e.txn is not None and match(e.txn):  # type: ignore[operator]
                        e.state = state
                        hit = True
                if hit:
                    part.entries.append(_Entry(part.next_offset, None, None, 0, (), _State.MARKER))
                    part.next_offset += 1
        b._lock.notify_all()  # noqa: SLF001

    def begin_transaction(self) -> None:
        if self._epoch is None:
            raise TransportError("begin_transaction before init_transactions")
        self._in_txn = True

    def _finish(self, state: _State) -> None:
        b = self._broker
        with b._lock:  # noqa: SLF001
            b._check()  # noqa: SLF001
            if self._fenced():
                self._in_txn = False
                self._txn_reports = []
                raise ProducerFencedError(f"producer {self._tid!r} was fenced")
            mine = (self._tid, self._epoch)
            self._end_pending(lambda txn: txn == mine, state)
            if self._tid is not None and self._epoch is not None:
                b._coordinator.finish(  # noqa: SLF001
                    (self._tid, self._epoch), state is _State.COMMITTED
                )
        self._in_txn = False
        reports, self._txn_reports = self._txn_reports, []
        if state is _State.COMMITTED:
            for callback, report in reports:
                callback(report)

    def send_offsets_to_transaction(
        self,
        topic: str,
        offsets: Mapping[int, int],
        group_metadata: GroupMetadata,
        timeout_s: float,
    ) -> None:
        if self._tid is None or self._epoch is None or not self._in_txn:
            raise TransportError("send_offsets_to_transaction outside a transaction")
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            if self._fenced():
                raise ProducerFencedError(f"producer {self._tid!r} was fenced")
            self._broker._coordinator.stage_offsets(  # noqa: SLF001
                group_metadata, topic, offsets, (self._tid, self._epoch)
            )

    def commit_transaction(self, timeout_s: float) -> None:
        self._finish(_State.COMMITTED)

    def abort_transaction(self, timeout_s: float) -> None:
        self._finish(_State.ABORTED)

    def close(self) -> None:
        self.flush(0)


class MemoryConsumer:
    """Consumer twin with manual assignment (and, with a group id, group commits)."""

    def __init__(
        self, broker: MemoryBroker, read_committed: bool, group_id: str | None = None
    ) -> None:
        self._broker = broker
        self._read_committed = read_committed
        self._group_id = group_id
        self._topic_name: str | None = None
        self._positions: dict[int, int] = {}
        self._paused: set[int] = set()

    def assign(self, topic: str, offsets: Mapping[int, int]) -> None:
        with self._broker._lock:  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            self._topic_name = topic
            self._positions = {
                p: (t.partitions[p].start_offset if o == OFFSET_BEGINNING else o)
                for p, o in offsets.items()
            }

    def _visible_end(self, part: _Partition) -> int:
        return part.last_stable() if self._read_committed else part.next_offset

    def _collect(self, t: _Topic, limit: int) -> list[Message]:
        out: list[Message] = []
        assert self._topic_name is not None  # noqa: S101 - set by assign()
        for p, pos in self._positions.items():
            if p in self._paused:
                continue
            part = t.partitions[p]
            end = self._visible_end(part)
            for e in part.entries:
                if len(out) >= limit:
                    break
                if e.offset < pos or e.offset >= end:
                    continue
                if e.state is _State.COMMITTED or (
                    not self._read_committed and e.state is not _State.MARKER
                ):
                    out.append(_MemMessage(self._topic_name, p, e))
                self._positions[p] = e.offset + 1
            if len(out) < limit and self._positions[p] < end:
                self._positions[p] = end  # skip gaps left by compaction and markers
        return out

    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]:
        if self._topic_name is None:
            return []
        deadline = time.monotonic() + timeout_s
        b = self._broker
        with b._lock:  # noqa: SLF001
            while True:
                b._check()  # noqa: SLF001
                out = self._collect(b._topic(self._topic_name), max_messages)  # noqa: SLF001
                remaining = deadline - time.monotonic()
                if out or remaining <= 0:
                    return out
                b._lock.wait(remaining)  # noqa: SLF001

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        return {p: self._positions.get(p, -1001) for p in partitions}

    def end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            return {p: self._visible_end(t.partitions[p]) for p in partitions}

    def start_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        with self._broker._lock:  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            return {p: t.partitions[p].start_offset for p in partitions}

    def pause(self, topic: str, partitions: Sequence[int]) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._paused.update(partitions)

    def resume(self, topic: str, partitions: Sequence[int]) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._paused.difference_update(partitions)
            self._broker._lock.notify_all()  # noqa: SLF001

    def _require_group(self, what: str) -> str:
        if self._group_id is None:
            raise TransportError(f"{what} needs a consumer created with a group_id")
        return self._group_id

    def committed(
        self, topic: str, partitions: Sequence[int], timeout_s: float = 10.0
    ) -> dict[int, tuple[int, str] | None]:
        group = self._require_group("committed()")
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            offsets = self._broker._groups.get(group, {})  # noqa: SLF001
            return {p: offsets.get((topic, p)) for p in partitions}

    def commit(
        self, topic: str, offsets: Mapping[int, tuple[int, str]], timeout_s: float = 10.0
    ) -> None:
        group = self._require_group("commit()")
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            for p, (offset, metadata) in offsets.items():
                if not 0 <= p < len(t.partitions):
                    raise TransportError(f"commit to unknown partition {topic}[{p}]")
                if len(metadata.encode("utf-8")) > OFFSET_METADATA_MAX_BYTES:
                    # Kafka: OFFSET_METADATA_TOO_LARGE (offset.metadata.max.bytes).
                    raise TransportError(
                        f"commit of {topic}[{p}]@{offset} for group {group!r} failed: "
                        "Broker: Offset metadata string too large"
                    )
            stored = self._broker._groups.setdefault(group, {})  # noqa: SLF001
            for p, (offset, metadata) in offsets.items():
                stored[(topic, p)] = (offset, metadata)

    def close(self) -> None:
        self._topic_name = None


#: What a twin topic reports without being configured (Kafka's defaults for these keys).
_MEMORY_DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "delete",
    "delete.retention.ms": "86400000",
}


class MemoryAdmin:
    """Admin twin."""

    def __init__(self, broker: MemoryBroker) -> None:
        self._broker = broker

    def describe_topic(self, topic: str, timeout_s: float = 30.0) -> TopicDescription | None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topics.get(topic)  # noqa: SLF001
            if t is None:
                return None
            return TopicDescription(topic, len(t.partitions), dict(t.config), t.topic_id, 1)

    def ensure_topic(self, spec: TopicSpec, timeout_s: float = 30.0) -> TopicDescription:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            if spec.name not in self._broker._topics:  # noqa: SLF001
                config = dict(_MEMORY_DEFAULTS)
                config.update(spec.config)
                self._broker._topics[spec.name] = _Topic(  # noqa: SLF001
                    [_Partition() for _ in range(spec.partitions)], config, str(uuid.uuid4())
                )
        desc = self.describe_topic(spec.name)
        assert desc is not None  # noqa: S101 - created above under the lock
        diff = config_differences(spec, desc.partitions, desc.config)
        if diff:
            raise TopicConfigurationMismatch(spec.name, diff)
        return desc

    def delete_topic(self, topic: str, timeout_s: float = 30.0) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._topics.pop(topic, None)  # noqa: SLF001

    def grow_topic(self, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topics.get(topic)  # noqa: SLF001
            if t is None:
                raise TransportError(f"grow topic {topic}: no such topic")
            if partitions < len(t.partitions):
                raise TransportError(f"grow topic {topic}: Kafka cannot shrink a topic")
            t.partitions.extend(_Partition() for _ in range(partitions - len(t.partitions)))

    def describe_group(self, group_id: str, timeout_s: float = 10.0) -> GroupDescription:
        self._broker._check()  # noqa: SLF001
        return self._broker._coordinator.describe(group_id)  # noqa: SLF001

    def list_groups(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            return sorted(g for g in self._broker._groups if g.startswith(prefix))  # noqa: SLF001

    def delete_group(self, group: str, timeout_s: float = 30.0) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._groups.pop(group, None)  # noqa: SLF001

    def list_topics(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            return sorted(t for t in self._broker._topics if t.startswith(prefix))  # noqa: SLF001

    def topic_overrides(self, topic: str, timeout_s: float = 30.0) -> dict[str, str] | None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topics.get(topic)  # noqa: SLF001
            if t is None:
                return None
            return {k: v for k, v in t.config.items() if k not in _MEMORY_DEFAULTS}

    def alter_topic_config(
        self,
        topic: str,
        set_: Mapping[str, str],
        delete: Collection[str] = (),
        timeout_s: float = 30.0,
    ) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topics.get(topic)  # noqa: SLF001
            if t is None:
                raise TransportError(f"alter configs of {topic}: unknown topic")
            for k in delete:
                t.config.pop(k, None)
            t.config.update(set_)

    def list_offsets(
        self, topic: str, partitions: Sequence[int], at: int | str, timeout_s: float = 30.0
    ) -> dict[int, int]:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            out: dict[int, int] = {}
            for p in partitions:
                part = t.partitions[p]
                if at == "earliest":
                    out[p] = part.start_offset
                elif at == "latest":
                    out[p] = part.next_offset
                else:
                    out[p] = next(
                        (
                            e.offset
                            for e in part.entries
                            if e.state is _State.COMMITTED and e.timestamp_ms >= int(at)
                        ),
                        part.next_offset,
                    )
            return out

    def group_offsets(self, group: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
        with self._broker._lock:  # noqa: SLF001
            stored = self._broker._groups.get(group, {})  # noqa: SLF001
            return {p: o for (t, p), (o, _m) in stored.items() if t == topic}

    def alter_group_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], timeout_s: float = 30.0
    ) -> None:
        self.alter_group_positions(group, topic, {p: (o, "") for p, o in offsets.items()})

    def group_positions(
        self, group: str, topic: str, timeout_s: float = 30.0
    ) -> dict[int, tuple[int, str]]:
        with self._broker._lock:  # noqa: SLF001
            stored = self._broker._groups.get(group, {})  # noqa: SLF001
            return {p: (o, m) for (t, p), (o, m) in stored.items() if t == topic}

    def alter_group_positions(
        self,
        group: str,
        topic: str,
        positions: Mapping[int, tuple[int, str]],
        timeout_s: float = 30.0,
    ) -> None:
        with self._broker._lock:  # noqa: SLF001
            stored = self._broker._groups.setdefault(group, {})  # noqa: SLF001
            for p, (o, m) in positions.items():
                stored[(topic, p)] = (o, m)


class MemoryTransport:
    """Transport over a :class:`MemoryBroker` (a fresh one unless given)."""

    def __init__(self, broker: MemoryBroker | None = None) -> None:
        self.broker = broker or MemoryBroker()

    @property
    def description(self) -> str:
        return "memory://"

    def producer(
        self,
        *,
        transactional_id: str | None = None,
        linger_ms: int = 0,
        transaction_timeout_ms: int | None = None,
    ) -> MemoryProducer:
        return MemoryProducer(self.broker, transactional_id)

    def group_consumer(
        self,
        group_id: str,
        *,
        client_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int | None = None,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
    ) -> MemoryGroupConsumer:
        fetcher = MemoryConsumer(self.broker, read_committed)
        return MemoryGroupConsumer(
            self.broker._coordinator,  # noqa: SLF001
            fetcher,
            group_id,
            client_id or "policy-sync",
            session_timeout_ms,
            start_offset_of(fetcher.start_offsets),
        )

    def consumer(
        self,
        *,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
        group_id: str | None = None,
    ) -> MemoryConsumer:
        return MemoryConsumer(self.broker, read_committed, group_id)

    def admin(self) -> MemoryAdmin:
        return MemoryAdmin(self.broker)
