"""Pulsar's WebSocket API on a real sidecar, real Kafka and a real WebSocket client.

Frames, the four subscription types, failover, redelivery when a consumer leaves,
handshake refusals and the redirect to another owner.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import aiohttp
import pytest
import websockets
from aiohttp import web
from websockets.exceptions import InvalidStatus

from sync import PolicyService, TopicName
from sync.messaging import MessagingEngine, OwnerInfo
from sync.messaging._message_id import MessageId
from sync.naming._kafka_names import kafka_topic_of
from sync.routing import java_string_hash, murmur3_32_hash
from sync.transport import OFFSET_BEGINNING, KafkaConfig, KafkaTransport
from tests.support.kafka import make_topic
from tests.support.sidecars import ThreadSidecar, ws_app
from tests.support.ws import (
    ack,
    connect,
    consumer_url,
    path_of,
    produce,
    producer_url,
    receive,
    run,
    send_frame,
    silent,
)


def test_frames_round_trip_with_pulsar_fields(sidecar: ThreadSidecar, kafka_bootstrap: str) -> None:
    topic = make_topic(kafka_bootstrap, 3)

    async def scenario() -> None:
        async with connect(consumer_url(sidecar, topic, "frames")) as cons:
            async with connect(producer_url(sidecar, topic)) as prod:
                await prod.send(
                    send_frame(
                        b"hello",
                        key="order-7",
                        properties={"a": "1", "ü": "ß"},
                        context="c-1",
                        eventTime="2024-05-01T10:00:00.250Z",
                    )
                )
                reply = json.loads(await prod.recv())
                assert reply["result"] == "ok" and reply["context"] == "c-1"
                mid = MessageId.from_base64(reply["messageId"])
                # the WebSocket producer's default: RoundRobinPartition + JavaStringHash keys
                assert mid.partition == java_string_hash("order-7") % 3
                await prod.send("{not json")
                bad = json.loads(await prod.recv())
                assert bad["result"] == "send-error:3"
                await prod.send(json.dumps({"payload": "%%%", "context": "x"}))
                bad = json.loads(await prod.recv())
                assert bad["result"] == "send-error:7" and bad["context"] == "x"
            (msg,) = await receive(cons, 1)
            assert msg["messageId"] == reply["messageId"]
            assert base64.b64decode(msg["payload"]) == b"hello"
            assert msg["key"] == "order-7"
            assert msg["properties"] == {"a": "1", "ü": "ß"}
            assert msg["redeliveryCount"] == 0
            assert msg["eventTime"] == "2024-05-01T10:00:00.250Z"
            assert msg["publishTime"].endswith("Z") and "T" in msg["publishTime"]
            await ack(cons, [msg])
            await cons.send(json.dumps({"type": "isEndOfTopic"}))
            assert json.loads(await cons.recv()) == {"endOfTopic": False}

    run(scenario())
    # What Kafka holds: key, value and properties as headers, on the routed partition.
    consumer = KafkaTransport(KafkaConfig(kafka_bootstrap)).consumer()
    consumer.assign(kafka_topic_of(topic), dict.fromkeys(range(3), OFFSET_BEGINNING))
    records = [m for _ in range(20) for m in consumer.consume(10, 0.2)][:1]
    consumer.close()
    assert records[0].key() == b"order-7" and records[0].value() == b"hello"
    assert ("a", b"1") in (records[0].headers() or [])


def test_round_robin_murmur_routing_query_params(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 4)

    async def scenario() -> None:
        url = producer_url(sidecar, topic, messageRoutingMode="RoundRobinPartition",
                           hashingScheme="Murmur3_32Hash")  # fmt: skip
        async with connect(url) as prod:
            keyed = await produce(prod, [b"k"] * 5, key="user-1")
            assert {MessageId.from_base64(m).partition for m in keyed} == {
                murmur3_32_hash("user-1") % 4
            }
            unkeyed = await produce(prod, [b"u"] * 8)
            assert {MessageId.from_base64(m).partition for m in unkeyed} <= {0, 1, 2, 3}

    run(scenario())


def test_default_routing_sends_unkeyed_messages_round_robin(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    """No messageRoutingMode: Pulsar's default RoundRobinPartition, batching off (the
    WebSocket default): unkeyed messages go to the next partition each; keys still hash."""
    topic = make_topic(kafka_bootstrap, 3)

    async def scenario() -> None:
        async with connect(producer_url(sidecar, topic)) as prod:
            unkeyed = [MessageId.from_base64(m).partition for m in await produce(prod, [b"u"] * 6)]
            first = unkeyed[0]
            assert unkeyed == [(first + i) % 3 for i in range(6)]
            keyed = await produce(prod, [b"k"] * 4, key="user-1")
            assert {MessageId.from_base64(m).partition for m in keyed} == {
                java_string_hash("user-1") % 3
            }
        # a second producer starts at its own (random) partition and cycles too
        async with connect(producer_url(sidecar, topic, messageRoutingMode="SinglePartition")) as p:
            single = {MessageId.from_base64(m).partition for m in await produce(p, [b"s"] * 6)}
            assert len(single) == 1

    run(scenario())


def test_exclusive_refuses_a_second_consumer_with_409(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        async with connect(consumer_url(sidecar, topic, "x")):
            with pytest.raises(InvalidStatus) as info:
                async with connect(consumer_url(sidecar, topic, "x")):
                    pass
            assert info.value.response.status_code == 409
            body = json.loads(info.value.response.body or b"{}")
            assert body["reason"] == "Failed to subscribe: Exclusive consumer is already connected"
            with pytest.raises(InvalidStatus) as info:
                async with connect(consumer_url(sidecar, topic, "x", subscriptionType="Shared")):
                    pass
            assert info.value.response.status_code == 409
            with pytest.raises(InvalidStatus) as info:
                async with connect(consumer_url(sidecar, topic, "x", subscriptionType="Nope")):
                    pass
            assert info.value.response.status_code == 400
        # Pulsar's default allowAutoTopicCreation=true: a topic never created is created
        # (non-partitioned); refusals are in test_auto_topic_creation.py.
        missing = TopicName.parse(f"persistent://public/default/auto-ws-{time.time_ns()}")
        async with connect(consumer_url(sidecar, missing, "x")):
            pass

    run(scenario())


def test_failover_active_per_partition_and_takeover(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 2)

    async def scenario() -> None:
        fo = {"subscriptionType": "Failover"}
        async with connect(consumer_url(sidecar, topic, "fo", consumerName="b", **fo)) as b:
            async with connect(consumer_url(sidecar, topic, "fo", consumerName="a", **fo)) as a:
                async with connect(
                    producer_url(sidecar, topic, messageRoutingMode="RoundRobinPartition")
                ) as prod:
                    await produce(prod, [f"m{i}".encode() for i in range(6)])
                got_a = await receive(a, 3)
                got_b = await receive(b, 3)
                parts_a = {MessageId.from_base64(m["messageId"]).partition for m in got_a}
                parts_b = {MessageId.from_base64(m["messageId"]).partition for m in got_b}
                assert (parts_a, parts_b) == ({0}, {1})  # sorted(["a","b"])[p % 2]
                await ack(a, got_a[:1])
                await asyncio.sleep(0.2)  # let the ack land before "a" goes away
            # "a" left holding two unacked messages of partition 0: "b" takes over
            moved = await receive(b, 2)
            assert [m["messageId"] for m in moved] == [m["messageId"] for m in got_a[1:]]
            assert [m["redeliveryCount"] for m in moved] == [1, 1]

    run(scenario())


def test_shared_round_robin_and_redelivery_when_a_consumer_leaves(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        sh = {"subscriptionType": "Shared"}
        async with connect(consumer_url(sidecar, topic, "sh", consumerName="c1", **sh)) as c1:
            async with connect(consumer_url(sidecar, topic, "sh", consumerName="c2", **sh)) as c2:
                async with connect(producer_url(sidecar, topic)) as prod:
                    await produce(prod, [f"m{i}".encode() for i in range(10)])
                got1 = await receive(c1, 5)
                got2 = await receive(c2, 5)
                ids = {m["messageId"] for m in got1 + got2}
                assert len(ids) == 10
                await ack(c1, got1)
                await ack(c2, got2[:2])
                await asyncio.sleep(0.2)
            again = await receive(c1, 3)
            assert {m["messageId"] for m in again} == {m["messageId"] for m in got2[2:]}
            assert {m["redeliveryCount"] for m in again} == {1}
            assert await silent(c1, 0.3) == []

    run(scenario())


def test_key_shared_sends_each_key_to_one_consumer(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 2)

    async def scenario() -> None:
        ks = {"subscriptionType": "Key_Shared"}
        urls = [consumer_url(sidecar, topic, "ks", consumerName=f"k{i}", **ks) for i in range(3)]
        async with connect(urls[0]) as k0, connect(urls[1]) as k1, connect(urls[2]) as k2:
            async with connect(
                producer_url(sidecar, topic, messageRoutingMode="RoundRobinPartition")
            ) as prod:
                for rnd in range(3):
                    for k in range(10):
                        await prod.send(send_frame(f"{k}:{rnd}".encode(), key=f"key-{k}"))
                for _ in range(30):
                    assert json.loads(await prod.recv())["result"] == "ok"
            owners: dict[str, set[int]] = {}
            order: dict[str, list[int]] = {}
            total = 0
            deadline = time.monotonic() + 15
            while total < 30 and time.monotonic() < deadline:
                for i, ws in enumerate((k0, k1, k2)):
                    for m in await silent(ws, 0.1):
                        owners.setdefault(m["key"], set()).add(i)
                        order.setdefault(m["key"], []).append(
                            int(base64.b64decode(m["payload"]).split(b":")[1])
                        )
                        await ack(ws, [m])
                        total += 1
            assert total == 30
            assert all(len(v) == 1 for v in owners.values())
            assert all(v == sorted(v) for v in order.values())
            assert len({i for v in owners.values() for i in v}) >= 2

    run(scenario())


def test_pull_mode_and_negative_ack(sidecar: ThreadSidecar, kafka_bootstrap: str) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        url = consumer_url(sidecar, topic, "pull", pullMode="true", negativeAckRedeliveryDelay=200)
        async with connect(url) as cons:
            async with connect(producer_url(sidecar, topic)) as prod:
                await produce(prod, [b"a", b"b", b"c"])
            assert await silent(cons, 0.3) == []
            await cons.send(json.dumps({"type": "permit", "permitMessages": 1}))
            (first,) = await receive(cons, 1)
            assert await silent(cons, 0.3) == []
            nack = {"type": "negativeAcknowledge", "messageId": first["messageId"]}
            await cons.send(json.dumps(nack))
            await cons.send(json.dumps({"type": "permit", "permitMessages": 1}))
            (second,) = await receive(cons, 1)  # the next one: the nacked one is not due yet
            assert second["messageId"] != first["messageId"] and second["redeliveryCount"] == 0
            await asyncio.sleep(0.4)
            await cons.send(json.dumps({"type": "permit", "permitMessages": 1}))
            (again,) = await receive(cons, 1)  # redeliveries go first
            assert again["messageId"] == first["messageId"] and again["redeliveryCount"] == 1

    run(scenario())


def test_bad_ack_frame_closes_with_4003(sidecar: ThreadSidecar, kafka_bootstrap: str) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        async with connect(consumer_url(sidecar, topic, "bad")) as cons:
            await cons.send(json.dumps({"messageId": "garbage"}))
            with pytest.raises(websockets.ConnectionClosed) as info:
                await asyncio.wait_for(cons.recv(), 10)
            assert info.value.rcvd is not None
            assert info.value.rcvd.code == 4003
            assert info.value.rcvd.reason == "Failed to de-serialize from JSON"

    run(scenario())


class _Remote:
    def __init__(self, url: str) -> None:
        self.url = url

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        return OwnerInfo(local=False, http_url=self.url)


def test_a_topic_owned_elsewhere_is_redirected_and_served_there(
    sidecar: ThreadSidecar, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    transport = KafkaTransport(KafkaConfig(kafka_bootstrap))
    svc = PolicyService(transport).start(timeout_s=60)

    def app() -> web.Application:
        return ws_app(MessagingEngine(transport, lambda: svc, ownership=_Remote(sidecar.http_url)))

    try:
        with ThreadSidecar(kafka_bootstrap, tmp_path_factory.mktemp("other"), app) as other:

            async def handshake() -> tuple[int, str]:
                url = consumer_url(other, topic, "moved").replace("ws://", "http://")
                async with aiohttp.ClientSession() as http:
                    async with http.get(url, allow_redirects=False) as resp:
                        return resp.status, resp.headers.get("Location", "")

            status, location = run(handshake())
            assert status == 307
            assert location.startswith(sidecar.ws_url + "/consumer/" + path_of(topic) + "/moved?")
            assert "subscriptionInitialPosition=Earliest" in location

            async def follow() -> None:
                async with connect(consumer_url(other, topic, "moved")) as cons:
                    async with connect(producer_url(other, topic)) as prod:
                        await produce(prod, [b"via-redirect"])
                    (m,) = await receive(cons, 1)
                    assert base64.b64decode(m["payload"]) == b"via-redirect"

            run(follow())
    finally:
        svc.close()
