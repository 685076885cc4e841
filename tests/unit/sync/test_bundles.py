"""Namespace bundles place topics in hash ranges exactly as Pulsar's NamespaceBundles does."""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from typing import Any, cast

import pytest

from sync._errors import InvalidInputError, InvalidTopicNameError, NotFoundError
from sync.naming._bundles import (
    DEFAULT_NUM_BUNDLES,
    FULL_LOWER,
    FULL_UPPER,
    BundleRange,
    NamespaceBundles,
    SplitAlgorithm,
    topic_hash,
)
from sync.naming._names import NamespaceName, TopicName

NS = NamespaceName("public", "default")
FOUR = [
    "0x00000000_0x40000000",
    "0x40000000_0x80000000",
    "0x80000000_0xc0000000",
    "0xc0000000_0xffffffff",
]


def names(bundles: NamespaceBundles) -> list[str]:
    return [b.name for b in bundles.bundles]


def test_constants() -> None:
    assert (FULL_LOWER, FULL_UPPER, DEFAULT_NUM_BUNDLES) == (0, 4294967295, 4)


# --- topic_hash ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("persistent://public/default/my-topic", 0x2BAD45F7),
        # short and upper-case forms hash as their canonical name
        ("my-topic", 0x2BAD45F7),
        ("public/default/my-topic", 0x2BAD45F7),
        ("PERSISTENT://public/default/my-topic", 0x2BAD45F7),
        # each partition is hashed on its own, suffix included
        ("persistent://public/default/my-topic-partition-0", 0x3D4B4235),
        ("non-persistent://public/default/my-topic", 0x831E214A),
        # UTF-8 bytes of the canonical name
        ("persistent://tenant/ns/\u00e9", 0x8F5BB2C1),
        # Java's getBytes(UTF_8) writes a lone surrogate as "?"
        ("persistent://a/b/x\ud800", 0xA3143E0A),
    ],
)
def test_topic_hash(topic: str, expected: int) -> None:
    assert topic_hash(topic) == expected
    assert topic_hash(TopicName.parse(topic)) == expected


@pytest.mark.parametrize("local_name", ["t", "orders-partition-3", "x y", "\u65e5\u672c"])
def test_topic_hash_is_crc32_of_canonical(local_name: str) -> None:
    topic = TopicName.parse(f"persistent://acme/prod/{local_name}")
    assert topic_hash(topic) == zlib.crc32(topic.canonical.encode("utf-8"))


def test_topic_hash_refuses_invalid_name() -> None:
    with pytest.raises(InvalidTopicNameError, match="Invalid short topic name 'a/b'"):
        topic_hash("a/b")


# --- BundleRange --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lower", "upper", "name"),
    [
        (0, 0x40000000, "0x00000000_0x40000000"),
        (0, FULL_UPPER, "0x00000000_0xffffffff"),
        (0x7FFFFFFF, FULL_UPPER, "0x7fffffff_0xffffffff"),
        (0xA, 0xB, "0x0000000a_0x0000000b"),
    ],
)
def test_bundle_range_name_round_trips(lower: int, upper: int, name: str) -> None:
    bundle = BundleRange(lower, upper)
    assert bundle.name == name
    assert str(bundle) == name
    assert BundleRange.parse(name) == bundle


def test_bundle_range_parse_accepts_upper_case_hex_digits() -> None:
    assert BundleRange.parse("0x0000000A_0x0000000B") == BundleRange(10, 11)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "_",
        "0x00000000",
        "0x0_0x1",
        "00000000_40000000",
        "0x00000000-0x40000000",
        "0X00000000_0x40000000",
        "0x00000000_0x1000000000",
        " 0x00000000_0x40000000",
        "0x00000000_0x40000000 ",
        "0x00000000_0x4000000g",
        "0x+0000000_0x40000000",
        "0x0000_000_0x40000000",
        "0x00000000_0x40000000_0x80000000",
    ],
)
def test_bundle_range_parse_refuses_malformed(name: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(f"Invalid bundle range {name!r}")):
        BundleRange.parse(name)


