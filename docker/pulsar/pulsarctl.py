#!/usr/bin/env python3
"""Run the real Apache Pulsar standalone from Maven Central jars, without Docker.

Stdlib only, like ``docker/kafka/kafkactl.py``: it runs before the project's virtualenv
exists. It needs Java 17+ and Maven. The real Pulsar is the reference the project's
Pulsar-compatible REST API is compared against (``compat/``) and benchmarked beside.

Usage::

    pulsarctl.py up [--web-port 8080] [--broker-port 6650] [--state-dir DIR] [--timeout S]
    pulsarctl.py down [--web-port 8080] [--state-dir DIR] [--purge]
    pulsarctl.py status
    pulsarctl.py logs [--web-port 8080] [--state-dir DIR] [-n LINES] [--console]

``up`` prints the web service URL (``http://127.0.0.1:PORT``) as its last stdout line and
the broker service URL (``pulsar://127.0.0.1:PORT``) on the line before; progress goes to
stderr, so ``PULSAR_WEB=$(python3 docker/pulsar/pulsarctl.py up | tail -1)`` works.

Ports: the web service (``--web-port``) and the binary protocol (``--broker-port``) are the
caller's; the embedded bookie, its stream storage and ZooKeeper port (unused with RocksDB
metadata, but Pulsar binds the flag) are picked free on each start and recorded in
``instance.json``.

Layout (next to this script, both git-ignored):

* ``.cache/libs-<pulsar version>/`` jars resolved by ``mvn dependency:copy-dependencies``
  from ``pom.xml`` (the single version pin), with a ``.complete`` marker holding the pom's
  sha256, so only the first ``up`` (or a pom change) runs Maven (~235 MB, 2-3 minutes).
* ``.state/<web port>/``: ``standalone.conf``, ``log4j2.properties``, ``instance.json``,
  ``pulsar.pid``, ``pulsar.log`` (Pulsar's own log), ``console.log`` (JVM stdout/stderr),
  and ``data/`` (RocksDB metadata, bookie ledgers).

Readiness: ``GET /admin/v2/clusters`` answers 200 and ``GET /admin/v2/namespaces/public``
lists ``public/default`` (standalone creates that namespace after the broker starts serving;
a bare 200 from the web port is too early for a differential run).

Environment: ``PULSAR_HEAP_OPTS`` replaces the default heap flags (``-Xms256m -Xmx1g``);
``PULSAR_EXTRA_OPTS`` is appended to the JVM options; ``JAVA_HOME`` picks the JVM.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
CACHE_DIR = HERE / ".cache"
STATE_ROOT = HERE / ".state"

LOOPBACK = "127.0.0.1"
DEFAULT_WEB_PORT = 8080
DEFAULT_BROKER_PORT = 6650
DEFAULT_HEAP = ("-Xms256m", "-Xmx1g")
MAIN_CLASS = "org.apache.pulsar.PulsarStandaloneStarter"
CLUSTER_NAME = "standalone"
# What Pulsar's own bin/pulsar passes on Java 17 (its libraries reflect into the JDK), plus
# G1 instead of 4.0's default ZGC with AlwaysPreTouch, so a test Pulsar does not touch a
# whole gigabyte up front on a shared 2-core machine.
JVM_OPTS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djava.net.preferIPv4Stack=true",
    "-Dpulsar.allocator.exit_on_oom=true",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/sun.net=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.management/sun.management=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
)

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
PORT_RELEASE_TIMEOUT_S = 15.0
PROBE_TIMEOUT_S = 3.0
POLL_INTERVAL_S = 0.5
LOG_TAIL_LINES = 80


class PulsarctlError(Exception):
    """A failure the operator must act on; main() prints it and exits 1."""


def info(message: str) -> None:
    """Progress goes to stderr so stdout carries only the result (the service URLs)."""
    print(f"pulsarctl: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------- instance settings


@dataclass(frozen=True)
class Instance:
    """One standalone Pulsar JVM (broker + embedded bookie) and where its files live."""

    web_port: int
    broker_port: int
    state_dir: Path
    bookie_port: int = 0
    stream_port: int = 0
    zookeeper_port: int = 0
    heap_opts: tuple[str, ...] = DEFAULT_HEAP

    @property
    def web_url(self) -> str:
        return f"http://{LOOPBACK}:{self.web_port}"

    @property
    def broker_url(self) -> str:
        return f"pulsar://{LOOPBACK}:{self.broker_port}"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def conf_file(self) -> Path:
        return self.state_dir / "standalone.conf"

    @property
    def log4j_file(self) -> Path:
        return self.state_dir / "log4j2.properties"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "pulsar.pid"

    @property
    def pulsar_log(self) -> Path:
        return self.state_dir / "pulsar.log"

    @property
    def console_log(self) -> Path:
        return self.state_dir / "console.log"

    @property
    def meta_file(self) -> Path:
        return self.state_dir / "instance.json"

    def to_json(self) -> str:
        return json.dumps(
            {
                "web_port": self.web_port,
                "broker_port": self.broker_port,
                "bookie_port": self.bookie_port,
                "stream_port": self.stream_port,
                "zookeeper_port": self.zookeeper_port,
                "heap_opts": list(self.heap_opts),
            },
            indent=2,
        )

    @classmethod
    def from_state_dir(cls, state_dir: Path) -> Instance:
        raw = json.loads((state_dir / "instance.json").read_text())
        return cls(
            web_port=int(raw["web_port"]),
            broker_port=int(raw["broker_port"]),
            state_dir=state_dir,
            bookie_port=int(raw["bookie_port"]),
            stream_port=int(raw["stream_port"]),
            zookeeper_port=int(raw["zookeeper_port"]),
            heap_opts=tuple(str(o) for o in raw["heap_opts"]),
        )


def heap_opts() -> tuple[str, ...]:
    override = os.environ.get("PULSAR_HEAP_OPTS", "").strip()
    return tuple(shlex.split(override)) if override else DEFAULT_HEAP


def default_state_dir(web_port: int) -> Path:
    return STATE_ROOT / str(web_port)


def requested_instance(web_port: int, broker_port: int, state_dir: Path | None) -> Instance:
    for port in (web_port, broker_port):
        if not 0 < port < 65536:
            raise PulsarctlError(f"port {port} is out of range")
    if web_port == broker_port:
        raise PulsarctlError("--web-port must differ from --broker-port")
    return Instance(
        web_port=web_port,
        broker_port=broker_port,
        state_dir=(state_dir or default_state_dir(web_port)).resolve(),
        heap_opts=heap_opts(),
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def with_side_ports(instance: Instance) -> Instance:
    """The instance with fresh free ports for the bookie, stream storage and ZooKeeper."""
    taken = {instance.web_port, instance.broker_port}
    ports: list[int] = []
    while len(ports) < 3:
        port = free_port()
        if port not in taken:
            taken.add(port)
            ports.append(port)
    return Instance(
        web_port=instance.web_port,
        broker_port=instance.broker_port,
        state_dir=instance.state_dir,
        bookie_port=ports[0],
        stream_port=ports[1],
        zookeeper_port=ports[2],
        heap_opts=instance.heap_opts,
    )


# ------------------------------------------------------------------------ config rendering


def render_standalone_conf(instance: Instance) -> str:
    """standalone.conf; keys left out keep Pulsar's documented defaults (ServiceConfiguration)."""
    settings: list[tuple[str, str, str]] = [
        ("clusterName", CLUSTER_NAME, "the cluster name Pulsar's standalone uses"),
        ("metadataStoreUrl", "", "empty: embedded RocksDB metadata under --metadata-dir"),
        ("webServicePort", str(instance.web_port), "REST admin + lookup"),
        ("brokerServicePort", str(instance.broker_port), "binary protocol"),
        ("bindAddress", LOOPBACK, "loopback only: never reachable from the network"),
        ("advertisedAddress", LOOPBACK, "lookups answer loopback URLs"),
        ("systemTopicEnabled", "true", "topic policies live in system topics"),
        ("topicLevelPoliciesEnabled", "true", "topic policy endpoints answer"),
        ("defaultNumberOfNamespaceBundles", "4", "as Pulsar's shipped standalone.conf"),
        ("brokerDeleteInactiveTopicsEnabled", "false",
         "else topics without subscriptions vanish after 60 s and a differential run flakes"),
        ("managedLedgerDefaultEnsembleSize", "1", "one embedded bookie"),
        ("managedLedgerDefaultWriteQuorum", "1", "one embedded bookie"),
        ("managedLedgerDefaultAckQuorum", "1", "one embedded bookie"),
        ("webSocketServiceEnabled", "true", "Pulsar's WebSocket API, to compare ours with"),
        ("loadManagerClassName", "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
         "one broker: no load reports, less CPU"),
        ("allowAutoTopicCreation", "true", "Pulsar's default, written down"),
        ("allowAutoTopicCreationType", "non-partitioned", "Pulsar's default, written down"),
        ("superUserRoles", "", "no authentication"),
        ("authenticationEnabled", "false", "no authentication"),
        ("authorizationEnabled", "false", "no authorization"),
        ("transactionCoordinatorEnabled", "false", "not compared; saves start-up time"),
        ("functionsWorkerEnabled", "false", "started with -nfw as well"),
        ("enablePackagesManagement", "false", "not compared"),
        ("managedLedgerCacheSizeMB", "64", "small heap on a shared machine"),
    ]  # fmt: skip
    lines = ["# Written by docker/pulsar/pulsarctl.py; rewritten on every start, do not edit."]
    for key, value, why in settings:
        lines += ["", f"# {why}", f"{key}={value}"]
    return "\n".join(lines) + "\n"


