"""The WebSocket producer on the in-memory twin, through a real aiohttp server and client.

Kafka's answers are held or reordered by the twin's producer, so the tests see what the
sidecar writes when partitions answer out of order or not yet: one answer per send, in
send order, and never an ``ok`` before Kafka acknowledged the message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from broker_shim._http_shell import http_app
from broker_shim.ws import add_ws_routes
from sync import PolicyService, PolicyTarget, TopicName
from sync.messaging import MessagingConfig, MessagingEngine
from sync.messaging._message_id import MessageId
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import (
    OFFSET_BEGINNING,
    MemoryBroker,
    MemoryTransport,
    TopicSpec,
)
from sync.transport._memory_producer import MemoryProducer


class ScriptedProducer(MemoryProducer):
    """Stores at once, but answers only when the test says so (and in the order it says).

    ``poll`` serves the reports queued so far in reverse while ``reverse`` is set — as
    partitions answering out of order would — and nothing while ``held`` is set.
    """

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker, None)
        self.held = threading.Event()
        self.reverse = True
        self.produced = 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        super().produce(*args, **kwargs)
        self.produced += 1

    def poll(self, timeout_s: float = 0.0) -> int:
        if self.held.is_set():
            return 0
        with self._broker._lock:
            reports, self._reports = self._reports, []
        if self.reverse:
            reports.reverse()
        for callback, report in reports:
            callback(report)
        return len(reports)

    def flush(self, timeout_s: float) -> int:
        self.held.clear()
        return super().flush(timeout_s)


class ScriptedTransport(MemoryTransport):
    def __init__(self) -> None:
        super().__init__()
        self.producers: list[ScriptedProducer] = []

    def producer(
        self,
        *,
        transactional_id: str | None = None,
        linger_ms: float = 0,
        transaction_timeout_ms: int | None = None,
    ) -> MemoryProducer:
        if transactional_id is not None:  # the policy writer
            return super().producer(transactional_id=transactional_id)
        producer = ScriptedProducer(self.broker)
        self.producers.append(producer)
        return producer


class Harness(NamedTuple):
    """What a scenario gets: a client of the sidecar's app, and the parts behind it."""

    client: TestClient[Any, Any]
    transport: ScriptedTransport
    svc: PolicyService
    engine: MessagingEngine


Scenario = Callable[[Harness], Awaitable[None]]


def run(scenario: Scenario, timeout_s: float = 30.0) -> None:
    transport = ScriptedTransport()
    svc = PolicyService(transport).start(timeout_s=10)

    async def main() -> None:
        app = http_app()
        engine = MessagingEngine(transport, lambda: svc, config=MessagingConfig(policy_check_s=0.1))
        add_ws_routes(app, engine)
        app.on_startup.append(lambda _app: engine.start())
        app.on_shutdown.append(lambda _app: engine.close())
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        try:
            await scenario(Harness(client, transport, svc, engine))
        finally:
            await client.close()

    try:
        asyncio.run(asyncio.wait_for(main(), timeout_s))
    finally:
        svc.close()


def make_topic(transport: MemoryTransport, name: str, partitions: int) -> TopicName:
    topic = TopicName.parse(f"persistent://t/ns/{name}")
    transport.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), partitions))
    return topic


def producer_path(topic: TopicName, **query: str) -> str:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    return f"/ws/v2/producer/persistent/t/ns/{topic.local_name}?{q}"


def frame(payload: bytes, context: object) -> str:
    return json.dumps({"payload": base64.b64encode(payload).decode(), "context": context})


