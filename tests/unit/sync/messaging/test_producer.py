"""sync.messaging._producer on the in-memory twin: routing, message ids, headers, refusals."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

import pytest

from sync._constants import HEADER_PRODUCER, HEADER_SEQUENCE
from sync._errors import (
    ConfigurationError,
    DeliveryError,
    InvalidInputError,
    InvalidMessageIdError,
    MessageTooLargeError,
    TopicNotFoundError,
)
from sync.messaging._message_id import MAX_BATCH_SIZE
from sync.messaging._producer import (
    MessageId,
    OutboundMessage,
    PartitionedProducer,
    ProducerClient,
    ProducerConfig,
    decode_properties,
    encode_headers,
)
from sync.naming._kafka_names import kafka_topic_of
from sync.naming._names import TopicName
from sync.routing import RoutingError, java_string_hash, murmur3_32_hash
from sync.transport import BatchCallback, BatchReport, MemoryTransport, Record, TopicSpec


def _topic(transport: MemoryTransport, name: str, partitions: int) -> TopicName:
    topic = TopicName.parse(f"persistent://t/ns/{name}")
    transport.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), partitions))
    return topic


@pytest.fixture
def transport() -> MemoryTransport:
    return MemoryTransport()


# ------------------------------------------------------------------ message ids


def test_message_id_is_a_pulsar_message_id_data_protobuf() -> None:
    # ledgerId=0 (08 00), entryId=300 (10 ac 02), partition=3 (18 03)
    assert MessageId(3, 300).to_bytes() == bytes.fromhex("0800" + "10ac02" + "1803")
    # partition -1 is an int32: ten-byte two's complement varint, as protobuf-java writes it
    assert MessageId(-1, 0).to_bytes() == bytes.fromhex("0800" + "1000" + "18" + "ff" * 9 + "01")
    for mid in (MessageId(0, 0), MessageId(-1, 2**40), MessageId(7, 2**63 - 1)):
        assert MessageId.from_bytes(mid.to_bytes()) == mid
        assert MessageId.from_base64(mid.to_base64()) == mid
    assert str(MessageId(2, 5)) == "0:5:2"


def test_message_id_parses_fields_in_any_order_and_skips_unknown_ones() -> None:
    # partition first, then an unknown length-delimited field 9, then entry and ledger ids
    data = bytes.fromhex("1802" + "4a03616263" + "1005" + "0800")
    assert MessageId.from_bytes(data) == MessageId(2, 5)


@pytest.mark.parametrize(
    "text",
    ["not base64!", base64.b64encode(b"\x08\x01\x10\x05").decode(), "", "CAAQ"],
)
def test_message_id_refuses_foreign_or_broken_ids(text: str) -> None:
    with pytest.raises(InvalidMessageIdError):
        MessageId.from_base64(text)


def test_message_id_orders_by_partition_then_offset() -> None:
    assert sorted([MessageId(1, 0), MessageId(0, 9), MessageId(0, 2)]) == [
        MessageId(0, 2),
        MessageId(0, 9),
        MessageId(1, 0),
    ]
    assert MessageId(-1, 4).kafka_partition == 0


# ------------------------------------------------------------------ headers


def test_properties_round_trip_through_headers_with_event_time() -> None:
    headers = encode_headers({"a": "1", "ü": "ß"}, event_time_ms=1234)
    assert headers == [("a", b"1"), ("ü", "ß".encode()), ("__pulsar.eventTime", b"1234")]
    assert decode_properties(headers) == ({"a": "1", "ü": "ß"}, 1234)
    assert encode_headers(None) is None
    assert decode_properties(None) == ({}, None)


@pytest.mark.parametrize("props", [{"__pulsar.x": "1"}, {"": "1"}, {"a": 1}])
def test_reserved_empty_or_non_string_properties_are_refused(props: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        encode_headers(props)  # type: ignore[arg-type]


# ------------------------------------------------------------------ producer


def test_keyed_messages_land_where_pulsar_routes_them(transport: MemoryTransport) -> None:
    topic = _topic(transport, "keyed", 7)
    keys = [f"key-{i}" for i in range(50)] + ["ü-ключ", "🙂"]
    for scheme, fn in (("JavaStringHash", java_string_hash), ("Murmur3_32Hash", murmur3_32_hash)):
        config = ProducerConfig(hashing_scheme=scheme)
        with PartitionedProducer.open(transport, topic, config) as producer:
            for key in keys:
                mid = producer.send(key.encode(), key=key)
                assert mid.partition == fn(key) % 7
    records = transport.broker.records(kafka_topic_of(topic))
    assert all(k is not None for _p, _o, k, _v in records)


def test_unkeyed_round_robin_without_batching_visits_every_partition(
    transport: MemoryTransport,
) -> None:
    topic = _topic(transport, "rr", 4)
    config = ProducerConfig(routing_mode="RoundRobinPartition", batching_enabled=False)
    with PartitionedProducer.open(transport, topic, config) as producer:
        parts = [producer.send(b"x").partition for _ in range(8)]
    assert sorted(parts[:4]) == [0, 1, 2, 3] and parts[:4] == parts[4:]


def test_single_partition_mode_keeps_unkeyed_messages_on_one_partition(
    transport: MemoryTransport,
) -> None:
    topic = _topic(transport, "single", 5)
    with PartitionedProducer.open(
        transport, topic, ProducerConfig(routing_mode="SinglePartition")
    ) as producer:
        assert len({producer.send(b"x").partition for _ in range(20)}) == 1


def test_offsets_in_message_ids_match_the_kafka_log(transport: MemoryTransport) -> None:
    topic = _topic(transport, "ids", 2)
    with PartitionedProducer.open(transport, topic) as producer:
        ids = [producer.send(f"v{i}".encode(), key="same") for i in range(5)]
    assert [m.offset for m in ids] == [0, 1, 2, 3, 4]
    stored = {(p, o): v for p, o, _k, v in transport.broker.records(kafka_topic_of(topic))}
    assert [stored[(m.partition, m.offset)] for m in ids] == [f"v{i}".encode() for i in range(5)]


def test_non_partitioned_topic_ids_carry_partition_minus_one(transport: MemoryTransport) -> None:
    topic = _topic(transport, "plain", 1)
    with PartitionedProducer.open(transport, topic) as producer:
        assert not producer.partitioned
        assert producer.send(b"x", key="k") == MessageId(-1, 0)


def test_a_partition_topic_writes_only_there(transport: MemoryTransport) -> None:
    base = _topic(transport, "parted", 3)
    with PartitionedProducer.open(transport, base.partition(2)) as producer:
        ids = [producer.send(b"x", key=f"k{i}") for i in range(10)]
    assert {m.partition for m in ids} == {2}
    with pytest.raises(TopicNotFoundError):
        PartitionedProducer.open(transport, base.partition(3))


def test_nothing_is_created_for_a_missing_topic(transport: MemoryTransport) -> None:
    with pytest.raises(TopicNotFoundError, match="does not exist"):
        PartitionedProducer.open(transport, "persistent://t/ns/missing")
    assert transport.admin().describe_topic(kafka_topic_of(TopicName.parse("t/ns/missing"))) is None


def test_message_size_limit_and_properties_are_enforced_before_kafka(
    transport: MemoryTransport,
) -> None:
    topic = _topic(transport, "limits", 1)
    with PartitionedProducer.open(transport, topic, ProducerConfig(max_message_size=10)) as p:
        assert p.send(b"0123456789").offset == 0
        with pytest.raises(MessageTooLargeError) as info:
            p.send(b"01234567890")
        assert (info.value.size, info.value.limit) == (11, 10)
        with pytest.raises(MessageTooLargeError):
            p.send_callback(b"abc", lambda *_: None, max_message_size=2)
        with pytest.raises(InvalidInputError):
            p.send(b"x", properties={"__pulsar.eventTime": "1"})
    assert len(transport.broker.records(kafka_topic_of(topic))) == 1


def test_custom_router_out_of_range_is_an_error(transport: MemoryTransport) -> None:
    topic = _topic(transport, "custom", 2)
    config = ProducerConfig(routing_mode="CustomPartition", custom_router=lambda _m, _md: 2)
    with PartitionedProducer.open(transport, topic, config) as producer:
        with pytest.raises(RoutingError):
            producer.send(b"x", key="k")


def test_send_async_and_callbacks_share_one_client(transport: MemoryTransport) -> None:
    a = _topic(transport, "a", 2)
    b = _topic(transport, "b", 3)
    client = ProducerClient(transport)
    try:
        pa = PartitionedProducer(client, a)
        pb = PartitionedProducer(client, b)
        futures = [pa.send_async(b"x", key="k"), pb.send_async(b"y", properties={"p": "v"})]
        results: list[MessageId | None] = []
        pb.send_callback(b"z", lambda mid, err: results.append(mid), key="q")
        assert client.flush(5) == 0
        assert all(isinstance(f.result(5), MessageId) for f in futures)
        pa.close()
        assert pb.send(b"still open").offset >= 0
        assert len(results) == 1 and results[0] is not None
    finally:
        client.close()


def test_delivery_failure_becomes_a_delivery_error(
    transport: MemoryTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = _topic(transport, "fail", 1)
    errors: list[Exception | None] = []
    with PartitionedProducer.open(transport, topic) as producer:
        client = producer._client
        real: Callable[..., None] = client.produce

        def failing(topic_: str, key: object, value: object, partition: int, headers: object,
                    on_delivery: Callable[..., None]) -> None:  # fmt: skip
            from sync.transport import DeliveryReport

            on_delivery(DeliveryReport(topic_, partition, -1, "Broker: Message size too large"))

        monkeypatch.setattr(client, "produce", failing)
        producer.send_callback(b"x", lambda _mid, err: errors.append(err))
        monkeypatch.setattr(client, "produce", real)
    assert isinstance(errors[0], DeliveryError) and "too large" in str(errors[0])


def test_a_client_without_report_thread_answers_only_when_its_owner_polls(
    transport: MemoryTransport,
) -> None:
    topic = _topic(transport, "polled", 2)
    client = ProducerClient(transport, serve_reports=False)
    try:
        producer = PartitionedProducer(client, topic)
        got: list[MessageId | None] = []
        for i in range(3):
            producer.send_callback(f"m{i}".encode(), lambda mid, err: got.append(mid), key="k")
        time.sleep(0.2)  # no thread would have served them meanwhile
        assert got == [] and client.in_flight == 3
        assert client.poll(0) == 3
        assert client.in_flight == 0
        assert [m.offset for m in got if m is not None] == [0, 1, 2]
    finally:
        client.close()


def test_records_beyond_hold_at_wait_here_in_order_and_go_together_on_an_answer(
    transport: MemoryTransport,
) -> None:
    """``hold_at`` (librdkafka's idempotent in-flight window): Kafka gets at most that
    many unanswered records of a partition; the rest wait here, in order, counted in
    flight, and go to Kafka all at once when an answer brings the partition below it.
    Another partition is not held back by a full one."""
    held, free = _topic(transport, "held", 1), _topic(transport, "free", 1)
    admin = transport.admin()
    client = ProducerClient(transport, serve_reports=False, hold_at=2)
    try:
        producer = PartitionedProducer(client, held)
        other = PartitionedProducer(client, free)
        got: list[tuple[str, int]] = []

        def answer(name: str) -> Callable[[MessageId | None, object], None]:
            return lambda mid, err: got.append((name, -1 if mid is None else mid.offset))

        for i in range(5):
            producer.send_callback(f"m{i}".encode(), answer(f"m{i}"))
        other.send_callback(b"o", answer("o"))
        # m2..m4 wait here; the other partition is not held back by this one.
        assert admin.list_offsets(kafka_topic_of(held), [0], "latest") == {0: 2}
        assert admin.list_offsets(kafka_topic_of(free), [0], "latest") == {0: 1}
        assert client.in_flight == 6
        client.poll(0)  # m0, m1 and o answered: m2..m4 are queued, all three at once
        assert admin.list_offsets(kafka_topic_of(held), [0], "latest") == {0: 5}
        assert client.in_flight == 3
        assert client.flush(5.0) == 0 and client.in_flight == 0
        assert got == [("m0", 0), ("m1", 1), ("o", 0), ("m2", 2), ("m3", 3), ("m4", 4)]
    finally:
        client.close()


def test_hold_at_needs_owner_served_reports(transport: MemoryTransport) -> None:
    with pytest.raises(ConfigurationError):
        ProducerClient(transport, hold_at=5)


def test_a_batch_message_id_reads_back_as_its_entry_index_and_size() -> None:
    entry = MessageId(2, 41)
    text = entry.batch_base64(3, 5)
    assert MessageId.batch_from_base64(text) == (entry, 3, 5)
    assert MessageId.from_base64(text) == entry  # the entry itself
    assert MessageId.batch_from_base64(entry.to_base64()) is None  # a whole record
    for index, size in ((5, 5), (0, MAX_BATCH_SIZE + 1)):
        with pytest.raises(InvalidMessageIdError):
            MessageId.batch_from_base64(entry.batch_base64(index, size))


def test_message_id_base64_matches_the_protobuf_bytes() -> None:
    for mid in (MessageId(-1, 0), MessageId(3, 127), MessageId(0x7FFFFFFF, (1 << 63) - 1)):
        assert base64.b64decode(mid.to_base64(), validate=True) == mid.to_bytes()
        assert MessageId.from_base64(mid.to_base64()) == mid


# ------------------------------------------------------------------ batches


def _stored(transport: MemoryTransport, topic: TopicName) -> list[tuple[object, ...]]:
    consumer = transport.consumer()
    kafka_topic = kafka_topic_of(topic)
    count = transport.admin().describe_topic(kafka_topic)
    assert count is not None
    consumer.assign(kafka_topic, dict.fromkeys(range(count.partitions), 0))
    rows = [(m.partition(), m.offset(), m.key(), m.value(), m.headers())
            for m in consumer.consume(1000, 0.1)]  # fmt: skip
    consumer.close()
    return sorted(rows, key=lambda r: (r[0], r[1]))


BATCH = [
    OutboundMessage(b"a", None, None, None, 10),
    OutboundMessage(b"b", "k", {"p": "v"}, 1234, 11),
    OutboundMessage(b"c", None, {}, None, 12),
]


def test_send_batch_stores_what_send_callback_stores_and_answers_once(
    transport: MemoryTransport,
) -> None:
    one, many = _topic(transport, "one-by-one", 1), _topic(transport, "batched", 1)
    origin = (HEADER_PRODUCER, b"prod-1")
    shared = [("__pulsar.deliverAt", b"99")]
    client = ProducerClient(transport, serve_reports=False)
    try:
        single = PartitionedProducer(client, one)
        for m in BATCH:
            assert m.sequence_id is not None
            single.send_callback(
                m.payload, lambda *_: None, key=m.key, properties=m.properties,
                event_time_ms=m.event_time_ms,
                reserved_headers=[*shared, origin, (HEADER_SEQUENCE, str(m.sequence_id).encode())],
            )  # fmt: skip
        answers: list[tuple[MessageId | None, object]] = []
        batched = PartitionedProducer(client, many)
        routed = batched.send_batch(
            BATCH, lambda mid, err: answers.append((mid, err)),
            reserved_headers=shared, origin=origin,
        )  # fmt: skip
        assert routed == 0  # one partition: routed once for the whole batch
        assert answers == [] and client.in_flight == 6
        client.poll(0)
        assert client.in_flight == 0
        assert answers == [(MessageId(-1, 0), None)]  # once, with the batch's first id
    finally:
        client.close()
    assert _stored(transport, many) == _stored(transport, one)
    assert len(_stored(transport, many)) == 3


def test_send_batch_refuses_the_whole_batch_before_queuing_any(
    transport: MemoryTransport,
) -> None:
    topic = _topic(transport, "whole", 1)
    answers: list[object] = []
    with PartitionedProducer.open(transport, topic, ProducerConfig(max_message_size=5)) as p:
        too_large = [*BATCH, OutboundMessage(b"123456")]
        with pytest.raises(MessageTooLargeError):
            p.send_batch(too_large, lambda *a: answers.append(a))
        reserved = [*BATCH, OutboundMessage(b"x", properties={"__pulsar.x": "1"})]
        with pytest.raises(InvalidInputError):
            p.send_batch(reserved, lambda *a: answers.append(a))
        p.flush(5)
    assert answers == []
    assert transport.broker.records(kafka_topic_of(topic)) == []


def test_send_batch_routes_each_message_on_a_partitioned_base_topic(
    transport: MemoryTransport,
) -> None:
    topic = _topic(transport, "spread", 4)
    keys = [f"key-{i}" for i in range(12)]
    config = ProducerConfig(batching_enabled=False)
    answers: list[tuple[MessageId | None, object]] = []
    with PartitionedProducer.open(transport, topic, config) as p:
        expected = [p.choose_partition(k) for k in keys]  # keyed routing keeps no state
        routed = p.send_batch(
            [OutboundMessage(k.encode(), k) for k in keys],
            lambda mid, err: answers.append((mid, err)),
        )
        p.flush(5)
    assert routed == expected and len(set(expected)) > 1
    rows = _stored(transport, topic)
    stored = {(r[0], r[3]) for r in rows}
    assert stored == {(p_, k.encode()) for p_, k in zip(expected, keys, strict=True)}
    assert answers == [(MessageId(min(expected), 0), None)]


def test_send_batch_reports_the_first_delivery_error_once(
    transport: MemoryTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = _topic(transport, "batch-fail", 1)
    answers: list[tuple[MessageId | None, object]] = []
    with PartitionedProducer.open(transport, topic) as producer:
        kafka = producer._client._producer

        def failing(topic_: str, records: list[Record], on_done: BatchCallback) -> None:
            on_done(BatchReport(topic_, len(records), 0, 3, "Broker: Message size too large", 0))

        monkeypatch.setattr(kafka, "produce_many", failing)
        producer.send_batch(BATCH, lambda mid, err: answers.append((mid, err)))
    [(mid, err)] = answers
    assert mid is None and isinstance(err, DeliveryError) and "too large" in str(err)
