"""The policy cache and writer, run against the in-memory twin and real Kafka alike."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sync import (
    BootstrapTimeout,
    CacheConfig,
    CacheState,
    CacheStateError,
    Codec,
    NamespaceName,
    Policies,
    PolicyCache,
    PolicyService,
    PolicyTarget,
    ServiceConfig,
    TopicName,
    WriterConfig,
    WriteResult,
)
from sync._constants import HEADER_POISON_REASON, HEADER_POISON_SOURCE
from sync.transport import OFFSET_BEGINNING, DeliveryReport, Transport
from tests.support.events import change_event

ORDERS = PolicyTarget.parse("persistent://acme/ops/orders")


@pytest.fixture
def topic(unique_name: Callable[[str], str]) -> str:
    return unique_name("ce")


@pytest.fixture
def services(transport: Transport, topic: str) -> Iterator[Callable[..., PolicyService]]:
    started: list[PolicyService] = []

    def make(writer: WriterConfig | None = None, **cache: Any) -> PolicyService:
        cfg = ServiceConfig(
            cache=CacheConfig(topic=topic, **cache), writer=writer or WriterConfig()
        )
        svc = PolicyService(transport, cfg).start(timeout_s=60)
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.close()


def _event(action: str, event_type: str = "TOPIC_POLICY", **policies: Any) -> dict[str, Any]:
    return change_event(
        "acme", "ops", "orders", policies or None, action=action, event_type=event_type
    )


def _produce(
    transport: Transport, topic: str, records: list[tuple[bytes | None, bytes | None]]
) -> list[DeliveryReport]:
    producer = transport.producer()
    reports: list[DeliveryReport] = []
    for key, value in records:
        producer.produce(topic, key, value, on_delivery=reports.append)
    assert producer.flush(10) == 0
    return reports


def _all_at_once(
    work: Callable[[PolicyService, str], None], admins: list[PolicyService], fields: list[str]
) -> None:
    """Run ``work(admin, field)`` for every admin in its own thread, started together."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(admins))

    def run(svc: PolicyService, field: str) -> None:
        try:
            barrier.wait()
            work(svc, field)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=a) for a in zip(admins, fields, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors


def _fresh_digest(transport: Transport, topic: str) -> str:
    cache = PolicyCache(transport, config=CacheConfig(topic=topic, dead_letter=False)).start()
    try:
        cache.wait_ready(60)
        return cache.digest()
    finally:
        cache.close()


def test_bootstrap_then_tail_converge(
    services: Callable[..., PolicyService], transport: Transport, topic: str
) -> None:
    writer = services()
    writer.set(ORDERS, {"maxConsumerPerTopic": 5})
    writer.set(PolicyTarget.parse("acme/ops"), {"messageTTLInSeconds": 60})
    reader = services()
    assert reader.get(ORDERS) == Policies({"maxConsumerPerTopic": 5})
    writer.set(ORDERS, {"maxProducerPerTopic": 2})
    writer.set(PolicyTarget.parse("acme/ops/gone"), {"maxProducerPerTopic": 2})
    writer.delete(PolicyTarget.parse("acme/ops/gone"))
    reader.cache.sync(30)
    assert reader.get(ORDERS) == Policies({"maxConsumerPerTopic": 5, "maxProducerPerTopic": 2})
    assert reader.get(PolicyTarget.parse("acme/ops/gone")) is None
    assert reader.applied(TopicName.parse("acme/ops/orders-partition-1")).to_json_obj() == {
        "maxConsumerPerTopic": 5,
        "maxProducerPerTopic": 2,
        "messageTTLInSeconds": 60,
    }
    assert reader.cache.digest() == writer.cache.digest() == _fresh_digest(transport, topic)
    assert reader.cache.state is CacheState.READY


def test_pulsar_apply_rules(
    services: Callable[..., PolicyService], transport: Transport, topic: str
) -> None:
    codec = Codec()
    key = ORDERS.key_bytes
    first = services()  # creates the topic
    _produce(
        transport,
        topic,
        [
            (key, codec.encode(_event("INSERT", maxConsumerPerTopic=1))),
            (key, codec.encode(_event("INSERT", maxConsumerPerTopic=2))),  # ignored: exists
            (key, codec.encode(_event("NONE", maxConsumerPerTopic=3))),  # ignored
            (key, codec.encode(_event("UPDATE", "UNKNOWN", maxConsumerPerTopic=4))),  # ignored
            (b"persistent://acme/ops/b", codec.encode(_event("UPDATE", maxConsumerPerTopic=5))),
        ],
    )
    for cache in (first.cache, services().cache):
        cache.sync(30)
        assert cache.get(ORDERS.key) == Policies({"maxConsumerPerTopic": 1})
        stats = cache.stats()
        assert stats.conflicting_inserts == 1 and stats.ignored == 2
        # b's body names orders: a key/body mismatch is poison, never applied
        assert cache.get("persistent://acme/ops/b") is None
    _produce(transport, topic, [(key, codec.encode(_event("DELETE")))])
    first.cache.sync(30)
    assert first.cache.get(ORDERS.key) is None


@pytest.mark.parametrize("phase", ["bootstrap", "tail"])
def test_poison_is_counted_quarantined_and_never_wedges(
    services: Callable[..., PolicyService], transport: Transport, topic: str, phase: str
) -> None:
    codec = Codec()
    good = codec.encode(_event("UPDATE", maxConsumerPerTopic=9))
    poison = [
        (b"k1", b"\x00\x01garbage-without-magic"),
        (b"k2", b"\xc3\x01" + b"\x07" * 8 + b"\x00\x00"),
        # The last value of its key: replay judges only last values (an overwritten
        # value is never decoded, just as compaction would drop it).
        (b"persistent://acme/ops/broken", codec.header + b"\x00\x04\xff\xff\xff\xff\xff\xff"),
    ]
    if phase == "bootstrap":
        seed = services()
        seed.close()
        _produce(transport, topic, [*poison, (ORDERS.key_bytes, good)])
        svc = services()
    else:
        svc = services()
        _produce(transport, topic, [*poison, (ORDERS.key_bytes, good)])
        svc.cache.sync(30)
    assert svc.get(ORDERS) == Policies({"maxConsumerPerTopic": 9})
    deadline = time.monotonic() + 20
    while svc.cache.stats().poison < 3 and time.monotonic() < deadline:
        svc.cache.get("persistent://acme/ops/broken")  # first read decodes (and quarantines)
        time.sleep(0.05)
    stats = svc.cache.stats()
    assert stats.state is CacheState.READY
    assert dict(stats.poison_by_reason) == {
        "bad_magic": 1,
        "unknown_fingerprint": 1,
        "undecodable": 1,
    }
    dlq = transport.consumer()
    dlq.assign(topic + ".dlq", {0: OFFSET_BEGINNING})
    quarantined: list[Any] = []
    while len(quarantined) < 3 and time.monotonic() < deadline + 10:
        quarantined.extend(dlq.consume(10, 0.5))
    dlq.close()
    assert len(quarantined) == 3
    for m in quarantined:
        headers = dict(m.headers() or [])
        assert re.fullmatch(rf"{topic}\[\d+\]@\d+", headers[HEADER_POISON_SOURCE].decode())
        assert headers[HEADER_POISON_REASON]
    assert {m.value() for m in quarantined} == {v for _, v in poison}


def test_verifier_finds_poison_bodies_nobody_reads(
    services: Callable[..., PolicyService], transport: Transport, topic: str
) -> None:
    """Replay stores values unread; the verifier decodes them after READY, unasked."""
    codec = Codec()
    good = codec.encode(_event("UPDATE", maxConsumerPerTopic=9))
    # Header and names match the key (so the store packs it), the body after them is cut.
    cut = good[: good.index(b"orders") + len(b"orders") + 3]
    services().close()
    _produce(transport, topic, [(b"persistent://acme/ops/orders", cut)])
    others: list[tuple[bytes | None, bytes | None]] = []
    for i in range(50):
        event = _event("UPDATE", maxConsumerPerTopic=i)
        event["topicPoliciesEvent"]["namespace"] = f"n{i}"
        others.append((f"persistent://acme/n{i}/orders".encode(), codec.encode(event)))
    _produce(transport, topic, others)
    svc = services(verify_chunk=7)
    deadline = time.monotonic() + 30
    while (svc.cache.stats().unverified or not svc.cache.stats().poison) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    stats = svc.cache.stats()
    assert stats.unverified == 0 and stats.poison_by_reason == {"undecodable": 1}
    assert len(svc.cache) == 50 and "persistent://acme/ops/orders" not in svc.cache.keys()
    dlq = transport.consumer()
    dlq.assign(topic + ".dlq", {0: OFFSET_BEGINNING})
    quarantined: list[Any] = []
    while not quarantined and time.monotonic() < deadline:
        quarantined.extend(dlq.consume(10, 0.5))
    dlq.close()
    assert [m.value() for m in quarantined] == [cut]  # byte for byte, not the packed form
    assert dict(quarantined[0].headers() or [])[HEADER_POISON_SOURCE] == f"{topic}[0]@0".encode()


def test_keyless_records_are_refused_by_the_compacted_topic(
    services: Callable[..., PolicyService], transport: Transport, topic: str
) -> None:
    services()
    (report,) = _produce(transport, topic, [(None, Codec().header + b"\x00\x00")])
    assert report.error is not None and "validate" in report.error


def test_listeners_get_latest_values_off_the_reader_thread(
    services: Callable[..., PolicyService],
) -> None:
    svc = services()
    seen: list[tuple[str, Policies | None, str]] = []
    done = threading.Event()

    def bad(key: str, value: Policies | None) -> None:
        raise RuntimeError("listener bug")

    def good(key: str, value: Policies | None) -> None:
        seen.append((key, value, threading.current_thread().name))
        if value is None:
            done.set()

    svc.cache.add_listener(bad)
    svc.cache.add_listener(good)
    for i in range(5):
        svc.set(ORDERS, {"maxConsumerPerTopic": i})
    svc.delete(ORDERS)
    assert done.wait(10)
    assert seen[-1][:2] == (ORDERS.key, None)
    values = [v["maxConsumerPerTopic"] for _, v, _ in seen if v is not None]
    assert values == sorted(values)  # in order per topic, possibly coalesced
    assert all(name == "policy-listeners" for *_, name in seen)
    assert svc.cache.stats().listener_errors == len(seen)
    assert svc.cache.state is CacheState.READY


def test_concurrent_admins_lose_no_update(
    services: Callable[..., PolicyService], transport: Transport, topic: str
) -> None:
    admins = [services() for _ in range(4)]
    fields = [
        "maxProducerPerTopic",
        "maxConsumerPerTopic",
        "maxSubscriptionsPerTopic",
        "maxUnackedMessagesOnConsumer",
    ]

    def work(svc: PolicyService, field: str) -> None:
        for i in range(1, 6):
            svc.set(ORDERS, {field: i})

    _all_at_once(work, admins, fields)
    for svc in admins:
        svc.cache.sync(30)
        assert svc.get(ORDERS) == Policies(dict.fromkeys(fields, 5))
    # The last record per key in the log is the truth: a fresh replay agrees.
    assert _fresh_digest(transport, topic) == admins[0].cache.digest()


def test_bulk_writes_span_transactions_and_lose_nothing(
    services: Callable[..., PolicyService], transport: Transport, topic: str
) -> None:
    """Multi-transaction set_many calls of several admins at once, on the same keys."""
    small = WriterConfig(transaction_batch=7)
    one = services(small)
    # One call, one key written in several transactions (one of them a lone change):
    # later transactions must merge onto what earlier ones of the same call committed.
    others = [(PolicyTarget.parse(f"persistent://acme/ops/o{i}"), {"maxProducerPerTopic": 1})
              for i in range(6)]  # fmt: skip
    items = [(ORDERS, {"maxConsumerPerTopic": 1})] + others
    items += [(ORDERS, {"messageTTLInSeconds": 60})]  # the 8th: a transaction of its own
    items += others[:6] + [(ORDERS, {"maxProducerPerTopic": 2})]
    one.set_many(items)
    assert one.get(ORDERS) == Policies(
        {"maxConsumerPerTopic": 1, "messageTTLInSeconds": 60, "maxProducerPerTopic": 2}
    )

    admins = [services(small) for _ in range(3)]
    fields = ["maxSubscriptionsPerTopic", "maxUnackedMessagesOnConsumer", "maxConsumerPerTopic"]
    targets = [PolicyTarget.parse(f"persistent://acme/bulk/t{i}") for i in range(30)]

    def work(svc: PolicyService, field: str) -> None:
        for round_ in range(1, 4):
            svc.set_many([(t, {field: round_}) for t in targets])

    _all_at_once(work, admins, fields)
    for svc in admins:
        svc.cache.sync(30)
        for target in targets:
            assert svc.get(target) == Policies(dict.fromkeys(fields, 3)), target
    assert _fresh_digest(transport, topic) == admins[0].cache.digest()


def test_bulk_writes_are_read_back_at_once(services: Callable[..., PolicyService]) -> None:
    """A commit returns before its markers are written: set_many must still read its own
    writes the moment it returns (it waits for the high watermark, not the LSO)."""
    svc = services()
    targets = [PolicyTarget.parse(f"persistent://acme/ryw/t{i}") for i in range(4)]
    for round_ in range(1, 41):
        svc.set_many([(t, {"maxConsumerPerTopic": round_}) for t in targets])
        assert [svc.get(t) for t in targets] == [Policies({"maxConsumerPerTopic": round_})] * 4


def test_independent_writes_fail_alone_and_are_read_back(
    services: Callable[..., PolicyService],
) -> None:
    """set_each (the fence holder's side of forwarded writes): every write is decided on
    its own, sharing group commits; a refused one (at validation or at decision) fails
    alone, nothing of it is written, and the others are read back at once."""
    svc = services()
    a, b, c = (PolicyTarget.parse(f"persistent://acme/each/t{i}") for i in range(3))
    persistence = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1}
    for round_ in range(1, 4):
        results = svc.set_each(
            [
                (a, {"maxConsumerPerTopic": round_}),
                (b, {"noSuchPolicy": 1}),  # refused by validation
                (c, {"persistence": persistence}),  # refused by the decision's rules
                (b, {"maxProducerPerTopic": round_}),
                (a, {"maxProducerPerTopic": round_}),  # the same key again, merged
            ]
        )
        assert [type(r).__name__ for r in results] == [
            "WriteResult", "InvalidPolicyError", "InvalidPolicyError", "WriteResult",
            "WriteResult",
        ]  # fmt: skip
        assert svc.get(a) == Policies(
            {"maxConsumerPerTopic": round_, "maxProducerPerTopic": round_}
        )
        assert svc.get(b) == Policies({"maxProducerPerTopic": round_})
        assert svc.get(c) is None


