"""What every part of a soak shares: the processes, the clock, the seed and the stop flag."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .procs import KafkaCluster, SidecarProc

LOOKUP_NAMESPACE = "public/default"
WRITE_NAMESPACE = "chaos/writes"
POISON_NAMESPACE = "chaos/poison"


@dataclass(frozen=True)
class ChaosConfig:
    """The knobs of one soak (``CHAOS_*`` environment variables)."""

    seconds: float = 600.0
    seed: int = 0
    sidecars: int = 3
    fault_every_s: float = 15.0
    session_timeout_ms: int = 2000
    poison_records: int = 5000
    keys: int = 24
    topics: int = 4
    #: a killed Kafka broker stays down at least this long (to reproduce what a long
    #: outage does; the seeded 3-10 s draw is kept, so the schedule does not shift)
    broker_down_min_s: float = 0.0
    #: how long after a fault ends a sidecar may stay unhealthy (issue #11 target)
    healthy_within_s: float = 5.0
    #: Whether the speed targets (failover p99, healthy within 5 s) are checks. Off in the
    #: short soak of ``make test`` (``CHAOS_TIME_CHECKS=0``): a test must not depend on
    #: the machine's speed, so there they are measured and printed, not checked.
    time_checks: bool = True


@dataclass
class World:
    """The live soak: cluster, sidecars, timebase, seeded randomness and the stop flag."""

    config: ChaosConfig
    workdir: Path
    cluster: KafkaCluster
    sidecars: list[SidecarProc] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    stop: threading.Event = field(default_factory=threading.Event)
    #: sidecar urls the last /health poll found 200 (written by the health poller)
    healthy: set[str] = field(default_factory=set)

    def now(self) -> float:
        """Seconds since the soak started."""
        return time.monotonic() - self.t0

    def rng(self, part: str) -> random.Random:
        """A generator of its own for each part, so one part's draws do not shift another's."""
        return random.Random(f"{self.config.seed}:{part}")  # noqa: S311 - not crypto

    def serving(self) -> list[SidecarProc]:
        return [s for s in self.sidecars if s.serving()]

    def pick(self, rng: random.Random) -> SidecarProc:
        """A sidecar to talk to: a healthy one if any, else any."""
        good = [s for s in self.sidecars if s.url in self.healthy] or self.sidecars
        return rng.choice(good)

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the soak stops first; True when it stopped."""
        return self.stop.wait(seconds)
