"""Issue 16: concurrent admin writes, a 3-sidecar cluster side by side with real Pulsar.

The same REST write load (``bench._writeload``: closed-loop topic-policy POSTs, one
keep-alive connection per writer, writers spread over the sidecars) runs against three
``broker-shim run`` processes sharing one change-events topic, and against Apache Pulsar
standalone started by ``docker/pulsar/pulsarctl.py`` (or ``$PULSARCTL``; or a running one
at ``$PULSAR_WEB_URL``). Rounds alternate between the two, 1, 8 and 64 writers each; the
best writes/s of the rounds is reported with its p50/p99. Single-writer write → visible:
the write goes to one sidecar and is polled on another (Pulsar: on its one broker).

Without a Pulsar launcher the policy-sync side still runs and the result says why Pulsar
is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.kafka import free_port

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "/admin/v2/persistent/public/default/bench"
WRITERS = (1, 8, 64)


def _http(method: str, url: str, body: bytes | None = None) -> int:
    req = urllib.request.Request(url, data=body, method=method)  # noqa: S310 - loopback
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _health(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:  # noqa: S310
            return dict(json.loads(resp.read()))
    except (OSError, ValueError):
        return None


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of ``pids`` so far (Linux ``/proc``), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


class Cluster(list[str]):
    """The sidecars' base URLs, and their process ids."""

    pids: list[int]


@contextlib.contextmanager
def sidecars(bootstrap: str, n: int = 3, extra: tuple[str, ...] = ()) -> Iterator[Cluster]:
    """``n`` sidecars on one fresh change-events topic; yields their base URLs."""
    topic = f"bench-ce-{uuid.uuid4().hex[:8]}"
    shim = str(Path(sys.executable).parent / "broker-shim")
    procs: list[subprocess.Popen[bytes]] = []
    urls = Cluster()
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as tmp:
        try:
            for i in range(n):
                port = free_port()
                log = open(Path(tmp) / f"shim-{i}.log", "wb")  # noqa: SIM115 - closed with tmp
                procs.append(
                    subprocess.Popen(  # noqa: S603 - our own CLI
                        [shim, "run", "--broker-id", str(i), "--http-port", str(port),
                         "--bootstrap-servers", bootstrap, "--topic", topic,
                         "--state-dir", str(Path(tmp) / f"state-{i}"),
                         "--broker-port", "0", *extra],
                        stdout=log, stderr=subprocess.STDOUT,
                    )  # fmt: skip
                )
                urls.append(f"http://127.0.0.1:{port}")
            deadline = time.monotonic() + 120
            while True:
                views = [_health(u) for u in urls]
                ready = all(v is not None and v.get("state") == "READY" for v in views)
                holders = {v["writer"].get("holder") for v in views if v is not None}
                if ready and ("--no-forward-writes" in extra or len(holders - {None}) == 1):
                    if "--no-forward-writes" in extra or None not in holders:
                        break
                if time.monotonic() > deadline:
                    tails = [
                        (Path(tmp) / f"shim-{i}.log").read_text(errors="replace")[-1500:]
                        for i, v in enumerate(views)
                        if v is None
                    ]
                    raise RuntimeError(f"sidecars not ready: {views}\n" + "\n".join(tails))
                time.sleep(0.2)
            urls.pids = [p.pid for p in procs]
            yield urls
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _pulsarctl() -> Path | None:
    env = os.environ.get("PULSARCTL")
    path = Path(env) if env else ROOT / "docker" / "pulsar" / "pulsarctl.py"
    return path if path.exists() else None


