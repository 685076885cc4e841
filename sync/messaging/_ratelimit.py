"""Dispatch throttling: a token bucket per rate, in messages and in bytes.

Each bucket holds at most one period's worth of tokens and refills continuously at
``rate / period``, so a burst of one period is allowed and the long-run rate is exact.
A message larger than a full byte bucket is let through when the bucket is full (the
bucket goes negative), so an oversized message delays the next ones instead of
blocking dispatch forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from ._policy import RateSpec

__all__ = ["RateLimiter", "acquire_all"]


class RateLimiter:
    """Token buckets for one :class:`RateSpec`; :meth:`update` applies a new spec live."""

    __slots__ = ("_byte_tokens", "_clock", "_last", "_msg_tokens", "spec")

    def __init__(self, spec: RateSpec | None = None, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.spec = spec or RateSpec()
        self._last = clock()
        self._msg_tokens = float(self.spec.msgs)
        self._byte_tokens = float(self.spec.nbytes)

    def update(self, spec: RateSpec) -> None:
        """Switch to ``spec`` now; the buckets restart full (as Pulsar resets its limiter)."""
        if spec == self.spec:
            return
        self.spec = spec
        self._last = self._clock()
        self._msg_tokens = float(spec.msgs)
        self._byte_tokens = float(spec.nbytes)

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        if elapsed <= 0:
            return
        self._last = now
        spec = self.spec
        if spec.msgs > 0:
            self._msg_tokens = min(
                float(spec.msgs), self._msg_tokens + elapsed * spec.msgs / spec.period_s
            )
        if spec.nbytes > 0:
            self._byte_tokens = min(
                float(spec.nbytes), self._byte_tokens + elapsed * spec.nbytes / spec.period_s
            )

    def wait_s(self, nbytes: int) -> float:
        """Seconds until one message of ``nbytes`` may pass (0.0: now)."""
        spec = self.spec
        if spec.unlimited:
            return 0.0
        self._refill()
        wait = 0.0
        if spec.msgs > 0 and self._msg_tokens < 1.0:
            wait = (1.0 - self._msg_tokens) * spec.period_s / spec.msgs
        if spec.nbytes > 0:
            need = min(float(nbytes), float(spec.nbytes))
            if self._byte_tokens < need:
                wait = max(wait, (need - self._byte_tokens) * spec.period_s / spec.nbytes)
        return wait

    def consume(self, nbytes: int, msgs: int = 1) -> None:
        """Take ``msgs`` messages of ``nbytes`` in all (call after :meth:`wait_s` said 0.0)."""
        spec = self.spec
        if spec.msgs > 0:
            self._msg_tokens -= msgs
        if spec.nbytes > 0:
            self._byte_tokens -= nbytes


def acquire_all(limiters: Iterable[RateLimiter], nbytes: int, msgs: int = 1) -> float:
    """Take ``msgs`` messages of ``nbytes`` from every limiter, or none: returns 0.0 or the
    seconds to wait. A stored entry of many messages passes once one message may (the
    buckets then go below zero), as Pulsar dispatches an entry and takes its permits
    after."""
    chosen = [lim for lim in limiters if not lim.spec.unlimited]
    wait = 0.0
    for lim in chosen:
        wait = max(wait, lim.wait_s(nbytes))
    if wait > 0.0:
        return wait
    for lim in chosen:
        lim.consume(nbytes, msgs)
    return 0.0
