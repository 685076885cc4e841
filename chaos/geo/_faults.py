"""One geo fault under load, healed, checked (docs/geo-design.md §5).

- ``mm2-stop``: MirrorMaker 2 stopped (SIGTERM) for the outage, then started again.
- ``mm2-kill``: MirrorMaker 2 killed (SIGKILL) mid-stream, started again after
  ``restart_after_s``; the load keeps writing for the outage first, so the kill finds
  records copied but not yet flushed as source offsets (re-copied: duplicates).
- ``kafka-down``: one cluster's Kafka stopped for the outage (its writes fail, so they are
  not acknowledged; its sidecars must stay up, say they are not ready and recover), then
  started again.

The load writes from before the fault until the heal starts; the heal's start is the zero of
the convergence bound.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from ._check import DigestPoller, Expected, converge, lost_writes, mirror_duplicates
from ._cluster import CLUSTERS, GeoCluster
from ._diagnose import sidecar_positions
from ._load import GlobalLoad, LoadConfig, statuses

logger = logging.getLogger(__name__)

FAULTS = ("mm2-stop", "mm2-kill", "kafka-down")
#: Load before the fault: MirrorMaker 2 is copying when it is hit.
WARM_UP_S = 2.0
#: kafka-down: how long past ``outage_s`` the outage may last until every sidecar of the
#: downed cluster was seen answering /health 503 (a liveness bound, not a speed target).
UNREADY_BOUND_S = 60.0


@dataclass(frozen=True)
class FaultConfig:
    """One run: which fault, how long, the load's seed; ``ceiling_s`` is the liveness bound
    on convergence after the heal (a failure, not a speed target)."""

    fault: str
    outage_s: float
    seed: int
    tag: str
    down_cluster: str = "west"
    restart_after_s: float = 5.0
    ceiling_s: float = 120.0
    rate: float = 20.0
    #: Keys both clusters write, and keys each cluster writes alone.
    shared_keys: int = 20
    own_keys: int = 10


@dataclass
class FaultResult:
    """What one run measured and found."""

    config: FaultConfig
    bound_s: float = 0.0
    #: How long the heal command itself took (MM2 replicating again / the broker answering):
    #: the part of the bound before the sidecars could catch up.
    heal_s: float = 0.0
    #: Setting up (creating the load's topics) and checking after convergence (reading the
    #: origin topics and mirrors): the run's time beside the load and the fault.
    setup_s: float = 0.0
    checks_s: float = 0.0
    writes: dict[str, dict[str, int]] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: int = 0
    #: kafka-down: /health statuses of the downed cluster's sidecars during the outage.
    health_during: dict[int, int] = field(default_factory=dict)
    #: kafka-down: the downed cluster's sidecars seen answering /health 503 (not ready)
    #: during the outage.
    unready_during: set[str] = field(default_factory=set)
    sidecars_alive: bool = True

    def summary(self) -> dict[str, Any]:
        return {
            "fault": self.config.fault,
            "outageS": self.config.outage_s,
            "seed": self.config.seed,
            "boundS": round(self.bound_s, 2),
            "healS": round(self.heal_s, 2),
            "setupS": round(self.setup_s, 2),
            "checksS": round(self.checks_s, 2),
            "acknowledged": self.acknowledged,
            "lost": len(self.lost),
            "duplicates": self.duplicates,
            "writes": self.writes,
            "statuses": self.statuses,
            "downCluster": self.config.down_cluster if self.config.fault == "kafka-down" else None,
            "healthDuringOutage": self.health_during,
            "unreadyDuringOutage": sorted(self.unready_during),
            "sidecarsAlive": self.sidecars_alive,
        }


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:  # noqa: S310
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def _alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
    return bool(pids)


def _watch_health(
    urls: tuple[str, ...], stop: threading.Event, seen: dict[int, int], unready: set[str]
) -> None:
    while not stop.wait(0.5):
        for url in urls:
            status = _health(url)
            seen[status] = seen.get(status, 0) + 1
            if status == 503:
                unready.add(url)


def run_fault(geo: GeoCluster, config: FaultConfig) -> FaultResult:
    """Load, fault, outage, heal, check; the cluster is whole again afterwards (also when a
    check fails). Raises AssertionError on a lost write or no convergence."""
    if config.fault not in FAULTS:
        raise ValueError(f"unknown fault {config.fault!r}; one of {', '.join(FAULTS)}")
    result = FaultResult(config)
    load = GlobalLoad(
        geo,
        LoadConfig(
            seed=config.seed,
            tag=config.tag,
            rate=config.rate,
            shared=config.shared_keys,
            own=config.own_keys,
        ),
    )
    began = time.monotonic()
    load.create_topics()
    result.setup_s = time.monotonic() - began
    healed = False
    poller: DigestPoller | None = None
    stop_watch = threading.Event()
    watcher: threading.Thread | None = None
    try:
        load.start()
        time.sleep(WARM_UP_S)
        if config.fault == "mm2-stop":
            geo.mm2_stop()
            time.sleep(config.outage_s)
        elif config.fault == "mm2-kill":
            time.sleep(config.outage_s)  # writes stream through MM2 meanwhile
            geo.mm2_kill()
            time.sleep(config.restart_after_s)
        else:
            down = config.down_cluster
            geo.kafka_stop(down)
            urls = geo.endpoints[down].sidecars
            watcher = threading.Thread(
                target=_watch_health,
                args=(urls, stop_watch, result.health_during, result.unready_during),
                daemon=True,
            )
            watcher.start()
            time.sleep(config.outage_s)
            # A sidecar notices an unreachable Kafka within ~20 s (docs/operations.md,
            # Health): a shorter outage lasts until each was seen not ready, or the bound.
            until = time.monotonic() + UNREADY_BOUND_S
            while len(result.unready_during) < len(urls) and time.monotonic() < until:
                time.sleep(0.5)
            stop_watch.set()
            watcher.join(30)
            result.sidecars_alive = _alive(geo.sidecar_pids(down))
        # A write blocked on the stopped broker ends after the heal (written late, or 503),
        # before the expected state is taken: halt now, wait for the threads after the heal.
        load.halt()
        healed_at = time.monotonic()
        poller = DigestPoller(geo.sidecars).start()
        _heal(geo, config)  # returns once MM2 replicates / the broker answers again
        result.heal_s = time.monotonic() - healed_at
        healed = True
        load.stop()
        with Expected(geo) as expected:
            try:
                done = converge(poller, expected.merged, healed_at, config.ceiling_s)
            except AssertionError as exc:
                _, digests = poller.latest()
                common = max(set(digests), key=digests.count) if digests else None
                behind = [  # the log of each sidecar that is not where most are
                    f"{url}'s log:\n{geo.sidecar_log_tail(url)}"
                    for url, digest in zip(geo.sidecars, digests, strict=False)
                    if digest != common
                ]
                geo.keep_state = True  # the sidecars' full logs, for after the teardown
                raise AssertionError(
                    f"{config.fault}: {exc} (the heal took {result.heal_s:.1f}s; sidecars "
                    f"{geo.sidecars}; state and logs kept in {geo.state_dir})\n"
                    f"sidecars' global positions and the end offsets:\n{sidecar_positions(geo)}"
                    f"\nMirrorMaker 2's log:\n{geo.mm2_log_tail()}\n" + "\n".join(behind)
                ) from None
        result.bound_s = done.bound_s
        began = time.monotonic()
        acked = load.acknowledged()
        result.acknowledged = len(acked)
        result.writes = load.counts()
        result.statuses = statuses(load.writes)
        result.lost = lost_writes(geo, acked, done.merged)
        for origin, peer in (("east", "west"), ("west", "east")):
            result.duplicates += mirror_duplicates(
                geo.endpoints[peer].bootstrap, origin, config.tag
            )
        result.checks_s = time.monotonic() - began
        logger.info(
            "geo fault %s: bound %.2fs after the heal, %d acknowledged, %d lost, %d duplicates",
            config.fault,
            result.bound_s,
            result.acknowledged,
            len(result.lost),
            result.duplicates,
        )
        return result
    finally:
        stop_watch.set()
        if poller is not None:
            poller.stop()
        load.halt()
        if not healed:
            _heal(geo, config)
        load.stop()


def _heal(geo: GeoCluster, config: FaultConfig) -> None:
    """Undo the fault (idempotent: starting what runs is a no-op)."""
    if config.fault == "kafka-down":
        geo.kafka_start(config.down_cluster)
    else:
        geo.mm2_start()


def all_clusters_healthy(geo: GeoCluster) -> bool:
    """Every sidecar of both clusters answers /health 200."""
    return all(_health(u) == 200 for c in CLUSTERS for u in geo.endpoints[c].sidecars)
