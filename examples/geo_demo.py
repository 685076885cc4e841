"""``make geo-demo``: global policies across two clusters joined by MirrorMaker 2.

Starts two clusters with ``docker/geo/geoctl.py up`` (east and west: a Kafka and two
sidecars each, MirrorMaker 2 both ways; free ports, state in a temporary directory), then:

1. a global policy written in east shows on both west sidecars;
2. the same key written in east and in west at the same moment ends with one value on all
   four sidecars: the same winning stamp everywhere (last writer by hybrid timestamp, a tie
   to the higher cluster id);
3. a local policy stays in its cluster;
4. a replication cluster that is not registered is refused with Pulsar's status and
   reason, and nothing is written;

and stops everything (``geoctl down --purge``). :func:`tour` is the part after start-up,
run by ``tests/integration/sync/geo/test_geo_tools.py`` on the tests' geo clusters.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sync.constants import SIDECAR_GLOBAL_ENTRIES_PATH
from sync.geo import unpack_hlc

ROOT = Path(__file__).resolve().parent.parent
GEOCTL = ROOT / "docker" / "geo" / "geoctl.py"
WAIT_S = 60.0


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def http(method: str, url: str, body: object = None) -> tuple[int, Any]:
    """One JSON request; (status, decoded body or None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - loopback URLs built here
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310
            raw = resp.read()
            return int(resp.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return exc.code, raw.decode(errors="replace")


def wait_until(check: Callable[[], bool], what: str) -> float:
    """Seconds until ``check()`` holds (raises after :data:`WAIT_S`)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > WAIT_S:
            raise RuntimeError(f"not after {WAIT_S:.0f}s: {what}")
        time.sleep(0.01)
    return time.monotonic() - started


def _name(url: str, endpoints: dict[str, Any]) -> str:
    for cluster in ("east", "west"):
        if url in endpoints[cluster]["sidecars"]:
            return f"{cluster}-{endpoints[cluster]['sidecars'].index(url) + 1}"
    return url


def tour(endpoints: dict[str, Any], out: Callable[[str], None] = print) -> dict[str, Any]:
    """The demo on running clusters; returns what it saw (for its test)."""
    east, west = endpoints["east"]["sidecars"], endpoints["west"]["sidecars"]
    every = [*east, *west]
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    path = f"/admin/v2/persistent/geo/ns/{topic}"
    seen: dict[str, Any] = {"topic": f"persistent://geo/ns/{topic}"}
    for base in (east[0], west[0]):  # as Pulsar's namespace replication creates it in each
        status, body = http("PUT", base + path)
        if status != 204:
            raise RuntimeError(f"PUT {base}{path}: {status} {body}")

    def value(url: str, policy: str) -> Any:
        return http("GET", f"{url}{path}/{policy}")[1]

    say("1. A global policy written in east shows in west")
    written = time.monotonic()
    http("POST", f"{east[0]}{path}/maxConsumers?isGlobal=true", 5)
    out(f"POST east-1 {seen['topic']} maxConsumers=5 (isGlobal=true)")
    for url in west:
        wait_until(
            lambda url=url: value(url, "maxConsumers?isGlobal=true") == 5,  # type: ignore[misc]
            f"maxConsumers=5 on {url}",
        )
        took = time.monotonic() - written
        out(f"  {_name(url, endpoints)} shows 5, {took * 1000:.0f} ms after the write was sent")
    seen["crossed"] = [value(u, "maxConsumers?isGlobal=true") for u in west]

    say("2. East and west write the same key at once: one winner on every sidecar")
    writes = [(east[0], 111), (west[1], 222)]
    threads = [
        threading.Thread(
            target=lambda u=u, v=v: http("POST", f"{u}{path}/messageTTL?isGlobal=true", v)
        )
        for u, v in writes
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    out("POST east-1 messageTTL=111 and west-2 messageTTL=222 (isGlobal=true), concurrently")
    wait_until(
        lambda: len({json.dumps(value(u, "messageTTL?isGlobal=true")) for u in every}) == 1,
        "one messageTTL on every sidecar",
    )
    key = f"__G__{seen['topic']}"
    stamps = []
    for url in every:
        entry = http("GET", url + SIDECAR_GLOBAL_ENTRIES_PATH)[1]["entries"][key]
        stamps.append((entry["hlc"], entry["cluster"], entry["eventId"]))
        ttl = value(url, "messageTTL?isGlobal=true")
        ms, counter = unpack_hlc(int(entry["hlc"]))
        at = datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
        out(
            f"  {_name(url, endpoints)}: messageTTL={ttl}  winner: {entry['cluster']} "
            f"hlc {at}+{counter} event {entry['eventId'][:8]}"
        )
    seen["winners"] = sorted(set(stamps))
    out(
        "  the same stamp everywhere: last writer by hybrid timestamp, a tie to the higher "
        "cluster id (policy-audit geo lists both writes and why one won)"
    )

    say("3. A local policy stays in its cluster")
    http("POST", f"{east[0]}{path}/maxProducers", 3)
    out("POST east-1 maxProducers=3 (local)")
    wait_until(lambda: value(east[1], "maxProducers") == 3, "maxProducers=3 on east-2")
    out("  east-2 shows 3")
    seen["local_in_west"] = [value(u, "maxProducers") for u in west]
    for url in west:
        out(f"  {_name(url, endpoints)} has no local maxProducers: {value(url, 'maxProducers')}")

    say("4. A replication cluster that is not registered is refused, nothing written")
    status, body = http("POST", f"{east[0]}{path}/replication", ["east", "nowhere"])
    reason = body.get("reason") if isinstance(body, dict) else body
    out(f'POST east-1 replication ["east", "nowhere"] -> {status} {reason}')
    seen["refusal"] = (status, reason)
    stored = value(east[0], "replication")
    out(f"  east-1 replication clusters: {stored}")
    seen["replication_after"] = stored
    return seen


def main() -> None:
    base = [sys.executable, str(GEOCTL)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="policy-sync-geo-demo-") as tmp:
        state = Path(tmp)
        say("Starting two clusters (east, west) and MirrorMaker 2 both ways")
        up = subprocess.run(  # noqa: S603 - our own launcher
            [*base, "up", "--free-ports", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            if up.returncode != 0:
                print(up.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"geoctl up failed (exit {up.returncode})")
            endpoints = json.loads(Path(up.stdout.strip().splitlines()[-1]).read_text())
            print(f"up in {time.monotonic() - started:.0f}s")
            for cluster in ("east", "west"):
                urls = ", ".join(endpoints[cluster]["sidecars"])
                print(f"  {cluster}: Kafka {endpoints[cluster]['bootstrap']}, sidecars {urls}")
            tour(endpoints)
        finally:
            say("Stopping both clusters and MirrorMaker 2")
            subprocess.run(  # noqa: S603
                [*base, "down", "--state-dir", str(state), "--purge"],
                capture_output=True,
                check=False,
            )
    print(f"done in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
