"""Pulsar-style producers for partitioned topics stored in Kafka.

A Pulsar topic ``<domain>://<tenant>/<ns>/<name>`` lives in ONE Kafka topic
(:func:`sync.naming._kafka_names.kafka_topic_of`); Pulsar partition ``N`` is Kafka partition ``N``
and a non-partitioned topic is a one-partition Kafka topic. A :class:`PartitionedProducer`
picks the partition of every message with the router a Pulsar Java producer would use
(:mod:`sync.routing`: routing mode, hashing scheme, batching time-slices), writes it with
an explicit partition (Kafka's own partitioner is never consulted) and reports a
:class:`MessageId` per message. It creates nothing: a missing topic is a
:class:`~sync._errors.TopicNotFoundError` (partitioned topics are created by the admin API).

How a message is stored (the wire contract other tools may read):

* Kafka key: the Pulsar message key, UTF-8 (none if the message has no key);
* Kafka value: the payload bytes;
* Kafka headers: each Pulsar property ``name=value`` as header ``name`` with the UTF-8
  value; the event time, if any, as ``__pulsar.eventTime`` (decimal epoch ms); other
  reserved headers a message carries (:attr:`OutboundMessage.headers`: the rest of a
  binary producer's metadata, see docs/messaging.md) as given. Property names starting
  with ``__pulsar.`` are reserved and refused;
* Kafka timestamp (CreateTime): the publish time.

Message ids are Pulsar's own format: base64 of a serialized ``MessageIdData`` protobuf
(``ledgerId = 0``, ``entryId = Kafka offset``, ``partition = Pulsar partition index`` or -1
for a non-partitioned topic), so a Pulsar client can parse one.

Threads: a :class:`ProducerClient` owns one Kafka producer and, by default, a daemon thread
that serves its delivery reports; send callbacks run on that thread (or inside
:meth:`~ProducerClient.flush`). An asyncio owner (the sidecar) makes it with
``serve_reports=False`` and calls :meth:`~ProducerClient.poll` from its loop instead, so
callbacks run on the loop. One client may be shared by many producers (the sidecar
shares one per process).

Example::

    with PartitionedProducer.open(transport, "persistent://t/ns/orders") as producer:
        message_id = producer.send(b"hello", key="customer-42")
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple

from sync._constants import (
    HEADER_SEQUENCE,
)
from sync._errors import (
    ConfigurationError,
    DeliveryError,
    MessageTooLargeError,
    PolicySyncError,
    TopicNotFoundError,
)
from sync.naming._kafka_names import kafka_topic_of
from sync.naming._names import TopicName, parse_topic_cached
from sync.routing import (
    HashingScheme,
    MessageRouter,
    MessageRoutingMode,
    RoundRobinPartitionRouter,
    RoutedMessage,
    SinglePartitionRouter,
    TopicMetadata,
    checked_choose,
    make_router,
)
from sync.transport import (
    BatchReport,
    DeliveryReport,
    Header,
    Record,
    Transport,
)

from ._message_id import MessageId
from ._producer_client import ProducerClient
from ._record_headers import decode_origin, decode_properties, encode_headers, origin_headers
from ._types import ProducerAccessMode

logger = logging.getLogger(__name__)

__all__ = [
    "DeliveryError",
    "MessageId",
    "MessageTooLargeError",
    "OutboundMessage",
    "PartitionedProducer",
    "ProducerClient",
    "ProducerConfig",
    "SendCallback",
    "TopicNotFoundError",
    "decode_origin",
    "decode_properties",
    "origin_headers",
    "encode_headers",
]

#: Called once per message: ``(message_id, None)`` on success, ``(None, error)`` otherwise.
SendCallback = Callable[["MessageId | None", "PolicySyncError | None"], None]


class OutboundMessage(NamedTuple):
    """One message to send in a batch (:meth:`PartitionedProducer.send_batch`); a tuple:
    a busy producer makes thousands per second."""

    payload: bytes
    key: str | None = None
    properties: Mapping[str, str] | None = None
    event_time_ms: int | None = None
    sequence_id: int | None = None
    #: Reserved (``__pulsar.``) headers of this message, written after the others as given.
    headers: list[Header] | None = None


_UNKEYED = RoutedMessage()


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """How a producer routes and batches (Pulsar ``ProducerConfigurationData`` subset).

    ``batching_enabled`` and ``batching_max_publish_delay_ms`` drive both the router
    (Pulsar's batching time-slices for unkeyed messages) and, for a producer that owns
    its client (:meth:`PartitionedProducer.open`), Kafka's ``linger.ms``.
    ``linger_ms`` is Kafka's ``linger.ms`` for the records of a producer that shares the
    engine's clients: ``None`` takes the engine's ``producer_linger_ms`` (sends that arrive
    one by one, e.g. WebSocket frames, are batched there); a front end whose sends arrive
    batched by their client already (Pulsar's binary SEND) passes 0, as the client lingered
    once already and a second wait only delays the batch's receipt.
    ``max_message_size`` (bytes, ``None``: no client-side check) refuses larger payloads
    before they reach Kafka. ``partitioned=None`` infers it from the Kafka partition
    count (more than one partition: partitioned), which decides whether message ids
    carry the partition index or -1.
    """

    routing_mode: MessageRoutingMode | str = MessageRoutingMode.RoundRobinPartition
    hashing_scheme: HashingScheme | str = HashingScheme.JavaStringHash
    batching_enabled: bool = True
    batching_max_publish_delay_ms: int = 1
    custom_router: MessageRouter | Callable[[RoutedMessage, TopicMetadata], int] | None = None
    max_message_size: int | None = None
    producer_name: str | None = None
    partitioned: bool | None = None
    send_timeout_s: float = 30.0
    linger_ms: int | None = None
    #: Pulsar's producer access mode, enforced per partition by the engine.
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    #: The topic epoch an exclusive producer held the topic under before it reconnected
    #: (Pulsar's ``CommandProducer.topic_epoch``; None: a new producer).
    topic_epoch: int | None = None

    def __post_init__(self) -> None:
        if self.linger_ms is not None and self.linger_ms < 0:
            raise ConfigurationError(f"linger_ms must be >= 0, got {self.linger_ms}")
        if self.batching_max_publish_delay_ms < 1:
            raise ConfigurationError(
                "batching_max_publish_delay_ms must be >= 1, "
                f"got {self.batching_max_publish_delay_ms}"
            )
        if self.max_message_size is not None and self.max_message_size < 1:
            raise ConfigurationError(f"max_message_size must be >= 1, got {self.max_message_size}")
        if self.send_timeout_s <= 0:
            raise ConfigurationError(f"send_timeout_s must be > 0, got {self.send_timeout_s}")
        self.build_router()  # validate mode, scheme and custom router now, not at first send

    def build_router(self) -> MessageRouter:
        """A fresh router for this configuration (routers carry per-producer state)."""
        mode = MessageRoutingMode(self.routing_mode) if self.routing_mode else None
        if mode is MessageRoutingMode.CustomPartition or self.custom_router is not None:
            return make_router(mode, self.hashing_scheme, custom=self.custom_router)
        if mode is MessageRoutingMode.SinglePartition:
            return make_router(mode, self.hashing_scheme)
        return make_router(
            mode,
            self.hashing_scheme,
            batching_enabled=self.batching_enabled,
            batching_max_publish_delay_ms=self.batching_max_publish_delay_ms,
        )


def _report_to(
    callback: SendCallback,
    pulsar_partition: int,
    topic: str,
    partition: int,
    report: DeliveryReport,
) -> None:
    """Turn one delivery report into ``callback(message_id, error)``."""
    if report.error is None:
        callback(MessageId(pulsar_partition, report.offset), None)
    else:
        callback(
            None,
            DeliveryError(
                f"Kafka did not store the message on {topic}[{partition}]: {report.error}",
                topic=topic,
                partition=partition,
                error=report.error,
            ),
        )


def _batch_to(callback: SendCallback, partitioned: bool, topic: str, report: BatchReport) -> None:
    """Turn one batch report into ``callback(lowest message_id, first error)``."""
    if report.error is None:
        partition = report.partition
        callback(MessageId(partition if partitioned else -1, report.offset), None)
    else:
        callback(
            None,
            DeliveryError(
                f"Kafka did not store the message on {topic}[{report.error_partition}]: "
                f"{report.error}",
                topic=topic,
                partition=report.error_partition,
                error=report.error,
            ),
        )


class PartitionedProducer:
    """Routes messages of one Pulsar topic to its Kafka partitions and reports message ids.

    Addressed to a partition (``…/x-partition-3``) it writes only there, as Pulsar's
    per-partition producer does; addressed to the base topic it routes every message.

    Raises (constructor):
        TopicNotFoundError: the Kafka topic does not exist, or has no such partition.
    """

    def __init__(
        self,
        client: ProducerClient,
        topic: TopicName | str,
        config: ProducerConfig | None = None,
        *,
        num_partitions: int | None = None,
        owns_client: bool = False,
    ) -> None:
        self.topic = parse_topic_cached(topic) if isinstance(topic, str) else topic
        self.config = config or ProducerConfig()
        self.kafka_topic = kafka_topic_of(self.topic)
        self._client = client
        self._owns_client = owns_client
        self._router = self.config.build_router()
        # Pulsar's built-in routers always answer in range; only a user router is checked.
        self._choose = (
            self._router.choose_partition
            if isinstance(self._router, RoundRobinPartitionRouter | SinglePartitionRouter)
            else functools.partial(checked_choose, self._router)
        )
        count = num_partitions if num_partitions is not None else client.describe(self.kafka_topic)
        if count is None:
            raise TopicNotFoundError(
                f"Topic {self.topic.base} does not exist (Kafka topic {self.kafka_topic!r}); "
                "create it with the admin API first",
                topic=str(self.topic),
            )
        self._set_partitions(count)
        self._closed = False

    @classmethod
    def open(
        cls, transport: Transport, topic: TopicName | str, config: ProducerConfig | None = None
    ) -> PartitionedProducer:
        """A producer with its own :class:`ProducerClient` (closed with the producer)."""
        config = config or ProducerConfig()
        linger = config.batching_max_publish_delay_ms if config.batching_enabled else 0
        client = ProducerClient(transport, linger_ms=linger)
        try:
            return cls(client, topic, config, owns_client=True)
        except BaseException:
            client.close()
            raise

    def _set_partitions(self, count: int) -> None:
        fixed = self.topic.partition_index
        if fixed >= count:
            raise TopicNotFoundError(
                f"Topic {self.topic} does not exist: {self.topic.base} has {count} partition(s)",
                topic=str(self.topic),
            )
        self.num_partitions = count
        self._metadata = TopicMetadata(count)
        self.partitioned = (
            self.config.partitioned if self.config.partitioned is not None else count > 1
        ) or fixed >= 0
        self._fixed = fixed

    def refresh_partitions(self) -> int:
        """Re-read the partition count (after partitions were added); returns it."""
        count = self._client.describe(self.kafka_topic)
        if count is None:
            raise TopicNotFoundError(f"Topic {self.topic.base} was deleted", topic=str(self.topic))
        self._set_partitions(count)
        return count

    def choose_partition(self, key: str | None) -> int:
        """The Kafka partition the next message with ``key`` goes to."""
        if self._fixed >= 0:
            return self._fixed
        if self.num_partitions == 1:
            return 0
        msg = _UNKEYED if key is None else RoutedMessage(key=key)
        return self._choose(msg, self._metadata)

    def send_callback(
        self,
        payload: bytes,
        callback: SendCallback,
        *,
        key: str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time_ms: int | None = None,
        max_message_size: int | None = None,
        reserved_headers: list[Header] | None = None,
    ) -> int:
        """Queue one message; ``callback(message_id, error)`` runs when Kafka answers.

        ``max_message_size`` overrides the configured limit for this message (the sidecar
        passes the topic's live ``maxMessageSize``). ``reserved_headers`` (``__pulsar.``
        names, e.g. the deduplication sequence) are added as given. Returns the chosen
        partition.

        Raises:
            MessageTooLargeError: the payload is over the limit (nothing was queued).
            InvalidInputError: a property is invalid.
            RoutingError: a custom router answered out of range.
        """
        if self._closed:
            raise ConfigurationError(f"producer on {self.topic} is closed")
        limit = max_message_size if max_message_size is not None else self.config.max_message_size
        if limit is not None and len(payload) > limit:
            raise MessageTooLargeError(
                f"Message size {len(payload)} is larger than the topic's maxMessageSize "
                f"{limit} ({self.topic})",
                topic=str(self.topic),
                size=len(payload),
                limit=limit,
            )
        partition = self.choose_partition(key)
        headers = (
            None
            if properties is None and event_time_ms is None
            else encode_headers(properties, event_time_ms)
        )
        if reserved_headers:
            headers = (headers or []) + reserved_headers
        topic = self.kafka_topic
        # A partial, not a closure: a message in flight holds 2 objects instead of 6, and
        # thousands in flight otherwise keep the garbage collector busy.
        on_delivery = functools.partial(
            _report_to, callback, partition if self.partitioned else -1, topic, partition
        )
        self._client.produce(
            topic,
            None if key is None else key.encode("utf-8", "surrogatepass"),
            payload,
            partition,
            headers,
            on_delivery,
        )
        return partition

    def send_batch(
        self,
        messages: list[OutboundMessage],
        callback: SendCallback,
        *,
        max_message_size: int | None = None,
        reserved_headers: list[Header] | None = None,
        origin: Header | None = None,
    ) -> int | list[int]:
        """Queue ``messages`` (at least one) in order; ``callback(message_id, error)`` runs
        ONCE, when Kafka has answered the last of them: the lowest message id stored, or
        the first error.

        Every message is checked (size, properties) and routed before the first one is
        queued, so a refusal writes nothing. The headers each message carries are those of
        :meth:`send_callback`: its properties and event time, then ``reserved_headers``
        (shared by all), then its own reserved ``headers``, then, with ``origin`` (the
        producer-name header), the pair ``origin, (HEADER_SEQUENCE, sequence_id)`` for
        messages with a sequence id.
        A producer writing to one partition routes once for the whole batch.

        Returns the partition every message went to, or one partition per message when
        the router spread them.

        Raises:
            MessageTooLargeError, InvalidInputError, RoutingError: nothing was queued.
        """
        if self._closed:
            raise ConfigurationError(f"producer on {self.topic} is closed")
        limit = max_message_size if max_message_size is not None else self.config.max_message_size
        if limit is not None:
            for message in messages:
                if len(message[0]) > limit:
                    raise MessageTooLargeError(
                        f"Message size {len(message[0])} is larger than the topic's "
                        f"maxMessageSize {limit} ({self.topic})",
                        topic=str(self.topic),
                        size=len(message[0]),
                        limit=limit,
                    )
        single = self._fixed if self._fixed >= 0 else 0 if self.num_partitions == 1 else -1
        shared = reserved_headers or []
        records: list[Record] = []
        append = records.append
        routed: list[int] = []
        for payload, key, properties, event_time_ms, sequence_id, extra in messages:
            if properties or event_time_ms is not None:
                headers = encode_headers(properties, event_time_ms) or []
                headers += shared
            else:
                headers = shared[:] if shared else []
            if extra:
                headers += extra
            if origin is not None and sequence_id is not None:
                headers.append(origin)
                headers.append((HEADER_SEQUENCE, b"%d" % sequence_id))
            if single >= 0:
                partition = single
            else:
                partition = self._choose(
                    _UNKEYED if key is None else RoutedMessage(key=key), self._metadata
                )
                routed.append(partition)
            append(
                (
                    partition,
                    None if key is None else key.encode("utf-8", "surrogatepass"),
                    payload,
                    headers or None,
                )
            )
        self._client.produce_many(
            self.kafka_topic,
            records,
            functools.partial(_batch_to, callback, self.partitioned, self.kafka_topic),
        )
        return single if single >= 0 else routed

    def send_async(
        self,
        payload: bytes,
        *,
        key: str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time_ms: int | None = None,
    ) -> concurrent.futures.Future[MessageId]:
        """Queue one message; the future resolves to its :class:`MessageId`.

        Wrap it with :func:`asyncio.wrap_future` in async code.
        """
        future: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def done(message_id: MessageId | None, error: PolicySyncError | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                assert message_id is not None  # noqa: S101 - one of the two is always set
                future.set_result(message_id)

        self.send_callback(
            payload, done, key=key, properties=properties, event_time_ms=event_time_ms
        )
        return future

    def send(
        self,
        payload: bytes,
        *,
        key: str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time_ms: int | None = None,
        timeout_s: float | None = None,
    ) -> MessageId:
        """Send one message and wait for Kafka's acknowledgement.

        Raises:
            DeliveryError: Kafka refused the message or did not answer in time.
        """
        future = self.send_async(
            payload, key=key, properties=properties, event_time_ms=event_time_ms
        )
        timeout = self.config.send_timeout_s if timeout_s is None else timeout_s
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            raise DeliveryError(
                f"no acknowledgement from Kafka for {self.topic} within {timeout:.1f}s",
                topic=self.kafka_topic,
            ) from exc

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for every queued message of the client; returns how many are still queued."""
        return self._client.flush(timeout_s)

    def close(self) -> None:
        """Refuse further sends; flush and close the client if this producer owns it.

        On a shared client, messages already queued still complete (their callbacks run);
        call :meth:`flush` first to wait for them.
        """
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> PartitionedProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PartitionedProducer({self.topic}, partitions={self.num_partitions}, "
            f"router={self._router!r})"
        )
