"""Integration fixtures: a real Kafka broker for the whole session, transports, and one
local Spark for the whole session (started by the first test that asks for it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from chaos.procs import NODE_IDS, KafkaCluster
from sync.transport import KafkaConfig, KafkaTransport, MemoryTransport, Transport
from tests.support.kafka import kafka_for_tests
from tests.support.spark import SPARK_TEST_CONF
from tests.support.waits import wait_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.xdist_group(_group_of(item)))
    # The tests on the 3-broker cluster run last, one after the other: they share one
    # start of it (see ``kafka_cluster``), which then runs only while they do.
    items.sort(key=lambda item: "kafka_cluster" in getattr(item, "fixturenames", ()))


def _group_of(item: pytest.Item) -> str:
    """Which tests one worker runs together when ``make integration`` spreads the suite
    over processes (pytest-xdist ``--dist loadgroup``; the suite mostly waits on brokers,
    clients and JVMs): a module's tests stay together (its module fixtures start once),
    the 3-broker cluster's tests share one start of it (fixed ports, one holder at a
    time), and the geo package shares its one two-cluster setup."""
    if "kafka_cluster" in getattr(item, "fixturenames", ()):
        return "kafka-cluster"
    module = item.nodeid.split("::", 1)[0]
    if module.startswith("tests/integration/sync/geo/"):
        return "geo"
    if module.startswith("tests/integration/sync/audit/"):
        return "audit"  # Spark JVMs: one worker's at a time
    return module


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a real broker (never skipped: no broker is an error)."""
    with kafka_for_tests() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def _kafka_cluster_started() -> Iterator[KafkaCluster]:
    """The 3-broker cluster (fixed ports 19092/29092/31092), started fresh once and purged
    after its last test; held under /tmp/ps-cluster.lock so no other user (another
    clone's test run, a soak) takes its ports meanwhile. Its tests run last (see
    ``pytest_collection_modifyitems``), so it runs only while they do."""
    with KafkaCluster.held() as cluster:
        yield cluster


@pytest.fixture
def kafka_cluster(_kafka_cluster_started: KafkaCluster) -> Iterator[KafkaCluster]:
    """The 3-broker cluster, whole for each test: every node running and ready (a broker
    an earlier test killed is started again) and every partition's replicas in sync."""
    cluster = _kafka_cluster_started
    _wait_in_sync(cluster.up())
    yield cluster
    for node in NODE_IDS:  # resumed, should the test have failed while one was SIGSTOPped
        with contextlib.suppress(OSError, ValueError):
            os.kill(KafkaCluster.pid(node), signal.SIGCONT)


#: How many partitions have fewer in-sync replicas than replicas (asked in a throw-away
#: process, as the cluster tests ask the cluster: librdkafka may abort on a broker loss).
_UNDER_REPLICATED = (
    "import sys\n"
    "from confluent_kafka.admin import AdminClient\n"
    "md = AdminClient({'bootstrap.servers': sys.argv[1]}).list_topics(timeout=10)\n"
    "parts = [p for t in md.topics.values() for p in t.partitions.values()]\n"
    "print(sum(1 for p in parts if p.error or len(p.isrs) < len(p.replicas)))\n"
)


def _wait_in_sync(bootstrap: str, limit_s: float = 180.0) -> None:
    """Wait until no partition of the cluster is under-replicated (a broker restarted
    after an earlier test catches up first)."""
    out: list[subprocess.CompletedProcess[str]] = []

    def in_sync() -> bool:
        out[:] = [
            subprocess.run(
                [sys.executable, "-c", _UNDER_REPLICATED, bootstrap], capture_output=True, text=True
            )
        ]
        return out[0].returncode == 0 and out[0].stdout.strip() == "0"

    wait_for(
        in_sync,
        lambda: f"cluster replicas in sync in {limit_s:.0f}s: {out[0]}",
        timeout_s=limit_s,
        interval_s=1,
    )


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


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One real local Spark for the whole run (never skipped: no Java/Spark is a failure);
    Spark is imported only by the runs that ask for it."""
    from sync.audit import SparkConfig, spark_session  # noqa: PLC0415

    session = spark_session(SparkConfig(master="local[2]", conf=SPARK_TEST_CONF))
    yield session
    session.stop()
