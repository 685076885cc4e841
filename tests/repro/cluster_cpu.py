"""CPU of the 3-broker cluster with idle sidecars, and the time of one broker restart.

Usage (takes the cluster lock; nothing else may use the cluster meanwhile)::

    .venv/bin/python -m tests.repro.cluster_cpu [--sidecars 3] [--warm-up 60] [--restart]

Starts the 3-broker cluster and ``--sidecars`` idle sidecars, waits ``--warm-up`` seconds
(the JVMs' JIT settles), then prints every 2 s the load average, the runnable and
blocked thread counts and the CPU % of each broker JVM and of all sidecars together (from
``/proc/<pid>/stat``). With ``--restart`` it then kill -9s broker 3, restarts it 6 s
later and prints how long the restart took. Figures of 2026-11-25 are in
docs/benchmarks.md ("Where the CPU goes").
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

from chaos.procs import KafkaCluster, SidecarProc

CLK_TCK = os.sysconf("SC_CLK_TCK")
INTERVAL_S = 2.0


def _name(cmdline: bytes) -> str | None:
    if b"kafka.Kafka" in cmdline:
        text = cmdline.decode(errors="replace")
        return "broker-" + text.split("node-", 1)[1][:1] if "node-" in text else "broker"
    if b"broker-shim" in cmdline:
        return "sidecars"
    return None


def cpu_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (what, user+system ticks) of every broker JVM and sidecar."""
    out: dict[int, tuple[str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            name = _name(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" "))
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if name is not None:
            out[int(entry)] = (name, int(fields[11]) + int(fields[12]))
    return out


def thread_states() -> tuple[int, int]:
    """(runnable, uninterruptible) threads on the machine."""
    running = blocked = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for tid in os.listdir(f"/proc/{entry}/task"):
                state = Path(f"/proc/{entry}/task/{tid}/stat").read_text().rsplit(")", 1)[1]
                running += state.split()[0] == "R"
                blocked += state.split()[0] == "D"
        except OSError:
            continue
    return running, blocked


def sample(stop: threading.Event, label: str) -> None:
    before = cpu_ticks()
    started = time.monotonic()
    while not stop.wait(INTERVAL_S):
        now = cpu_ticks()
        per: dict[str, float] = {}
        for pid, (name, ticks) in now.items():
            if pid in before:
                per[name] = per.get(name, 0.0) + (ticks - before[pid][1]) / CLK_TCK / INTERVAL_S
        before = now
        running, blocked = thread_states()
        cpu = " ".join(f"{k}={v * 100:.0f}%" for k, v in sorted(per.items()))
        print(
            f"{label} t={time.monotonic() - started:5.1f}s load={os.getloadavg()[0]:5.1f} "
            f"R={running:3d} D={blocked:3d} {cpu}",
            flush=True,
        )


def sampled(label: str, seconds: float) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=sample, args=(stop, label), daemon=True)
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sidecars", type=int, default=3)
    parser.add_argument("--warm-up", type=float, default=60.0)
    parser.add_argument("--restart", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="cluster-cpu-"))
    with KafkaCluster.held() as cluster:
        sidecars = [
            SidecarProc(str(i + 1), cluster.bootstrap, workdir, 2000) for i in range(args.sidecars)
        ]
        try:
            for s in sidecars:
                s.start()
            for s in sidecars:
                s.wait_healthy(120)
            time.sleep(args.warm_up)
            sampled("idle", 16)
            if args.restart:
                stop = threading.Event()
                thread = threading.Thread(target=sample, args=(stop, "restart"), daemon=True)
                thread.start()
                cluster.kill(3)
                time.sleep(6)
                began = time.monotonic()
                cluster.up()
                print(f"broker 3 ready {time.monotonic() - began:.1f}s after its restart began")
                time.sleep(6)
                stop.set()
                thread.join()
        finally:
            for s in sidecars:
                s.signal(signal.SIGTERM)
            for s in sidecars:
                s.reap(0.0, timeout=30)
    print(f"sidecar logs in {workdir}")


if __name__ == "__main__":
    main()
