"""One contract for the transport seam, run against the in-memory twin and real Kafka."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sync import ProducerFencedError, TopicConfigurationMismatch
from sync.routing import kafka_partition
from sync.transport import (
    OFFSET_BEGINNING,
    BatchReport,
    DeliveryReport,
    Record,
    TopicSpec,
    Transport,
)

COMPACT = {"cleanup.policy": "compact"}


Row = tuple[int | None, int | None, bytes | None, bytes | None]


def _drain(
    transport: Transport, topic: str, partitions: int, *, committed: bool = True
) -> list[Row]:
    consumer = transport.consumer(read_committed=committed)
    consumer.assign(topic, dict.fromkeys(range(partitions), OFFSET_BEGINNING))
    ends = consumer.end_offsets(topic, list(range(partitions)))
    out: list[Row] = []
    for _ in range(100):
        out.extend(
            (m.partition(), m.offset(), m.key(), m.value()) for m in consumer.consume(500, 0.2)
        )
        pos = consumer.positions(topic, list(range(partitions)))
        if all(pos[p] >= ends[p] for p in range(partitions)):
            break
    consumer.close()
    return out


def test_ensure_topic_creates_then_accepts_then_refuses_mismatch(
    transport: Transport, unique_name: Callable[[str], str]
) -> None:
    admin = transport.admin()
    name = unique_name("contract")
    spec = TopicSpec(name, 3, config=COMPACT, required_config=COMPACT)
    desc = admin.ensure_topic(spec)
    assert desc.partitions == 3 and desc.config["cleanup.policy"] == "compact"
    assert admin.ensure_topic(spec).topic_id == desc.topic_id
    plain = unique_name("plain")
    admin.ensure_topic(TopicSpec(plain, 1))
    with pytest.raises(TopicConfigurationMismatch) as info:
        admin.ensure_topic(TopicSpec(plain, 1, config=COMPACT, required_config=COMPACT))
    assert "cleanup.policy" in str(info.value) and "compact" in str(info.value)
    with pytest.raises(TopicConfigurationMismatch, match="partitions"):
        admin.ensure_topic(TopicSpec(name, 5, required_config=COMPACT))


def test_round_trip_keys_partitioned_like_kafka_and_tombstones(
    transport: Transport, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("rt")
    transport.admin().ensure_topic(TopicSpec(name, 4, config=COMPACT))
    producer = transport.producer()
    reports: list[DeliveryReport] = []
    keys = [f"key-{i}".encode() for i in range(20)]
    for k in keys:
        producer.produce(name, k, b"v-" + k, on_delivery=reports.append)
    producer.produce(name, keys[0], None, on_delivery=reports.append)
    assert producer.flush(10) == 0
    assert len(reports) == 21 and not any(r.error for r in reports)
    for r in reports:
        assert r.key is not None
        assert r.partition == kafka_partition(r.key, 4) == producer.partition_for(name, r.key)
    got = _drain(transport, name, 4)
    assert {(k, v) for _, _, k, v in got} == {(k, b"v-" + k) for k in keys} | {(keys[0], None)}


def test_transactions_visibility_and_fencing(
    transport: Transport, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("txn")
    transport.admin().ensure_topic(TopicSpec(name, 1))
    tid = unique_name("tid")
    first = transport.producer(transactional_id=tid)
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(name, b"k", b"aborted")
    first.abort_transaction(30)
    first.begin_transaction()
    first.produce(name, b"k", b"committed")
    first.commit_transaction(30)
    first.begin_transaction()
    first.produce(name, b"k", b"open")
    first.flush(10)
    # A read-committed reader stops at the last stable offset: before the open transaction.
    assert [v for *_, v in _drain(transport, name, 1)] == [b"committed"]
    assert b"open" in [v for *_, v in _drain(transport, name, 1, committed=False)]
    second = transport.producer(transactional_id=tid)
    second.init_transactions(30)  # fences `first` and aborts its open transaction
    with pytest.raises(ProducerFencedError):
        first.produce(name, b"k", b"zombie")
        first.commit_transaction(30)
    second.begin_transaction()
    second.produce(name, b"k", b"second")
    second.commit_transaction(30)
    assert [v for *_, v in _drain(transport, name, 1)] == [b"committed", b"second"]


def test_produce_many_stores_in_order_and_answers_once(
    transport: Transport, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("many")
    transport.admin().ensure_topic(TopicSpec(name, 3))
    producer = transport.producer()
    producer.produce(name, None, b"before", partition=2)
    assert producer.flush(10) == 0
    reports: list[BatchReport] = []
    records: list[Record] = [
        (2, None, b"a", [("h", b"1")]),
        (1, b"k", b"b", None),
        (2, None, b"c", [("h", b"2"), ("__pulsar.sequence", b"7")]),
    ]
    producer.produce_many(name, records, reports.append)
    assert producer.flush(10) == 0
    # One answer for the three: the lowest (partition, offset) stored, no error.
    assert reports == [BatchReport(name, 3, 1, 0)]
    consumer = transport.consumer()
    consumer.assign(name, dict.fromkeys(range(3), OFFSET_BEGINNING))
    got: list[tuple[int | None, int | None, bytes | None, object]] = []
    for _ in range(50):
        got.extend(
            (m.partition(), m.offset(), m.value(), m.headers()) for m in consumer.consume(500, 0.2)
        )
        if len(got) >= 4:
            break
    consumer.close()
    assert sorted(got, key=lambda r: (r[0] or 0, r[1] or 0)) == [
        (1, 0, b"b", None),
        (2, 0, b"before", None),
        (2, 1, b"a", [("h", b"1")]),
        (2, 2, b"c", [("h", b"2"), ("__pulsar.sequence", b"7")]),
    ]
    with pytest.raises(ValueError, match="at least one record"):
        producer.produce_many(name, [], reports.append)
