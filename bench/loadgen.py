"""HTTP/1.1 keep-alive GET load generator, run as a separate process by ``bench.lookup``.

Stdlib only (asyncio protocols, no streams or client library): the generator shares the
machine with the server, and every microsecond it spends per request is taken from the
server and shows up as latency. Two modes:

* closed loop (``--rate 0``): each connection sends its next request when the previous
  answer arrives; measures the most the server sustains;
* open loop (``--rate R``): one pacer schedules request *k* at ``start + k/R`` and hands
  it to whichever connection of the pool is free (a request waits in a backlog when none
  is). Latency is measured from the *scheduled* time, so a stalled server is not hidden
  by the client waiting for it (no coordinated omission), and a slow answer on one
  connection does not hold back requests another connection could send (no head-of-line
  blocking made by the generator). The pool must be larger than the rate times the
  latency; ``peak_in_flight`` shows how much of it was used.

Besides the latency percentiles, the open loop reports ``send_lag_*``: how late requests
left the generator compared with their schedule. Latency from the schedule includes it on
purpose (a starved CPU or an overloaded client is part of what a caller sees); a large
``send_lag`` beside a small latency over it says the generator or the host fell behind,
not the server.

Prints one JSON object: requests, errors, seconds, rate, latency percentiles in ms, the
generator's CPU time, how many CPU cores the whole machine kept busy meanwhile, and the
load average before and after: on a shared machine, read a latency with the load beside it.

    python -m bench.loadgen --port 8080 --paths FILE [--connections 16] [--duration 5]
        [--rate 0] [--warmup 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import deque
from pathlib import Path

_HEAD_END = b"\r\n\r\n"
_CONTENT_LENGTH = b"content-length:"


class Phase:
    """One measured (or warm-up) run: the pool, the backlog and what was observed."""

    def __init__(self, requests: list[bytes], record: bool, closed_until: float | None) -> None:
        self.requests = requests
        self.record = record
        #: Closed loop: connections send again on each answer until this time.
        self.closed_until = closed_until
        self.idle: deque[_Connection] = deque()
        self.backlog: deque[float] = deque()
        self.latencies: list[float] = []
        #: When each recorded request was due (parallel to ``latencies``).
        self.schedules: list[float] = []
        self.send_lags: list[float] = []
        self.errors: list[int] = []
        self.next_request = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.pacing = closed_until is None
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def request(self) -> bytes:
        self.next_request += 1
        return self.requests[self.next_request % len(self.requests)]

    def submit(self, scheduled: float) -> None:
        """A request is due: send it on a free connection, or queue it."""
        if self.idle:
            self.idle.pop().send(scheduled)
        else:
            self.backlog.append(scheduled)

    def answered(self, conn: _Connection, status: int, scheduled: float, sent: float) -> None:
        now = time.perf_counter()
        if self.record:
            self.latencies.append(now - scheduled)
            self.schedules.append(scheduled)
            self.send_lags.append(sent - scheduled)
            if status != 200:
                self.errors.append(status)
        if self.closed_until is not None:
            if now < self.closed_until:
                conn.send(now)
        elif self.backlog:
            conn.send(self.backlog.popleft())
        else:
            self.idle.append(conn)
        self._check_done()

    def pacing_done(self) -> None:
        self.pacing = False
        self._check_done()

    def _check_done(self) -> None:
        if self.in_flight == 0 and not self.pacing and not self.finished.done():
            self.finished.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if not self.finished.done():
            self.finished.set_exception(exc)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: at most one request outstanding."""

    def __init__(self, phase: Phase) -> None:
        self.phase = phase
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.scheduled = 0.0
        self.sent = 0.0
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, scheduled: float) -> None:
        assert self.transport is not None and not self.busy
        phase = self.phase
        self.busy = True
        phase.in_flight += 1
        phase.peak_in_flight = max(phase.peak_in_flight, phase.in_flight)
        self.scheduled = scheduled
        self.sent = time.perf_counter()
        self.transport.write(phase.request())

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(_HEAD_END)
        if end < 0:
            return
        head = self.buffer[:end]
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == _CONTENT_LENGTH:
                length = int(line[15:])
                break
        total = end + 4 + length
        if len(self.buffer) < total:
            return
        if len(self.buffer) > total:
            self.phase.fail(RuntimeError("the server answered more than was asked"))
            return
        self.buffer = b""
        self.busy = False
        self.phase.in_flight -= 1
        self.phase.answered(self, int(head[9:12]), self.scheduled, self.sent)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy:
            self.phase.fail(ConnectionError(f"the server closed a connection: {exc}"))


