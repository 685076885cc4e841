"""The processes a soak runs: the 3-broker Kafka cluster and ``broker-shim run`` sidecars."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KAFKACTL = ROOT / "docker" / "kafka" / "kafkactl.py"
CLUSTER_STATE = KAFKACTL.parent / ".state" / "cluster"
BIN = Path(sys.executable).parent
NODE_IDS = (1, 2, 3)
CLUSTER_READY_S = 240
CLUSTER_UP_TIMEOUT_S = CLUSTER_READY_S + 120.0
#: (broker port, controller port) of each node, as kafkactl's cluster layout has them.
NODE_PORTS = {1: (19092, 19093), 2: (29092, 29093), 3: (31092, 31093)}
#: How long a broker fault waits for the killed broker to be back before moving on.
RESTART_BUDGET_S = 30.0
#: A restart's wait for the node's ports to be free before each start.
PORT_FREE_WAIT_S = 20.0
#: Starts tried (with back-off) before a background restart gives up.
RESTART_ATTEMPTS = 5
#: The lock every user of the 3-broker cluster holds while using it (its ports are fixed, so
#: two users -- two clones' test runs, a soak and a test -- would take each other's brokers).
CLUSTER_LOCK = Path("/tmp/ps-cluster.lock")  # noqa: S108 - shared by every clone on purpose
#: How long a user waits for the cluster lock before failing (a soak holds it ~15 minutes).
CLUSTER_LOCK_WAIT_S = 45 * 60.0


#: Where :func:`free_port` looks: below Linux's ephemeral range (32768-60999) and below
#: the 3-broker cluster's fixed ports (19092+). A port the kernel hands out with bind(0)
#: lies inside the ephemeral range, where any outgoing connection (a Kafka client's, the
#: JVM's) may take it as its source port before the process it was picked for binds it:
#: on a loaded machine a sidecar then failed with "Address already in use".
FREE_PORT_RANGE = (10_000, 19_000)


def free_port() -> int:
    """A loopback TCP port nothing listens on now, outside the ephemeral range (see
    :data:`FREE_PORT_RANGE`); random, so that concurrent runs rarely pick the same one."""
    low, high = FREE_PORT_RANGE
    for _ in range(200):
        port = random.randrange(low, high)  # noqa: S311 - not a secret
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {low}-{high} after 200 tries")


def http_status(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """(status, body) of a GET; 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()
    except (OSError, ValueError):
        return 0, b""


def port_bindable(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:``port`` now.

    Not the same as "nothing listens there": after a kill -9, a client reconnecting to a
    port inside the ephemeral range can be handed that very port as its own source port and
    connect to itself (TCP simultaneous open), holding it until it notices; Kafka's bind then
    fails with "Address already in use" (chaos run 5, when node 3 was on 39092/39093; the
    layout now keeps every port below the ephemeral range)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Restart:
    """One restart of a killed broker, as the soak's summary reports it."""

    node: int
    started_s: float
    took_s: float | None = None  # None: not (yet) back
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    gave_up_waiting: bool = False  # the fault moved on after RESTART_BUDGET_S


@contextlib.contextmanager
def cluster_lock(wait_s: float = CLUSTER_LOCK_WAIT_S) -> Iterator[None]:
    """``flock /tmp/ps-cluster.lock`` for the whole use of the 3-broker cluster.

    Waits up to ``wait_s`` (saying who holds it), then raises: a run that cannot get the
    cluster fails with the holder's pid instead of taking its ports."""
    with CLUSTER_LOCK.open("a+") as fh:
        deadline = time.monotonic() + wait_s
        said = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "?"
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"{CLUSTER_LOCK} still held by pid {holder} after {wait_s:.0f}s"
                    ) from None
                if not said:
                    print(f"waiting for {CLUSTER_LOCK} (held by pid {holder}) ...", flush=True)
                    said = True
                time.sleep(1.0)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


