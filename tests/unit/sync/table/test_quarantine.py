"""The quarantine's copies to the dead-letter topic: confirmed at once live, once per batch
while a reader replays (a log full of poison must not cost a round trip per record)."""

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


def test_live_copies_are_confirmed_one_by_one_replay_copies_once_per_batch() -> None:
    transport = _CountingTransport()
    q = Quarantine(transport, "ce")
    q.record(b"k0", b"bad0", "truncated", "cut", "ce[0]@0")
    assert transport.flushes == 1 and q.total == 1  # live: confirmed before it counts
    q.deferred = True
    for i in range(1, 101):
        q.record(b"k", b"bad%d" % i, "truncated", "cut", f"ce[0]@{i}")
    assert transport.flushes == 1  # replaying: no round trip per record
    q.settle()
    assert transport.flushes == 2
    q.settle()  # nothing new: no flush
    assert transport.flushes == 2
    assert q.total == 101 and q.copies == 101
    assert _dead_letters(transport, "ce.dlq") == 101
    # A reader that meets the same records again does not copy them again.
    again = Quarantine(transport, "ce")
    again.deferred = True
    for i in range(101):
        again.record(b"k", b"bad0" if i == 0 else b"bad%d" % i, "truncated", "cut", f"ce[0]@{i}")
    again.settle()
    assert again.copies == 0 and _dead_letters(transport, "ce.dlq") == 101
