"""The quarantine's copies to the dead-letter topic: confirmed once per batch the reader
applies, never one round trip (or timeout) per record."""

from __future__ import annotations

from typing import Any

from sync.table import Quarantine
from sync.transport import MemoryTransport


class _CountingTransport(MemoryTransport):
    """The twin, counting the flushes of the producers it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def producer(self, **kwargs: Any) -> Any:
        inner = super().producer(**kwargs)
        outer = self

        class _Counting:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def flush(self, timeout_s: float) -> int:
                outer.flushes += 1
                return int(inner.flush(timeout_s))

        return _Counting()


def _dead_letters(transport: MemoryTransport, topic: str) -> int:
    consumer = transport.consumer()
    ends = consumer.end_offsets(topic, [0])
    consumer.close()
    return int(ends[0])


def test_copies_are_confirmed_once_per_batch_and_counted_when_confirmed() -> None:
    transport = _CountingTransport()
    q = Quarantine(transport, "ce")
    for i in range(100):
        q.record(b"k", b"bad%d" % i, "truncated", "cut", f"ce[0]@{i}")
    assert transport.flushes == 0  # no round trip per record
    assert q.total == 0  # counted once the copies are confirmed...
    q.settle()
    assert transport.flushes == 1 and q.total == 100  # ...by one flush for the batch
    q.settle()  # nothing new: no flush
    assert transport.flushes == 1
    assert q.copies == 100 and _dead_letters(transport, "ce.dlq") == 100
    # A reader that meets the same records again does not copy them again.
    again = Quarantine(transport, "ce")
    for i in range(100):
        again.record(b"k", b"bad%d" % i, "truncated", "cut", f"ce[0]@{i}")
    again.settle()
    assert again.copies == 0 and again.total == 100
    assert _dead_letters(transport, "ce.dlq") == 100


def test_an_unavailable_dead_letter_topic_is_not_waited_for_again() -> None:
    transport = _CountingTransport()
    q = Quarantine(transport, "ce")
    q.record(b"k", b"bad", "truncated", "cut", "ce[0]@0")
    left = [3]  # the flush leaves copies unconfirmed: the DLQ has no leader
    waits: list[float] = []

    def flush(timeout_s: float) -> int:
        waits.append(timeout_s)
        return left[0]

    q._producer.flush = flush  # type: ignore[union-attr, method-assign]  # noqa: SLF001
    q.settle(2.0)
    assert waits == [2.0] and q.total == 1  # counted anyway: the copy stays queued
    q.record(b"k", b"bad2", "truncated", "cut", "ce[0]@1")
    q.settle(2.0)
    assert waits == [2.0, 0.0]  # stalled: no second wait
    left[0] = 0
    q.settle(2.0)  # delivered meanwhile: back to waiting normally next time
    q.record(b"k", b"bad3", "truncated", "cut", "ce[0]@2")
    q.settle(2.0)
    assert waits == [2.0, 0.0, 0.0, 2.0] and q.total == 3
