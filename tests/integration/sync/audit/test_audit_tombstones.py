"""Deletes are tombstones with no body: the writer carries their event metadata as headers.

Proven on the in-memory twin and on a real broker (the ``transport`` fixture), reading
the records back with a plain consumer. How the audit turns the headers into the
``author`` of DELETE rows is checked in ``test_audit.py`` against a real Spark.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from sync import CacheConfig, PolicyService, PolicyTarget, ServiceConfig, WriterConfig
from sync._constants import (
    HEADER_AUTHOR,
    HEADER_EVENT_ID,
    HEADER_ORIGIN,
    HEADER_TIMESTAMP,
    TOMBSTONE_METADATA_HEADERS,
)
from sync.transport import OFFSET_BEGINNING, Transport


def _records(transport: Transport, topic: str, partitions: int, count: int) -> list[Any]:
    """The first ``count`` committed records (a transaction marker ends the log, and a
    consumer's position need not pass it: wait for the records, not for the end offset)."""
    consumer = transport.consumer(read_committed=True)
    consumer.assign(topic, dict.fromkeys(range(partitions), OFFSET_BEGINNING))
    out: list[Any] = []
    deadline = time.monotonic() + 30
    while len(out) < count:
        assert time.monotonic() < deadline, f"read {len(out)} of {count} records back"
        out.extend(consumer.consume(500, 0.2))
    consumer.close()
    return out


def test_tombstones_carry_author_event_id_time_and_origin(transport: Transport) -> None:
    topic = f"tomb-{uuid.uuid4().hex[:10]}"
    config = ServiceConfig(
        cache=CacheConfig(topic=topic, partitions=2, dead_letter=False),
        writer=WriterConfig(author="dora", origin="test-origin"),
    )
    one, two, three = (PolicyTarget.parse(f"persistent://acme/tomb/t{i}") for i in range(3))
    started_ms = int(time.time() * 1000)
    with PolicyService(transport, config).start() as svc:
        for target in (one, two, three):
            svc.set(target, {"maxConsumerPerTopic": 4})
        single = svc.delete(one)  # one record: the path with delivery reports
        # Two deletes in one transaction: the bulk path (no per-record reports).
        bulk = svc.set_many([(t, {"maxConsumerPerTopic": None}) for t in (two, three)])
        assert svc.get(one) is None and svc.get(two) is None and svc.get(three) is None
    finished_ms = int(time.time() * 1000)
    assert single.action == "DELETE" and [r.action for r in bulk] == ["DELETE", "DELETE"]

    records = _records(transport, topic, 2, 6)  # 3 sets, 3 deletes
    tombstones = [m for m in records if m.value() is None]
    assert sorted(m.key() for m in tombstones) == sorted(t.key_bytes for t in (one, two, three))
    event_ids = set()
    for message in tombstones:
        headers = message.headers() or []
        assert [name for name, _ in headers] == list(TOMBSTONE_METADATA_HEADERS)
        values = {name: value.decode() for name, value in headers}
        assert values[HEADER_AUTHOR] == "dora"
        assert values[HEADER_ORIGIN] == "test-origin"
        assert started_ms <= int(values[HEADER_TIMESTAMP]) <= finished_ms
        assert uuid.UUID(values[HEADER_EVENT_ID]).version == 4
        event_ids.add(values[HEADER_EVENT_ID])
    assert len(event_ids) == 3
    # Events with a body keep their metadata in it; they carry none of these headers.
    for message in records:
        if message.value() is not None:
            names = {name for name, _ in message.headers() or []}
            assert not names & set(TOMBSTONE_METADATA_HEADERS)
