"""Issue 16: concurrent admin writes, a 3-sidecar cluster side by side with real Pulsar.

The same REST write load (``bench._writeload``: closed-loop topic-policy POSTs, one
keep-alive connection per writer, writers spread over the sidecars) runs against three
``broker-shim run`` processes sharing one change-events topic, and against Apache Pulsar
standalone started by ``docker/pulsar/pulsarctl.py`` (or ``$PULSARCTL``; or a running one
at ``$PULSAR_WEB_URL``). Rounds alternate between the two, 1, 8 and 64 writers each; the
best writes/s of the rounds is reported with its p50/p99. Single-writer write → visible:
the write goes to one sidecar and is polled on another (Pulsar: on its one broker).

Without a Pulsar launcher (or with ``BENCH_NO_PULSAR=1``) the policy-sync side still runs
and the result says why Pulsar is missing.

``--sources PATH[,PATH…]`` also runs a 3-sidecar cluster from each of those checkouts (e.g.
a git worktree of an older commit), interleaved round by round with this checkout's, so a
before/after comparison shares one machine state; their figures are keyed
``policy-sync@<folder> …``. Run alone: ``python -m bench.writes`` (``--writers 1,8``,
``--duration``, ``--rounds``; uses ``$KAFKA_BOOTSTRAP_SERVERS`` or starts Kafka).
"""

from __future__ import annotations

