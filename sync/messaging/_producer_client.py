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

__all__ = ["ProducerClient"]


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
    """

    def __init__(
        self, transport: Transport, *, linger_ms: int = 1, serve_reports: bool = True
    ) -> None:
        if linger_ms < 0:
            raise ConfigurationError(f"linger_ms must be >= 0, got {linger_ms}")
        self.transport = transport
        self._producer: Producer = transport.producer(linger_ms=linger_ms)
        self._admin: Admin | None = None
        # Two counters, each with its own lock: producing threads never wait for the
        # thread serving reports (and without a report thread both are uncontended).
        self._sent_lock = threading.Lock()
        self._done_lock = threading.Lock()
        self._sent = 0
        self._done = 0
        self._wake = threading.Event()
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
        with self._sent_lock:
            self._sent += 1
        try:
            self._producer.produce(
                topic,
                key,
                value,
                partition=partition,
                headers=headers,
                on_delivery=functools.partial(self._report, on_delivery),
            )
        except BaseException:
            with self._sent_lock:
                self._sent -= 1
            raise
        if self._thread is not None and not self._wake.is_set():
            self._wake.set()  # Event.set() takes a lock: skip it when already set

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
