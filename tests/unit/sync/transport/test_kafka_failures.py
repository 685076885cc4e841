"""The one reader of librdkafka's failures, with every shape confluent-kafka hands over:
a ``KafkaException`` wrapping a ``KafkaError``, a bare ``KafkaError`` (not an exception,
no ``args``: ListConsumerGroups' ``errors``, a message's ``error()``), a
``KafkaException`` without args or with a plain message, and anything else."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from sync._errors import FatalClientError, GroupFencedError, ProducerFencedError, TransportError
from sync.transport._kafka_failures import (
    has_code,
    kafka_error_of,
    timed_out,
    transient,
    waited_for_controller,
)
from sync.transport._kafka_failures import translate as _translate

TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for controller")  # noqa: SLF001
REQUEST_TIMED_OUT = KafkaError(KafkaError.REQUEST_TIMED_OUT, "request timed out")
NOT_LEADER = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "moved")
RETRIABLE = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading", retriable=True)
DENIED = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied")
#: Failures that carry no KafkaError at all.
NO_ERROR: list[object] = [
    KafkaException(),
    KafkaException("a plain message"),
    ValueError("not Kafka"),
    RuntimeError(),
    None,
    "text",
    KafkaError,  # the class, not an error
]


@pytest.mark.parametrize("err", [TIMED_OUT, NOT_LEADER, DENIED])
def test_the_error_is_found_in_both_shapes(err: KafkaError) -> None:
    assert kafka_error_of(err) is err
    assert kafka_error_of(KafkaException(err)) is err
    assert kafka_error_of(KafkaException(err, "extra")) is err


@pytest.mark.parametrize("failure", NO_ERROR, ids=repr)
def test_a_failure_without_a_kafka_error_is_none_never_a_crash(failure: object) -> None:
    assert kafka_error_of(failure) is None
    assert not timed_out(failure)
    assert not transient(failure)
    assert not waited_for_controller(failure)
    assert not has_code(failure, KafkaError._TIMED_OUT)  # noqa: SLF001


@pytest.mark.parametrize("wrap", [lambda e: e, KafkaException], ids=["bare", "raised"])
def test_classifiers_answer_alike_for_both_shapes(wrap: type) -> None:
    transport = KafkaError(KafkaError._TRANSPORT, "broker down")  # noqa: SLF001
    assert timed_out(wrap(TIMED_OUT)) and timed_out(wrap(REQUEST_TIMED_OUT))
    assert timed_out(wrap(transport))
    assert not timed_out(wrap(NOT_LEADER)) and not timed_out(wrap(DENIED))
    assert transient(wrap(NOT_LEADER)) and transient(wrap(RETRIABLE)) and transient(wrap(TIMED_OUT))
    assert not transient(wrap(DENIED))
    assert waited_for_controller(wrap(TIMED_OUT))
    assert not waited_for_controller(wrap(REQUEST_TIMED_OUT))
    assert has_code(wrap(DENIED), KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    assert has_code(wrap(DENIED), KafkaError.UNKNOWN_TOPIC_OR_PART, DENIED.code())
    assert not has_code(wrap(DENIED), KafkaError.UNKNOWN_TOPIC_OR_PART)


def test_a_listings_errors_are_bare_kafka_errors() -> None:
    # What list_groups checks: "all timed out" over ListConsumerGroupsResult.errors.
    assert all(map(timed_out, [TIMED_OUT, REQUEST_TIMED_OUT]))
    assert not all(map(timed_out, [TIMED_OUT, DENIED]))


def test_translate_maps_every_shape_of_kafka_exception() -> None:
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced"))  # noqa: SLF001
    assert isinstance(_translate(fenced, "commit"), ProducerFencedError)
    fatal = KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "x", fatal=True))
    assert isinstance(_translate(fatal, "produce"), FatalClientError)
    stale = KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION, "stale"))
    assert isinstance(_translate(stale, "commit"), GroupFencedError)
    for plain in (KafkaException(), KafkaException("boom"), KafkaException(DENIED)):
        translated = _translate(plain, "call")
        assert type(translated) is TransportError
        assert str(translated).startswith("call failed")