def render_log4j2(instance: Instance) -> str:
    """log4j2 properties: Pulsar's own log goes to pulsar.log in the state dir."""
    log = str(instance.pulsar_log)
    return "\n".join(
        [
            "# Written by docker/pulsar/pulsarctl.py.",
            "status = warn",
            "appender.file.type = RollingFile",
            "appender.file.name = file",
            f"appender.file.fileName = {log}",
            f"appender.file.filePattern = {log}.%i",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = %d{ISO8601} [%t] %-5level %logger{36} - %msg%n",
            "appender.file.policies.type = Policies",
            "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
            "appender.file.policies.size.size = 50MB",
            "appender.file.strategy.type = DefaultRolloverStrategy",
            "appender.file.strategy.max = 2",
            "rootLogger.level = info",
            "rootLogger.appenderRef.file.ref = file",
            "",
        ]
    )


def write_instance_files(instance: Instance) -> None:
    instance.data_dir.mkdir(parents=True, exist_ok=True)
    instance.conf_file.write_text(render_standalone_conf(instance))
    instance.log4j_file.write_text(render_log4j2(instance))
    instance.meta_file.write_text(instance.to_json() + "\n")


# ------------------------------------------------------------------------------- jars


def pulsar_version() -> str:
    """The Pulsar version pinned in pom.xml: the one place it is written down."""
    match = re.search(r"<pulsar\.version>\s*([^<\s]+)\s*</pulsar\.version>", POM.read_text())
    if match is None:
        raise PulsarctlError(f"no <pulsar.version> property in {POM}")
    return match.group(1)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialise concurrent pulsarctl calls (e.g. parallel test runs) on one resource."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_libs() -> Path:
    """Resolve Pulsar's jars with Maven once; later calls only check the marker."""
    libs = CACHE_DIR / f"libs-{pulsar_version()}"
    marker = libs / ".complete"
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()

    def cached() -> bool:
        return marker.is_file() and marker.read_text().strip() == digest

    if cached():
        return libs
    with file_lock(CACHE_DIR / ".fetch.lock"):
        if cached():
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise PulsarctlError("Maven (mvn) is not on PATH; it fetches the Pulsar jars")
        staging = CACHE_DIR / f"{libs.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        info(f"fetching the Pulsar jars with Maven into {libs} (once, ~235 MB) ...")
        started = time.monotonic()
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        result = subprocess.run(cmd, stdout=sys.stderr, check=False)  # noqa: S603 - fixed argv
        if result.returncode != 0 or not any(staging.glob("pulsar-broker-*.jar")):
            raise PulsarctlError(f"mvn failed (exit {result.returncode}) resolving {POM}")
        (staging / ".complete").write_text(digest + "\n")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        count = sum(1 for _ in libs.glob("*.jar"))
        info(f"resolved {count} jars in {time.monotonic() - started:.0f}s")
    return libs


