"""A compacted topic as a table in memory: the registry's and the ownership's local view.

The same discipline as the policy cache (:mod:`sync._cache`): replay from the start up to
the end offsets captured when replay began (read_committed, so aborted transactions and
fenced zombies never show), then READY, then tail. One reader thread mutates the table;
reads are plain dict lookups. ``sync()`` waits until everything committed before the call
is applied, which is how a writer "decides before it writes".

Lifecycle (checked in :meth:`TableView._transition`)::

    NEW ──start()──▶ BOOTSTRAPPING ──caught up──▶ READY ──close()──▶ CLOSED
                         └──error──▶ FAILED ──close()──▶ CLOSED
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from sync._errors import BootstrapTimeout, CacheStateError, CodecError, PolicySyncError
from sync.transport import OFFSET_BEGINNING, Consumer, Message, TopicSpec, Transport

logger = logging.getLogger(__name__)

__all__ = ["TableListener", "TableState", "TableView"]

V = TypeVar("V")
#: Called on the reader thread after a key changed: (key, old value, new value).
TableListener = Callable[[str, V | None, V | None], None]


class TableState(enum.Enum):
    """Where a table view is in its life."""

    NEW = "NEW"
    BOOTSTRAPPING = "BOOTSTRAPPING"
    READY = "READY"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


_ALLOWED: dict[TableState, frozenset[TableState]] = {
    TableState.NEW: frozenset({TableState.BOOTSTRAPPING, TableState.CLOSED}),
    TableState.BOOTSTRAPPING: frozenset({TableState.READY, TableState.FAILED, TableState.CLOSED}),
    TableState.READY: frozenset({TableState.FAILED, TableState.CLOSED}),
    TableState.FAILED: frozenset({TableState.CLOSED}),
    TableState.CLOSED: frozenset(),
}


class TableView(Generic[V]):
    """Last value per key of one compacted topic, decoded by ``decode(key, raw)``."""

    def __init__(
        self,
        transport: Transport,
        spec: TopicSpec,
        decode: Callable[[str, bytes], V],
        *,
        bootstrap_timeout_s: float = 120.0,
        poll_s: float = 0.05,
    ) -> None:
        self.spec = spec
        self._transport = transport
        self._decode = decode
        self._bootstrap_timeout_s = bootstrap_timeout_s
        self._poll_s = poll_s
        self._state = TableState.NEW
        self._state_lock = threading.Lock()
        self._failure: BaseException | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._rows: dict[str, V] = {}
        self._applied: dict[int, int] = {}
        self._partitions: list[int] = []
        self._listeners: list[TableListener[V]] = []
        self._probe: Consumer | None = None
        self._reader: threading.Thread | None = None
        self.poison = 0
        self.records = 0

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def state(self) -> TableState:
        """The current lifecycle state."""
        return self._state

    @property
    def failure(self) -> BaseException | None:
        """Why the view FAILED, if it did."""
        return self._failure

    def _transition(self, new: TableState) -> bool:
        with self._state_lock:
            if new not in _ALLOWED[self._state]:
                if self._state is TableState.CLOSED:
                    return False
                raise CacheStateError(
                    f"table {self.spec.name} cannot go from {self._state.value} to {new.value}"
                )
            logger.info("table %s: %s -> %s", self.spec.name, self._state.value, new.value)
            self._state = new
            return True

    def add_listener(self, listener: TableListener[V]) -> None:
        """Call ``listener`` for every later change (on the reader thread; keep it quick)."""
        self._listeners.append(listener)

    def start(self) -> TableView[V]:
        """Create the topic if needed and begin replay in a background thread."""
        self._transition(TableState.BOOTSTRAPPING)
        self._reader = threading.Thread(
            target=self._run, name=f"table-{self.spec.name}", daemon=True
        )
        self._reader.start()
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until READY.

        Raises:
            BootstrapTimeout: not READY in time.
            CacheStateError: the view failed or was closed.
        """
        limit = self._bootstrap_timeout_s + 5.0 if timeout_s is None else timeout_s
        if not self._ready.wait(limit):
            raise BootstrapTimeout(
                f"table {self.spec.name} not ready after {limit:.1f}s "
                f"(state {self._state.value}); check that Kafka is reachable"
            )
        if self._state is not TableState.READY:
            raise CacheStateError(
                f"table {self.spec.name} is {self._state.value}"
                + (f": {self._failure}" if self._failure else "")
            ) from self._failure

    def close(self) -> None:
        """Stop the reader and release Kafka clients."""
        if not self._transition(TableState.CLOSED):
            return
        self._stop.set()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=10)
        if self._probe is not None:
            try:
                self._probe.close()
            except PolicySyncError:
                logger.debug("closing the probe consumer failed", exc_info=True)
        self._ready.set()
        with self._progress:
            self._progress.notify_all()

    # -- reads -------------------------------------------------------------------------
    def get(self, key: str) -> V | None:
        """The current value of ``key`` (None if absent or deleted)."""
        return self._rows.get(key)

    def items(self) -> Iterator[tuple[str, V]]:
        """A snapshot of every (key, value)."""
        return iter(list(self._rows.items()))

    def keys_with_prefix(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``."""
        return [k for k in list(self._rows) if k.startswith(prefix)]

    def __len__(self) -> int:
        return len(self._rows)

    def positions(self) -> dict[int, int]:
        """Next offset to apply, per partition."""
        return dict(self._applied)

    # -- consistency -------------------------------------------------------------------
    def end_offsets(self) -> dict[int, int]:
        """The topic's current end offsets (last stable offsets: read_committed)."""
        probe = self._probe
        if probe is None:
            raise CacheStateError(f"table {self.spec.name} has not started")
        return probe.end_offsets(self.spec.name, self._partitions)

    def wait_for(self, offsets: Mapping[int, int], timeout_s: float) -> None:
        """Block until every partition has applied up to ``offsets`` (exclusive).

        Raises:
            BootstrapTimeout: not reached within ``timeout_s``.
            CacheStateError: the view failed or closed meanwhile.
        """
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while True:
                if self._state in (TableState.FAILED, TableState.CLOSED):
                    raise CacheStateError(
                        f"table {self.spec.name} is {self._state.value}"
                    ) from self._failure
                if all(self._applied.get(p, 0) >= off for p, off in offsets.items()):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BootstrapTimeout(
                        f"table {self.spec.name} did not reach {dict(offsets)} within "
                        f"{timeout_s:.1f}s (at {self._applied})"
                    )
                self._progress.wait(remaining)

    def sync(self, timeout_s: float) -> None:
        """Wait until everything committed before this call has been applied."""
        self.wait_ready(timeout_s)
        self.wait_for(self.end_offsets(), timeout_s)

    # -- the reader --------------------------------------------------------------------
    def _run(self) -> None:
        consumer: Consumer | None = None
        try:
            consumer = self._bootstrap()
            if consumer is None or not self._transition(TableState.READY):
                return
            self._ready.set()
            while not self._stop.is_set():
                batch = consumer.consume(2000, self._poll_s)
                if batch:
                    self._apply(batch)
                self._advance(consumer)
        except BaseException as exc:
            self._failure = exc
            if self._state is not TableState.CLOSED:
                logger.error("table %s failed: %s", self.spec.name, exc)
                self._transition(TableState.FAILED)
            self._ready.set()
            with self._progress:
                self._progress.notify_all()
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:
                    logger.debug("table consumer close failed", exc_info=True)

    def _bootstrap(self) -> Consumer | None:
        started = time.monotonic()
        desc = self._transport.admin().ensure_topic(self.spec)
        self._partitions = list(range(desc.partitions))
        self._probe = self._transport.consumer(read_committed=True)
        starts = self._probe.start_offsets(self.spec.name, self._partitions)
        # A fetch returns as soon as a record is committed; the wait only bounds how
        # often an idle reader asks again (10 ms cost the broker ~5% of a core each).
        consumer = self._transport.consumer(read_committed=True, fetch_wait_max_ms=100)
        consumer.assign(self.spec.name, {p: OFFSET_BEGINNING for p in self._partitions})
        ends = self._probe.end_offsets(self.spec.name, self._partitions)
        with self._progress:
            self._applied = {p: starts[p] for p in self._partitions}
        while any(self._applied[p] < ends[p] for p in self._partitions):
            if self._stop.is_set():
                consumer.close()
                return None
            if time.monotonic() - started > self._bootstrap_timeout_s:
                raise BootstrapTimeout(
                    f"replay of {self.spec.name} did not reach end offsets {ends} within "
                    f"{self._bootstrap_timeout_s:.0f}s (at {self._applied})"
                )
            batch = consumer.consume(5000, 0.2)
            if batch:
                self._apply(batch)
            self._advance(consumer)
        logger.info(
            "table %s: READY with %d keys after %d records in %.3fs",
            self.spec.name,
            len(self._rows),
            self.records,
            time.monotonic() - started,
        )
        return consumer

    def _advance(self, consumer: Consumer) -> None:
        # Offsets have gaps (compaction, transaction markers): trust the consumer position.
        moved = False
        for p, pos in consumer.positions(self.spec.name, self._partitions).items():
            if pos > self._applied.get(p, 0):
                self._applied[p] = pos
                moved = True
        if moved:
            with self._progress:
                self._progress.notify_all()

    def _apply(self, batch: Sequence[Message]) -> None:
        for msg in batch:
            raw_key = msg.key()
            partition, offset = msg.partition(), msg.offset()
            self.records += 1
            if raw_key is None:
                continue
            key = raw_key.decode("utf-8", "replace")
            raw = msg.value()
            old = self._rows.get(key)
            new: V | None
            if raw is None:
                new = None
                self._rows.pop(key, None)
            else:
                try:
                    new = self._decode(key, raw)
                except CodecError as exc:
                    self.poison += 1
                    logger.warning(
                        "skipping undecodable record %s[%s]@%s key %r: %s",
                        self.spec.name,
                        partition,
                        offset,
                        key,
                        exc,
                    )
                    continue
                self._rows[key] = new
            for listener in self._listeners:
                try:
                    listener(key, old, new)
                except Exception:
                    logger.exception("table %s listener failed for %r", self.spec.name, key)
            if partition is not None and offset is not None:
                self._applied[partition] = max(self._applied.get(partition, 0), offset + 1)
        with self._progress:
            self._progress.notify_all()
