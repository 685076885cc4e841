"""The tail's stall watchdog: which partitions have records waiting and have not moved.

Why: librdkafka's assigned consumer can stop fetching a partition for good after a broker
restart (confluentinc/librdkafka#5153: stuck validating its offset after a leader-epoch
change on KRaft), without an error or a log line: ``consume`` just returns nothing while
the log grows, and a table reader stays READY and behind for ever. A new consumer assigned
at the applied positions reads on (the issue's workaround); :class:`sync.table.TableReader`
asks this watch every ``interval_s`` whether it should make one.

A partition is stalled only when records were already waiting beyond its position at the
previous check and its position is still the same now. So a slow reader that moves is never
stalled, a partition without lag never is, and records that arrived since the previous
check are given a whole interval first. Only positions and end offsets are compared: the
watch keeps no clock of its own beyond when the next check is due (``clock``, injectable).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sync._errors import ConfigurationError

__all__ = ["Stall", "StallWatch"]


@dataclass(frozen=True, slots=True)
class Stall:
    """A partition whose position did not move between two checks although records were
    waiting beyond it at both: ``position`` (next offset to apply) and ``end`` (now)."""

    partition: int
    position: int
    end: int


class StallWatch:
    """Compares a reader's positions with its partitions' end offsets, one check per
    ``interval_s`` of ``clock``."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if interval_s <= 0:
            raise ConfigurationError(f"stall check interval must be > 0 s, not {interval_s}")
        self.interval_s = interval_s
        self._clock = clock
        self._due = clock() + interval_s
        #: At the previous check, per partition: (position, end offset).
        self._seen: dict[int, tuple[int, int]] = {}

    def due(self) -> bool:
        """True once ``interval_s`` has passed since the previous check (or the start)."""
        return self._clock() >= self._due

    def check(self, positions: Mapping[int, int], ends: Mapping[int, int]) -> list[Stall]:
        """The partitions stalled since the previous check (see the module), by partition;
        remembers this check's positions and ends for the next one."""
        self._due = self._clock() + self.interval_s
        stalls: list[Stall] = []
        seen: dict[int, tuple[int, int]] = {}
        for p, end in sorted(ends.items()):
            position = positions.get(p)
            if position is None:
                continue
            seen[p] = (position, end)
            before = self._seen.get(p)
            if before is None:
                continue
            was_at, was_end = before
            if position == was_at and was_end > was_at and end > position:
                stalls.append(Stall(p, position, end))
        self._seen = seen
        return stalls

    def forget(self) -> None:
        """Start over from the next check: after the consumer was recreated (it gets a
        whole interval), or when the end offsets could not be asked (Kafka unreachable:
        nothing can move then, and the previous check says nothing about afterwards)."""
        self._seen = {}
        self._due = self._clock() + self.interval_s
