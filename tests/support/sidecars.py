"""Sidecars for tests: the real app in a thread (fast), with its ``pulsar://`` listener, or
``broker-shim run`` as a real process (to kill), and the command-line programs."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web

from broker_shim._binary_app import BINARY_KEY
from broker_shim._http import build_app
from broker_shim._http_shell import http_app
from broker_shim._serve import start_sites
from broker_shim._sidecar import Sidecar as AppSidecar
from broker_shim._sidecar import SidecarConfig
from broker_shim._tls import TlsSettings
from broker_shim.binary import BinaryServer
from broker_shim.ws import add_ws_routes
from sync import CacheStateError, TopicName
from sync.cluster import AuthConfig, ClusterSettings, LookupConfig, OwnershipConfig
from sync.messaging import MessagingConfig, MessagingEngine, OwnerInfo, TopicOwnership
from sync.transport import MemoryTransport
from tests.support.http import http
from tests.support.kafka import ROOT, free_port
from tests.support.waits import wait_for

BIN = Path(sys.executable).parent


def run_cli(
    name: str, *args: str, bootstrap: str, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap)
    return subprocess.run(
        [str(BIN / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


class NothingHere:
    """Ownership of a sidecar that serves no topic (it only takes the admin writes), so a
    policy is written to one sidecar and its effect observed on another."""

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        return OwnerInfo(local=False, http_url="http://127.0.0.1:1")


def ws_app(engine: MessagingEngine) -> web.Application:
    """An app serving only the WebSocket API with ``engine`` (and /health), for a
    :class:`ThreadSidecar` whose engine a test builds itself."""

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = http_app()
    add_ws_routes(app, engine)
    app.router.add_get("/health", health)
    app.on_startup.append(lambda _app: engine.start())
    app.on_shutdown.append(lambda _app: engine.close())
    return app


def wait_healthy(http_url: str, timeout_s: float = 60.0) -> None:
    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{http_url}/health", timeout=2) as resp:  # noqa: S310
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    wait_for(healthy, f"the sidecar at {http_url} healthy", timeout_s=timeout_s)


class ThreadSidecar:
    """The real sidecar app (``build_app``) served from a thread with its own loop."""

    def __init__(
        self,
        bootstrap: str,
        state_dir: Path,
        app_factory: Callable[[], Any] | None = None,
        *,
        ownership: TopicOwnership | None = None,
        messaging: MessagingConfig | None = None,
    ):
        """``messaging``: the engine's settings (default: the sidecar's own)."""
        self.port = free_port()
        self.http_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws/v2"
        self.sidecar = AppSidecar(
            SidecarConfig(
                broker_id=f"t-{uuid.uuid4().hex[:6]}",
                http_port=self.port,
                bootstrap_servers=bootstrap,
                state_dir=state_dir,
                messaging=messaging or MessagingConfig(),
            ),
            ownership=ownership,
        )
        self._app_factory = app_factory
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = self._app_factory() if self._app_factory else build_app(self.sidecar)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        config = self.sidecar.config
        https = config.tls is not None and config.http_port_tls is not None
        sites = start_sites(
            self._runner,
            host="127.0.0.1",
            port=self.port,
            tls=config.tls.server_context() if https and config.tls is not None else None,
            tls_port=config.http_port_tls,
        )
        self._loop.run_until_complete(sites)
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    @property
    def engine(self) -> MessagingEngine:
        """The sidecar's messaging engine (what the owner enforces, a moment after the cache)."""
        return self.sidecar.engine

    def enforces_its_cache(self, topic: TopicName) -> bool:
        """Whether the engine's live limits of ``topic`` (if it serves it) are what the
        policy cache says: it applies a cached change a moment after the cache has it."""
        ts = self.engine.topic_state(topic)
        try:
            return ts is None or bool(ts.limits == self.engine.read_limits(topic))
        except CacheStateError:  # not READY: the engine keeps its last limits
            return False

    def __enter__(self) -> ThreadSidecar:
        self._thread.start()
        wait_healthy(self.http_url)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)


@contextlib.contextmanager
def started_together(*sidecars: ThreadSidecar) -> Iterator[None]:
    """Start ``sidecars`` at the same time (each start waits for its own health, mostly
    cluster joins), and stop every one that started on the way out."""
    with ThreadPoolExecutor(len(sidecars)) as pool:
        starts = [pool.submit(s.__enter__) for s in sidecars]
    try:
        for start in starts:
            start.result()  # the first failure, once all had their chance
        yield
    finally:
        for s in sidecars:
            s.stop()


