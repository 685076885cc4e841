"""Pulsar's WebSocket reader endpoint on a real sidecar and real Kafka (issue 13).

``/ws/v2/reader/...?messageId=earliest|latest|<base64>``: the consumer's frames on a
non-durable subscription (no Kafka consumer group is left behind), acks used only for
flow control, and bad query parameters refused with 400.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from sync import TopicName, kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.kafka import make_topic
from tests.support.sidecars import ThreadSidecar
from tests.support.ws import ack, connect, path_of, produce, producer_url, receive, run


def reader_url(s: ThreadSidecar, topic: TopicName, **query: Any) -> str:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    return f"{s.ws_url}/reader/{path_of(topic)}?{q}"


def _groups_of(bootstrap: str, topic: TopicName) -> list[str]:
    """Kafka consumer groups of ``topic``'s subscriptions (durable ones commit there)."""
    admin = KafkaTransport(KafkaConfig(bootstrap)).admin()
    return [g for g in admin.list_groups() if kafka_topic_of(topic) in g]


def test_reader_from_earliest_from_a_message_id_and_latest(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        async with connect(producer_url(sidecar, topic)) as prod:
            ids = await produce(prod, [b"m0", b"m1", b"m2"])
        async with connect(reader_url(sidecar, topic, messageId="earliest", readerName="r1")) as r:
            got = await receive(r, 3)
            assert [base64.b64decode(m["payload"]) for m in got] == [b"m0", b"m1", b"m2"]
            assert [m["messageId"] for m in got] == ids
            assert all("publishTime" in m and "redeliveryCount" in m for m in got)
            await ack(r, got)  # flow control only
            await r.send(json.dumps({"type": "isEndOfTopic"}))
            assert json.loads(await r.recv()) == {"endOfTopic": False}
        # starts right after the given message
        async with connect(reader_url(sidecar, topic, messageId=ids[0])) as r:
            got = await receive(r, 2)
            assert [base64.b64decode(m["payload"]) for m in got] == [b"m1", b"m2"]
        # latest (the default): only what is published from now on
        async with connect(reader_url(sidecar, topic)) as r:
            await asyncio.sleep(0.5)  # liveness only: let the reader's position be taken
            async with connect(producer_url(sidecar, topic)) as prod:
                await produce(prod, [b"m3"])
            got = await receive(r, 1)
            assert [base64.b64decode(m["payload"]) for m in got] == [b"m3"]
        # two readers at once: no exclusive-subscription conflict
        async with connect(reader_url(sidecar, topic, messageId="earliest")) as a:
            async with connect(reader_url(sidecar, topic, messageId="earliest")) as b:
                assert len(await receive(a, 4)) == 4
                assert len(await receive(b, 4)) == 4

    run(scenario())
    assert _groups_of(kafka_bootstrap, topic) == []  # readers are not durable


def test_reader_window_follows_acks(sidecar: ThreadSidecar, kafka_bootstrap: str) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        async with connect(producer_url(sidecar, topic)) as prod:
            await produce(prod, [f"w{i}".encode() for i in range(6)])
        url = reader_url(sidecar, topic, messageId="earliest", receiverQueueSize=2)
        async with connect(url) as r:
            first = await receive(r, 2)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(r.recv(), 1.0)  # window full until acked
            await ack(r, first)
            rest = await receive(r, 2)
            assert [base64.b64decode(m["payload"]) for m in first + rest] == [
                b"w0",
                b"w1",
                b"w2",
                b"w3",
            ]

    run(scenario())


def test_reader_partitioned_topic_and_bad_params(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 3)

    async def scenario() -> None:
        async with connect(
            producer_url(sidecar, topic) + "?messageRoutingMode=RoundRobinPartition"
        ) as prod:
            await produce(prod, [b"a", b"b", b"c"])
        async with connect(reader_url(sidecar, topic, messageId="earliest")) as r:
            got = await receive(r, 3)
            assert sorted(base64.b64decode(m["payload"]) for m in got) == [b"a", b"b", b"c"]
        for bad in ({"messageId": "%%%"}, {"receiverQueueSize": "many"}):
            with pytest.raises(InvalidStatus) as info:
                async with connect(reader_url(sidecar, topic, **bad)):
                    pass
            assert info.value.response.status_code == 400
            body = json.loads(info.value.response.body or b"{}")
            assert body["reason"].startswith("Invalid query params: ")

    run(scenario())


def test_binary_readers_are_not_durable_either(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The binary protocol's readers (``durable=false`` subscriptions) use the same
    non-durable subscription: they read from a message id and leave no Kafka group."""
    import pulsar

    from tests.support.sidecars import BinarySidecar

    topic = make_topic(kafka_bootstrap, 1)
    with BinarySidecar(kafka_bootstrap, tmp_path_factory.mktemp("breader")) as s:
        client = pulsar.Client(s.broker_url, operation_timeout_seconds=20)
        try:
            producer = client.create_producer(str(topic))
            ids = [producer.send(b"%d" % i) for i in range(4)]
            reader = client.create_reader(str(topic), pulsar.MessageId.earliest)
            assert [reader.read_next(20_000).data() for _ in range(4)] == [b"0", b"1", b"2", b"3"]
            reader.close()
            reader = client.create_reader(str(topic), ids[1])
            assert reader.read_next(20_000).data() == b"2"
            reader.close()
        finally:
            client.close()
    assert _groups_of(kafka_bootstrap, topic) == []
