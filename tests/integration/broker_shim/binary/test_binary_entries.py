"""The stored-entry format (``broker-shim run --entry-format entry``, docs/entry-design.md)
with the official ``pulsar-client`` wheel on a real sidecar and Kafka: a SEND is one Kafka
record, stored as sent, and every field a client set comes back to consumers, readers and
WebSocket consumers; records of both formats (and plain Kafka records) share a topic; a
record that is not a readable entry is quarantined, never wedging the subscription;
compaction keeps the latest message per key inside batches, and readers and seeks start
inside a batch."""

from __future__ import annotations

import base64
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import Producer

from sync import TopicName
from sync.messaging.headers import HEADER_ENTRY, HEADER_ENTRY_COUNT
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.integration.broker_shim.binary.test_binary_client import _records
from tests.integration.broker_shim.binary.test_binary_fidelity import (
    _LARGE,
    _SENT,
    _check,
    _receive,
    _send_all,
)
from tests.support.http import request_json
from tests.support.kafka import ROOT, consume_some, make_topic
from tests.support.sidecars import BinarySidecar
from tests.support.waits import wait_for
from tests.support.ws import ack, connect, consumer_url, path_of, receive, run, silent

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BinarySidecar]:
    with BinarySidecar(
        kafka_bootstrap, tmp_path_factory.mktemp("entries"), entry_format="entry"
    ) as s:
        yield s


