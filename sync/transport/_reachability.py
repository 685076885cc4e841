"""Whether a Kafka cluster answers: a periodic probe behind an explicit state machine.

A consumer whose brokers are all gone does not fail: it just stops receiving, so a cache
that was READY stays READY for the whole outage. :class:`ReachabilityMonitor` asks the
cluster a cheap question every ``interval_s`` (each transport supplies the question: the
real one a Metadata request for one topic, bounded by ``probe_timeout_s``; the in-memory
twin whether its broker is available, see ``MemoryBroker.set_available``) and turns the
answers into :class:`Reachability`, with hysteresis: ``failures_to_unreachable`` failed
probes in a row make the cluster UNREACHABLE, ``successes_to_reachable`` answered ones in
a row make it REACHABLE again, so one slow probe does not flap readiness.

The logic (:meth:`ReachabilityMonitor.observe`) is separate from the thread that probes,
so tests can drive it answer by answer.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sync._errors import ConfigurationError, LifecycleError
from sync._lifecycle import check_move

logger = logging.getLogger(__name__)

__all__ = [
    "Probe",
    "Reachability",
    "ReachabilityConfig",
    "ReachabilityMonitor",
    "ReachabilityStatus",
]

#: Asks the cluster one cheap question within ``timeout_s``; raises if it got no answer.
Probe = Callable[[float], None]


class Reachability(enum.Enum):
    #: No verdict yet (fewer answers than either threshold since the monitor started).
    UNKNOWN = "UNKNOWN"
    REACHABLE = "REACHABLE"
    UNREACHABLE = "UNREACHABLE"


_ALLOWED: dict[Reachability, frozenset[Reachability]] = {
    Reachability.UNKNOWN: frozenset({Reachability.REACHABLE, Reachability.UNREACHABLE}),
    Reachability.REACHABLE: frozenset({Reachability.UNREACHABLE}),
    Reachability.UNREACHABLE: frozenset({Reachability.REACHABLE}),
}


@dataclass(frozen=True, slots=True)
class ReachabilityConfig:
    """How often to probe, how long one probe may take, and the hysteresis thresholds."""

    interval_s: float = 1.0
    #: Generous: a loaded broker still answers within it (2 s flapped readiness at load 30).
    probe_timeout_s: float = 5.0
    failures_to_unreachable: int = 3
    successes_to_reachable: int = 2

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.probe_timeout_s <= 0:
            raise ConfigurationError(
                f"reachability: interval_s ({self.interval_s}) and probe_timeout_s "
                f"({self.probe_timeout_s}) must be > 0"
            )
        if self.failures_to_unreachable < 1 or self.successes_to_reachable < 1:
            raise ConfigurationError(
                f"reachability: failures_to_unreachable ({self.failures_to_unreachable}) and "
                f"successes_to_reachable ({self.successes_to_reachable}) must be >= 1"
            )


@dataclass(frozen=True, slots=True)
class ReachabilityStatus:
    """The verdict, since when (epoch seconds of the move into it), and the last error."""

    state: Reachability
    since: float
    last_error: str | None = None
    #: Failed (or answered) probes in a row, counting towards the next move.
    failures: int = 0
    successes: int = 0


class ReachabilityMonitor:
    """Probes one cluster in a daemon thread (after :meth:`start`) and keeps the verdict."""

    def __init__(
        self,
        probe: Probe,
        config: ReachabilityConfig | None = None,
        *,
        what: str = "kafka",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or ReachabilityConfig()
        self.what = what
        self._probe = probe
        self._clock = clock
        self._lock = threading.Lock()
        self._status = ReachabilityStatus(Reachability.UNKNOWN, clock())
        self._listeners: list[Callable[[ReachabilityStatus], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def status(self) -> ReachabilityStatus:
        return self._status

    @property
    def state(self) -> Reachability:
        return self._status.state

    def on_change(self, listener: Callable[[ReachabilityStatus], None]) -> None:
        """Call ``listener(status)`` after each move (in the probing thread)."""
        self._listeners.append(listener)

    def observe(self, error: str | None) -> ReachabilityStatus:
        """One probe's outcome (``error`` None: answered); returns the new status."""
        cfg = self.config
        with self._lock:
            old = self._status
            if error is None:
                successes, failures = old.successes + 1, 0
                target = Reachability.REACHABLE if successes >= cfg.successes_to_reachable else None
            else:
                successes, failures = 0, old.failures + 1
                target = (
                    Reachability.UNREACHABLE if failures >= cfg.failures_to_unreachable else None
                )
            last_error = old.last_error if error is None else error
            moved = target is not None and target is not old.state
            if moved:
                assert target is not None  # noqa: S101 - for mypy: moved implies a target
                check_move(_ALLOWED, old.state, target, f"{self.what} reachability", LifecycleError)
                new = ReachabilityStatus(target, self._clock(), last_error, failures, successes)
            else:
                new = ReachabilityStatus(old.state, old.since, last_error, failures, successes)
            self._status = new
        if moved:
            if new.state is Reachability.UNREACHABLE:
                logger.warning(
                    "%s UNREACHABLE after %d failed probes: %s", self.what, failures, error
                )
            else:
                logger.info("%s %s (was %s)", self.what, new.state.value, old.state.value)
            for listener in list(self._listeners):
                try:
                    listener(new)
                except Exception:
                    logger.exception("%s reachability listener failed", self.what)
        return new

    def probe_once(self) -> ReachabilityStatus:
        """Ask the cluster once and observe the outcome."""
        try:
            self._probe(self.config.probe_timeout_s)
        except Exception as exc:  # noqa: BLE001 - any failure to answer is "no answer"
            return self.observe(f"{type(exc).__name__}: {exc}"[:300])
        return self.observe(None)

    def start(self) -> ReachabilityMonitor:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"{self.what}-reachability", daemon=True
            )
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.probe_once()
            self._stop.wait(self.config.interval_s)

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.config.probe_timeout_s + self.config.interval_s + 5)
