"""A compacted topic as a table in memory: the registry's, metadata's and ownership's view.

A :class:`TableView` is the one compacted-table reader (:class:`sync.table.TableReader`:
replay to the end offsets captured at start, READY, tail, positions, ``wait_for``/``sync``,
one lifecycle, one quarantine) with JSON-ish values decoded by ``decode(key, raw)``. One
reader thread mutates the table; reads are plain dict lookups. ``sync()`` waits until
everything committed before the call is applied, which is how a writer "decides before it
writes".

A record whose value cannot be decoded makes its key ABSENT and is quarantined (counted,
copied once to ``<topic>.dlq``), exactly as in the policy cache: after compaction an
unreadable record may be the key's only record, and a fresh reader would hold nothing for
it either, so a long-running reader must not keep the old value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from sync.table import PoisonKind, TableReader, TableState
from sync.transport import Message, TopicSpec, Transport

logger = logging.getLogger(__name__)

__all__ = ["TableListener", "TableState", "TableView"]

V = TypeVar("V")
#: Called on the reader thread after a key changed: (key, old value, new value).
TableListener = Callable[[str, V | None, V | None], None]


class TableView(TableReader, Generic[V]):
    """Last value per key of one compacted topic, decoded by ``decode(key, raw)``."""

    def __init__(
        self,
        transport: Transport,
        spec: TopicSpec,
        decode: Callable[[str, bytes], V],
        *,
        bootstrap_timeout_s: float = 120.0,
        poll_s: float = 0.05,
        dead_letter: bool = True,
    ) -> None:
        super().__init__(
            transport,
            spec,
            what=f"table {spec.name}",
            bootstrap_timeout_s=bootstrap_timeout_s,
            replay_batch=5_000,
            tail_batch=2_000,
            tail_poll_s=poll_s,
            # A fetch returns as soon as a record is committed; the wait only bounds how
            # often an idle reader asks again (10 ms cost the broker ~5% of a core each).
            fetch_wait_max_ms=100,
            dead_letter=dead_letter,
            thread_name=f"table-{spec.name}",
        )
        self._decode = decode
        self._rows: dict[str, V] = {}
        self._listeners: list[TableListener[V]] = []
        self.records = 0

    @property
    def poison(self) -> int:
        """Records quarantined so far."""
        return self.quarantine.total

    def add_listener(self, listener: TableListener[V]) -> None:
        """Call ``listener`` for every later change (on the reader thread; keep it quick)."""
        self._listeners.append(listener)

    def start(self) -> TableView[V]:
        """Create the topic if needed and begin replay in a background thread."""
        self._start_reader()
        return self

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

    def sync(self, timeout_s: float) -> None:
        """Wait until everything committed before this call has been applied."""
        self.wait_ready(timeout_s)
        self.wait_for(self.end_offsets(), timeout_s)

    # -- applying (a hook of TableReader; the reader thread, under the apply lock) -------
    def _apply_replay(self, batch: Sequence[Message]) -> None:
        for msg in batch:
            self.records += 1
            raw_key = msg.key()
            raw = msg.value()
            source = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
            if raw_key is None:
                self.quarantine.record(None, raw, PoisonKind.NO_KEY.value, "no key", source)
                continue
            key = raw_key.decode("utf-8", "replace")
            old = self._rows.get(key)
            new: V | None = None
            if raw is None:
                self._rows.pop(key, None)
            else:
                try:
                    new = self._decode(key, raw)
                except Exception as exc:  # noqa: BLE001 - no record may stop the reader
                    # The rule of every table: an unreadable last record means no value.
                    self._rows.pop(key, None)
                    self.quarantine.record(
                        raw_key, raw, PoisonKind.UNDECODABLE.value, f"{key!r}: {exc}", source
                    )
                else:
                    self._rows[key] = new
            for listener in self._listeners:
                try:
                    listener(key, old, new)
                except Exception:
                    logger.exception("%s listener failed for %r", self.what, key)
