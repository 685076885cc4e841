"""A table reader whose consumer stops fetching while the log grows (as librdkafka's can
after a broker restart, librdkafka#5153), on the in-memory twin.

The tail's consumer is a twin consumer that can be made to return nothing for good. With the
stall watchdog the reader recreates its consumer at the applied positions, logs which
partition stalled where, and applies the waiting records; without it the reader stays READY
and behind. A reader that is slow but moves is never recreated.

No sleeps and no timing assertions: the watchdog's clock moves one step each time it is
read (the reader's loop drives it), and the tests wait on events with liveness bounds only.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Sequence

import pytest

from sync.errors import ConfigurationError
from sync.table import TableReader
from sync.transport import MemoryBroker, MemoryTransport, Message, TopicSpec
from sync.transport._memory_consumer import MemoryConsumer

TOPIC = "stall-test"
SPEC = TopicSpec(TOPIC, 2)
CHECK_S = 30.0
BOUND_S = 30.0  # liveness bound of every wait, never a speed target


class _Ticks:
    """A clock one ``step`` later at each reading."""

    def __init__(self, step: float) -> None:
        self._next = itertools.count(0.0, step)

    def __call__(self) -> float:
        return float(next(self._next))


class _Gate(MemoryConsumer):
    """A twin consumer that can be made to stop fetching (``stick``: every ``consume``
    returns nothing, the position stays) or to hand out ``limit`` records per poll."""

    def __init__(
        self, broker: MemoryBroker, read_committed: bool, group_id: str | None, limit: int | None
    ) -> None:
        super().__init__(broker, read_committed, group_id)
        self.limit = limit
        self.ends_asked = 0
        self.closed = False
        self._stuck = False
        self._stuck_polls = 0
        self._polled = threading.Condition()

    def stick(self) -> None:
        self._stuck = True

    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]:
        if self._stuck:
            with self._polled:
                self._stuck_polls += 1
                self._polled.notify_all()
            return []
        limit = max_messages if self.limit is None else min(max_messages, self.limit)
        return super().consume(limit, timeout_s)

    def wait_stuck_polls(self, count: int) -> None:
        """Block until ``consume`` returned nothing, stuck, ``count`` times in all."""
        with self._polled:
            assert self._polled.wait_for(lambda: self._stuck_polls >= count, BOUND_S)

    def end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        self.ends_asked += 1
        return super().end_offsets(topic, partitions)

    def close(self) -> None:
        self.closed = True
        super().close()


class _GatedTransport(MemoryTransport):
    """Every consumer it hands out is a :class:`_Gate` (with ``limit``), in ``gates`` in
    creation order: the reader's replay-and-tail consumer first, then its end-offsets probe."""

    def __init__(self, limit: int | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.gates: list[_Gate] = []

    def consumer(
        self,
        *,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
        group_id: str | None = None,
    ) -> _Gate:
        gate = _Gate(self.broker, read_committed, group_id, self.limit)
        self.gates.append(gate)
        return gate


class _Values(TableReader):
    """Every value read, in order."""

    def __init__(
        self, transport: _GatedTransport, stall_check_s: float | None, clock: _Ticks
    ) -> None:
        super().__init__(
            transport,
            SPEC,
            what=f"table {TOPIC}",
            dead_letter=False,
            tail_poll_s=0.01,
            stall_check_s=stall_check_s,
            clock=clock,
        )
        self.values: list[bytes | None] = []

    def _apply_replay(self, batch: Sequence[Message]) -> None:
        self.values.extend(m.value() for m in batch)

    def start(self) -> _Values:
        self._start_reader()
        return self


def _write(transport: MemoryTransport, values: Sequence[bytes], partition: int = 0) -> None:
    producer = transport.producer()
    for value in values:
        producer.produce(TOPIC, b"k" + value, value, partition=partition)
    producer.flush(10)


def _started(
    stall_check_s: float | None, step: float, limit: int | None = None
) -> tuple[_GatedTransport, _Values]:
    """A reader READY after replaying three records of partition 0 (partition 1 empty)."""
    transport = _GatedTransport(limit)
    transport.admin().ensure_topic(SPEC)
    _write(transport, [b"a", b"b", b"c"])
    reader = _Values(transport, stall_check_s, _Ticks(step)).start()
    reader.wait_ready(BOUND_S)
    assert reader.values == [b"a", b"b", b"c"]
    return transport, reader


def _stuck_with_records_waiting(transport: _GatedTransport) -> _Gate:
    """Stop the tail's consumer, then write two more records to partition 0."""
    tail = transport.gates[0]
    tail.stick()
    tail.wait_stuck_polls(1)  # no fetch of the healthy consumer is under way any more
    _write(transport, [b"d", b"e"])
    return tail


def test_a_consumer_that_stopped_fetching_is_recreated_and_the_records_applied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="sync.table._reader")
    transport, reader = _started(CHECK_S, step=CHECK_S / 2)
    try:
        stuck = _stuck_with_records_waiting(transport)
        reader.wait_for({0: 5, 1: 0}, BOUND_S)
        assert reader.values == [b"a", b"b", b"c", b"d", b"e"]
        assert reader.stalls == 1
        assert stuck.closed
        assert len(transport.gates) == 3  # tail, probe, and the tail's replacement
        # Only partition 0 had records waiting: partition 1 (no lag) was never stalled.
        warned = [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
        assert len(warned) == 1, warned
        assert warned[0].startswith(f"{TOPIC}[0]@3: no progress in 30s")
        assert "the end offset is 5" in warned[0]
    finally:
        reader.close()


def test_without_the_watchdog_the_stuck_reader_stays_behind() -> None:
    transport, reader = _started(None, step=CHECK_S / 2)
    try:
        stuck = _stuck_with_records_waiting(transport)
        stuck.wait_stuck_polls(100)  # the watchdog above recreates within a few polls
        assert reader.values == [b"a", b"b", b"c"]
        assert reader.positions() == {0: 3, 1: 0}
        assert reader.lag() == 2
        assert reader.stalls == 0
        assert len(transport.gates) == 2
        assert not stuck.closed
    finally:
        reader.close()


def test_a_slow_reader_that_moves_is_never_recreated() -> None:
    # Each reading of the clock is a whole interval: a check after every poll, and each
    # poll hands out one record: slow, but moving at every check.
    transport, reader = _started(CHECK_S, step=CHECK_S, limit=1)
    try:
        tail, probe = transport.gates
        _write(transport, [f"v{i}".encode() for i in range(20)])
        reader.wait_for({0: 23, 1: 0}, BOUND_S)
        assert reader.stalls == 0
        assert len(transport.gates) == 2
        assert not tail.closed
        assert probe.ends_asked >= 20  # the watchdog did look, at least once per record
    finally:
        reader.close()


def test_a_check_interval_that_is_not_positive_is_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="stall_check_s"):
        _Values(_GatedTransport(), 0.0, _Ticks(1.0))
