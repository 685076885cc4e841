"""The real producer: confluent-kafka's ``Producer`` behind the seam's ``Producer``
protocol (plain, idempotent or transactional; one delivery callback per batch)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import (
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka import (
    Producer as _RdProducer,
)

from sync._errors import (
    TransportError,
)

from ._base import (
    BatchCallback,
    BatchReport,
    DeliveryCallback,
    DeliveryReport,
    GroupMetadata,
    Header,
    KafkaConfig,
    Record,
)
from ._kafka_clients import RDKAFKA_LOG, client_id, created
from ._kafka_failures import (
    translate,
)

logger = logging.getLogger(__name__)

__all__ = ["KafkaProducer"]


class _Batch:
    """The one delivery callback of every record of a :meth:`KafkaProducer.produce_many`
    call: counts the reports down and answers once (no object per record)."""

    __slots__ = (
        "count",
        "error",
        "error_partition",
        "offset",
        "on_done",
        "partition",
        "remaining",
        "topic",
    )

    def __init__(self, topic: str, count: int, on_done: BatchCallback) -> None:
        self.topic = topic
        self.count = count
        self.remaining = count
        self.on_done = on_done
        self.partition = -1
        self.offset = -1
        self.error: str | None = None
        self.error_partition = -1

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            partition = msg.partition()
            if self.partition < 0 or partition < self.partition:
                self.partition = partition
                self.offset = msg.offset()
            elif partition == self.partition:
                offset = msg.offset()
                if offset < self.offset:
                    self.offset = offset
        elif self.error is None:
            self.error = err.str()
            self.error_partition = msg.partition()
        self.remaining -= 1
        if self.remaining == 0:
            self.finish()

    def finish(self) -> None:
        """Answer ``on_done`` (once every record is answered)."""
        self.on_done(
            BatchReport(
                self.topic,
                self.count,
                self.partition,
                self.offset,
                self.error,
                self.error_partition,
            )
        )


class KafkaProducer:
    """confluent-kafka producer: idempotent, acks=all, Java-compatible key partitioning."""

    def __init__(
        self,
        config: KafkaConfig,
        transactional_id: str | None,
        linger_ms: float,
        transaction_timeout_ms: int | None = None,
    ) -> None:
        name = client_id(config.client_id, "producer" if transactional_id is None else "txn")
        conf: dict[str, Any] = {
            "bootstrap.servers": config.bootstrap_servers,
            "client.id": name,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            # Kafka's Java partitioner (murmur2); librdkafka's default is CRC32-based.
            "partitioner": "murmur2_random",
            # A record as large as Kafka's default max.message.bytes (1 048 588): a
            # payload of maxMessageSize (1 000 000 by default) plus its key and headers
            # (librdkafka's own default, 1 000 000, counted those against the payload).
            "message.max.bytes": 1_048_588,
            "logger": RDKAFKA_LOG,
        }
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf["transaction.timeout.ms"] = transaction_timeout_ms or 15000
        else:
            # No local message timeout (issue 11, duplicates without a redelivery count):
            # when a message times out locally while earlier requests to a stalled broker
            # are being retried, librdkafka 2.16 bumps the idempotent producer's epoch and
            # sends those retries under new sequence numbers, so the broker cannot
            # deduplicate them and records already written are written again
            # (tests/repro/producer_duplicates.py: 1,539 payloads stored twice in runs of
            # consecutive offsets; 0 with this setting). A record is now delivered or
            # still queued; callers bound their own waits (flush/send timeouts), like a
            # Pulsar client's sendTimeout. Transactional producers keep the default (it
            # must not exceed transaction.timeout.ms; a stalled transaction aborts).
            conf["message.timeout.ms"] = 0
        conf.update(config.extra)
        self._producer = created(name, lambda: _RdProducer(conf))
        self._partition_counts: dict[str, int] = {}

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
        kwargs: dict[str, Any] = {"key": key, "value": value}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        if on_delivery is not None:
            callback = on_delivery

            def _report(err: KafkaError | None, msg: Any) -> None:
                callback(
                    DeliveryReport(
                        topic=msg.topic(),
                        partition=msg.partition(),
                        offset=msg.offset(),
                        error=None if err is None else err.str(),
                        key=msg.key(),
                    )
                )

            kwargs["on_delivery"] = _report
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                # Local queue full: serve delivery reports to make room, then retry.
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise translate(exc, f"produce to {topic}") from exc

    def produce_many(self, topic: str, records: Sequence[Record], on_done: BatchCallback) -> None:
        if not records:
            raise ValueError("produce_many needs at least one record")
        batch = _Batch(topic, len(records), on_done)
        # confluent-kafka types headers as a list of (str, str | bytes | None): the same
        # tuples, read only (list invariance is all mypy objects to).
        produce: Any = self._producer.produce
        for index, (partition, key, value, headers) in enumerate(records):
            while True:
                try:
                    produce(topic, value, key, partition, batch, headers=headers)
                    break
                except BufferError:
                    # Local queue full: serve delivery reports to make room, then retry
                    # (this batch cannot complete here: its count is still above zero).
                    self._producer.poll(0.05)
                except KafkaException as exc:
                    error = translate(exc, f"produce to {topic}")
                    if index == 0:
                        raise error from exc
                    # The records before this one are queued and will be answered: the
                    # batch completes with this error once they are.
                    batch.count = index
                    batch.remaining -= len(records) - index
                    if batch.error is None:
                        batch.error, batch.error_partition = str(error), partition
                    if batch.remaining == 0:  # all answered during a BufferError poll
                        batch.finish()
                    return

    def poll(self, timeout_s: float = 0.0) -> int:
        return int(self._producer.poll(timeout_s))

    def flush(self, timeout_s: float) -> int:
        return int(self._producer.flush(timeout_s))

    def partition_for(self, topic: str, key: bytes) -> int:
        from sync.routing import kafka_partition

        count = self._partition_counts.get(topic)
        if count is None:
            meta = self._producer.list_topics(topic, timeout=10)
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                raise TransportError(f"cannot read partition count of {topic!r}")
            count = len(tmeta.partitions)
            self._partition_counts[topic] = count
        return kafka_partition(key, count)

    def init_transactions(self, timeout_s: float) -> None:
        try:
            self._producer.init_transactions(timeout_s)
        except KafkaException as exc:
            raise translate(exc, "init_transactions") from exc

    def begin_transaction(self) -> None:
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise translate(exc, "begin_transaction") from exc

    def send_offsets_to_transaction(
        self,
        topic: str,
        offsets: Mapping[int, int],
        group_metadata: GroupMetadata,
        timeout_s: float,
    ) -> None:
        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        try:
            self._producer.send_offsets_to_transaction(tps, group_metadata, timeout_s)
        except KafkaException as exc:
            raise translate(exc, f"send offsets of {topic} to the transaction") from exc

    def commit_transaction(self, timeout_s: float) -> None:
        try:
            self._producer.commit_transaction(timeout_s)
        except KafkaException as exc:
            raise translate(exc, "commit_transaction") from exc

    def abort_transaction(self, timeout_s: float) -> None:
        try:
            self._producer.abort_transaction(timeout_s)
        except KafkaException as exc:
            raise translate(exc, "abort_transaction") from exc

    def close(self) -> None:
        try:
            self._producer.flush(5.0)
        except KafkaException as exc:  # e.g. a fenced transactional producer
            raise translate(exc, "close") from exc
