"""The engine's periodic jobs, run from one small table by one scheduler.

Each :class:`PeriodicJob` names its interval (read from :class:`MessagingConfig` each tick,
0: every tick) and the coroutine it runs. The scheduler ticks every
``min(0.5, policy_check_s)`` seconds and runs the jobs that are due, in table order; a
job that starts a long sweep spawns it (see ``MessagingEngine._spawn_sweep``) so that the
tick stays short. A failing job is logged and tried again at its next period.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ._config import MessagingConfig

logger = logging.getLogger(__name__)

__all__ = ["PeriodicJob", "Scheduler"]


@dataclass(frozen=True)
class PeriodicJob:
    """One row of the scheduler's table."""

    name: str
    #: Seconds between two runs, from the settings (0: every tick).
    interval: Callable[[MessagingConfig], float]
    run: Callable[[], Awaitable[object]]


def every_tick(_config: MessagingConfig) -> float:
    """The interval of a job run on every tick."""
    return 0.0


class Scheduler:
    """Runs a table of :class:`PeriodicJob` until cancelled."""

    def __init__(self, config: Callable[[], MessagingConfig], jobs: Sequence[PeriodicJob]) -> None:
        #: The settings, read on every tick (an owner may replace them while running).
        self.config = config
        self.jobs = tuple(jobs)

    async def run(self) -> None:
        """Tick forever (cancel the task to stop)."""
        start = time.monotonic()
        last = {job.name: start for job in self.jobs}
        while True:
            now = time.monotonic()
            config = self.config()
            for job in self.jobs:
                if now - last[job.name] < job.interval(config):
                    continue
                last[job.name] = now
                try:
                    await job.run()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("messaging job %s failed; continuing", job.name)
            await asyncio.sleep(min(0.5, self.config().policy_check_s))
