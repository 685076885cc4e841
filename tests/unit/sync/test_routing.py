"""Unit tests for sync.routing: published vectors, reference cross-checks, router behaviour.

Vector sources:
* apache/pulsar pulsar-client/src/test/java/org/apache/pulsar/client/impl/HashTest.java
  ("Same value as C++ client");
* apache/pulsar RoundRobinPartitionMessageRouterImplTest.java and
  SinglePartitionMessageRouterImplTest.java (router scenarios reproduced below);
* apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
  (testMurmur2).
"""

from __future__ import annotations

import itertools
import math
import random
import threading
from collections import Counter

import mmh3
import pytest

import sync.routing as routing
from sync._errors import ConfigurationError, InvalidInputError, PolicySyncError
from sync.routing import (
    CustomPartitionRouter,
    HashingScheme,
    MessageRouter,
    MessageRoutingMode,
    RoundRobinPartitionRouter,
    RoutedMessage,
    RoutingError,
    SinglePartitionRouter,
    TopicMetadata,
    checked_choose,
    java_string_hash,
    kafka_murmur2,
    kafka_partition,
    make_router,
    murmur3_32_hash,
    sign_safe_mod,
)

# --------------------------------------------------------------------------- references
# Deliberately naive transliterations of the Java code, to check the fast versions against.


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def ref_java_hash_code(s: str) -> int:
    """Java String.hashCode(): h = 31*h + c over UTF-16 code units, int32 arithmetic."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        c = (units[i] << 8) | units[i + 1]
        h = _int32(31 * h + c)
    return h


def ref_java_string_hash(s: str) -> int:
    """Pulsar JavaStringHash.makeHash: s.hashCode() & Integer.MAX_VALUE."""
    return ref_java_hash_code(s) & 0x7FFFFFFF


def ref_kafka_murmur2(data: bytes) -> int:
    """Kafka Utils.murmur2, line by line, with Java int semantics."""
    length = len(data)
    seed = _int32(0x9747B28C)
    m = 0x5BD1E995
    r = 24
    h = _int32(seed ^ length)
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = (
            (data[i4 + 0] & 0xFF)
            + ((data[i4 + 1] & 0xFF) << 8)
            + ((data[i4 + 2] & 0xFF) << 16)
            + ((data[i4 + 3] & 0xFF) << 24)
        )
        k = _int32(k)
        k = _int32(k * m)
        k = _int32(k ^ ((k & 0xFFFFFFFF) >> r))  # k >>> r
        k = _int32(k * m)
        h = _int32(h * m)
        h = _int32(h ^ k)
    rem = length % 4
    base = length & ~3
    # switch (length % 4) with fall-through: case 3 -> case 2 -> case 1
    if rem == 3:
        h = _int32(h ^ ((data[base + 2] & 0xFF) << 16))
    if rem >= 2:
        h = _int32(h ^ ((data[base + 1] & 0xFF) << 8))
    if rem >= 1:
        h = _int32(h ^ (data[base] & 0xFF))
        h = _int32(h * m)
    h = _int32(h ^ ((h & 0xFFFFFFFF) >> 13))
    h = _int32(h * m)
    h = _int32(h ^ ((h & 0xFFFFFFFF) >> 15))
    return h


def ref_java_rem(a: int, b: int) -> int:
    """Java's truncating remainder, the sign follows the dividend."""
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def ref_sign_safe_mod(dividend: int, divisor: int) -> int:
    mod = ref_java_rem(dividend, divisor)
    if mod < 0:
        mod += divisor
    return mod


# --------------------------------------------------------------------------- key corpus

_SEED = 20240611


def _random_char(rnd: random.Random) -> str:
    bucket = rnd.random()
    if bucket < 0.35:
        return chr(rnd.randrange(0x20, 0x7F))  # printable ASCII
    if bucket < 0.50:
        return chr(rnd.randrange(0x80, 0x100))  # Latin-1 (ß, ü, ñ ...)
    if bucket < 0.80:
        while True:  # rest of the BMP, never a surrogate code point
            cp = rnd.randrange(0x100, 0x10000)
            if not 0xD800 <= cp <= 0xDFFF:
                return chr(cp)
    return chr(rnd.randrange(0x10000, 0x110000))  # astral: a surrogate pair in UTF-16


