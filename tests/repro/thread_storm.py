"""Per-thread wakeup sampler for running sidecars: which librdkafka client storms (issue 11).

Usage (next to a running soak, e.g. ``make chaos``; read-only, needs no cluster lock)::

    nice -n 15 .venv/bin/python -m tests.repro.thread_storm --workdir /tmp/chaos-XXXX \
        [--seconds 60] [--interval 1] [--top 4] [--threshold 5000] [--pyspy PATH]

Every ``--interval`` seconds it reads, for every ``broker-shim run`` process (of that soak
when ``--workdir`` is given), each thread's ``voluntary_ctxt_switches +
nonvoluntary_ctxt_switches`` and ``comm`` from ``/proc/<pid>/task/<tid>/status``, and prints
the load average, which Kafka cluster nodes are up, and per process its CPU % and the
busiest threads in wakeups/s. A librdkafka thread (``rdk:main``, ``rdk:broker<N>``) is named
by its client: the sidecar logs ``kafka client <client.id> (pid P): threads tid=comm ...``
when it creates a client (``sync/transport/_kafka_clients.py``); the sampler reads those
lines from ``<workdir>/sidecar-*.log``. A ``rdk:broker<N>`` thread started later (a broker
learned from metadata) is named after the client whose ``rdk:main`` precedes it in tid order,
marked ``~``. With ``--pyspy``, the first time a process has a thread above
``--threshold`` wakeups/s, ``py-spy dump`` of it is printed (which Python call is waiting).
At the end: the peak rate of every thread that ever exceeded the threshold.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_STATE = ROOT / "docker" / "kafka" / ".state" / "cluster"
CLK_TCK = os.sysconf("SC_CLK_TCK")
_CLIENT_LINE = re.compile(r"kafka client (\S+) \(pid (\d+)\): threads (.*)$")


def sidecar_pids(workdir: Path | None) -> dict[int, str]:
    """pid -> broker id of every live ``broker-shim run`` (of ``workdir`` if given)."""
    out: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(a.endswith(b"broker-shim") for a in args) or b"run" not in args:
            continue
        text = [a.decode(errors="replace") for a in args]
        if workdir is not None and not any(a.startswith(str(workdir)) for a in text):
            continue
        broker = text[text.index("--broker-id") + 1] if "--broker-id" in text else "?"
        out[int(entry)] = broker
    # Their children: the admin worker processes (sync.transport._admin_worker).
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid in out and out[ppid] != "?" and "/" not in out[ppid]:
            out[int(entry)] = f"{out[ppid]}/worker"
    return out


def threads(pid: int) -> dict[int, tuple[str, int, int]]:
    """tid -> (comm, voluntary + nonvoluntary context switches, utime + stime ticks)."""
    out: dict[int, tuple[str, int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
        switches = int(fields.get("voluntary_ctxt_switches", "0")) + int(
            fields.get("nonvoluntary_ctxt_switches", "0")
        )
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (fields.get("Name", "?").strip(), switches, int(stat[11]) + int(stat[12]))
    return out


def cpu_ticks(pid: int) -> int:
    try:
        parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(parts[11]) + int(parts[12])


def client_names(workdir: Path | None) -> dict[tuple[int, int], str]:
    """(pid, tid) -> client id, from the sidecars' "kafka client" log lines."""
    out: dict[tuple[int, int], str] = {}
    if workdir is None:
        return out
    for log in workdir.glob("sidecar-*.log"):
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = _CLIENT_LINE.search(line)
            if m is None:
                continue
            pid = int(m.group(2))
            for item in m.group(3).split():
                tid, _, _comm = item.partition("=")
                if tid.isdigit():
                    out[(pid, int(tid))] = m.group(1)
    return out


def name_of(
    pid: int, tid: int, comm: str, names: dict[tuple[int, int], str], tids: list[int]
) -> str:
    known = names.get((pid, tid))
    if known is not None:
        return known
    if not comm.startswith("rdk:"):
        return ""
    # A broker thread started after its client: the nearest recorded rdk:main below it.
    below = [t for t in tids if t < tid and (pid, t) in names]
    return f"~{names[(pid, max(below))]}" if below else ""


