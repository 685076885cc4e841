"""Hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", 2014), packed in one long.

A stamp is ``(physical ms << 16) | logical counter``: ordered like ``(ms, counter)``, close to
wall-clock time, and strictly increasing per issuer even when the wall clock stalls or steps
back. An issuer that has *seen* a stamp (the merged winner of a key it is about to write)
issues a larger one, so a write made after seeing another always wins it (docs/geo-design.md
§3).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["LOGICAL_BITS", "HybridClock", "next_hlc", "pack_hlc", "unpack_hlc"]

#: Bits of the logical counter: 65,536 stamps per millisecond before the physical part
#: runs ahead of the wall clock (it still increases: correctness never depends on it).
LOGICAL_BITS = 16
_LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def pack_hlc(physical_ms: int, logical: int) -> int:
    """The packed stamp of ``(physical_ms, logical)``.

    Raises:
        ValueError: a negative part, or a counter that does not fit its bits.
    """
    if physical_ms < 0 or not 0 <= logical <= _LOGICAL_MASK:
        raise ValueError(f"not an HLC: ms={physical_ms}, logical={logical}")
    return (physical_ms << LOGICAL_BITS) | logical


def unpack_hlc(stamp: int) -> tuple[int, int]:
    """``(physical ms, logical counter)`` of a packed stamp."""
    return stamp >> LOGICAL_BITS, stamp & _LOGICAL_MASK


def next_hlc(previous: int, now_ms: int) -> int:
    """The next stamp after ``previous`` (the largest one issued or seen) at wall time
    ``now_ms``: the wall clock's if it is ahead, else ``previous + 1``."""
    candidate = now_ms << LOGICAL_BITS
    return candidate if candidate > previous else previous + 1


class HybridClock:
    """Issues strictly increasing stamps; thread-safe."""

    def __init__(self, now_ms: Callable[[], int] | None = None) -> None:
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._last = 0
        self._lock = threading.Lock()

    def tick(self, seen: int = 0) -> int:
        """A stamp larger than every stamp issued so far and than ``seen``."""
        with self._lock:
            self._last = next_hlc(max(self._last, seen), self._now_ms())
            return self._last