def test_writes_answered_at_commit_are_read_where_their_positions_are_awaited(
    services: Callable[..., PolicyService],
) -> None:
    """set_each(applied=False), as the fence holder answers a forwarded batch: it returns
    once committed, and each result carries the positions to wait for. Another cache of
    the table (the forwarding sidecar's) that waits for them reads every write back."""
    holder, forwarder = services(), services()
    targets = [PolicyTarget.parse(f"persistent://acme/fwd/t{i}") for i in range(3)]
    for round_ in range(1, 21):
        results = holder.set_each(
            [(t, {"maxConsumerPerTopic": round_}) for t in targets], applied=False
        )
        wanted: dict[int, int] = {}
        for result in results:
            assert isinstance(result, WriteResult) and result.positions
            for p, o in result.positions.items():
                wanted[p] = max(wanted.get(p, 0), o)
        forwarder.cache.wait_for(wanted, 30.0)
        assert forwarder.cache.reached(wanted)
        assert not forwarder.cache.reached({p: o + 1_000_000 for p, o in wanted.items()})
        assert [forwarder.get(t) for t in targets] == [
            Policies({"maxConsumerPerTopic": round_})
        ] * 3


def test_restart_resumes_from_snapshot_and_sees_deletes(
    services: Callable[..., PolicyService], tmp_path: Path
) -> None:
    snap = tmp_path / "cache.snapshot"
    writer = services()
    for i in range(20):
        writer.set(PolicyTarget.parse(f"acme/ops/t{i}"), {"maxConsumerPerTopic": i})
    first = services(snapshot_path=snap)
    first.close()
    assert snap.exists()
    writer.delete(PolicyTarget.parse("acme/ops/t3"))
    writer.set(PolicyTarget.parse("acme/ops/t4"), {"maxConsumerPerTopic": 44})
    again = services(snapshot_path=snap)
    assert again.cache.stats().snapshot.startswith("resumed from snapshot with 20")
    assert again.get(PolicyTarget.parse("acme/ops/t3")) is None
    assert again.get(PolicyTarget.parse("acme/ops/t4")) == Policies({"maxConsumerPerTopic": 44})
    assert again.cache.digest() == writer.cache.digest()


