"""The one exception tree of policy-sync.

::

    PolicySyncError                      root: catch this to catch everything we raise
    ├── ConfigurationError               a setting or argument is invalid (fix the call)
    ├── InvalidInputError                user input refused before anything was written
    │   ├── InvalidTopicNameError        a topic/namespace name breaks Pulsar's TopicName rules
    │   └── InvalidPolicyError           a policy field is unknown, mistyped or out of range
    ├── NotFoundError                    the thing asked for does not exist
    ├── TransportError                   Kafka said no, or did not answer
    │   ├── TopicConfigurationMismatch   an existing topic disagrees with what we need
    │   └── ProducerFencedError          another writer took over our transactional id
    ├── CodecError                       a record is not a valid change event (poison)
    ├── CacheStateError                  the cache is not in a state that allows the call
    │   └── BootstrapTimeout             replay did not reach the end offsets in time
    └── WriteConflictError               a write lost its fence too many times in a row

Every error carries enough context (topic, partition, offset, key) for an
operator to find the record or setting at fault; the message says what to do.
"""

from __future__ import annotations

__all__ = [
    "BootstrapTimeout",
    "CacheStateError",
    "CodecError",
    "ConfigurationError",
    "InvalidInputError",
    "InvalidPolicyError",
    "InvalidTopicNameError",
    "NotFoundError",
    "PolicySyncError",
    "ProducerFencedError",
    "TopicConfigurationMismatch",
    "TransportError",
    "WriteConflictError",
]


class PolicySyncError(Exception):
    """Root of every exception policy-sync raises."""


class ConfigurationError(PolicySyncError):
    """A configuration value is invalid."""


class InvalidInputError(PolicySyncError):
    """User input was refused; nothing was written."""


class InvalidTopicNameError(InvalidInputError):
    """A topic or namespace name breaks Pulsar's TopicName rules."""


class InvalidPolicyError(InvalidInputError):
    """A policy document has an unknown field, a wrong type or a value out of range."""


class NotFoundError(PolicySyncError):
    """The requested policy, topic or namespace does not exist."""


class TransportError(PolicySyncError):
    """Kafka refused a request or did not answer in time."""


class TopicConfigurationMismatch(TransportError):
    """An existing topic's partitions or configuration disagree with what is required."""

    def __init__(self, topic: str, differences: dict[str, tuple[str | None, str]]) -> None:
        self.topic = topic
        self.differences = dict(differences)
        detail = ", ".join(
            f"{name}: found {found!r}, need {need!r}"
            for name, (found, need) in sorted(self.differences.items())
        )
        super().__init__(
            f"topic {topic!r} exists with the wrong configuration ({detail}); "
            "alter it with kafka-configs / kafka-topics, or point policy-sync at another topic"
        )


class ProducerFencedError(TransportError):
    """Another producer with the same transactional id fenced this one; start over."""


class CodecError(PolicySyncError):
    """A record could not be decoded as a change event."""

    def __init__(
        self,
        reason: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        key: bytes | None = None,
    ) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        where = f" at {topic}[{partition}]@{offset}" if topic is not None else ""
        super().__init__(f"undecodable change event{where}: {reason}")


class CacheStateError(PolicySyncError):
    """The cache is not in a state that allows this call."""


class BootstrapTimeout(CacheStateError):
    """Startup replay did not reach the end offsets captured at start within the limit."""


class WriteConflictError(PolicySyncError):
    """A write was fenced by concurrent writers more times than the retry limit."""