@contextlib.contextmanager
def pulsar() -> Iterator[str | None]:
    """A Pulsar standalone's web URL (None if there is no launcher)."""
    running = os.environ.get("PULSAR_WEB_URL")
    if running:
        yield running.rstrip("/")
        return
    ctl = _pulsarctl()
    if ctl is None:
        yield None
        return
    web, broker = free_port(), free_port()
    out = subprocess.run(  # noqa: S603 - the project's launcher
        [sys.executable, str(ctl), "up", "--web-port", str(web), "--broker-port", str(broker)],
        check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    url = out.stdout.strip().splitlines()[-1]
    try:
        yield url
    finally:
        subprocess.run(  # noqa: S603
            [sys.executable, str(ctl), "down", "--web-port", str(web), "--purge"],
            check=False, capture_output=True, timeout=120,
        )  # fmt: skip


def _load(targets: list[str], writers: int, duration: float, base: int,
          visible: str | None = None, pids: list[int] | None = None) -> dict[str, Any]:  # fmt: skip
    cmd = [
        sys.executable, "-m", "bench._writeload", "--targets", ",".join(targets),
        "--writers", str(writers), "--duration", str(duration), "--base", str(base),
        "--prefix", PREFIX,
    ]  # fmt: skip
    if visible:
        cmd += ["--visible", visible]
    before = cpu_seconds(pids) if pids else 0.0
    out = subprocess.run(  # noqa: S603
        cmd, check=True, capture_output=True, text=True, timeout=duration + 300, cwd=ROOT
    )
    result = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    if pids:
        # Includes the warm-up second: CPU per write of the servers, whatever the load.
        used = cpu_seconds(pids) - before
        done = max(1.0, result["writes"] * (1 + 1 / duration))
        result["server_cpu_ms_per_write"] = round(used * 1000 / done, 2)
    return result


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return max(runs, key=lambda r: r["writes_per_s"])


def run(bootstrap: str, *, duration: float = 8.0, rounds: int = 2) -> dict[str, Any]:
    """Every figure of issue 16, both systems in the same run."""
    result: dict[str, Any] = {"duration_s": duration, "rounds": rounds}
    base = int(time.time()) % 1000 * 1_000_000
    with pulsar() as pulsar_url, sidecars(bootstrap) as urls:
        if pulsar_url is None:
            result["pulsar"] = "no launcher (docker/pulsar/pulsarctl.py or $PULSARCTL)"
        for base_url in [urls[0]] + ([pulsar_url] if pulsar_url else []):
            for k in range(max(WRITERS)):  # policies are set on existing topics only
                _http("PUT", f"{base_url}{PREFIX}-{k}")
        runs: dict[str, dict[int, list[dict[str, Any]]]] = {"policy-sync": {}, "pulsar": {}}
        for _ in range(rounds):
            for n in WRITERS:
                base += 1_000
                runs["policy-sync"].setdefault(n, []).append(
                    _load(urls, n, duration, base, pids=urls.pids)
                )
                if pulsar_url is not None:
                    runs["pulsar"].setdefault(n, []).append(
                        _load([pulsar_url], n, duration, base)
                    )
        for side, by_n in runs.items():
            for n, per_round in by_n.items():
                result[f"{side} {n} writers"] = _best(per_round)
                result[f"{side} {n} writers, all rounds"] = [
                    (r["writes_per_s"], r["p50_ms"], r["p99_ms"]) for r in per_round
                ]
        # Which sidecar holds the fence is the election's choice: measure a write sent to
        # the holder and one sent to a sidecar that forwards it, each seen on a third one.
        holder = (_health(urls[0]) or {}).get("writer", {}).get("holder")
        others = [u for u in urls if u != holder]
        if holder in urls and len(others) >= 2:
            cases = {"via the fence holder": (holder, others[0]),
                     "forwarded": (others[0], others[1])}  # fmt: skip
        else:
            cases = {"holder unknown": (urls[0], urls[1])}
        for label, (to, seen) in cases.items():
            base += 1_000
            result[f"policy-sync write->visible on another sidecar, {label}"] = _load(
                [to], 1, duration, base, visible=seen
            )
        if pulsar_url is not None:
            result["pulsar write->visible"] = _load(
                [pulsar_url], 1, duration, base, visible=pulsar_url
            )
        statuses = [_health(u) for u in urls]
        result["sidecar writers"] = [None if s is None else s["writer"] for s in statuses]
    # The same cluster without forwarding: every sidecar takes the fence for its own writes
    # (group commit inside each sidecar; the fence moves between them).
    with sidecars(bootstrap, extra=("--no-forward-writes",)) as urls:
        for k in range(max(WRITERS)):
            _http("PUT", f"{urls[0]}{PREFIX}-{k}")
        for n in WRITERS[1:]:
            base += 1_000
            result[f"policy-sync {n} writers, no forwarding"] = _load(
                urls, n, duration, base, pids=urls.pids
            )
    if pulsar_url is not None:
        for n in WRITERS:
            ours, theirs = result[f"policy-sync {n} writers"], result[f"pulsar {n} writers"]
            result[f"ratio {n} writers (writes/s)"] = round(
                ours["writes_per_s"] / max(theirs["writes_per_s"], 0.1), 2
            )
    return result


if __name__ == "__main__":
    print(json.dumps(run(os.environ["KAFKA_BOOTSTRAP_SERVERS"]), indent=2))
