"""Every field a Pulsar client sets on a message comes back to consumers and readers as
Pulsar returns it, with the official ``pulsar-client`` wheel on a real sidecar and Kafka:
null values, ordering keys, properties, event and publish times, chunked messages and
end-to-end encrypted ones (batched and not), also from a sidecar started after the one
that stored them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest

from sync import TopicName
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.integration.broker_shim.binary.test_binary_client import _records
from tests.support.kafka import consume_some, make_topic
from tests.support.sidecars import BinarySidecar

pytestmark = pytest.mark.timeout(240)

#: Larger than the 1,000,000 bytes the sidecar announces: the client sends 3 chunks.
_LARGE = 2_500_000


# -- what is sent, and what must come back -----------------------------------------------
_SENT: list[tuple[bytes | None, dict[str, Any]]] = [
    # (content, send keyword arguments)
    (None, {"partition_key": "gone", "properties": {"why": "deleted"}, "event_timestamp": 11}),
    (b"", {"partition_key": "empty"}),
    (
        b"hello",
        {
            "partition_key": "k1",
            "ordering_key": "order-1",
            "properties": {"p": "v", "q": ""},
            "event_timestamp": 1_700_000_000_123,
        },
    ),
    (b"plain", {}),
]


def _send_all(producer: pulsar.Producer, *, batched: bool) -> float:
    """Send :data:`_SENT` (one batch when ``batched``); returns the time before sending."""
    before = time.time() * 1000
    if batched:
        for content, kwargs in _SENT:
            producer.send_async(content, None, **kwargs)
        producer.flush()
    else:
        for content, kwargs in _SENT:
            producer.send(content, **kwargs)
    return before


def _check(got: list[pulsar.Message], producer_name: str, before: float) -> None:
    assert len(got) == len(_SENT)
    for msg, (content, kwargs) in zip(got, _SENT, strict=True):
        assert msg.has_null_value() == (content is None), kwargs
        assert msg.data() == (content or b"")
        assert msg.partition_key() == kwargs.get("partition_key", "")
        assert msg.ordering_key() == kwargs.get("ordering_key", "")
        assert msg.properties() == kwargs.get("properties", {})
        assert msg.event_timestamp() == kwargs.get("event_timestamp", 0)
        assert msg.producer_name() == producer_name
        assert before - 1 <= msg.publish_timestamp() <= time.time() * 1000 + 1


def _receive(consumer: pulsar.Consumer | pulsar.Reader, count: int) -> list[pulsar.Message]:
    out = []
    for _ in range(count):
        msg = consumer.read_next(20_000) if isinstance(consumer, pulsar.Reader) else None
        if msg is None:
            assert isinstance(consumer, pulsar.Consumer)
            msg = consumer.receive(timeout_millis=20_000)
            consumer.acknowledge(msg)
        out.append(msg)
    return out


def _kafka_publish_times(bootstrap: str, topic: TopicName) -> list[int]:
    """The Kafka timestamp (the publish time) of each record of partition 0, in order."""
    consumer = KafkaTransport(KafkaConfig(bootstrap)).consumer()
    try:
        kafka_topic = kafka_topic_of(topic)
        end = consumer.end_offsets(kafka_topic, [0])[0]
        consumer.assign(kafka_topic, {0: 0})
        return [record.timestamp()[1] for record in consume_some(consumer, end)]
    finally:
        consumer.close()


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
def test_every_field_comes_back_to_consumers_and_readers(
    kafka_bootstrap: str, client: pulsar.Client, batched: bool
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(str(topic), "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(str(topic), batching_enabled=batched)
    before = _send_all(producer, batched=batched)
    got = _receive(consumer, len(_SENT))
    _check(got, producer.producer_name(), before)
    reader = client.create_reader(str(topic), pulsar.MessageId.earliest)
    read = _receive(reader, len(_SENT))
    _check(read, producer.producer_name(), before)
    # One publish time for both: the producer's, stored as it sent it (as in Pulsar, where
    # the client sets MessageMetadata.publish_time).
    assert [m.publish_timestamp() for m in read] == [m.publish_timestamp() for m in got]
    # Stored as sent (--entry-format entry, the default): one Kafka record per SEND, whose
    # timestamp is when the sidecar stored it, never before the client published it.
    sends = sorted({m.message_id().entry_id() for m in got})
    assert (len(sends) < len(_SENT)) == batched
    assert _records(kafka_bootstrap, topic) == {0: len(sends)}
    stored = dict(zip(sends, _kafka_publish_times(kafka_bootstrap, topic), strict=True))
    for m in got:
        assert stored[m.message_id().entry_id()] >= m.publish_timestamp()


@pytest.mark.parametrize("compression", [pulsar.CompressionType.NONE, pulsar.CompressionType.LZ4])
def test_a_chunked_message_is_stored_chunk_by_chunk_and_reassembled(
    kafka_bootstrap: str, client: pulsar.Client, compression: pulsar.CompressionType
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(str(topic), "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        str(topic), batching_enabled=False, chunking_enabled=True, compression_type=compression
    )
    large = os.urandom(_LARGE)  # random: LZ4 leaves it over the limit, so it is chunked
    producer.send(large, partition_key="big", properties={"size": str(_LARGE)})
    producer.send(b"after")
    got = _receive(consumer, 2)
    assert got[0].data() == large
    assert got[0].partition_key() == "big"
    assert got[0].properties() == {"size": str(_LARGE)}
    assert got[1].data() == b"after"
    reader = client.create_reader(str(topic), pulsar.MessageId.earliest)
    assert [m.data() for m in _receive(reader, 2)] == [large, b"after"]
    assert _records(kafka_bootstrap, topic) == {0: 3 + 1}  # a record per chunk


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
def test_encrypted_messages_are_stored_as_sent_and_decrypted_by_consumers(
    kafka_bootstrap: str,
    client: pulsar.Client,
    keys: pulsar.CryptoKeyReader,
    batched: bool,
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    consumer = client.subscribe(
        str(topic),
        "sub",
        initial_position=pulsar.InitialPosition.Earliest,
        crypto_key_reader=keys,
    )
    # Without the private key: the payload as stored, with its encryption context.
    opaque = client.subscribe(
        str(topic),
        "opaque",
        initial_position=pulsar.InitialPosition.Earliest,
        crypto_failure_action=pulsar.ConsumerCryptoFailureAction.CONSUME,
    )
    producer = client.create_producer(
        str(topic),
        batching_enabled=batched,
        encryption_key="app-key",
        crypto_key_reader=keys,
        compression_type=pulsar.CompressionType.ZLib,
    )
    bodies = [b"secret %d " % i * 20 for i in range(3)]
    if batched:
        for i, body in enumerate(bodies):
            producer.send_async(body, None, properties={"i": str(i)}, partition_key="k")
        producer.flush()
    else:
        for i, body in enumerate(bodies):
            producer.send(body, properties={"i": str(i)}, partition_key="k")
    got = _receive(consumer, 3)
    assert [m.data() for m in got] == bodies
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(3)]
    reader = client.create_reader(str(topic), pulsar.MessageId.earliest, crypto_key_reader=keys)
    assert [m.data() for m in _receive(reader, 3)] == bodies
    first = opaque.receive(timeout_millis=20_000)
    context = first.encryption_context()
    assert context is not None
    assert [k.key for k in context.keys()] == ["app-key"]
    if batched:
        assert context.batch_size() == 3
    assert context.compression_type() == pulsar.CompressionType.ZLib
    assert context.uncompressed_message_size() > 0
    assert context.param()
    assert first.data() not in bodies  # still encrypted
    # A batch is one record, acknowledged once all its messages are.
    assert _records(kafka_bootstrap, topic) == {0: 1 if batched else 3}
    consumer.close()
    again = client.subscribe(str(topic), "sub", crypto_key_reader=keys)
    with pytest.raises(pulsar.Timeout):
        again.receive(timeout_millis=2_000)


@pytest.mark.parametrize("entry_format", ["entry", "message"])
def test_a_partial_ack_of_an_encrypted_batch_loses_none_of_it(
    kafka_bootstrap: str,
    keys: pulsar.CryptoKeyReader,
    request: pytest.FixtureRequest,
    entry_format: str,
) -> None:
    """A consumer with batch-index acknowledgements acks one message of an encrypted batch.
    Stored as sent (``entry``, the default), the sidecar keeps the acknowledged index, as
    Pulsar does: after a reconnect the other two come again, marked as redelivered. In the
    ``message`` layout the encrypted batch is one record the sidecar cannot split: it stays
    unacknowledged until all of it is, so the whole batch comes again. Either way none of
    it is lost."""
    sidecar = request.getfixturevalue("sidecar" if entry_format == "entry" else "message_sidecar")
    client = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        topic = make_topic(kafka_bootstrap, 1)
        consumer = client.subscribe(
            str(topic),
            "sub",
            initial_position=pulsar.InitialPosition.Earliest,
            crypto_key_reader=keys,
            batch_index_ack_enabled=True,
        )
        producer = client.create_producer(
            str(topic), batching_enabled=True, encryption_key="app-key", crypto_key_reader=keys
        )
        bodies = [b"part %d" % i for i in range(3)]
        for body in bodies:
            producer.send_async(body, None)
        producer.flush()
        first = consumer.receive(timeout_millis=20_000)
        assert first.data() == bodies[0]
        consumer.acknowledge(first)
        consumer.close()  # flushes the pending acknowledgement
        again = client.subscribe(
            str(topic), "sub", crypto_key_reader=keys, batch_index_ack_enabled=True
        )
        expected = bodies[1:] if entry_format == "entry" else bodies
        got = [again.receive(timeout_millis=20_000) for _ in expected]
        assert [m.data() for m in got] == expected
        assert all(m.redelivery_count() >= 1 for m in got)
        for m in got:  # all of it now: the entry is acknowledged
            again.acknowledge(m)
        again.close()
        last = client.subscribe(str(topic), "sub", crypto_key_reader=keys)
        with pytest.raises(pulsar.Timeout):
            last.receive(timeout_millis=2_000)
    finally:
        client.close()


def test_fields_survive_a_sidecar_restart(
    kafka_bootstrap: str, tmp_path: Path, keys: pulsar.CryptoKeyReader
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    with BinarySidecar(kafka_bootstrap, tmp_path / "first") as first:
        c = pulsar.Client(first.broker_url, operation_timeout_seconds=20)
        try:
            producer = c.create_producer(str(topic), batching_enabled=True)
            before = _send_all(producer, batched=True)
            name = producer.producer_name()
            chunked = c.create_producer(str(topic), batching_enabled=False, chunking_enabled=True)
            large = os.urandom(_LARGE)
            chunked.send(large)
            encrypted = c.create_producer(
                str(topic), encryption_key="app-key", crypto_key_reader=keys
            )
            encrypted.send(b"sealed", ordering_key="o")
        finally:
            c.close()
    with BinarySidecar(kafka_bootstrap, tmp_path / "second") as second:
        c = pulsar.Client(second.broker_url, operation_timeout_seconds=20)
        try:
            reader = c.create_reader(str(topic), pulsar.MessageId.earliest, crypto_key_reader=keys)
            got = _receive(reader, len(_SENT) + 2)
            _check(got[: len(_SENT)], name, before)
            assert got[-2].data() == large
            assert (got[-1].data(), got[-1].ordering_key()) == (b"sealed", "o")
        finally:
            c.close()
