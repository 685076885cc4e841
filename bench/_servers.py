"""The brokers a Pulsar-protocol benchmark talks to, each in its own process: one sidecar
(``broker-shim run``) on the benchmark's Kafka, and Apache Pulsar standalone (Maven
Central jars via ``docker/pulsar/pulsarctl.py``), plus the CPU time of whatever listens
on a port (to report a broker's CPU per message)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Broker",
    "ShimCommand",
    "cpu_seconds",
    "free_port",
    "http_status",
    "listener_pid",
    "pulsar_standalone",
    "shim_command",
    "sidecar",
    "source_label",
]

ROOT = Path(__file__).resolve().parent.parent
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def http_status(method: str, url: str, body: bytes | None = None) -> int:
    """One request with a JSON content type to a loopback URL; the answer's status."""
    req = urllib.request.Request(url, data=body, method=method)  # noqa: S310 - loopback
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


@dataclass(frozen=True)
class Broker:
    """A running Pulsar-protocol broker: its ``pulsar://`` and ``http://`` URLs."""

    name: str
    service_url: str
    web_url: str

    @property
    def broker_port(self) -> int:
        return int(self.service_url.rsplit(":", 1)[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
            raise RuntimeError(f"{url} did not answer 200")
        time.sleep(0.1)


@dataclass(frozen=True)
class ShimCommand:
    """How to start ``broker-shim`` from a checkout: the command before its arguments, the
    environment and the working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


def shim_command(source: Path | None = None) -> ShimCommand:
    """``broker-shim`` of this checkout, or of ``source`` (another checkout, e.g. a git
    worktree of an older commit: its code goes ahead of the installed package on
    ``PYTHONPATH``), so a benchmark runs before and after side by side in one run."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)  # ahead of the installed (editable) package
    return ShimCommand([sys.executable, "-m", "broker_shim.cli.shim"], env, source or ROOT)


def source_label(name: str, source: Path | None) -> str:
    """``name`` for this checkout's servers, ``name@<folder>`` for another checkout's."""
    return name if source is None else f"{name}@{source.name}"


@contextlib.contextmanager
def sidecar(
    bootstrap: str,
    entry_format: str = "entry",
    name: str = "sidecar",
    source: Path | None = None,
) -> Iterator[Broker]:
    """One ``broker-shim run`` on ``bootstrap`` (``--entry-format``), stopped (SIGTERM)
    on exit. ``source``: run the code of another checkout instead (e.g. a git worktree of
    an older commit, to compare before and after in one run); ``message`` is then passed
    as no flag at all, which older command lines also take."""
    port, broker_port = free_port(), free_port()
    state = tempfile.mkdtemp(prefix="bench-sidecar-")
    shim = shim_command(source)
    flags = ["--entry-format", entry_format]
    if source is not None and entry_format == "message":
        flags = []
    proc = subprocess.Popen(  # noqa: S603 - the project's own CLI
        [*shim.argv, "run", "--broker-id", name,
         "--http-port", str(port), "--broker-port", str(broker_port),
         "--bootstrap-servers", bootstrap, "--state-dir", state, "--log-level", "warning",
         *flags],
        cwd=shim.cwd, env=shim.env,
    )  # fmt: skip
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", proc, 120)
        yield Broker(name, f"pulsar://127.0.0.1:{broker_port}", f"http://127.0.0.1:{port}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def pulsar_standalone() -> Iterator[Broker | None]:
    """Apache Pulsar standalone (None when unavailable or skipped).

    ``$PULSAR_BROKER_URL`` (and ``$PULSAR_WEB_URL``) name a running one; ``BENCH_NO_PULSAR=1``
    skips it; otherwise it is started here and purged on exit.
    """
    running = os.environ.get("PULSAR_BROKER_URL")
    if running:
        yield Broker("pulsar", running, os.environ.get("PULSAR_WEB_URL", "http://127.0.0.1:8080"))
        return
    ctl = ROOT / "docker" / "pulsar" / "pulsarctl.py"
    if os.environ.get("BENCH_NO_PULSAR") or not ctl.exists():
        yield None
        return
    web, broker = free_port(), free_port()
    up = subprocess.run(  # noqa: S603 - the project's launcher
        [sys.executable, str(ctl), "up", "--web-port", str(web), "--broker-port", str(broker)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if up.returncode != 0:
        print(f"  (Pulsar standalone did not start: {up.stderr.strip()[-300:]})")
        yield None
        return
    try:
        yield Broker("pulsar", f"pulsar://127.0.0.1:{broker}", f"http://127.0.0.1:{web}")
    finally:
        subprocess.run(  # noqa: S603
            [sys.executable, str(ctl), "down", "--web-port", str(web), "--purge"],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip


def listener_pid(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` (from /proc; None if not found)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{inode}]")
    if not inodes:
        return None
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (pid_dir / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(pid_dir.name)
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (0.0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
