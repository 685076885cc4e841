"""Topic auto-creation rules: broker defaults, the namespace override, Pulsar's validation."""

from __future__ import annotations

from typing import Any

import pytest

from sync.errors import ConfigurationError
from sync.messaging import AutoTopicCreation, TopicType, validate_override


def test_pulsar_defaults() -> None:
    rule = AutoTopicCreation()
    assert (rule.allow, rule.topic_type, rule.default_num_partitions) == (
        True, TopicType.NON_PARTITIONED, 1
    )  # fmt: skip
    assert rule.partitions == 0
    assert AutoTopicCreation(True, TopicType.PARTITIONED, 3).partitions == 3
    with pytest.raises(ConfigurationError):
        AutoTopicCreation(default_num_partitions=0)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (None, AutoTopicCreation()),
        ({"allowAutoTopicCreation": False}, AutoTopicCreation(allow=False)),
        ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 4},
         AutoTopicCreation(True, TopicType.PARTITIONED, 4)),
        ({"allowAutoTopicCreation": True, "topicType": "non-partitioned",
          "defaultNumPartitions": None},
         AutoTopicCreation(True, TopicType.NON_PARTITIONED, 1)),
    ],
)  # fmt: skip
def test_the_namespace_override_wins_whole(override: Any, expected: AutoTopicCreation) -> None:
    assert AutoTopicCreation().with_override(override) == expected
    broker_off = AutoTopicCreation(allow=False)
    if override is not None:
        assert broker_off.with_override(override).allow == expected.allow


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2},
         None),
        ({"allowAutoTopicCreation": True, "topicType": "non-partitioned"}, None),
        ({"allowAutoTopicCreation": False, "topicType": "whatever"}, None),
        ({"allowAutoTopicCreation": "yes"}, None),  # a type error: the body check answers
        ({"allowAutoTopicCreation": True}, "Unknown topic type [null]"),
        ({"allowAutoTopicCreation": True, "topicType": "x"}, "Unknown topic type [x]"),
        ({"allowAutoTopicCreation": True, "topicType": "partitioned"},
         "[defaultNumPartitions] cannot be null when the type is partitioned."),
        ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0},
         "[defaultNumPartitions] cannot be less than 1 for partition type."),
        ({"allowAutoTopicCreation": True, "topicType": "non-partitioned",
          "defaultNumPartitions": 1},
         "[defaultNumPartitions] is not allowed to be set when the type is non-partition."),
        (None, "[AutoTopicCreationOverride] can not be null"),
    ],
)  # fmt: skip
def test_validation_answers_as_pulsar(value: Any, detail: str | None) -> None:
    assert validate_override(value) == detail
