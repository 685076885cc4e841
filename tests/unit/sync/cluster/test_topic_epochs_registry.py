"""Topic epochs in the registry, on the in-memory twin of Kafka: decided by the fenced
metadata writer on a view that holds every committed epoch (another sidecar's too), read
back by a sidecar that replays the registry (a restart), deleted with their topic, and
decoded with the registry's rules (an unreadable record is no epoch)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sync._constants import REGISTRY_KEY_EPOCH
from sync._errors import CodecError, ProducerAccessFencedError
from sync.cluster._metadata import MetadataStore, MetadataWriter
from sync.cluster._topic_epoch_store import RegistryTopicEpochs
from sync.cluster._topic_epochs import TopicEpoch, epoch_key
from sync.messaging import TopicEpochStore
from sync.messaging._admission import admit_topic_epoch
from sync.naming._names import NamespaceName, TopicName
from sync.transport import MemoryTransport
from tests.unit.sync.cluster.test_ownership_cluster import memory_cluster

TOPIC = TopicName.parse("persistent://t/ns/orders")


def _next(topic: TopicName, presented: int | None = None) -> Callable[[int | None], int]:
    """Pulsar's decision: the next epoch, or the one presented unless it moved on."""
    return lambda current: admit_topic_epoch(topic, current, presented)


def _sidecar(transport: MemoryTransport) -> RegistryTopicEpochs:
    store = MetadataStore(transport).start()
    store.wait_ready(10)
    return RegistryTopicEpochs(store, MetadataWriter(transport, store))


def _close(*sidecars: RegistryTopicEpochs) -> None:
    for epochs in sidecars:
        epochs.writer.close()
        epochs.store.close()


def test_epochs_are_decided_on_every_committed_epoch_and_replayed() -> None:
    transport = MemoryTransport()
    a, b = _sidecar(transport), _sidecar(transport)
    assert isinstance(a, TopicEpochStore)
    try:
        assert a.take(TOPIC, _next(TOPIC)) == 0
        # another sidecar (the next owner) decides on a view that holds sidecar a's epoch
        assert b.take(TOPIC, _next(TOPIC)) == 1
        assert a.take(TOPIC.partition(0), _next(TOPIC.partition(0))) == 0
        with pytest.raises(ProducerAccessFencedError, match="Current epoch: 1, Producer epoch: 0"):
            a.take(TOPIC, _next(TOPIC, presented=0))
        ends = a.store.table.end_offsets()
        assert a.take(TOPIC, _next(TOPIC, presented=1)) == 1  # taken back: nothing written
        assert a.store.table.end_offsets() == ends
    finally:
        _close(a, b)
    restarted = _sidecar(transport)  # replays the registry
    try:
        assert restarted.current(TOPIC) == 1
        assert restarted.current(TOPIC.partition(0)) == 0
        assert restarted.current(TOPIC.partition(1)) is None
        assert restarted.take(TOPIC, _next(TOPIC)) == 2
    finally:
        _close(restarted)


def test_the_record_is_pulsar_like_json_and_bad_ones_are_refused() -> None:
    record = TopicEpoch("persistent://t/ns/orders-partition-0", 3)
    assert record.to_json() == b'{"epoch":3,"topic":"persistent://t/ns/orders-partition-0"}'
    assert TopicEpoch.from_json(record.to_json()) == record
    assert epoch_key(TOPIC.partition(0)) == f"{REGISTRY_KEY_EPOCH}{record.topic}"
    for bad in (
        b"3",
        b'{"topic": "x"}',
        b'{"topic": "x", "epoch": -1}',
        b'{"topic": "x", "epoch": true}',
    ):
        with pytest.raises(CodecError):
            TopicEpoch.from_json(bad)


def test_an_unreadable_or_misplaced_epoch_is_no_epoch() -> None:
    transport = MemoryTransport()
    epochs = _sidecar(transport)
    store = epochs.store
    try:
        producer = transport.producer()
        topic = store.table.spec.name
        other = TopicName.parse("persistent://t/ns/other")
        producer.produce(topic, epoch_key(TOPIC).encode(), b"not json")
        producer.produce(topic, epoch_key(other).encode(), TopicEpoch(TOPIC.canonical, 4).to_json())
        producer.flush(5)
        store.table.sync(5)
        assert epochs.current(TOPIC) is None and epochs.current(other) is None
        assert store.table.poison == 2
    finally:
        _close(epochs)


def test_deleting_a_topic_deletes_its_epochs_and_its_partitions() -> None:
    with memory_cluster(1) as (_transport, (service,)):
        service.admin.create_namespace(NamespaceName("t", "ns"), num_bundles=1)
        service.admin.create_topic(TOPIC, 2)
        kept = TopicName.parse("persistent://t/ns/orders-kept")
        for name in (TOPIC, TOPIC.partition(0), TOPIC.partition(1), kept):
            assert service.epochs.take(name, _next(name)) == 0
        service.admin.delete_topic(TOPIC, partitioned=True)
        service.store.table.sync(5)
        assert service.store.epochs == {kept.canonical: 0}
        # created again under the name: it starts at 0, as in Pulsar (a new ledger)
        service.admin.create_topic(TOPIC, 2)
        assert service.epochs.take(TOPIC.partition(0), _next(TOPIC.partition(0))) == 0
