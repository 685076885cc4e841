#!/usr/bin/env python3
"""Run a real Apache Kafka (KRaft) from Maven Central jars, without Docker.

Stdlib only: it runs before the project's virtualenv exists. It needs Java 17+ and Maven.

Usage::

    kafkactl.py up [--port 9092] [--controller-port PORT] [--state-dir DIR] [--timeout S]
    kafkactl.py down [--port 9092] [--state-dir DIR] [--purge]
    kafkactl.py cluster-up [--timeout S]
    kafkactl.py cluster-down [--purge]
    kafkactl.py status
    kafkactl.py logs [--port 9092] [--state-dir DIR] [-n LINES] [--console]

``up`` and ``cluster-up`` print the bootstrap address(es) as their last stdout line (progress
goes to stderr), so ``BOOTSTRAP=$(python3 docker/kafka/kafkactl.py up)`` works.

Ports:

* single node: broker ``--port`` (default 9092); controller ``--controller-port``, default
  ``port + 1`` (9093), the Kafka quickstart convention. Two single nodes therefore need
  broker ports at least 2 apart (e.g. 9092 and 29092).
* cluster: brokers 19092/29092/31092, controllers 19093/29093/31093 (node ids 1/2/3). The
  same host ports as ``docker/compose.yaml``, so a test suite can target either.

Layout (next to this script, both git-ignored):

* ``.cache/libs-<kafka version>/`` jars resolved by ``mvn dependency:copy-dependencies``
  from ``pom.xml`` (the single version pin), with a ``.complete`` marker holding the
  pom's sha256, so only the first ``up`` (or a pom change) runs Maven.
* ``.state/<port>/`` for a single node, ``.state/cluster/node-<id>/`` for the cluster:
  ``server.properties``, ``log4j2.xml``, ``node.json``, ``kafka.pid``, ``server.log`` (the
  broker's own log), ``console.log`` (JVM stdout/stderr) and ``data/`` (log.dirs).

Readiness: the broker must answer a Kafka Metadata request (sent by hand over a socket) whose
cluster id is the one we formatted with and whose broker list holds every expected node. A
KRaft broker is only listed there once it is registered *and unfenced*, so an answer means
topics can be created; a bare TCP connect is not enough (the socket binds long before the
broker serves requests).

Environment: ``KAFKA_HEAP_OPTS`` replaces the default heap flags (``-Xmx512m`` single,
``-Xmx384m`` per cluster node); ``KAFKA_OPTS`` is appended to the JVM options; ``JAVA_HOME``
picks the JVM (else ``java`` on PATH).
"""

from __future__ import annotations

import argparse
import base64
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
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
CACHE_DIR = HERE / ".cache"
STATE_ROOT = HERE / ".state"
CLUSTER_ROOT = STATE_ROOT / "cluster"

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 9092
CONTROLLER_PORT_OFFSET = 1
SINGLE_HEAP = "-Xmx512m"
CLUSTER_HEAP = "-Xmx384m"
# (node id, broker port, controller port); also published by docker/compose.yaml. Every port
# lies below Linux's ephemeral range (32768-60999): a port inside it can be taken as the source
# port of an outgoing connection while its broker is down -- even by a client reconnecting to
# that very broker (TCP simultaneous open) -- and the restart then fails to bind.
CLUSTER_LAYOUT: tuple[tuple[int, int, int], ...] = (
    (1, 19092, 19093),
    (2, 29092, 29093),
    (3, 31092, 31093),
)
# Kafka's own defaults for the broker JVM, plus a loud death on OOM: a test run should see a
# dead broker and its log, not a broker wedged in GC.
JVM_OPTS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
# The format tool is short-lived: skip the optimising JIT, it only slows start-up.
TOOL_JVM_OPTS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

SINGLE_READY_TIMEOUT_S = 60.0
CLUSTER_READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
PORT_RELEASE_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 2.0
POLL_INTERVAL_S = 0.25
LOG_TAIL_LINES = 60


class KafkactlError(Exception):
    """A failure the operator must act on; main() prints it and exits 1."""