def random_keys(count: int, max_len: int = 40) -> list[str]:
    rnd = random.Random(_SEED)
    return ["".join(_random_char(rnd) for _ in range(rnd.randrange(max_len))) for _ in range(count)]


FIXED_KEYS = [
    "",
    "a",
    "key1",
    "ßüñ",
    "日本語",
    "😀",
    "a😀b",
    "𝄞 music",
    "mixed ASCII, ßüñ, 日本語 and 😀",
    "\x00\x7f\x80\xff\u0100\uffff",
    "\U0010ffff",
]


# --------------------------------------------------------------------------- published vectors


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        # HashTest.javaStringHashTest: hashCode() overflows as unsigned int32 ...
        ("keykeykeykeykey1", 434058482),
        # ... and is negative as signed int32.
        ("keykeykey2", 42978643),
    ],
)
def test_java_string_hash_pulsar_vectors(key: str, expected: int) -> None:
    assert java_string_hash(key) == expected
    assert HashingScheme.JavaStringHash.make_hash(key) == expected


def test_java_string_hash_vectors_cover_both_sign_cases() -> None:
    assert ref_java_hash_code("keykeykey2") < 0
    assert ref_java_hash_code("keykeykeykeykey1") > 0


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        # HashTest.murmur3_32HashTest
        ("k1", 2110152746),
        ("k2", 1479966664),
        ("key1", 462881061),
        ("key2", 1936800180),
        ("key01", 39696932),
        ("key02", 751761803),
    ],
)
def test_murmur3_32_hash_pulsar_vectors(key: str, expected: int) -> None:
    assert murmur3_32_hash(key) == expected
    assert HashingScheme.Murmur3_32Hash.make_hash(key) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # UtilsTest.testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_kafka_murmur2_kafka_vectors(data: bytes, expected: int) -> None:
    assert kafka_murmur2(data) == expected
    assert ref_kafka_murmur2(data) == expected  # the reference itself is right
    assert kafka_murmur2(bytearray(data)) == expected
    assert kafka_murmur2(memoryview(data)) == expected


# --------------------------------------------------------------------------- java hash


@pytest.mark.parametrize("key", FIXED_KEYS)
def test_java_string_hash_fixed_keys(key: str) -> None:
    assert java_string_hash(key) == ref_java_string_hash(key)


def test_java_string_hash_known_values() -> None:
    # "key1".hashCode() == 3288498 (small enough to check by hand: k=107, e=101, y=121, 1=49)
    assert java_string_hash("key1") == ((107 * 31 + 101) * 31 + 121) * 31 + 49 == 3288498
    # An astral character hashes as its surrogate pair U+D83D U+DE00.
    assert java_string_hash("😀") == (0xD83D * 31 + 0xDE00)


def test_java_string_hash_random_unicode_keys() -> None:
    for key in random_keys(4000):
        assert java_string_hash(key) == ref_java_string_hash(key), key


@pytest.mark.parametrize("length", [255, 256, 257, 511, 512, 513, 1000, 5000])
@pytest.mark.parametrize("alphabet", ["abcxyz09", "ßüñéàÿ\x80", "ßü日本語😀a", "a\ud800\udfff"])
def test_java_string_hash_long_keys_cross_chunk_boundaries(length: int, alphabet: str) -> None:
    rnd = random.Random(length)
    key = "".join(rnd.choice(alphabet) for _ in range(length))
    # 5000 characters is past CPython's 4300-digit int() limit: chunking must cope.
    assert java_string_hash(key) == ref_java_string_hash(key)


@pytest.mark.parametrize("length", range(1, 30))
def test_java_string_hash_every_short_length(length: int) -> None:
    # Covers the switch between the short-key loop and the translate/int() path.
    for alphabet in ("abc", "ßüñ", "日本語", "😀x", "\ud800a"):
        key = (alphabet * length)[:length]
        assert java_string_hash(key) == ref_java_string_hash(key), key


