#!/usr/bin/env python3
"""Two policy-sync clusters on one machine, joined by the real MirrorMaker 2, without Docker.

Why this file is past 600 lines: like kafkactl.py it is a stand-alone stdlib launcher (it
cannot import the package's helpers), and its parts -- plan, jars, topics, processes,
commands -- only make sense together.

Stdlib only, like ``docker/kafka/kafkactl.py`` (whose helpers it imports): each cluster is a
single-node Kafka started by kafkactl and two ``broker-shim run --cluster NAME`` sidecars;
MirrorMaker 2 is ``org.apache.kafka:connect-mirror`` (version pinned in ``pom.xml`` beside
this file, equal to kafkactl's) in dedicated mode, both directions, its configuration
rendered by ``sync/geo/_mm2.py`` (loaded by path: it is stdlib only too). docs/geo-design.md
says why each setting is what it is.

Usage::

    geoctl.py up [--state-dir DIR] [--east-port 21092] [--west-port 23092]
                 [--east-sidecar-ports 21080,21081] [--west-sidecar-ports 23080,23081]
                 [--free-ports] [--timeout S] [--mm2-set KEY=VALUE ...]
    geoctl.py down [--state-dir DIR] [--purge]
    geoctl.py mm2-stop | mm2-kill | mm2-start [--state-dir DIR] [--mm2-set KEY=VALUE ...]
    geoctl.py kafka-stop | kafka-start --cluster NAME [--state-dir DIR]
    geoctl.py status [--state-dir DIR]

``up`` writes ``DIR/endpoints.json`` (default ``build/geo/endpoints.json``)::

    {"east": {"bootstrap": "127.0.0.1:P", "sidecars": ["http://127.0.0.1:Q", ...]}, "west": ...}

and prints its path as the last stdout line (progress goes to stderr). In every cluster it
registers both clusters (``PUT /admin/v2/clusters/{c}``), the tenant ``geo`` allowing both
and the namespace ``geo/ns`` replicating to both, as Pulsar's geo set-up does with
independent configuration stores. ``--free-ports``
takes any free loopback ports instead of the fixed ones (tests run beside other tests).
Process ids are in ``DIR/state.json``; logs in ``DIR/<cluster>/`` and ``DIR/mm2/``.

Sidecars run with the Python running this script (``make`` uses the project's virtualenv),
with the checkout holding this script first on ``PYTHONPATH``.

Per cluster, before the sidecars and MM2 start, geoctl creates the global topic
``policy-sync-global-events`` and, for each peer, its mirror ``<peer>.policy-sync-global-events``
(same partition count: MM2 writes each record to the partition number it came from; same
compacted config, since topic-config sync is off). Readiness of MM2: its log shows
``MirrorSourceTask``'s ``replicating N topic-partitions SOURCE->TARGET`` line for every
direction.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from xml.sax.saxutils import quoteattr

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "docker" / "kafka"))

import kafkactl  # noqa: E402 - the sibling launcher, found through the line above

POM = HERE / "pom.xml"
CACHE_DIR = HERE / ".cache"
KAFKACTL = ROOT / "docker" / "kafka" / "kafkactl.py"
MM2_SOURCE = ROOT / "sync" / "geo" / "_mm2.py"
DEFAULT_STATE_DIR = ROOT / "build" / "geo"

#: Must equal sync._constants.GLOBAL_EVENTS_TOPIC (a unit test checks).
GLOBAL_EVENTS_TOPIC = "policy-sync-global-events"
GLOBAL_PARTITIONS = 4
#: Must equal sync._constants.CHANGE_EVENTS_CREATE_CONFIG (a unit test checks).
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "min.cleanable.dirty.ratio": "0.1",
    "segment.ms": "3600000",
}
CLUSTERS = ("east", "west")
#: Created in every cluster by ``up``, replicating to every cluster.
GEO_TENANT = "geo"
GEO_NAMESPACE = "geo/ns"
DEFAULT_KAFKA_PORTS = {"east": 21092, "west": 23092}
DEFAULT_SIDECAR_PORTS = {"east": (21080, 21081), "west": (23080, 23081)}
MM2_HEAP = "-Xmx256m"
#: MM2 copies a few records a second: the C1 compiler alone starts the JVM faster on a busy
#: 2-core machine, and its code is fast enough for that.
MM2_JVM_OPTS = ("-XX:TieredStopAtLevel=1",)
MM2_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
READY_TIMEOUT_S = 180.0
_REPLICATING = re.compile(r"replicating \d+ topic-partitions (\S+)->(\S+):")
_API_CREATE_TOPICS = 19
_CREATE_TOPICS_VERSION = 2  # classic encoding; v0-v1 were removed in Kafka 4.0 (KIP-896)
_TOPIC_ALREADY_EXISTS = 36


class GeoctlError(Exception):
    """A failure the operator must act on; main() prints it and exits 1."""


def info(message: str) -> None:
    print(f"geoctl: {message}", file=sys.stderr, flush=True)


def load_mm2() -> ModuleType:
    """``sync/geo/_mm2.py``, loaded by path (stdlib only: no virtualenv needed)."""
    spec = importlib.util.spec_from_file_location("policy_sync_geo_mm2", MM2_SOURCE)
    if spec is None or spec.loader is None:
        raise GeoctlError(f"cannot load {MM2_SOURCE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class ClusterPlan:
    """One cluster's ports: its broker, its KRaft controller and its sidecars' HTTP."""

    name: str
    port: int
    controller_port: int
    sidecar_ports: tuple[int, ...]

    @property
    def bootstrap(self) -> str:
        return f"{kafkactl.LOOPBACK}:{self.port}"

    @property
    def sidecar_urls(self) -> list[str]:
        return [f"http://{kafkactl.LOOPBACK}:{p}" for p in self.sidecar_ports]

    def sidecar_id(self, index: int) -> str:
        return f"{self.name[0]}{index + 1}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((kafkactl.LOOPBACK, 0))
        return int(s.getsockname()[1])


def plan(args: argparse.Namespace) -> list[ClusterPlan]:
    if args.free_ports:
        return [
            ClusterPlan(name, free_port(), free_port(), (free_port(), free_port()))
            for name in CLUSTERS
        ]
    ports = {"east": args.east_port, "west": args.west_port}
    sidecars = {"east": args.east_sidecar_ports, "west": args.west_sidecar_ports}
    return [
        ClusterPlan(name, ports[name], ports[name] + 1, tuple(sidecars[name])) for name in CLUSTERS
    ]


class State:
    """``state.json``: the plan and every process geoctl started (pid + what it runs)."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        self.path = state_dir / "state.json"
        self.data: dict[str, object] = {}
        with contextlib.suppress(FileNotFoundError):
            self.data = json.loads(self.path.read_text())

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        tmp.replace(self.path)

    def processes(self) -> dict[str, dict[str, object]]:
        procs = self.data.get("processes")
        if not isinstance(procs, dict):
            procs = self.data["processes"] = {}
        return procs

    def record(self, name: str, pid: int, marker: str) -> None:
        self.processes()[name] = {"pid": pid, "marker": marker}
        self.save()

    def live_pid(self, name: str) -> int | None:
        """The pid of ``name`` if it still runs what geoctl started (its cmdline holds the
        recorded marker), so a recycled pid is never signalled."""
        entry = self.processes().get(name)
        if not entry:
            return None
        pid, marker = int(str(entry["pid"])), str(entry["marker"])
        if not kafkactl.pid_alive(pid):
            return None
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            return pid if marker.encode() in cmdline else None
        return pid


