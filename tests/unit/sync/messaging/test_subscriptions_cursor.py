"""Pieces of the subscription engine on their own: the durable ack set, rate limiting,
Key_Shared's ring and Failover's choice."""

from __future__ import annotations

import base64
import random
from typing import cast

import mmh3
import pytest

from sync.messaging import (
    Consumer,
    RateSpec,
    TopicLimits,
    decode_ack_ranges,
    encode_ack_ranges,
)
from sync.messaging._cursor import Entry, PartitionCursor, decode_ack_state, encode_ack_state
from sync.messaging._ratelimit import RateLimiter, acquire_all
from sync.messaging._selectors import (
    KeySharedSelector,
    failover_active,
    message_sticky_hash,
    sticky_key_hash,
)
from sync.messaging._types import SubscriptionType
from sync.messaging.headers import HEADER_KEY_B64, HEADER_ORDERING_KEY
from sync.routing import murmur3_32_hash


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Named:
    def __init__(self, name: str, seq: int) -> None:
        self.name = name
        self.seq = seq


def named(name: str, seq: int) -> Consumer:
    """A stand-in with the two attributes selectors read."""
    return cast(Consumer, _Named(name, seq))


def _entry(offset: int) -> Entry:
    return Entry(0, offset, None, b"x", None, 0)


# ------------------------------------------------------------------ ack-set encoding


def test_ack_ranges_round_trip_raw_and_compressed() -> None:
    sparse = [(12, 13), (20, 25), (1000, 1001)]
    text, kept = encode_ack_ranges(10, sparse, 4000)
    assert kept == 3 and text.startswith("ps1:")
    assert decode_ack_ranges(10, text) == sparse
    regular = [(10 + 2 * i, 11 + 2 * i) for i in range(2000)]  # every other offset
    text, kept = encode_ack_ranges(9, regular, 4000)
    assert kept == 2000 and len(text) < 200  # zlib folds the pattern
    assert decode_ack_ranges(9, text) == regular


def test_ack_ranges_that_do_not_fit_keep_the_prefix_nearest_the_offset() -> None:
    rng = random.Random(7)
    ranges, pos = [], 0
    for _ in range(5000):
        start = pos + rng.randint(1, 1000)
        pos = start + rng.randint(1, 50)
        ranges.append((start, pos))
    text, kept = encode_ack_ranges(0, ranges, 1000)
    assert 0 < kept < 5000 and len(text) <= 1000
    assert decode_ack_ranges(0, text) == ranges[:kept]
    assert encode_ack_ranges(0, [], 100) == ("", 0)


@pytest.mark.parametrize("junk", ["", "xyz", "ps1:!!!", "ps1:AAAA", "ps1:" + "_" * 10])
def test_unreadable_metadata_means_no_skips(junk: str) -> None:
    assert decode_ack_ranges(5, junk) == []


# ------------------------------------------------------------------ cursor


def test_cursor_commits_first_unacked_offset_and_the_acked_holes() -> None:
    cursor = PartitionCursor(0, 5)
    for offset in range(5, 12):
        assert cursor.accept(offset)
        cursor.add(_entry(offset))
    for offset in (5, 6, 8, 10, 11):
        assert cursor.ack(offset) is not None
    assert cursor.ack(8) is None  # twice is a no-op
    offset, metadata, dropped = cursor.commit_point(4000)
    assert (offset, dropped) == (7, 0)
    assert decode_ack_ranges(7, metadata) == [(8, 9), (10, 12)]
    assert cursor.is_acked(8) and not cursor.is_acked(9) and cursor.is_acked(6)


def test_cursor_restored_from_metadata_skips_acked_and_keeps_unread_ranges() -> None:
    text, _ = encode_ack_ranges(7, [(8, 9), (10, 12), (20, 30)], 4000)
    cursor = PartitionCursor(0, 7, text)
    delivered = [o for o in range(7, 15) if cursor.accept(o)]
    assert delivered == [7, 9, 12, 13, 14]
    assert not cursor.accept(3)  # below the read position: a duplicate fetch
    for o in delivered:
        cursor.add(_entry(o))
    cursor.ack(7)
    offset, metadata, _ = cursor.commit_point(4000)
    # 8 acked earlier, 9 open, 10-11 acked, 12-14 open, 20-29 still to be read and acked
    assert offset == 9
    assert decode_ack_ranges(9, metadata) == [(10, 12), (20, 30)]
    assert cursor.is_acked(25) and not cursor.is_acked(15)


def test_cursor_with_nothing_outstanding_commits_the_read_position() -> None:
    cursor = PartitionCursor(1, 0)
    for offset in (0, 2, 3):  # 1 is a gap (e.g. a transaction marker)
        cursor.accept(offset)
        cursor.add(_entry(offset))
        cursor.ack(offset)
    assert cursor.commit_point(4000) == (4, "", 0)


