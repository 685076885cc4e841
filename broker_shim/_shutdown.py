"""A bounded graceful stop.

``broker-shim run`` stops on SIGTERM the way a Pulsar broker does: stop accepting, release
its bundles (Releasing records, so the next owner claims them at once), close clients,
then close the caches. Each step talks to Kafka, and with a Kafka broker down each can
wait out request timeouts of a minute (chaos run 6: a clean stop during a broker outage
was still running after 60 s, and the orchestrator's SIGKILL ended it; its bundles had not
been released, and their failover took 72 s). Pulsar bounds the same thing with
``brokerShutdownTimeoutMs``.

:class:`ShutdownGuard` arms a timer when the stop begins; when the stop has not finished
after ``budget_s`` the process exits at once (status 0). Nothing acknowledged is lost by
that: every acknowledged write and message is already in Kafka, and what the stop did not
finish is what a kill -9 leaves too -- bundles not released are taken over after the
liveness timeout, an open transaction is aborted by the next writer's fence.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from aiohttp import web

logger = logging.getLogger(__name__)

#: Default of ``broker-shim run --shutdown-timeout`` (seconds).
#: A clean stop takes 0.7-2.0 s (chaos run 7); past this, a kill -9-like exit lets the
#: bundles move after the liveness timeout, sooner than a stop stuck on a slow Kafka.
DEFAULT_SHUTDOWN_TIMEOUT_S = 5.0


class ShutdownGuard:
    """Ends the process ``budget_s`` after a graceful stop began, if it has not ended."""

    def __init__(
        self, budget_s: float, *, exit_now: Callable[[int], object] = os._exit
    ) -> None:
        self.budget_s = budget_s
        self._exit_now = exit_now
        self._done = threading.Event()
        self._timer: threading.Thread | None = None
        self._began = 0.0

    def install(self, app: web.Application) -> None:
        """Arm on the app's first shutdown step; disarm after its last cleanup step."""
        app.on_shutdown.insert(0, self._arm)
        app.on_cleanup.append(self._disarm)

    async def _arm(self, _app: web.Application) -> None:
        self.arm()

    async def _disarm(self, _app: web.Application) -> None:
        self.disarm()

    def arm(self) -> None:
        if self._timer is not None:
            return
        self._began = time.monotonic()
        logger.info("stopping: releasing bundles and closing (at most %.1fs)", self.budget_s)
        self._timer = threading.Thread(target=self._watch, name="shutdown-guard", daemon=True)
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is None or self._done.is_set():
            return
        self._done.set()
        logger.info("stopped cleanly in %.1fs", time.monotonic() - self._began)

    def _watch(self) -> None:
        if self._done.wait(self.budget_s):
            return
        logger.warning(
            "graceful stop not finished after %.1fs (Kafka unreachable?): exiting now; "
            "bundles not released yet move after the liveness timeout, as after a kill -9",
            self.budget_s,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        self._exit_now(0)
