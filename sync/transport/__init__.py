"""The Kafka transport seam and its in-memory twin."""

from ._base import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Admin,
    Consumer,
    DeliveryCallback,
    DeliveryReport,
    GroupConsumer,
    GroupDescription,
    GroupMember,
    GroupMetadata,
    Header,
    KafkaConfig,
    Message,
    Producer,
    RebalanceListener,
    TopicDescription,
    TopicSpec,
    Transport,
)
from ._kafka import KafkaTransport
from ._memory import MemoryBroker, MemoryTransport

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_INVALID",
    "Admin",
    "Consumer",
    "DeliveryCallback",
    "DeliveryReport",
    "GroupConsumer",
    "GroupDescription",
    "GroupMember",
    "GroupMetadata",
    "Header",
    "KafkaConfig",
    "KafkaTransport",
    "Message",
    "MemoryBroker",
    "MemoryTransport",
    "Producer",
    "RebalanceListener",
    "TopicDescription",
    "TopicSpec",
    "Transport",
]
