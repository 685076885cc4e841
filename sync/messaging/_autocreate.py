"""Topic auto-creation: Pulsar's broker settings and the namespace override, in one place.

A producer, consumer or reader on a topic that was never created creates it when the
broker setting ``allowAutoTopicCreation`` (default true) allows, with
``allowAutoTopicCreationType`` (default ``non-partitioned``) and ``defaultNumPartitions``
(default 1); a namespace's ``autoTopicCreationOverride`` policy (Pulsar's
``POST /admin/v2/namespaces/{t}/{ns}/autoTopicCreation``) replaces all three for its
topics. Refused, the caller gets Pulsar's answer (:class:`TopicNotFoundError`).

Who actually creates a topic (the cluster registry's admin, or a bare Kafka topic
without one) is the composition root's :data:`TopicCreator`: this module decides, the
creator writes.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sync._errors import ConfigurationError
from sync.naming._names import TopicName

__all__ = [
    "AutoTopicCreation",
    "TopicCreator",
    "TopicType",
    "validate_override",
]

#: Creates ``topic`` (a base name) with ``partitions`` (0: non-partitioned). An already
#: existing topic (another client or sidecar was first) is not an error.
TopicCreator = Callable[[TopicName, int], Awaitable[None]]


class TopicType(enum.Enum):
    """Pulsar's ``TopicType`` of auto-created topics (its JSON spelling)."""

    NON_PARTITIONED = "non-partitioned"
    PARTITIONED = "partitioned"


@dataclass(frozen=True, slots=True)
class AutoTopicCreation:
    """Whether and how a topic that does not exist is created on first use.

    The broker defaults (``broker-shim run --allow-auto-topic-creation …``) or a
    namespace's override. ``default_num_partitions`` applies to the partitioned type.
    """

    allow: bool = True
    topic_type: TopicType = TopicType.NON_PARTITIONED
    default_num_partitions: int = 1

    def __post_init__(self) -> None:
        if self.default_num_partitions < 1:
            raise ConfigurationError(
                f"defaultNumPartitions must be 1 or more, got {self.default_num_partitions}"
            )

    @property
    def partitions(self) -> int:
        """Partitions of a topic created under this rule (0: non-partitioned)."""
        if self.topic_type is TopicType.PARTITIONED:
            return self.default_num_partitions
        return 0

    def with_override(self, override: Mapping[str, Any] | None) -> AutoTopicCreation:
        """The rule for a namespace: its stored ``autoTopicCreationOverride`` wins whole."""
        if not override:
            return self
        allow = bool(override.get("allowAutoTopicCreation"))
        if not allow:
            return AutoTopicCreation(False, self.topic_type, self.default_num_partitions)
        kind = TopicType(str(override.get("topicType") or TopicType.NON_PARTITIONED.value))
        count = override.get("defaultNumPartitions")
        return AutoTopicCreation(
            True, kind, int(count) if count is not None else self.default_num_partitions
        )


def validate_override(value: Any) -> str | None:
    """Pulsar's refusal detail of an ``autoTopicCreationOverride`` body (None: valid).

    The REST layer answers 412 "Invalid configuration for autoTopicCreationOverride. the
    detail is <detail>", as Pulsar's ``AutoTopicCreationOverrideImpl.validateOverride``.
    """
    if not isinstance(value, Mapping):
        return "[AutoTopicCreationOverride] can not be null"
    allow = value.get("allowAutoTopicCreation", False)
    if not isinstance(allow, bool):
        return None  # not Pulsar's type: the body's type check answers (400)
    if not allow:
        return None
    kind = value.get("topicType")
    if kind not in {t.value for t in TopicType}:
        return f"Unknown topic type [{'null' if kind is None else kind}]"
    count = value.get("defaultNumPartitions")
    if kind == TopicType.PARTITIONED.value:
        if count is None:
            return "[defaultNumPartitions] cannot be null when the type is partitioned."
        if isinstance(count, int) and count <= 0:
            return "[defaultNumPartitions] cannot be less than 1 for partition type."
    elif count is not None:
        return "[defaultNumPartitions] is not allowed to be set when the type is non-partition."
    return None