# ------------------------------------------------------------------ batch-index acks


def _batch_entry(offset: int, count: int) -> Entry:
    entry = _entry(offset)
    entry.count = count
    entry.stored_entry = True
    return entry


def test_ack_state_round_trips_ranges_and_partial_entries() -> None:
    ranges = [(12, 13), (20, 25)]
    partials = [(10, 5, 0b10011), (13, 1000, (1 << 999) | 1), (30, 3, 0b010)]
    text, kept, kept_partials = encode_ack_state(10, ranges, partials, 4000)
    assert (kept, kept_partials) == (2, 3) and text.startswith("ps2:")
    assert decode_ack_state(10, text) == (ranges, partials)
    assert decode_ack_ranges(10, text) == ranges  # readers of ranges read ps2 too
    # Without partial entries the old version is written: older sidecars keep reading it.
    text, _, _ = encode_ack_state(10, ranges, [], 4000)
    assert text.startswith("ps1:") and text == encode_ack_ranges(10, ranges, 4000)[0]
    assert decode_ack_state(10, text) == (ranges, [])
    assert encode_ack_state(0, [], [], 100) == ("", 0, 0)
    # 1,000 messages with every other one acknowledged: runs compress.
    many = [(o, 1000, int("01" * 500, 2)) for o in range(100, 2100, 2)]
    text, _, kept_partials = encode_ack_state(100, [], many, 4000)
    assert kept_partials == len(many) and len(text) < 4000
    assert decode_ack_state(100, text) == ([], many)


def test_ack_state_that_does_not_fit_keeps_the_prefix_in_offset_order() -> None:
    rng = random.Random(3)
    ranges, partials, pos = [], [], 0
    for i in range(600):
        start = pos + rng.randint(2, 30)
        if i % 2:
            ranges.append((start, start + rng.randint(1, 5)))
            pos = ranges[-1][1]
        else:
            partials.append((start, 100, rng.getrandbits(99) | 1))
            pos = start + 1
    text, kept, kept_partials = encode_ack_state(0, ranges, partials, 1500)
    assert len(text) <= 1500 and 0 < kept < len(ranges) and 0 < kept_partials < len(partials)
    got_ranges, got_partials = decode_ack_state(0, text)
    assert (got_ranges, got_partials) == (ranges[:kept], partials[:kept_partials])
    # Nothing kept lies beyond anything dropped: one prefix of both lists in offset order.
    last_kept = max(got_ranges[-1][0], got_partials[-1][0])
    first_dropped = min(ranges[kept][0], partials[kept_partials][0])
    assert last_kept < first_dropped


@pytest.mark.parametrize(
    "junk",
    [
        "ps2:AAAA",
        # a bit set larger than its entry (3 messages, index 3 acknowledged)
        "ps2:" + base64.urlsafe_b64encode(b"\x00\x00\x01\x00\x03\x01\x08").decode().rstrip("="),
        # a bit set that runs past the end
        "ps2:" + base64.urlsafe_b64encode(b"\x00\x00\x01\x00\x03\x05\x01").decode().rstrip("="),
    ],
)
def test_unreadable_ps2_metadata_means_no_skips(junk: str) -> None:
    assert decode_ack_state(5, junk) == ([], [])


def test_cursor_keeps_acked_indexes_and_acks_an_entry_once_all_are() -> None:
    cursor = PartitionCursor(0, 0)
    for offset in range(3):
        cursor.accept(offset)
        cursor.add(_batch_entry(offset, 4))
    entry, newly = cursor.ack_indexes(1, 0b0101)
    assert entry is not None and newly == 2 and entry.unacked == 2 and not entry.acked
    assert cursor.ack_indexes(1, 0b0001)[1] == 0  # acked already: nothing new
    offset, metadata, dropped = cursor.commit_point(4000)
    assert (offset, dropped) == (0, 0) and metadata.startswith("ps2:")
    assert decode_ack_state(0, metadata) == ([], [(1, 4, 0b0101)])
    entry, newly = cursor.ack_indexes(1, 0b1010)  # the rest: the entry is acked whole
    assert entry is not None and newly == 2 and entry.acked and 1 not in cursor.entries
    cursor.ack(0)
    offset, metadata, _ = cursor.commit_point(4000)
    assert offset == 2 and metadata == ""
    assert cursor.ack_indexes(1, 0b1) == (None, 0)  # unknown now


