"""Failover subscriptions with two real ``pulsar-client`` consumers: one is active, the
sidecar tells each consumer its status (ACTIVE_CONSUMER_CHANGE), and when the active one
closes the other becomes active and receives the rest, nothing lost or acked twice.

The Python client does not expose the consumer event listener (3.13 has no
``ConsumerEventListener`` / ``is_active``), so the events are counted from the sidecar's
command trace and the switch is proven by who receives what."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pulsar
import pytest

from tests.support.kafka import make_topic
from tests.support.sidecars import BinarySidecar
from tests.support.waits import wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BinarySidecar]:
    with BinarySidecar(kafka_bootstrap, tmp_path_factory.mktemp("failover")) as s:
        yield s


def _events(sidecar: BinarySidecar) -> int:
    assert sidecar.server is not None
    return sidecar.server.trace.sent_counts["ACTIVE_CONSUMER_CHANGE"]


def _wait_events(sidecar: BinarySidecar, count: int) -> None:
    wait_for(
        lambda: _events(sidecar) >= count,
        f"{count} ACTIVE_CONSUMER_CHANGE commands sent",
        timeout_s=30,
    )
    assert _events(sidecar) == count


def test_failover_switches_to_the_standby_when_the_active_consumer_closes(
    kafka_bootstrap: str, sidecar: BinarySidecar
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    client = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        kwargs = {
            "consumer_type": pulsar.ConsumerType.Failover,
            "initial_position": pulsar.InitialPosition.Earliest,
            "receiver_queue_size": 5,
        }
        # Pulsar's pick on a non-partitioned topic: the first consumer by name.
        active = client.subscribe(str(topic), "fo", consumer_name="a-primary", **kwargs)
        _wait_events(sidecar, 1)  # a: is_active=True
        standby = client.subscribe(str(topic), "fo", consumer_name="b-standby", **kwargs)
        _wait_events(sidecar, 2)  # b: is_active=False
        producer = client.create_producer(str(topic), batching_enabled=False)
        for i in range(30):
            producer.send(b"%d" % i)
        first = []
        for _ in range(10):
            msg = active.receive(timeout_millis=20_000)
            active.acknowledge(msg)
            first.append(msg.data())
        assert first == [b"%d" % i for i in range(10)]
        with pytest.raises(pulsar.Timeout):
            standby.receive(timeout_millis=1000)  # the standby gets nothing meanwhile
        time.sleep(0.5)  # the acks reach the sidecar before the switch
        active.close()
        _wait_events(sidecar, 3)  # b: is_active=True
        rest = []
        for _ in range(20):
            msg = standby.receive(timeout_millis=20_000)
            standby.acknowledge(msg)
            rest.append(msg.data())
        # In order, from the first message the old active consumer had not acknowledged.
        assert rest == [b"%d" % i for i in range(10, 30)]
        with pytest.raises(pulsar.Timeout):
            standby.receive(timeout_millis=1000)
        # A consumer named earlier joins: it takes over, and the standby is told.
        again = client.subscribe(str(topic), "fo", consumer_name="a-again", **kwargs)
        _wait_events(sidecar, 5)  # b: is_active=False, a-again: is_active=True
        producer.send(b"30")
        assert again.receive(timeout_millis=20_000).data() == b"30"
        with pytest.raises(pulsar.Timeout):
            standby.receive(timeout_millis=1000)
    finally:
        client.close()
