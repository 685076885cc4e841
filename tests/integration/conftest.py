"""Integration fixtures: a real Kafka broker for the whole session, and transports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chaos.procs import KafkaCluster
from sync.transport import KafkaConfig, KafkaTransport, MemoryTransport, Transport
from tests.support.kafka import kafka_for_tests


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a real broker (never skipped: no broker is an error)."""
    with kafka_for_tests() as bootstrap:
        yield bootstrap


@pytest.fixture
def kafka_cluster() -> Iterator[KafkaCluster]:
    """The 3-broker cluster (fixed ports 19092/29092/31092), started fresh and purged after
    the test; held under /tmp/ps-cluster.lock so no other user (another clone's test run,
    a soak) takes its ports meanwhile."""
    with KafkaCluster.held() as cluster:
        yield cluster


@pytest.fixture
def kafka_transport(kafka_bootstrap: str) -> KafkaTransport:
    return KafkaTransport(KafkaConfig(kafka_bootstrap))


@pytest.fixture(params=["memory", "kafka"])
def transport(request: pytest.FixtureRequest) -> Transport:
    """The same test against the in-memory twin and the real broker."""
    if request.param == "memory":
        return MemoryTransport()
    bootstrap: str = request.getfixturevalue("kafka_bootstrap")
    return KafkaTransport(KafkaConfig(bootstrap))
