"""Every compacted table (policies, registry/metadata, ownership) reads through the one
reader with the one quarantine: an unreadable record makes its key absent, live and in a
fresh replay alike, is counted once per reader and copied once to the dead-letter topic.
Run on the in-memory twin and on real Kafka."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sync import CacheConfig, Codec, PolicyCache
from sync.cluster._metadata import MetadataStore, registry_spec
from sync.cluster._ownership_table import OwnershipTable
from sync.cluster._records import BundleState, OwnershipRecord
from sync.table import TableReader, TableState
from sync.transport import Transport
from tests.support.waits import wait_for

CODEC = Codec()
BUNDLE = "public/default/0x00000000_0xffffffff"


def _ownership(broker: str, version: int) -> bytes:
    record = OwnershipRecord(BUNDLE, BundleState.OWNED, broker, "inc", version, 1, 0, 0, "test")
    return record.to_json()


def _policy(n: int) -> bytes:
    return CODEC.encode(
        {
            "eventType": "TOPIC_POLICY",
            "actionType": "UPDATE",
            "topicPoliciesEvent": {
                "domain": "persistent",
                "tenant": "acme",
                "namespace": "ops",
                "topic": "orders",
                "policies": {"maxConsumerPerTopic": n},
            },
        }
    )


@dataclass(frozen=True)
class Kind:
    """One table kind: how to open a reader on a topic, and records for one key."""

    open: Callable[[Transport, str], tuple[Any, TableReader]]
    get: Callable[[Any, str], Any]
    key: str
    good: Callable[[int], bytes]
    bad: bytes


def _open_metadata(transport: Transport, name: str) -> tuple[Any, TableReader]:
    store = MetadataStore(transport, registry_spec(topic=name)).start()
    store.wait_ready(60)
    return store, store.table


def _open_ownership(transport: Transport, name: str) -> tuple[Any, TableReader]:
    table = OwnershipTable(transport, name, 4)
    table.table.start().wait_ready(60)
    return table, table.table


def _open_policies(transport: Transport, name: str) -> tuple[Any, TableReader]:
    cache = PolicyCache(transport, config=CacheConfig(topic=name)).start()
    cache.wait_ready(60)
    return cache, cache


KINDS = {
    "registry": Kind(
        _open_metadata,
        lambda s, k: s.table.get(k),
        "kv/acme%2Fops/a",
        lambda n: f"value-{n}".encode(),
        b"\xff\xfe not UTF-8",
    ),
    "ownership": Kind(
        _open_ownership,
        lambda t, k: t.table.get(k),
        BUNDLE,
        lambda n: _ownership(f"b{n}", n),
        b'{"bundle": "x"}',
    ),
    "policies": Kind(
        _open_policies,
        lambda c, k: dict(c.raw_items()).get(k.encode()),
        "persistent://acme/ops/orders",
        _policy,
        # the truncated record of issue #11: a body cut after the namespace string
        CODEC.header + bytes.fromhex("0004021470657273697374656e740861636d65066f7073"),
    ),
}


@pytest.fixture
def opened(transport: Transport) -> Iterator[list[TableReader]]:
    readers: list[TableReader] = []
    yield readers
    for reader in readers:
        reader.close()


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_an_unreadable_record_makes_its_key_absent_live_and_replayed(
    transport: Transport,
    unique_name: Callable[[str], str],
    opened: list[TableReader],
    kind_name: str,
) -> None:
    kind = KINDS[kind_name]
    name = unique_name("tbl")

    def open_one() -> Any:
        owner, reader = kind.open(transport, name)
        opened.append(reader)
        return owner, reader

    live, live_reader = open_one()
    topic = live_reader.spec.name
    producer = transport.producer()

    def write(value: bytes | None) -> None:
        producer.produce(topic, kind.key.encode(), value)
        assert producer.flush(30) == 0
        live_reader.sync_written(30)

    write(kind.good(1))
    assert kind.get(live, kind.key) is not None
    write(kind.bad)
    # The rule: the last record of the key is unreadable, so the key holds nothing.
    assert kind.get(live, kind.key) is None
    wait_for(
        lambda: live_reader.quarantine.total == 1,
        "the live reader quarantining the record",
        timeout_s=30,
    )
    fresh, fresh_reader = open_one()  # a fresh replay meets the same record
    assert fresh_reader.state is TableState.READY
    assert kind.get(fresh, kind.key) is None
    wait_for(
        lambda: fresh_reader.quarantine.total == 1,
        "the fresh replay quarantining the record",
        timeout_s=30,
    )
    for reader in (live_reader, fresh_reader):
        assert dict(reader.quarantine.counts) == {"undecodable": 1}
    # A good record after the poison applies everywhere.
    write(kind.good(2))
    fresh_reader.sync_written(30)
    assert kind.get(live, kind.key) == kind.get(fresh, kind.key) is not None
    # Copied to the dead-letter topic once, though two readers met it.
    dlq = transport.consumer()
    dlq.assign(topic + ".dlq", {0: 0})
    copies: list[Any] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        copies.extend(dlq.consume(10, 0.3))
        if (
            copies
            and dlq.positions(topic + ".dlq", [0])[0] >= dlq.end_offsets(topic + ".dlq", [0])[0]
        ):
            break
    dlq.close()
    assert [m.value() for m in copies] == [kind.bad]
    producer.close()