async def answers(ws: aiohttp.ClientWebSocketResponse, count: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(count):
        msg = await asyncio.wait_for(ws.receive(), 5)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        out.append(json.loads(msg.data))
    return out


async def nothing_within(ws: aiohttp.ClientWebSocketResponse, wait_s: float) -> bool:
    try:
        msg = await asyncio.wait_for(ws.receive(), wait_s)
    except TimeoutError:
        return True
    raise AssertionError(f"unexpected frame {msg}")


def read_log(transport: MemoryTransport, topic: TopicName, partitions: int) -> dict[Any, bytes]:
    consumer = transport.consumer()
    consumer.assign(kafka_topic_of(topic), {p: OFFSET_BEGINNING for p in range(partitions)})
    out: dict[Any, bytes] = {}
    for _ in range(10):
        for m in consumer.consume(1000, 0.05):
            out[(m.partition(), m.offset())] = m.value() or b""
    consumer.close()
    return out


def test_answers_keep_send_order_when_partitions_answer_out_of_order() -> None:
    async def scenario(h: Harness) -> None:
        client, transport = h.client, h.transport
        topic = make_topic(transport, "order", 4)
        path = producer_path(topic, messageRoutingMode="RoundRobinPartition")
        async with client.ws_connect(path) as ws:
            for i in range(40):
                if i == 13:
                    await ws.send_str('{"payload": "not base64!", "context": 13}')
                else:
                    await ws.send_str(frame(f"m{i}".encode(), i))
            got = await answers(ws, 40)
        assert [a["context"] for a in got] == list(range(40))
        assert got[13]["result"] == "send-error:7"
        oks = [a for a in got if a["result"] == "ok"]
        assert len(oks) == 39
        # Every ok names where Kafka stored that very message.
        log = read_log(transport, topic, 4)
        for a in oks:
            mid = MessageId.from_base64(a["messageId"])
            assert log[(mid.partition, mid.offset)] == f"m{a['context']}".encode()

    run(scenario)


def test_no_ok_before_kafka_acknowledged_and_reading_stops_at_max_pending() -> None:
    async def scenario(h: Harness) -> None:
        client, transport = h.client, h.transport
        topic = make_topic(transport, "held", 2)
        path = producer_path(topic, maxPendingMessages="3")
        async with client.ws_connect(path) as ws:
            await ws.send_str(frame(b"warm-up", "w"))
            assert (await answers(ws, 1))[0]["result"] == "ok"
            kafka = transport.producers[0]
            kafka.held.set()
            for i in range(5):
                await ws.send_str(frame(b"x", i))
            assert await nothing_within(ws, 0.3)
            assert kafka.produced == 1 + 3  # the 4th send is not even read yet
            kafka.held.clear()
            got = await answers(ws, 5)
            assert [(a["result"], a["context"]) for a in got] == [("ok", i) for i in range(5)]
            assert kafka.produced == 1 + 5

    run(scenario)


def test_refused_sends_are_answered_in_their_place() -> None:
    async def scenario(h: Harness) -> None:
        client, transport, svc, engine = h
        topic = make_topic(transport, "limits", 1)
        await asyncio.to_thread(svc.set, PolicyTarget.for_topic(topic), {"maxMessageSize": 4})
        async with client.ws_connect(producer_path(topic)) as ws:
            ts = engine.topic_state(topic)
            assert ts is not None and ts.limits.max_message_size == 4
            kafka = transport.producers[0]
            kafka.held.set()
            await ws.send_str(frame(b"1234", 0))
            await ws.send_str(frame(b"12345", 1))  # too large: refused at once...
            await ws.send_str('{"context": 2}')  # no payload
            await ws.send_str("not json")
            await ws.send_str(frame(b"ok", 4))
            assert await nothing_within(ws, 0.2)  # ...but answered after the send before it
            kafka.held.clear()
            got = await answers(ws, 5)
        assert [a["result"] for a in got] == [
            "ok",
            "send-error:8",
            "send-error:7",
            "send-error:3",
            "ok",
        ]
        assert [a.get("context") for a in got] == [0, 1, 2, None, 4]
        assert "Exceed maximum message size" in got[1]["errorMsg"]

    run(scenario)


def test_engine_serves_reports_on_its_loop_and_drains_them_on_close() -> None:
    async def scenario(h: Harness) -> None:
        client, transport, svc, engine = h
        topic = make_topic(transport, "drain", 1)
        handle = await engine.create_producer(topic)
        loop_thread = threading.get_ident()
        seen: list[tuple[int, MessageId | None]] = []
        handle.send(b"a", lambda mid, err: seen.append((threading.get_ident(), mid)))
        await asyncio.sleep(0.05)
        assert [t for t, _ in seen] == [loop_thread]  # served by the loop, no thread
        transport.producers[0].held.set()
        handle.send(b"b", lambda mid, err: seen.append((threading.get_ident(), mid)))
        await asyncio.sleep(0.05)
        assert len(seen) == 1
        transport.producers[0].held.clear()
        await engine.close()  # answers what is in flight before the producer goes
        assert [mid.offset for _, mid in seen if mid is not None] == [0, 1]

    run(scenario)


def test_numbers_no_java_type_holds_are_refused_in_queries_and_frames() -> None:
    # Pulsar reads these query parameters with Integer.parseInt and the frames' numbers
    # into Java longs; orjson reads integers up to 2**64 - 1.
    async def scenario(h: Harness) -> None:
        client, transport = h.client, h.transport
        topic = make_topic(transport, "numbers", 1)
        for name, value in (("maxPendingMessages", "9" * 5000),
                            ("maxPendingMessages", str(2**31)),
                            ("batchingMaxPublishDelay", str(2**40))):  # fmt: skip
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                async with client.ws_connect(producer_path(topic, **{name: value})):
                    pass
            assert refused.value.status == 400, (name, value[:20])
        consumer = f"/ws/v2/consumer/persistent/t/ns/{topic.local_name}/sub"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            async with client.ws_connect(f"{consumer}?receiverQueueSize={2**31}"):
                pass
        assert refused.value.status == 400
        payload = base64.b64encode(b"x").decode()
        bad: list[dict[str, Any]] = [
            {"deliverAt": 2**63},
            {"deliverAfterMs": 2**64 - 1},
            {"sequenceId": 2**63},
            {"eventTime": 2**63},
        ]
        async with client.ws_connect(producer_path(topic)) as ws:
            for i, extra in enumerate(bad):
                await ws.send_str(json.dumps({"payload": payload, "context": i, **extra}))
            await ws.send_str(frame(b"fine", "last"))
            got = await answers(ws, len(bad) + 1)
        assert [a["result"] for a in got] == ["send-error:3"] * len(bad) + ["ok"], got
        async with client.ws_connect(consumer) as ws:
            await ws.send_str(json.dumps({"type": "permit", "permitMessages": 2**40}))
            closed = await asyncio.wait_for(ws.receive(), 5)
        assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == 4003, closed

    run(scenario)
