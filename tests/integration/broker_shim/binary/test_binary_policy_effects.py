"""Issue 15 through the binary protocol (the real ``pulsar-client`` wheel): the engine's
deduplication, delayed delivery, publish rate and backlog quotas act on binary producers
too."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pulsar
import pytest

from sync import PolicyTarget
from tests.support.kafka import make_topic
from tests.support.sidecars import BinarySidecar, NothingHere, ThreadSidecar, applied
from tests.support.waits import wait_for
from tests.support.ws import run, set_policy

pytestmark = pytest.mark.timeout(240)


def _drain(consumer: pulsar.Consumer, wait_ms: int = 1500) -> list[bytes]:
    out: list[bytes] = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=wait_ms)
        except pulsar.Timeout:
            return out
        out.append(msg.data())
        consumer.acknowledge(msg)


def test_deduplication_of_binary_producers(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    run(set_policy(sidecar.http_url, topic, "deduplicationEnabled", True))
    wait_for(lambda: applied(sidecar, topic, "deduplicationEnabled") is True, "dedup on")
    producer = client.create_producer(str(topic), producer_name="bp", batching_enabled=False)
    first = producer.send(b"a", sequence_id=5)
    again = producer.send(b"a-again", sequence_id=5)  # a re-send: acked, not written
    assert again.entry_id() == first.entry_id()
    producer.send(b"b", sequence_id=6)
    consumer = client.subscribe(str(topic), "d", initial_position=pulsar.InitialPosition.Earliest)
    assert _drain(consumer) == [b"a", b"b"]
    run(set_policy(sidecar.http_url, topic, "deduplicationEnabled", None))
    # waits for the owner's engine too: before it the re-send was deduplicated (CI, 69ecab5)
    wait_for(lambda: applied(sidecar, topic, "deduplicationEnabled") is None, "dedup off")
    producer.send(b"b-again", sequence_id=6)
    assert _drain(consumer) == [b"b-again"]


def test_a_producer_resumes_at_its_last_persisted_sequence_id(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    """With deduplication on, a producer that comes back under the same name reads the
    last sequence id Kafka holds for it (PRODUCER_SUCCESS.last_sequence_id), as Pulsar
    answers, and numbers its next messages after it; -1 for a new name, and without
    deduplication."""
    topic = make_topic(kafka_bootstrap, 1)
    run(set_policy(sidecar.http_url, topic, "deduplicationEnabled", True))
    wait_for(lambda: applied(sidecar, topic, "deduplicationEnabled") is True, "dedup on")
    producer = client.create_producer(str(topic), producer_name="resume", batching_enabled=False)
    assert producer.last_sequence_id() == -1
    for i in range(5):
        producer.send(b"m%d" % i, sequence_id=10 + i)
    producer.close()
    again = client.create_producer(str(topic), producer_name="resume", batching_enabled=False)
    assert again.last_sequence_id() == 14
    again.send(b"next")  # numbered by the client after 14
    again.close()
    other = client.create_producer(str(topic), producer_name="other", batching_enabled=False)
    assert other.last_sequence_id() == -1
    other.close()
    run(set_policy(sidecar.http_url, topic, "deduplicationEnabled", None))
    wait_for(lambda: applied(sidecar, topic, "deduplicationEnabled") is None, "dedup off")
    plain = client.create_producer(str(topic), producer_name="resume", batching_enabled=False)
    assert plain.last_sequence_id() == -1
    plain.close()
    consumer = client.subscribe(str(topic), "d", initial_position=pulsar.InitialPosition.Earliest)
    assert _drain(consumer) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"next"]


def test_delayed_delivery_of_binary_messages_on_shared(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    run(set_policy(sidecar.http_url, topic, "maxUnackedMessagesOnConsumer", 0))  # cache warm
    consumer = client.subscribe(str(topic), "dd", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(str(topic), batching_enabled=False)
    producer.send(b"later", deliver_after=dt.timedelta(seconds=2))
    producer.send(b"now")
    assert _drain(consumer, 800) == [b"now"]  # "later" is not due yet
    msg = consumer.receive(timeout_millis=30_000)
    assert msg.data() == b"later"
    consumer.acknowledge(msg)


def test_publish_rate_throttles_binary_producers(
    sidecar: BinarySidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    rate = {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 0}
    run(set_policy(sidecar.http_url, topic, "publishRate", rate))
    wait_for(lambda: applied(sidecar, topic, "publishRate") is not None, "rate applied")
    producer = client.create_producer(str(topic), batching_enabled=False)
    acked: list[float] = []
    start = time.monotonic()
    for i in range(60):
        producer.send_async(f"m{i}".encode(), lambda _res, _id: acked.append(time.monotonic()))
    time.sleep(2.0)
    within = sum(1 for t in acked if t - start <= 2.0)
    # a burst of 10, then 10/s (+2 for timer slack); unthrottled all 60 are acked at once
    assert 1 <= within <= 32
    producer.flush()
    run(set_policy(sidecar.http_url, topic, "publishRate", None))


@pytest.fixture(scope="module")
def writer(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadSidecar]:
    w = ThreadSidecar(
        kafka_bootstrap, tmp_path_factory.mktemp("binwriter"), ownership=NothingHere()
    )
    with w:
        yield w


def test_backlog_quota_request_hold_holds_binary_sends_until_the_backlog_drops(
    sidecar: BinarySidecar, writer: ThreadSidecar, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    """``producer_request_hold`` written on another sidecar: a binary send waits (the
    producer is disconnected and its reconnection refused while the backlog is over the
    quota) and goes through once the backlog drops; a send whose ``sendTimeout`` passes
    first fails with a timeout and is never written."""
    topic = make_topic(kafka_bootstrap, 1)
    svc = writer.sidecar.service
    assert svc is not None
    target = PolicyTarget.for_topic(topic)
    quota = {
        "destination_storage": {
            "limitSize": 100,
            "limitTime": -1,
            "policy": "producer_request_hold",
        }
    }
    consumer = client.subscribe(str(topic), "slow", receiver_queue_size=20)
    patient = client.create_producer(
        str(topic), batching_enabled=False, send_timeout_millis=120_000
    )
    hasty = client.create_producer(str(topic), batching_enabled=False, send_timeout_millis=3_000)
    for i in range(10):
        patient.send(b"x" * 100 + str(i).encode())
    backlog = [consumer.receive(timeout_millis=30_000) for _ in range(10)]  # not acked yet
    engine = sidecar.engine

    svc.set(target, {"backLogQuotaMap": quota})
    wait_for(
        lambda: (ts := engine.topic_state(topic)) is not None and not ts.writable.is_set(),
        "sends held on the owner",
    )
    # Both producers are disconnected at once (before any send), as Pulsar's check does.
    ts = engine.topic_state(topic)
    assert ts is not None
    wait_for(lambda: not ts.producers, "held producers disconnected")
    with pytest.raises(pulsar.Timeout):
        hasty.send(b"too-late")  # held past its send timeout
    answers: list[pulsar.Result] = []
    patient.send_async(b"held", lambda res, _id: answers.append(res))
    time.sleep(2.0)
    assert answers == []  # held: no answer while the backlog is over the quota
    for msg in backlog:
        consumer.acknowledge(msg)
    wait_for(lambda: bool(answers), "the held send answered after the backlog dropped")
    assert answers == [pulsar.Result.Ok]
    assert _drain(consumer) == [b"held"]  # written once; the timed-out send never

    # delete: no quota, a backlog no longer holds anything
    svc.set(target, {"backLogQuotaMap": None})
    wait_for(lambda: applied(sidecar, topic, "backLogQuotaMap") is None, "quota removed")
    for i in range(5):
        patient.send(b"y" * 100 + str(i).encode())
    assert len([consumer.receive(timeout_millis=30_000) for _ in range(5)]) == 5