def test_java_string_hash_surrogates_are_code_units() -> None:
    # A lone surrogate is one Java char; a pair given as two code points equals the
    # astral character, because Java only ever sees UTF-16 units.
    assert java_string_hash("\ud800") == 0xD800
    assert java_string_hash("a\udfffb") == ref_java_string_hash("a\udfffb")
    assert java_string_hash("\ud83d\ude00") == java_string_hash("😀")


def test_java_string_hash_result_range() -> None:
    for key in random_keys(500):
        assert 0 <= java_string_hash(key) <= 0x7FFFFFFF


# --------------------------------------------------------------------------- murmur3


@pytest.mark.parametrize("key", FIXED_KEYS)
def test_murmur3_32_hash_fixed_keys_against_mmh3(key: str) -> None:
    assert murmur3_32_hash(key) == mmh3.hash(key.encode("utf-8"), 0, signed=False) & 0x7FFFFFFF


def test_murmur3_32_hash_random_unicode_keys_against_mmh3() -> None:
    for key in random_keys(4000):
        expected = mmh3.hash(key.encode("utf-8"), 0, signed=False) & 0x7FFFFFFF
        assert murmur3_32_hash(key) == expected, key
        # mmh3 hashes a surrogate-free str as its UTF-8 bytes, signed or not.
        assert mmh3.hash(key, 0) & 0x7FFFFFFF == expected


def test_murmur3_32_hash_encodes_surrogates_like_java() -> None:
    # Java's getBytes(UTF_8) turns an unpaired surrogate into '?'; a pair split across
    # two Python code points is still one character to Java.
    assert murmur3_32_hash("a\ud800b") == murmur3_32_hash("a?b")
    assert murmur3_32_hash("\udc00") == murmur3_32_hash("?")
    assert murmur3_32_hash("\ud83d\ude00") == murmur3_32_hash("😀")


# --------------------------------------------------------------------------- kafka


def test_kafka_murmur2_random_bytes_against_reference() -> None:
    rnd = random.Random(_SEED)
    for _ in range(3000):
        data = rnd.randbytes(rnd.randrange(0, 80))
        assert kafka_murmur2(data) == ref_kafka_murmur2(data), data.hex()


def test_kafka_murmur2_every_tail_length() -> None:
    base = bytes(range(256))
    for n in range(40):
        for data in (base[:n], base[256 - n :], b"\xff" * n):
            assert kafka_murmur2(data) == ref_kafka_murmur2(data), (n, data.hex())


def test_kafka_murmur2_utf8_keys() -> None:
    for key in random_keys(1000):
        data = key.encode("utf-8")
        assert kafka_murmur2(data) == ref_kafka_murmur2(data)


def test_kafka_murmur2_is_signed_int32() -> None:
    values = [kafka_murmur2(bytes([i])) for i in range(256)]
    assert all(-(2**31) <= v < 2**31 for v in values)
    assert any(v < 0 for v in values) and any(v > 0 for v in values)


def test_kafka_partition_matches_built_in_partitioner() -> None:
    rnd = random.Random(_SEED)
    for _ in range(1000):
        data = rnd.randbytes(rnd.randrange(0, 40))
        n = rnd.randrange(1, 200)
        assert kafka_partition(data, n) == (ref_kafka_murmur2(data) & 0x7FFFFFFF) % n
    # toPositive masks the sign bit rather than negating: -973932308 -> 1173551340
    assert kafka_partition(b"21", 1_000_000_000) == (-973932308 & 0x7FFFFFFF) % 1_000_000_000
    assert kafka_partition(b"abc", 1) == 0


@pytest.mark.parametrize("n", [0, -1])
def test_kafka_partition_refuses_partition_count_below_one(n: int) -> None:
    with pytest.raises(ConfigurationError, match="num_partitions"):
        kafka_partition(b"k", n)


# --------------------------------------------------------------------------- sign_safe_mod


@pytest.mark.parametrize(
    ("dividend", "divisor", "expected"),
    [
        (7, 3, 1),
        (-7, 3, 2),  # Java: -7 % 3 == -1, plus 3
        (-6, 3, 0),
        (0, 5, 0),
        (-1, 5, 4),
        (7, -3, 1),  # Java: 7 % -3 == 1
        (-7, -3, -4),  # Java: -7 % -3 == -1, "plus divisor" gives -4: kept bit-exact
        (2**31 - 1, 5, 2),
        (-(2**31), 5, 2),
        (2**63 - 1, 7, (2**63 - 1) % 7),
        (-(2**63), 7, (-(2**63)) % 7),
    ],
)
def test_sign_safe_mod_examples(dividend: int, divisor: int, expected: int) -> None:
    assert sign_safe_mod(dividend, divisor) == expected


