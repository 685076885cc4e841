"""The messaging part of ``make demo``: Pulsar WebSocket clients against the sidecars.

A partitioned topic, keyed routing, the four subscription types side by side, and a
policy change (maxConsumersPerSubscription) closing a live consumer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from collections import Counter, defaultdict
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from sync.messaging import MessageId

__all__ = ["messaging_demo"]

TOPIC_PATH = "persistent/acme/ops/events"


def _http(method: str, url: str, body: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(  # noqa: S310 - loopback demo URLs
        url, data=None if body is None else body.encode(), method=method
    )
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def _consume(ws: ClientConnection, seen: list[dict[str, Any]], stop: asyncio.Event) -> str:
    """Receive and ack until ``stop``; returns why the connection ended (if it did)."""
    try:
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.2)
            except TimeoutError:
                continue
            frame = json.loads(raw)
            if "messageId" not in frame:
                continue
            seen.append(frame)
            await ws.send(json.dumps({"messageId": frame["messageId"]}))
    except ConnectionClosed as closed:
        rcvd = closed.rcvd
        if rcvd is None:
            return "connection lost"
        return f"closed by the sidecar: code {rcvd.code} {rcvd.reason}"
    return "open"


async def _run(owner_http: str, out: Any) -> None:
    ws_base = owner_http.replace("http://", "ws://") + "/ws/v2"
    consumers: dict[str, ClientConnection] = {}
    for sub, kind in (
        ("ex", "Exclusive"),
        ("fo", "Failover"),
        ("sh", "Shared"),
        ("ks", "Key_Shared"),
    ):
        for n in (1, 2):
            query = f"subscriptionType={kind}&consumerName={sub}-{n}"
            url = f"{ws_base}/consumer/{TOPIC_PATH}/{sub}?{query}"
            try:
                consumers[f"{kind}#{n}"] = await connect(url)
            except InvalidStatus as exc:
                out(f"  {kind} consumer #{n} refused: HTTP {exc.response.status_code} "
                    f"{exc.response.body.decode(errors='replace').strip()}")  # fmt: skip
    seen: dict[str, list[dict[str, Any]]] = defaultdict(list)
    stop = asyncio.Event()
    tasks = {
        name: asyncio.create_task(_consume(ws, seen[name], stop)) for name, ws in consumers.items()
    }
    await asyncio.sleep(0.5)
    async with connect(f"{ws_base}/producer/{TOPIC_PATH}") as producer:
        for i in range(64):
            key = f"order-{i % 8}"
            await producer.send(json.dumps({
                "payload": base64.b64encode(f"event {i}".encode()).decode(),
                "key": key, "context": str(i),
            }))  # fmt: skip
            reply = json.loads(await producer.recv())
            if i < 8:
                part = MessageId.from_base64(reply["messageId"]).partition
                out(f"  sent key {key} -> partition {part} (result {reply['result']})")
    await asyncio.sleep(2.0)
    out("  received per consumer (messages, distinct keys, partitions):")
    for name in consumers:
        frames = seen[name]
        keys = {str(f.get("key")) for f in frames}
        parts = Counter(MessageId.from_base64(f["messageId"]).partition for f in frames)
        out(
            f"    {name:12s} {len(frames):3d} msgs  keys={len(keys)}  "
            f"partitions={dict(sorted(parts.items()))}"
        )
    ks = [{f.get("key") for f in seen[f"Key_Shared#{n}"]} for n in (1, 2)]
    out(f"  Key_Shared: no key went to both consumers: {not (ks[0] & ks[1])}")

    out("  policy change while connected: maxConsumersPerSubscription = 1")
    status, _ = _http(
        "POST", f"{owner_http}/admin/v2/{TOPIC_PATH}/maxConsumersPerSubscription", "1"
    )
    out(f"  POST .../maxConsumersPerSubscription -> {status}")
    await asyncio.sleep(3.0)
    stop.set()
    for name, task in tasks.items():
        result = await task
        if result != "open":
            out(f"    {name}: {result}")
    for ws in consumers.values():
        await ws.close()


def messaging_demo(sidecar_http: str, out: Any = print) -> None:
    """Create ``persistent://acme/ops/events`` (4 partitions) and exercise it over WebSocket."""
    status, body = _http("PUT", f"{sidecar_http}/admin/v2/{TOPIC_PATH}/partitions", "4")
    out(f"  PUT /admin/v2/{TOPIC_PATH}/partitions 4 -> {status} {body.strip()}")
    _, lookup = _http("GET", f"{sidecar_http}/lookup/v2/topic/{TOPIC_PATH}")
    owner = json.loads(lookup)["httpUrl"]
    out(f"  lookup: {TOPIC_PATH} is served by {owner}")
    asyncio.run(_run(owner, out))
