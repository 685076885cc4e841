"""The soak: setting up the world, running faults and traffic, healing, and the checks
(:class:`Soak`), with the fault windows its timing checks leave out
(:func:`kafka_outages`, :func:`overlaps`). ``python -m chaos`` runs it (:mod:`chaos.__main__`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ._faults import Fault, FaultInjector
from ._fuzz import Fuzzer
from ._messaging import Messaging, wait_drained
from ._observer import HealthPoller, OwnershipObserver, percentile
from ._poison import PoisonFuzz
from ._world import WRITE_NAMESPACE, ChaosConfig, World
from ._writers import WRITERS, Writer, key_topic, lost_writes
from .procs import RESTART_BUDGET_S, KafkaCluster, Restart, SidecarProc, http_status

READY_TIMEOUT_S = 180.0
START_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 120.0
CONVERGE_TIMEOUT_S = 60.0
FIELD_PATHS = {"maxConsumerPerTopic": "maxConsumers", "maxProducerPerTopic": "maxProducers",
               "messageTTLInSeconds": "messageTTL"}  # fmt: skip


def kafka_outages(faults: list[Fault], restarts: list[Restart]) -> list[tuple[float, float]]:
    """[from, to) on the soak's clock while a killed Kafka broker was not back yet."""
    out = []
    for f in faults:
        if f.kind != "kill9_broker" or f.note.startswith("skipped"):
            continue
        after = [r for r in restarts if r.started_s >= f.started]
        end = math.inf
        if after and after[0].took_s is not None:
            end = after[0].started_s + after[0].took_s
        out.append((f.started, end))
    return out


def overlaps(start: float, took: float, windows: list[tuple[float, float]]) -> bool:
    return any(start < to and start + took > frm for frm, to in windows)


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"


def say(text: str) -> None:
    print(f"chaos: {text}", flush=True)


def get_json(url: str) -> Any:
    status, body = http_status(url, timeout=30)
    if status == 204 or (status == 200 and not body.strip()):
        return None  # an unset policy (Pulsar: 200 with an empty body, or 204)
    if status != 200:
        raise RuntimeError(f"GET {url}: {status} {body[:200]!r}")
    return json.loads(body)