def test_sign_safe_mod_against_java_semantics() -> None:
    rnd = random.Random(_SEED)
    for _ in range(5000):
        a = rnd.randrange(-(2**50), 2**50)
        b = rnd.choice([-1, 1]) * rnd.randrange(1, 2**31)
        assert ref_java_rem(a, b) == int(math.fmod(a, b))  # the reference is Java's %
        assert sign_safe_mod(a, b) == ref_sign_safe_mod(a, b)
        if b > 0:
            assert 0 <= sign_safe_mod(a, b) < b


def test_sign_safe_mod_zero_divisor() -> None:
    with pytest.raises(ZeroDivisionError):
        sign_safe_mod(1, 0)


# --------------------------------------------------------------------------- model


def test_topic_metadata_validates_partition_count() -> None:
    assert TopicMetadata(1).num_partitions == 1
    assert TopicMetadata(2**31 - 1).num_partitions == 2**31 - 1
    for bad in (0, -3, 2**31, True, 1.0, "4"):
        with pytest.raises(ConfigurationError):
            TopicMetadata(bad)  # type: ignore[arg-type]


def test_routed_message_has_key() -> None:
    assert not RoutedMessage().has_key
    assert RoutedMessage(key="").has_key  # Java hasKey() is true for an empty key
    assert not RoutedMessage(ordering_key=b"ok").has_key


def test_enums_use_pulsar_names() -> None:
    assert [s.name for s in HashingScheme] == ["JavaStringHash", "Murmur3_32Hash"]
    assert {m.name for m in MessageRoutingMode} == {
        "RoundRobinPartition",
        "SinglePartition",
        "CustomPartition",
    }
    assert HashingScheme("Murmur3_32Hash") is HashingScheme.Murmur3_32Hash


def test_built_in_routers_satisfy_the_protocol() -> None:
    assert isinstance(RoundRobinPartitionRouter(), MessageRouter)
    assert isinstance(SinglePartitionRouter(), MessageRouter)
    assert isinstance(CustomPartitionRouter(lambda m, t: 0), MessageRouter)


# --------------------------------------------------------------------------- round robin

NO_KEY = RoutedMessage()


class FakeClock:
    """A millisecond clock the test moves by hand."""

    def __init__(self, now: int = 0, step: int = 0) -> None:
        self.now = now
        self.step = step

    def __call__(self) -> int:
        current = self.now
        self.now += self.step
        return current


def test_round_robin_defaults_follow_pulsar() -> None:
    router = RoundRobinPartitionRouter()
    assert router.hashing_scheme is HashingScheme.JavaStringHash  # ProducerConfigurationData
    assert router.batching_enabled is True
    assert router.partition_switch_ms == 10  # 10 x batchingMaxPublishDelay of 1 ms
    assert 0 <= router.start_index < 2**31


def test_round_robin_without_key_without_batching() -> None:
    # RoundRobinPartitionMessageRouterImplTest.testChoosePartitionWithoutKey
    router = RoundRobinPartitionRouter(batching_enabled=False, partition_switch_ms=0, start_index=0)
    metadata = TopicMetadata(5)
    assert [router.choose_partition(NO_KEY, metadata) for _ in range(10)] == [
        i % 5 for i in range(10)
    ]


def test_round_robin_counter_starts_at_start_index() -> None:
    router = RoundRobinPartitionRouter(batching_enabled=False, start_index=3)
    metadata = TopicMetadata(4)
    assert [router.choose_partition(NO_KEY, metadata) for _ in range(6)] == [3, 0, 1, 2, 3, 0]


def test_round_robin_counter_wraps_like_a_java_int() -> None:
    router = RoundRobinPartitionRouter(batching_enabled=False, start_index=2**31 - 2)
    metadata = TopicMetadata(7)
    got = [router.choose_partition(NO_KEY, metadata) for _ in range(4)]
    java_ints = [2**31 - 2, 2**31 - 1, -(2**31), -(2**31) + 1]
    assert got == [ref_sign_safe_mod(v, 7) for v in java_ints]