def cluster_up() -> str:
    states = []
    for node in (1, 2, 3):
        try:
            pid = int((CLUSTER_STATE / f"node-{node}" / "kafka.pid").read_text().strip())
            os.kill(pid, 0)
            states.append(f"{node}:up")
        except (OSError, ValueError):
            states.append(f"{node}:DOWN")
    return " ".join(states)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument("--threshold", type=float, default=5000.0)
    parser.add_argument("--pyspy", default="")
    args = parser.parse_args()

    prev: dict[int, dict[int, tuple[str, int, int]]] = {}
    prev_cpu: dict[int, int] = {}
    peaks: dict[tuple[int, int], tuple[float, str, str, str]] = {}
    dumped: set[int] = set()
    end = time.monotonic() + args.seconds
    last = time.monotonic()
    while time.monotonic() < end:
        time.sleep(args.interval)
        now = time.monotonic()
        dt, last = now - last, now
        pids = sidecar_pids(args.workdir)
        names = client_names(args.workdir)
        load = Path("/proc/loadavg").read_text().split()[0]
        print(f"--- {time.strftime('%H:%M:%S')} load {load} kafka {cluster_up()}", flush=True)
        for pid, broker in sorted(pids.items(), key=lambda kv: kv[1]):
            cur = threads(pid)
            ticks = cpu_ticks(pid)
            before = prev.get(pid, {})
            rates = sorted(
                (
                    ((sw - before[tid][1]) / dt, tid, comm)
                    for tid, (comm, sw, _t) in cur.items()
                    if tid in before
                ),
                reverse=True,
            )
            busy = sorted(
                (
                    (100.0 * (t - before[tid][2]) / CLK_TCK / dt, tid, comm)
                    for tid, (comm, _sw, t) in cur.items()
                    if tid in before
                ),
                reverse=True,
            )
            cpu = 100.0 * (ticks - prev_cpu.get(pid, ticks)) / CLK_TCK / dt
            prev[pid], prev_cpu[pid] = cur, ticks
            total = sum(r for r, _, _ in rates)
            tids = sorted(cur)
            shown = []
            for rate, tid, comm in rates[: args.top]:
                who = name_of(pid, tid, comm, names, tids)
                shown.append(f"{tid} {comm}{'[' + who + ']' if who else ''} {rate:,.0f}/s")
                if rate >= args.threshold:
                    peak = peaks.get((pid, tid))
                    if peak is None or rate > peak[0]:
                        peaks[(pid, tid)] = (rate, broker, comm, who)
            tids_cpu = []
            for pct, tid, comm in busy[:2]:
                if pct >= 5:
                    who = name_of(pid, tid, comm, names, tids)
                    tids_cpu.append(f"{tid} {comm}{'[' + who + ']' if who else ''} {pct:.0f}%")
            print(
                f"  sidecar {broker} pid {pid}: cpu {cpu:.0f}% ctx {total:,.0f}/s | "
                + "; ".join(shown)
                + (" | cpu: " + "; ".join(tids_cpu) if tids_cpu else ""),
                flush=True,
            )
            hot = rates and rates[0][0] >= args.threshold
            if hot and args.pyspy and pid not in dumped:
                dumped.add(pid)
                dump = subprocess.run(  # noqa: S603 - the given py-spy binary
                    [args.pyspy, "dump", "--pid", str(pid)],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                print(f"  py-spy dump of sidecar {broker} pid {pid}:\n{dump.stdout}{dump.stderr}")
        for gone in set(prev) - set(pids):
            del prev[gone]
    print(f"=== threads above {args.threshold:,.0f} wakeups/s (peak) ===")
    for (pid, tid), (rate, broker, comm, who) in sorted(peaks.items(), key=lambda kv: -kv[1][0]):
        print(f"  sidecar {broker} pid {pid} tid {tid} {comm} [{who or '?'}]: {rate:,.0f}/s")
    if not peaks:
        print("  none")


if __name__ == "__main__":
    main()
