"""One reader for every compacted table: replay to the end offsets captured at start,
READY, tail; positions, ``wait_for``/``sync``, lag; one lifecycle; one quarantine.

Lifecycle (checked in one place, :class:`sync._lifecycle.Lifecycle`)::

    NEW ──start()──▶ BOOTSTRAPPING ──caught up──▶ READY ──close()──▶ CLOSED
                         │  └──time limit / error──▶ FAILED ──close()──▶ CLOSED
                         └──close()──▶ CLOSED

Replay reads from the start (or from positions a subclass restores, e.g. a snapshot) up
to the end offsets captured when it began (read_committed: aborted transactions and
fenced zombies never show), applying records in batches; then the table is READY and
tails. One reader thread applies; it holds the apply lock while it applies a batch and
publishes its positions, so a copy of the table taken under that lock matches them.

While tailing, a stall watchdog (:mod:`._stall`, every ``stall_check_s``) replaces the
consumer when a partition with records waiting has not moved since the previous check:
librdkafka's can stop fetching after a broker restart without a word (librdkafka#5153).
The table stays READY meanwhile (no lifecycle move); :attr:`TableReader.stalls` counts it.

A subclass says what a batch does (:meth:`TableReader._apply_replay`, and
:meth:`TableReader._apply_tail` once READY) and may hook the start (``_restore``), the
end of replay (``_on_ready``), idle polls (``_on_idle``), the end of each tail batch
(``_after_batch``) and closing (``_on_close``). Records no reader can apply go to
:attr:`TableReader.quarantine` (the one :class:`~sync.table.Quarantine`); the rule for
what they do to their key (it becomes absent) is the subclass's apply, and for change
events it is :func:`sync.table.judge`.

Users: the policy cache (:mod:`sync.policy._policy_cache`) and the registry, ownership
and metadata tables (``TableView``).
"""

from __future__ import annotations

import abc
import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from sync._errors import (
    BootstrapTimeout,
    CacheStateError,
    ConfigurationError,
    PolicySyncError,
    TransportError,
)
from sync._lifecycle import Lifecycle
from sync.transport import Consumer, Message, TopicSpec, Transport

from ._quarantine import Quarantine
from ._stall import StallWatch

logger = logging.getLogger(__name__)

__all__ = ["TABLE_MOVES", "TableReader", "TableState"]


class TableState(enum.Enum):
    """Where a table (or the policy cache) is in its life."""

    NEW = "NEW"
    BOOTSTRAPPING = "BOOTSTRAPPING"
    READY = "READY"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


TABLE_MOVES: Mapping[TableState, frozenset[TableState]] = {
    TableState.NEW: frozenset({TableState.BOOTSTRAPPING, TableState.CLOSED}),
    TableState.BOOTSTRAPPING: frozenset({TableState.READY, TableState.FAILED, TableState.CLOSED}),
    TableState.READY: frozenset({TableState.FAILED, TableState.CLOSED}),
    TableState.FAILED: frozenset({TableState.CLOSED}),
    TableState.CLOSED: frozenset(),
}


