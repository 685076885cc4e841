"""The binary protocol on the same engine as the WebSocket API: one message store read the
same way by both, and the synchronized policies refusing or closing binary clients."""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Iterator

import pulsar
import pytest

from tests.integration._binary_harness import BinarySidecar, make_topic
from tests.integration._ws_harness import (
    connect,
    consumer_url,
    path_of,
    produce,
    receive,
    run,
    set_policy,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BinarySidecar]:
    with BinarySidecar(kafka_bootstrap, tmp_path_factory.mktemp("binpol")) as s:
        yield s


@pytest.fixture
def client(sidecar: BinarySidecar) -> Iterator[pulsar.Client]:
    c = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        yield c
    finally:
        c.close()


def test_websocket_and_binary_read_each_others_messages(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(str(topic), batching_enabled=True)
    producer.send(b"from-binary", properties={"p": "1"}, partition_key="kb", event_timestamp=1234)
    producer.flush()

    async def websocket_side() -> None:
        async with connect(consumer_url(sidecar, topic, "ws-sub")) as cons:
            (msg,) = await receive(cons, 1)
            assert base64.b64decode(msg["payload"]) == b"from-binary"
            assert msg["properties"] == {"p": "1"}
            assert msg["key"] == "kb"
            assert msg["eventTime"].startswith("1970-01-01T00:00:01.234")
        async with connect(f"{sidecar.ws_url}/producer/{path_of(topic)}") as prod:
            await produce(prod, [b"from-websocket"], key="kw", properties={"q": "2"})

    run(websocket_side())
    consumer = client.subscribe(
        str(topic), "bin-sub", initial_position=pulsar.InitialPosition.Earliest
    )
    first = consumer.receive(timeout_millis=20_000)
    second = consumer.receive(timeout_millis=20_000)
    assert (first.data(), first.event_timestamp()) == (b"from-binary", 1234)
    assert (second.data(), second.partition_key(), second.properties()) == (
        b"from-websocket",
        "kw",
        {"q": "2"},
    )
    assert second.message_id().entry_id() == 1  # Kafka offset 1, as the WebSocket id says


def test_max_producers_refuses_with_producer_busy(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    run(set_policy(sidecar.http_url, topic, "maxProducers", 1))
    deadline = time.monotonic() + 30
    first = client.create_producer(str(topic))
    while True:  # the policy reaches the cache asynchronously
        try:
            second = client.create_producer(str(topic), send_timeout_millis=2000)
        except pulsar.ProducerBusy:
            break
        second.close()
        assert time.monotonic() < deadline, "maxProducers never applied"
        time.sleep(0.2)
    first.send(b"still fine")


def test_a_disabled_subscription_type_is_refused_and_closes_live_consumers(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    assert sidecar.server is not None
    topic = make_topic(kafka_bootstrap, 1)
    live = client.subscribe(str(topic), "shared", consumer_type=pulsar.ConsumerType.Shared)
    closes_before = sidecar.server.trace.sent_counts["CLOSE_CONSUMER"]
    run(set_policy(sidecar.http_url, topic, "subscriptionTypesEnabled", ["Exclusive"]))
    deadline = time.monotonic() + 30
    while sidecar.server.trace.sent_counts["CLOSE_CONSUMER"] == closes_before:
        assert time.monotonic() < deadline, "the live Shared consumer was never closed"
        time.sleep(0.1)
    with pytest.raises(pulsar.PulsarException) as info:
        client.subscribe(str(topic), "other", consumer_type=pulsar.ConsumerType.Shared)
    assert "NotAllowed" in type(info.value).__name__ or "NotAllowed" in str(info.value)
    exclusive = client.subscribe(str(topic), "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    exclusive.close()
    with contextlib.suppress(pulsar.PulsarException):  # it keeps being refused on reconnect
        live.close()
