"""The Kafka transport seam and its in-memory twin."""

from ._base import (
    OFFSET_BEGINNING,
    Admin,
    Consumer,
    DeliveryCallback,
    DeliveryReport,
    Header,
    KafkaConfig,
    Message,
    Producer,
    TopicDescription,
    TopicSpec,
    Transport,
)
from ._kafka import KafkaTransport
from ._memory import MemoryBroker, MemoryTransport

__all__ = [
    "OFFSET_BEGINNING",
    "Admin",
    "Consumer",
    "DeliveryCallback",
    "DeliveryReport",
    "Header",
    "KafkaConfig",
    "KafkaTransport",
    "Message",
    "MemoryBroker",
    "MemoryTransport",
    "Producer",
    "TopicDescription",
    "TopicSpec",
    "Transport",
]
