"""Poison never wedges and never diverges (issue #11): every kind of unreadable record
gives the same cache state live and in a fresh replay, on the twin and on real Kafka.

The rule is :mod:`sync.table._rules` ("a record that cannot be decoded makes its key
absent, and is quarantined"); :func:`_model` applies it record by record as the oracle.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sync import CacheConfig, CacheState, Codec, PolicyCache
from sync._constants import HEADER_POISON_SOURCE
from sync.table import Effect, judge
from sync.transport import DeliveryReport, Transport
from tests.support.events import change_event
from tests.support.waits import wait_for

CODEC = Codec()
ORDERS = b"persistent://acme/ops/orders"
#: The record of the issue: a body cut right after the namespace string.
ISSUE_TRUNCATED = CODEC.header + bytes.fromhex("0004021470657273697374656e740861636d65066f7073")

Record = tuple[bytes | None, bytes | None]


def _event(key: bytes, action: str, event_type: str = "TOPIC_POLICY", **policies: Any) -> bytes:
    domain, _, rest = key.decode().partition("://")
    tenant, namespace, topic = rest.split("/")
    return CODEC.encode(
        change_event(
            tenant,
            namespace,
            topic,
            policies or None,
            action=action,
            domain=domain,
            event_type=event_type,
        )
    )


def _flip(value: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(value))
    return value[:at] + bytes((value[at] ^ (1 << rng.randrange(8)),)) + value[at + 1 :]


#: name -> (key, good value, rng) -> an unreadable (or mutated) value for that key
MUTATIONS: dict[str, Callable[[bytes, bytes, random.Random], bytes]] = {
    "truncated": lambda _k, v, r: v[: r.randrange(len(CODEC.header) + 2, len(v))],
    "truncated_short": lambda _k, v, r: v[: r.randrange(0, len(CODEC.header) + 2)],
    "bit_flipped": lambda _k, v, r: _flip(v, r),
    "bad_magic": lambda _k, v, _r: b"\x00\x01" + v[2:],
    "unknown_fingerprint": lambda _k, v, _r: v[:2] + b"\x07" * 8 + v[10:],
    # first two body bytes say "UNKNOWN event, INSERT" (ignored), the rest is garbage
    "ignored_class_undecodable": lambda _k, _v, _r: CODEC.header + b"\x04\x00\xff\xff\xff\xff",
    # first two body bytes say "TOPIC_POLICY DELETE", the rest is garbage
    "delete_class_undecodable": lambda _k, _v, _r: CODEC.header + b"\x00\x02\xff\xff\xff\xff",
    "key_mismatch": lambda _k, _v, _r: _event(b"persistent://acme/ops/other", "UPDATE"),
    "trailing_bytes": lambda _k, v, _r: v + b"\x00",
}


def _model(records: list[Record]) -> dict[bytes, bytes]:
    """The rule, applied record by record: what every cache must hold."""
    held: dict[bytes, bytes] = {}
    for key, value in records:
        verdict = judge(CODEC, key, value)
        if key is None:
            continue
        if verdict.effect in (Effect.POISON, Effect.DELETE):
            held.pop(key, None)
        elif verdict.effect is Effect.UPDATE or (
            verdict.effect is Effect.INSERT and key not in held
        ):
            assert value is not None
            held[key] = value
    return held


def _produce(transport: Transport, topic: str, records: list[Record]) -> None:
    producer = transport.producer()
    reports: list[DeliveryReport] = []
    for key, value in records:
        producer.produce(topic, key, value, on_delivery=reports.append)
    assert producer.flush(30) == 0
    assert all(r.error is None for r in reports), [r.error for r in reports if r.error]
    producer.close()


@pytest.fixture
def caches(transport: Transport, unique_name: Callable[[str], str]) -> Iterator[Any]:
    topic = unique_name("poison")
    started: list[PolicyCache] = []

    def start(**cfg: Any) -> PolicyCache:
        cache = PolicyCache(transport, config=CacheConfig(topic=topic, **cfg)).start()
        started.append(cache)
        cache.wait_ready(60)
        return cache

    start.topic = topic  # type: ignore[attr-defined]
    yield start
    for cache in started:
        cache.close()


def _held(cache: PolicyCache) -> dict[bytes, bytes]:
    return dict(cache.raw_items())


def _check_everyone_agrees(
    transport: Transport, caches: Any, live: list[PolicyCache], records: list[Record]
) -> dict[bytes, bytes]:
    expected = _model(records)
    for cache in live:
        cache.sync_written(30)
        assert _held(cache) == expected
    fresh = caches()
    assert fresh.state is CacheState.READY
    assert _held(fresh) == expected
    digests = {c.digest() for c in [*live, fresh]}
    assert len(digests) == 1
    return expected


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
@pytest.mark.parametrize("then", ["nothing", "insert", "update", "tombstone", "delete"])
def test_every_poison_kind_gives_one_state_live_and_replayed(
    transport: Transport, caches: Any, kind: str, then: str
) -> None:
    listening = caches()
    listening.add_listener(lambda _k, _v: None)  # applies record by record
    quiet = caches()  # nobody listens: the fast path, decoding postponed
    rng = random.Random(kind)
    good = _event(ORDERS, "UPDATE", maxConsumerPerTopic=1)
    records: list[Record] = [(ORDERS, good), (ORDERS, MUTATIONS[kind](ORDERS, good, rng))]
    follow: dict[str, Record] = {
        "insert": (ORDERS, _event(ORDERS, "INSERT", maxConsumerPerTopic=2)),
        "update": (ORDERS, _event(ORDERS, "UPDATE", maxConsumerPerTopic=3)),
        "tombstone": (ORDERS, None),
        "delete": (ORDERS, _event(ORDERS, "DELETE")),
    }
    if then in follow:
        records.append(follow[then])
    _produce(transport, caches.topic, records)
    expected = _check_everyone_agrees(transport, caches, [listening, quiet], records)
    if judge(CODEC, ORDERS, records[1][1]).effect is Effect.POISON:
        # the rule, spelled out: poison leaves the key absent; an INSERT then applies
        assert (ORDERS in expected) == (then in ("insert", "update"))


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_a_mutated_insert_over_a_held_value_gives_one_state(
    transport: Transport, caches: Any, kind: str
) -> None:
    """An INSERT meeting a held key is a conflict only if it is readable: an INSERT whose
    body does not decode is poison and the key becomes absent, on the fast path too (the
    chaos soak's fresh replays held the old value where live caches held nothing)."""
    listening = caches()
    listening.add_listener(lambda _k, _v: None)
    quiet = caches()
    rng = random.Random(kind)
    insert = _event(ORDERS, "INSERT", maxConsumerPerTopic=2)
    records: list[Record] = [
        (ORDERS, _event(ORDERS, "UPDATE", maxConsumerPerTopic=1)),
        (ORDERS, MUTATIONS[kind](ORDERS, insert, rng)),
    ]
    _produce(transport, caches.topic, records)
    expected = _check_everyone_agrees(transport, caches, [listening, quiet], records)
    if judge(CODEC, ORDERS, records[1][1]).effect is Effect.POISON:
        assert ORDERS not in expected


def test_the_issue_truncated_record_never_wedges_a_fresh_replay(
    transport: Transport, caches: Any
) -> None:
    live = caches()
    records: list[Record] = [
        (ORDERS, _event(ORDERS, "UPDATE", maxConsumerPerTopic=2)),
        (ORDERS, ISSUE_TRUNCATED),
        (b"persistent://acme/ops/b", _event(b"persistent://acme/ops/b", "UPDATE")),
    ]
    _produce(transport, caches.topic, records)
    live.sync_written(30)
    live.digest()
    _wait_poison(live, 1)  # the live cache copied it to the dead-letter topic
    for _ in range(3):  # every fresh replay reaches READY, and never re-copies the poison
        expected = _check_everyone_agrees(transport, caches, [live], records)
        assert list(expected) == [b"persistent://acme/ops/b"]
    dlq = _dead_letters(transport, caches.topic, want=1)
    assert [m.value() for m in dlq] == [ISSUE_TRUNCATED]


def _dead_letters(transport: Transport, topic: str, want: int) -> list[Any]:
    """Everything in ``topic``.dlq (waits for at least ``want``, then drains)."""
    consumer = transport.consumer()
    ends = consumer.end_offsets(topic + ".dlq", [0])
    consumer.assign(topic + ".dlq", {0: 0})
    found: list[Any] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        len(found) < want or consumer.positions(topic + ".dlq", [0])[0] < ends[0]
    ):
        found.extend(consumer.consume(100, 0.3))
        ends = consumer.end_offsets(topic + ".dlq", [0])
    consumer.close()
    return found