class ProcessSidecar:
    """``broker-shim run`` as a child process, so a test can SIGKILL it."""

    def __init__(self, bootstrap: str, state_dir: Path) -> None:
        self.port = free_port()
        self.http_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws/v2"
        self._args = [
            sys.executable,
            "-m",
            "broker_shim.cli.shim",
            "run",
            "--broker-id",
            f"p-{uuid.uuid4().hex[:6]}",
            "--http-port",
            str(self.port),
            "--broker-port",
            "0",
            "--bootstrap-servers",
            bootstrap,
            "--state-dir",
            str(state_dir),
            "--log-level",
            "warning",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ProcessSidecar:
        self.proc = subprocess.Popen(self._args, cwd=ROOT, env=dict(os.environ))
        try:
            wait_healthy(self.http_url)
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class BinarySidecar(ThreadSidecar):
    """The real sidecar app served from a thread, with its ``pulsar://`` listener."""

    def __init__(
        self,
        bootstrap: str,
        state_dir: Path,
        advertised_url: str | None = None,
        *,
        tls: TlsSettings | None = None,
        lookup: ClusterSettings | None = None,
        entry_format: str = "entry",
        cluster: str | None = None,
    ) -> None:
        """``advertised_url``: what lookups answer (default: the listener itself);
        ``tls``: serve ``pulsar+ssl://`` and ``https://`` too (at :attr:`broker_url_tls`
        and :attr:`https_url`); ``lookup``: join a cluster of its own (a fresh name and
        registry), so the cluster service runs (lookups, the schema registry), or the
        cluster named ``cluster`` (a sidecar after another one of that cluster);
        ``entry_format``: ``--entry-format``."""
        super().__init__(bootstrap, state_dir, app_factory=self._build)
        self.broker_port = free_port()
        self.broker_url = f"pulsar://127.0.0.1:{self.broker_port}"
        tls_port = None if tls is None else free_port()
        self.broker_url_tls = None if tls_port is None else f"pulsar+ssl://127.0.0.1:{tls_port}"
        https_port = None if tls is None else free_port()
        self.https_url = None if https_port is None else f"https://127.0.0.1:{https_port}"
        config = SidecarConfig(
            broker_id=f"b-{uuid.uuid4().hex[:6]}",
            http_port=self.port,
            bootstrap_servers=bootstrap,
            state_dir=state_dir,
            broker_port=self.broker_port,
            broker_url=advertised_url,
            broker_port_tls=tls_port,
            http_port_tls=https_port,
            tls=tls,
            entry_format=entry_format,
        )
        if lookup is not None:
            name = cluster or "bin" + uuid.uuid4().hex[:8]
            config = dataclasses.replace(
                config, cluster=name, topic=f"__change_events.{name}", lookup=lookup
            )
        self.sidecar = AppSidecar(config)
        self.server: BinaryServer | None = None

    def _build(self) -> object:
        app = build_app(self.sidecar)
        self.server = app[BINARY_KEY]
        return app

    def __enter__(self) -> BinarySidecar:
        super().__enter__()
        return self


def memory_sidecar(
    lookup: LookupConfig,
    prefix: str = "m",
    *,
    broker_port: int | None = None,
    http_port: int = 8080,
    http_port_tls: int | None = None,
    tls: TlsSettings | None = None,
    auth: AuthConfig | None = None,
) -> AppSidecar:
    """The sidecar app (not started) on the in-memory transport, alone in a cluster of its
    own (named ``prefix`` + a random suffix): for tests that need no Kafka.
    ``broker_port``: serve ``pulsar://`` there too (0: any free port); ``http_port`` and
    ``http_port_tls``: the ports it says it serves HTTP and HTTPS on (with ``tls``; the
    test binds them); ``auth``: authenticate and authorize with it."""
    cluster = prefix + uuid.uuid4().hex[:8]
    config = SidecarConfig(
        broker_id="b0",
        http_port=http_port,
        bootstrap_servers="unused:9092",
        broker_port=broker_port,
        http_port_tls=http_port_tls,
        tls=tls,
        cluster=cluster,
        topic=f"__change_events.{cluster}",
        lookup=ClusterSettings(
            ownership=OwnershipConfig(
                slots=8, session_timeout_ms=60_000, membership_poll_s=0.02, poll_s=0.005
            ),
            lookup=lookup,
            auth=auth,
        ),
    )
    return AppSidecar(config, transport=MemoryTransport())


#: What :func:`applied` answers while the engine does not yet enforce what its cache has.
PENDING = object()


def cached(s: ThreadSidecar, topic: TopicName, field: str) -> Any:
    """A policy field of ``topic`` as the sidecar's own policy cache has it (None: unset)."""
    svc = s.sidecar.service
    assert svc is not None
    return svc.applied(topic).get(field)


def applied(s: ThreadSidecar, topic: TopicName, field: str) -> Any:
    """A policy field as the sidecar's cache has it, once its engine enforces it on the
    live topic (:data:`PENDING` until then)."""
    value = cached(s, topic, field)
    return value if s.enforces_its_cache(topic) else PENDING


class Sidecar:
    """A real ``broker-shim run`` process."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        port: int,
        state_dir: Path,
        broker_id: str = "1",
        extra: list[str] | None = None,
    ) -> None:
        self.topic = topic
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = state_dir / f"shim-{broker_id}.log"
        state_dir.mkdir(parents=True, exist_ok=True)
        self._logfile = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                str(BIN / "broker-shim"),
                "run",
                "--broker-id",
                broker_id,
                "--http-port",
                str(port),
                "--broker-port",
                "0",
                "--bootstrap-servers",
                bootstrap,
                "--topic",
                topic,
                "--state-dir",
                str(state_dir / f"state-{broker_id}"),
                *(extra or []),
            ],
            stdout=self._logfile,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60) -> None:

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"sidecar exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                return http("GET", self.url + "/health", timeout=2).status == 200
            except OSError:
                return False

        wait_for(
            ready,
            lambda: f"the sidecar ready in {timeout}s:\n{self.log_text()}",
            timeout_s=timeout,
            interval_s=0.1,
        )

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def digest(self) -> dict[str, Any]:
        result = http("GET", self.url + "/policy-sync/v1/digest")
        assert result.status == 200, result.body
        return dict(result.json())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Never leak a process into the next test: a sidecar that ignored the signal
            # is killed, and its exit code (-9) tells a caller that checks it.
            self.proc.kill()
            code = self.proc.wait()
        self._logfile.close()
        return code