def _stored(bootstrap: str, topic: TopicName) -> list[tuple[int, dict[str, bytes]]]:
    """Each record of partition 0: its timestamp and its headers."""
    consumer = KafkaTransport(KafkaConfig(bootstrap)).consumer()
    try:
        kafka_topic = kafka_topic_of(topic)
        end = consumer.end_offsets(kafka_topic, [0])[0]
        consumer.assign(kafka_topic, {0: 0})
        return [
            (record.timestamp()[1], dict(record.headers() or []))
            for record in consume_some(consumer, end)
        ]
    finally:
        consumer.close()


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
def test_a_send_is_one_record_and_every_field_comes_back(
    kafka_bootstrap: str, client: pulsar.Client, batched: bool
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(str(topic), "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        str(topic),
        batching_enabled=batched,
        batching_max_publish_delay_ms=50,
        compression_type=pulsar.CompressionType.LZ4,
    )
    before = _send_all(producer, batched=batched)
    got = _receive(consumer, len(_SENT))
    _check(got, producer.producer_name(), before)
    reader = client.create_reader(str(topic), pulsar.MessageId.earliest)
    _check(_receive(reader, len(_SENT)), producer.producer_name(), before)
    stored = _stored(kafka_bootstrap, topic)
    # One record per SEND: the batch whole, or each unbatched message.
    assert len(stored) == (1 if batched else len(_SENT))
    assert all(h[HEADER_ENTRY] == b"1" for _, h in stored)
    assert [int(h[HEADER_ENTRY_COUNT]) for _, h in stored] == (
        [len(_SENT)] if batched else [1] * len(_SENT)
    )
    # The publish time is the client's, as Pulsar keeps it; Kafka's timestamp is the store time.
    assert all(m.publish_timestamp() <= ts for m, (ts, _) in zip(got, stored, strict=False))


def test_chunks_and_encrypted_batches_are_entries_too(
    kafka_bootstrap: str, client: pulsar.Client, keys: pulsar.CryptoKeyReader
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(
        str(topic), "sub", initial_position=pulsar.InitialPosition.Earliest, crypto_key_reader=keys
    )
    chunked = client.create_producer(str(topic), batching_enabled=False, chunking_enabled=True)
    large = os.urandom(_LARGE)
    chunked.send(large, partition_key="big")
    sealed = client.create_producer(
        str(topic), encryption_key="app-key", crypto_key_reader=keys, batching_enabled=True
    )
    for i in range(3):
        sealed.send_async(b"secret %d" % i, None, ordering_key="o")
    sealed.flush()
    got = _receive(consumer, 4)
    assert got[0].data() == large
    assert got[0].partition_key() == "big"
    assert [(m.data(), m.ordering_key()) for m in got[1:]] == [
        (b"secret %d" % i, "o") for i in range(3)
    ]
    assert _records(kafka_bootstrap, topic) == {0: 3 + 1}  # three chunks, one batch


def test_an_unacknowledged_batch_comes_again_whole_and_marked(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(
        str(topic),
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(
        str(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(5):
        producer.send_async(b"m%d" % i, None)
    producer.flush()
    first = [consumer.receive(timeout_millis=20_000) for _ in range(5)]
    assert _records(kafka_bootstrap, topic) == {0: 1}  # one entry
    assert [m.redelivery_count() for m in first] == [0] * 5
    consumer.acknowledge(first[0])  # one of five: the entry stays unacknowledged
    consumer.close()
    again = client.subscribe(str(topic), "sub", consumer_type=pulsar.ConsumerType.Shared)
    got = [again.receive(timeout_millis=20_000) for _ in range(5)]
    assert sorted(m.data() for m in got) == [b"m%d" % i for i in range(5)]
    assert all(m.redelivery_count() >= 1 for m in got)
    for m in got:
        again.acknowledge(m)
    again.close()
    last = client.subscribe(str(topic), "sub", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.Timeout):
        last.receive(timeout_millis=2_000)


def test_deduplication_resumes_from_a_batch_s_highest_sequence_id(
    kafka_bootstrap: str, sidecar: BinarySidecar, client: pulsar.Client
) -> None:
    import asyncio

    from tests.support.ws import policy_enforced, set_policy

    topic = make_topic(kafka_bootstrap, 1)
    asyncio.run(set_policy(sidecar.http_url, topic, "deduplicationEnabled", True))
    asyncio.run(policy_enforced(sidecar, topic, "deduplicationEnabled"))
    producer = client.create_producer(
        str(topic),
        producer_name="dedup-entries",
        batching_enabled=True,
        batching_max_publish_delay_ms=50,
    )
    for i in range(4):
        producer.send_async(b"d%d" % i, None, sequence_id=10 + i)
    producer.flush()
    producer.close()
    again = client.create_producer(str(topic), producer_name="dedup-entries")
    assert again.last_sequence_id() == 13
    again.send(b"old", sequence_id=12)  # a duplicate: acknowledged, not stored
    again.send(b"new", sequence_id=14)
    consumer = client.subscribe(str(topic), "sub", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in _receive(consumer, 5)] == [b"d0", b"d1", b"d2", b"d3", b"new"]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1_000)


def test_formats_share_a_topic_and_a_bad_entry_is_quarantined(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    """A plain Kafka record, a record claiming to be an entry that is not one, a record of
    an entry version from the future, then a client's batch: the consumer gets the plain
    record and the batch; the two bad records are skipped (acknowledged), not sent."""
    topic = make_topic(kafka_bootstrap, 1)
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    kafka_topic = kafka_topic_of(topic)
    plain.produce(kafka_topic, b"from kafka", key=b"k", partition=0)
    plain.produce(
        kafka_topic, b"\x00\x00\x00\xffgarbage", partition=0, headers=[(HEADER_ENTRY, b"1")]
    )
    plain.produce(kafka_topic, b"v9", partition=0, headers=[(HEADER_ENTRY, b"9")])
    assert plain.flush(30) == 0
    producer = client.create_producer(
        str(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(3):
        producer.send_async(b"b%d" % i, None)
    producer.flush()
    consumer = client.subscribe(str(topic), "sub", initial_position=pulsar.InitialPosition.Earliest)
    got = _receive(consumer, 4)
    assert [m.data() for m in got] == [b"from kafka", b"b0", b"b1", b"b2"]
    assert got[0].partition_key() == "k"
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1_000)


def test_websocket_consumers_get_an_entry_message_by_message(
    kafka_bootstrap: str, sidecar: BinarySidecar, client: pulsar.Client
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(3):
        producer.send_async(
            b"w%d" % i, None, partition_key="pk", properties={"i": str(i)}, event_timestamp=7
        )
    producer.flush()

    async def scenario() -> None:
        async with connect(consumer_url(sidecar, topic, "ws")) as ws:
            got = await receive(ws, 3)
            assert [m["properties"] for m in got] == [{"i": str(i)} for i in range(3)]
            assert {m["key"] for m in got} == {"pk"}
            assert len({m["messageId"] for m in got}) == 3
            await ack(ws, got[:2])  # two of three: batch-index acks, the entry stays
        async with connect(consumer_url(sidecar, topic, "ws")) as ws:
            again = await receive(ws, 1)  # only the message not acknowledged
            assert [m["properties"] for m in again] == [{"i": "2"}]
            assert again[0]["messageId"] == got[2]["messageId"]
            assert all(m["redeliveryCount"] >= 1 for m in again)
            await ack(ws, again)
            assert await silent(ws, 0.5) == []
        async with connect(consumer_url(sidecar, topic, "ws")) as ws:
            assert await silent(ws, 1.5) == []

    run(scenario())


def test_a_websocket_ack_of_an_id_the_session_never_sent_acks_only_its_index(
    kafka_bootstrap: str, sidecar: BinarySidecar, client: pulsar.Client
) -> None:
    """A message id of an entry acknowledged on a session that did not send it (another
    consumer of a Shared subscription, or one after a reconnect) acknowledges that
    message's batch index only, never the whole entry."""
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(3):
        producer.send_async(b"u%d" % i, None)
    producer.flush()
    url = consumer_url(sidecar, topic, "shared", subscriptionType="Shared")

    async def scenario() -> None:
        async with connect(url) as holder:
            got = await receive(holder, 3)
            async with connect(url) as other:  # the entry is out with ``holder``
                await ack(other, got[:1])
            await ack(holder, got[1:2])
        async with connect(url) as ws:
            again = await receive(ws, 1)  # index 2 alone: 0 and 1 were acknowledged
            assert [base64.b64decode(m["payload"]) for m in again] == [b"u2"]
            assert again[0]["messageId"] == got[2]["messageId"]
            await ack(ws, again)
            assert await silent(ws, 1.0) == []

    run(scenario())


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
def test_a_kafka_application_reads_every_field_with_the_decoder(
    kafka_bootstrap: str, client: pulsar.Client, batched: bool
) -> None:
    """examples/kafka_reads_pulsar_messages.py: a plain confluent-kafka consumer and
    ``decode_record`` give back what the Pulsar client sent."""
    from examples.kafka_reads_pulsar_messages import read_messages

    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(topic), batching_enabled=batched, batching_max_publish_delay_ms=50
    )
    before = _send_all(producer, batched=batched)
    got = [m for _, m in read_messages(kafka_bootstrap, str(topic), idle_s=2.0)]
    assert len(got) == len(_SENT)
    for msg, (content, kwargs) in zip(got, _SENT, strict=True):
        assert msg.payload == content
        assert msg.key == kwargs.get("partition_key")
        assert msg.ordering_key == (
            kwargs["ordering_key"].encode() if "ordering_key" in kwargs else None
        )
        assert msg.properties == kwargs.get("properties", {})
        assert msg.event_time_ms == kwargs.get("event_timestamp")
        assert msg.producer_name == producer.producer_name()
        assert before - 1 <= msg.publish_time_ms <= time.time() * 1000 + 1
    assert [m.sequence_id for m in got] == list(range(len(_SENT)))
    assert [m.batch_index for m in got] == (
        list(range(len(_SENT))) if batched else [0] * len(_SENT)
    )


def test_a_reader_at_the_latest_message_inclusive_gets_only_the_last_of_a_batch(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    """GET_LAST_MESSAGE_ID names the last message of the last stored batch (its batch
    index), as Pulsar does: a reader started there inclusive reads that message alone,
    and ``has_message_available`` is right before and after it."""
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(4):
        producer.send_async(b"r%d" % i, None)
    producer.flush()
    reader = client.create_reader(
        str(topic), pulsar.MessageId.latest, start_message_id_inclusive=True
    )
    assert reader.has_message_available()
    assert reader.read_next(20_000).data() == b"r3"
    assert not reader.has_message_available()
    earliest = client.create_reader(str(topic), pulsar.MessageId.earliest)
    assert earliest.read_next(20_000).data() == b"r0"
    assert earliest.has_message_available()  # three more of the same batch


def _batch(producer: pulsar.Producer, items: list[tuple[str | None, bytes | None]]) -> None:
    """Send ``items`` as one batch (one stored entry); ``None`` content: a null value."""
    for key, content in items:
        if key is None:
            producer.send_async(content, None)
        else:
            producer.send_async(content, None, partition_key=key)
    producer.flush()


def test_compaction_keeps_the_latest_message_per_key_inside_batches(
    sidecar: BinarySidecar,
    kafka_bootstrap: str,
    client: pulsar.Client,
    keys: pulsar.CryptoKeyReader,
) -> None:
    """Pulsar's two-phase compactor on stored batches of mixed keys: a superseded message
    is compacted out of its batch (the others keep their batch indexes), a batch whose
    messages are all superseded leaves the view, a null value deletes its key, keyless
    messages are left out, an encrypted batch (whose keys Pulsar cannot read either) is
    kept or superseded whole by its batch key; ``readCompacted`` readers and consumers see
    the rest, then the topic from the horizon."""
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(topic),
        batching_enabled=True,
        batching_max_publish_delay_ms=60_000,  # each flush below sends one batch
        compression_type=pulsar.CompressionType.LZ4,
    )
    _batch(producer, [("a", b"a1"), ("b", b"b1"), (None, b"keyless"), ("c", b"c1")])
    _batch(producer, [("a", b"a2"), ("d", b"d1")])
    _batch(producer, [("d", None), ("e", b"e1")])  # d's null value deletes it
    _batch(producer, [("f", b"f1"), ("g", b"g1")])  # all superseded next: gone
    _batch(producer, [("f", b"f2"), ("g", b"g2"), ("b", b"b2")])
    sealed = client.create_producer(
        str(topic),
        encryption_key="app-key",
        crypto_key_reader=keys,
        batching_enabled=True,
        batching_max_publish_delay_ms=60_000,
    )
    _batch(sealed, [("s", b"s1"), ("s", b"s2")])  # both kept: the batch is kept whole
    sealed.close()
    url = f"{sidecar.http_url}/admin/v2/{path_of(topic)}/compaction"
    assert request_json("PUT", url)[0] == 204
    wait_for(lambda: request_json("GET", url)[1]["status"] == "SUCCESS", "compaction done")
    _batch(producer, [("a", b"a3")])  # above the horizon: read from the topic
    producer.close()
    # (batch, index, key, value) of what the compacted view keeps, then the tail.
    expected = [
        (0, 3, "c", b"c1"),
        (1, 0, "a", b"a2"),
        (2, 1, "e", b"e1"),
        (4, 0, "f", b"f2"),
        (4, 1, "g", b"g2"),
        (4, 2, "b", b"b2"),
        (5, 0, "s", b"s1"),
        (5, 1, "s", b"s2"),
        (6, 0, "a", b"a3"),
    ]
    reader = client.create_reader(
        str(topic), pulsar.MessageId.earliest, is_read_compacted=True, crypto_key_reader=keys
    )
    got = [reader.read_next(20_000) for _ in expected]
    assert not reader.has_message_available()
    first = got[0].message_id().entry_id()
    assert [
        (
            m.message_id().entry_id() - first,
            m.message_id().batch_index(),
            m.partition_key(),
            m.data(),
        )
        for m in got
    ] == expected
    reader.close()
    consumer = client.subscribe(
        str(topic),
        "compacted",
        is_read_compacted=True,
        initial_position=pulsar.InitialPosition.Earliest,
        crypto_key_reader=keys,
    )
    received = [consumer.receive(timeout_millis=20_000) for _ in expected]
    assert [(m.partition_key(), m.data()) for m in received] == [e[2:] for e in expected]
    consumer.acknowledge_cumulative(received[-1])
    consumer.close()
    # Without readCompacted, the topic keeps every message.
    full = client.create_reader(str(topic), pulsar.MessageId.earliest, crypto_key_reader=keys)
    assert len([full.read_next(20_000) for _ in range(16)]) == 16
    assert not full.has_message_available()


def test_readers_and_seeks_start_inside_a_batch(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    """A reader created at a message of a stored batch, inclusive or not, and a seek to
    one start at that message, not at its batch's first: the sidecar sends the whole entry
    from its start, as Pulsar's broker does, and the client drops the messages before the
    start id (its ``isPrior`` check); ``has_message_available`` is right mid-entry."""
    topic = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(topic), batching_enabled=True, batching_max_publish_delay_ms=60_000
    )
    _batch(producer, [(None, b"m%d" % i) for i in range(10)])
    _batch(producer, [(None, b"n%d" % i) for i in range(3)])
    producer.close()
    everything = client.create_reader(str(topic), pulsar.MessageId.earliest)
    ids = [everything.read_next(20_000).message_id() for _ in range(13)]
    everything.close()
    assert [i.batch_index() for i in ids] == [*range(10), *range(3)]

    def first_after(start: pulsar.MessageId, *, inclusive: bool) -> tuple[bytes, bool]:
        reader = client.create_reader(str(topic), start, start_message_id_inclusive=inclusive)
        try:
            available = reader.has_message_available()
            return (reader.read_next(20_000).data() if available else b""), available
        finally:
            reader.close()

    assert first_after(ids[4], inclusive=False) == (b"m5", True)
    assert first_after(ids[4], inclusive=True) == (b"m4", True)
    assert first_after(ids[9], inclusive=False) == (b"n0", True)
    assert first_after(ids[12], inclusive=True) == (b"n2", True)
    assert first_after(ids[12], inclusive=False) == (b"", False)  # nothing after the last
    reader = client.create_reader(str(topic), ids[10])
    assert reader.read_next(20_000).data() == b"n1"
    assert reader.has_message_available()  # n2, in the same entry
    assert reader.read_next(20_000).data() == b"n2"
    assert not reader.has_message_available()
    reader.seek(ids[6])  # a reader is exclusive of its start: the one after it
    assert reader.read_next(20_000).data() == b"m7"
    reader.close()
    # A consumer's seek: the C++ client (Python's) drops the id sought and those before
    # it in the entry, as against Pulsar (it starts after it, not inclusive by default).
    consumer = client.subscribe(
        str(topic), "seeker", initial_position=pulsar.InitialPosition.Earliest
    )
    assert consumer.receive(timeout_millis=20_000).data() == b"m0"
    consumer.seek(ids[2])
    after = consumer.receive(timeout_millis=20_000)
    assert (after.data(), after.message_id().batch_index()) == (b"m3", 3)
    consumer.close()


def test_the_java_client_on_compacted_batches_and_positions_inside_one(
    sidecar: BinarySidecar, kafka_bootstrap: str, client: pulsar.Client, classpath: str
) -> None:
    """Pulsar's Java client (the reference: it skips ``compacted_out`` itself) reads the
    rebuilt batches with their batch indexes, and starts readers and a seek inside a
    batch."""
    compacted = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(compacted), batching_enabled=True, batching_max_publish_delay_ms=60_000
    )
    _batch(producer, [("a", b"a1"), ("b", b"b1"), ("c", b"c1")])
    _batch(producer, [("a", b"a2")])
    producer.close()
    url = f"{sidecar.http_url}/admin/v2/{path_of(compacted)}/compaction"
    assert request_json("PUT", url)[0] == 204
    wait_for(lambda: request_json("GET", url)[1]["status"] == "SUCCESS", "compaction done")
    positions = make_topic(kafka_bootstrap, 1)
    producer = client.create_producer(
        str(positions), batching_enabled=True, batching_max_publish_delay_ms=60_000
    )
    _batch(producer, [(None, b"m%d" % i) for i in range(10)])
    _batch(producer, [(None, b"n%d" % i) for i in range(3)])
    producer.close()
    run = subprocess.run(
        ["java", "-cp", classpath, str(ROOT / "tests" / "java" / "EntryPositions.java"),
         sidecar.broker_url, str(compacted), str(positions)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.splitlines() == [
        "compacted b b1 1",
        "compacted c c1 2",
        "compacted a a2 0",
        "exclusive m5",
        "inclusive m4",
        "seek m3",
    ]


# ------------------------------------------------------------------ batch-index acks


def _one_batch(client: pulsar.Client, topic: TopicName, count: int) -> None:
    """``count`` messages ``i0``… sent as one batch: one stored entry."""
    producer = client.create_producer(
        str(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(count):
        producer.send_async(b"i%d" % i, None)
    producer.flush()
    producer.close()


def _index_acking(client: pulsar.Client, topic: TopicName, **kw: object) -> pulsar.Consumer:
    kw.setdefault("consumer_type", pulsar.ConsumerType.Shared)
    return client.subscribe(
        str(topic),
        "sub",
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=True,
        negative_ack_redelivery_delay_ms=100,
        **kw,
    )


def _datas(consumer: pulsar.Consumer, count: int) -> list[bytes]:
    got = [consumer.receive(timeout_millis=20_000) for _ in range(count)]
    return [m.data() for m in got]


def _nothing_more(consumer: pulsar.Consumer, wait_ms: int = 800) -> None:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=wait_ms)


def test_batch_index_acks_leave_acked_messages_out_of_every_redelivery(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    """Pulsar with ``acknowledgmentAtBatchIndexLevelEnabled``: a consumer with batch-index
    acks acknowledges some messages of a batch; the entry comes again (another consumer,
    a negative ack, ``redeliverUnacknowledgedMessages``) with only the others, until all
    of it is acknowledged and it is gone."""
    topic = make_topic(kafka_bootstrap, 1)
    first = _index_acking(client, topic)
    _one_batch(client, topic, 6)
    got = [first.receive(timeout_millis=20_000) for _ in range(6)]
    assert _records(kafka_bootstrap, topic) == {0: 1}  # one entry
    for m in (got[0], got[2], got[5]):
        first.acknowledge(m)
    first.close()  # its acknowledgements are flushed; the entry goes to the next consumer
    second = _index_acking(client, topic)
    again = [second.receive(timeout_millis=20_000) for _ in range(3)]
    assert [m.data() for m in again] == [b"i1", b"i3", b"i4"]
    assert all(m.redelivery_count() >= 1 for m in again)
    _nothing_more(second)
    second.negative_acknowledge(again[1])  # one message: the entry's unacked ones return
    assert sorted(_datas(second, 3)) == [b"i1", b"i3", b"i4"]
    second.acknowledge(again[0])  # i1
    time.sleep(0.3)  # the ack is grouped for 100 ms before it is sent
    second.redeliver_unacknowledged_messages()
    rest = [second.receive(timeout_millis=20_000) for _ in range(2)]
    assert [m.data() for m in rest] == [b"i3", b"i4"]
    for m in rest:
        second.acknowledge(m)
    second.close()
    last = _index_acking(client, topic)
    _nothing_more(last)  # every index acknowledged: the entry was acknowledged whole


def test_a_cumulative_ack_inside_a_batch_acks_the_indexes_up_to_it(
    kafka_bootstrap: str, client: pulsar.Client
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = _index_acking(client, topic, consumer_type=pulsar.ConsumerType.Exclusive)
    _one_batch(client, topic, 5)
    got = [consumer.receive(timeout_millis=20_000) for _ in range(5)]
    consumer.acknowledge_cumulative(got[2])
    consumer.close()
    again = _index_acking(client, topic, consumer_type=pulsar.ConsumerType.Exclusive)
    assert _datas(again, 2) == [b"i3", b"i4"]
    _nothing_more(again)


def test_acked_indexes_survive_a_sidecar_restart(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The acknowledged indexes of a partially acknowledged entry are committed (``ps2``
    commit metadata) and honoured by the next sidecar to serve the subscription."""
    from sync.messaging import subscription_group
    from sync.messaging._cursor import decode_ack_state

    topic = make_topic(kafka_bootstrap, 1)
    with BinarySidecar(kafka_bootstrap, tmp_path / "first", entry_format="entry") as first:
        c = pulsar.Client(first.broker_url, operation_timeout_seconds=20)
        try:
            consumer = _index_acking(c, topic)
            _one_batch(c, topic, 5)
            got = [consumer.receive(timeout_millis=20_000) for _ in range(5)]
            for m in (got[0], got[1], got[3]):
                consumer.acknowledge(m)
            time.sleep(0.3)  # grouped acks sent, then committed within 100 ms
        finally:
            c.close()
    kafka_topic = kafka_topic_of(topic)
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()
    offset, metadata = admin.group_positions(subscription_group(kafka_topic, "sub"), kafka_topic)[0]
    assert (offset, metadata[:4]) == (0, "ps2:")
    assert decode_ack_state(offset, metadata) == ([], [(0, 5, 0b01011)])
    with BinarySidecar(kafka_bootstrap, tmp_path / "second", entry_format="entry") as second:
        c = pulsar.Client(second.broker_url, operation_timeout_seconds=20)
        try:
            consumer = _index_acking(c, topic)
            again = [consumer.receive(timeout_millis=20_000) for _ in range(2)]
            assert [m.data() for m in again] == [b"i2", b"i4"]
            assert all(m.redelivery_count() >= 1 for m in again)
            _nothing_more(consumer, 500)
            for m in again:
                consumer.acknowledge(m)
            consumer.close()
            last = _index_acking(c, topic)
            _nothing_more(last, 500)
        finally:
            c.close()
