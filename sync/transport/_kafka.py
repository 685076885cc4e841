"""The real transport: confluent-kafka (librdkafka) behind the seam's protocols.

The clients are in their own modules: :mod:`._kafka_producer`, :mod:`._kafka_consumer`,
:mod:`._kafka_admin` and :mod:`._kafka_group`; the reachability probe :mod:`._kafka_probe`."""

from __future__ import annotations

from ._base import (
    KafkaConfig,
)
from ._kafka_admin import KafkaAdmin
from ._kafka_consumer import KafkaConsumer
from ._kafka_group import KafkaGroupConsumer
from ._kafka_probe import MetadataProbe
from ._kafka_producer import KafkaProducer
from ._reachability import ReachabilityConfig, ReachabilityMonitor

__all__ = ["KafkaTransport"]


class KafkaTransport:
    """The production transport."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config

    @property
    def description(self) -> str:
        return f"kafka://{self.config.bootstrap_servers}"

    def producer(
        self,
        *,
        transactional_id: str | None = None,
        linger_ms: float = 0,
        transaction_timeout_ms: int | None = None,
    ) -> KafkaProducer:
        return KafkaProducer(self.config, transactional_id, linger_ms, transaction_timeout_ms)

    def group_consumer(
        self,
        group_id: str,
        *,
        client_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int | None = None,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
    ) -> KafkaGroupConsumer:
        return KafkaGroupConsumer(
            self.config,
            group_id,
            client_id=client_id,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            read_committed=read_committed,
            fetch_wait_max_ms=fetch_wait_max_ms,
        )

    def consumer(
        self,
        *,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
        group_id: str | None = None,
    ) -> KafkaConsumer:
        return KafkaConsumer(self.config, read_committed, fetch_wait_max_ms, group_id)

    def admin(self) -> KafkaAdmin:
        return KafkaAdmin(self.config)

    def reachability(self, config: ReachabilityConfig | None = None) -> ReachabilityMonitor:
        return ReachabilityMonitor(MetadataProbe(self.config), config, what=self.description)
