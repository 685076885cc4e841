"""The one supervisor of the sidecar: replaces a component that ended up FAILED.

A failed component (the policy service whose cache FAILED, the cluster service or its
ownership member) must never wedge the sidecar, as a stuck reader did in Pulsar: it is
closed, and after a back-off a fresh incarnation is started. The back-off doubles (to
``max_backoff_s``) while fresh incarnations keep failing and resets once one is healthy;
what ``/health`` and the metrics read is always the current incarnation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

__all__ = ["Backoff", "supervise"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """How often to look and how long to wait before a restart."""

    #: A check reads a few attributes: cheap enough to notice a failure within 0.2 s.
    check_s: float = 0.2
    #: The first restart comes quickly (issue 11: healthy again within 5 s of a fault);
    #: only repeated failures wait longer (doubling to ``max_s``).
    initial_s: float = 0.5
    max_s: float = 30.0


async def supervise(
    name: str,
    *,
    failure: Callable[[], str | None],
    healthy: Callable[[], bool],
    close_failed: Callable[[], None],
    start_fresh: Callable[[], None],
    backoff: Backoff = Backoff(),
) -> None:
    """Run until cancelled: restart ``name`` whenever ``failure()`` names a reason.

    ``close_failed`` and ``start_fresh`` block (Kafka clients), so they run in a thread.
    """
    delay = backoff.initial_s
    while True:
        await asyncio.sleep(backoff.check_s)
        reason = failure()
        if reason is None:
            if healthy():
                delay = backoff.initial_s
            continue
        logger.error("%s failed (%s); restarting in %.1fs", name, reason, delay)
        await asyncio.to_thread(close_failed)
        await asyncio.sleep(delay)
        delay = min(delay * 2, backoff.max_s)
        await asyncio.to_thread(start_fresh)
