"""The in-memory twin's producer: per-key partitioning with Kafka's murmur2, batches,
transactions and fencing by transactional id and epoch."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence

from sync._errors import ProducerFencedError, TransportError

from ._base import (
    BatchCallback,
    BatchReport,
    DeliveryCallback,
    DeliveryReport,
    GroupMetadata,
    Header,
    Record,
)
from ._memory_log import MemoryBroker, _Entry, _State

__all__ = ["MemoryProducer"]


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
