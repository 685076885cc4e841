"""HTTP/1.1 keep-alive GET load generator, run as a separate process by ``bench.lookup``.

Stdlib only (asyncio streams): a client library's own overhead would be measured instead
of the server. Two modes:

* closed loop (``--rate 0``): each connection sends its next request when the previous
  answer arrives; measures the most the server sustains;
* open loop (``--rate R``): requests are scheduled at ``R``/s in total and latency is
  measured from the *scheduled* send time, so a stalled server is not hidden by the
  client waiting for it (no coordinated omission).

Prints one JSON object: requests, errors, seconds, rate, and latency percentiles in ms.

    python -m bench._loadgen --port 8080 --paths FILE [--connections 16] [--duration 5]
        [--rate 0] [--warmup 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
            break
    if length:
        await reader.readexactly(length)
    return status


async def _connection(
    host: str,
    port: int,
    requests: list[bytes],
    offset: int,
    deadline: float,
    interval: float,
    start: float,
    record: bool,
    latencies: list[float],
    errors: list[int],
) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    sent = 0
    i = offset
    next_at = start
    try:
        while True:
            if interval > 0:
                next_at += interval
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                began = next_at
            else:
                began = time.perf_counter()
            if began >= deadline:
                return sent
            status = await _one(reader, writer, requests[i % len(requests)])
            i += 1
            sent += 1
            if record:
                latencies.append(time.perf_counter() - began)
                if status != 200:
                    errors.append(status)
    finally:
        writer.close()


async def _phase(
    host: str,
    port: int,
    requests: list[bytes],
    connections: int,
    seconds: float,
    rate: float,
    record: bool,
) -> tuple[list[float], list[int], float]:
    latencies: list[float] = []
    errors: list[int] = []
    start = time.perf_counter()
    deadline = start + seconds
    interval = connections / rate if rate > 0 else 0.0
    tasks = [
        _connection(
            host,
            port,
            requests,
            c * 997,
            deadline,
            interval,
            start + (interval * c / connections),
            record,
            latencies,
            errors,
        )
        for c in range(connections)
    ]
    await asyncio.gather(*tasks)
    return latencies, errors, time.perf_counter() - start


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[index] * 1000.0


async def _main(args: argparse.Namespace) -> dict[str, object]:
    paths = [p for p in Path(args.paths).read_text().splitlines() if p]
    host = args.host
    requests = [
        f"GET {p} HTTP/1.1\r\nHost: {host}:{args.port}\r\nConnection: keep-alive\r\n\r\n".encode()
        for p in paths
    ]
    if args.warmup > 0:
        await _phase(host, args.port, requests, args.connections, args.warmup, args.rate, False)
    latencies, errors, seconds = await _phase(
        host, args.port, requests, args.connections, args.duration, args.rate, True
    )
    latencies.sort()
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "error_statuses": sorted(set(errors)),
        "seconds": round(seconds, 3),
        "rate": round(len(latencies) / seconds, 1),
        "offered_rate": args.rate,
        "connections": args.connections,
        "p50_ms": round(_percentile(latencies, 0.50), 3),
        "p90_ms": round(_percentile(latencies, 0.90), 3),
        "p99_ms": round(_percentile(latencies, 0.99), 3),
        "p999_ms": round(_percentile(latencies, 0.999), 3),
        "max_ms": round(latencies[-1] * 1000.0, 3) if latencies else None,
    }


def main(argv: list[str] | None = None) -> None:
    """Entry point: run one measurement and print it as JSON."""
    parser = argparse.ArgumentParser(prog="bench._loadgen")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--paths", required=True, help="file with one request path per line")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument(
        "--rate", type=float, default=0.0, help="requests/s in total; 0: closed loop"
    )
    args = parser.parse_args(argv)
    result = asyncio.run(_main(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
