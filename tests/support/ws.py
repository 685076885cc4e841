"""WebSocket clients as the tests use them, against a sidecar's ``/ws/v2`` API."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl as ssl_module
import time
import urllib.request
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

import pytest
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus

from broker_shim._policy_rest import REST_POLICIES
from sync import TopicName
from tests.support.sidecars import PENDING, ThreadSidecar, applied
from tests.support.waits import eventually

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

    def __init__(
        self, url: str, deadline_s: float = 60.0, *, ssl: ssl_module.SSLContext | None = None
    ) -> None:
        """``ssl``: the TLS client context of a ``wss://`` URL."""
        self.url = url
        self.deadline_s = deadline_s
        self.ssl = ssl
        self.connection: ClientConnection | None = None

    async def _open(self) -> ClientConnection:
        deadline = time.monotonic() + self.deadline_s
        while True:
            try:
                return await websockets.connect(
                    self.url, open_timeout=30, max_size=None, ssl=self.ssl
                )
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


async def policy_enforced(
    s: ThreadSidecar, topic: TopicName, name: str, *, present: bool = True, timeout_s: float = 60.0
) -> None:
    """Wait until ``s``'s engine enforces the topic policy ``name`` (a REST policy name) as
    set (``present``) or lifted; ``timeout_s`` is a liveness bound, not a speed target."""
    field = REST_POLICIES[name].field

    def enforced() -> bool:
        value = applied(s, topic, field)
        return value is not PENDING and (value is not None) == present

    await eventually(enforced, f"{name} {'set' if present else 'lifted'}", timeout_s)


def producer_url(s: ThreadSidecar, topic: TopicName, **query: Any) -> str:
    """A producer endpoint of ``s`` (with ``query`` as its query string, if any)."""
    url = f"{s.ws_url}/producer/{path_of(topic)}"
    return f"{url}?{'&'.join(f'{k}={v}' for k, v in query.items())}" if query else url


async def closed_with(ws: ClientConnection, timeout_s: float = 10.0) -> tuple[int, str]:
    """Read until the server closes; the close code and reason."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
    except websockets.ConnectionClosed as exc:
        assert exc.rcvd is not None, "closed without a close frame"
        return exc.rcvd.code, exc.rcvd.reason


async def refused(url: str) -> tuple[int, str]:
    """The status and reason of a handshake the server refuses (anything else fails)."""
    with pytest.raises(InvalidStatus) as info:
        async with connect(url):
            pass
    body = json.loads(info.value.response.body or b"{}")
    return info.value.response.status_code, str(body.get("reason"))