def test_snapshot_older_than_delete_retention_is_not_trusted(
    services: Callable[..., PolicyService], tmp_path: Path
) -> None:
    from sync.policy._policy_snapshot import load_snapshot, save_snapshot

    snap = tmp_path / "cache.snapshot"
    writer = services()
    writer.set(ORDERS, {"maxConsumerPerTopic": 1})
    services(snapshot_path=snap).close()
    old, _ = load_snapshot(snap)
    assert old is not None
    # Pretend the sidecar was away for two days, with a stale entry in its snapshot.
    stale = {prefix: dict(entries) for prefix, entries in old.store.items()}
    entries = stale[b"persistent://acme/ops/"]
    entries[b"deleted-long-ago"] = next(iter(entries.values()))
    save_snapshot(
        snap,
        type(old)(
            old.topic,
            old.topic_id,
            old.created_ms - 2 * 86_400_000,
            old.positions,
            stale,
            old.header,
        ),
    )
    rebuilt = services(snapshot_path=snap)
    assert "older than delete.retention.ms" in rebuilt.cache.stats().snapshot
    assert rebuilt.cache.digest() == writer.cache.digest()


def test_bootstrap_time_limit_fails_clearly(
    services: Callable[..., PolicyService], transport: Transport, topic: str
) -> None:
    writer = services()
    writer.set(ORDERS, {"maxConsumerPerTopic": 1})
    cache = PolicyCache(transport, config=CacheConfig(topic=topic, bootstrap_timeout_s=0.0))
    cache.start()
    with pytest.raises(CacheStateError, match="did not reach the end offsets"):
        cache.wait_ready(30)
    assert cache.state is CacheState.FAILED
    assert isinstance(cache._failure, BootstrapTimeout)
    with pytest.raises(CacheStateError):
        cache.get(ORDERS.key)
    cache.close()
    assert cache.stats().state is CacheState.CLOSED


def test_list_and_export(services: Callable[..., PolicyService]) -> None:
    svc = services()
    svc.set(ORDERS, {"maxConsumerPerTopic": 1})
    svc.set(PolicyTarget.parse("acme/ops/orders", is_global=True), {"messageTTLInSeconds": 5})
    svc.set(PolicyTarget.parse("acme/ops"), {"maxProducerPerTopic": 3})
    svc.set(PolicyTarget.parse("other/ns/x"), {"maxProducerPerTopic": 3})
    listed = svc.list_namespace(NamespaceName.parse("acme/ops"))
    assert set(listed) == {
        "persistent://acme/ops/orders",
        "__G__persistent://acme/ops/orders",
        "__NS__acme/ops",
    }
    assert [t.key for t, _ in svc.export()] == sorted([*listed, "persistent://other/ns/x"])
