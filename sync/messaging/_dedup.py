"""Message deduplication (``deduplicationEnabled``): one sequence per producer name.

A message sent with a producer name and a sequence id not above the producer's last
persisted one is acknowledged without being written again (with the message id of that
last persisted message, as Pulsar answers with the last position); one not above the last
*sent* but not yet persisted is refused (``DUPLICATE_IN_FLIGHT``; the client retries).

Durability, as Pulsar's cursor snapshot plus replay: every deduplicated message carries its
producer name and sequence id in the reserved Kafka headers ``__pulsar.producer`` and
``__pulsar.seq``; a snapshot (the map producer → ``[sequence, partition, offset]`` and the
offsets it covers) is committed as the offsets and metadata of the Kafka consumer group
``policy-sync-dedup/<kafka topic>`` every ``deduplicationSnapshotIntervalSeconds`` and when
the topic is unloaded. Whoever serves the topic next (after a restart or an ownership
move) reads the snapshot and replays the headers of the records written after it, so no
acknowledged sequence is forgotten. The snapshot lives in the commit metadata of partition
0 (Kafka's ``offset.metadata.max.bytes``, 4096 by default, holds some 100 producers); when
it is fuller, the producers that sent least recently are left out of the snapshot and
survive a move only if they sent after it.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from dataclasses import dataclass

from sync._constants import HEADER_PRODUCER, HEADER_SEQUENCE
from sync.transport import Header, Transport

from ._message_id import MessageId
from ._record_headers import origin_headers

logger = logging.getLogger(__name__)

__all__ = [
    "DUPLICATE_IN_FLIGHT",
    "HEADER_PRODUCER",
    "HEADER_SEQUENCE",
    "Deduplicator",
    "Verdict",
    "dedup_group",
]

DUPLICATE_IN_FLIGHT = (
    "Message is duplicated: a message with this sequence id is still being persisted; retry"
)
_DEDUP_GROUP_PREFIX = "policy-sync-dedup/"
_SNAPSHOT_MAX_BYTES = 3800


def dedup_group(kafka_topic: str) -> str:
    """The Kafka consumer group holding a topic's deduplication snapshot."""
    return f"{_DEDUP_GROUP_PREFIX}{kafka_topic}"


class Verdict(enum.Enum):
    """What to do with a send."""

    NEW = "new"
    DUPLICATE = "duplicate"
    IN_FLIGHT = "in-flight"


@dataclass(slots=True)
class _Seq:
    pushed: int
    persisted: int
    partition: int
    offset: int
    last_used: float