# --------------------------------------------------------------------------- jars


def mm2_version() -> str:
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", POM.read_text())
    if match is None:
        raise GeoctlError(f"no <kafka.version> property in {POM}")
    return match.group(1)


def ensure_mm2_libs() -> Path:
    """Resolve MirrorMaker 2's jars with Maven once (kafkactl.ensure_libs' pattern)."""
    libs = CACHE_DIR / f"libs-mm2-{mm2_version()}"
    marker = libs / ".complete"
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()

    def cached() -> bool:
        return marker.is_file() and marker.read_text().strip() == digest

    if cached():
        return libs
    with kafkactl.file_lock(CACHE_DIR / ".fetch.lock"):
        if cached():
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise GeoctlError("Maven (mvn) is not on PATH; it fetches MirrorMaker 2's jars")
        staging = CACHE_DIR / f"{libs.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        info(f"fetching MirrorMaker 2's jars with Maven into {libs} (once) ...")
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        result = subprocess.run(cmd, stdout=sys.stderr, check=False)  # noqa: S603 - fixed argv
        if result.returncode != 0 or not any(staging.glob("connect-mirror-*.jar")):
            raise GeoctlError(f"mvn failed (exit {result.returncode}) resolving {POM}")
        (staging / ".complete").write_text(digest + "\n")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
    return libs


