"""The real transport's reachability probe: one Metadata request for one topic.

A dedicated admin client (``<base>.probe.<owner>``) so the probe never queues behind
another client's slow call (the transport's admin clients serialise controller calls).
The topic asked about need not exist: an unknown topic is an answer too. Every broker
gone, librdkafka raises ``_TRANSPORT`` / ``_TIMED_OUT`` within the probe's timeout.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ._base import KafkaConfig
from ._kafka_clients import RDKAFKA_LOG, client_id, created
from ._kafka_failures import translate

__all__ = ["MetadataProbe"]

#: Asked about by the probe (any name does; this one exists once a group committed).
PROBE_TOPIC = "__consumer_offsets"


class MetadataProbe:
    """``probe(timeout_s)`` raises :class:`~sync._errors.TransportError` if no broker
    answered a Metadata request within ``timeout_s``."""

    def __init__(self, config: KafkaConfig, owner: str | None = None) -> None:
        self._config = config
        self._name = client_id(config.client_id, "probe", owner)
        self._admin: AdminClient | None = None  # created by the first probe

    def _client(self) -> AdminClient:
        if self._admin is None:
            conf: dict[str, Any] = {
                "bootstrap.servers": self._config.bootstrap_servers,
                "client.id": self._name,
                "allow.auto.create.topics": False,
                "logger": RDKAFKA_LOG,
            }
            conf.update(self._config.extra)
            self._admin = created(self._name, lambda: AdminClient(conf))
        return self._admin

    def __call__(self, timeout_s: float) -> None:
        try:
            self._client().list_topics(PROBE_TOPIC, timeout=timeout_s)
        except KafkaException as exc:
            raise translate(exc, "probe kafka metadata") from exc
