"""What a librdkafka failure is: the one place that takes confluent-kafka's errors apart.

confluent-kafka hands a failure over in two shapes, and code written for one crashes on
the other:

* a raised ``KafkaException``, whose ``args[0]`` is the ``KafkaError`` (some paths raise
  one with a plain message, or with no args at all);
* a bare ``KafkaError``, which is *not* an exception and has no ``args``: the ``errors``
  of a ListConsumerGroups result, a message's ``error()``, a delivery report.

A classifier that read ``exc.args[0]`` raised ``AttributeError`` when a listing's
``KafkaError`` reached it (seen while brokers were killed), so a timeout was logged as a
traceback instead of being retried. :func:`kafka_error_of` reads both shapes (anything else
is None), and every question the transport asks of a failure is a function here built on
it.
"""

from __future__ import annotations

from typing import Final

from confluent_kafka import KafkaError, KafkaException

from sync._errors import (
    FatalClientError,
    GroupFencedError,
    ProducerFencedError,
    TransportError,
)

__all__ = [
    "FENCED_CODES",
    "GROUP_FENCED_CODES",
    "TIMEOUT_CODES",
    "TRANSIENT_CODES",
    "has_code",
    "kafka_error_of",
    "timed_out",
    "translate",
    "transient",
    "waited_for_controller",
]

#: The producer was fenced by a newer one with its transactional id (or may not write).
FENCED_CODES: Final = frozenset(
    {
        KafkaError._FENCED,  # noqa: SLF001 - librdkafka's public constant for a local fence
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
#: The group membership or generation is no longer valid.
GROUP_FENCED_CODES: Final = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)
#: The request got no answer in time (or lost its connection on the way).
TIMEOUT_CODES: Final = frozenset(
    {
        KafkaError._TIMED_OUT,  # noqa: SLF001 - public constant
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,  # noqa: SLF001 - public constant
    }
)
#: Worth a retry after a metadata refresh, whether or not librdkafka flags it retriable.
TRANSIENT_CODES: Final = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.NOT_COORDINATOR,
        KafkaError._UNKNOWN_PARTITION,  # noqa: SLF001 - stale local metadata
        KafkaError._TRANSPORT,  # noqa: SLF001 - public constant
        KafkaError._TIMED_OUT,  # noqa: SLF001 - public constant
    }
)


def kafka_error_of(failure: object) -> KafkaError | None:
    """The ``KafkaError`` a failure carries: ``failure`` itself if it is one, the first
    argument of an exception (a ``KafkaException``) that holds one, else None."""
    if isinstance(failure, KafkaError):
        return failure
    if isinstance(failure, BaseException) and failure.args:
        first = failure.args[0]
        if isinstance(first, KafkaError):
            return first
    return None


def has_code(failure: object, *codes: int) -> bool:
    """True when ``failure`` carries a ``KafkaError`` with one of ``codes``."""
    err = kafka_error_of(failure)
    return err is not None and err.code() in codes


def timed_out(failure: object) -> bool:
    """The request got no answer in time: worth retrying while the caller's deadline lasts."""
    err = kafka_error_of(failure)
    return err is not None and err.code() in TIMEOUT_CODES


def transient(failure: object) -> bool:
    """librdkafka says retriable, or it is a leader/coordinator move or a timeout."""
    err = kafka_error_of(failure)
    return err is not None and (err.retriable() or err.code() in TRANSIENT_CODES)


def waited_for_controller(failure: object) -> bool:
    """True when an admin call failed because it never got to the controller."""
    err = kafka_error_of(failure)
    return (
        err is not None
        and err.code() == KafkaError._TIMED_OUT  # noqa: SLF001 - public constant
        and "controller" in err.str().lower()
    )


def translate(exc: KafkaException, what: str) -> TransportError:
    """The seam's error for a failed ``what``: fenced, fatal, group-fenced or plain."""
    err = kafka_error_of(exc)
    if err is None:
        return TransportError(f"{what} failed: {exc}")
    if err.code() in FENCED_CODES:
        return ProducerFencedError(f"{what}: fenced by a newer writer ({err.str()})")
    if err.fatal():
        # Any further call on this client fails (or, in librdkafka, may misbehave): the
        # owner must close it and create a new one, as for a fence.
        return FatalClientError(f"{what}: the Kafka client is in a fatal state ({err.str()})")
    if err.code() in GROUP_FENCED_CODES:
        return GroupFencedError(f"{what}: consumer-group generation is stale ({err.str()})")
    return TransportError(f"{what} failed: {exc}")
