"""Where the tests' real Kafka comes from.

In order: ``$KAFKA_BOOTSTRAP_SERVERS``; a testcontainers KRaft Kafka when a Docker
engine answers; else the project's jar launcher (``docker/kafka/kafkactl.py``) on
free loopback ports. There is no fourth option: no broker is a test error.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KAFKACTL = ROOT / "docker" / "kafka" / "kafkactl.py"
KAFKA_IMAGE = "apache/kafka:4.1.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