def test_round_robin_with_batching_switches_every_interval() -> None:
    # testChoosePartitionWithoutKeyWithBatching: 1 ms passes per call, switch every 5 ms
    router = RoundRobinPartitionRouter(
        partition_switch_ms=5, start_index=0, clock=FakeClock(step=1)
    )
    metadata = TopicMetadata(5)
    got = [router.choose_partition(NO_KEY, metadata) for _ in range(10)]
    assert got == [0] * 5 + [1] * 5


def test_round_robin_batching_awareness() -> None:
    # testBatchingAwareness: partitionSwitchMs 10, 100 partitions
    clock = FakeClock()
    router = RoundRobinPartitionRouter(partition_switch_ms=10, start_index=0, clock=clock)
    metadata = TopicMetadata(100)
    for i in range(10):
        clock.now = 123450 + i
        assert router.choose_partition(NO_KEY, metadata) == 45
    for i in range(10):
        clock.now = 123460 + i
        assert router.choose_partition(NO_KEY, metadata) == 46


def test_round_robin_large_time_stays_in_range() -> None:
    # testChoosePartitionWithNegativeTime: millis == Integer.MAX_VALUE, start 3
    router = RoundRobinPartitionRouter(
        partition_switch_ms=5, start_index=3, clock=FakeClock(now=2**31 - 1)
    )
    got = router.choose_partition(NO_KEY, TopicMetadata(5))
    assert got == ((2**31 - 1) // 5 + 3) % 5
    assert 0 <= got < 5


def test_round_robin_negative_clock_truncates_like_java() -> None:
    router = RoundRobinPartitionRouter(partition_switch_ms=10, start_index=0, clock=FakeClock(-15))
    # Java: -15 / 10 == -1 (truncation, not floor -2); signSafeMod(-1, 7) == 6
    assert router.choose_partition(NO_KEY, TopicMetadata(7)) == 6


def test_round_robin_switch_interval_from_batching_options() -> None:
    router = RoundRobinPartitionRouter(
        batching_max_publish_delay_ms=3, partition_switch_frequency=4
    )
    assert router.partition_switch_ms == 12
    with pytest.raises(ConfigurationError):
        RoundRobinPartitionRouter(partition_switch_ms=5, partition_switch_frequency=2)
    with pytest.raises(ConfigurationError):
        RoundRobinPartitionRouter(batching_max_publish_delay_ms=0)
    with pytest.raises(ConfigurationError):
        RoundRobinPartitionRouter(partition_switch_frequency=0)
    assert RoundRobinPartitionRouter(partition_switch_ms=-4).partition_switch_ms == 1


def test_round_robin_with_key() -> None:
    # testChoosePartitionWithKey: key.hashCode() % 100
    router = RoundRobinPartitionRouter(HashingScheme.JavaStringHash, clock=FakeClock(step=1))
    metadata = TopicMetadata(100)
    for key in ("key1", "key2"):
        expected = ref_java_hash_code(key) % 100
        assert router.choose_partition(RoutedMessage(key=key), metadata) == expected


def test_keyed_routing_ignores_batching_clock_and_counter() -> None:
    metadata = TopicMetadata(13)
    for scheme in HashingScheme:
        routers: list[MessageRouter] = [
            RoundRobinPartitionRouter(scheme, clock=FakeClock(step=7)),
            RoundRobinPartitionRouter(scheme, batching_enabled=False),
            SinglePartitionRouter(scheme, partition_index=5),
        ]
        for key in random_keys(200):
            expected = sign_safe_mod(scheme.make_hash(key), 13)
            for router in routers:
                assert router.choose_partition(RoutedMessage(key=key), metadata) == expected


def test_ordering_key_does_not_route() -> None:
    # Pulsar's built-in routers only look at hasKey()/getKey(), never the ordering key.
    clock = FakeClock(now=1000)
    router = RoundRobinPartitionRouter(partition_switch_ms=10, start_index=0, clock=clock)
    metadata = TopicMetadata(8)
    assert router.choose_partition(RoutedMessage(ordering_key=b"zzz"), metadata) == 100 % 8


def test_round_robin_counter_is_thread_safe() -> None:
    router = RoundRobinPartitionRouter(batching_enabled=False, start_index=0)
    metadata = TopicMetadata(7)
    per_thread = 7 * 3000
    results: list[list[int]] = [[] for _ in range(8)]

    def work(out: list[int]) -> None:
        out.extend(router.choose_partition(NO_KEY, metadata) for _ in range(per_thread))

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = Counter(itertools.chain.from_iterable(results))
    # No lost or duplicated increments: a perfectly even spread.
    assert counts == {p: 8 * per_thread // 7 for p in range(7)}


def test_round_robin_random_start_spreads_producers() -> None:
    metadata = TopicMetadata(4)
    starts = {
        RoundRobinPartitionRouter(batching_enabled=False).choose_partition(NO_KEY, metadata)
        for _ in range(200)
    }
    assert starts == {0, 1, 2, 3}


# --------------------------------------------------------------------------- single partition


def test_single_partition_without_key() -> None:
    # SinglePartitionMessageRouterImplTest.testChoosePartitionWithoutKey
    router = SinglePartitionRouter(HashingScheme.JavaStringHash, partition_index=1234)
    assert router.choose_partition(NO_KEY, TopicMetadata(2468)) == 1234


def test_single_partition_with_key() -> None:
    # SinglePartitionMessageRouterImplTest.testChoosePartitionWithKey
    router = SinglePartitionRouter(HashingScheme.JavaStringHash, partition_index=1234)
    metadata = TopicMetadata(100)
    for key in ("key1", "key2"):
        expected = ref_java_hash_code(key) % 100
        assert router.choose_partition(RoutedMessage(key=key), metadata) == expected


def test_single_partition_random_choice_is_fixed() -> None:
    router = SinglePartitionRouter()
    assert router.partition_index is None
    metadata = TopicMetadata(6)
    first = router.choose_partition(NO_KEY, metadata)
    assert 0 <= first < 6
    assert router.partition_index == first
    assert {router.choose_partition(NO_KEY, metadata) for _ in range(100)} == {first}


def test_single_partition_given_index_out_of_range_is_refused_by_check() -> None:
    router = SinglePartitionRouter(partition_index=9)
    assert router.choose_partition(NO_KEY, TopicMetadata(4)) == 9  # raw answer, as in Java
    with pytest.raises(RoutingError, match="chose partition 9"):
        checked_choose(router, NO_KEY, TopicMetadata(4))
    with pytest.raises(ConfigurationError):
        SinglePartitionRouter(partition_index=-1)


# --------------------------------------------------------------------------- custom


class SherlockRouter:
    """The 1:2:3:4 router from seed article 003, with a mistake when asked to."""

    def __init__(self, broken: bool = False) -> None:
        self.count = 0
        self.broken = broken

    def choose_partition(self, msg: RoutedMessage, metadata: TopicMetadata) -> int:
        self.count = (self.count + 1) % 10
        if self.broken:
            return metadata.num_partitions
        if self.count == 0:
            return 0
        if self.count < 3:
            return 1
        if self.count < 6:
            return 2
        return 3


def test_custom_router_answers_pass_through() -> None:
    router = make_router(custom=SherlockRouter())
    assert isinstance(router, CustomPartitionRouter)
    metadata = TopicMetadata(4)
    counts = Counter(checked_choose(router, NO_KEY, metadata) for _ in range(1000))
    assert counts == {0: 100, 1: 200, 2: 300, 3: 400}


@pytest.mark.parametrize("bad", [4, 5, -1, 2**40])
def test_custom_router_out_of_range_is_an_error_not_a_modulo(bad: int) -> None:
    router = CustomPartitionRouter(lambda msg, metadata: bad)
    with pytest.raises(RoutingError) as info:
        router.choose_partition(RoutedMessage(key="k"), TopicMetadata(4))
    err = info.value
    assert isinstance(err, InvalidInputError) and isinstance(err, PolicySyncError)
    assert err.partition == bad and err.num_partitions == 4 and err.key == "k"
    assert f"chose partition {bad}" in str(err) and "4 partitions" in str(err)
    assert "<lambda>" in str(err)


def test_custom_router_error_names_the_router_class() -> None:
    router = CustomPartitionRouter(SherlockRouter(broken=True))
    with pytest.raises(RoutingError, match="SherlockRouter chose partition 4"):
        router.choose_partition(NO_KEY, TopicMetadata(4))


@pytest.mark.parametrize("answer", [1.0, "1", None, True])
def test_custom_router_non_int_answer_is_refused(answer: object) -> None:
    router = CustomPartitionRouter(lambda msg, metadata: answer)  # type: ignore[arg-type,return-value]
    with pytest.raises(RoutingError):
        router.choose_partition(NO_KEY, TopicMetadata(4))


def test_custom_router_exception_is_wrapped() -> None:
    def explode(msg: RoutedMessage, metadata: TopicMetadata) -> int:
        raise KeyError("nope")

    with pytest.raises(RoutingError, match="explode failed") as info:
        CustomPartitionRouter(explode).choose_partition(NO_KEY, TopicMetadata(2))
    assert isinstance(info.value.__cause__, KeyError)


def test_checked_choose_refuses_any_router() -> None:
    class Bad:
        def choose_partition(self, msg: RoutedMessage, metadata: TopicMetadata) -> int:
            return -1

    with pytest.raises(RoutingError, match="Bad chose partition -1"):
        checked_choose(Bad(), NO_KEY, TopicMetadata(3))
    assert checked_choose(RoundRobinPartitionRouter(), NO_KEY, TopicMetadata(3)) in range(3)


def test_custom_router_refuses_non_router() -> None:
    with pytest.raises(ConfigurationError):
        CustomPartitionRouter(42)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- make_router


def test_make_router_default_is_round_robin_java_string_hash() -> None:
    router = make_router()
    assert isinstance(router, RoundRobinPartitionRouter)
    assert router.hashing_scheme is HashingScheme.JavaStringHash


def test_make_router_modes_and_options() -> None:
    single = make_router(
        MessageRoutingMode.SinglePartition, HashingScheme.Murmur3_32Hash, partition_index=2
    )
    assert isinstance(single, SinglePartitionRouter)
    assert single.hashing_scheme is HashingScheme.Murmur3_32Hash
    assert single.partition_index == 2
    rr = make_router("RoundRobinPartition", "Murmur3_32Hash", start_index=1, partition_switch_ms=3)
    assert isinstance(rr, RoundRobinPartitionRouter)
    assert (rr.start_index, rr.partition_switch_ms) == (1, 3)
    custom = make_router(MessageRoutingMode.CustomPartition, custom=SherlockRouter())
    assert isinstance(custom, CustomPartitionRouter)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": MessageRoutingMode.CustomPartition}, "needs a custom router"),
        ({"mode": MessageRoutingMode.SinglePartition, "custom": SherlockRouter()}, "custom"),
        ({"mode": MessageRoutingMode.RoundRobinPartition, "custom": SherlockRouter()}, "custom"),
        ({"mode": "Broadcast"}, "unknown message routing mode"),
        ({"hashing_scheme": "BoostHash"}, "unknown hashing scheme"),
        ({"mode": "SinglePartition", "start_index": 1}, "unknown option"),
        ({"batching": True}, "unknown option"),
        ({"custom": SherlockRouter(), "start_index": 1}, "takes no options"),
    ],
)
def test_make_router_refuses_bad_configuration(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make_router(**kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- surface


def test_public_names_are_pinned() -> None:
    assert sorted(routing.__all__) == [
        "CustomPartitionRouter",
        "HashingScheme",
        "MessageRouter",
        "MessageRoutingMode",
        "RoundRobinPartitionRouter",
        "RoutedMessage",
        "RoutingError",
        "SinglePartitionRouter",
        "TopicMetadata",
        "checked_choose",
        "java_string_hash",
        "kafka_murmur2",
        "kafka_partition",
        "make_router",
        "murmur3_32_hash",
        "sign_safe_mod",
    ]
    for name in routing.__all__:
        obj = getattr(routing, name)
        assert obj.__doc__, f"{name} has no docstring"
