"""Issue 15: ``compactionThreshold`` and ``topics compact`` on real Kafka, observed with
the real ``pulsar-client`` wheel's ``readCompacted`` readers and consumers.

The policy is written to one sidecar (``writer``, which owns no topic) and acts on
another (``server``, the owner, serving the binary protocol): the owner compacts the
topic into its companion once the bytes since the last compaction exceed the threshold,
and ``readCompacted`` readers there read the latest message per key below the horizon,
then the topic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
from collections.abc import Callable, Iterator

import pulsar
import pytest

from sync import PolicyTarget, TopicName
from sync._errors import NotAllowedError
from sync.messaging import SubscriptionType, compacted_topic_of
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.http import request_json
from tests.support.kafka import make_topic
from tests.support.sidecars import BinarySidecar, NothingHere, ThreadSidecar, cached
from tests.support.waits import wait_for
from tests.support.ws import path_of

pytestmark = pytest.mark.timeout(600)

#: The owner's compaction check period in these tests (Pulsar's default is 60 s).
_CHECK_S = 1.0


@pytest.fixture(scope="module")
def pair(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadSidecar, BinarySidecar]]:
    writer = ThreadSidecar(
        kafka_bootstrap, tmp_path_factory.mktemp("cwriter"), ownership=NothingHere()
    )
    with writer, BinarySidecar(kafka_bootstrap, tmp_path_factory.mktemp("cserver")) as server:
        engine = server.engine
        engine.config = dataclasses.replace(engine.config, compaction_check_s=_CHECK_S)
        yield writer, server


@pytest.fixture
def client(pair: tuple[ThreadSidecar, BinarySidecar]) -> Iterator[pulsar.Client]:
    c = pulsar.Client(pair[1].broker_url, operation_timeout_seconds=20)
    try:
        yield c
    finally:
        c.close()


def _wait_for(check: Callable[[], bool], what: str) -> None:
    wait_for(check, what, timeout_s=180.0, interval_s=0.1)


def _set_threshold(
    writer: ThreadSidecar, server: BinarySidecar, topic: TopicName, value: int | None
) -> None:
    url = f"{writer.http_url}/admin/v2/{path_of(topic)}/compactionThreshold"
    if value is None:
        status, body = request_json("DELETE", url)
    else:
        status, body = request_json("POST", url, value)
    assert status == 204, body
    _wait_for(
        lambda: cached(server, topic, "compactionThreshold") == value,
        f"threshold {value} on the owner",
    )


def _full_sweeps(server: BinarySidecar, count: int = 2) -> None:
    """Wait until the owner has run ``count`` whole compaction sweeps from now."""
    engine = server.engine
    target = engine.compaction_sweeps + count
    _wait_for(lambda: engine.compaction_sweeps >= target, f"{count} compaction sweeps")


def _horizon(server: BinarySidecar, topic: TopicName) -> int:
    status = server.engine.compaction_status(topic)
    return int(status.horizons.get(0, 0))


def _read_all(
    client: pulsar.Client, topic: TopicName, *, compacted: bool, expect: int
) -> list[tuple[str, bytes]]:
    """Read ``expect`` messages from the start (generous deadline each), then check
    that nothing more comes."""
    reader = client.create_reader(
        str(topic), pulsar.MessageId.earliest, is_read_compacted=compacted
    )
    out: list[tuple[str, bytes]] = []
    try:
        for _ in range(expect):
            msg = reader.read_next(timeout_millis=30_000)
            out.append((msg.partition_key(), msg.data()))
        with pytest.raises(pulsar.Timeout):
            extra = reader.read_next(timeout_millis=1500)
            out.append((extra.partition_key(), extra.data()))
        return out
    finally:
        reader.close()


def _send(producer: pulsar.Producer, items: list[tuple[str | None, bytes]]) -> None:
    for key, payload in items:
        if key is None:
            producer.send(payload)
        else:
            producer.send(payload, partition_key=key)


def test_compaction_threshold_compacts_on_the_owner_and_read_compacted_sees_it(
    pair: tuple[ThreadSidecar, BinarySidecar], client: pulsar.Client, kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(str(topic), batching_enabled=False)
    pad = b"." * 100
    first = [("a", b"a1" + pad), ("b", b"b1" + pad), (None, b"nokey" + pad), ("a", b"a2" + pad)]
    _send(producer, first)

    # A threshold above what was written: no compaction; readCompacted reads everything.
    _set_threshold(writer, server, topic, 100_000)
    _full_sweeps(server)
    assert _horizon(server, topic) == 0
    assert len(_read_all(client, topic, compacted=True, expect=4)) == 4

    # Updated below what was written: the owner compacts (latest per key, keyless out).
    _set_threshold(writer, server, topic, 200)
    _wait_for(lambda: _horizon(server, topic) == 4, "compaction up to offset 4")
    assert _read_all(client, topic, compacted=True, expect=2) == [
        ("b", b"b1" + pad),
        ("a", b"a2" + pad),
    ]
    # The topic keeps everything.
    assert len(_read_all(client, topic, compacted=False, expect=4)) == 4
    companion = compacted_topic_of(kafka_topic_of(topic))
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()
    overrides = admin.topic_overrides(companion)
    assert overrides is not None and overrides.get("cleanup.policy") == "compact"

    # An empty payload deletes its key at the next compaction; newer messages follow
    # the compacted view.
    _send(producer, [("b", b""), ("c", b"c1" + pad), ("a", b"a3" + pad)])
    _wait_for(lambda: _horizon(server, topic) == 7, "second compaction up to offset 7")
    assert _read_all(client, topic, compacted=True, expect=2) == [
        ("c", b"c1" + pad),
        ("a", b"a3" + pad),
    ]

    # A durable readCompacted consumer (Exclusive) gets the same view, then new messages.
    consumer = client.subscribe(
        str(topic),
        "rc",
        is_read_compacted=True,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got = [consumer.receive(timeout_millis=20_000) for _ in range(2)]
    assert [m.data() for m in got] == [b"c1" + pad, b"a3" + pad]
    for m in got:
        consumer.acknowledge(m)
    consumer.close()

    # Removed: no more automatic compaction, the compacted view stays (as Pulsar's ledger).
    _set_threshold(writer, server, topic, None)
    _send(producer, [("d", b"d1" + pad)] * 5)
    _full_sweeps(server)
    assert _horizon(server, topic) == 7
    # Below the horizon the view, then the topic (the five new messages, not compacted).
    assert _read_all(client, topic, compacted=True, expect=7) == [
        ("c", b"c1" + pad),
        ("a", b"a3" + pad),
        *[("d", b"d1" + pad)] * 5,
    ]
    producer.close()


def test_read_compacted_is_refused_on_shared_subscriptions(
    pair: tuple[ThreadSidecar, BinarySidecar], kafka_bootstrap: str
) -> None:
    # The C++ client refuses this combination itself (InvalidConfiguration), so the
    # engine's own refusal (Pulsar's NotAllowedException text) is asked directly.
    _writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    call = server.engine.subscribe(
        topic, "s", sub_type=SubscriptionType.Shared, read_compacted=True
    )
    future = asyncio.run_coroutine_threadsafe(call, server._loop)  # noqa: SLF001
    with pytest.raises(NotAllowedError, match="readCompacted only allowed on failover"):
        future.result(timeout=60)


def test_negative_threshold_is_refused_and_nothing_written(
    pair: tuple[ThreadSidecar, BinarySidecar], kafka_bootstrap: str
) -> None:
    writer, _server = pair
    topic = make_topic(kafka_bootstrap, 1)
    url = f"{writer.http_url}/admin/v2/{path_of(topic)}/compactionThreshold"
    status, body = request_json("POST", url, -1)
    assert status == 412, body
    assert body["reason"] == "Invalid value for compactionThreshold"
    svc = writer.sidecar.service
    assert svc is not None
    assert svc.get(PolicyTarget.for_topic(topic)) is None
    ns = PolicyTarget.namespace_of(topic.tenant, topic.namespace)
    before = svc.get(ns)
    ns_url = f"{writer.http_url}/admin/v2/namespaces/{topic.tenant}/{topic.namespace}"
    status, body = request_json("POST", f"{ns_url}/compactionThreshold", -5)
    assert status == 412, body
    assert body["reason"] == "compactionThreshold must be 0 or more"
    assert svc.get(ns) == before


def test_manual_compaction_and_its_status_through_the_admin_api(
    pair: tuple[ThreadSidecar, BinarySidecar], client: pulsar.Client, kafka_bootstrap: str
) -> None:
    _writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    url = f"{server.http_url}/admin/v2/{path_of(topic)}/compaction"
    assert request_json("GET", url) == (200, {"status": "NOT_RUN", "lastError": ""})
    producer = client.create_producer(str(topic), batching_enabled=False)
    _send(producer, [("k", b"v1"), ("k", b"v2")])
    producer.close()
    status, body = request_json("PUT", url)
    assert status == 204, body
    _wait_for(lambda: request_json("GET", url)[1]["status"] == "SUCCESS", "compaction done")
    assert _read_all(client, topic, compacted=True, expect=1) == [("k", b"v2")]
    # Another sidecar sends the admin client to the owner (Pulsar's 307).
    other = http.client.HTTPConnection("127.0.0.1", _writer.port, timeout=30)
    other.request("GET", f"/admin/v2/{path_of(topic)}/compaction")
    answer = other.getresponse()
    assert answer.status == 307
    assert (
        answer.getheader("Location") == f"http://127.0.0.1:1/admin/v2/{path_of(topic)}/compaction"
    )
    other.close()
    missing = url.replace(topic.local_name, topic.local_name + "-missing")
    status, body = request_json("PUT", missing)
    assert status == 404, body


def test_a_read_compacted_consumer_gets_the_latest_value_of_a_batched_key(
    pair: tuple[ThreadSidecar, BinarySidecar], client: pulsar.Client, kafka_bootstrap: str
) -> None:
    """Issue 27's case: one key sent twice by a batching producer, an admin-triggered
    compaction, then a consumer with ``is_read_compacted=True`` from the earliest: only
    the latest value, as Pulsar gives it."""
    _writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(str(topic))  # batching on: both in one batch
    for value in (b"hello-0", b"hello-1"):
        producer.send_async(value, None, partition_key="k")
    producer.flush()
    producer.close()
    url = f"{server.http_url}/admin/v2/{path_of(topic)}/compaction"
    assert request_json("PUT", url)[0] == 204
    _wait_for(lambda: request_json("GET", url)[1]["status"] == "SUCCESS", "compaction done")
    consumer = client.subscribe(
        str(topic),
        "compacted",
        is_read_compacted=True,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    first = consumer.receive(timeout_millis=20_000)
    assert (first.partition_key(), first.data()) == ("k", b"hello-1")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1000)
    consumer.close()
