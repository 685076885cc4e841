"""MirrorMaker 2 as geoctl configures it, on real Kafka: each cluster's global topic reaches
the other as ``<origin>.policy-sync-global-events`` with key, value, headers and partition,
committed records only; ``__change_events`` never crosses."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sync.constants import CHANGE_EVENTS_TOPIC, GLOBAL_EVENTS_TOPIC
from tests.support.waits import wait_for


def _transactions(bootstrap: str, tag: str) -> None:
    """Committed ``first``, aborted ``aborted``, committed ``last``: one key, partition 1."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"geo-{tag}"})
    producer.init_transactions()
    for value, commit in (("first", True), ("aborted", False), ("last", True)):
        producer.begin_transaction()
        producer.produce(
            GLOBAL_EVENTS_TOPIC,
            key=tag.encode(),
            value=f"{value}-{tag}".encode(),
            partition=1,
            headers=[("policy-sync.cluster", tag.encode())],
        )
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()


def _mirrored(bootstrap: str, topic: str, tag: str) -> list[tuple[int, bytes | None, Any]]:
    """Every record of ``tag`` in ``topic`` (uncommitted ones too: read_uncommitted), once the
    ``last`` one has arrived."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"geo-check-{tag}",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    seen: list[tuple[int, bytes | None, Any]] = []

    def arrived() -> bool:
        message = consumer.poll(0.2)
        if message is not None and not message.error() and message.key() == tag.encode():
            seen.append((int(message.partition() or 0), message.value(), message.headers()))
        return any(v == f"last-{tag}".encode() for _, v, _ in seen)

    try:
        wait_for(arrived, f"{tag}'s last record in {topic} at {bootstrap}", timeout_s=60)
    finally:
        consumer.close()
    return seen


def test_committed_records_cross_both_ways_and_aborted_ones_never(geo: dict[str, Any]) -> None:
    for origin, peer in (("east", "west"), ("west", "east")):
        tag = f"{origin}-{uuid.uuid4().hex[:8]}"
        _transactions(geo[origin]["bootstrap"], tag)
        seen = _mirrored(geo[peer]["bootstrap"], f"{origin}.{GLOBAL_EVENTS_TOPIC}", tag)
        header = [("policy-sync.cluster", tag.encode())]
        assert seen == [
            (1, f"first-{tag}".encode(), header),
            (1, f"last-{tag}".encode(), header),
        ]


def test_only_the_global_topic_and_its_mirror_exist_across(geo: dict[str, Any]) -> None:
    for name, peer in (("east", "west"), ("west", "east")):
        topics = set(
            AdminClient({"bootstrap.servers": geo[name]["bootstrap"]})
            .list_topics(timeout=30)
            .topics
        )
        assert {GLOBAL_EVENTS_TOPIC, f"{peer}.{GLOBAL_EVENTS_TOPIC}"} <= topics
        assert CHANGE_EVENTS_TOPIC in topics  # the sidecars run
        assert not {
            t for t in topics if t.startswith(f"{peer}.") and t != f"{peer}.{GLOBAL_EVENTS_TOPIC}"
        }
        assert len(geo[name]["sidecars"]) == 2
