"""The binary protocol on the same engine as the WebSocket API: one message store read the
same way by both, and the synchronized policies refusing or closing binary clients."""

from __future__ import annotations

import base64
import contextlib
import threading

import pulsar
import pytest

from sync import kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.kafka import consume_some, make_topic
from tests.support.sidecars import BinarySidecar
from tests.support.waits import wait_for
from tests.support.ws import connect, consumer_url, path_of, produce, receive, run, set_policy

pytestmark = pytest.mark.timeout(180)


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
    first = client.create_producer(str(topic))

    def second_refused() -> bool:
        try:
            second = client.create_producer(str(topic), send_timeout_millis=2000)
        except pulsar.ProducerBusy:
            return True
        second.close()
        return False

    # the policy reaches the cache asynchronously
    wait_for(second_refused, "maxProducers applied", timeout_s=30, interval_s=0.2)
    first.send(b"still fine")


def test_producer_access_modes_as_pulsar(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    """Exclusive: refused (ProducerFenced) while the topic has another producer, and it
    refuses Shared producers (ProducerBusy) while it holds the topic. ExclusiveWithFencing
    closes the others and holds it. WaitForExclusive is queued (answered "not ready")
    while another holds the topic, and takes it when that one leaves."""
    topic = make_topic(kafka_bootstrap, 1)
    modes = pulsar.ProducerAccessMode

    def producer(mode: pulsar.ProducerAccessMode, name: str) -> pulsar.Producer:
        return client.create_producer(
            str(topic), producer_name=name, access_mode=mode, send_timeout_millis=5000
        )

    shared = producer(modes.Shared, "shared")
    with pytest.raises(pulsar.ProducerFenced):
        producer(modes.Exclusive, "ex-1")
    shared.close()
    exclusive = producer(modes.Exclusive, "ex-1")
    exclusive.send(b"from ex-1")
    with pytest.raises(pulsar.ProducerBusy):
        producer(modes.Shared, "shared-2")
    with pytest.raises(pulsar.ProducerFenced):
        producer(modes.Exclusive, "ex-2")
    fencing = producer(modes.ExclusiveWithFencing, "ex-3")
    fencing.send(b"from ex-3")
    with pytest.raises(pulsar.PulsarException):  # ex-1 was closed and cannot come back
        exclusive.send(b"from ex-1 again")
    assert sidecar.server is not None
    answered = sidecar.server.trace.sent_counts["PRODUCER_SUCCESS"]
    waiting: list[pulsar.Producer] = []
    waiter = threading.Thread(
        target=lambda: waiting.append(producer(modes.WaitForExclusive, "waiting"))
    )
    waiter.start()
    # answered "not ready" (a PRODUCER_SUCCESS) while the client still waits
    wait_for(
        lambda: (
            sidecar.server is not None
            and sidecar.server.trace.sent_counts["PRODUCER_SUCCESS"] > answered
        ),
        "the waiting producer queued",
    )
    assert waiter.is_alive() and not waiting
    fencing.close()
    waiter.join(60)
    waiting[0].send(b"from waiting")
    waiting[0].close()
    consumer = client.subscribe(str(topic), "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=20_000).data() for _ in range(3)]
    assert got == [b"from ex-1", b"from ex-3", b"from waiting"]


def test_a_disabled_subscription_type_is_refused_and_closes_live_consumers(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    server = sidecar.server
    assert server is not None
    topic = make_topic(kafka_bootstrap, 1)
    live = client.subscribe(str(topic), "shared", consumer_type=pulsar.ConsumerType.Shared)
    closes_before = server.trace.sent_counts["CLOSE_CONSUMER"]
    run(set_policy(sidecar.http_url, topic, "subscriptionTypesEnabled", ["Exclusive"]))
    wait_for(
        lambda: server.trace.sent_counts["CLOSE_CONSUMER"] != closes_before,
        "the live Shared consumer closed",
        timeout_s=30,
        interval_s=0.1,
    )
    with pytest.raises(pulsar.PulsarException) as info:
        client.subscribe(str(topic), "other", consumer_type=pulsar.ConsumerType.Shared)
    assert "NotAllowed" in type(info.value).__name__ or "NotAllowed" in str(info.value)
    exclusive = client.subscribe(str(topic), "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    exclusive.close()
    with contextlib.suppress(pulsar.PulsarException):  # it keeps being refused on reconnect
        live.close()


def test_producer_name_sequence_id_and_publish_time_reach_consumers(
    message_sidecar: BinarySidecar, kafka_bootstrap: str
) -> None:
    """With ``--entry-format message`` every record keeps who sent it
    (``__pulsar.producer`` / ``__pulsar.seq`` headers) and when it was stored (the Kafka
    timestamp); binary consumers get them back as
    ``MessageMetadata.producer_name`` / ``sequence_id`` / ``publish_time``. Records of
    plain Kafka producers (and of unnamed producers) read as producer ``policy-sync`` with
    their offset as sequence id."""
    sidecar = message_sidecar
    client = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        _records_keep_their_origin(sidecar, client, kafka_bootstrap)
    finally:
        client.close()


def _records_keep_their_origin(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    alice = client.create_producer(str(topic), producer_name="alice", batching_enabled=False)
    for i in range(3):
        alice.send(b"alice-%d" % i, sequence_id=100 + i)
    bob = client.create_producer(
        str(topic), producer_name="bob", batching_enabled=True, batching_max_messages=3
    )
    for i in range(3):
        bob.send_async(b"bob-%d" % i, None)
    bob.flush()

    async def websocket_side() -> None:
        url = f"{sidecar.ws_url}/producer/{path_of(topic)}?producerName=ws-carol"
        async with connect(url) as prod:
            await produce(prod, [b"carol"], sequenceId=7)

    run(websocket_side())
    transport = KafkaTransport(KafkaConfig(kafka_bootstrap))
    plain = transport.producer()
    plain.produce(kafka_topic_of(topic), None, b"plain-kafka", partition=0)
    plain.flush(30)
    plain.close()

    consumer = client.subscribe(
        str(topic), "origin", initial_position=pulsar.InitialPosition.Earliest
    )
    got = {}
    for _ in range(8):
        msg = consumer.receive(timeout_millis=20_000)
        got[msg.data()] = msg
    assert {k: m.producer_name() for k, m in got.items()} == {
        b"alice-0": "alice",
        b"alice-1": "alice",
        b"alice-2": "alice",
        b"bob-0": "bob",
        b"bob-1": "bob",
        b"bob-2": "bob",
        b"carol": "ws-carol",
        b"plain-kafka": "policy-sync",
    }
    # The records as Kafka holds them: sequence ids as sent, timestamps as published.
    reader = transport.consumer()
    try:
        reader.assign(kafka_topic_of(topic), {0: 0})
        records = consume_some(reader, 8, batch=8)
    finally:
        reader.close()
    sequences = {r.value(): dict(r.headers() or []).get("__pulsar.seq") for r in records}
    assert sequences[b"alice-0"] == b"100" and sequences[b"alice-2"] == b"102"
    assert [sequences[b"bob-%d" % i] for i in range(3)] == [b"0", b"1", b"2"]
    assert sequences[b"carol"] == b"7"
    assert sequences[b"plain-kafka"] is None
    for record in records:
        value = record.value()
        assert value is not None
        assert got[value].publish_timestamp() == record.timestamp()[1]
