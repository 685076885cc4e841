"""The one exception tree of policy-sync.

::

    PolicySyncError                      root: catch this to catch everything we raise
    ├── ConfigurationError               a setting or argument is invalid (fix the call)
    ├── InvalidInputError                user input refused before anything was written
    │   ├── InvalidTopicNameError        a topic/namespace name breaks Pulsar's TopicName rules
    │   ├── InvalidPolicyError           a policy field is unknown, mistyped or out of range
    │   ├── InvalidMessageIdError        a message id is not one this system encoded
    │   ├── MessageTooLargeError         a payload exceeds the topic's maxMessageSize
    │   ├── BadRequestError              a request body does not parse or bind (HTTP 400)
    │   ├── NotAcceptableError           Pulsar's 406, e.g. a partition count below 1
    │   └── UnprocessableError           Pulsar's 422, e.g. fewer partitions than now
    ├── NotFoundError                    the thing asked for does not exist
    │   └── TopicNotFoundError           a topic (or one of its partitions) does not exist
    ├── ConflictError                    it already exists, or changed under us (HTTP 409)
    ├── AccessDeniedError                the caller may not do this; nothing was written
    │   ├── AuthenticationError          no valid credentials (HTTP 401)
    │   └── AuthorizationError           valid credentials, not enough rights (HTTP 403)
    ├── UnavailableError                 cannot answer now; retry later (HTTP 503)
    │   ├── TooManyRequestsError         a concurrency limit is full (HTTP 429)
    │   ├── BundleUnloadingError         the namespace bundle is moving between owners
    │   └── WriteConflictError           other writers kept fencing a write to its deadline
    ├── TransportError                   Kafka said no, or did not answer
    │   ├── TopicConfigurationMismatch   an existing topic disagrees with what we need
    │   ├── ProducerFencedError          another writer took over our transactional id
    │   ├── GroupFencedError             our consumer-group generation is stale (zombie)
    │   └── DeliveryError                Kafka did not confirm a produced message
    ├── MessagingError                   a producer, consumer or subscription was refused
    │   ├── ProducerBusyError            too many producers (maxProducerPerTopic)
    │   ├── ProducerAccessFencedError    another producer holds the topic exclusively
    │   ├── ProducerBlockedQuotaExceededError  over a backlog quota (hold)
    │   │   └── ProducerBlockedQuotaExceededException  … (producer_exception)
    │   ├── DuplicateInFlightError       dedup: the same sequence id is still in flight
    │   ├── ConsumerBusyError            exclusive sub taken, or a consumer limit reached
    │   ├── SubscriptionBusyError        the subscription exists with another type
    │   └── NotAllowedError              a policy forbids it (type disabled, max subscriptions)
    ├── CodecError                       a record is not a valid change event (poison)
    ├── LifecycleError                   a component is not in a state that allows the call
    │   ├── CacheStateError              a cache/table is not in a state that allows the call
    │   │   └── BootstrapTimeout         replay did not reach the end offsets in time
    │   └── StateTransitionError         a move its state table forbids (a programming error)
    └── AuditError                       policy-audit could not run or could not finish
        ├── SparkSetupError              Java, Maven, the connector jars or Spark failed to start
        └── SidecarError                 a sidecar failed reconciliation or answered garbage

Every error carries enough context (topic, partition, offset, key) for an
operator to find the record or setting at fault; the message says what to do.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "BadRequestError",
    "NotAcceptableError",
    "UnprocessableError",
    "AuditError",
    "AuthenticationError",
    "AuthorizationError",
    "BootstrapTimeout",
    "BundleUnloadingError",
    "CacheStateError",
    "CodecError",
    "ConfigurationError",
    "ConflictError",
    "ConsumerBusyError",
    "DeliveryError",
    "GroupFencedError",
    "InvalidInputError",
    "InvalidMessageIdError",
    "InvalidPolicyError",
    "InvalidTopicNameError",
    "KafkaUnavailableError",
    "LifecycleError",
    "MessageTooLargeError",
    "MessagingError",
    "NotAllowedError",
    "NotFoundError",
    "DuplicateInFlightError",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerAccessFencedError",
    "ProducerBusyError",
    "SidecarError",
    "SparkSetupError",
    "StateTransitionError",
    "SubscriptionBusyError",
    "TopicNotFoundError",
    "PolicySyncError",
    "ProducerFencedError",
    "TooManyRequestsError",
    "TopicConfigurationMismatch",
    "TransportError",
    "UnavailableError",
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


class ConflictError(PolicySyncError):
    """The thing to create already exists, or it changed between read and write."""


class AccessDeniedError(PolicySyncError):
    """The caller may not perform this operation; nothing was written."""


class AuthenticationError(AccessDeniedError):
    """The request carries no valid credentials."""


class AuthorizationError(AccessDeniedError):
    """The authenticated role lacks the permission the operation needs."""


class UnavailableError(PolicySyncError):
    """The service cannot answer right now (no owner yet, still starting); retry later."""


class TooManyRequestsError(UnavailableError):
    """A concurrency limit (e.g. pending lookups) is full; retry with backoff."""


class BundleUnloadingError(UnavailableError):
    """The namespace bundle is being unloaded (moving to a new owner); retry shortly."""


class TransportError(PolicySyncError):
    """Kafka refused a request or did not answer in time."""


class KafkaUnavailableError(TransportError, UnavailableError):
    """Kafka did not take a write within its deadline (brokers down, no coordinator): the
    write may or may not have landed; retry it (HTTP 503 with ``Retry-After``)."""


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


class FatalClientError(ProducerFencedError):
    """The Kafka client reached a fatal state (librdkafka's fatal error): no call on it
    can succeed again. Like a fenced producer, it is closed and replaced by a new one."""


class GroupFencedError(TransportError):
    """The group coordinator refused our consumer-group generation (we were rebalanced out
    or our session expired): abort the transaction; its writes must not become visible."""


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


class LifecycleError(PolicySyncError):
    """A component (cache, table, service, ownership member, subscription...) is not in a
    state that allows this call or move (see :mod:`sync._lifecycle`)."""


class StateTransitionError(LifecycleError):
    """A move its component's state table does not allow (names the component)."""


class CacheStateError(LifecycleError):
    """The cache (or a compacted table) is not in a state that allows this call."""


class BootstrapTimeout(CacheStateError):
    """Startup replay did not reach the end offsets captured at start within the limit."""


class WriteConflictError(UnavailableError):
    """A write was fenced by concurrent writers until its deadline passed.

    Nothing is wrong with the write: another writer held the fence (an election under way,
    a ``policyctl`` beside the sidecars), so it is an unavailability to retry (HTTP 503).
    """


class InvalidMessageIdError(InvalidInputError):
    """A message id could not be decoded, or names a partition the topic does not have."""


class MessageTooLargeError(InvalidInputError):
    """A message payload is larger than the topic's ``maxMessageSize``."""

    def __init__(self, message: str, *, topic: str, size: int, limit: int) -> None:
        self.topic = topic
        self.size = size
        self.limit = limit
        super().__init__(message)


class TopicNotFoundError(NotFoundError):
    """The topic (or the addressed partition) does not exist; nothing creates it implicitly."""

    def __init__(self, message: str, *, topic: str) -> None:
        self.topic = topic
        super().__init__(message)


class DeliveryError(TransportError):
    """Kafka did not confirm a produced message (its error is in the message)."""

    def __init__(
        self, message: str, *, topic: str, partition: int | None = None, error: str | None = None
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.error = error
        super().__init__(message)


class MessagingError(PolicySyncError):
    """A producer, consumer or subscription request was refused.

    ``reason`` is the Pulsar-style text (e.g. "Exclusive consumer is already connected")
    a client sees; ``topic`` is the topic asked for.
    """

    def __init__(self, reason: str, *, topic: str | None = None) -> None:
        self.reason = reason
        self.topic = topic
        super().__init__(reason)


class ProducerBusyError(MessagingError):
    """The topic already has ``maxProducerPerTopic`` producers."""


class ProducerAccessFencedError(MessagingError):
    """An ``Exclusive`` producer was refused: another producer holds the topic (Pulsar's
    ``ProducerFencedException``)."""


class ProducerBlockedQuotaExceededError(MessagingError):
    """The topic is over its backlog quota (``producer_request_hold`` /
    ``producer_exception``): no producer may attach, or a held send timed out."""


class ProducerBlockedQuotaExceededException(ProducerBlockedQuotaExceededError):
    """The topic is over a ``producer_exception`` backlog quota (Pulsar's terminal
    ``ProducerBlockedQuotaExceededException``; the hold policy raises the parent class)."""


class DuplicateInFlightError(MessagingError):
    """Deduplication: a message with this producer name and sequence id is still being
    persisted (the client should retry; it is then acknowledged as a duplicate)."""


class ConsumerBusyError(MessagingError):
    """An exclusive subscription is taken, or a consumer limit is reached."""


class SubscriptionBusyError(MessagingError):
    """The subscription is attached with another subscription type."""


class NotAllowedError(MessagingError):
    """A policy forbids the request (subscription type disabled, too many subscriptions)."""


class AuditError(PolicySyncError):
    """policy-audit could not run or could not finish (a Spark job failed, say)."""


class SparkSetupError(AuditError):
    """Java, Maven, the Spark connector jars or the Spark session failed to come up."""


class SidecarError(AuditError):
    """A sidecar's reconciliation endpoints failed or returned something unexpected."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"sidecar {url}: {reason}")


class BadRequestError(InvalidInputError):
    """A request body that does not parse or bind (Pulsar's JSON binding answers 400)."""


class NotAcceptableError(InvalidInputError):
    """Pulsar's 406 Not Acceptable (e.g. a partition count below 1)."""


class UnprocessableError(InvalidInputError):
    """Pulsar's 422 Unprocessable Entity (e.g. fewer partitions than the topic has)."""