@pytest.mark.parametrize("name", ["0x40000000_0x00000000", "0x40000000_0x40000000"])
def test_bundle_range_parse_refuses_lower_not_below_upper(name: str) -> None:
    with pytest.raises(InvalidInputError, match="lower bound must be below the upper bound"):
        BundleRange.parse(name)


@pytest.mark.parametrize(
    ("lower", "upper", "message"),
    [
        (5, 5, "lower bound must be below"),
        (6, 5, "lower bound must be below"),
        (-1, 5, "outside the hash range"),
        (0, 2**32, "outside the hash range"),
        (cast(Any, True), 5, "must be an int"),
        (cast(Any, "0"), 5, "must be an int"),
    ],
)
def test_bundle_range_constructor_validates(lower: int, upper: int, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        BundleRange(lower, upper)


@pytest.mark.parametrize(
    ("bundle", "hash_value", "inside"),
    [
        (BundleRange(0, 0x40000000), 0, True),
        (BundleRange(0, 0x40000000), 0x3FFFFFFF, True),
        (BundleRange(0, 0x40000000), 0x40000000, False),
        (BundleRange(0x40000000, 0x80000000), 0x3FFFFFFF, False),
        (BundleRange(0x40000000, 0x80000000), 0x40000000, True),
        (BundleRange(0xC0000000, FULL_UPPER), 0xFFFFFFFE, True),
        # the range that ends the hash space is closed
        (BundleRange(0xC0000000, FULL_UPPER), FULL_UPPER, True),
        (BundleRange(0, FULL_UPPER), FULL_UPPER, True),
        (BundleRange(0, FULL_UPPER), 2**32, False),
    ],
)
def test_bundle_range_contains(bundle: BundleRange, hash_value: int, inside: bool) -> None:
    assert bundle.contains(hash_value) is inside


def test_bundle_ranges_sort_by_lower_bound() -> None:
    ranges = [BundleRange(0x80000000, FULL_UPPER), BundleRange(0, 0x80000000)]
    assert sorted(ranges) == [BundleRange(0, 0x80000000), BundleRange(0x80000000, FULL_UPPER)]


# --- NamespaceBundles construction --------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "boundaries"),
    [
        (1, (0, 0xFFFFFFFF)),
        (2, (0, 0x80000000, 0xFFFFFFFF)),
        (3, (0, 0x55555555, 0xAAAAAAAA, 0xFFFFFFFF)),
        (4, (0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF)),
        (
            7,
            (0, 0x24924924, 0x49249248, 0x6DB6DB6C, 0x92492490, 0xB6DB6DB4, 0xDB6DB6D8, 0xFFFFFFFF),
        ),
    ],
)
def test_default_boundaries(n: int, boundaries: tuple[int, ...]) -> None:
    bundles = NamespaceBundles.default(NS, n)
    assert bundles.boundaries == boundaries
    assert len(bundles.bundles) == n


def test_default_is_four_bundles() -> None:
    bundles = NamespaceBundles.default("public/default")
    assert bundles.namespace == NS
    assert names(bundles) == FOUR


def test_default_sixteen_bundles_ends_at_full_upper() -> None:
    bundles = NamespaceBundles.default(NS, 16)
    assert bundles.boundaries[-2:] == (0xF0000000, 0xFFFFFFFF)
    assert bundles.bundles[1].name == "0x10000000_0x20000000"


@pytest.mark.parametrize("n", [0, -1, 2**31, cast(Any, True), cast(Any, 1.5), cast(Any, "4")])
def test_default_refuses_bad_count(n: int) -> None:
    with pytest.raises(InvalidInputError, match="Invalid number of bundles"):
        NamespaceBundles.default(NS, n)


