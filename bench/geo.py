"""Geo: a global policy write in one cluster → visible on every sidecar of the other.

Two clusters as ``docker/geo/geoctl.py up --free-ports`` starts them (two single-node Kafkas,
two sidecars each, MirrorMaker 2 both ways; state in a temporary directory, stopped with
``down --purge`` at the end). One writer sends N global writes (``maxConsumers?isGlobal=true``
of one topic, value 1, 2, …) to east's first sidecar, paced at most ``--rate`` writes/s
(default 20, at most 50: the latency goal is for a light load). After each write the other
east sidecar and both west sidecars are polled until they show the value; per write:

* ``local``: write sent → visible on the other east sidecar (its own global topic);
* ``geo``: write sent → visible on *every* west sidecar (MM2 copy + their mirror's tail).

Reported: p50/p99/max of both and of what crossing added to each write (geo − local: the
machine's own delays, which hit both, cancel out), errors, the MirrorMaker 2 settings in use
(its rendered ``mm2.properties``: the keys that set latency, and any ``--mm2-set``) and the
load average before and after (the machine may be shared: a figure from a busy machine is
not a measurement of record).

    python -m bench.geo [--writes 200] [--rate 20] [--poll-ms 2] [--mm2-set KEY=VALUE ...]
    python -m bench --only geo
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ._servers import http_status
from ._writeload import Conn

ROOT = Path(__file__).resolve().parent.parent
GEOCTL = ROOT / "docker" / "geo" / "geoctl.py"
MAX_RATE = 50.0
#: mm2.properties keys that set how fast a record crosses (the rest is plumbing).
_LATENCY_KEYS = ("linger", "fetch", "poll", "isolation", "offset.flush", "tasks.max", "batch")
#: The sidecars' tail of every global topic and mirror (sync.table.TableReader's default).
SIDECAR_TAIL_FETCH_WAIT_MS = 100


@contextlib.contextmanager
def geo_clusters(state: Path, mm2_set: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """``geoctl up --free-ports`` into ``state`` (``mm2_set``: more ``KEY=VALUE`` lines for
    ``mm2.properties``); ``down --purge`` on the way out."""
    base = [sys.executable, str(GEOCTL)]
    extra = [f for kv in mm2_set for f in ("--mm2-set", kv)]
    up = subprocess.run(  # noqa: S603 - our own launcher
        [*base, "up", "--free-ports", "--state-dir", str(state), *extra],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        if up.returncode != 0:
            raise RuntimeError(f"geoctl up failed:\n{up.stderr[-3000:]}")
        yield json.loads(Path(up.stdout.strip().splitlines()[-1]).read_text())
    finally:
        subprocess.run(  # noqa: S603
            [*base, "down", "--state-dir", str(state), "--purge"],
            capture_output=True,
            check=False,
        )


def mm2_settings(state: Path) -> dict[str, str]:
    """The latency-relevant keys of the ``mm2.properties`` MirrorMaker 2 runs with."""
    found: dict[str, str] = {}
    path = state / "mm2" / "mm2.properties"
    extra = False
    for line in path.read_text().splitlines():
        extra = extra or line.startswith("# extra settings")
        key, sep, value = line.partition("=")
        if line.startswith("#") or not sep:
            continue
        if extra or any(k in key for k in _LATENCY_KEYS):
            found[key.strip()] = value.strip()
    return found


async def _until_shows(url: str, path: str, want: bytes, poll_s: float, deadline: float) -> float:
    """Poll ``url+path`` until it answers ``want``; the monotonic time it did (inf: never)."""
    conn = Conn(url)
    while time.monotonic() < deadline:
        try:
            status, body = await conn.request("GET", path)
        except (OSError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            conn = Conn(url)
            status, body = 0, b""
        if status == 200 and body.strip() == want:
            return time.monotonic()
        await asyncio.sleep(poll_s)
    return float("inf")


async def _measure(
    endpoints: dict[str, Any], path: str, writes: int, rate: float, poll_s: float
) -> dict[str, Any]:
    east, west = endpoints["east"]["sidecars"], endpoints["west"]["sidecars"]
    writer = Conn(east[0])
    local_ms: list[float] = []
    geo_ms: list[float] = []
    errors: list[str] = []
    interval = 1.0 / rate
    next_at = time.monotonic()
    for i in range(1, writes + 1):
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        next_at = max(next_at + interval, time.monotonic())
        want = str(i).encode()
        started = time.monotonic()
        status, body = await writer.request("POST", path, want)
        if status // 100 != 2:
            errors.append(f"write {i}: {status} {body[:200]!r}")
            continue
        deadline = started + 30.0
        seen = await asyncio.gather(
            _until_shows(east[1], path, want, poll_s, deadline),
            *(_until_shows(u, path, want, poll_s, deadline) for u in west),
        )
        if any(t == float("inf") for t in seen):
            errors.append(f"write {i} not visible everywhere after 30 s")
            continue
        local_ms.append((seen[0] - started) * 1000)
        geo_ms.append((max(seen[1:]) - started) * 1000)
    return {"local": local_ms, "geo": geo_ms, "errors": errors}


def _stats(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    if not ordered:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": round(ordered[-1], 1)}


def run(bootstrap: str | None = None, *, writes: int = 200, rate: float = 20.0,
        poll_ms: float = 2.0, mm2_set: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """The benchmark (``bootstrap`` is ``make bench``'s broker: unused, geo runs its own)."""
    del bootstrap
    if not 0 < rate <= MAX_RATE:
        raise ValueError(f"--rate must be in (0, {MAX_RATE:g}] writes/s")
    with tempfile.TemporaryDirectory(prefix="bench-geo-") as tmp:
        state = Path(tmp)
        load_before = os.getloadavg()
        started = time.monotonic()
        with geo_clusters(state, mm2_set) as endpoints:
            up_s = time.monotonic() - started
            topic = f"/admin/v2/persistent/geo/ns/bench-{uuid.uuid4().hex[:8]}"
            for name in ("east", "west"):
                status = http_status("PUT", endpoints[name]["sidecars"][0] + topic)
                if status != 204:
                    raise RuntimeError(f"creating {topic} in {name}: HTTP {status}")
            path = f"{topic}/maxConsumers?isGlobal=true"
            measured = asyncio.run(_measure(endpoints, path, writes, rate, poll_ms / 1000))
            settings = mm2_settings(state)
        load_after = os.getloadavg()
    return {
        "writes": writes,
        "rate_per_s": rate,
        "poll_ms": poll_ms,
        "local_visible": _stats(measured["local"]),
        "geo_visible_all_west": _stats(measured["geo"]),
        # per write, what crossing added to the same write's local visibility
        "crossing_added": _stats(
            [g - lo for g, lo in zip(measured["geo"], measured["local"], strict=True)]
        ),
        "errors": len(measured["errors"]),
        "first_errors": measured["errors"][:3],
        "mm2_settings": settings,
        "sidecar_tail_fetch_wait_ms": SIDECAR_TAIL_FETCH_WAIT_MS,
        "geo_up_s": round(up_s, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.geo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help=f"writes/s, at most {MAX_RATE:g}")
    parser.add_argument("--poll-ms", type=float, default=2.0, help="pause between visibility polls")
    parser.add_argument(
        "--mm2-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more mm2.properties line (geoctl --mm2-set), e.g. "
        "east.consumer.fetch.max.wait.ms=10",
    )
    args = parser.parse_args()
    result = run(writes=args.writes, rate=args.rate, poll_ms=args.poll_ms, mm2_set=args.mm2_set)
    print(json.dumps({"geo": result}, indent=2))


if __name__ == "__main__":
    main()