# --------------------------------------------------------------------------- topics


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def create_topics(port: int, names: Sequence[str], partitions: int) -> None:
    """CreateTopics (v2, sent by hand like kafkactl's probe); an existing topic is fine."""
    body = struct.pack(">i", len(names))
    for name in names:
        body += _string(name) + struct.pack(">ihi", partitions, -1, 0)
        body += struct.pack(">i", len(TOPIC_CONFIG))
        for key, value in TOPIC_CONFIG.items():
            body += _string(key) + _string(value)
    body += struct.pack(">ib", 30_000, 0)  # timeout_ms, validate_only
    with socket.create_connection((kafkactl.LOOPBACK, port), timeout=40) as sock:
        # kafkactl's request helper (classic header v1), shared rather than copied
        reader = kafkactl._request(sock, _API_CREATE_TOPICS, _CREATE_TOPICS_VERSION, body)  # noqa: SLF001
    reader.int32()  # throttle_time_ms
    for _ in range(reader.int32()):
        topic, code, message = reader.string(), reader.int16(), reader.string()
        if code not in (0, _TOPIC_ALREADY_EXISTS):
            raise GeoctlError(f"creating {topic} on port {port}: error {code} {message or ''}")
        info(f"topic {topic} on port {port}: {'created' if code == 0 else 'exists'}")


def topics_of(cluster: ClusterPlan, clusters: Sequence[ClusterPlan]) -> list[str]:
    peers = [c.name for c in clusters if c.name != cluster.name]
    return [GLOBAL_EVENTS_TOPIC, *(f"{p}.{GLOBAL_EVENTS_TOPIC}" for p in peers)]


# --------------------------------------------------------------------------- processes


def kafka_dir(state_dir: Path, cluster: str) -> Path:
    return state_dir / cluster / "kafka"


def start_kafkas(state_dir: Path, clusters: Sequence[ClusterPlan], timeout: float) -> None:
    """Both brokers at once (kafkactl up each), or none: a failure stops the other."""
    procs = []
    for c in clusters:
        cmd = [
            sys.executable, str(KAFKACTL), "up", "--port", str(c.port),
            "--controller-port", str(c.controller_port),
            "--state-dir", str(kafka_dir(state_dir, c.name)), "--timeout", str(timeout),
        ]  # fmt: skip
        procs.append((c, subprocess.Popen(cmd, stdout=subprocess.DEVNULL)))  # noqa: S603
    failed = [c.name for c, p in procs if p.wait() != 0]
    if failed:
        stop_kafkas(state_dir, clusters, purge=False)
        raise GeoctlError(f"Kafka of {', '.join(failed)} did not start (kafkactl's output above)")


def stop_kafkas(
    state_dir: Path, clusters: Sequence[str] | Sequence[ClusterPlan], *, purge: bool
) -> None:
    for c in clusters:
        name = c if isinstance(c, str) else c.name
        directory = kafka_dir(state_dir, name)
        if (directory / "node.json").is_file():
            cmd = [sys.executable, str(KAFKACTL), "down", "--state-dir", str(directory)]
            subprocess.run([*cmd, *(["--purge"] if purge else [])], check=False)  # noqa: S603