class TableReader(abc.ABC):
    """The replay/tail machinery of one compacted topic (subclass it; see the module)."""

    def __init__(
        self,
        transport: Transport,
        spec: TopicSpec,
        *,
        what: str,
        create_topic: bool = True,
        bootstrap_timeout_s: float = 120.0,
        replay_batch: int = 10_000,
        tail_batch: int = 10_000,
        tail_poll_s: float = 0.05,
        fetch_wait_max_ms: int = 100,
        dead_letter: bool = True,
        thread_name: str = "table-reader",
        stall_check_s: float | None = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``stall_check_s``: how often the tail's stall watchdog checks (None: never, see
        :mod:`._stall`); ``clock``: its clock (tests pass their own).

        Raises:
            ConfigurationError: ``stall_check_s`` is not positive.
        """
        if stall_check_s is not None and stall_check_s <= 0:
            raise ConfigurationError(f"{what}: stall_check_s must be > 0 s or None (never)")
        self.spec = spec
        self.what = what
        self._transport = transport
        self._create_topic = create_topic
        self._bootstrap_timeout_s = bootstrap_timeout_s
        self._replay_batch = replay_batch
        self._tail_batch = tail_batch
        self._tail_poll_s = tail_poll_s
        self._fetch_wait_max_ms = fetch_wait_max_ms
        self._thread_name = thread_name
        self._stall_check_s = stall_check_s
        self._clock = clock
        self._life = Lifecycle(
            what,
            TableState.NEW,
            TABLE_MOVES,
            terminal=TableState.CLOSED,
            error=CacheStateError,
            log=logger,
        )
        self._failure: BaseException | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._progress = threading.Condition()
        #: Held by the reader while it applies a batch and publishes its positions.
        self._apply_lock = threading.Lock()
        self._applied: dict[int, int] = {}
        self._partitions: list[int] = []
        self._topic_id = ""
        self._topic_config: Mapping[str, str] = {}
        self._probe: Consumer | None = None
        self._hw_probe: Consumer | None = None
        #: The reader thread's consumer (replaced when the stall watchdog recreates it).
        self._consumer: Consumer | None = None
        self._reader: threading.Thread | None = None
        self.quarantine = Quarantine(
            transport,
            spec.name,
            dead_letter=dead_letter,
            replication_factor=spec.replication_factor,
        )
        self.bootstrap_seconds: float | None = None
        self.bootstrap_records = 0
        #: Times the stall watchdog recreated the tail's consumer.
        self.stalls = 0

    # -- hooks -------------------------------------------------------------------------
    def _restore(self, starts: Mapping[int, int]) -> dict[int, int]:
        """Positions to resume from (default: none, replay from the start)."""
        del starts
        return {}

    @abc.abstractmethod
    def _apply_replay(self, batch: Sequence[Message]) -> None:
        """Apply a batch of replayed records (under the apply lock): each table's own."""

    def _apply_tail(self, batch: Sequence[Message]) -> None:
        """Apply a batch of records read after READY (under the apply lock)."""
        self._apply_replay(batch)

    def _on_ready(self) -> None:  # noqa: B027 - an optional hook
        """Replay reached the end offsets (reader thread, before READY is announced)."""

    def _on_idle(self) -> None:  # noqa: B027 - an optional hook
        """A tail poll returned nothing (under the apply lock)."""

    def _after_batch(self) -> None:  # noqa: B027 - an optional hook
        """After each tail poll (reader thread, outside the apply lock)."""

    def _on_close(self, was_ready: bool) -> None:
        """The reader stopped; release what the subclass holds."""
        del was_ready

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def state(self) -> TableState:
        """The current lifecycle state."""
        return self._life.state

    @property
    def failure(self) -> BaseException | None:
        """Why the table FAILED, if it did."""
        return self._failure

    def _transition(self, new: TableState) -> bool:
        return self._life.move(new)

    def _start_reader(self) -> None:
        self._transition(TableState.BOOTSTRAPPING)
        self._reader = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._reader.start()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until READY.

        Raises:
            BootstrapTimeout: not READY in time.
            CacheStateError: the table failed or was closed.
        """
        limit = self._bootstrap_timeout_s + 5.0 if timeout_s is None else timeout_s
        if not self._ready.wait(limit):
            raise BootstrapTimeout(
                f"{self.what} not ready after {limit:.1f}s (state {self.state.value}); "
                "check that Kafka is reachable and the reader's log"
            )
        if self.state is not TableState.READY:
            raise CacheStateError(
                f"{self.what} is {self.state.value}"
                + (f": {self._failure}" if self._failure else "")
            ) from self._failure

    def close(self) -> None:
        """Stop reading and release Kafka clients (idempotent)."""
        was_ready = self.state is TableState.READY
        if not self._transition(TableState.CLOSED):
            return
        self._stop.set()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=30)
        self._on_close(was_ready)
        self.quarantine.close()
        for client in (self._probe, self._hw_probe):
            if client is not None:
                try:
                    client.close()
                except PolicySyncError:
                    logger.warning("closing a Kafka client failed", exc_info=True)
        self._ready.set()
        with self._progress:
            self._progress.notify_all()

    def _run(self) -> None:
        try:
            self._consumer = self._bootstrap()
            if self._consumer is None or not self._transition(TableState.READY):
                return
            self._ready.set()
            self._tail()
        except BaseException as exc:
            self._failure = exc
            if self.state is not TableState.CLOSED:
                logger.error("%s failed: %s", self.what, exc)
                self._transition(TableState.FAILED)
            self._ready.set()
            with self._progress:
                self._progress.notify_all()
        finally:
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:
                    logger.debug("consumer close failed", exc_info=True)

    # -- replay ------------------------------------------------------------------------
    def _bootstrap(self) -> Consumer | None:
        started = time.monotonic()
        topic = self.spec.name
        admin = self._transport.admin()
        if self._create_topic:
            desc = admin.ensure_topic(self.spec)
        else:
            found = admin.describe_topic(topic)
            if found is None:
                raise TransportError(f"topic {topic!r} does not exist (create_topic is off)")
            desc = found
        self._partitions = list(range(desc.partitions))
        self._topic_id = desc.topic_id
        self._topic_config = dict(desc.config)
        # Offsets are asked on the replay consumer itself, before assign() and at explicit
        # positions: a cold client, OFFSET_BEGINNING, or offset queries after assign()
        # each delayed the first fetch by hundreds of milliseconds.
        consumer = self._transport.consumer(
            read_committed=True, fetch_wait_max_ms=self._fetch_wait_max_ms
        )
        starts = consumer.start_offsets(topic, self._partitions)
        positions = self._restore(starts)
        ends = consumer.end_offsets(topic, self._partitions)
        applied = {p: positions.get(p, starts[p]) for p in self._partitions}
        consumer.assign(topic, applied)
        self._publish_positions(applied)
        pending = {p for p in self._partitions if applied[p] < ends[p]}
        logger.info("%s: replaying to end offsets %s from %s", self.what, ends, applied)
        deadline = started + self._bootstrap_timeout_s
        records = 0
        while pending:
            if self._stop.is_set():
                consumer.close()
                return None
            if time.monotonic() > deadline:
                lag = {p: ends[p] - applied[p] for p in pending}
                raise BootstrapTimeout(
                    f"replay of {topic} did not reach the end offsets within "
                    f"{self._bootstrap_timeout_s:.0f}s (remaining per partition: {lag}); "
                    "the broker may be down or a partition stuck. Raise the limit with "
                    "--bootstrap-timeout or investigate the partition"
                )
            batch = consumer.consume(self._replay_batch, 0.2)
            with self._apply_lock:
                if batch:
                    records += len(batch)
                    self._apply_replay(batch)
                for p, pos in consumer.positions(topic, sorted(pending)).items():
                    if pos > applied[p]:
                        applied[p] = pos
                pending = {p for p in pending if applied[p] < ends[p]}
                self._publish_positions(applied)
            self.quarantine.settle()  # this batch's poison copies, at once
        self.bootstrap_seconds = time.monotonic() - started
        self.bootstrap_records = records
        # For sync()/lag() from other threads while the reader consumes.
        self._probe = self._transport.consumer(read_committed=True)
        self._on_ready()
        logger.info(
            "%s: READY after %d records in %.3fs", self.what, records, self.bootstrap_seconds
        )
        return consumer

    # -- tailing -----------------------------------------------------------------------
    def _tail(self) -> None:
        topic = self.spec.name
        applied = dict(self._applied)
        check_s = self._stall_check_s
        watch = None if check_s is None else StallWatch(check_s, self._clock)
        while not self._stop.is_set():
            consumer = self._consumer
            assert consumer is not None  # noqa: S101 - set by _run before tailing
            batch = consumer.consume(self._tail_batch, self._tail_poll_s)
            with self._apply_lock:
                if batch:
                    self._apply_tail(batch)
                    for m in batch:
                        p, off = m.partition(), m.offset()
                        if p is not None and off is not None and off + 1 > applied.get(p, 0):
                            applied[p] = off + 1
                # Offsets have gaps (compaction, transaction markers): trust the position.
                for p, pos in consumer.positions(topic, self._partitions).items():
                    if pos > applied.get(p, 0):
                        applied[p] = pos
                self._publish_positions(applied)
                if not batch:
                    self._on_idle()
            self._after_batch()
            self.quarantine.settle()  # this batch's poison copies, at once
            if watch is not None and watch.due():
                self._watch_stalls(watch, applied)

    def _watch_stalls(self, watch: StallWatch, applied: Mapping[int, int]) -> None:
        """One stall check (reader thread): recreate the consumer, assigned at ``applied``,
        if a partition stalled (see :mod:`._stall`).

        The end offsets are asked on the probe (read_committed: the last stable offsets,
        what this reader can reach), never on the consumer that may be stuck. With Kafka
        unreachable that query fails (after up to ~15 s) and the check is skipped.
        """
        topic = self.spec.name
        probe = self._probe
        if probe is None:
            return
        try:
            ends = probe.end_offsets(topic, self._partitions)
        except PolicySyncError as exc:
            logger.info("%s: stall check skipped, end offsets unknown: %s", self.what, exc)
            watch.forget()
            return
        stalls = watch.check(applied, ends)
        if not stalls:
            return
        for s in stalls:
            logger.warning(
                "%s[%d]@%d: no progress in %.0fs although the end offset is %d; "
                "recreating the consumer (librdkafka#5153)",
                topic,
                s.partition,
                s.position,
                watch.interval_s,
                s.end,
            )
        stuck = self._consumer
        try:
            fresh = self._transport.consumer(
                read_committed=True, fetch_wait_max_ms=self._fetch_wait_max_ms
            )
        except Exception as exc:  # noqa: BLE001 - keep the old one; the next check tries again
            logger.warning("%s: recreating the consumer failed: %s", self.what, exc)
            return
        try:
            fresh.assign(topic, applied)
        except Exception as exc:  # noqa: BLE001 - keep the old one; the next check tries again
            logger.warning("%s: assigning the new consumer failed: %s", self.what, exc)
            _close_quietly(fresh)
            return
        self._consumer = fresh
        self.stalls += 1
        watch.forget()
        if stuck is not None:
            _close_quietly(stuck)

    def _publish_positions(self, applied: Mapping[int, int]) -> None:
        with self._progress:
            self._applied = dict(applied)
            self._progress.notify_all()

    # -- positions and read-your-writes ------------------------------------------------
    def positions(self) -> dict[int, int]:
        """Next offset to apply, per partition."""
        with self._progress:
            return dict(self._applied)

    def end_offsets(self) -> dict[int, int]:
        """The topic's current end offsets (last stable offsets: read_committed)."""
        probe = self._probe
        if probe is None:
            raise CacheStateError(f"{self.what} is {self.state.value}, not READY")
        return probe.end_offsets(self.spec.name, self._partitions)

    def reached(self, positions: Mapping[int, int]) -> bool:
        """True if every partition's applied position reaches ``positions`` (no wait)."""
        with self._progress:
            return self._reached(positions)

    def _reached(self, positions: Mapping[int, int]) -> bool:
        return all(self._applied.get(p, -1) >= o for p, o in positions.items())

    def wait_for(self, positions: Mapping[int, int], timeout_s: float) -> None:
        """Block until every partition's applied position reaches ``positions``.

        Raises:
            BootstrapTimeout: not reached within ``timeout_s``.
            CacheStateError: the table failed or closed meanwhile.
        """
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while True:
                if self.state in (TableState.FAILED, TableState.CLOSED):
                    raise CacheStateError(f"{self.what} is {self.state.value}") from self._failure
                if self._reached(positions):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BootstrapTimeout(
                        f"{self.what} did not reach {dict(positions)} within {timeout_s:.1f}s "
                        f"(at {self._applied})"
                    )
                self._progress.wait(remaining)

    def sync_written(self, timeout_s: float = 30.0) -> None:
        """Wait until every record written so far has been applied, including those of
        transactions whose commit markers are still on their way.

        A producer's commit returns once the coordinator decided, before the markers
        reach the partitions: the last stable offset read right after a commit may not
        cover the records just committed yet. Their high watermark does, and a
        read-committed reader passes it only once the markers are written. For
        read-your-writes after one's own transactions.
        """
        self._check_ready()
        if self._hw_probe is None:
            self._hw_probe = self._transport.consumer(read_committed=False)
        ends = self._hw_probe.end_offsets(self.spec.name, self._partitions)
        self.wait_for(ends, timeout_s)

    def lag(self) -> int:
        """Records committed but not yet applied, summed over partitions."""
        if self._probe is None or self.state is not TableState.READY:
            return 0
        ends = self._probe.end_offsets(self.spec.name, self._partitions)
        applied = self.positions()
        return sum(max(0, e - applied.get(p, 0)) for p, e in ends.items())

    def _check_ready(self) -> None:
        if self.state is not TableState.READY:
            raise CacheStateError(
                f"{self.what} is {self.state.value}, not READY; wait_ready() first"
            )


def _close_quietly(consumer: Consumer) -> None:
    """Close a consumer being replaced; a failure to close it changes nothing here."""
    try:
        consumer.close()
    except Exception:
        logger.debug("closing a replaced consumer failed", exc_info=True)
