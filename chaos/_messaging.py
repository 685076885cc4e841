"""WebSocket producers and consumers (Pulsar's WebSocket API), one pair per topic.

Every producer message carries a unique id; an id counts as acknowledged when the
sidecar answered ``{"result": "ok"}``. Consumers record every delivery with its
``redeliveryCount`` and acknowledge it. Both reconnect (to any sidecar, following 307s)
whenever a fault cuts them off.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import websockets
from websockets.exceptions import InvalidStatus

from ._world import LOOKUP_NAMESPACE, World

SUBSCRIPTION = "chaos"


def topic_path(i: int) -> str:
    return f"persistent/{LOOKUP_NAMESPACE}/chaos-m{i}"


@dataclass
class MessagingStats:
    sent: int = 0
    acked: set[str] = field(default_factory=set)
    send_errors: Counter[str] = field(default_factory=Counter)
    #: id -> redeliveryCount of each delivery, in order
    deliveries: dict[str, list[int]] = field(default_factory=dict)
    #: handshake refusals by status (5xx during faults are reported)
    connect_status: Counter[int] = field(default_factory=Counter)  # 599: 503, no Retry-After
    connect_errors: Counter[str] = field(default_factory=Counter)
    reconnects: int = 0

    def lost(self) -> list[str]:
        return sorted(i for i in self.acked if i not in self.deliveries)

    def duplicates_without_count(self) -> list[str]:
        return sorted(
            i for i, counts in self.deliveries.items() if len(counts) > 1 and 0 in counts[1:]
        )

    def redelivered(self) -> int:
        return sum(1 for counts in self.deliveries.values() if len(counts) > 1)


class Messaging:
    """Runs the clients on an event loop of their own, in a thread."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.stats = MessagingStats()
        self.rng = world.rng("messaging")
        self.consuming = threading.Event()
        self.consuming.set()
        self._thread = threading.Thread(target=self._main, name="messaging", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop the consumers too (producers stop with the soak's stop flag)."""
        self.consuming.clear()
        self._thread.join(60)

    def drained(self) -> bool:
        return not self.stats.lost()

    def _main(self) -> None:
        asyncio.run(self._all())

    async def _all(self) -> None:
        jobs = []
        for i in range(self.world.config.topics):
            jobs.append(asyncio.create_task(self._producer(i)))
            jobs.append(asyncio.create_task(self._consumer(i)))
        await asyncio.gather(*jobs, return_exceptions=True)

    def _note_failure(self, exc: BaseException) -> None:
        if isinstance(exc, InvalidStatus):
            code = exc.response.status_code
            if code == 503 and not exc.response.headers.get("Retry-After"):
                code = 599  # a 503 that does not say when to retry counts as a bad 5xx
            self.stats.connect_status[code] += 1
        else:
            self.stats.connect_errors[type(exc).__name__] += 1

    async def _producer(self, i: int) -> None:
        seq = 0
        while not self.world.stop.is_set():
            url = f"{self.world.pick(self.rng).ws_url}/ws/v2/producer/{topic_path(i)}"
            try:
                async with websockets.connect(url, open_timeout=10, close_timeout=2) as ws:
                    self.stats.connect_status[101] += 1
                    while not self.world.stop.is_set():
                        seq += 1
                        mid = f"{i}:{seq}"
                        frame = {"payload": base64.b64encode(mid.encode()).decode(),
                                 "context": mid}  # fmt: skip
                        await ws.send(json.dumps(frame))
                        self.stats.sent += 1
                        answer = json.loads(await asyncio.wait_for(ws.recv(), 30))
                        if answer.get("result") == "ok":
                            self.stats.acked.add(str(answer.get("context")))
                        else:
                            self.stats.send_errors[str(answer.get("result"))] += 1
                        await asyncio.sleep(self.rng.uniform(0.02, 0.08))
            except Exception as exc:  # noqa: BLE001 - every failure means: reconnect
                self._note_failure(exc)
                self.stats.reconnects += 1
                await asyncio.sleep(0.5)

    async def _consumer(self, i: int) -> None:
        query = "subscriptionType=Shared&subscriptionInitialPosition=Earliest"
        while self.consuming.is_set():
            url = (
                f"{self.world.pick(self.rng).ws_url}/ws/v2/consumer/{topic_path(i)}/"
                f"{SUBSCRIPTION}?{query}"
            )
            try:
                async with websockets.connect(url, open_timeout=10, close_timeout=2) as ws:
                    self.stats.connect_status[101] += 1
                    while self.consuming.is_set():
                        try:
                            raw = await asyncio.wait_for(ws.recv(), 1.0)
                        except TimeoutError:
                            continue
                        msg = json.loads(raw)
                        mid = base64.b64decode(msg["payload"]).decode()
                        count = int(msg.get("redeliveryCount", 0))
                        self.stats.deliveries.setdefault(mid, []).append(count)
                        await ws.send(json.dumps({"messageId": msg["messageId"]}))
            except Exception as exc:  # noqa: BLE001 - every failure means: reconnect
                self._note_failure(exc)
                self.stats.reconnects += 1
                await asyncio.sleep(0.5)


def wait_drained(messaging: Messaging, timeout_s: float) -> float:
    """Wait until every acknowledged message was delivered; seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s and not messaging.drained():
        time.sleep(0.5)
    return time.monotonic() - started
