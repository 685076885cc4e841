"""Topic epochs survive the sidecar that gave them, with the real ``pulsar-client``: an
``ExclusiveWithFencing`` producer holds a topic on one sidecar; that sidecar stops and
another one of its cluster takes the topic (a restart, or the bundle's next owner); a new
``ExclusiveWithFencing`` producer takes the topic there first. When the old producer
reconnects, presenting the epoch it held, it is fenced ("Topic epoch has already moved",
``ProducerFenced``), as Pulsar fences it with the epoch kept in the ledger's properties,
and the new producer keeps writing. Forgotten epochs would let the old producer in under
the same epoch, fencing the new one.

The old producer's reconnections wait at its sidecar's former port (:class:`Gate`) until
the new producer holds the topic: the order is the test's, not a race."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest

from sync.cluster import ClusterSettings
from tests.support.gate import Gate
from tests.support.sidecars import BinarySidecar
from tests.support.waits import wait_for

pytestmark = pytest.mark.timeout(120)


def _sidecar(kafka_bootstrap: str, tmp_path: Path, cluster: str) -> BinarySidecar:
    return BinarySidecar(kafka_bootstrap, tmp_path, lookup=ClusterSettings(), cluster=cluster)


def test_a_producer_back_after_a_restart_is_fenced_by_the_epoch_taken_since(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cluster = "ep" + uuid.uuid4().hex[:8]
    topic = f"persistent://public/default/epochs-{uuid.uuid4().hex[:8]}"
    fencing = pulsar.ProducerAccessMode.ExclusiveWithFencing
    first = _sidecar(kafka_bootstrap, tmp_path / "first", cluster)
    with first:
        # the old client waits long for a connection: its reconnection is held below
        old_client = pulsar.Client(
            first.broker_url, operation_timeout_seconds=30, connection_timeout_ms=30_000
        )
        old = old_client.create_producer(
            topic, producer_name="old", access_mode=fencing, send_timeout_millis=5_000
        )
        old.send(b"before")
    gate = Gate(first.broker_port)  # the old client's reconnections wait here
    second = _sidecar(kafka_bootstrap, tmp_path / "second", cluster)
    new_client = pulsar.Client(second.broker_url, operation_timeout_seconds=30)
    try:
        with second:
            new = new_client.create_producer(topic, producer_name="new", access_mode=fencing)
            new.send(b"after")
            gate.open(second.broker_port)  # the old producer comes back, to the new owner

            def fenced() -> bool:
                try:
                    old.send(b"late")
                except pulsar.ProducerFenced:
                    return True
                except pulsar.Timeout:
                    return False  # still reconnecting
                raise AssertionError("the old producer wrote under an epoch moved past")

            wait_for(fenced, "the old producer fenced by the epoch moved on", timeout_s=60)
            assert gate.accepted > 0  # it did come back through the gate
            new.send(b"still")
            reader = new_client.create_reader(topic, pulsar.MessageId.earliest)
            got = [reader.read_next(timeout_millis=20_000).data() for _ in range(3)]
            assert got == [b"before", b"after", b"still"]
    finally:
        new_client.close()
        old_client.close()
        gate.close()