def test_cursor_restored_from_ps2_gives_entries_their_acked_indexes_back() -> None:
    text, _, _ = encode_ack_state(7, [(8, 9)], [(9, 4, 0b0011), (12, 2, 0b01)], 4000)
    cursor = PartitionCursor(0, 7, text + "~d20")
    read = [o for o in range(7, 11) if cursor.accept(o)]
    assert read == [7, 9, 10]
    entries = {o: _batch_entry(o, 4) for o in read}
    for entry in entries.values():
        cursor.add(entry)
    assert entries[9].acked_bits == 0b0011 and entries[9].unacked == 2
    assert entries[7].acked_bits == 0 == entries[10].acked_bits
    cursor.ack(7)
    # 12 was not read again yet: its indexes are committed again as they were.
    offset, metadata, _ = cursor.commit_point(4000)
    assert offset == 9
    assert decode_ack_state(9, metadata) == ([], [(9, 4, 0b0011), (12, 2, 0b01)])


def test_a_restored_partial_entry_of_another_size_is_ignored() -> None:
    text, _, _ = encode_ack_state(0, [], [(0, 4, 0b0011)], 4000)
    cursor = PartitionCursor(0, 0, text)
    assert cursor.accept(0)
    entry = _batch_entry(0, 5)  # not the entry that was acknowledged: deliver it whole
    cursor.add(entry)
    assert entry.acked_bits == 0


# ------------------------------------------------------------------ rate limiting


