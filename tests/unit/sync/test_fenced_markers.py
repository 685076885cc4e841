"""The fenced writer lets its previous transaction complete before the next one adds its
partitions (Kafka refuses AddPartitionsToTxn while commit markers are being written, and
librdkafka then retries only after a fixed 20 ms)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sync import FenceConfig, FencedWriter
from sync.errors import BootstrapTimeout
from sync.table._fenced_writer import MARKER_WAIT_S
from sync.transport import MemoryTransport, TopicSpec


class _Log:
    """A table that records every wait and can be told to stay behind."""

    def __init__(self) -> None:
        self.waits: list[tuple[dict[int, int], float]] = []
        self.behind = False

    def sync(self, timeout_s: float) -> None:
        pass

    def wait_for(self, positions: Mapping[int, int], timeout_s: float) -> None:
        self.waits.append((dict(positions), timeout_s))
        if self.behind:
            raise BootstrapTimeout(f"not at {dict(positions)} within {timeout_s}s")

    def positions(self) -> dict[int, int]:
        return {}


def _writer(log: _Log) -> FencedWriter[Any]:
    transport = MemoryTransport()
    transport.admin().ensure_topic(TopicSpec("table", 1))
    return FencedWriter(transport, log, FenceConfig("tid", "table"), lambda _key: None)


def _put(key: str, value: bytes) -> Any:
    def decide(draft: Any) -> None:
        draft.put(key, value, value)

    return decide


def test_each_transaction_waits_for_the_previous_ones_markers_at_most_the_backoff() -> None:
    log = _Log()
    writer = _writer(log)
    try:
        first = writer.submit(_put("a", b"1"))
        first.result(applied=False)
        assert log.waits == []  # nothing committed before: nothing to wait for
        second = writer.submit(_put("b", b"2"))
        second.result(applied=False)
        # Before appending the second, the table had to show the first (its markers).
        assert log.waits == [(first.positions, MARKER_WAIT_S)]
        assert first.positions and second.positions != first.positions
    finally:
        writer.close()


def test_a_table_that_stays_behind_delays_but_never_fails_a_write() -> None:
    log = _Log()
    log.behind = True
    writer = _writer(log)
    try:
        writer.submit(_put("a", b"1")).result(applied=False)
        ticket = writer.submit(_put("b", b"2"))
        ticket.result(applied=False)  # committed although the wait timed out
        assert len(log.waits) == 1 and ticket.reports
    finally:
        writer.close()


def test_writes_queued_during_that_wait_join_the_same_transaction() -> None:
    log = _Log()
    writer = _writer(log)
    late: list[Any] = []
    record = log.wait_for

    def wait_for(positions: Mapping[int, int], timeout_s: float) -> None:
        record(positions, timeout_s)
        if not late:  # another write arrives while the markers are awaited
            late.append(writer.submit(_put("c", b"3")))

    log.wait_for = wait_for  # type: ignore[method-assign]
    try:
        writer.submit(_put("a", b"1")).result(applied=False)
        before = writer.transactions
        second = writer.submit(_put("b", b"2"))
        second.result(applied=False)
        late[0].result(applied=False)
        assert writer.transactions == before + 1  # b and c: one transaction
        assert late[0].positions == second.positions
    finally:
        writer.close()
