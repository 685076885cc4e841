"""The official Pulsar Java client (Maven Central ``org.apache.pulsar:pulsar-client``)
through a sidecar, with seed 002's steps: produce, then consume with a Shared
subscription ``demo-sub2``, acknowledge, close."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker_shim.binary.test_binary_client import _records
from tests.support.kafka import ROOT, make_topic
from tests.support.sidecars import BinarySidecar

pytestmark = pytest.mark.timeout(600)

JAVA = ROOT / "tests" / "java"


@pytest.fixture
def sidecar(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BinarySidecar]:
    with BinarySidecar(kafka_bootstrap, tmp_path) as s:
        yield s


def test_java_client_runs_seed_002(
    kafka_bootstrap: str, sidecar: BinarySidecar, classpath: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    run = subprocess.run(
        ["java", "-cp", classpath, str(JAVA / "Seed002.java"), sidecar.broker_url, str(topic)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    received = [line for line in run.stdout.splitlines() if line.startswith("received ")]
    assert received == ["received hello-pulsar1 0:0:-1", "received hello-pulsar2 0:1:-1"]
    assert _records(kafka_bootstrap, topic) == {0: 2}
    assert sidecar.server is not None
    order = sidecar.server.trace.order
    seed = ["CONNECT", "PARTITIONED_METADATA", "LOOKUP", "SUBSCRIBE", "FLOW", "ACK",
            "CLOSE_CONSUMER"]  # fmt: skip
    assert [c for c in order if c in seed] == seed, order  # seed 002's sequence
    assert {"PRODUCER", "SEND", "CLOSE_PRODUCER"} <= set(order)


def test_java_client_sees_failover_active_consumer_changes(
    kafka_bootstrap: str, sidecar: BinarySidecar, classpath: str
) -> None:
    """The Java client's ``ConsumerEventListener`` (which the Python wheel does not expose)
    reports ACTIVE_CONSUMER_CHANGE: the first Failover consumer is told it is active, the
    second that it is not, and the second becomes active when the first closes."""
    topic = make_topic(kafka_bootstrap, 1)
    run = subprocess.run(
        ["java", "-cp", classpath, str(JAVA / "FailoverEvents.java"), sidecar.broker_url,
         str(topic)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith(("event ", "step "))]
    steps: dict[str, list[str]] = {}
    current: list[str] = []
    for line in lines:
        if line.startswith("step "):
            steps[line[5:]] = current
            current = []
        else:
            current.append(line[6:])
    assert steps["a-joined"] == ["a active"], lines
    assert "b inactive" in steps["b-joined"] and "b active" not in steps["b-joined"], lines
    assert steps["a-closed"][-1] == "b active", lines
    assert "a inactive" not in steps["a-closed"], lines  # a left; nothing to tell it


@pytest.mark.parametrize("entry_format", ["message", "entry"])
def test_java_client_gets_back_every_field_of_a_batch(
    kafka_bootstrap: str, tmp_path: Path, classpath: str, entry_format: str
) -> None:
    """The Java client's batch (key, ordering key, properties, event time, a null value,
    an empty one, explicit sequence ids) comes back field by field, stored either way, from
    a sidecar started after the one that stored it."""
    topic = make_topic(kafka_bootstrap, 1)

    def batch_fields(sidecar: BinarySidecar, half: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["java", "-cp", classpath, str(JAVA / "BatchFields.java"), sidecar.broker_url,
             str(topic), half],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    with BinarySidecar(kafka_bootstrap, tmp_path / "first", entry_format=entry_format) as first:
        produced = batch_fields(first, "produce")
    assert produced.returncode == 0, produced.stderr[-4000:]
    with BinarySidecar(kafka_bootstrap, tmp_path / "second") as second:
        run = batch_fields(second, "consume")
    assert run.returncode == 0, run.stderr[-4000:]
    got = [line for line in run.stdout.splitlines() if line.startswith("msg ")]
    tail = " producer=java-batch"
    assert got == [
        "msg key=k1 ordering=o1 data=hello props={p=v} event=1700000000123 seq=100" + tail,
        "msg key=gone ordering=- data=null props={} event=0 seq=101" + tail,
        "msg key=- ordering=- data= props={} event=0 seq=102" + tail,
    ]
    # One record per SEND stored as an entry, one per message otherwise.
    assert _records(kafka_bootstrap, topic) == {0: 1 if entry_format == "entry" else 3}