def test_rate_limiter_bursts_one_period_then_refills_continuously() -> None:
    clock = Clock()
    lim = RateLimiter(RateSpec(msgs=3, period_s=2.0), clock)
    assert [acquire_all([lim], 10) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = acquire_all([lim], 10)
    assert wait == pytest.approx(2.0 / 3)
    clock.now += wait
    assert acquire_all([lim], 10) == 0.0


def test_an_entry_of_many_messages_passes_once_and_takes_them_all() -> None:
    clock = Clock()
    lim = RateLimiter(RateSpec(msgs=10, period_s=1.0), clock)
    assert acquire_all([lim], 100, 25) == 0.0  # one entry of 25: passes, goes to -15
    wait = acquire_all([lim], 10)
    assert wait == pytest.approx(1.6)  # back to one whole token: 16 of 10 per second
    clock.now += wait + 1e-9  # past the float's rounding
    assert acquire_all([lim], 10) == 0.0


def test_byte_limit_lets_an_oversized_message_through_when_full() -> None:
    clock = Clock()
    lim = RateLimiter(RateSpec(nbytes=100), clock)
    assert acquire_all([lim], 500) == 0.0  # bucket full: passes, goes negative
    wait = acquire_all([lim], 10)
    assert wait == pytest.approx(4.1)


def test_all_or_nothing_across_limiters_and_live_update() -> None:
    clock = Clock()
    msgs = RateLimiter(RateSpec(msgs=1), clock)
    free = RateLimiter(RateSpec(), clock)
    bytes_ = RateLimiter(RateSpec(nbytes=5), clock)
    assert acquire_all([msgs, free, bytes_], 5) == 0.0
    assert acquire_all([msgs, bytes_], 1) > 0.0
    clock.now += 0.5
    assert acquire_all([msgs, bytes_], 1) > 0.0  # message bucket half full: nothing taken
    bytes_.update(RateSpec(nbytes=5))  # same spec: no reset
    msgs.update(RateSpec())  # unlimited now
    assert acquire_all([msgs, bytes_], 1) == 0.0


def test_negative_rates_in_policies_are_unlimited() -> None:
    """Pulsar's -1 (or any negative rate) throttles nothing; the other component still does."""
    minus_one = {"dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": -1,
                 "relativeToPublishRate": False, "ratePeriodInSecond": 1}  # fmt: skip
    limits = TopicLimits.from_policies(
        {
            "publishRate": {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1},
            "dispatchRate": minus_one,
            "subscriptionDispatchRate": {**minus_one, "dispatchThrottlingRateInByte": 4096},
            "subscribeRate": {"subscribeThrottlingRatePerConsumer": -2, "ratePeriodInSecond": 30},
        },
        default_max_message_size=1,
    )
    assert limits.dispatch_rate.unlimited and limits.subscribe_rate.unlimited
    assert limits.publish_rate == RateSpec(msgs=20)
    assert limits.subscription_dispatch_rate == RateSpec(nbytes=4096)
    clock = Clock()  # never advances: only an unlimited component lets everything through
    dispatch, publish = (
        RateLimiter(limits.dispatch_rate, clock),
        RateLimiter(limits.publish_rate, clock),
    )
    assert all(acquire_all([dispatch], 10**9) == 0.0 for _ in range(1000))
    assert [acquire_all([publish], 10**9) for _ in range(20)] == [0.0] * 20  # bytes: no limit
    assert acquire_all([publish], 1) > 0.0  # messages: 20 per second
    raw = RateLimiter(RateSpec(msgs=-1, nbytes=-1), clock)
    assert raw.spec.unlimited and raw.wait_s(10**9) == 0.0


def test_topic_limits_from_policies() -> None:
    limits = TopicLimits.from_policies(
        {
            "subscriptionTypesEnabled": ("Shared",),
            "maxConsumersPerSubscription": 2,
            "dispatchRate": {"dispatchThrottlingRateInMsg": 10, "ratePeriodInSecond": 5},
            "maxMessageSize": 0,
        },
        default_max_message_size=123,
    )
    assert limits.type_enabled(SubscriptionType.Shared)
    assert not limits.type_enabled(SubscriptionType.Exclusive)
    assert limits.max_consumers_per_subscription == 2
    assert limits.dispatch_rate == RateSpec(10, 0, 5.0)
    assert limits.max_message_size == 123
    assert TopicLimits.from_policies({}, default_max_message_size=1).type_enabled(
        SubscriptionType.Key_Shared
    )


# ------------------------------------------------------------------ selectors


def test_key_shared_ring_matches_pulsars_points_and_spreads_keys() -> None:
    ring = KeySharedSelector()
    assert ring.select(5) is None
    consumers = [named(f"consumer-{i}", i) for i in range(3)]
    for c in consumers:
        ring.add(c)
    # Pulsar: first point at or above the key hash, wrapping to the lowest point
    points = sorted(
        (murmur3_32_hash(f"{c.name}{i}"), c.name) for c in consumers for i in range(100)
    )
    for key in ("a", "b", "order-42", "ключ"):
        h = sticky_key_hash(key)
        expected = next((name for p, name in points if p >= h), points[0][1])
        chosen = ring.select(h)
        assert chosen is not None and chosen.name == expected
    share = [0, 0, 0]
    for i in range(3000):
        chosen = ring.select(sticky_key_hash(f"key-{i}"))
        assert chosen is not None
        share[chosen.seq] += 1
    assert min(share) > 500
    ring.remove(consumers[0])
    assert all(ring.select(sticky_key_hash(f"key-{i}")) is not consumers[0] for i in range(300))
    assert sticky_key_hash(None) == sticky_key_hash(None) >= 0


def test_key_shared_hashes_the_ordering_key_first_as_pulsars_peek_sticky_key() -> None:
    def murmur(raw: bytes) -> int:
        return int(mmh3.hash(raw, 0, False)) & 0x7FFFFFFF

    ordering = [("p", b"v"), (HEADER_ORDERING_KEY, b"\x00order")]
    assert message_sticky_hash("partition-key", ordering) == murmur(b"\x00order")
    assert message_sticky_hash(None, ordering) == murmur(b"\x00order")
    assert message_sticky_hash("partition-key", [("p", b"v")]) == sticky_key_hash("partition-key")
    binary = base64.b64encode(b"\xff\xfe\x00").decode()
    assert message_sticky_hash(binary, [(HEADER_KEY_B64, b"true")]) == murmur(b"\xff\xfe\x00")
    assert message_sticky_hash("not base64!", [(HEADER_KEY_B64, b"true")]) == sticky_key_hash(
        "not base64!"
    )
    assert message_sticky_hash(None, None) == sticky_key_hash(None) == murmur(b"NONE_KEY")


def test_failover_choice_is_sorted_by_name_modulo_partition() -> None:
    b, a, c = named("b", 1), named("a", 2), named("c", 3)
    cs = [b, a, c]
    assert failover_active(cs, 0) is a
    assert failover_active(cs, 1) is b
    assert failover_active(cs, 5) is c
    assert failover_active(cs, -1) is a
    assert failover_active([], 0) is None


def test_the_dispatch_mark_rides_with_the_ack_set_and_old_commits_still_read() -> None:
    from sync.messaging._cursor import split_dispatched

    cursor = PartitionCursor(0, 7)
    for offset in range(7, 12):
        assert cursor.accept(offset)
        cursor.add(Entry(0, offset, None, b"", None, 0))
    assert cursor.mark_dispatched(9) and not cursor.mark_dispatched(8)
    cursor.ack(8)
    offset, metadata, _ = cursor.commit_point(4000)
    assert offset == 7 and split_dispatched(metadata)[1] == 10
    assert decode_ack_ranges(7, metadata) == [(8, 9)]  # the mark never reads as acks
    again = PartitionCursor(0, offset, metadata)
    assert [o for o in range(7, 12) if again.possibly_delivered(o)] == [7, 8, 9]
    # A commit of an earlier release (no mark): nothing counts as delivered before.
    old = PartitionCursor(0, 7, metadata.rpartition("~d")[0])
    assert not any(old.possibly_delivered(o) for o in range(7, 12))
    assert split_dispatched("~dxyz") == ("", 0)
