from __future__ import annotations

import random

import pytest

from sync._errors import InvalidTopicNameError
from sync.naming._kafka_names import KAFKA_TOPIC_MAX_LEN, kafka_topic_of, pulsar_topic_of
from sync.naming._names import TopicName


@pytest.mark.parametrize(
    ("pulsar", "kafka"),
    [
        ("persistent://public/default/orders", "p.public.default.orders"),
        ("non-persistent://t/ns/a.b_c", "np.t.ns.a_2eb_5fc"),
        ("persistent://t=1/n:s/x-partition-3", "p.t_3d1.n_3as.x"),
        ("persistent://t/ns/日本", "p.t.ns._e6_97_a5_e6_9c_ac"),
    ],
)
def test_known_mappings(pulsar: str, kafka: str) -> None:
    assert kafka_topic_of(TopicName.parse(pulsar)) == kafka
    assert pulsar_topic_of(kafka) == TopicName.parse(pulsar).base


def test_round_trip_on_random_names() -> None:
    rng = random.Random(7)
    alphabet = "abcXYZ019-_.:=~ é日😀/%"
    for _ in range(2000):
        local = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))).strip() or "x"
        local = local.replace("/", "s")
        topic = TopicName.parse(
            f"persistent://tenant_{rng.randint(0, 9)}/ns.{rng.randint(0, 9)}/{local}"
        )
        mapped = kafka_topic_of(topic)
        assert all(c.isascii() and (c.isalnum() or c in "._-") for c in mapped)
        assert pulsar_topic_of(mapped) == topic.base


@pytest.mark.parametrize("bad", ["orders", "x.t.ns.a", "p.t.ns", "p.t.ns.a_zz", "p.t.ns.a!"])
def test_rejects_foreign_names(bad: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        pulsar_topic_of(bad)


def test_too_long_is_refused_clearly() -> None:
    with pytest.raises(InvalidTopicNameError, match="Kafka allows 249"):
        kafka_topic_of(TopicName.parse("persistent://t/ns/" + "x" * KAFKA_TOPIC_MAX_LEN))
