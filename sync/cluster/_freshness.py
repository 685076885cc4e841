"""Whether this sidecar's view of the cluster can be trusted right now (issue 11).

A process that was paused (SIGSTOP, a frozen VM, heavy swapping) wakes up with the view it
had when it stopped. Meanwhile its group session may have expired and its bundles moved:
until its readers catch up it would name itself, or a dead broker, as a bundle's owner
while every other sidecar names the new owner (chaos run 5: double owners right after a
3.2 s SIGSTOP). A watch thread ticks every ``tick_s``. A gap of more than ``pause_s``
between two ticks means the process did not run: the view is STALE until the registry and
ownership tables have caught up with their end offsets as of after the pause. A reader
that finds the last tick overdue by more than ``pause_s`` treats the view as stale too, so
a request served in the first instant after a pause, before the watch thread ran, is not
answered from the old view.

State (one thread moves it; readers only look)::

    FRESH ──pause seen──▶ STALE ──caught up──▶ FRESH
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable

from sync._errors import PolicySyncError

logger = logging.getLogger(__name__)

__all__ = ["PauseWatch", "ViewState"]


class ViewState(enum.Enum):
    """Whether the view may be answered from."""

    FRESH = "FRESH"
    STALE = "STALE"


class PauseWatch:
    """Notices that the process was paused and has ``catch_up`` run before trusting it again.

    ``catch_up`` must block until every table the answers come from has applied what was
    committed before the call (e.g. :meth:`TableView.sync`), raising
    :class:`~sync.errors.PolicySyncError` when it cannot (it is retried every tick).
    """

    def __init__(
        self,
        catch_up: Callable[[], None],
        *,
        name: str,
        pause_s: float = 1.0,
        tick_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < tick_s < pause_s:
            raise ValueError(f"need 0 < tick_s < pause_s, got {tick_s} and {pause_s}")
        self._catch_up = catch_up
        self._clock = clock
        self.name = name
        self.pause_s = pause_s
        self.tick_s = tick_s
        self._state = ViewState.FRESH
        self._tick = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Pauses noticed so far, and how long the last one was.
        self.pauses = 0
        self.last_pause_s = 0.0

    @property
    def state(self) -> ViewState:
        """STALE while catching up after a pause, or when the watch itself is overdue."""
        if self._state is ViewState.FRESH and self._clock() - self._tick > self.pause_s:
            return ViewState.STALE
        return self._state

    def start(self) -> PauseWatch:
        """Begin watching (from now on, time without ticks counts as a pause)."""
        self._tick = self._clock()
        self._thread = threading.Thread(target=self._run, name=f"pause-watch:{self.name}")
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the view stays as it is)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            now = self._clock()
            gap = now - self._tick
            self._tick = now
            if gap > self.pause_s and self._state is ViewState.FRESH:
                self.pauses += 1
                self.last_pause_s = gap
                self._state = ViewState.STALE
                logger.warning(
                    "%s: the process did not run for %.1fs; answering 503 until the view "
                    "has caught up",
                    self.name,
                    gap,
                )
            if self._state is ViewState.STALE:
                self._try_catch_up(gap)

    def _try_catch_up(self, gap: float) -> None:
        started = self._clock()
        try:
            self._catch_up()
        except PolicySyncError as exc:
            logger.info("%s: catching up after a pause failed (will retry): %s", self.name, exc)
            return
        self._tick = self._clock()
        self._state = ViewState.FRESH
        logger.info(
            "%s: caught up in %.3fs after a pause of %.1fs",
            self.name,
            self._tick - started,
            max(gap, self.last_pause_s),
        )