def test_a_poison_record_is_dead_lettered_once_across_restarts(
    transport: Transport, caches: Any
) -> None:
    first = caches()
    poison: list[Record] = [
        (b"k-magic", b"\x00\x01garbage"),
        (ORDERS, ISSUE_TRUNCATED),  # stored whole by replay, found by the verifier
        (b"persistent://acme/ops/x", CODEC.header + b"\x04\x00\xff\xff"),
    ]
    _produce(transport, caches.topic, poison)
    first.sync_written(30)
    first.digest()  # settles: every stored value judged
    _wait_poison(first, 3)
    for _ in range(2):
        again = caches()
        again.digest()
        _wait_poison(again, 3)
        again.close()
    dlq = _dead_letters(transport, caches.topic, want=3)
    sources = [dict(m.headers() or [])[HEADER_POISON_SOURCE] for m in dlq]
    assert len(sources) == 3 and len(set(sources)) == 3, sources


def _wait_poison(cache: PolicyCache, n: int) -> None:
    wait_for(lambda: cache.stats().poison >= n, f"{n} records quarantined", timeout_s=30)
    assert cache.stats().poison == n, cache.stats().poison_by_reason


def _random_log(rng: random.Random, n: int) -> list[Record]:
    keys = [f"persistent://acme/ops/t{i}".encode() for i in range(4)]
    records: list[Record] = []
    for _ in range(n):
        key = rng.choice(keys)
        roll = rng.random()
        if roll < 0.1:
            records.append((key, None))
            continue
        action = rng.choice(["INSERT", "INSERT", "UPDATE", "UPDATE", "DELETE", "NONE"])
        event_type = "UNKNOWN" if rng.random() < 0.05 else "TOPIC_POLICY"
        value = _event(key, action, event_type, maxConsumerPerTopic=rng.randrange(100))
        if roll < 0.45:
            value = rng.choice(list(MUTATIONS.values()))(key, value, rng)
        records.append((key, value))
    return records


@pytest.mark.parametrize("seed", range(6))
def test_random_logs_of_valid_and_mutated_records_live_equals_fresh(
    transport: Transport, caches: Any, seed: int
) -> None:
    """Property: any sequence of valid and mutated records, written while two caches
    tail (one record by record, one on the fast path), leaves both equal to a fresh
    replay and to the rule applied record by record."""
    rng = random.Random(seed)
    listening = caches()
    listening.add_listener(lambda _k, _v: None)
    quiet = caches()
    records: list[Record] = []
    for _ in range(3):  # several batches, with a fresh replay in between
        batch = _random_log(rng, 40)
        records.extend(batch)
        _produce(transport, caches.topic, batch)
        _check_everyone_agrees(transport, caches, [listening, quiet], records)