def child_env() -> dict[str, str]:
    """The sidecars import this checkout's code first, whatever the interpreter has installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def start_sidecar(
    state: State, cluster: ClusterPlan, index: int, peers: Sequence[str]
) -> subprocess.Popen[bytes]:
    broker_id = cluster.sidecar_id(index)
    home = state.dir / cluster.name / broker_id
    home.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "broker_shim.cli.shim", "run", "--cluster", cluster.name,
        "--broker-id", broker_id, "--http-port", str(cluster.sidecar_ports[index]),
        "--broker-port", "0", "--bootstrap-servers", cluster.bootstrap,
        "--state-dir", str(home / "state"), "--geo-peers", ",".join(peers),
    ]  # fmt: skip
    with (home / "sidecar.log").open("ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - argv built from our own settings
            cmd, cwd=ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    state.record(f"sidecar-{broker_id}", proc.pid, str(home / "state"))
    info(f"started sidecar {broker_id} of {cluster.name} on {cluster.sidecar_urls[index]}")
    return proc


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:  # noqa: S310 - loopback
            return bool(resp.status == 200)
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def admin_call(url: str, method: str, body: object, timeout: float) -> int:
    """One admin REST call; 503 (a sidecar still replaying) is retried until ``timeout``.
    Returns the status; 2xx and 409 (already there: ``up`` may run on old data) are fine."""
    data = json.dumps(body).encode()
    deadline = time.monotonic() + timeout
    while True:
        request = urllib.request.Request(  # noqa: S310 - loopback URL built here
            url, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            if exc.code == 409:
                return exc.code
            if exc.code != 503 or time.monotonic() > deadline:
                raise GeoctlError(f"{method} {url}: {exc.code} {exc.read()[:300]!r}") from exc
        time.sleep(kafkactl.POLL_INTERVAL_S)


def register(clusters: Sequence[ClusterPlan], timeout: float) -> None:
    """Pulsar's independent configuration stores (docs/geo-design.md, decision 5): in every
    cluster, register every cluster, the tenant ``geo`` allowing all of them and the
    namespace ``geo/ns`` replicating to all of them."""
    names = [c.name for c in clusters]
    for c in clusters:
        admin = f"{c.sidecar_urls[0]}/admin/v2"
        for other in clusters:
            data = {"serviceUrl": other.sidecar_urls[0]}
            admin_call(f"{admin}/clusters/{other.name}", "PUT", data, timeout)
        tenant = {"adminRoles": [], "allowedClusters": names}
        admin_call(f"{admin}/tenants/{GEO_TENANT}", "PUT", tenant, timeout)
        admin_call(f"{admin}/namespaces/{GEO_NAMESPACE}", "PUT", {}, timeout)
        admin_call(f"{admin}/namespaces/{GEO_NAMESPACE}/replication", "POST", names, timeout)
        info(f"{c.name}: clusters {names}, tenant {GEO_TENANT}, namespace {GEO_NAMESPACE}")


def mm2_dir(state_dir: Path) -> Path:
    return state_dir / "mm2"


def render_mm2_log4j2(log: Path) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by docker/geo/geoctl.py. -->
<Configuration status="WARN">
  <Appenders>
    <File name="mm2" fileName={quoteattr(str(log))}>
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="mm2"/></Root>
  </Loggers>
</Configuration>
"""


