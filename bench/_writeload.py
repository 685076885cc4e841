"""Closed-loop REST write load (topic-policy POSTs), run as a separate process by
``bench.writes`` against policy-sync sidecars or a real Pulsar alike.

Stdlib only (asyncio streams, HTTP/1.1 keep-alive, one connection per writer): the
generator shares the machine with the servers. Writer *k* talks to ``targets[k % len]``
and sets ``maxConsumers`` of its own topic to base+1, base+2, ... (each write changes it),
sending its next write when the previous answer arrived. Prints one JSON object: writes,
errors, seconds, writes/s, latency percentiles (ms), and the load average.

``--visible URL``: single-writer mode measuring write → visible: after each write answered,
GET the policy from ``URL`` (another sidecar) until it shows the value; the time from
sending the write to seeing it is the figure.

    python -m bench._writeload --targets URL[,URL...] --writers N --duration S
        [--prefix /admin/v2/persistent/public/default/bench] [--visible URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from urllib.parse import urlsplit

POLICY = "maxConsumers"


class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None  # noqa: S101
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        status = int(status_line.split()[1])
        length, chunked, close = 0, False, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                chunked = True
            elif name == "connection" and value == "close":
                close = True
        payload = b""
        if chunked:
            while True:
                size = int((await self.reader.readline()).strip() or b"0", 16)
                if size == 0:
                    await self.reader.readline()
                    break
                payload += await self.reader.readexactly(size)
                await self.reader.readline()
        elif length:
            payload = await self.reader.readexactly(length)
        if close:
            self.writer.close()
            self.writer = None
        return status, payload


async def _writer(
    k: int, url: str, prefix: str, until: float, warm_until: float, out: list[float],
    errors: list[str], visible: str | None, base: int,
) -> None:  # fmt: skip
    conn = Conn(url)
    probe = Conn(visible) if visible else None
    path = f"{prefix}-{k}/{POLICY}"
    i = base
    while time.monotonic() < until:
        i += 1
        started = time.monotonic()
        try:
            status, body = await conn.request("POST", path, str(i).encode())
        except (OSError, ConnectionError, ValueError, asyncio.IncompleteReadError) as exc:
            errors.append(repr(exc))
            conn = Conn(url)
            continue
        if status // 100 != 2:
            errors.append(f"{status} {body[:200]!r}")
            continue
        if probe is not None:
            want = str(i).encode()
            while True:
                status, body = await probe.request("GET", path)
                if status == 200 and body.strip() == want:
                    break
                if time.monotonic() - started > 30:
                    errors.append(f"write {i} not visible on {visible} after 30 s")
                    break
        if started >= warm_until:
            out.append(time.monotonic() - started)


async def _run(args: argparse.Namespace) -> dict[str, object]:
    targets = args.targets.split(",")
    now = time.monotonic()
    warm_until = now + args.warmup
    until = warm_until + args.duration
    latencies: list[float] = []
    errors: list[str] = []
    load_before = os.getloadavg()
    cpu_before = os.times()
    await asyncio.gather(
        *(
            _writer(k, targets[k % len(targets)], args.prefix, until, warm_until, latencies,
                    errors, args.visible, args.base)  # fmt: skip
            for k in range(args.writers)
        )
    )
    ordered = sorted(latencies)
    cpu = os.times()

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {
        "writers": args.writers,
        "writes": len(ordered),
        "errors": len(errors),
        "first_errors": errors[:3],
        "seconds": args.duration,
        "writes_per_s": round(len(ordered) / args.duration, 1),
        "p50_ms": pct(0.50) if ordered else None,
        "p99_ms": pct(0.99) if ordered else None,
        "max_ms": pct(1.0) if ordered else None,
        "generator_cpu_s": round(cpu.user + cpu.system - cpu_before.user - cpu_before.system, 2),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._writeload")
    parser.add_argument("--targets", required=True)
    parser.add_argument("--writers", type=int, default=1)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--prefix", default="/admin/v2/persistent/public/default/bench")
    parser.add_argument("--visible", default=None)
    parser.add_argument(
        "--base", type=int, default=0, help="values start after this (each write must change)"
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_run(args))))


if __name__ == "__main__":
    main()
