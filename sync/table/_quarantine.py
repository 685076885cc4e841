"""The one quarantine for unreadable records of every compacted table.

A record no reader can apply is counted by reason, logged with its coordinates
(``topic[partition]@offset``) and copied byte for byte to ``<topic>.dlq`` with two headers
(the reason and the source coordinates). The copy is made ONCE per source record: before
its first copy the quarantine reads which sources the dead-letter topic already holds, so
a reader that restarts, or a fresh replay that meets the same record again, does not copy
it again. (Two readers that meet the same record live at the same moment may each copy
it: the check is not a transaction.) Copies are confirmed once per batch the reader
applies (:meth:`Quarantine.settle`), not one round trip per record. What the key holds
after an unreadable record is the caller's business, and the rule is
:mod:`sync.table._rules`': the key becomes absent.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence

from sync._constants import DEAD_LETTER_SUFFIX, HEADER_POISON_REASON, HEADER_POISON_SOURCE
from sync._errors import PolicySyncError
from sync.transport import DeliveryReport, Producer, TopicSpec, Transport

logger = logging.getLogger(__name__)

__all__ = ["Quarantine", "locate_records"]

#: How long reading the dead-letter topic's existing sources may take (once per reader).
_SCAN_LIMIT_S = 15.0

#: How long the rare search for the offsets of values found unreadable after they were
#: stored may take (see :func:`locate_records`).
_LOCATE_LIMIT_S = 30.0


def _identity(source: str, value: bytes | None) -> tuple[str, bytes]:
    return source, hashlib.sha256(value or b"").digest()


class Quarantine:
    """Counts, logs and dead-letters the unreadable records of one topic."""

    def __init__(
        self,
        transport: Transport,
        topic: str,
        *,
        dead_letter: bool = True,
        replication_factor: int = -1,
    ) -> None:
        self.topic = topic
        self.dlq_topic = topic + DEAD_LETTER_SUFFIX
        self._transport = transport
        self._dead_letter = dead_letter
        self._replication_factor = replication_factor
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._copied: set[tuple[str, bytes]] | None = None
        self._producer: Producer | None = None
        #: Copies produced since the last settle (not yet confirmed).
        self._unsettled = 0
        #: Kinds of the records quarantined since the last settle (counted by it).
        self._uncounted: list[str] = []
        #: The last settle left copies unconfirmed (DLQ unavailable): do not wait again
        #: until the producer has delivered everything.
        self._stalled = False
        self.copies = 0

    @property
    def counts(self) -> Mapping[str, int]:
        """Quarantined records by reason (a copy)."""
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def record(
        self, key: bytes | None, value: bytes | None, kind: str, detail: str, source: str
    ) -> None:
        """Quarantine one record found at ``source`` (``topic[p]@offset``)."""
        logger.warning("poison record %s quarantined (%s): %s", source, kind, detail)
        if not self._dead_letter:
            with self._lock:
                self._counts[kind] += 1
            return
        self._copy(key, value, detail, source)
        # Counted when its copy is settled (settle), so whoever sees the count finds it.
        with self._lock:
            self._uncounted.append(kind)

    def _copy(self, key: bytes | None, value: bytes | None, detail: str, source: str) -> None:
        ident = _identity(source, value)
        try:
            with self._lock:
                if self._copied is None:
                    self._copied = self._scan()
                if ident in self._copied:
                    logger.info("poison record %s is in %s already", source, self.dlq_topic)
                    return
                if self._producer is None:
                    self._producer = self._transport.producer()
                # Not waited for here: a log full of poison, or a DLQ whose leader is
                # gone, must not cost the reader a round trip (or a timeout) per record.
                # The reader settles the copies once per batch (settle).
                self._producer.produce(
                    self.dlq_topic,
                    key,
                    value,
                    headers=[
                        (HEADER_POISON_REASON, detail.encode("utf-8")),
                        (HEADER_POISON_SOURCE, source.encode("utf-8")),
                    ],
                    on_delivery=self._delivered,
                )
                self._producer.poll(0)
                self._copied.add(ident)
                self._unsettled += 1
                self.copies += 1
        except PolicySyncError:
            logger.exception("could not copy poison record %s to %s", source, self.dlq_topic)

    def settle(self, timeout_s: float = 2.0) -> None:
        """Confirm the copies made since the last call (bounded), then count their
        records: whoever sees a count finds the copy. Called by the reader once per batch,
        never per record. While the dead-letter topic is unavailable (a settle left copies
        unconfirmed) it does not wait again: the copies stay queued and are delivered
        later, and the records are counted anyway."""
        with self._lock:
            producer, pending, self._unsettled = self._producer, self._unsettled, 0
            kinds, self._uncounted = self._uncounted, []
        try:
            if producer is not None and (pending or self._stalled):
                left = producer.flush(0.0 if self._stalled else timeout_s)
                if left and not self._stalled:
                    logger.warning(
                        "%d poison copies to %s not confirmed within %.1fs; they stay "
                        "queued, and the reader no longer waits for them",
                        left, self.dlq_topic, timeout_s,
                    )  # fmt: skip
                self._stalled = left > 0
        except PolicySyncError:
            logger.warning("flushing copies to %s failed", self.dlq_topic, exc_info=True)
        finally:
            with self._lock:
                for kind in kinds:
                    self._counts[kind] += 1

    def _delivered(self, report: DeliveryReport) -> None:
        if report.error:
            logger.warning("copying a poison record to %s failed: %s", self.dlq_topic, report.error)

    def _scan(self) -> set[tuple[str, bytes]]:
        """Create the dead-letter topic if needed; the sources it holds already."""
        desc = self._transport.admin().ensure_topic(
            TopicSpec(self.dlq_topic, 1, replication_factor=self._replication_factor)
        )
        partitions = list(range(desc.partitions))
        seen: set[tuple[str, bytes]] = set()
        consumer = self._transport.consumer(read_committed=False)
        try:
            starts = consumer.start_offsets(self.dlq_topic, partitions)
            ends = consumer.end_offsets(self.dlq_topic, partitions)
            todo = [p for p in partitions if starts[p] < ends[p]]
            if not todo:
                return seen
            consumer.assign(self.dlq_topic, {p: starts[p] for p in todo})
            deadline = time.monotonic() + _SCAN_LIMIT_S
            while todo and time.monotonic() < deadline:
                for m in consumer.consume(5_000, 0.2):
                    source = dict(m.headers() or []).get(HEADER_POISON_SOURCE)
                    if source is not None:
                        seen.add(_identity(source.decode("utf-8", "replace"), m.value()))
                at = consumer.positions(self.dlq_topic, todo)
                todo = [p for p in todo if at[p] < ends[p]]
            if todo:
                logger.warning(
                    "reading %s for copies made earlier took over %.0fs; some poison records "
                    "may be copied twice",
                    self.dlq_topic,
                    _SCAN_LIMIT_S,
                )
        finally:
            consumer.close()
        return seen

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.flush(10)
                producer.close()
            except PolicySyncError:
                logger.warning("closing the dead-letter producer failed", exc_info=True)


def locate_records(
    transport: Transport,
    topic: str,
    partitions: Sequence[int],
    ends: Mapping[int, int],
    wanted: set[tuple[bytes, bytes]],
    batch_size: int,
) -> dict[tuple[bytes, bytes], str]:
    """``topic[partition]@offset`` of (key, value) records below ``ends`` (rare path: a
    reader that stores values without their position finds one unreadable later; the
    partitions of their keys are scanned first, each once, for at most ``_LOCATE_LIMIT_S``).
    """
    from sync.routing import kafka_partition

    found: dict[tuple[bytes, bytes], str] = {}
    first = sorted({kafka_partition(k, len(partitions)) for k, _ in wanted})
    ordered = first + [p for p in partitions if p not in first]
    consumer = transport.consumer(read_committed=True)
    deadline = time.monotonic() + _LOCATE_LIMIT_S
    try:
        starts = consumer.start_offsets(topic, ordered)
        for p in ordered:
            end = ends.get(p, 0)
            if starts[p] >= end or len(found) == len(wanted):
                continue
            # An explicit offset, not OFFSET_BEGINNING: the position is then valid
            # before the first fetch, which on a cold client can take a while.
            consumer.assign(topic, {p: starts[p]})
            while time.monotonic() < deadline:
                for m in consumer.consume(batch_size, 0.2):
                    pair = (m.key(), m.value())
                    if pair in wanted:
                        found[pair] = f"{topic}[{p}]@{m.offset()}"
                if consumer.positions(topic, [p])[p] >= end:
                    break
    except PolicySyncError:
        logger.debug("locating poison records failed", exc_info=True)
    finally:
        consumer.close()
    return found
