"""Sidecars with the Pulsar binary protocol for the binary-protocol tests."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

from broker_shim._binary_app import BINARY_KEY
from broker_shim._http import build_app
from broker_shim._sidecar import Sidecar, SidecarConfig
from broker_shim.binary import BinaryServer
from sync import TopicName, kafka_topic_of
from sync.messaging import decode_ack_ranges, subscription_group
from sync.transport import KafkaConfig, KafkaTransport
from tests.integration._ws_harness import ThreadSidecar, make_topic, wait_healthy
from tests.kafka_broker import free_port

__all__ = ["BinarySidecar", "make_topic", "wait_healthy"]


class BinarySidecar(ThreadSidecar):
    """The real sidecar app served from a thread, with its ``pulsar://`` listener."""

    def __init__(self, bootstrap: str, state_dir: Path, advertised_url: str | None = None) -> None:
        """``advertised_url``: what lookups answer (default: the listener itself)."""
        super().__init__(bootstrap, state_dir, app_factory=self._build)
        self.broker_port = free_port()
        self.broker_url = f"pulsar://127.0.0.1:{self.broker_port}"
        self.sidecar = Sidecar(
            SidecarConfig(
                broker_id=f"b-{uuid.uuid4().hex[:6]}",
                http_port=self.port,
                bootstrap_servers=bootstrap,
                state_dir=state_dir,
                broker_port=self.broker_port,
                broker_url=advertised_url,
            )
        )
        self.server: BinaryServer | None = None

    def _build(self) -> object:
        app = build_app(self.sidecar)
        self.server = app[BINARY_KEY]
        return app

    def __enter__(self) -> BinarySidecar:
        super().__enter__()
        return self


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
    deadline = time.monotonic() + 60
    while missing := not_durable(kafka_bootstrap, topic, subscription, acked):
        assert time.monotonic() < deadline, f"acknowledgements never committed: {missing}"
        time.sleep(0.2)