class Soak:
    def __init__(self, config: ChaosConfig, workdir: Path) -> None:
        self.world = World(config, workdir, KafkaCluster())
        self.health = HealthPoller(self.world)
        self.observer = OwnershipObserver(self.world)
        self.faults = FaultInjector(self.world, self.observer)
        self.writers = [Writer(self.world, i) for i in range(len(WRITERS))]
        self.messaging = Messaging(self.world)
        self.fuzz = Fuzzer(self.world)
        self.poison = PoisonFuzz(self.world, spread_s=config.seconds * 0.5)
        self.fresh: SidecarProc | None = None
        self.result: dict[str, Any] = {
            "seed": config.seed, "seconds": config.seconds, "machine": machine(),
            "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "load_at_start": os.getloadavg(),
        }  # fmt: skip
        self.violations: list[str] = []
        #: speed targets missed while they are not checks (CHAOS_TIME_CHECKS=0)
        self.timing_misses: list[str] = []

    # ----------------------------------------------------------------------- phases
    def setup(self) -> None:
        w = self.world
        say("starting the 3-broker Kafka cluster (kafkactl cluster-up)")
        w.cluster.down()  # leftovers of an earlier run
        bootstrap = w.cluster.up()
        say(f"cluster {bootstrap}; starting {w.config.sidecars} sidecars")
        for i in range(w.config.sidecars):
            s = SidecarProc(str(i + 1), bootstrap, w.workdir, w.config.session_timeout_ms)
            s.start()
            w.sidecars.append(s)
        started = time.monotonic()
        for s in w.sidecars:
            if not s.wait_healthy(START_TIMEOUT_S - (time.monotonic() - started)):
                status, body = s.health()
                # issue #11: a fresh sidecar can stay 503 ("lookup": "CLOSED") for good; the
                # soak records it and goes on (its traffic goes to the healthy ones)
                self.violations.append(
                    f"sidecar {s.broker_id} not healthy {START_TIMEOUT_S:.0f}s after a fresh "
                    f"start: /health {status} {body[:120]!r}"
                )
        self.result["start_healthy_s"] = round(time.monotonic() - started, 1)
        self.health.start()
        self.observer.start()
        self.poison.seed()
        say(f"poison templates: {self.poison.stats.templates} real records "
            f"{self.poison.stats.seed_error}")  # fmt: skip
        # Pulsar's order: tenant, namespace, topics; policies only on existing topics
        admin = f"{w.sidecars[0].url}/admin/v2"
        self._put(f"{admin}/tenants/chaos", b'{"allowedClusters": ["standalone"]}')
        self._put(f"{admin}/namespaces/{WRITE_NAMESPACE}", b"")
        for i in range(w.config.keys):
            self._put(f"{admin}/{key_topic(i).replace('://', '/')}", b"")
        for i in range(w.config.topics):
            self._put(f"{admin}/persistent/public/default/chaos-m{i}/partitions", b"1")

    def _put(self, url: str, body: bytes) -> None:
        """PUT until 204 (created) or 409 (exists), for at most a minute; every other
        answer is kept in the result (a topic creation answered 500 is a finding)."""
        deadline = time.monotonic() + 60
        while True:
            req = urllib.request.Request(url, data=body, method="PUT",  # noqa: S310 - loopback
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
                    status = int(resp.status)
                    text = ""
            except urllib.error.HTTPError as err:
                status, text = int(err.code), err.read()[:200].decode(errors="replace")
            except OSError as exc:
                status, text = 0, repr(exc)
            if status in (200, 204, 409):
                return
            self.result.setdefault("setup_answers", []).append(f"PUT {url}: {status} {text}")
            if 400 <= status < 500:
                return  # refused: the writers' errors will show what it costs
            if time.monotonic() > deadline:
                raise RuntimeError(f"PUT {url}: {status} {text}")
            time.sleep(1.0)

    def run(self) -> None:
        w = self.world
        w.t0 = time.monotonic()
        self.health.restart_clock()
        for writer in self.writers:
            writer.start()
        self.messaging.start()
        self.fuzz.start()
        self.poison.start()
        self.faults.start()
        with tqdm(total=int(w.config.seconds), unit="s", file=sys.stderr, mininterval=5) as bar:
            while w.now() < w.config.seconds:
                time.sleep(1.0)
                bar.update(1)
                bar.set_postfix(
                    faults=len(self.faults.faults), writes=sum(x.stats.acked for x in self.writers),
                    msgs=len(self.messaging.stats.acked), poison=self.poison.stats.total,
                    fuzz=self.fuzz.stats.requests, crashes=len(self.faults.crashes()),
                    refresh=False,
                )  # fmt: skip
        say("time is up: stopping faults and traffic, healing every process")
        w.stop.set()
        self.faults.join()
        for writer in self.writers:
            writer.join()
        self.fuzz.join()
        self.poison.join()
        try:
            self.faults.heal()
        except Exception as exc:  # noqa: BLE001 - a finding; the checks still run
            self.violations.append(f"healing after the last fault failed: {exc!r}"[:2000])
        healed_at = w.now()
        for s in w.sidecars:
            if not s.wait_healthy(max(1.0, READY_TIMEOUT_S - (w.now() - healed_at))):
                status, body = s.health()
                self.violations.append(
                    f"sidecar {s.broker_id} not healthy {READY_TIMEOUT_S:.0f}s after the last "
                    f"fault was healed: /health {status} {body[:120]!r}"
                )
        self.result["healed_healthy_after_s"] = round(w.now() - healed_at, 1)
        waited = wait_drained(self.messaging, DRAIN_TIMEOUT_S)
        self.result["drain_wait_s"] = round(waited, 1)
        time.sleep(2.0)  # a last observer round on the healed cluster
        self.messaging.close()
        self.observer.close()
        self.health.close()
        self.faults.close_monitor()
        self.faults.check_crashes(restart=False)

    # ----------------------------------------------------------------------- checks
    def check(self) -> None:
        self._check_caches()
        self._check_messages()
        self._check_ownership()
        self._check_health()
        self._check_crashes()
        self._check_fuzz()

    def _fresh_sidecar(self) -> SidecarProc | None:
        w = self.world
        fresh = SidecarProc("fresh", w.cluster.bootstrap, w.workdir, w.config.session_timeout_ms,
                            lookup=False)  # fmt: skip
        fresh.start()
        self.fresh = fresh
        started = time.monotonic()
        ok = fresh.wait_healthy(READY_TIMEOUT_S)
        self.result["fresh_replay_ready_s"] = round(time.monotonic() - started, 1) if ok else None
        if not ok:
            status, body = fresh.health()
            self.violations.append(
                f"a fresh replay never became READY in {READY_TIMEOUT_S:.0f}s "
                f"(/health {status} {body[:200]!r}; alive={fresh.alive()})"
            )
            return None
        return fresh

    def _check_caches(self) -> None:
        fresh = self._fresh_sidecar()
        if fresh is None:
            self.result["divergent_caches"] = None
            self.result["lost_writes"] = None
            return
        want = get_json(fresh.url + "/policy-sync/v1/digest")["digest"]
        divergent: dict[str, Any] = {}
        for s in self.world.sidecars:
            deadline = time.monotonic() + CONVERGE_TIMEOUT_S
            got = None
            while time.monotonic() < deadline:
                status, body = http_status(s.url + "/policy-sync/v1/digest", timeout=10)
                got = json.loads(body)["digest"] if status == 200 else None
                if got == want:
                    break
                time.sleep(1.0)
            if got != want:
                divergent[s.broker_id] = self._differing_keys(s, fresh)
        self.result["divergent_caches"] = divergent
        for who, keys in divergent.items():
            self.violations.append(
                f"sidecar {who}'s cache differs from a fresh replay on {len(keys)} keys, "
                f"e.g. {keys[:5]}"
            )
        # final state of the writers' keys, read from the fresh replay
        final: dict[int, dict[str, object]] = {}
        for i in range(self.world.config.keys):
            final[i] = {}
            path = key_topic(i).replace("://", "/")
            for fld, rest in FIELD_PATHS.items():
                final[i][fld] = get_json(f"{fresh.url}/admin/v2/{path}/{rest}")
        if not any(x.stats.acked for x in self.writers):
            self.violations.append("no policy write was acknowledged: the write check saw nothing")
        lost = lost_writes(self.writers, final)
        self.result["lost_writes"] = lost
        if lost:
            self.violations.append(f"{len(lost)} acknowledged policy writes lost, e.g. {lost[:5]}")
        self._check_writer_answers()

    def _check_writer_answers(self) -> None:
        bad = [e for x in self.writers for e in x.stats.bad_5xx]
        if bad:
            self.violations.append(
                f"{len(bad)} valid policy writes answered 5xx other than 503 + Retry-After, "
                f"e.g. {bad[:3]}"
            )

    @staticmethod
    def _differing_keys(s: SidecarProc, fresh: SidecarProc) -> list[str]:
        try:
            mine = get_json(s.url + "/policy-sync/v1/entries")["entries"]
            theirs = get_json(fresh.url + "/policy-sync/v1/entries")["entries"]
        except (RuntimeError, ValueError, KeyError):
            return ["(entries unavailable)"]
        return sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))

    def _check_messages(self) -> None:
        m = self.messaging.stats
        lost, dups = m.lost(), m.duplicates_without_count()
        self.result["messages"] = {
            "sent": m.sent, "acked": len(m.acked), "delivered": len(m.deliveries),
            "lost": len(lost), "duplicates_without_redelivery_count": len(dups),
            "redelivered": m.redelivered(), "send_errors": dict(m.send_errors),
            "handshakes": {str(k): v for k, v in sorted(m.connect_status.items())},
            "connect_errors": dict(m.connect_errors), "reconnects": m.reconnects,
        }  # fmt: skip
        if not m.acked:
            self.violations.append("no message was acknowledged: the messaging check saw nothing")
        if lost:
            self.violations.append(f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}")
        if dups:
            self.violations.append(
                f"{len(dups)} messages delivered twice without a redelivery count, e.g. {dups[:5]}"
            )
        # A client's valid connect may be refused while a bundle moves or Kafka is away,
        # with 503 (+ Retry-After); any other 5xx is a bug whatever the fault.
        not_503 = {c: n for c, n in m.connect_status.items() if c >= 500 and c != 503}
        if not_503:
            self.violations.append(
                f"{sum(not_503.values())} WebSocket connects answered 5xx other than 503: {not_503}"
            )

    def _check_ownership(self) -> None:
        o = self.observer.stats
        liveness = self.world.config.session_timeout_ms / 1000
        took = [f.took for f in o.failovers if f.took is not None]
        never = [f for f in o.failovers if f.took is None]
        self.result["ownership"] = {
            "rounds": o.rounds, "bundles": len(o.bundles_seen),
            "double_owner_rounds": o.double_owner_rounds, "double_owners": o.double_owners[:20],
            "view_lag_rounds": o.view_lag_rounds,
            "failovers": len(o.failovers), "never_settled": len(never),
            "failover_p50_s": round(percentile(took, 0.5), 2),
            "failover_p99_s": round(percentile(took, 0.99), 2),
            "failover_max_s": round(max(took), 2) if took else None,
            "liveness_s": liveness,
            "each": [(f.how, f.victim, round(f.started, 1),
                      None if f.took is None else round(f.took, 2)) for f in o.failovers],
        }  # fmt: skip
        # The same figures apart for failovers that overlapped a Kafka broker's absence
        # (killed, until its restart was done): then ownership waits for Kafka itself.
        outages = kafka_outages(self.faults.faults, self.world.cluster.restarts)
        whole = [f.took for f in o.failovers
                 if f.took is not None and not overlaps(f.started, f.took, outages)]  # fmt: skip
        self.result["ownership"]["kafka_whole"] = {
            "failovers": len(whole),
            "failover_p50_s": round(percentile(whole, 0.5), 2),
            "failover_p99_s": round(percentile(whole, 0.99), 2),
        }
        if o.rounds == 0 or not o.bundles_seen:
            self.violations.append("the ownership observer saw no bundle at all")
        if o.double_owner_rounds:
            self.violations.append(
                f"double owners in {o.double_owner_rounds} of {o.rounds} rounds, "
                f"e.g. {o.double_owners[:3]}"
            )
        if never:
            self.violations.append(
                f"{len(never)} failovers never settled (survivors did not agree on a live owner)"
            )
        if took and percentile(took, 0.99) > 2 * liveness:
            self._missed_speed(
                f"failover p99 {percentile(took, 0.99):.2f}s > 2 x liveness ({2 * liveness:.1f}s)"
            )

    def _missed_speed(self, finding: str) -> None:
        """A speed target missed: a violation, or only reported when time checks are off."""
        if self.world.config.time_checks:
            self.violations.append(finding)
        else:
            self.timing_misses.append(finding)

    def _check_health(self) -> None:
        limit = self.world.config.healthy_within_s
        outages = kafka_outages(self.faults.faults, self.world.cluster.restarts)
        rows = []
        slow = []
        slow_whole: list[str] = []  # ... while every Kafka broker was up
        for f in self.faults.faults:
            if f.ended is None:
                continue
            per = {}
            for s in self.world.sidecars:
                rec = self.health.recovery(s.broker_id, f.ended)
                per[s.broker_id] = None if rec is None else round(rec, 1)
                if rec is None or rec > limit:
                    slow.append(f"{f.kind}({f.target})@{f.started:.0f}s: sidecar {s.broker_id} "
                                f"{'never' if rec is None else f'{rec:.1f}s'}")  # fmt: skip
                    if rec is not None and not overlaps(f.started, f.ended - f.started + rec,
                                                        outages):  # fmt: skip
                        slow_whole.append(slow[-1])
            rows.append({"kind": f.kind, "target": f.target, "at_s": round(f.started, 1),
                         "ended_s": round(f.ended, 1), "note": f.note,
                         "unhealthy_after_s": per})  # fmt: skip
        self.result["faults"] = rows
        self.result["not_healthy_in_time_kafka_whole"] = slow_whole
        restarts = self.world.cluster.restarts
        self.result["kafka_restarts"] = [dataclasses.asdict(r) for r in restarts]
        self.result["kafka_restarts_over_budget"] = sum(
            1 for r in restarts if r.took_s is None or r.took_s > RESTART_BUDGET_S
        )
        self.result["unhealthy_total_s"] = {
            s.broker_id: round(self.health.unhealthy_seconds(s.broker_id), 1)
            for s in self.world.sidecars
        }
        self.result["last_unhealthy_body"] = self.health.last_unhealthy_body
        self.result["election"] = self.health.election()
        self.result["health_max_sample_gap_s"] = {
            s.broker_id: round(self.health.max_gap(s.broker_id), 1) for s in self.world.sidecars
        }
        if not rows:
            self.violations.append("no fault was injected")
        if slow:
            self._missed_speed(
                f"{len(slow)} times a sidecar was not healthy {limit:.0f}s after a fault ended: "
                f"{slow[:6]}"
            )

    def _check_crashes(self) -> None:
        crashes = self.faults.crashes()
        self.result["crashes"] = [
            {"sidecar": c.broker_id, "pid": c.pid, "how": c.how, "at_s": round(c.at_s, 1),
             "expected_exit": c.expected, "log_tail": c.log_tail[-1200:]}
            for c in crashes
        ]  # fmt: skip
        self.result["exits"] = [(e.broker_id, e.how, e.expected) for e in self.faults.exits]
        if crashes:
            self.violations.append(
                f"{len(crashes)} sidecar crashes: "
                f"{[(c.broker_id, c.how, round(c.at_s)) for c in crashes]}"
            )

    def _check_fuzz(self) -> None:
        f, p = self.fuzz.stats, self.poison.stats
        self.result["http_fuzz"] = {
            "requests": f.requests,
            "by_status": {str(k): v for k, v in sorted(f.by_status.items())},
            "five_xx": f.five_xx(), "examples": f.server_errors[:15],
            "five_xx_to_valid_requests": {str(k): v for k, v in sorted(f.valid_five_xx.items())},
            "five_xx_to_valid_examples": f.valid_five_xx_examples[:15],
            "transport_errors": dict(f.transport_errors),
        }  # fmt: skip
        self.result["poison"] = {"records": p.total, "by_kind": dict(p.produced),
                                 "templates": p.templates, "delivery_errors": p.delivery_errors,
                                 "seed_error": p.seed_error}  # fmt: skip
        if f.five_xx():
            self.violations.append(f"{f.five_xx()} answers 5xx to malformed input, "
                                   f"e.g. {f.server_errors[:3]}")  # fmt: skip
        if f.valid_not_503():
            self.violations.append(
                f"{f.valid_not_503()} answers 5xx other than 503 to valid requests, "
                f"e.g. {[e for e in f.valid_five_xx_examples if ' 503 ' not in e][:3]}"
            )
        if p.total < self.world.config.poison_records:
            self.violations.append(
                f"only {p.total} poison records produced (want {self.world.config.poison_records})"
            )

    # ------------------------------------------------------------------------ teardown
    def teardown(self) -> None:
        w = self.world
        w.stop.set()
        running = [s for s in [*w.sidecars, *([self.fresh] if self.fresh else [])] if s.alive()]
        for s in running:
            s.signal(signal.SIGCONT)
            s.signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for s in running:
            ended = s.reap(w.t0, timeout=max(1.0, deadline - time.monotonic()))
            if ended is not None and ended.returncode != 0:
                # a clean stop (SIGTERM) that needed SIGKILL or exited non-zero
                self.result.setdefault("shutdown", []).append((ended.broker_id, ended.how))
        w.cluster.down()
