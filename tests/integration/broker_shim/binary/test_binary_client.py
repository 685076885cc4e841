"""The official Python ``pulsar-client`` against a sidecar's ``pulsar://`` listener, on Kafka.

Every test drives the unmodified client (the C++ client underneath the wheel) through the
sidecar's binary protocol and checks what Kafka holds or what the client receives.
"""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest

from sync import TopicName, routing
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.kafka import free_port, make_topic
from tests.support.sidecars import BinarySidecar
from tests.support.waits import wait_for

pytestmark = pytest.mark.timeout(180)


def _records(bootstrap: str, topic: TopicName) -> dict[int, int]:
    """Kafka end offsets per partition of ``topic`` (how many records each holds)."""
    transport = KafkaTransport(KafkaConfig(bootstrap))
    admin = transport.admin()
    desc = admin.describe_topic(kafka_topic_of(topic))
    assert desc is not None
    consumer = transport.consumer()
    try:
        return consumer.end_offsets(kafka_topic_of(topic), list(range(desc.partitions)))
    finally:
        consumer.close()


def _receive_all(consumer: pulsar.Consumer, count: int, ack: bool = True) -> list[pulsar.Message]:
    out = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=20_000)
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return out


@pytest.mark.parametrize(
    "sub_type",
    [
        pulsar.ConsumerType.Exclusive,
        pulsar.ConsumerType.Shared,
        pulsar.ConsumerType.Failover,
        pulsar.ConsumerType.KeyShared,
    ],
)
def test_produce_and_consume_every_subscription_type(
    kafka_bootstrap: str, client: pulsar.Client, sub_type: pulsar.ConsumerType
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(
        str(topic),
        "sub",
        consumer_type=sub_type,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(str(topic), batching_enabled=False)
    sent = [
        producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i % 3}")
        for i in range(20)
    ]
    assert [m.entry_id() for m in sent] == list(range(20))
    got = _receive_all(consumer, 20)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(20))
    by_data = {m.data(): m for m in got}
    assert by_data[b"m7"].properties() == {"i": "7"}
    assert by_data[b"m7"].partition_key() == "k1"
    if sub_type in (pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover):
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]
    assert _records(kafka_bootstrap, topic) == {0: 20}
    consumer.close()
    producer.close()