def test_from_boundaries() -> None:
    bundles = NamespaceBundles.from_boundaries("a/b", [0, 0x10, 0x7FFFFFFF, FULL_UPPER])
    assert bundles.namespace == NamespaceName("a", "b")
    assert bundles.boundaries == (0, 0x10, 0x7FFFFFFF, FULL_UPPER)
    assert names(bundles) == [
        "0x00000000_0x00000010",
        "0x00000010_0x7fffffff",
        "0x7fffffff_0xffffffff",
    ]
    assert bundles == NamespaceBundles(NamespaceName("a", "b"), bundles.boundaries)


@pytest.mark.parametrize(
    ("boundaries", "message"),
    [
        ([], "need at least 2"),
        ([0], "need at least 2"),
        ([FULL_UPPER], "need at least 2"),
        ([0, 5], "must start at 0x00000000 and end at 0xffffffff"),
        ([1, FULL_UPPER], "must start at 0x00000000 and end at 0xffffffff"),
        ([0, 5, 5, FULL_UPPER], "strictly increasing, but 0x00000005 is followed by 0x00000005"),
        ([0, 9, 5, FULL_UPPER], "strictly increasing, but 0x00000009 is followed by 0x00000005"),
        ([0, FULL_UPPER, FULL_UPPER], "strictly increasing"),
        ([0, 2**32], "outside the hash range"),
        ([0, -1, FULL_UPPER], "outside the hash range"),
        ([0, cast(Any, "5"), FULL_UPPER], "must be an int"),
    ],
)
def test_from_boundaries_refuses(boundaries: list[int], message: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        NamespaceBundles.from_boundaries(NS, boundaries)


def test_from_boundaries_refuses_bad_namespace() -> None:
    with pytest.raises(InvalidTopicNameError, match="V1 names"):
        NamespaceBundles.from_boundaries("a/b/c", [0, FULL_UPPER])
    with pytest.raises(InvalidInputError, match="must be a NamespaceName"):
        NamespaceBundles(cast(Any, "a/b"), (0, FULL_UPPER))


def test_namespace_bundles_are_frozen() -> None:
    bundles = NamespaceBundles.default(NS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        bundles.boundaries = (0, FULL_UPPER)  # type: ignore[misc]


# --- find ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hash_value", "bundle"),
    [
        (0x00000000, "0x00000000_0x40000000"),
        (0x2BAD45F7, "0x00000000_0x40000000"),
        (0x3FFFFFFF, "0x00000000_0x40000000"),
        # an interior boundary belongs to the bundle starting there
        (0x40000000, "0x40000000_0x80000000"),
        (0x7FFFFFFF, "0x40000000_0x80000000"),
        (0x80000000, "0x80000000_0xc0000000"),
        (0xC0000000, "0xc0000000_0xffffffff"),
        (0xFFFFFFFE, "0xc0000000_0xffffffff"),
        # Pulsar throws for exactly 0xffffffff; it belongs to the last bundle
        (0xFFFFFFFF, "0xc0000000_0xffffffff"),
    ],
)
def test_find(hash_value: int, bundle: str) -> None:
    found = NamespaceBundles.default(NS).find(hash_value)
    assert found.name == bundle
    assert found.contains(hash_value)


@pytest.mark.parametrize("hash_value", [0, 0x7FFFFFFF, 0xFFFFFFFF])
def test_find_single_bundle(hash_value: int) -> None:
    assert NamespaceBundles.default(NS, 1).find(hash_value) == BundleRange(0, FULL_UPPER)


@pytest.mark.parametrize("hash_value", [-1, 2**32, 2**64])
def test_find_refuses_out_of_range(hash_value: int) -> None:
    with pytest.raises(InvalidInputError, match="outside the hash range"):
        NamespaceBundles.default(NS).find(hash_value)


@pytest.mark.parametrize(
    "topic",
    [
        "persistent://public/default/my-topic",
        "my-topic",
        TopicName.parse("public/default/my-topic"),
    ],
)
def test_find_topic_example(topic: TopicName | str) -> None:
    assert NamespaceBundles.default(NS).find_topic(topic).name == "0x00000000_0x40000000"


@pytest.mark.parametrize("n", [1, 4, 7, 64])
def test_find_topic_agrees_with_hash(n: int) -> None:
    bundles = NamespaceBundles.default(NS, n)
    for i in range(200):
        topic = TopicName.parse(f"persistent://public/default/t{i}-partition-{i % 5}")
        found = bundles.find_topic(topic)
        assert found == bundles.find(topic_hash(topic))
        assert found.contains(topic_hash(topic))
        assert found in bundles.bundles


def test_find_topic_refuses_other_namespace() -> None:
    with pytest.raises(InvalidInputError, match="is in namespace a/b, not public/default"):
        NamespaceBundles.default(NS).find_topic("persistent://a/b/c")


def test_find_topic_refuses_invalid_name() -> None:
    with pytest.raises(InvalidTopicNameError, match="Invalid topic domain: 'http'"):
        NamespaceBundles.default(NS).find_topic("http://public/default/x")


# --- split: range_equally_divide ----------------------------------------------------------


def test_split_full_bundle_cuts_at_7fffffff() -> None:
    full = NamespaceBundles.default(NS, 1)
    split = full.split("0x00000000_0xffffffff", "range_equally_divide")
    assert names(split) == ["0x00000000_0x7fffffff", "0x7fffffff_0xffffffff"]
    assert split.boundaries == (0, 0x7FFFFFFF, FULL_UPPER)
    # the original is unchanged
    assert full.boundaries == (0, FULL_UPPER)


@pytest.mark.parametrize(
    ("bundle", "cut"),
    [
        ("0x00000000_0x40000000", 0x20000000),
        ("0x40000000_0x80000000", 0x60000000),
        ("0x80000000_0xc0000000", 0xA0000000),
        ("0xc0000000_0xffffffff", 0xDFFFFFFF),
    ],
)
def test_split_range_equally_divide(bundle: str, cut: int) -> None:
    four = NamespaceBundles.default(NS)
    split = four.split(BundleRange.parse(bundle), SplitAlgorithm.RANGE_EQUALLY_DIVIDE)
    assert split.boundaries == tuple(sorted((*four.boundaries, cut)))
    assert len(split.bundles) == 5
    assert split.namespace == NS


def test_split_range_ignores_topic_hashes() -> None:
    four = NamespaceBundles.default(NS)
    split = four.split(FOUR[0], "range_equally_divide", [1, 2, 3])
    assert split.boundaries[1] == 0x20000000


def test_split_twice() -> None:
    split = NamespaceBundles.default(NS, 1).split("0x00000000_0xffffffff", "range_equally_divide")
    again = split.split("0x7fffffff_0xffffffff", "range_equally_divide")
    assert names(again) == [
        "0x00000000_0x7fffffff",
        "0x7fffffff_0xbfffffff",
        "0xbfffffff_0xffffffff",
    ]


def test_split_narrowest_bundles() -> None:
    bundles = NamespaceBundles.from_boundaries(NS, [0, 1, 3, FULL_UPPER])
    with pytest.raises(InvalidInputError, match="split point 0x00000000 equals a bundle boundary"):
        bundles.split("0x00000000_0x00000001", "range_equally_divide")
    assert bundles.split("0x00000001_0x00000003", "range_equally_divide").boundaries == (
        0,
        1,
        2,
        3,
        FULL_UPPER,
    )


@pytest.mark.parametrize(
    "bundle",
    [
        "0x00000000_0x80000000",
        "0x00000000_0x20000000",
        "0x40000000_0xffffffff",
        "0x10000000_0x40000000",
        BundleRange(0, FULL_UPPER),
    ],
)
def test_split_refuses_unknown_bundle(bundle: BundleRange | str) -> None:
    with pytest.raises(NotFoundError, match="is not a bundle of namespace public/default"):
        NamespaceBundles.default(NS).split(bundle, "range_equally_divide")


def test_split_refuses_malformed_bundle_name() -> None:
    with pytest.raises(InvalidInputError, match="Invalid bundle range"):
        NamespaceBundles.default(NS).split("0x0_0x40000000", "range_equally_divide")


@pytest.mark.parametrize(
    "algorithm", ["", "RANGE_EQUALLY_DIVIDE", "specified_positions_divide", "range"]
)
def test_split_refuses_unknown_algorithm(algorithm: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        NamespaceBundles.default(NS).split(FOUR[0], algorithm)
    assert str(info.value) == (
        f"Unknown bundle split algorithm {algorithm!r}; valid algorithms: "
        "range_equally_divide, topic_count_equally_divide"
    )


# --- split: topic_count_equally_divide ----------------------------------------------------


@pytest.mark.parametrize(
    ("hashes", "cut"),
    [
        ([100, 200], 150),
        ([10, 20, 30], 15),
        ([10, 20, 30, 40], 25),
        ([40, 10, 30, 20], 25),
        ([10, 20, 30, 40, 50], 25),
        ([7, 7, 7], 7),
        ([1, 2, 3, 4, 5, 6], 3),
        ([0x10, 0xFFFFFFFF], 0x80000007),
    ],
)
def test_split_topic_count(hashes: list[int], cut: int) -> None:
    full = NamespaceBundles.default(NS, 1)
    split = full.split("0x00000000_0xffffffff", "topic_count_equally_divide", hashes)
    assert split.boundaries == (0, cut, FULL_UPPER)


def test_split_topic_count_only_counts_hashes_in_the_bundle() -> None:
    four = NamespaceBundles.default(NS)
    hashes = [5, 0x40000010, 0x40000020, 0x90000000, 0x80000000]
    split = four.split(FOUR[1], SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, hashes)
    assert split.boundaries == (0, 0x40000000, 0x40000018, 0x80000000, 0xC0000000, FULL_UPPER)


def test_split_topic_count_balances_real_topics() -> None:
    topics = [TopicName.parse(f"persistent://public/default/t{i}") for i in range(10)]
    full = NamespaceBundles.default(NS, 1)
    split = full.split(
        "0x00000000_0xffffffff", "topic_count_equally_divide", (topic_hash(t) for t in topics)
    )
    placed = [split.find_topic(t) for t in topics]
    assert [placed.count(b) for b in split.bundles] == [5, 5]


@pytest.mark.parametrize("hashes", [[], [0x50000000], [1, 2, 0x50000000]])
def test_split_topic_count_needs_two_topics_in_the_bundle(hashes: list[int]) -> None:
    four = NamespaceBundles.default(NS)
    with pytest.raises(InvalidInputError, match=r"holds [01] topic\(s\)"):
        four.split(FOUR[1], "topic_count_equally_divide", hashes)


def test_split_topic_count_refuses_cut_on_boundary() -> None:
    four = NamespaceBundles.default(NS)
    with pytest.raises(InvalidInputError, match="split point 0x40000000 equals a bundle boundary"):
        four.split(FOUR[1], "topic_count_equally_divide", [0x40000000, 0x40000001])


@pytest.mark.parametrize("bad", [-1, 2**32, cast(Any, "0x10")])
def test_split_topic_count_refuses_bad_hash(bad: int) -> None:
    with pytest.raises(InvalidInputError, match="topic hash"):
        NamespaceBundles.default(NS).split(FOUR[0], "topic_count_equally_divide", [1, 2, bad])


# --- to_json ------------------------------------------------------------------------------


def test_to_json_default() -> None:
    assert NamespaceBundles.default(NS).to_json() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }


def test_to_json_single_bundle_serialises_like_pulsar() -> None:
    data = NamespaceBundles.default(NS, 1).to_json()
    assert json.dumps(data) == '{"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}'


def test_to_json_after_split() -> None:
    split = NamespaceBundles.default(NS).split(FOUR[3], "range_equally_divide")
    assert split.to_json() == {
        "boundaries": [
            "0x00000000",
            "0x40000000",
            "0x80000000",
            "0xc0000000",
            "0xdfffffff",
            "0xffffffff",
        ],
        "numBundles": 5,
    }
