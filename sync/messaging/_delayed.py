"""Delayed delivery: messages put aside until their ``deliverAt`` time.

A producer asks for delayed delivery with an absolute time (WebSocket ``deliverAt``, the
binary protocol's ``deliver_at_time``) or a delay (``deliverAfterMs``); the engine writes
the due time as the reserved Kafka header ``__pulsar.deliverAt`` (epoch ms) and refuses a
delay above ``delayedDeliveryMaxDelayInMillis`` with Pulsar's text. Shared and Key_Shared
subscriptions put such a message aside when they would dispatch it before it is due, and
dispatch it once due, at the precision of ``delayedDeliveryTickTimeMillis``; Exclusive and
Failover subscriptions deliver it at once (as Pulsar). With ``delayedDeliveryEnabled``
false, every message is delivered at once. A message put aside is not acknowledged, so
the subscription's committed position stays below it until it is delivered and acked.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from typing import Final

from sync._constants import RESERVED_HEADER_PREFIX

from ._cursor import Entry

__all__ = ["HEADER_DELIVER_AT", "DelayedQueue", "max_delay_refusal"]

HEADER_DELIVER_AT: Final = f"{RESERVED_HEADER_PREFIX}deliverAt"


def max_delay_refusal(max_delay_ms: int) -> str:
    """Pulsar's refusal of a send delayed beyond ``delayedDeliveryMaxDelayInMillis``."""
    return f"Exceeds max allowed delivery delay of {max_delay_ms} milliseconds"


class DelayedQueue:
    """Messages of one subscription waiting for their due time (earliest first)."""

    __slots__ = ("_heap", "_seq", "_tick_ms")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, Entry]] = []
        self._seq = itertools.count()
        self._tick_ms = 1000

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, partition: int, entry: Entry, tick_ms: int) -> None:
        self._tick_ms = max(1, tick_ms)
        heapq.heappush(self._heap, (entry.deliver_at, next(self._seq), partition, entry))

    def next_due_s(self) -> float | None:
        """Seconds until the earliest message is due, rounded up to the tick (None: empty)."""
        if not self._heap:
            return None
        wait_ms = max(0, self._heap[0][0] - int(time.time() * 1000))
        return math.ceil(wait_ms / self._tick_ms) * self._tick_ms / 1000.0

    def pop_due(self) -> list[tuple[int, Entry]]:
        """Every message due now, as ``(partition, entry)``."""
        now = int(time.time() * 1000)
        out = []
        while self._heap and self._heap[0][0] <= now:
            _due, _seq, partition, entry = heapq.heappop(self._heap)
            out.append((partition, entry))
        return out
