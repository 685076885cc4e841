"""Watchers: /health of each sidecar, and who each sidecar says owns each bundle.

The health poller keeps a timeline of (time, sidecar, healthy) samples; recovery after a
fault is the time from the fault's end to the first healthy sample. The ownership
observer asks every sidecar at once (``GET /policy-sync/v1/ownership``) every
``interval`` seconds; a *double owner* is a round in which two healthy sidecars name
different owners (state ``Owned``) for one bundle at the same record version, or in which a
sidecar names itself the owner from a record older than another healthy sidecar's (it would
still serve the bundle). The sidecars are asked at once but answer one by one: a healthy
sidecar that names another owner from an older record of a bundle that just moved is only
behind (*view lag*, counted, not a violation; a soak beside two CPU hogs saw one such
round during a rebalance: the bystander's answer named the old owner, the old owner's the
new one). A *failover* starts when an owner is
killed or frozen and ends at the first round in which every other answering sidecar names,
for every bundle that owner held, a live owner other than the dead incarnation.
"""

from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ._world import World
from .procs import SidecarProc, http_status

FAILOVER_GIVE_UP_S = 120.0


class HealthPoller:
    def __init__(self, world: World, interval: float = 0.25) -> None:
        self.world = world
        self.interval = interval
        #: (soak time, broker id, healthy)
        self.samples: list[tuple[float, str, bool]] = []
        self.last_unhealthy_body: dict[str, str] = {}
        #: (monotonic time, broker id, fence holder it names) from every /health answer
        #: that had a writer section: how long the policy writers went without a holder.
        self.holders: list[tuple[float, str, str | None]] = []
        self.started = time.monotonic()
        #: each sidecar's last writer section (forwarded, written here, fenced retries, …)
        self.writer_status: dict[str, dict[str, object]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def restart_clock(self) -> None:
        """Forget the samples of the set-up: they were taken against the world's previous
        ``t0``, and times from two clocks mixed made early faults' recoveries look like the
        set-up's length (every sidecar "unhealthy for 121 s" after the first fault)."""
        self.samples = []

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _one(self, s: SidecarProc) -> None:
        status, body = s.health(timeout=1.0) if s.serving() else (0, b"")
        ok = status == 200
        self.samples.append((self.world.now(), s.broker_id, ok))
        self._note_writer(s.broker_id, body)
        if ok:
            self.world.healthy.add(s.url)
        else:
            self.world.healthy.discard(s.url)
            if status:
                self.last_unhealthy_body[s.broker_id] = body.decode(errors="replace")[:300]

    def _run(self) -> None:
        with ThreadPoolExecutor(max_workers=len(self.world.sidecars)) as pool:
            while not self._stop.wait(self.interval):
                list(pool.map(self._one, list(self.world.sidecars)))

    def _note_writer(self, broker_id: str, body: bytes) -> None:
        try:
            writer = json.loads(body)["writer"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(writer, dict) and "holder" in writer:
            self.holders.append((time.monotonic(), broker_id, writer["holder"]))
            self.writer_status[broker_id] = writer

    def election(self) -> dict[str, object]:
        """When every sidecar first named the same fence holder (seconds since the sidecars
        started), and per sidecar the longest stretch it answered with no holder known."""
        last: dict[str, str | None] = {}
        agreed: float | None = None
        longest: dict[str, float] = {}
        since: dict[str, float] = {}
        ids = {s.broker_id for s in self.world.sidecars}
        for at, who, holder in list(self.holders):
            last[who] = holder
            if holder is None:
                since.setdefault(who, at)
            elif who in since:
                longest[who] = max(longest.get(who, 0.0), at - since.pop(who))
            if agreed is None and set(last) == ids and len(set(last.values())) == 1:
                if holder is not None:
                    agreed = at - self.started
        end = time.monotonic()
        for who, at in since.items():
            longest[who] = max(longest.get(who, 0.0), end - at)
        return {
            "agreed_holder_after_start_s": None if agreed is None else round(agreed, 1),
            "longest_without_holder_s": {k: round(v, 1) for k, v in sorted(longest.items())},
            "writers": self.writer_status,
        }

    def recovery(self, broker_id: str, since: float) -> float | None:
        """Seconds from ``since`` to the first healthy sample of a sidecar (None: never)."""
        for at, who, ok in list(self.samples):
            if who == broker_id and ok and at >= since:
                return at - since
        return None

    def max_gap(self, broker_id: str) -> float:
        """The longest time without a sample of a sidecar: recovery times are only as
        exact as this (a starved poller makes them upper bounds)."""
        times = [at for at, who, _ in list(self.samples) if who == broker_id]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)

    def unhealthy_seconds(self, broker_id: str) -> float:
        total, prev = 0.0, None
        for at, who, ok in list(self.samples):
            if who != broker_id:
                continue
            if prev is not None and not prev[1]:
                total += at - prev[0]
            prev = (at, ok)
        return total


@dataclass
class Failover:
    victim: str
    incarnation: dict[str, str]  # bundle -> incarnation the victim held it with
    started: float
    how: str
    took: float | None = None


@dataclass
class OwnershipStats:
    rounds: int = 0
    double_owner_rounds: int = 0
    double_owners: list[str] = field(default_factory=list)
    #: Rounds in which a bystander named the previous owner of a bundle that had moved.
    view_lag_rounds: int = 0
    bundles_seen: set[str] = field(default_factory=set)
    failovers: list[Failover] = field(default_factory=list)
    errors: int = 0


class OwnershipObserver:
    def __init__(self, world: World, interval: float = 0.25) -> None:
        self.world = world
        self.interval = interval
        self.stats = OwnershipStats()
        #: the last round's views: broker id -> bundle -> record
        self.last: dict[str, dict[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._open: list[Failover] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="observer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        with self._lock:
            for f in self._open:
                self.stats.failovers.append(f)  # never completed: took stays None
            self._open.clear()

    def owner_died(self, victim: SidecarProc, how: str) -> None:
        """Called by the fault injector right after it killed or froze ``victim``."""
        with self._lock:
            held = {
                b: str(r.get("incarnation", ""))
                for view in self.last.values()
                for b, r in view.items()
                if r.get("state") == "Owned" and r.get("broker") == victim.broker_id
            }
            if held:
                self._open.append(Failover(victim.broker_id, held, self.world.now(), how))

    def _view(self, s: SidecarProc) -> tuple[str, dict[str, dict[str, Any]] | None]:
        if not s.serving():
            return s.broker_id, None
        status, body = http_status(s.url + "/policy-sync/v1/ownership", timeout=2.0)
        if status != 200:
            return s.broker_id, None
        try:
            return s.broker_id, dict(json.loads(body)["bundles"])
        except (ValueError, KeyError, TypeError):
            return s.broker_id, None

    def _run(self) -> None:
        with ThreadPoolExecutor(max_workers=len(self.world.sidecars)) as pool:
            while not self._stop.wait(self.interval):
                healthy = set(self.world.healthy)
                sidecars = list(self.world.sidecars)
                views = dict(pool.map(self._view, sidecars))
                urls = {s.broker_id: s.url for s in sidecars}
                live = {s.broker_id for s in sidecars if s.serving()}
                self._round(
                    {b: v for b, v in views.items() if v is not None},
                    {b for b in views if urls[b] in healthy},
                    live,
                )

    def _round(
        self,
        views: dict[str, dict[str, dict[str, Any]]],
        healthy: set[str],
        live: set[str],
    ) -> None:
        now = self.world.now()
        self.stats.rounds += 1
        #: bundle -> sidecar -> (the owner it names, the version of its record)
        owners: dict[str, dict[str, tuple[str, int]]] = {}
        for who, view in views.items():
            for bundle, rec in view.items():
                self.stats.bundles_seen.add(bundle)
                if who in healthy and rec.get("state") == "Owned":
                    version = int(rec.get("versionId") or 0)
                    owners.setdefault(bundle, {})[who] = (str(rec.get("broker")), version)
        doubles, lagging = [], False
        for bundle, named in owners.items():
            if len({owner for owner, _ in named.values()}) < 2:
                continue
            newest = max(version for _, version in named.values())
            current = {owner for owner, version in named.values() if version == newest}
            stale_self = any(o == who and v < newest for who, (o, v) in named.items())
            if len(current) > 1 or stale_self:
                doubles.append(f"{now:.1f}s {bundle}: {named}")
            else:
                lagging = True
        if doubles:
            self.stats.double_owner_rounds += 1
            self.stats.double_owners.extend(doubles)
        elif lagging:
            self.stats.view_lag_rounds += 1
        with self._lock:
            self.last = views
            still = []
            for f in self._open:
                if self._settled(f, views, live):
                    f.took = now - f.started
                    self.stats.failovers.append(f)
                elif now - f.started > FAILOVER_GIVE_UP_S:
                    self.stats.failovers.append(f)
                else:
                    still.append(f)
            self._open = still

    @staticmethod
    def _settled(f: Failover, views: dict[str, dict[str, dict[str, Any]]], live: set[str]) -> bool:
        survivors = {
            who: view
            for who, view in views.items()
            if who != f.victim or f.victim in live  # a restarted victim is a survivor
        }
        if not survivors:
            return False
        for bundle, dead_incarnation in f.incarnation.items():
            named = set()
            for view in survivors.values():
                rec = view.get(bundle)
                if rec is None or rec.get("state") != "Owned":
                    return False
                broker, inc = str(rec.get("broker")), str(rec.get("incarnation", ""))
                if broker not in live or (broker == f.victim and inc == dead_incarnation):
                    return False
                named.add((broker, inc))
            if len(named) != 1:
                return False
        return True


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))  # nearest rank
    return ordered[rank]