def info(message: str) -> None:
    """Progress goes to stderr so stdout carries only the result (the bootstrap address)."""
    print(f"kafkactl: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- node settings


@dataclass(frozen=True)
class Node:
    """Everything that identifies one broker+controller JVM and where its files live."""

    node_id: int
    port: int
    controller_port: int
    state_dir: Path
    # (node id, controller port) of every voter for a static quorum; empty for a single
    # node, which formats a dynamic quorum with --standalone instead.
    voters: tuple[tuple[int, int], ...] = ()
    heap_opts: tuple[str, ...] = (SINGLE_HEAP,)

    @property
    def standalone(self) -> bool:
        return not self.voters

    @property
    def replication(self) -> int:
        return 1 if self.standalone else len(self.voters)

    @property
    def min_isr(self) -> int:
        # A majority: one replica may be down and acks=all writes still succeed.
        return 1 if self.standalone else len(self.voters) // 2 + 1

    @property
    def expected_brokers(self) -> frozenset[int]:
        return frozenset(v for v, _ in self.voters) if self.voters else frozenset({self.node_id})

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def props_file(self) -> Path:
        return self.state_dir / "server.properties"

    @property
    def log4j_file(self) -> Path:
        return self.state_dir / "log4j2.xml"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "kafka.pid"

    @property
    def broker_log(self) -> Path:
        return self.state_dir / "server.log"

    @property
    def console_log(self) -> Path:
        return self.state_dir / "console.log"

    @property
    def meta_file(self) -> Path:
        return self.state_dir / "node.json"

    def to_json(self) -> str:
        return json.dumps(
            {
                "node_id": self.node_id,
                "port": self.port,
                "controller_port": self.controller_port,
                "voters": [list(v) for v in self.voters],
                "heap_opts": list(self.heap_opts),
            },
            indent=2,
        )

    @classmethod
    def from_state_dir(cls, state_dir: Path) -> Node:
        raw = json.loads((state_dir / "node.json").read_text())
        return cls(
            node_id=int(raw["node_id"]),
            port=int(raw["port"]),
            controller_port=int(raw["controller_port"]),
            state_dir=state_dir,
            voters=tuple((int(n), int(p)) for n, p in raw["voters"]),
            heap_opts=tuple(str(o) for o in raw["heap_opts"]),
        )


def heap_opts(default: str) -> tuple[str, ...]:
    override = os.environ.get("KAFKA_HEAP_OPTS", "").strip()
    return tuple(shlex.split(override)) if override else (default,)


def single_node(port: int, controller_port: int | None, state_dir: Path | None) -> Node:
    cport = controller_port if controller_port is not None else port + CONTROLLER_PORT_OFFSET
    for p in (port, cport):
        if not 0 < p < 65536:
            raise KafkactlError(f"port {p} is out of range")
    if cport == port:
        raise KafkactlError("--controller-port must differ from --port")
    return Node(
        node_id=1,
        port=port,
        controller_port=cport,
        state_dir=(state_dir or STATE_ROOT / str(port)).resolve(),
        heap_opts=heap_opts(SINGLE_HEAP),
    )


def cluster_nodes() -> list[Node]:
    voters = tuple((node_id, cport) for node_id, _, cport in CLUSTER_LAYOUT)
    return [
        Node(
            node_id=node_id,
            port=port,
            controller_port=cport,
            state_dir=CLUSTER_ROOT / f"node-{node_id}",
            voters=voters,
            heap_opts=heap_opts(CLUSTER_HEAP),
        )
        for node_id, port, cport in CLUSTER_LAYOUT
    ]


# ------------------------------------------------------------------------ config rendering


def render_server_properties(node: Node) -> str:
    """server.properties for a combined broker+controller; every setting says why."""
    listeners = f"PLAINTEXT://{LOOPBACK}:{node.port},CONTROLLER://{LOOPBACK}:{node.controller_port}"
    if node.standalone:
        quorum = [
            "# Dynamic KRaft quorum of this one controller (formatted with --standalone).",
            f"controller.quorum.bootstrap.servers={LOOPBACK}:{node.controller_port}",
        ]
    else:
        voters = ",".join(f"{n}@{LOOPBACK}:{p}" for n, p in node.voters)
        quorum = [
            "# Static KRaft quorum: every node votes (formatted without a quorum flag).",
            f"controller.quorum.voters={voters}",
        ]
    rf, isr = node.replication, node.min_isr
    lines = [
        "# Written by docker/kafka/kafkactl.py; rewritten on every start, do not edit.",
        "",
        "# One JVM is both broker and KRaft controller: no separate controller process.",
        "process.roles=broker,controller",
        f"node.id={node.node_id}",
        *quorum,
        "",
        "# Loopback only: a test broker must never be reachable from the network.",
        f"listeners={listeners}",
        f"advertised.listeners={listeners}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={node.data_dir}",
        "",
        "# Replication sized to the node count: 1 for a single node, 3 with min ISR 2 (a",
        "# majority) for the cluster, so acks=all survives one broker down.",
        f"default.replication.factor={rf}",
        f"min.insync.replicas={isr}",
        "num.partitions=1",
        "",
        "# Internal topics must fit the node count or group/transaction/share features fail",
        "# (a single node cannot host replication factor 3). One partition each: these topics",
        "# are created on first use, and 50 partitions (the default) cost seconds in a test.",
        f"offsets.topic.replication.factor={rf}",
        "offsets.topic.num.partitions=1",
        f"transaction.state.log.replication.factor={rf}",
        f"transaction.state.log.min.isr={isr}",
        "transaction.state.log.num.partitions=1",
        f"share.coordinator.state.topic.replication.factor={rf}",
        f"share.coordinator.state.topic.min.isr={isr}",
        "share.coordinator.state.topic.num.partitions=1",
        "",
        "# Consumer groups: no 3 s wait for more members before the first rebalance, and",
        "# allow the short session timeouts tests use to detect a dead consumer quickly.",
        "group.initial.rebalance.delay.ms=0",
        "group.min.session.timeout.ms=500",
        "",
        "# A transactional producer that died mid-transaction blocks read_committed readers",
        "# (and a new ownership slot owner) until its transaction times out AND the broker's",
        "# sweep aborts it; the default sweep runs every 10 s (issue 11: failover 7x liveness).",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
        "",
        "# Compaction: the cleaner re-checks for dirty logs every second (default 15 s), so a",
        "# test with a small segment.ms sees compaction happen. 32 MiB dedupe buffer instead",
        "# of 128 MiB: plenty for test key counts and it keeps the small heap free.",
        "log.cleaner.backoff.ms=1000",
        "log.cleaner.dedupe.buffer.size=33554432",
        "",
        "# Topics exist only when created explicitly (the project creates its own topics",
        "# with the right configs; a typo must fail, not create a topic with defaults).",
        "auto.create.topics.enable=false",
        "delete.topic.enable=true",
    ]
    return "\n".join(lines) + "\n"


def render_log4j2(node: Node) -> str:
    """log4j2 config: the broker's own log goes to server.log in the state dir."""
    log = str(node.broker_log)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by docker/kafka/kafkactl.py. -->
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="server" fileName={quoteattr(log)} filePattern={quoteattr(log + ".%i")}>
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="50 MB"/></Policies>
      <DefaultRolloverStrategy max="2"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <!-- One line per request at DEBUG/TRACE: far too chatty for a test broker. -->
    <Logger name="kafka.request.logger" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
"""


def write_node_files(node: Node) -> None:
    node.data_dir.mkdir(parents=True, exist_ok=True)
    node.props_file.write_text(render_server_properties(node))
    node.log4j_file.write_text(render_log4j2(node))
    node.meta_file.write_text(node.to_json() + "\n")


# ------------------------------------------------------------------------------- jars


def kafka_version() -> str:
    """The Kafka version pinned in pom.xml: the one place it is written down."""
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", POM.read_text())
    if match is None:
        raise KafkactlError(f"no <kafka.version> property in {POM}")
    return match.group(1)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialise concurrent kafkactl calls (e.g. parallel test workers) on one resource."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_libs() -> Path:
    """Resolve the broker's jars with Maven once; later calls only check the marker."""
    libs = CACHE_DIR / f"libs-{kafka_version()}"
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
            raise KafkactlError("Maven (mvn) is not on PATH; it fetches the Kafka jars")
        staging = CACHE_DIR / f"{libs.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        info(f"fetching the Kafka jars with Maven into {libs} (once) ...")
        started = time.monotonic()
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        # Maven's output goes to stderr: stdout is reserved for the bootstrap address.
        result = subprocess.run(cmd, stdout=sys.stderr, check=False)  # noqa: S603 - fixed argv
        if result.returncode != 0 or not any(staging.glob("kafka_*.jar")):
            raise KafkactlError(f"mvn failed (exit {result.returncode}) resolving {POM}")
        (staging / ".complete").write_text(digest + "\n")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        info(f"fetched {len(list(libs.glob('*.jar')))} jars in {time.monotonic() - started:.1f}s")
    return libs


# --------------------------------------------------------------------------- processes


def java_bin() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KafkactlError("java is not on PATH and JAVA_HOME is unset; install Java 17+")
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


def is_our_broker(pid: int, node: Node) -> bool:
    """pid is alive and (where /proc exists) really is the JVM started with our config."""
    if not pid_alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True
    with contextlib.suppress(OSError):
        args = cmdline.read_bytes().split(b"\0")
        return b"kafka.Kafka" in args and str(node.props_file).encode() in args
    return False


def running_pid(node: Node) -> int | None:
    """The pid of the live broker kafkactl started for node, else None (stale file removed)."""
    try:
        pid = int(node.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if is_our_broker(pid, node):
        return pid
    node.pid_file.unlink(missing_ok=True)
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


def format_storage(nodes: Sequence[Node], libs: Path, cluster_id: str) -> None:
    """Format every unformatted data dir, in parallel (one short JVM each)."""
    todo = [n for n in nodes if not (n.data_dir / "meta.properties").is_file()]
    procs: list[tuple[Node, subprocess.Popen[bytes]]] = []
    for node in todo:
        cmd = [
            java_bin(), *TOOL_JVM_OPTS, f"-Dlog4j2.configurationFile={node.log4j_file}",
            "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format",
            "-t", cluster_id, "-c", str(node.props_file), "--ignore-formatted",
            *(["--standalone"] if node.standalone else []),
        ]  # fmt: skip
        proc = subprocess.Popen(  # noqa: S603 - argv built from our own settings
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        procs.append((node, proc))
    for node, proc in procs:
        output, _ = proc.communicate()
        if proc.returncode != 0:
            sys.stderr.write(output.decode(errors="replace"))
            raise KafkactlError(f"formatting {node.data_dir} failed (exit {proc.returncode})")
        info(f"formatted {node.data_dir} (cluster id {cluster_id})")


def start_broker(node: Node, libs: Path) -> subprocess.Popen[bytes]:
    """Start the JVM detached (own session, output to console.log) and record its pid."""
    extra = tuple(shlex.split(os.environ.get("KAFKA_OPTS", "")))
    cmd = [
        java_bin(), *node.heap_opts, *JVM_OPTS, *extra,
        f"-Dlog4j2.configurationFile={node.log4j_file}", f"-Dkafka.logs.dir={node.state_dir}",
        "-cp", f"{libs}/*", "kafka.Kafka", str(node.props_file),
    ]  # fmt: skip
    with node.console_log.open("ab") as console:
        proc = subprocess.Popen(  # noqa: S603 - argv built from our own settings
            cmd,
            cwd=node.state_dir,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    node.pid_file.write_text(f"{proc.pid}\n")
    info(f"started node {node.node_id} on {node.bootstrap} (pid {proc.pid})")
    return proc


def stop_pids(pids: Sequence[int]) -> None:
    """SIGTERM (Kafka shuts down cleanly), then SIGKILL whatever outlives the grace period."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    if wait_for(lambda: not any(pid_alive(p) for p in pids), STOP_TIMEOUT_S):
        return
    for pid in pids:
        if pid_alive(pid):
            info(f"pid {pid} ignored SIGTERM for {STOP_TIMEOUT_S:.0f}s; sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(pid_alive(p) for p in pids), 5.0)


def stop_nodes(nodes: Sequence[Node]) -> list[Node]:
    """Stop the live brokers among nodes; returns the ones that were running."""
    live = [(n, pid) for n in nodes if (pid := running_pid(n)) is not None]
    stop_pids([pid for _, pid in live])
    ports = [p for n, _ in live for p in (n.port, n.controller_port)]
    if not wait_for(lambda: not any(listening(p) for p in ports), PORT_RELEASE_TIMEOUT_S):
        busy = [p for p in ports if listening(p)]
        raise KafkactlError(f"broker stopped but something still listens on {busy}")
    for node, pid in live:
        node.pid_file.unlink(missing_ok=True)
        info(f"stopped node {node.node_id} on {node.bootstrap} (pid {pid})")
    return [n for n, _ in live]


# ----------------------------------------------------------------- Kafka protocol probe

_API_METADATA = 3
_API_VERSIONS = 18
# Highest Metadata version with the classic (non-flexible) encoding parsed below.
_METADATA_MAX_CLASSIC = 8
_CLIENT_ID = b"kafkactl"


@dataclass(frozen=True)
class BrokerView:
    """What a broker says about its cluster in a Metadata response."""

    cluster_id: str | None
    broker_ids: frozenset[int]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def _take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self._data, self._pos)
        self._pos += struct.calcsize(fmt)
        return int(value)

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        raw = self._data[self._pos : self._pos + size]
        self._pos += size
        return raw.decode()


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks += chunk
    return bytes(chunks)


def _request(sock: socket.socket, api_key: int, version: int, body: bytes) -> _Reader:
    """One request with header v1 (classic encoding); returns the response body."""
    correlation_id = api_key * 1000 + version
    header = struct.pack(">hhih", api_key, version, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    if not 4 <= size <= 16 * 1024 * 1024:
        raise ValueError(f"implausible response size {size}")
    reader = _Reader(_recv_exact(sock, size))
    if reader.int32() != correlation_id:
        raise ValueError("correlation id mismatch: not a Kafka broker?")
    return reader


def _metadata_versions(sock: socket.socket) -> tuple[int, int]:
    """ApiVersions v0 (every broker answers it); returns Metadata's (min, max) version."""
    reader = _request(sock, _API_VERSIONS, 0, b"")
    if reader.int16() != 0:
        raise ValueError("ApiVersions failed")
    for _ in range(reader.int32()):
        key, low, high = reader.int16(), reader.int16(), reader.int16()
        if key == _API_METADATA:
            return low, high
    raise ValueError("broker does not offer Metadata")


def _metadata(sock: socket.socket, version: int) -> BrokerView:
    """Metadata for no topics (v1-v8): just the unfenced brokers and the cluster id."""
    body = struct.pack(">i", 0)  # an empty topic list (null would mean all topics)
    if version >= 4:
        body += b"\x00"  # allow_auto_topic_creation
    if version >= 8:
        body += b"\x00\x00"  # include cluster / topic authorized operations
    reader = _request(sock, _API_METADATA, version, body)
    if version >= 3:
        reader.int32()  # throttle_time_ms
    broker_ids = set()
    for _ in range(reader.int32()):
        broker_ids.add(reader.int32())
        reader.string()  # host
        reader.int32()  # port
        reader.string()  # rack
    cluster_id = reader.string() if version >= 2 else None
    return BrokerView(cluster_id=cluster_id, broker_ids=frozenset(broker_ids))


def probe(port: int, timeout: float = PROBE_TIMEOUT_S) -> BrokerView | None:
    """Ask the broker on port for metadata; None unless it really speaks Kafka there."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            low, high = _metadata_versions(sock)
            version = min(high, _METADATA_MAX_CLASSIC)
            if version < max(low, 1):
                return None
            return _metadata(sock, version)
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return None


def is_ready(node: Node, cluster_id: str) -> bool:
    view = probe(node.port)
    return (
        view is not None
        and view.cluster_id == cluster_id
        and node.expected_brokers <= view.broker_ids
    )


# ------------------------------------------------------------------------ lifecycle


def cluster_id_for(path: Path) -> str:
    """The cluster id stored at path, created on first use (Kafka's base64 UUID form)."""
    with contextlib.suppress(FileNotFoundError):
        return path.read_text().strip()
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):  # kafka-storage rejects ids that look like flags
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(candidate + "\n")
    return candidate


def tail(path: Path, lines: int) -> str:
    try:
        content = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"({path} does not exist)\n"
    return "".join(line + "\n" for line in content[-lines:])


def report_failure(node: Node) -> None:
    for path in (node.broker_log, node.console_log):
        text = tail(path, LOG_TAIL_LINES)
        if text.strip():
            sys.stderr.write(f"----- last {LOG_TAIL_LINES} lines of {path} -----\n{text}")


def wait_ready(
    nodes: Sequence[Node],
    procs: dict[int, subprocess.Popen[bytes]],
    cluster_id: str,
    timeout: float,
) -> None:
    """Block until every node answers as part of the full cluster; raise on death/timeout."""
    started = time.monotonic()
    pending = list(nodes)
    while pending:
        for node in pending:
            proc = procs.get(node.node_id)
            died = proc.poll() is not None if proc else running_pid(node) is None
            if died:
                report_failure(node)
                raise KafkactlError(f"node {node.node_id} ({node.bootstrap}) exited during start")
        pending = [n for n in pending if not is_ready(n, cluster_id)]
        if pending and time.monotonic() - started > timeout:
            for node in pending:
                report_failure(node)
            names = ", ".join(n.bootstrap for n in pending)
            raise KafkactlError(f"{names} not ready after {timeout:.0f}s")
        if pending:
            time.sleep(POLL_INTERVAL_S)
    info(f"ready in {time.monotonic() - started:.1f}s")


def ensure_ports_free(nodes: Sequence[Node]) -> None:
    busy = [p for n in nodes for p in (n.port, n.controller_port) if listening(p)]
    if busy:
        raise KafkactlError(
            f"port(s) {busy} already in use by a process kafkactl did not start from "
            f"{', '.join(str(n.state_dir) for n in nodes)}; stop it or choose other ports"
        )


def ensure_same_ports(node: Node) -> None:
    """Refuse to reuse a state dir whose live broker listens on other ports."""
    if not node.meta_file.is_file():
        return
    previous = Node.from_state_dir(node.state_dir)
    same = (previous.port, previous.controller_port) == (node.port, node.controller_port)
    if not same and running_pid(previous) is not None:
        raise KafkactlError(
            f"{node.state_dir} belongs to the broker running on {previous.bootstrap}; "
            "stop it first or pick another --state-dir"
        )


def bring_up(nodes: Sequence[Node], cluster_id: str, timeout: float) -> None:
    """Start whichever of nodes is not running, then wait until all of them are ready."""
    down = [n for n in nodes if running_pid(n) is None]
    procs: dict[int, subprocess.Popen[bytes]] = {}
    if down:
        ensure_ports_free(down)
        libs = ensure_libs()
        for node in down:
            write_node_files(node)
        format_storage(down, libs, cluster_id)
        for node in down:
            procs[node.node_id] = start_broker(node, libs)
    try:
        wait_ready(nodes, procs, cluster_id, timeout)
    except KafkactlError:
        # Leave no half-started JVM behind: the next `up` starts from a clean slate.
        stop_pids([p.pid for p in procs.values()])
        for proc in procs.values():
            proc.wait()
        for node in down:
            node.pid_file.unlink(missing_ok=True)
        raise


def cmd_up(args: argparse.Namespace) -> int:
    node = single_node(args.port, args.controller_port, args.state_dir)
    with file_lock(node.state_dir / ".lock"):
        ensure_same_ports(node)
        cluster_id = cluster_id_for(node.state_dir / "cluster.id")
        if running_pid(node) is not None and is_ready(node, cluster_id):
            info(f"already running: {node.bootstrap} (state in {node.state_dir})")
        else:
            bring_up([node], cluster_id, args.timeout)
    print(node.bootstrap)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or STATE_ROOT / str(args.port)).resolve()
    if not (state_dir / "node.json").is_file():
        info(f"no broker state in {state_dir}; nothing to stop")
        return 0
    node = Node.from_state_dir(state_dir)
    with file_lock(state_dir / ".lock"):
        if not stop_nodes([node]):
            info(f"no broker running on {node.bootstrap}; nothing to stop")
        if args.purge:
            shutil.rmtree(state_dir)
            info(f"removed {state_dir}")
    return 0


def cmd_cluster_up(args: argparse.Namespace) -> int:
    nodes = cluster_nodes()
    with file_lock(CLUSTER_ROOT / ".lock"):
        cluster_id = cluster_id_for(CLUSTER_ROOT / "cluster.id")
        if all(running_pid(n) is not None and is_ready(n, cluster_id) for n in nodes):
            info("cluster already running")
        else:
            bring_up(nodes, cluster_id, args.timeout)
    print(",".join(n.bootstrap for n in nodes))
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    nodes = cluster_nodes()
    with file_lock(CLUSTER_ROOT / ".lock"):
        # All at once: stopping one by one would make the last ones lose their quorum
        # and wait out timeouts during controlled shutdown.
        if not stop_nodes(nodes):
            info("no cluster node running; nothing to stop")
        if args.purge:
            for node in nodes:
                shutil.rmtree(node.state_dir, ignore_errors=True)
            (CLUSTER_ROOT / "cluster.id").unlink(missing_ok=True)
            info(f"removed the cluster state under {CLUSTER_ROOT}")
    return 0


def known_nodes() -> list[Node]:
    metas = sorted(STATE_ROOT.glob("*/node.json")) + sorted(CLUSTER_ROOT.glob("*/node.json"))
    return [Node.from_state_dir(meta.parent) for meta in metas]


def cmd_status(_args: argparse.Namespace) -> int:
    nodes = known_nodes()
    if not nodes:
        print(f"no brokers known under {STATE_ROOT}")
        return 0
    for node in nodes:
        pid = running_pid(node)
        if pid is None:
            state = "stopped"
        else:
            view = probe(node.port)
            state = f"ready (brokers {sorted(view.broker_ids)})" if view else "not answering"
        pid_text = str(pid) if pid is not None else "-"
        print(f"{node.bootstrap:<16} node {node.node_id}  pid {pid_text:<8} {state:<28}"
              f" {node.state_dir}")  # fmt: skip
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    if args.state_dir is not None:
        state_dir = args.state_dir.resolve()
    else:
        candidates = [STATE_ROOT / str(args.port)] + [
            n.state_dir for n in cluster_nodes() if n.port == args.port
        ]
        state_dir = next((d for d in candidates if d.is_dir()), candidates[0])
    path = state_dir / ("console.log" if args.console else "server.log")
    if not path.is_file():
        raise KafkactlError(f"no log at {path}")
    sys.stdout.write(tail(path, args.lines))
    return 0


# ------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafkactl.py",
        description="Run a real Apache Kafka (KRaft) from Maven Central jars, without Docker.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start a single-node broker+controller; print its address")
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help="broker port (9092)")
    up.add_argument(
        "--controller-port", type=int, default=None, help="controller port (default: port + 1)"
    )
    up.add_argument("--state-dir", type=Path, default=None, help="default: .state/<port>/")
    up.add_argument("--timeout", type=float, default=SINGLE_READY_TIMEOUT_S, help="seconds")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop the single-node broker on --port")
    down.add_argument("--port", type=int, default=DEFAULT_PORT)
    down.add_argument("--state-dir", type=Path, default=None, help="default: .state/<port>/")
    down.add_argument("--purge", action="store_true", help="also delete its state and data")
    down.set_defaults(func=cmd_down)

    cup = sub.add_parser("cluster-up", help="start 3 nodes on 19092/29092/31092")
    cup.add_argument("--timeout", type=float, default=CLUSTER_READY_TIMEOUT_S, help="seconds")
    cup.set_defaults(func=cmd_cluster_up)

    cdown = sub.add_parser("cluster-down", help="stop the 3-node cluster")
    cdown.add_argument("--purge", action="store_true", help="also delete its state and data")
    cdown.set_defaults(func=cmd_cluster_down)

    status = sub.add_parser("status", help="list known brokers and whether they answer")
    status.set_defaults(func=cmd_status)

    logs = sub.add_parser("logs", help="print the tail of a broker's log")
    logs.add_argument("--port", type=int, default=DEFAULT_PORT)
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
    except KafkactlError as exc:
        print(f"kafkactl: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