def start_mm2(state: State) -> subprocess.Popen[bytes]:
    """Render mm2.properties from the recorded plan and start MirrorMaker 2 detached."""
    clusters = load_plan(state)
    mm2 = load_mm2()
    extra = state.data.get("mm2_extra") or []
    settings = mm2.Mm2Settings(
        clusters=tuple(mm2.Mm2Cluster(c.name, c.bootstrap) for c in clusters),
        topic=GLOBAL_EVENTS_TOPIC,
        extra=tuple((str(k), str(v)) for k, v in extra),
    )
    home = mm2_dir(state.dir)
    home.mkdir(parents=True, exist_ok=True)
    props, log4j, log = home / "mm2.properties", home / "log4j2.xml", home / "mm2.log"
    props.write_text(mm2.render_mm2_properties(settings))
    log4j.write_text(render_mm2_log4j2(log))
    log.unlink(missing_ok=True)  # readiness reads this run's lines only
    libs = ensure_mm2_libs()
    cmd = [
        kafkactl.java_bin(), MM2_HEAP, *kafkactl.JVM_OPTS, *MM2_JVM_OPTS,
        f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*", MM2_MAIN, str(props),
    ]  # fmt: skip
    with (home / "console.log").open("ab") as console:
        proc = subprocess.Popen(  # noqa: S603 - argv built from our own settings
            cmd, cwd=home, stdin=subprocess.DEVNULL, stdout=console,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    state.record("mm2", proc.pid, str(props))
    info(f"started MirrorMaker 2 (pid {proc.pid}), config {props}")
    return proc


def mm2_replicating(state_dir: Path, clusters: Sequence[ClusterPlan]) -> bool:
    try:
        text = (mm2_dir(state_dir) / "mm2.log").read_text(errors="replace")
    except FileNotFoundError:
        return False
    seen = set(_REPLICATING.findall(text))
    names = [c.name for c in clusters]
    return all((s, t) in seen for s in names for t in names if s != t)


def wait_until(
    condition: Callable[[], bool], what: str, timeout: float, alive: Callable[[], bool]
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if not alive():
            raise GeoctlError(f"{what}: the process died (see its log)")
        if time.monotonic() > deadline:
            raise GeoctlError(f"{what}: not after {timeout:.0f}s (see its log)")
        time.sleep(kafkactl.POLL_INTERVAL_S)


def stop_processes(state: State, names: Sequence[str], sig: signal.Signals) -> None:
    pids = [pid for n in names if (pid := state.live_pid(n)) is not None]
    if sig == signal.SIGKILL:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        kafkactl.wait_for(lambda: not any(kafkactl.pid_alive(p) for p in pids), 10.0)
    else:
        kafkactl.stop_pids(pids)
    for name in names:
        state.processes().pop(name, None)
    state.save()


def load_plan(state: State) -> list[ClusterPlan]:
    raw = state.data.get("clusters")
    if not isinstance(raw, list):
        raise GeoctlError(f"no geo clusters recorded in {state.path}; run `geoctl.py up` first")
    return [
        ClusterPlan(c["name"], c["port"], c["controller_port"], tuple(c["sidecar_ports"]))
        for c in raw
    ]


def endpoints(clusters: Sequence[ClusterPlan]) -> dict[str, dict[str, object]]:
    return {c.name: {"bootstrap": c.bootstrap, "sidecars": c.sidecar_urls} for c in clusters}


# --------------------------------------------------------------------------- commands


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve()
    with kafkactl.file_lock(state_dir / ".lock"):
        state = State(state_dir)
        if any(state.live_pid(n) for n in state.processes()):
            raise GeoctlError(f"geo clusters already running from {state_dir}; `down` first")
        clusters = plan(args)
        state.data = {
            "clusters": [
                {"name": c.name, "port": c.port, "controller_port": c.controller_port,
                 "sidecar_ports": list(c.sidecar_ports)}
                for c in clusters
            ],
            "processes": {},
            "mm2_extra": [list(kv) for kv in args.mm2_set],
        }  # fmt: skip
        state.save()
        try:
            bring_up(state, clusters, args.timeout)
        except BaseException:
            info("start failed; stopping what was started")
            tear_down(state, purge=False)
            raise
        out = state_dir / "endpoints.json"
        out.write_text(json.dumps(endpoints(clusters), indent=2) + "\n")
    print(out)
    return 0


def bring_up(state: State, clusters: Sequence[ClusterPlan], timeout: float) -> None:
    ensure_mm2_libs()  # before anything runs: a first fetch takes a while
    start_kafkas(state.dir, clusters, timeout)
    for c in clusters:
        create_topics(c.port, topics_of(c, clusters), GLOBAL_PARTITIONS)
    # MirrorMaker 2 needs only the topics: its JVM starts while the sidecars do.
    mm2 = start_mm2(state)
    sidecars = [
        (url, start_sidecar(state, c, i, [p.name for p in clusters if p.name != c.name]))
        for c in clusters
        for i, url in enumerate(c.sidecar_urls)
    ]
    for url, proc in sidecars:
        wait_until(
            lambda url=url: healthy(url),  # type: ignore[misc]
            f"sidecar at {url} healthy",
            timeout,
            lambda proc=proc: proc.poll() is None,  # type: ignore[misc]
        )
    register(clusters, timeout)
    wait_until(
        lambda: mm2_replicating(state.dir, clusters),
        "MirrorMaker 2 replicating in every direction",
        timeout,
        lambda: mm2.poll() is None,
    )
    info("MirrorMaker 2 replicates in every direction")


def tear_down(state: State, *, purge: bool) -> None:
    names = list(state.processes())
    stop_processes(state, [n for n in names if n == "mm2"], signal.SIGTERM)
    stop_processes(state, [n for n in names if n != "mm2"], signal.SIGTERM)
    recorded = state.data.get("clusters")
    clusters = [str(c["name"]) for c in recorded] if isinstance(recorded, list) else []
    stop_kafkas(state.dir, clusters or list(CLUSTERS), purge=purge)
    (state.dir / "endpoints.json").unlink(missing_ok=True)


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve()
    if not (state_dir / "state.json").is_file():
        info(f"nothing recorded in {state_dir}; nothing to stop")
        return 0
    with kafkactl.file_lock(state_dir / ".lock"):
        tear_down(State(state_dir), purge=args.purge)
        if args.purge:
            for child in state_dir.iterdir():
                if child.name != ".lock":
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
            info(f"removed the state under {state_dir}")
    return 0


def cmd_mm2(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve()
    with kafkactl.file_lock(state_dir / ".lock"):
        state = State(state_dir)
        clusters = load_plan(state)
        if args.command == "mm2-start":
            if getattr(args, "mm2_set", None):
                state.data["mm2_extra"] = [list(kv) for kv in args.mm2_set]
                state.save()
            if state.live_pid("mm2") is not None:
                info("MirrorMaker 2 already runs")
                return 0
            mm2 = start_mm2(state)
            wait_until(
                lambda: mm2_replicating(state_dir, clusters),
                "MirrorMaker 2 replicating in every direction",
                args.timeout,
                lambda: mm2.poll() is None,
            )
        else:
            sig = signal.SIGKILL if args.command == "mm2-kill" else signal.SIGTERM
            stop_processes(state, ["mm2"], sig)
            info(f"MirrorMaker 2 stopped ({sig.name})")
    return 0


def cmd_kafka(args: argparse.Namespace) -> int:
    """Stop or start one cluster's Kafka (its data kept), for outage tests."""
    state_dir = Path(args.state_dir).resolve()
    with kafkactl.file_lock(state_dir / ".lock"):
        clusters = {c.name: c for c in load_plan(State(state_dir))}
        cluster = clusters.get(args.cluster)
        if cluster is None:
            raise GeoctlError(f"no cluster {args.cluster!r}; recorded: {', '.join(clusters)}")
        if args.command == "kafka-stop":
            stop_kafkas(state_dir, [cluster], purge=False)
            info(f"Kafka of {cluster.name} stopped")
        else:
            start_kafkas(state_dir, [cluster], args.timeout)
            info(f"Kafka of {cluster.name} runs again on {cluster.bootstrap}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = State(Path(args.state_dir).resolve())
    for name in sorted(state.processes()):
        pid = state.live_pid(name)
        print(f"{name:<16} {'running, pid ' + str(pid) if pid else 'stopped'}")
    for c in load_plan(state):
        view = kafkactl.probe(c.port)
        print(f"kafka-{c.name:<10} {c.bootstrap} {'ready' if view else 'not answering'}")
    return 0


def _ports(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated port list: {text!r}") from None
    if not ports or not all(0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"ports must be 1..65535: {text!r}")
    return ports


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _mm2_set_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mm2-set",
        type=_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more mm2.properties line, after the rest (repeatable), e.g. "
        "east.consumer.fetch.max.wait.ms=10",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="geoctl.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, text: str, func: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text)
        p.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR), help="default build/geo")
        p.set_defaults(func=func)
        return p

    up = command("up", "start both clusters and MirrorMaker 2; print endpoints.json", cmd_up)
    up.add_argument("--east-port", type=int, default=DEFAULT_KAFKA_PORTS["east"])
    up.add_argument("--west-port", type=int, default=DEFAULT_KAFKA_PORTS["west"])
    up.add_argument("--east-sidecar-ports", type=_ports, default=DEFAULT_SIDECAR_PORTS["east"])
    up.add_argument("--west-sidecar-ports", type=_ports, default=DEFAULT_SIDECAR_PORTS["west"])
    up.add_argument("--free-ports", action="store_true", help="any free ports (tests)")
    up.add_argument("--timeout", type=float, default=READY_TIMEOUT_S, help="seconds per step")
    _mm2_set_flag(up)
    down = command("down", "stop everything `up` started", cmd_down)
    down.add_argument("--purge", action="store_true", help="also delete data and logs")
    for name, text in (
        ("mm2-start", "start MirrorMaker 2 again"),
        ("mm2-stop", "stop MirrorMaker 2 (SIGTERM)"),
        ("mm2-kill", "kill MirrorMaker 2 (SIGKILL)"),
    ):
        p = command(name, text, cmd_mm2)
        p.add_argument("--timeout", type=float, default=READY_TIMEOUT_S)
        if name == "mm2-start":
            _mm2_set_flag(p)
    for name, text in (
        ("kafka-stop", "stop one cluster's Kafka, keeping its data"),
        ("kafka-start", "start one cluster's Kafka again"),
    ):
        p = command(name, text, cmd_kafka)
        p.add_argument("--cluster", required=True, choices=CLUSTERS)
        p.add_argument("--timeout", type=float, default=READY_TIMEOUT_S)
    command("status", "what runs", cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (GeoctlError, kafkactl.KafkactlError, ValueError) as exc:
        print(f"geoctl: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