# --------------------------------------------------------------------------- processes


def java_bin() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise PulsarctlError("java is not on PATH and JAVA_HOME is unset; install Java 17+")
    return java


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        # A zombie (exited, not yet reaped by its parent) still answers kill(0).
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def is_our_pulsar(pid: int, instance: Instance) -> bool:
    """pid is alive and (where /proc exists) really is the JVM started with our config."""
    if not pid_alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True
    with contextlib.suppress(OSError):
        args = cmdline.read_bytes().split(b"\0")
        return MAIN_CLASS.encode() in args and str(instance.conf_file).encode() in args
    return False


def running_pid(instance: Instance) -> int | None:
    """The pid of the live Pulsar pulsarctl started for instance, else None."""
    try:
        pid = int(instance.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if is_our_pulsar(pid, instance):
        return pid
    instance.pid_file.unlink(missing_ok=True)
    return None


def listening(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)


def start_pulsar(instance: Instance, libs: Path) -> subprocess.Popen[bytes]:
    """Start the JVM detached (own session, output to console.log) and record its pid."""
    extra = tuple(shlex.split(os.environ.get("PULSAR_EXTRA_OPTS", "")))
    data = instance.data_dir
    cmd = [
        java_bin(), *instance.heap_opts, *JVM_OPTS, *extra,
        f"-Dlog4j.configurationFile={instance.log4j_file}",
        f"-Dpulsar.log.dir={instance.state_dir}",
        "-cp", f"{libs}/*", MAIN_CLASS,
        "--config", str(instance.conf_file),
        "--metadata-dir", str(data / "metadata"),
        "--bookkeeper-dir", str(data / "bookkeeper"),
        "--zookeeper-dir", str(data / "zookeeper"),
        "--bookkeeper-port", str(instance.bookie_port),
        "--zookeeper-port", str(instance.zookeeper_port),
        "--stream-storage-port", str(instance.stream_port),
        "-nss", "-nfw",
    ]  # fmt: skip
    with instance.console_log.open("ab") as console:
        proc = subprocess.Popen(  # noqa: S603 - argv built from our own settings
            cmd,
            cwd=instance.state_dir,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    instance.pid_file.write_text(f"{proc.pid}\n")
    info(f"started Pulsar {pulsar_version()} on {instance.web_url} (pid {proc.pid})")
    return proc


def stop_pid(pid: int) -> None:
    """SIGTERM (Pulsar shuts down cleanly, ~11 s), then SIGKILL after the grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_for(lambda: not pid_alive(pid), STOP_TIMEOUT_S):
        return
    info(f"pid {pid} ignored SIGTERM for {STOP_TIMEOUT_S:.0f}s; sending SIGKILL")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), 5.0)


def stop_instance(instance: Instance) -> bool:
    """Stop the live Pulsar of instance; returns whether one was running."""
    pid = running_pid(instance)
    if pid is None:
        return False
    stop_pid(pid)
    ports = [instance.web_port, instance.broker_port, instance.bookie_port]
    if not wait_for(lambda: not any(listening(p) for p in ports), PORT_RELEASE_TIMEOUT_S):
        busy = [p for p in ports if listening(p)]
        raise PulsarctlError(f"Pulsar stopped but something still listens on {busy}")
    instance.pid_file.unlink(missing_ok=True)
    info(f"stopped Pulsar on {instance.web_url} (pid {pid})")
    return True


# ------------------------------------------------------------------------- readiness


def http_get_json(url: str, timeout: float = PROBE_TIMEOUT_S) -> object | None:
    """The JSON body of a 200 answer, else None (refused, other status, not JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback
            if response.status != 200:
                return None
            body: object = json.loads(response.read() or b"null")
            return body
    except (OSError, ValueError, urllib.error.URLError):
        return None


def is_ready(instance: Instance) -> bool:
    clusters = http_get_json(f"{instance.web_url}/admin/v2/clusters")
    if not isinstance(clusters, list) or CLUSTER_NAME not in clusters:
        return False
    namespaces = http_get_json(f"{instance.web_url}/admin/v2/namespaces/public")
    return isinstance(namespaces, list) and "public/default" in namespaces


def tail(path: Path, lines: int) -> str:
    try:
        content = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"({path} does not exist)\n"
    return "".join(line + "\n" for line in content[-lines:])


def report_failure(instance: Instance) -> None:
    for path in (instance.pulsar_log, instance.console_log):
        text = tail(path, LOG_TAIL_LINES)
        if text.strip():
            sys.stderr.write(f"----- last {LOG_TAIL_LINES} lines of {path} -----\n{text}")


def wait_ready(instance: Instance, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    started = time.monotonic()
    while not is_ready(instance):
        died = proc.poll() is not None if proc else running_pid(instance) is None
        if died:
            report_failure(instance)
            raise PulsarctlError(f"Pulsar ({instance.web_url}) exited during start")
        if time.monotonic() - started > timeout:
            report_failure(instance)
            raise PulsarctlError(f"Pulsar ({instance.web_url}) not ready after {timeout:.0f}s")
        time.sleep(POLL_INTERVAL_S)
    info(f"ready in {time.monotonic() - started:.1f}s")


def ensure_same_ports(instance: Instance) -> None:
    """Refuse to reuse a state dir whose live Pulsar listens on other ports."""
    if not instance.meta_file.is_file():
        return
    previous = Instance.from_state_dir(instance.state_dir)
    same = (previous.web_port, previous.broker_port) == (instance.web_port, instance.broker_port)
    if not same and running_pid(previous) is not None:
        raise PulsarctlError(
            f"{instance.state_dir} belongs to the Pulsar running on {previous.web_url}; "
            "stop it first or pick another --state-dir"
        )


# ------------------------------------------------------------------------------- commands


def cmd_up(args: argparse.Namespace) -> int:
    wanted = requested_instance(args.web_port, args.broker_port, args.state_dir)
    with file_lock(wanted.state_dir / ".lock"):
        ensure_same_ports(wanted)
        live = Instance.from_state_dir(wanted.state_dir) if wanted.meta_file.is_file() else None
        if live is not None and running_pid(live) is not None and is_ready(live):
            info(f"already running: {live.web_url} (state in {live.state_dir})")
        else:
            busy = [p for p in (wanted.web_port, wanted.broker_port) if listening(p)]
            if busy:
                raise PulsarctlError(
                    f"port(s) {busy} already in use by a process pulsarctl did not start "
                    f"from {wanted.state_dir}; stop it or choose other ports"
                )
            libs = ensure_libs()
            instance = with_side_ports(wanted)
            write_instance_files(instance)
            proc = start_pulsar(instance, libs)
            try:
                wait_ready(instance, proc, args.timeout)
            except PulsarctlError:
                # Leave no half-started JVM behind: the next `up` starts from a clean slate.
                stop_pid(proc.pid)
                proc.wait()
                instance.pid_file.unlink(missing_ok=True)
                raise
    print(wanted.broker_url)
    print(wanted.web_url)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or default_state_dir(args.web_port)).resolve()
    if not (state_dir / "instance.json").is_file():
        info(f"no Pulsar state in {state_dir}; nothing to stop")
        return 0
    instance = Instance.from_state_dir(state_dir)
    with file_lock(state_dir / ".lock"):
        if not stop_instance(instance):
            info(f"no Pulsar running on {instance.web_url}; nothing to stop")
        if args.purge:
            shutil.rmtree(state_dir)
            info(f"removed {state_dir}")
    return 0


def cmd_status(_args: argparse.Namespace) -> int:
    metas = sorted(STATE_ROOT.glob("*/instance.json"))
    if not metas:
        print(f"no Pulsar known under {STATE_ROOT}")
        return 0
    for meta in metas:
        instance = Instance.from_state_dir(meta.parent)
        pid = running_pid(instance)
        state = "stopped" if pid is None else ("ready" if is_ready(instance) else "not ready")
        pid_text = str(pid) if pid is not None else "-"
        print(f"{instance.web_url:<24} {instance.broker_url:<24} pid {pid_text:<8} {state:<10}"
              f" {instance.state_dir}")  # fmt: skip
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or default_state_dir(args.web_port)).resolve()
    path = state_dir / ("console.log" if args.console else "pulsar.log")
    if not path.is_file():
        raise PulsarctlError(f"no log at {path}")
    sys.stdout.write(tail(path, args.lines))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pulsarctl.py",
        description="Run the real Apache Pulsar standalone from Maven Central jars.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start Pulsar standalone; print its broker and web URLs")
    up.add_argument("--web-port", type=int, default=DEFAULT_WEB_PORT, help="REST port (8080)")
    up.add_argument(
        "--broker-port", type=int, default=DEFAULT_BROKER_PORT, help="binary port (6650)"
    )
    up.add_argument("--state-dir", type=Path, default=None, help="default: .state/<web port>/")
    up.add_argument("--timeout", type=float, default=READY_TIMEOUT_S, help="seconds")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop the Pulsar on --web-port")
    down.add_argument("--web-port", type=int, default=DEFAULT_WEB_PORT)
    down.add_argument("--state-dir", type=Path, default=None, help="default: .state/<web port>/")
    down.add_argument("--purge", action="store_true", help="also delete its state and data")
    down.set_defaults(func=cmd_down)

    status = sub.add_parser("status", help="list known Pulsars and whether they answer")
    status.set_defaults(func=cmd_status)

    logs = sub.add_parser("logs", help="print the tail of Pulsar's log")
    logs.add_argument("--web-port", type=int, default=DEFAULT_WEB_PORT)
    logs.add_argument("--state-dir", type=Path, default=None)
    logs.add_argument("-n", "--lines", type=int, default=LOG_TAIL_LINES)
    logs.add_argument("--console", action="store_true", help="JVM stdout/stderr instead")
    logs.set_defaults(func=cmd_logs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except PulsarctlError as exc:
        print(f"pulsarctl: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
