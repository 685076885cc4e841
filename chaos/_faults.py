"""Faults at random, one at a time, about every ``fault_every_s`` seconds (seeded), and the
crash monitor that restarts a sidecar which died on its own (and records how it died)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ._observer import OwnershipObserver
from ._world import World
from .procs import CLUSTER_UP_TIMEOUT_S, Exit, SidecarProc

KINDS = ("kill9_sidecar", "sigstop_sidecar", "restart_sidecar", "kill9_broker")


@dataclass
class Fault:
    kind: str
    target: str
    started: float
    ended: float | None = None
    note: str = ""


class FaultInjector:
    def __init__(self, world: World, observer: OwnershipObserver) -> None:
        self.world = world
        self.observer = observer
        self.rng = world.rng("faults")
        self.faults: list[Fault] = []
        self.exits: list[Exit] = []  # every sidecar exit, expected or not
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
        self._monitor = threading.Thread(target=self._watch, name="crashes", daemon=True)
        self._monitor_stop = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._monitor.start()

    def join(self) -> None:
        self._thread.join(300)

    def close_monitor(self) -> None:
        self._monitor_stop.set()
        self._monitor.join(30)

    def crashes(self) -> list[Exit]:
        return [e for e in self.exits if not e.expected or e.returncode not in (0, -9)]

    # ------------------------------------------------------------------------- crashes
    def _watch(self) -> None:
        while not self._monitor_stop.wait(0.5):
            self.check_crashes(restart=True)

    def check_crashes(self, restart: bool) -> None:
        for s in list(self.world.sidecars):
            with s.lock:
                ended = s.check_crash(self.world.t0)
                if ended is not None:
                    self.exits.append(ended)
                    if restart:
                        s.start()

    # -------------------------------------------------------------------------- faults
    def _run(self) -> None:
        every = self.world.config.fault_every_s
        while not self.world.sleep(self.rng.uniform(0.6, 1.4) * every):
            kind = self.rng.choice(KINDS)
            action: Callable[[], Fault] = getattr(self, f"_{kind}")
            fault = action()
            self.faults.append(fault)

    def _victim(self) -> SidecarProc:
        return self.rng.choice(self.world.sidecars)

    def _kill9_sidecar(self) -> Fault:
        s = self._victim()
        with s.lock:
            fault = Fault("kill9_sidecar", s.broker_id, self.world.now())
            s.signal(signal.SIGKILL)
            self.observer.owner_died(s, "kill9")
            ended = s.reap(self.world.t0)
            if ended is not None:
                self.exits.append(ended)
            s.start()
            fault.ended = self.world.now()
        return fault

    def _sigstop_sidecar(self) -> Fault:
        s = self._victim()
        hold = self.rng.uniform(3.0, 8.0)
        with s.lock:
            fault = Fault("sigstop_sidecar", s.broker_id, self.world.now(), note=f"{hold:.1f}s")
            s.signal(signal.SIGSTOP)
        self.observer.owner_died(s, "sigstop")
        self.world.sleep(hold)
        with s.lock:
            s.signal(signal.SIGCONT)
            fault.ended = self.world.now()
        return fault

    def _restart_sidecar(self) -> Fault:
        s = self._victim()
        with s.lock:
            fault = Fault("restart_sidecar", s.broker_id, self.world.now())
            s.signal(signal.SIGTERM)
            self.observer.owner_died(s, "restart")
            ended = s.reap(self.world.t0)
            if ended is not None:
                self.exits.append(ended)
                fault.note = ended.how
            s.start()
            fault.ended = self.world.now()
        return fault

    def _kill9_broker(self) -> Fault:
        node = self.rng.choice((1, 2, 3))
        hold = max(self.rng.uniform(3.0, 10.0), self.world.config.broker_down_min_s)
        cluster = self.world.cluster
        if cluster.restarting():
            # A second dead broker would take the quorum (and min ISR) away: not this fault.
            busy = sorted(cluster.down_nodes)
            fault = Fault("kill9_broker", f"kafka-{node}", self.world.now(),
                          note=f"skipped: kafka-{busy} still restarting")  # fmt: skip
            fault.ended = fault.started
            return fault
        fault = Fault("kill9_broker", f"kafka-{node}", self.world.now(), note=f"down {hold:.1f}s")
        cluster.kill(node)
        self.world.sleep(hold)
        # Bounded: a restart that is not done within RESTART_BUDGET_S is reported and goes
        # on in the background; the soak's other faults and traffic go on meanwhile.
        fault.note += "; " + cluster.restart(self.world.now())
        fault.ended = self.world.now()
        return fault

    def heal(self) -> None:
        """After the last fault: every sidecar running and every broker up."""
        for s in self.world.sidecars:
            with s.lock:
                if s.stopped:
                    s.signal(signal.SIGCONT)
        self.check_crashes(restart=True)
        for s in self.world.sidecars:
            with s.lock:
                if not s.alive():
                    s.start()
        if not self.world.cluster.wait_restarted(CLUSTER_UP_TIMEOUT_S):
            raise RuntimeError("a Kafka broker's restart is still under way after the soak")
        if self.world.cluster.down_nodes:
            self.world.cluster.up()