def test_two_shared_consumers_split_the_messages(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    kwargs = {
        "consumer_type": pulsar.ConsumerType.Shared,
        "initial_position": pulsar.InitialPosition.Earliest,
        "receiver_queue_size": 5,
    }
    a = client.subscribe(str(topic), "shared", **kwargs)
    b = client.subscribe(str(topic), "shared", **kwargs)
    producer = client.create_producer(str(topic), batching_enabled=False)
    for i in range(40):
        producer.send(b"%d" % i)
    seen: dict[str, set[bytes]] = {"a": set(), "b": set()}
    deadline = time.monotonic() + 60
    while len(seen["a"] | seen["b"]) < 40 and time.monotonic() < deadline:
        for name, c in (("a", a), ("b", b)):
            try:
                msg = c.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            seen[name].add(msg.data())
            c.acknowledge(msg)
    assert seen["a"] | seen["b"] == {b"%d" % i for i in range(40)}
    assert seen["a"] and seen["b"], "both Shared consumers received messages"


def test_key_shared_keeps_an_ordering_key_on_one_consumer_in_order(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    """Key_Shared routes by the ordering key when a message has one (Pulsar's
    ``peekStickyKey``), not by its partition key: every message here has its own
    partition key, and the two ordering keys each stay on one consumer, in order."""
    topic = make_topic(kafka_bootstrap, 1)
    kwargs = {
        "consumer_type": pulsar.ConsumerType.KeyShared,
        "initial_position": pulsar.InitialPosition.Earliest,
    }
    a = client.subscribe(str(topic), "ks", consumer_name="a", **kwargs)
    b = client.subscribe(str(topic), "ks", consumer_name="b", **kwargs)
    producer = client.create_producer(str(topic), batching_enabled=False)
    for i in range(40):
        producer.send(b"%d" % i, partition_key=f"p{i}", ordering_key="AB"[i % 2])
    got: dict[str, list[tuple[str, int]]] = {"a": [], "b": []}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < 40 and time.monotonic() < deadline:
        for name, c in (("a", a), ("b", b)):
            try:
                msg = c.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            got[name].append((msg.ordering_key(), int(msg.data())))
            c.acknowledge(msg)
    assert sorted(i for seen in got.values() for _, i in seen) == list(range(40))
    for key in "AB":
        holders = [name for name, seen in got.items() if any(k == key for k, _ in seen)]
        assert len(holders) == 1, f"ordering key {key} went to {holders}"
        order = [i for k, i in got[holders[0]] if k == key]
        assert order == sorted(order)


def test_partitioned_topic_client_routing_is_kept(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    """The client routes (round robin for unkeyed messages, a key hash for keyed ones) and
    every message is stored in the Kafka partition of the partition producer it chose.

    With its default router the wheel hashes keys with the C++ client's default, BoostHash,
    which :mod:`sync.routing` does not implement, so here the partition of a key is checked
    for consistency; ``test_keyed_messages_land_where_sync_routing_says`` checks Murmur3 and
    JavaStringHash against :mod:`sync.routing`.
    """
    topic = make_topic(kafka_bootstrap, 4)
    assert client.get_topic_partitions(str(topic)) == [str(topic.partition(i)) for i in range(4)]
    producer = client.create_producer(
        str(topic),
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    sent: dict[bytes, int] = {}
    for i in range(40):
        key = f"key-{i % 8}"
        sent[b"%s/%d" % (key.encode(), i)] = producer.send(
            b"%s/%d" % (key.encode(), i), partition_key=key
        ).partition()
    for i in range(20):
        sent[b"unkeyed-%d" % i] = producer.send(b"unkeyed-%d" % i).partition()
    consumer = client.subscribe(
        str(topic), "routing", initial_position=pulsar.InitialPosition.Earliest
    )
    got = _receive_all(consumer, 60)
    key_partitions: dict[str, set[int]] = {}
    for msg in got:
        partition = TopicName.parse(msg.topic_name()).partition_index
        assert msg.message_id().partition() == partition == sent[msg.data()]
        if msg.partition_key():
            key_partitions.setdefault(msg.partition_key(), set()).add(partition)
    assert all(len(parts) == 1 for parts in key_partitions.values()), key_partitions
    records = _records(kafka_bootstrap, topic)
    assert sum(records.values()) == 60
    assert all(n > 0 for n in records.values()), records  # round robin reached every partition


@pytest.mark.parametrize(
    "scheme", [routing.HashingScheme.Murmur3_32Hash, routing.HashingScheme.JavaStringHash]
)
def test_keyed_messages_land_where_sync_routing_says(
    kafka_bootstrap: str, client: pulsar.Client, scheme: routing.HashingScheme
) -> None:
    """The C++ core of the Python wheel hashes keys with ``BoostHash`` by default
    (``ProducerConfigurationImpl``: ``hashingScheme(ProducerConfiguration::BoostHash)``)
    and the wheel (3.13) has no ``hashing_scheme`` option, so a Python application that
    wants Pulsar's Java-compatible routing passes a ``message_router``. With the router
    :mod:`sync.routing` builds (RoundRobinPartition mode, Murmur3_32Hash or
    JavaStringHash), every keyed message is stored in the Kafka partition ``sync.routing``
    computes for its key, and unkeyed messages go round robin over every partition."""
    partitions = 5
    topic = make_topic(kafka_bootstrap, partitions)
    # The producer does not batch, so neither does its router: each unkeyed message goes to
    # the next partition (a batching router keeps a partition for a time slice, and how
    # many sends fit in one depends on how fast they are acknowledged).
    router = routing.make_router(
        routing.MessageRoutingMode.RoundRobinPartition, scheme, batching_enabled=False
    )

    def choose(msg: pulsar.Message, num_partitions: int) -> int:
        key = msg.partition_key() or None
        return routing.checked_choose(
            router, routing.RoutedMessage(key=key), routing.TopicMetadata(num_partitions)
        )

    producer = client.create_producer(str(topic), batching_enabled=False, message_router=choose)
    keys = [f"user-{i}" for i in range(25)] + ["", "ключ", "k" * 40]
    for i, key in enumerate(keys):
        producer.send(b"keyed-%d" % i, partition_key=key)
    for i in range(15):
        producer.send(b"unkeyed-%d" % i)
    consumer = client.subscribe(
        str(topic), "route", initial_position=pulsar.InitialPosition.Earliest
    )
    got = _receive_all(consumer, len(keys) + 15)
    unkeyed: set[int] = set()
    for msg in got:
        partition = TopicName.parse(msg.topic_name()).partition_index
        assert msg.message_id().partition() == partition
        if msg.data().startswith(b"keyed-"):
            key = keys[int(msg.data()[6:])]
            if key == "":
                continue  # the C++ client sends an empty key as no key
            assert partition == scheme.make_hash(key) % partitions, key
        else:
            unkeyed.add(partition)
    assert unkeyed == set(range(partitions))  # round robin reached every partition
    records = _records(kafka_bootstrap, topic)
    assert sum(records.values()) == len(keys) + 15
    consumer.close()


@pytest.mark.parametrize(
    "codec",
    [
        pulsar.CompressionType.NONE,
        pulsar.CompressionType.LZ4,
        pulsar.CompressionType.ZLib,
        pulsar.CompressionType.ZSTD,
        pulsar.CompressionType.SNAPPY,
    ],
)
def test_batches_with_every_codec_are_stored_one_record_per_batch(
    kafka_bootstrap: str, client: pulsar.Client, codec: pulsar.CompressionType
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(topic),
        batching_enabled=True,
        batching_max_messages=50,
        batching_max_publish_delay_ms=50,
        compression_type=codec,
    )
    ids: list[pulsar.MessageId] = []
    errors: list[object] = []

    def done(res: pulsar.Result, mid: pulsar.MessageId) -> None:
        if res == pulsar.Result.Ok:
            ids.append(mid)
        else:
            errors.append(res)

    for i in range(200):
        producer.send_async(
            (b"payload %d " % i) * 5, done, properties={"n": str(i)}, partition_key=f"k{i}"
        )
    producer.flush()
    wait_for(lambda: len(ids) + len(errors) >= 200, "every send answered", timeout_s=30)
    assert not errors
    assert len(ids) == 200
    # Stored as sent (the default --entry-format entry): one Kafka record per batch, the
    # message ids of one batch share its offset.
    batches = {mid.entry_id() for mid in ids}
    assert len(batches) < 200
    assert _records(kafka_bootstrap, topic) == {0: len(batches)}
    consumer = client.subscribe(
        str(topic), "codec", initial_position=pulsar.InitialPosition.Earliest
    )
    got = _receive_all(consumer, 200)
    assert [m.properties()["n"] for m in got] == [str(i) for i in range(200)]
    assert got[42].data() == b"payload 42 " * 5
    assert got[42].partition_key() == "k42"


def test_negative_ack_redelivers_with_a_redelivery_count(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(
        str(topic),
        "nack",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=200,
    )
    producer = client.create_producer(str(topic), batching_enabled=False)
    producer.send(b"again")
    first = consumer.receive(timeout_millis=20_000)
    assert first.redelivery_count() == 0
    consumer.negative_acknowledge(first)
    second = consumer.receive(timeout_millis=20_000)
    assert second.data() == b"again"
    assert second.redelivery_count() == 1
    consumer.acknowledge(second)


def test_ack_timeout_redelivers(kafka_bootstrap: str, client: pulsar.Client) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(
        str(topic),
        "ack-timeout",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        unacked_messages_timeout_ms=10_000,  # the client's minimum
    )
    producer = client.create_producer(str(topic), batching_enabled=False)
    producer.send(b"forgotten")
    first = consumer.receive(timeout_millis=20_000)
    second = consumer.receive(timeout_millis=60_000)  # not acknowledged: comes again
    assert (first.data(), second.data()) == (b"forgotten", b"forgotten")
    assert second.redelivery_count() >= 1
    consumer.acknowledge(second)


def test_consumer_restart_resumes_after_its_last_ack(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(str(topic), batching_enabled=False)
    consumer = client.subscribe(
        str(topic), "resume", initial_position=pulsar.InitialPosition.Earliest
    )
    for i in range(10):
        producer.send(b"%d" % i)
    got = _receive_all(consumer, 6)
    assert [m.data() for m in got] == [b"%d" % i for i in range(6)]
    consumer.close()
    consumer = client.subscribe(
        str(topic), "resume", initial_position=pulsar.InitialPosition.Earliest
    )
    rest = _receive_all(consumer, 4)
    assert [m.data() for m in rest] == [b"%d" % i for i in range(6, 10)]


def test_cumulative_ack(kafka_bootstrap: str, client: pulsar.Client) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(str(topic), batching_enabled=False)
    consumer = client.subscribe(
        str(topic), "cumulative", initial_position=pulsar.InitialPosition.Earliest
    )
    for i in range(10):
        producer.send(b"%d" % i)
    got = _receive_all(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(got[6])
    consumer.close()
    consumer = client.subscribe(
        str(topic), "cumulative", initial_position=pulsar.InitialPosition.Earliest
    )
    rest = _receive_all(consumer, 3)
    assert [m.data() for m in rest] == [b"7", b"8", b"9"]


def test_reader_reads_from_earliest_and_from_a_message_id(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(str(topic), batching_enabled=False)
    ids = [producer.send(b"%d" % i) for i in range(10)]
    reader = client.create_reader(str(topic), pulsar.MessageId.earliest)
    assert [reader.read_next(20_000).data() for _ in range(10)] == [b"%d" % i for i in range(10)]
    assert not reader.has_message_available()
    reader.close()
    reader = client.create_reader(str(topic), ids[4])
    assert reader.read_next(20_000).data() == b"5"  # start id excluded, as in Pulsar
    reader.close()


def test_seek_to_a_message_id_and_to_earliest(kafka_bootstrap: str, client: pulsar.Client) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(str(topic), batching_enabled=False)
    ids = [producer.send(b"%d" % i) for i in range(10)]
    consumer = client.subscribe(
        str(topic), "seek", initial_position=pulsar.InitialPosition.Earliest
    )
    assert [m.data() for m in _receive_all(consumer, 10)] == [b"%d" % i for i in range(10)]
    # The sidecar moves the subscription to the message sought (Pulsar's resetCursor);
    # the C++ client then skips that one itself (start id not inclusive), as with Pulsar.
    consumer.seek(ids[6])
    assert [m.data() for m in _receive_all(consumer, 3)] == [b"7", b"8", b"9"]
    consumer.seek(pulsar.MessageId.earliest)
    assert [m.data() for m in _receive_all(consumer, 10)] == [b"%d" % i for i in range(10)]
    consumer.close()


@pytest.mark.parametrize("partitions", [1, 3])
def test_seek_by_publish_time(kafka_bootstrap: str, client: pulsar.Client, partitions: int) -> None:
    """``consumer.seek(timestamp_ms)``: the subscription moves to the first message
    published at or after that time, in every partition (Kafka's offsets for times), and the
    consumer gets those messages again, as with Pulsar."""
    topic = make_topic(kafka_bootstrap, partitions)
    producer = client.create_producer(
        str(topic),
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(12):
        producer.send(b"old-%d" % i)
    time.sleep(0.05)  # the second half is published strictly later (ms timestamps)
    for i in range(12):
        producer.send(b"new-%d" % i)
    consumer = client.subscribe(
        str(topic), "seek-time", initial_position=pulsar.InitialPosition.Earliest
    )
    got = _receive_all(consumer, 24)
    first_new = min(m.publish_timestamp() for m in got if m.data().startswith(b"new-"))
    assert all(m.publish_timestamp() < first_new for m in got if m.data().startswith(b"old-"))
    consumer.seek(first_new)
    again = _receive_all(consumer, 12)
    assert sorted(m.data() for m in again) == sorted(b"new-%d" % i for i in range(12))
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1000)  # nothing older comes back
    consumer.seek(0)  # before everything: the whole topic again
    assert len({m.data() for m in _receive_all(consumer, 24)}) == 24
    consumer.seek(int(time.time() * 1000) + 3_600_000)  # after everything: nothing
    producer.send(b"after")
    assert consumer.receive(timeout_millis=20_000).data() == b"after"
    consumer.close()


def test_missing_topic_is_auto_created_by_default(client: pulsar.Client) -> None:
    # Pulsar's allowAutoTopicCreation=true default (non-partitioned); the refusals when it
    # is off are in test_auto_topic_creation.py.
    name = f"persistent://public/default/missing-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(name, send_timeout_millis=20_000)
    producer.send(b"created")
    assert client.get_topic_partitions(name) == [name]


def test_sidecar_counts_the_commands_it_served(
    kafka_bootstrap: str, sidecar: BinarySidecar
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    c = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    consumer = c.subscribe(str(topic), "trace", initial_position=pulsar.InitialPosition.Earliest)
    c.create_producer(str(topic)).send(b"x")
    consumer.acknowledge(consumer.receive(timeout_millis=20_000))
    consumer.close()
    c.close()
    assert sidecar.server is not None
    seen = sidecar.server.trace.received_counts
    for name in (
        "CONNECT",
        "PARTITIONED_METADATA",
        "LOOKUP",
        "PRODUCER",
        "SEND",
        "SUBSCRIBE",
        "FLOW",
        "ACK",
        "CLOSE_CONSUMER",
    ):
        assert seen[name] > 0, name


def test_standalone_lookup_keeps_the_client_on_the_service_url(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A sidecar without the cluster registry is Pulsar's standalone: it advertises a
    loopback URL where nothing listens (as a standalone behind a port forward would), and
    its Connect answers carry ``proxy_through_service_url``, so the real client keeps
    using the service URL it reached the sidecar by instead of the advertised address."""
    nowhere = f"pulsar://127.0.0.1:{free_port()}"
    with BinarySidecar(
        kafka_bootstrap, tmp_path_factory.mktemp("standalone"), advertised_url=nowhere
    ) as sidecar:
        client = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
        try:
            topic = make_topic(kafka_bootstrap, 2)
            consumer = client.subscribe(
                str(topic), "s", initial_position=pulsar.InitialPosition.Earliest
            )
            producer = client.create_producer(str(topic), batching_enabled=False)
            for i in range(6):
                producer.send(b"%d" % i)
            got = _receive_all(consumer, 6)
            assert sorted(m.data() for m in got) == [b"%d" % i for i in range(6)]
        finally:
            client.close()