class Deduplicator:
    """The deduplication state of one topic (its Kafka partitions together)."""

    def __init__(self, kafka_topic: str, num_partitions: int, partitioned: bool) -> None:
        self.kafka_topic = kafka_topic
        self.num_partitions = num_partitions
        self.partitioned = partitioned
        self._seqs: dict[str, _Seq] = {}
        #: Per partition: every record below this offset is reflected in ``_seqs``.
        self._upto: dict[int, int] = {}
        self._snapshot_upto: dict[int, int] = {}
        self.duplicates = 0
        self.last_snapshot = time.monotonic()

    # -- the data path ------------------------------------------------------------------
    def check(self, producer: str, sequence_id: int) -> tuple[Verdict, MessageId | None]:
        """Classify a send; on NEW the sequence counts as sent (call :meth:`persisted`
        or :meth:`failed` when Kafka answers)."""
        seq = self._seqs.get(producer)
        if seq is not None:
            if sequence_id <= seq.persisted:
                self.duplicates += 1
                pulsar_partition = seq.partition if self.partitioned else -1
                msg_id = MessageId(pulsar_partition, seq.offset) if seq.offset >= 0 else None
                return Verdict.DUPLICATE, msg_id
            if sequence_id <= seq.pushed:
                return Verdict.IN_FLIGHT, None
            seq.pushed = sequence_id
            seq.last_used = time.monotonic()
        else:
            self._seqs[producer] = _Seq(sequence_id, -1, 0, -1, time.monotonic())
        return Verdict.NEW, None

    def persisted(self, producer: str, sequence_id: int, message_id: MessageId) -> None:
        """Kafka acknowledged a NEW send."""
        seq = self._seqs.get(producer)
        if seq is None:
            return
        if sequence_id > seq.persisted:
            seq.persisted = sequence_id
            seq.partition = message_id.kafka_partition
            seq.offset = message_id.offset
        p = message_id.kafka_partition
        self._upto[p] = max(self._upto.get(p, 0), message_id.offset + 1)

    def last_persisted(self, producer: str) -> int:
        """The highest sequence id of ``producer`` Kafka holds (-1: none), what a producer
        that comes back under this name resumes after (Pulsar's ``lastSequenceId``)."""
        seq = self._seqs.get(producer)
        return -1 if seq is None else seq.persisted

    def failed(self, producer: str, sequence_id: int) -> None:
        """Kafka refused a NEW send: the sequence may be sent again."""
        seq = self._seqs.get(producer)
        if seq is not None and seq.pushed == sequence_id:
            seq.pushed = seq.persisted

    @staticmethod
    def headers(producer: str, sequence_id: int) -> list[Header]:
        """The reserved headers a deduplicated message is written with."""
        return origin_headers(producer, sequence_id)

    # -- durability (blocking: call in a thread) ----------------------------------------
    def load(self, transport: Transport) -> None:
        """Read the snapshot, then replay the records written after it."""
        parts = list(range(self.num_partitions))
        consumer = transport.consumer(group_id=dedup_group(self.kafka_topic))
        try:
            committed = consumer.committed(self.kafka_topic, parts)
            start = consumer.start_offsets(self.kafka_topic, parts)
            end = consumer.end_offsets(self.kafka_topic, parts)
            from_: dict[int, int] = {}
            for p in parts:
                found = committed.get(p)
                from_[p] = max(start.get(p, 0), found[0] if found else 0)
            first = committed.get(0)
            if first and first[1]:
                try:
                    snap = json.loads(first[1])
                    for name, (sequence, part, offset) in snap.items():
                        self._seqs[name] = _Seq(sequence, sequence, part, offset, 0.0)
                except (ValueError, TypeError):
                    logger.warning(
                        "%s: unreadable deduplication snapshot ignored", self.kafka_topic
                    )
            todo = {p: o for p, o in from_.items() if o < end.get(p, 0)}
            replayed = 0
            if todo:
                consumer.assign(self.kafka_topic, todo)
                deadline = time.monotonic() + 120.0
                while todo and time.monotonic() < deadline:
                    for m in consumer.consume(500, 0.2):
                        part_of, offset = m.partition(), m.offset()
                        if part_of is None or offset is None:
                            continue
                        p = part_of
                        replayed += 1
                        self._replay(p, offset, m.headers())
                        if offset + 1 >= end.get(p, 0):
                            todo.pop(p, None)
                    if todo:
                        pos = consumer.positions(self.kafka_topic, list(todo))
                        for p, o in pos.items():
                            if o >= end.get(p, 0):
                                todo.pop(p, None)
                if todo:
                    raise TimeoutError(
                        f"{self.kafka_topic}: deduplication replay did not reach the end"
                    )
            self._upto = dict(end)
            self._snapshot_upto = dict(from_)
            logger.info(
                "%s: deduplication state of %d producer(s) loaded (%d record(s) replayed)",
                self.kafka_topic,
                len(self._seqs),
                replayed,
            )
        finally:
            consumer.close()

    def _replay(self, partition: int, offset: int, headers: list[Header] | None) -> None:
        if not headers:
            return
        name = sequence = None
        for k, v in headers:
            if k == HEADER_PRODUCER:
                name = v.decode("utf-8", "replace")
            elif k == HEADER_SEQUENCE:
                try:
                    sequence = int(v)
                except ValueError:
                    return
        if name is None or sequence is None:
            return
        seq = self._seqs.get(name)
        if seq is None or sequence > seq.persisted:
            self._seqs[name] = _Seq(sequence, sequence, partition, offset, time.monotonic())

    def snapshot(self, transport: Transport) -> None:
        """Commit the state as the dedup group's offsets and metadata (partition 0)."""
        self.last_snapshot = time.monotonic()
        upto = dict(self._upto)
        if upto == self._snapshot_upto:
            return
        newest = sorted(self._seqs.items(), key=lambda kv: kv[1].last_used, reverse=True)
        snap: dict[str, list[int]] = {}
        text = "{}"
        for name, seq in newest:
            if seq.persisted < 0:
                continue
            snap[name] = [seq.persisted, seq.partition, seq.offset]
            candidate = json.dumps(snap, separators=(",", ":"))
            if len(candidate.encode("utf-8")) > _SNAPSHOT_MAX_BYTES:
                del snap[name]
                logger.warning(
                    "%s: deduplication snapshot full; %d producer(s) left out",
                    self.kafka_topic,
                    len(newest) - len(snap),
                )
                break
            text = candidate
        offsets = {
            p: (upto.get(p, self._snapshot_upto.get(p, 0)), text if p == 0 else "")
            for p in range(self.num_partitions)
        }
        consumer = transport.consumer(group_id=dedup_group(self.kafka_topic))
        try:
            consumer.commit(self.kafka_topic, offsets)
        finally:
            consumer.close()
        self._snapshot_upto = upto