class KafkaCluster:
    """``kafkactl.py cluster-up`` / ``cluster-down``, kill -9 of one node, and the bounded
    restart of a killed node (in the background, so a slow one never stalls the soak)."""

    def __init__(self) -> None:
        self.bootstrap = ""
        self.down_nodes: set[int] = set()
        self.restarts: list[Restart] = []
        self._lock = threading.Lock()
        self._restarter: threading.Thread | None = None
        self._restarted = threading.Event()
        self._t0 = time.monotonic()

    def _ctl(self, *args: str, timeout: float = CLUSTER_UP_TIMEOUT_S) -> str:
        out = subprocess.run(
            [sys.executable, str(KAFKACTL), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"kafkactl {' '.join(args)} failed:\n{out.stderr[-3000:]}")
        return out.stdout.strip()

    def up(self, attempts: int = 3) -> str:
        """Start whichever node is down and wait until all three are ready (a loaded
        machine can need minutes; kafkactl stops a node that did not get ready, so the
        start is tried again)."""
        with self._lock:
            for attempt in range(1, attempts + 1):
                try:
                    out = self._ctl("cluster-up", "--timeout", str(CLUSTER_READY_S))
                    break
                except (RuntimeError, subprocess.TimeoutExpired):
                    if attempt == attempts:
                        raise
            self.bootstrap = out.splitlines()[-1]
            self.down_nodes.clear()
        return self.bootstrap

    @classmethod
    @contextlib.contextmanager
    def held(cls) -> Iterator[KafkaCluster]:
        """The cluster, started fresh under :func:`cluster_lock` and purged on exit."""
        with cluster_lock():
            cluster = cls()
            cluster.down()  # leftovers of an earlier user
            try:
                cluster.up()
                yield cluster
            finally:
                cluster.down()

    @staticmethod
    def pid(node_id: int) -> int:
        """The broker JVM's pid of node ``node_id`` (1, 2 or 3)."""
        return int((CLUSTER_STATE / f"node-{node_id}" / "kafka.pid").read_text().strip())

    def kill(self, node_id: int) -> None:
        with self._lock:
            with contextlib.suppress(OSError, ValueError):
                os.kill(self.pid(node_id), signal.SIGKILL)
            self.down_nodes.add(node_id)

    # ---------------------------------------------------------------- bounded restart
    def restarting(self) -> bool:
        """A killed node's restart is still under way (in the background)."""
        return self._restarter is not None and self._restarter.is_alive()

    def restart(self, at_s: float, budget_s: float = RESTART_BUDGET_S) -> str:
        """Bring the killed node(s) back, waiting at most ``budget_s``: ``""`` when the
        cluster is whole again, else a note for the soak's summary (the restart goes on in
        the background, retried with back-off, until it succeeds or RESTART_ATTEMPTS
        fail; :meth:`wait_restarted` waits for it). ``at_s``: the soak's clock, for the
        summary."""
        if not self.restarting():
            nodes = sorted(self.down_nodes)
            record = Restart(node=nodes[0] if nodes else 0, started_s=round(at_s, 1))
            self._t0 = time.monotonic() - at_s
            self.restarts.append(record)
            self._restarted.clear()
            self._restarter = threading.Thread(
                target=self._restart, args=(record,), name="kafka-restart", daemon=True
            )
            self._restarter.start()
        record = self.restarts[-1]
        if self._restarted.wait(budget_s) and record.took_s is not None:
            return f"restarted in {record.took_s:.1f}s" + (
                f" ({record.attempts} attempts: {'; '.join(record.errors)[:300]})"
                if record.attempts > 1
                else ""
            )
        record.gave_up_waiting = True
        return (
            f"not back within {budget_s:.0f}s (attempt {record.attempts}"
            + (f"; {record.errors[-1][:200]}" if record.errors else "")
            + "); restart continues in the background, the soak goes on"
        )

    def wait_restarted(self, timeout_s: float) -> bool:
        """Wait for a background restart; True when none is left under way."""
        thread = self._restarter
        if thread is not None:
            thread.join(timeout_s)
        return not self.restarting()

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _restart(self, record: Restart) -> None:
        delay = 1.0
        try:
            for attempt in range(1, RESTART_ATTEMPTS + 1):
                record.attempts = attempt
                ports = [p for n in sorted(self.down_nodes) for p in NODE_PORTS.get(n, ())]
                deadline = time.monotonic() + PORT_FREE_WAIT_S
                while not all(port_bindable(p) for p in ports) and time.monotonic() < deadline:
                    time.sleep(0.2)
                busy = [p for p in ports if not port_bindable(p)]
                if busy:
                    record.errors.append(f"port(s) {busy} still held after {PORT_FREE_WAIT_S:.0f}s")
                try:
                    self.up(attempts=1)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    text = str(exc)
                    why = "address in use" if "Address already in use" in text else text[-160:]
                    record.errors.append(why.replace("\n", " "))
                    time.sleep(delay)
                    delay = min(delay * 2, 15.0)
                    continue
                record.took_s = round(self._now() - record.started_s, 1)
                return
        finally:
            self._restarted.set()

    def down(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._ctl("cluster-down", "--purge", timeout=120)


@dataclass
class Exit:
    """How one sidecar process ended."""

    broker_id: str
    pid: int
    returncode: int
    expected: bool
    at_s: float
    log_tail: str

    @property
    def how(self) -> str:
        if self.returncode < 0:
            return f"signal {signal.Signals(-self.returncode).name}"
        return f"exit {self.returncode}"


class SidecarProc:
    """One ``broker-shim run`` process, restartable on the same port, broker id and state."""

    def __init__(
        self,
        broker_id: str,
        bootstrap: str,
        workdir: Path,
        session_timeout_ms: int,
        *,
        lookup: bool = True,
    ) -> None:
        self.broker_id = broker_id
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self.broker_port = free_port()  # the Pulsar binary protocol (kept across restarts)
        self.bootstrap = bootstrap
        self.state_dir = workdir / f"state-{broker_id}"
        self.log_path = workdir / f"sidecar-{broker_id}.log"
        self.session_timeout_ms = session_timeout_ms
        self.lookup = lookup
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # SIGSTOPped, waiting for SIGCONT
        self.lock = threading.RLock()
        self._expect_exit = False
        self._log_offset = 0

    def start(self) -> None:
        with self.lock:
            args = [
                str(BIN / "broker-shim"), "run",
                "--broker-id", self.broker_id,
                "--http-port", str(self.port),
                "--broker-port", "0",
                "--bootstrap-servers", self.bootstrap,
                "--state-dir", str(self.state_dir),
                "--session-timeout-ms", str(self.session_timeout_ms),
                "--broker-port", str(self.broker_port),
            ]  # fmt: skip
            if not self.lookup:
                args.append("--no-lookup")
            with self.log_path.open("ab") as log:
                self._log_offset = log.tell()
                log.write(f"\n===== chaos: start {time.time():.3f} =====\n".encode())
                self.proc = subprocess.Popen(  # noqa: S603 - our own program
                    args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            self.stopped = False
            self._expect_exit = False

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else -1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def serving(self) -> bool:
        """Alive and not frozen by SIGSTOP."""
        return self.alive() and not self.stopped

    def signal(self, sig: int) -> None:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                return
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self._expect_exit = True
            self.proc.send_signal(sig)
            if sig == signal.SIGSTOP:
                self.stopped = True
            elif sig == signal.SIGCONT:
                self.stopped = False

    def reap(self, t0: float, timeout: float = 60.0) -> Exit | None:
        """Wait for the process to end (after a signal); its Exit record."""
        with self.lock:
            if self.proc is None:
                return None
            if self.stopped:
                self.proc.send_signal(signal.SIGCONT)
                self.stopped = False
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait(30)
            return self._exit(code, t0)

    def check_crash(self, t0: float) -> Exit | None:
        """The Exit of a process that ended on its own (a crash), else None."""
        with self.lock:
            if self.proc is None or self._expect_exit:
                return None
            code = self.proc.poll()
            if code is None:
                return None
            return self._exit(code, t0)

    def _exit(self, code: int, t0: float) -> Exit:
        assert self.proc is not None
        ended = Exit(
            self.broker_id,
            self.proc.pid,
            code,
            self._expect_exit,
            time.monotonic() - t0,
            self.log_tail(),
        )
        self.proc = None
        return ended

    def log_tail(self, chars: int = 3000) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(max(self._log_offset, fh.seek(0, os.SEEK_END) - chars))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def health(self, timeout: float = 1.5) -> tuple[int, bytes]:
        return http_status(self.url + "/health", timeout)

    def wait_healthy(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if self.health()[0] == 200:
                return True
            time.sleep(0.2)
        return False