async def _pace(phase: Phase, start: float, deadline: float, rate: float) -> None:
    """Submit request k at ``start + k/rate``.

    The loop timer is coarse (epoll waits in whole milliseconds), so each wake-up submits
    every request that became due; their latency still counts from their own schedule.
    """
    k = 0
    while True:
        now = time.perf_counter()
        while True:
            scheduled = start + k / rate
            if scheduled >= deadline:
                return
            if scheduled > now:
                break
            phase.submit(scheduled)
            k += 1
        await asyncio.sleep(scheduled - now)


async def run_phase(
    host: str,
    port: int,
    requests: list[bytes],
    connections: int,
    seconds: float,
    rate: float,
    record: bool,
) -> tuple[Phase, float]:
    loop = asyncio.get_running_loop()
    phase = Phase(requests, record, None if rate > 0 else float("inf"))
    conns: list[_Connection] = []
    try:
        for _ in range(connections):
            _, conn = await loop.create_connection(lambda: _Connection(phase), host, port)
            conns.append(conn)
        start = time.perf_counter()
        deadline = start + seconds
        if rate > 0:
            phase.idle.extend(conns)
            await _pace(phase, start, deadline, rate)
        else:
            phase.closed_until = deadline
            for conn in conns:
                conn.send(time.perf_counter())
        phase.pacing_done()
        await phase.finished
        return phase, time.perf_counter() - start
    finally:
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return round(sorted_values[index] * 1000.0, 3)


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _host_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine so far (Linux ``/proc/stat``)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick


async def _main(args: argparse.Namespace) -> dict[str, object]:
    paths = [p for p in Path(args.paths).read_text().splitlines() if p]
    host = args.host
    requests = [
        f"GET {p} HTTP/1.1\r\nHost: {host}:{args.port}\r\nConnection: keep-alive\r\n\r\n".encode()
        for p in paths
    ]
    if args.warmup > 0:
        await run_phase(host, args.port, requests, args.connections, args.warmup, args.rate, False)
    load_before = _loadavg()
    host_before = _host_cpu()
    cpu_before = time.process_time()
    phase, seconds = await run_phase(
        host, args.port, requests, args.connections, args.duration, args.rate, True
    )
    cpu = time.process_time() - cpu_before
    host_after = _host_cpu()
    host_busy = None
    if host_before is not None and host_after is not None:
        host_busy = round((host_after[0] - host_before[0]) / seconds, 2)
    latencies = sorted(phase.latencies)
    out: dict[str, object] = {
        "requests": len(latencies),
        "errors": len(phase.errors),
        "error_statuses": sorted(set(phase.errors)),
        "seconds": round(seconds, 3),
        "rate": round(len(latencies) / seconds, 1),
        "offered_rate": args.rate,
        "connections": args.connections,
        "p50_ms": _percentile(latencies, 0.50),
        "p90_ms": _percentile(latencies, 0.90),
        "p99_ms": _percentile(latencies, 0.99),
        "p999_ms": _percentile(latencies, 0.999),
        "max_ms": round(latencies[-1] * 1000.0, 3) if latencies else None,
        "client_cpu_s": round(cpu, 3),
        # Every process of the machine, this one and the server included (CPU cores).
        "host_busy_cores": host_busy,
        "host_cores": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
    }
    if args.rate > 0:
        lags = sorted(phase.send_lags)
        out["send_lag_p50_ms"] = _percentile(lags, 0.50)
        out["send_lag_p99_ms"] = _percentile(lags, 0.99)
        out["peak_in_flight"] = phase.peak_in_flight
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point: run one measurement and print it as JSON."""
    parser = argparse.ArgumentParser(prog="bench.loadgen")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--paths", required=True, help="file with one request path per line")
    parser.add_argument(
        "--connections", type=int, default=16, help="keep-alive connections (the pool)"
    )
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument(
        "--rate", type=float, default=0.0, help="requests/s in total; 0: closed loop"
    )
    args = parser.parse_args(argv)
    if args.connections < 1 or args.duration <= 0 or args.rate < 0:
        parser.error("--connections must be >= 1, --duration > 0, --rate >= 0")
    result = asyncio.run(_main(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
