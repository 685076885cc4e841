"""Sidecars for the WebSocket tests: in a thread (fast) or as a real process (to kill)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any, TypeVar

import websockets
from aiohttp import web
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus

from broker_shim._http import build_app
from broker_shim._http_shell import http_app
from broker_shim._sidecar import Sidecar, SidecarConfig
from broker_shim.ws import add_ws_routes
from sync import CacheStateError, TopicName
from sync._kafka_names import kafka_topic_of
from sync.messaging import MessagingEngine, OwnerInfo, TopicOwnership
from sync.transport import KafkaConfig, KafkaTransport, TopicSpec
from tests.kafka_broker import ROOT, free_port


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
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{http_url}/health", timeout=2) as resp:  # noqa: S310
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"sidecar at {http_url} never became healthy")
        time.sleep(0.05)


class ThreadSidecar:
    """The real sidecar app (``build_app``) served from a thread with its own loop."""

    def __init__(
        self,
        bootstrap: str,
        state_dir: Path,
        app_factory: Callable[[], Any] | None = None,
        *,
        ownership: TopicOwnership | None = None,
    ):
        self.port = free_port()
        self.http_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws/v2"
        self.sidecar = Sidecar(
            SidecarConfig(
                broker_id=f"t-{uuid.uuid4().hex[:6]}",
                http_port=self.port,
                bootstrap_servers=bootstrap,
                state_dir=state_dir,
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
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
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


T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 90.0) -> T:
    """Run one test's client coroutine to the end, or fail after ``timeout_s``."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def consumer_url(s: ThreadSidecar, topic: TopicName, sub: str, **query: Any) -> str:
    """A consumer endpoint of ``s`` that starts at the earliest message unless told."""
    q = "&".join(
        f"{k}={v}" for k, v in {"subscriptionInitialPosition": "Earliest", **query}.items()
    )
    return f"{s.ws_url}/consumer/{path_of(topic)}/{sub}?{q}"


def make_topic(bootstrap: str, partitions: int) -> TopicName:
    """A fresh Pulsar topic backed by a new Kafka topic (what the admin API would create)."""
    topic = TopicName.parse(f"persistent://public/default/ws-{uuid.uuid4().hex[:10]}")
    KafkaTransport(KafkaConfig(bootstrap)).admin().ensure_topic(
        TopicSpec(kafka_topic_of(topic), partitions)
    )
    return topic


def path_of(topic: TopicName) -> str:
    return f"persistent/{topic.tenant}/{topic.namespace}/{topic.local_name}"


def send_frame(payload: bytes, **extra: Any) -> str:
    return json.dumps({"payload": base64.b64encode(payload).decode(), **extra})


async def produce(ws: ClientConnection, payloads: list[bytes], **extra: Any) -> list[str]:
    """Send every payload (pipelined), return the message ids in order."""
    for i, p in enumerate(payloads):
        await ws.send(send_frame(p, context=str(i), **extra))
    ids: dict[str, str] = {}
    while len(ids) < len(payloads):
        ack = json.loads(await ws.recv())
        assert ack["result"] == "ok", ack
        ids[ack["context"]] = ack["messageId"]
    return [ids[str(i)] for i in range(len(payloads))]


async def receive(
    ws: ClientConnection, count: int, timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """``count`` messages from ``ws`` within ``timeout_s``."""
    return await receive_any([ws], count, timeout_s)


async def receive_any(
    conns: list[ClientConnection], count: int, timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """``count`` messages from any of ``conns`` (a subscription's consumers), read at once
    from all of them; what arrives does not depend on how fast the machine is, only when.
    Raises AssertionError with what did arrive if fewer came within ``timeout_s``."""
    out: list[dict[str, Any]] = []
    tasks = {asyncio.ensure_future(ws.recv()): ws for ws in conns}
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"received {len(out)} of {count} messages: {out}")
            done, _ = await asyncio.wait(tasks, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                ws = tasks.pop(task)
                out.append(json.loads(task.result()))
                if len(out) < count:
                    tasks[asyncio.ensure_future(ws.recv())] = ws
    finally:
        for task in tasks:  # recv() is cancellation-safe: nothing is lost
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return out


async def silent(ws: ClientConnection, wait_s: float = 0.5) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        while True:
            out.append(json.loads(await asyncio.wait_for(ws.recv(), wait_s)))
    except TimeoutError:
        return out


async def ack(ws: ClientConnection, messages: list[dict[str, Any]]) -> None:
    for m in messages:
        await ws.send(json.dumps({"messageId": m["messageId"]}))


class connect:  # noqa: N801 - used like websockets.connect
    """A WebSocket client as the tests use it (no frame size limit).

    Like a Pulsar client, it retries a handshake answered 503 (a bundle in transit or a
    sidecar still starting, with ``Retry-After``) until its deadline; any other refusal
    is raised at once.
    """

    def __init__(self, url: str, deadline_s: float = 60.0) -> None:
        self.url = url
        self.deadline_s = deadline_s
        self.connection: ClientConnection | None = None

    async def _open(self) -> ClientConnection:
        deadline = time.monotonic() + self.deadline_s
        while True:
            try:
                return await websockets.connect(self.url, open_timeout=30, max_size=None)
            except InvalidStatus as exc:
                if exc.response.status_code != 503 or time.monotonic() > deadline:
                    raise
                retry_after = exc.response.headers.get("Retry-After", "1")
                await asyncio.sleep(min(float(retry_after), 1.0))

    def __await__(self) -> Generator[Any, None, ClientConnection]:
        return self._open().__await__()

    async def __aenter__(self) -> ClientConnection:
        self.connection = await self._open()
        return self.connection

    async def __aexit__(self, *exc_info: object) -> None:
        if self.connection is not None:
            await self.connection.close()


async def set_policy(http_url: str, topic: TopicName, name: str, value: Any) -> None:
    def post() -> None:
        req = urllib.request.Request(  # noqa: S310 - test-local URL
            f"{http_url}/admin/v2/{path_of(topic)}/{name}",
            data=json.dumps(value).encode(),
            method="POST" if value is not None else "DELETE",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            assert resp.status == 204, resp.status

    await asyncio.to_thread(post)
