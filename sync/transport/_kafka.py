"""The real transport: confluent-kafka (librdkafka) behind the seam's protocols."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar, cast

from confluent_kafka import (
    Consumer as _RdConsumer,
)
from confluent_kafka import (
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka import (
    Producer as _RdProducer,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic

from .._errors import (
    FatalClientError,
    GroupFencedError,
    ProducerFencedError,
    TopicConfigurationMismatch,
    TransportError,
)
from ._base import (
    BatchCallback,
    BatchReport,
    DeliveryCallback,
    DeliveryReport,
    GroupDescription,
    GroupMetadata,
    Header,
    KafkaConfig,
    Message,
    Record,
    TopicDescription,
    TopicSpec,
    config_differences,
)
from ._kafka_clients import client_id, created
from ._kafka_controller import ControllerGuard
from ._kafka_failures import (
    FENCED_CODES,
    GROUP_FENCED_CODES,
    has_code,
    kafka_error_of,
    timed_out,
    transient,
    waited_for_controller,
)
from ._kafka_group import KafkaGroupConsumer
from ._kafka_isolated import IsolatedAdmin

logger = logging.getLogger(__name__)
#: librdkafka's own log lines go through Python logging, not straight to stderr.
_RDKAFKA_LOG = logging.getLogger("sync.librdkafka")

__all__ = ["KafkaTransport"]

_T = TypeVar("_T")
#: Longest single attempt of a read-only controller call (a call that was already waiting
#: when its controller died is retried through the guard instead of waiting it out).
_CONTROLLER_READ_ATTEMPT_S = 10.0
#: Longest single attempt of a fan-out call (ListConsumerGroups): one that was already
#: waiting when a broker died spins until its attempt ends, then goes through the guard.
_FANOUT_ATTEMPT_S = 5.0


def _translate(exc: KafkaException, what: str) -> TransportError:
    err = kafka_error_of(exc)
    if err is None:
        return TransportError(f"{what} failed: {exc}")
    if err.code() in FENCED_CODES:
        return ProducerFencedError(f"{what}: fenced by a newer writer ({err.str()})")
    if err.fatal():
        # Any further call on this client fails (or, in librdkafka, may misbehave): the
        # owner must close it and create a new one, as for a fence.
        return FatalClientError(f"{what}: the Kafka client is in a fatal state ({err.str()})")
    if err.code() in GROUP_FENCED_CODES:
        return GroupFencedError(f"{what}: consumer-group generation is stale ({err.str()})")
    return TransportError(f"{what} failed: {exc}")


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
        linger_ms: int,
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
            "logger": _RDKAFKA_LOG,
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
                raise _translate(exc, f"produce to {topic}") from exc

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
                    error = _translate(exc, f"produce to {topic}")
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
        from ..routing import kafka_partition

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
            raise _translate(exc, "init_transactions") from exc

    def begin_transaction(self) -> None:
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise _translate(exc, "begin_transaction") from exc

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
            raise _translate(exc, f"send offsets of {topic} to the transaction") from exc

    def commit_transaction(self, timeout_s: float) -> None:
        try:
            self._producer.commit_transaction(timeout_s)
        except KafkaException as exc:
            raise _translate(exc, "commit_transaction") from exc

    def abort_transaction(self, timeout_s: float) -> None:
        try:
            self._producer.abort_transaction(timeout_s)
        except KafkaException as exc:
            raise _translate(exc, "abort_transaction") from exc

    def close(self) -> None:
        try:
            self._producer.flush(5.0)
        except KafkaException as exc:  # e.g. a fenced transactional producer
            raise _translate(exc, "close") from exc


class KafkaConsumer:
    """confluent-kafka consumer used with manual assignment only (never joins a group).

    With a ``group_id`` its commits go to that group (a "simple" consumer group: no
    members, no generations), which is how subscriptions keep their positions.
    """

    def __init__(
        self,
        config: KafkaConfig,
        read_committed: bool,
        fetch_wait_max_ms: int,
        group_id: str | None = None,
    ) -> None:
        name = client_id(config.client_id, "consumer")
        conf: dict[str, Any] = {
            "bootstrap.servers": config.bootstrap_servers,
            "client.id": name,
            # Required by librdkafka even for assign(); never joins since we never subscribe.
            "group.id": group_id if group_id is not None else f"{config.client_id}.unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "fetch.wait.max.ms": fetch_wait_max_ms,
            "auto.offset.reset": "earliest",
            # Bootstrap reads whole compacted logs; large fetches keep librdkafka ahead of Python.
            "fetch.max.bytes": 16 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "queued.max.messages.kbytes": 16384,  # per partition
            "logger": _RDKAFKA_LOG,
        }
        conf.update(config.extra)
        self._group_id = group_id
        self._consumer = created(name, lambda: _RdConsumer(conf))

    def assign(self, topic: str, offsets: Mapping[int, int]) -> None:
        self._consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])

    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]:
        """Wait up to ``timeout_s`` for the first record, then take what is already fetched.

        librdkafka's batch consume waits for the whole timeout unless the batch fills,
        which would add the timeout to every tailing read; poll() returns on arrival.
        """
        batch = self._consumer.consume(num_messages=max_messages, timeout=0)
        if not batch:
            first = self._consumer.poll(timeout_s)
            if first is None:
                return []
            batch = [first]
            if max_messages > 1:
                batch.extend(self._consumer.consume(num_messages=max_messages - 1, timeout=0))
        for msg in batch:
            if msg.error() is not None:
                return self._drop_errors(batch)
        return cast(Sequence[Message], batch)

    def _drop_errors(self, batch: list[Any]) -> list[Message]:
        kept: list[Message] = []
        for msg in batch:
            err = msg.error()
            if err is None:
                kept.append(msg)
            elif err.fatal():
                raise TransportError(f"consumer failed: {err.str()}")
            elif err.code() != KafkaError._PARTITION_EOF:  # noqa: SLF001 - public constant
                logger.warning(
                    "consume error on %s[%s]: %s", msg.topic(), msg.partition(), err.str()
                )
        return kept

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        tps = self._consumer.position([TopicPartition(topic, p) for p in partitions])
        return {tp.partition: tp.offset for tp in tps}

    def _watermarks(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for p in partitions:
            deadline = time.monotonic() + 15.0
            while True:
                try:
                    low, high = self._consumer.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=10, cached=False
                    )
                    break
                except KafkaException as exc:
                    if not transient(exc) or time.monotonic() > deadline:
                        raise _translate(exc, f"watermarks of {topic}[{p}]") from exc
                    # Leader moves (broker loss, new topic): refresh metadata, then retry.
                    logger.info("watermarks of %s[%d]: %s; retrying", topic, p, exc)
                    try:
                        self._consumer.list_topics(topic, timeout=5)
                    except KafkaException:
                        logger.debug("metadata refresh failed", exc_info=True)
                    time.sleep(0.2)
            out[p] = (int(low), int(high))
        return out

    def end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        # With isolation.level=read_committed librdkafka's ListOffsets returns the
        # last stable offset, which is what a read-committed reader can reach.
        return {p: hw for p, (_, hw) in self._watermarks(topic, partitions).items()}

    def start_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        return {p: lo for p, (lo, _) in self._watermarks(topic, partitions).items()}

    def pause(self, topic: str, partitions: Sequence[int]) -> None:
        if partitions:
            self._consumer.pause([TopicPartition(topic, p) for p in partitions])

    def resume(self, topic: str, partitions: Sequence[int]) -> None:
        if partitions:
            self._consumer.resume([TopicPartition(topic, p) for p in partitions])

    def _require_group(self, what: str) -> str:
        if self._group_id is None:
            raise TransportError(f"{what} needs a consumer created with a group_id")
        return self._group_id

    def committed(
        self, topic: str, partitions: Sequence[int], timeout_s: float = 10.0
    ) -> dict[int, tuple[int, str] | None]:
        group = self._require_group("committed()")
        try:
            tps = self._consumer.committed(
                [TopicPartition(topic, p) for p in partitions], timeout=timeout_s
            )
        except KafkaException as exc:
            raise _translate(exc, f"read committed offsets of group {group!r}") from exc
        out: dict[int, tuple[int, str] | None] = {}
        for tp in tps:
            if tp.error is not None:
                raise TransportError(
                    f"read committed offset of {topic}[{tp.partition}] for group {group!r} "
                    f"failed: {tp.error}"
                )
            out[tp.partition] = None if tp.offset < 0 else (tp.offset, tp.metadata or "")
        return out

    def commit(
        self, topic: str, offsets: Mapping[int, tuple[int, str]], timeout_s: float = 10.0
    ) -> None:
        group = self._require_group("commit()")
        if not offsets:
            return
        tps = [
            TopicPartition(topic, p, offset, metadata=metadata)
            for p, (offset, metadata) in offsets.items()
        ]
        try:
            result = self._consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            raise _translate(exc, f"commit offsets of group {group!r} on {topic}") from exc
        for tp in result or ():
            if tp.error is not None:
                raise TransportError(
                    f"commit of {topic}[{tp.partition}]@{tp.offset} for group {group!r} "
                    f"failed: {tp.error}"
                )

    def close(self) -> None:
        self._consumer.close()


class KafkaAdmin:
    """Topic administration through confluent-kafka's AdminClient."""

    def __init__(self, config: KafkaConfig) -> None:
        name = client_id(config.client_id, "admin")
        conf: dict[str, Any] = {
            "bootstrap.servers": config.bootstrap_servers,
            "client.id": name,
            # The controller guard asks Metadata about topics that may not exist yet.
            "allow.auto.create.topics": False,
            "logger": _RDKAFKA_LOG,
        }
        conf.update(config.extra)
        self._admin = created(name, lambda: AdminClient(conf))
        self._config = config
        #: Controller-routed calls first check their controller is reachable (see module).
        self._controller = ControllerGuard(self._admin)
        #: Coordinator-routed calls go through a worker process (see _kafka_isolated).
        self._isolated: IsolatedAdmin | None = None

    def _via_controller(
        self,
        what: str,
        topic: str | None,
        timeout_s: float,
        call: Callable[[float], _T],
        *,
        read_only: bool,
    ) -> _T:
        """Run one controller-routed call (``call(request_timeout_s)``) only while the
        controller librdkafka will wait for is reachable (see ``_kafka_controller``).

        A read-only call that still timed out waiting for the controller (it died
        meanwhile) is retried through the guard within ``timeout_s``; a write is not
        retried here (its caller decides). KafkaException propagates to the caller.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            with self._controller.reachable(topic, deadline, what):
                remaining = max(0.1, deadline - time.monotonic())
                attempt = min(remaining, _CONTROLLER_READ_ATTEMPT_S) if read_only else remaining
                try:
                    return call(attempt)
                except KafkaException as exc:
                    if not (read_only and waited_for_controller(exc)):
                        raise
                    if time.monotonic() >= deadline:
                        raise

    def _metadata(self, topic: str | None, timeout_s: float) -> Any:
        # Under the guard's lock: the response names a (random) controller for librdkafka.
        with self._controller.lock:
            return self._admin.list_topics(topic, timeout=timeout_s)

    def describe_topic(self, topic: str, timeout_s: float = 30.0) -> TopicDescription | None:
        try:
            desc = self._via_controller(
                f"describe topic {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.describe_topics(TopicCollection([topic]), request_timeout=t)[
                    topic
                ].result(),
                read_only=True,
            )
        except KafkaException as exc:
            if has_code(exc, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return None
            raise _translate(exc, f"describe topic {topic}") from exc
        try:
            entries = self._describe_configs(topic, timeout_s)
        except KafkaException as exc:
            if has_code(exc, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return None  # deleted between the two requests
            raise _translate(exc, f"describe configs of {topic}") from exc
        config = {name: str(entry.value) for name, entry in entries.items()}
        return TopicDescription(
            name=topic,
            partitions=len(desc.partitions),
            config=config,
            topic_id=str(desc.topic_id),
            replication_factor=len(desc.partitions[0].replicas) if desc.partitions else -1,
        )

    def _describe_configs(self, topic: str, timeout_s: float) -> dict[str, Any]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        return cast(
            dict[str, Any],
            self._via_controller(
                f"describe configs of {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.describe_configs([resource], request_timeout=t)[
                    resource
                ].result(),
                read_only=True,
            ),
        )

    def ensure_topic(self, spec: TopicSpec, timeout_s: float = 30.0) -> TopicDescription:
        existing = self.describe_topic(spec.name, timeout_s)
        if existing is None:
            new = NewTopic(
                spec.name,
                num_partitions=spec.partitions,
                replication_factor=spec.replication_factor,
                config=dict(spec.config),
            )
            try:
                self._via_controller(
                    f"create topic {spec.name}",
                    spec.name,
                    timeout_s,
                    lambda t: self._admin.create_topics([new], request_timeout=t)[
                        spec.name
                    ].result(),
                    read_only=False,
                )
                logger.info("created topic %s with %d partitions", spec.name, spec.partitions)
            except KafkaException as exc:
                if not has_code(exc, KafkaError.TOPIC_ALREADY_EXISTS):
                    raise _translate(exc, f"create topic {spec.name}") from exc
            existing = self._wait_described(spec.name, timeout_s)
        diff = config_differences(spec, existing.partitions, existing.config)
        if diff:
            raise TopicConfigurationMismatch(spec.name, diff)
        return existing

    def _wait_described(self, topic: str, timeout_s: float) -> TopicDescription:
        """Wait until a new topic is visible and every partition has a leader."""
        deadline = time.monotonic() + timeout_s
        while True:
            desc = self.describe_topic(topic, timeout_s)
            if desc is not None and self._leaders_ready(topic):
                return desc
            if time.monotonic() > deadline:
                raise TransportError(f"topic {topic!r} was created but never became available")
            time.sleep(0.05)

    def _leaders_ready(self, topic: str) -> bool:
        meta = self._metadata(topic, 5)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            return False
        return all(pm.leader >= 0 and pm.error is None for pm in tmeta.partitions.values())

    def delete_topic(self, topic: str, timeout_s: float = 30.0) -> None:
        try:
            self._via_controller(
                f"delete topic {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.delete_topics([topic], request_timeout=t)[topic].result(),
                read_only=False,
            )
        except KafkaException as exc:
            raise _translate(exc, f"delete topic {topic}") from exc

    def _coordinator_calls(self) -> IsolatedAdmin:
        if self._isolated is None:
            self._isolated = IsolatedAdmin(self._config)
        return self._isolated

    def grow_topic(self, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
        new = NewPartitions(topic, partitions)
        try:
            self._via_controller(
                f"grow topic {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.create_partitions([new], request_timeout=t)[topic].result(),
                read_only=False,
            )
        except KafkaException as exc:
            raise _translate(exc, f"grow topic {topic} to {partitions} partitions") from exc
        deadline = time.monotonic() + timeout_s
        while True:
            desc = self.describe_topic(topic, timeout_s)
            if desc is not None and desc.partitions >= partitions and self._leaders_ready(topic):
                return
            if time.monotonic() > deadline:
                raise TransportError(f"topic {topic!r} did not reach {partitions} partitions")
            time.sleep(0.05)

    def warm_up(self) -> None:
        """Start the worker process of group calls now (see :class:`IsolatedAdmin`)."""
        self._coordinator_calls().start()

    def describe_group(self, group_id: str, timeout_s: float = 10.0) -> GroupDescription:
        # Never in this process: librdkafka aborts it if the coordinator dies meanwhile.
        return self._coordinator_calls().describe_group(group_id, timeout_s)

    def list_groups(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        """Every consumer group whose id starts with ``prefix``.

        ListConsumerGroups asks every broker and waits for each one to be up, busy-waiting
        inside librdkafka while one is dead (issue 11, chaos run 5): it starts only while
        every broker the metadata names is reachable (``ControllerGuard.every_broker``),
        in attempts of at most ``_FANOUT_ATTEMPT_S``. A listing that missed a broker is an
        error, never a shorter list (a caller could take a group for gone).
        """
        what = "list consumer groups"
        deadline = time.monotonic() + timeout_s
        while True:
            with self._controller.every_broker(deadline, what):
                attempt = min(max(0.1, deadline - time.monotonic()), _FANOUT_ATTEMPT_S)
                try:
                    listing = self._admin.list_consumer_groups(request_timeout=attempt).result()
                except KafkaException as exc:
                    if timed_out(exc) and time.monotonic() < deadline:
                        continue
                    raise _translate(exc, what) from exc
            errors = list(listing.errors or ())
            if not errors:
                return sorted(g.group_id for g in listing.valid if g.group_id.startswith(prefix))
            if time.monotonic() >= deadline or not all(map(timed_out, errors)):
                raise TransportError(
                    f"{what}: {len(errors)} broker(s) did not answer ({errors[0]}); "
                    "the listing would be incomplete"
                )

    def delete_group(self, group: str, timeout_s: float = 30.0) -> None:
        self._coordinator_calls().delete_group(group, timeout_s)

    def close(self) -> None:
        """Stop the coordinator-call worker, if one was started."""
        if self._isolated is not None:
            self._isolated.close()
            self._isolated = None

    def list_topics(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        try:
            meta = self._metadata(None, timeout_s)
        except KafkaException as exc:
            raise _translate(exc, "list topics") from exc
        return sorted(t for t in meta.topics if t.startswith(prefix))

    def topic_overrides(self, topic: str, timeout_s: float = 30.0) -> dict[str, str] | None:
        try:
            entries = self._describe_configs(topic, timeout_s)
        except KafkaException as exc:
            if has_code(exc, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return None
            raise _translate(exc, f"describe configs of {topic}") from exc
        dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        return {
            name: str(entry.value)
            for name, entry in entries.items()
            if entry.source == dynamic and entry.value is not None
        }

    def alter_topic_config(
        self,
        topic: str,
        set_: Mapping[str, str],
        delete: Collection[str] = (),
        timeout_s: float = 30.0,
    ) -> None:
        if not set_ and not delete:
            return
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_.items()
        ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        try:
            self._via_controller(
                f"alter configs of {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.incremental_alter_configs([resource], request_timeout=t)[
                    resource
                ].result(),
                read_only=False,
            )
        except KafkaException as exc:
            raise _translate(exc, f"alter configs of {topic}") from exc

    def list_offsets(
        self, topic: str, partitions: Sequence[int], at: int | str, timeout_s: float = 30.0
    ) -> dict[int, int]:
        if at == "earliest":
            spec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        elif at == "latest":
            spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        elif isinstance(at, int):
            spec = OffsetSpec.for_timestamp(at)
        else:
            raise ValueError(f"list_offsets: at must be earliest, latest or a timestamp: {at!r}")
        request = {TopicPartition(topic, p): spec for p in partitions}
        if not request:
            return {}
        try:
            futures = self._admin.list_offsets(request, request_timeout=timeout_s)
            found = {tp.partition: f.result().offset for tp, f in futures.items()}
        except KafkaException as exc:
            raise _translate(exc, f"list offsets of {topic}") from exc
        if isinstance(at, int) and any(o < 0 for o in found.values()):
            ends = self.list_offsets(topic, [p for p, o in found.items() if o < 0], "latest")
            found.update(ends)  # no record that recent: the end
        return found

    def group_offsets(self, group: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
        return {p: o for p, (o, _m) in self.group_positions(group, topic, timeout_s).items()}

    def group_positions(
        self, group: str, topic: str, timeout_s: float = 30.0
    ) -> dict[int, tuple[int, str]]:
        # ListConsumerGroupOffsets is coordinator-routed: never in this process
        # (librdkafka aborts it if the coordinator dies meanwhile; see _kafka_isolated).
        return self._coordinator_calls().group_positions(group, topic, timeout_s)

    def alter_group_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], timeout_s: float = 30.0
    ) -> None:
        self.alter_group_positions(group, topic, {p: (o, "") for p, o in offsets.items()})

    def alter_group_positions(
        self,
        group: str,
        topic: str,
        positions: Mapping[int, tuple[int, str]],
        timeout_s: float = 30.0,
    ) -> None:
        if not positions:
            return
        # AlterConsumerGroupOffsets is coordinator-routed too: in the worker process.
        self._coordinator_calls().alter_group_positions(group, topic, positions, timeout_s)


class KafkaTransport:
    """The production transport."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config

    @property
    def description(self) -> str:
        return f"kafka://{self.config.bootstrap_servers}"

    def producer(
        self,
        *,
        transactional_id: str | None = None,
        linger_ms: int = 0,
        transaction_timeout_ms: int | None = None,
    ) -> KafkaProducer:
        return KafkaProducer(self.config, transactional_id, linger_ms, transaction_timeout_ms)

    def group_consumer(
        self,
        group_id: str,
        *,
        client_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int | None = None,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
    ) -> KafkaGroupConsumer:
        return KafkaGroupConsumer(
            self.config,
            group_id,
            client_id=client_id,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            read_committed=read_committed,
            fetch_wait_max_ms=fetch_wait_max_ms,
        )

    def consumer(
        self,
        *,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
        group_id: str | None = None,
    ) -> KafkaConsumer:
        return KafkaConsumer(self.config, read_committed, fetch_wait_max_ms, group_id)

    def admin(self) -> KafkaAdmin:
        return KafkaAdmin(self.config)
