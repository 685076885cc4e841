"""Where the tests' real Kafka comes from.

In order: ``$KAFKA_BOOTSTRAP_SERVERS``; a testcontainers KRaft Kafka when a Docker
engine answers; else the project's jar launcher (``docker/kafka/kafkactl.py``) on
free loopback ports. There is no fourth option: no broker is a test error.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from chaos.procs import free_port as free_port  # one picker for tests and the soak
from sync import TopicName, kafka_topic_of
from sync.messaging import decode_ack_ranges, subscription_group
from sync.transport import Consumer, KafkaConfig, KafkaTransport, Message, TopicSpec
from tests.support.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]
KAFKACTL = ROOT / "docker" / "kafka" / "kafkactl.py"
KAFKA_IMAGE = "apache/kafka:4.1.1"


def docker_engine_available() -> bool:
    try:
        import docker

        client = docker.DockerClient.from_env(timeout=3)  # type: ignore[attr-defined]
        client.ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def jar_broker(port: int | None = None) -> Iterator[str]:
    """A real single-node Kafka from Maven Central jars, stopped on exit."""
    port = port or free_port()
    cport = free_port()
    state = Path(tempfile.mkdtemp(prefix="policy-sync-kafka-"))
    base = [sys.executable, str(KAFKACTL)]
    up = subprocess.run(
        [
            *base,
            "up",
            "--port",
            str(port),
            "--controller-port",
            str(cport),
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if up.returncode != 0:
        raise RuntimeError(
            f"could not start Kafka with {KAFKACTL} (exit {up.returncode}):\n"
            f"{up.stdout}\n{up.stderr}"
        )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*base, "down", "--port", str(port), "--state-dir", str(state), "--purge"],
            capture_output=True,
            check=False,
        )


@contextlib.contextmanager
def kafka_for_tests() -> Iterator[str]:
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if env:
        yield env
        return
    if docker_engine_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer(KAFKA_IMAGE).with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    with jar_broker() as bootstrap:
        yield bootstrap


def make_topic(bootstrap: str, partitions: int) -> TopicName:
    """A fresh Pulsar topic backed by a new Kafka topic (what the admin API would create)."""
    topic = TopicName.parse(f"persistent://public/default/ws-{uuid.uuid4().hex[:10]}")
    KafkaTransport(KafkaConfig(bootstrap)).admin().ensure_topic(
        TopicSpec(kafka_topic_of(topic), partitions)
    )
    return topic


def not_durable(
    kafka_bootstrap: str, topic: TopicName, subscription: str, acked: list[tuple[int, int]]
) -> dict[int, tuple[int, str, int]]:
    """Per partition, the subscription's committed position in Kafka and how many of the
    acknowledged ``(partition, offset)`` it does not cover (neither below the committed
    offset nor in a committed ack range); empty when it covers them all."""
    kafka_topic = kafka_topic_of(topic)
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()
    positions = admin.group_positions(subscription_group(kafka_topic, subscription), kafka_topic)
    missing: Counter[int] = Counter()
    for partition, offset in acked:
        committed, metadata = positions.get(partition, (0, ""))
        if offset >= committed and not any(
            start <= offset < end for start, end in decode_ack_ranges(committed, metadata)
        ):
            missing[partition] += 1
    return {p: (*positions.get(p, (0, "")), n) for p, n in missing.items()}


def wait_acks_durable(
    kafka_bootstrap: str, topic: TopicName, subscription: str, acked: list[tuple[int, int]]
) -> None:
    """Wait until Kafka holds every acknowledged ``(partition, offset)`` (a 60 s liveness
    bound: on a loaded machine the 100 ms commit interval can take seconds)."""
    missing: dict[int, tuple[int, str, int]] = {}

    def durable() -> bool:
        missing.clear()
        missing.update(not_durable(kafka_bootstrap, topic, subscription, acked))
        return not missing

    wait_for(durable, lambda: f"acknowledgements committed (missing: {missing})", interval_s=0.2)


def consume_some(
    consumer: Consumer, count: int, timeout_s: float = 30.0, batch: int = 100, poll_s: float = 1.0
) -> list[Message]:
    """Records from ``consumer`` (assigned already), ``batch`` at a time, until it has read
    ``count`` or ``timeout_s`` has passed: then fewer, and the caller asserts what it needs."""
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.consume(batch, poll_s))
    return out
