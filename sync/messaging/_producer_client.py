"""One Kafka producer shared by many Pulsar producers, and whatever serves its delivery
reports (a daemon thread, or the owner's event loop through :meth:`ProducerClient.poll`)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

from sync._errors import (
    ConfigurationError,
)
from sync.transport import (
    Admin,
    BatchCallback,
    BatchReport,
    DeliveryReport,
    Header,
    Producer,
    Record,
    Transport,
)

logger = logging.getLogger(__name__)

__all__ = ["IDEMPOTENT_WINDOW", "ProducerClient"]

#: Records of one partition that librdkafka's idempotent producer keeps in flight before it
#: stops sending that partition's next request (``RD_KAFKA_IDEMP_MAX_INFLIGHT``; librdkafka
#: 2.16 counts it in *records*, ``rktp_msgs_inflight``). While it waits with a batch ready
#: to go, its broker thread polls with a zero timeout: it spins, 0.2-0.5 of a core on this
#: project's 2-core machine under pulsar-perf (docs/benchmarks.md). Holding the records
#: beyond it here and handing them over together when an answer comes keeps the same
#: requests on the wire without the spin.
IDEMPOTENT_WINDOW = 5

#: librdkafka's ``linger.ms`` for a client with ``hold_at`` and no linger of its own: the
#: records released together are queued one call at a time (microseconds apart), and with
#: a linger of 0 the broker thread would send the first ones alone, fill the window again
#: and spin for the rest; 0.2 ms gathers them into one request. Measured under pulsar-perf
#: (docs/benchmarks.md): the broker thread's CPU 0.14-0.43 -> 0.04 of a core.
RELEASE_GATHER_MS = 0.2

#: A record held by :class:`ProducerClient`: ``(key, value, headers, on_delivery)``.
_Held = tuple[bytes | None, bytes, "list[Header] | None", Callable[[DeliveryReport], None]]


class ProducerClient:
    """One Kafka producer plus whatever serves its delivery reports.

    Share one client among many :class:`PartitionedProducer` objects: librdkafka batches
    across them. ``linger_ms`` is the client-wide batching delay (Kafka ``linger.ms``).

    Delivery reports (and so send callbacks) are served either by a daemon thread of the
    client (``serve_reports=True``, the default: blocking :meth:`PartitionedProducer.send`
    just works) or by the owner, who calls :meth:`poll` while :attr:`in_flight` is
    non-zero (``serve_reports=False``). An asyncio owner should poll from its loop: every
    report then runs on the loop thread, with no hand-off between threads — a report
    thread takes the GIL once per message and contends with the loop for it, which costs
    more than the work the report does.

    ``hold_at`` (owner-served reports only): once that many records of one partition
    are queued and unanswered, :meth:`produce` holds that partition's next records here,
    in order, and queues them all at once when an answer brings the partition below it
    (see :data:`IDEMPOTENT_WINDOW`). Held records count in :attr:`in_flight`; a flush
    serves the answers that release them. :meth:`produce_many` is not held.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        linger_ms: int = 1,
        serve_reports: bool = True,
        hold_at: int | None = None,
    ) -> None:
        if linger_ms < 0:
            raise ConfigurationError(f"linger_ms must be >= 0, got {linger_ms}")
        if hold_at is not None and (hold_at < 1 or serve_reports):
            raise ConfigurationError("hold_at needs owner-served reports and must be >= 1")
        self.transport = transport
        gather = hold_at is not None and linger_ms == 0
        self._producer: Producer = transport.producer(
            linger_ms=RELEASE_GATHER_MS if gather else linger_ms
        )
        self._admin: Admin | None = None
        # Two counters, each with its own lock: producing threads never wait for the
        # thread serving reports (and without a report thread both are uncontended).
        self._sent_lock = threading.Lock()
        self._done_lock = threading.Lock()
        self._sent = 0
        self._done = 0
        self._wake = threading.Event()
        self._hold_at = hold_at
        #: Per (topic, partition): records queued and unanswered, and those held here.
        self._unanswered: dict[tuple[str, int], int] = {}
        self._held: dict[tuple[str, int], list[_Held]] = {}
        self._closed = False
        self._thread: threading.Thread | None = None
        if serve_reports:
            self._thread = threading.Thread(target=self._serve, name="producer-client", daemon=True)
            self._thread.start()

    def describe(self, kafka_topic: str) -> int | None:
        """Partition count of a Kafka topic, or ``None`` if it does not exist (blocking)."""
        if self._admin is None:
            self._admin = self.transport.admin()
        desc = self._admin.describe_topic(kafka_topic)
        return None if desc is None else desc.partitions

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        partition: int,
        headers: list[Header] | None,
        on_delivery: Callable[[DeliveryReport], None],
    ) -> None:
        """Queue one record; ``on_delivery`` runs where reports are served (see class)."""
        if self._closed:
            raise ConfigurationError("producer client is closed")
        if self._hold_at is not None:  # reports are served on this thread: no locks
            where = (topic, partition)
            held = self._held.get(where)
            if held is not None or self._unanswered.get(where, 0) >= self._hold_at:
                self._held.setdefault(where, []).append((key, value, headers, on_delivery))
                self._sent += 1
                return
            self._queue(topic, partition, key, value, headers, self._answered, where, on_delivery)
            self._sent += 1
            self._unanswered[where] = self._unanswered.get(where, 0) + 1
            return
        with self._sent_lock:
            self._sent += 1
        try:
            self._queue(topic, partition, key, value, headers, self._report, on_delivery)
        except BaseException:
            with self._sent_lock:
                self._sent -= 1
            raise
        if self._thread is not None and not self._wake.is_set():
            self._wake.set()  # Event.set() takes a lock: skip it when already set

    def _queue(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes,
        headers: list[Header] | None,
        report: Callable[..., None],
        *bound: object,
    ) -> None:
        """Hand one record to Kafka; its report goes to ``report(*bound, report)``."""
        self._producer.produce(
            topic,
            key,
            value,
            partition=partition,
            headers=headers,
            on_delivery=functools.partial(report, *bound),
        )

    def _answered(
        self,
        where: tuple[str, int],
        on_delivery: Callable[[DeliveryReport], None],
        report: DeliveryReport,
    ) -> None:
        self._done += 1
        left = self._unanswered[where] - 1
        if left:
            self._unanswered[where] = left
        else:
            del self._unanswered[where]
        assert self._hold_at is not None  # noqa: S101 - only reached with hold_at set
        if left < self._hold_at and where in self._held:
            self._release(where)
        on_delivery(report)

    def _release(self, where: tuple[str, int]) -> None:
        """Queue every held record of ``where``, in order (one request's worth for
        librdkafka). A record Kafka refuses to queue is answered with the error."""
        topic, partition = where
        held = self._held.pop(where)
        queued = 0
        for key, value, headers, on_delivery in held:
            try:
                self._queue(
                    topic, partition, key, value, headers, self._answered, where, on_delivery
                )
                queued += 1
            except Exception as exc:  # noqa: BLE001 - answered as the record's error
                logger.warning(
                    "queueing a held record for %s[%d] failed: %s", topic, partition, exc
                )
                self._done += 1
                on_delivery(DeliveryReport(topic, partition, -1, error=str(exc), key=key))
        if queued:
            self._unanswered[where] = self._unanswered.get(where, 0) + queued

    def produce_many(self, topic: str, records: list[Record], on_done: BatchCallback) -> None:
        """Queue ``records`` (each ``(partition, key, value, headers)``); ``on_done`` runs
        once, where reports are served (see class), when the last one is answered."""
        if self._closed:
            raise ConfigurationError("producer client is closed")
        count = len(records)
        with self._sent_lock:
            self._sent += count
        try:
            self._producer.produce_many(
                topic, records, functools.partial(self._batch_report, on_done, count)
            )
        except BaseException:
            with self._sent_lock:
                self._sent -= count
            raise
        if self._thread is not None and not self._wake.is_set():
            self._wake.set()

    def _batch_report(self, on_done: BatchCallback, count: int, report: BatchReport) -> None:
        with self._done_lock:
            self._done += count  # records never queued (a partial failure) count as done
        on_done(report)

    def _report(
        self, on_delivery: Callable[[DeliveryReport], None], report: DeliveryReport
    ) -> None:
        with self._done_lock:
            self._done += 1
        on_delivery(report)

    @property
    def in_flight(self) -> int:
        """Records queued whose delivery report has not been served yet."""
        return self._sent - self._done

    def poll(self, timeout_s: float = 0.0) -> int:
        """Serve the delivery reports that are ready (waiting up to ``timeout_s`` for one).

        For a client made with ``serve_reports=False``; callbacks run on the caller's
        thread. Returns the number of events served.
        """
        return self._producer.poll(timeout_s)

    def _serve(self) -> None:
        while not self._closed:
            if self.in_flight > 0:
                try:
                    self._producer.poll(0.05)
                except Exception:
                    logger.exception("serving delivery reports failed")
            else:
                self._wake.wait(0.1)
                self._wake.clear()

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait until every queued record is answered; returns how many are still queued.

        Reports served here run their callbacks on the caller's thread.
        """
        return self._producer.flush(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush, stop the report thread and close the Kafka producer."""
        if self._closed:
            return
        left = self._producer.flush(timeout_s)
        if left:
            logger.warning("closing producer client with %d undelivered record(s)", left)
        self._closed = True
        if self._thread is not None:
            self._wake.set()
            self._thread.join(timeout=2.0)
        self._producer.close()


# --------------------------------------------------------------------------- producer