import argparse
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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ._servers import free_port, http_status, shim_command, source_label

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "/admin/v2/persistent/public/default/bench"
WRITERS = (1, 8, 64)


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
def sidecars(
    bootstrap: str, n: int = 3, extra: tuple[str, ...] = (), source: Path | None = None
) -> Iterator[Cluster]:
    """``n`` sidecars on one fresh change-events topic, in a cluster of their own (so
    another checkout's can run beside them); yields their base URLs. ``source``: run that
    checkout's code (:func:`bench._servers.shim_command`)."""
    topic = f"bench-ce-{uuid.uuid4().hex[:8]}"
    cluster = f"writes{uuid.uuid4().hex[:8]}"
    shim = shim_command(source)
    procs: list[subprocess.Popen[bytes]] = []
    urls = Cluster()
    with tempfile.TemporaryDirectory(prefix="bench-writes-") as tmp:
        try:
            for i in range(n):
                port = free_port()
                log = open(Path(tmp) / f"shim-{i}.log", "wb")  # noqa: SIM115 - closed with tmp
                procs.append(
                    subprocess.Popen(  # noqa: S603 - our own CLI
                        [
                            *shim.argv,
                            "run",
                            "--broker-id",
                            str(i),
                            "--http-port",
                            str(port),
                            "--bootstrap-servers",
                            bootstrap,
                            "--topic",
                            topic,
                            "--cluster",
                            cluster,
                            "--state-dir",
                            str(Path(tmp) / f"state-{i}"),
                            "--broker-port",
                            "0",
                            *extra,
                        ],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=shim.cwd,
                        env=shim.env,
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
    if ctl is None or os.environ.get("BENCH_NO_PULSAR"):
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


def run(
    bootstrap: str,
    *,
    duration: float = 8.0,
    rounds: int = 2,
    writers: Sequence[int] = WRITERS,
    sources: Sequence[Path] = (),
) -> dict[str, Any]:
    """Every figure of issue 16, both systems in the same run; with ``sources``, those
    checkouts' sidecars too, interleaved with this one's (keys ``policy-sync@<folder>``)."""
    result: dict[str, Any] = {"duration_s": duration, "rounds": rounds}
    base = int(time.time()) % 1000 * 1_000_000
    sides: list[Path | None] = [None, *sources]
    names = [source_label("policy-sync", src) for src in sides]
    if sources:
        result["sides"] = names
    with pulsar() as pulsar_url, contextlib.ExitStack() as stack:
        clusters = [stack.enter_context(sidecars(bootstrap, source=src)) for src in sides]
        if pulsar_url is None:
            result["pulsar"] = "no launcher (docker/pulsar/pulsarctl.py or $PULSARCTL)"
        for base_url in [c[0] for c in clusters] + ([pulsar_url] if pulsar_url else []):
            for k in range(max(writers)):  # policies are set on existing topics only
                http_status("PUT", f"{base_url}{PREFIX}-{k}")
        runs: dict[str, dict[int, list[dict[str, Any]]]] = {name: {} for name in names}
        runs["pulsar"] = {}
        for _ in range(rounds):
            for n in writers:
                for name, urls in zip(names, clusters, strict=True):
                    base += 1_000
                    runs[name].setdefault(n, []).append(
                        _load(urls, n, duration, base, pids=urls.pids)
                    )
                if pulsar_url is not None:
                    runs["pulsar"].setdefault(n, []).append(_load([pulsar_url], n, duration, base))
        for side, by_n in runs.items():
            for n, per_round in by_n.items():
                result[f"{side} {n} writers"] = _best(per_round)
                result[f"{side} {n} writers, all rounds"] = [
                    (r["writes_per_s"], r["p50_ms"], r["p99_ms"]) for r in per_round
                ]
        for name, urls in zip(names, clusters, strict=True):
            base = _visible(result, name, urls, duration, base)
        if pulsar_url is not None:
            result["pulsar write->visible"] = _load(
                [pulsar_url], 1, duration, base, visible=pulsar_url
            )
        for name, urls in zip(names, clusters, strict=True):
            statuses = [_health(u) for u in urls]
            key = "sidecar writers" if name == names[0] else f"{name} sidecar writers"
            result[key] = [None if s is None else s["writer"] for s in statuses]
    # The same clusters without forwarding: every sidecar takes the fence for its own
    # writes (group commit inside each sidecar; the fence moves between them).
    with contextlib.ExitStack() as stack:
        clusters = [
            stack.enter_context(sidecars(bootstrap, extra=("--no-forward-writes",), source=src))
            for src in sides
        ]
        for urls in clusters:
            for k in range(max(writers)):
                http_status("PUT", f"{urls[0]}{PREFIX}-{k}")
        for n in writers[1:]:
            for name, urls in zip(names, clusters, strict=True):
                base += 1_000
                result[f"{name} {n} writers, no forwarding"] = _load(
                    urls, n, duration, base, pids=urls.pids
                )
    if pulsar_url is not None:
        for name in names:
            for n in writers:
                ours, theirs = result[f"{name} {n} writers"], result[f"pulsar {n} writers"]
                prefix = "" if name == names[0] else f"{name} "
                result[f"{prefix}ratio {n} writers (writes/s)"] = round(
                    ours["writes_per_s"] / max(theirs["writes_per_s"], 0.1), 2
                )
    return result


def _visible(result: dict[str, Any], name: str, urls: Cluster, duration: float, base: int) -> int:
    """Single-writer write -> visible on another sidecar of ``urls``, into ``result``;
    returns the next free ``base``."""
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
        result[f"{name} write->visible on another sidecar, {label}"] = _load(
            [to], 1, duration, base, visible=seen
        )
    return base


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.writes")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per load run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--writers", default=",".join(map(str, WRITERS)), help="comma-separated writer counts"
    )
    parser.add_argument(
        "--sources",
        default=None,
        help="other checkouts, comma-separated (e.g. a git worktree of an older commit): "
        "their sidecars run too, interleaved with this checkout's (before and after)",
    )
    args = parser.parse_args()
    sources = [Path(p).resolve() for p in args.sources.split(",")] if args.sources else []
    counts = [int(n) for n in args.writers.split(",")]
    kwargs: dict[str, Any] = {
        "duration": args.duration,
        "rounds": args.rounds,
        "writers": counts,
        "sources": sources,
    }
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap is None:
        sys.path.insert(0, str(ROOT))
        from tests.support.kafka import kafka_for_tests

        with kafka_for_tests() as started:
            print(json.dumps(run(started, **kwargs), indent=2))
        return
    print(json.dumps(run(bootstrap, **kwargs), indent=2))


if __name__ == "__main__":
    main()
