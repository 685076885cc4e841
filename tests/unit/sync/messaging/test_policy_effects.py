"""Issue 15, the pure parts: policy → Kafka config, write rules, backlog arithmetic,
deduplication verdicts, delayed-delivery queue, and the reconciler on the in-memory twin."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sync import TopicName, kafka_topic_of
from sync._errors import InvalidPolicyError
from sync.messaging import LocalOwnership, MessageId, TopicLimits
from sync.messaging._backlog import BacklogAction, BacklogMeasure, BacklogQuotas
from sync.messaging._cursor import Entry
from sync.messaging._dedup import Deduplicator, Verdict
from sync.messaging._delayed import DelayedQueue
from sync.messaging._topic_config import TopicConfigReconciler, desired_topic_config
from sync.policy._policy_rules import check_policy_rules
from sync.transport import MemoryTransport, TopicSpec


def test_retention_maps_to_kafka_retention_per_partition() -> None:
    d = desired_topic_config(
        {"retentionPolicies": {"retentionTimeInMinutes": 5, "retentionSizeInMB": 10}}
    )
    assert d["retention.ms"] == "300000"
    assert d["retention.bytes"] == str(10 * 1024 * 1024)
    d = desired_topic_config(
        {"retentionPolicies": {"retentionTimeInMinutes": -1, "retentionSizeInMB": 0}}
    )
    assert (d["retention.ms"], d["retention.bytes"]) == ("-1", None)
    assert set(desired_topic_config({}).values()) == {None}  # nothing set: broker defaults


def test_max_message_size_only_raises_the_kafka_limit_and_ack_quorum_sets_min_isr() -> None:
    assert desired_topic_config({"maxMessageSize": 1000})["max.message.bytes"] is None
    assert desired_topic_config({"maxMessageSize": 2_000_000})["max.message.bytes"] == "2016384"
    persistence = {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2}
    assert desired_topic_config({"persistence": persistence})["min.insync.replicas"] == "2"


def _quota(limit_size: int, limit_time: int = -1, policy: str = "producer_exception") -> Any:
    return {"destination_storage": {"limitSize": limit_size, "limitTime": limit_time,
                                    "policy": policy}}  # fmt: skip


def test_backlog_quota_at_or_above_retention_is_refused_both_ways() -> None:
    retention = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 1}
    record = {"retentionPolicies": retention, "backLogQuotaMap": _quota(2 * 1024 * 1024)}
    with pytest.raises(InvalidPolicyError, match="^Backlog Quota exceeds"):
        check_policy_rules(record, {"backLogQuotaMap": record["backLogQuotaMap"]})
    with pytest.raises(InvalidPolicyError, match="^Retention Quota must exceed"):
        check_policy_rules(record, {"retentionPolicies": retention})
    ok = {"retentionPolicies": retention, "backLogQuotaMap": _quota(1000, 599)}
    check_policy_rules(ok, ok)
    late = {"retentionPolicies": retention, "backLogQuotaMap": _quota(1000, 600)}
    with pytest.raises(InvalidPolicyError):
        check_policy_rules(late, late)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("shadowTopics", ["persistent://t/n/x"]),
    ],
)
def test_policies_without_a_kafka_mapping_are_refused(name: str, value: Any) -> None:
    with pytest.raises(InvalidPolicyError, match="not supported"):
        check_policy_rules({name: value}, {name: value})


def test_their_off_values_and_removal_are_accepted() -> None:
    patches: list[dict[str, Any]] = [
        {"replicationClusters": ["local"]},
        {"replicationClusters": ["east", "west"]},  # checked against the registry by the REST
        {"shadowTopics": []},
        {"compactionThreshold": 0},
        {"compactionThreshold": 1},
        {"schemaValidationEnforced": True},
        {"schemaCompatibilityStrategy": None},
        {"schemaCompatibilityStrategy": "BACKWARD"},  # applied by the schema registry
    ]
    for patch in patches:
        check_policy_rules(patch, patch)


def test_backlog_is_measured_against_the_slowest_subscription() -> None:
    quotas = BacklogQuotas.from_policy(_quota(500, policy="consumer_backlog_eviction"))
    m = BacklogMeasure(
        end={0: 100, 1: 50},
        positions={0: {"fast": 100, "slow": 90}, 1: {"fast": 50, "slow": 40}},
        avg_bytes=10.0,
    )
    assert m.messages() == 20
    assert m.size_bytes() == 200
    assert not m.over_size(quotas)
    tight = BacklogQuotas.from_policy(_quota(100, policy="consumer_backlog_eviction"))
    assert m.over_size(tight)
    targets = m.eviction_targets(tight)
    assert set(targets) == {"slow"}  # only the slow subscription moves
    assert targets["slow"] == {0: 95, 1: 45}  # keep 10 messages, spread as the backlog


def test_time_quota_uses_the_first_offset_recent_enough() -> None:
    quotas = BacklogQuotas.from_policy(
        {"message_age": {"limitSize": -1, "limitTime": 60, "policy": "producer_request_hold"}}
    )
    assert quotas.time_action is BacklogAction.producer_request_hold
    m = BacklogMeasure(end={0: 10}, positions={0: {"s": 3}}, time_floor={0: 5})
    assert m.over_time(quotas)
    assert not BacklogMeasure(end={0: 10}, positions={0: {"s": 5}}, time_floor={0: 5}).over_time(
        quotas
    )


def test_dedup_verdicts() -> None:
    d = Deduplicator("p.t.n.x", 1, partitioned=False)
    assert d.check("p", 0) == (Verdict.NEW, None)
    assert d.check("p", 0) == (Verdict.IN_FLIGHT, None)  # sent, not persisted yet
    d.persisted("p", 0, MessageId(-1, 7))
    assert d.check("p", 0) == (Verdict.DUPLICATE, MessageId(-1, 7))
    assert d.check("p", 1)[0] is Verdict.NEW
    d.failed("p", 1)
    assert d.check("p", 1)[0] is Verdict.NEW  # a refused send may be sent again
    assert d.check("other", 0)[0] is Verdict.NEW  # per producer name


def test_dedup_state_survives_through_kafka_snapshot_and_replay() -> None:
    transport = MemoryTransport()
    topic = "p.t.n.dedup"
    transport.admin().ensure_topic(TopicSpec(topic, 1))
    producer = transport.producer()
    d = Deduplicator(topic, 1, partitioned=False)
    d.load(transport)
    for seq in range(3):
        assert d.check("p", seq)[0] is Verdict.NEW
        producer.produce(topic, None, b"m", partition=0, headers=Deduplicator.headers("p", seq))
        d.persisted("p", seq, MessageId(-1, seq))
    producer.flush(5)
    d.snapshot(transport)
    # written after the snapshot: found by the replay
    producer.produce(topic, None, b"m", partition=0, headers=Deduplicator.headers("q", 9))
    producer.flush(5)
    again = Deduplicator(topic, 1, partitioned=False)
    again.load(transport)
    assert again.check("p", 2) == (Verdict.DUPLICATE, MessageId(-1, 2))
    assert again.check("q", 9)[0] is Verdict.DUPLICATE
    assert again.check("p", 3)[0] is Verdict.NEW


def test_delayed_queue_releases_only_what_is_due() -> None:
    now = int(time.time() * 1000)
    q = DelayedQueue()
    late, soon = Entry(0, 1, None, b"", None, now), Entry(0, 2, None, b"", None, now)
    late.deliver_at, soon.deliver_at = now + 60_000, now - 1
    q.add(0, late, 100)
    q.add(0, soon, 100)
    assert [e.offset for _p, e in q.pop_due()] == [2]
    due = q.next_due_s()
    assert due is not None and 59.0 < due <= 60.1
    assert len(q) == 1


def test_limits_read_every_new_policy() -> None:
    limits = TopicLimits.from_policies(
        {
            "messageTTLInSeconds": 5,
            "deduplicationEnabled": True,
            "publishRate": {"publishThrottlingRateInMsg": 3, "publishThrottlingRateInByte": 0},
            "subscribeRate": {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 30},
            "maxUnackedMessagesOnSubscription": 7,
            "delayedDeliveryEnabled": False,
            "delayedDeliveryMaxDelayInMillis": 1000,
        },
        default_max_message_size=1000,
    )
    assert limits.message_ttl_s == 5 and limits.dedup_enabled
    assert (limits.publish_rate.msgs, limits.subscribe_rate.msgs) == (3, 2)
    assert limits.subscribe_rate.period_s == 30.0
    assert limits.max_unacked_per_subscription == 7
    assert not limits.delayed_enabled and limits.delayed_max_ms == 1000


def test_reconciler_applies_and_resets_topic_config_on_the_twin() -> None:
    transport = MemoryTransport()
    topic = TopicName.parse("persistent://t/n/rec")
    transport.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), 2))

    class _Svc:
        def __init__(self) -> None:
            self.policies: dict[str, Any] = {}
            self.cache = type("C", (), {"state": __import__("sync").CacheState.READY})()

        def applied(self, _topic: TopicName) -> dict[str, Any]:
            return self.policies

    svc = _Svc()
    rec = TopicConfigReconciler(transport, lambda: svc, LocalOwnership())  # type: ignore[arg-type, return-value]

    async def scenario() -> None:
        svc.policies = {"retentionPolicies": {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2}}
        assert await rec.reconcile(topic)
        assert not await rec.reconcile(topic)  # nothing left to change
        svc.policies = {}
        assert await rec.reconcile(topic)

    asyncio.run(scenario())
    assert transport.admin().topic_overrides(kafka_topic_of(topic)) == {}


def test_reconciler_asks_kafka_only_when_the_wanted_config_changed() -> None:
    """A write of a policy that maps to no topic config costs no admin call; the sweep
    (verify) still compares with Kafka and repairs a config changed behind our back."""
    transport = MemoryTransport()
    topic = TopicName.parse("persistent://t/n/quiet")
    kafka = kafka_topic_of(topic)
    admin = transport.admin()
    admin.ensure_topic(TopicSpec(kafka, 1))
    asked: list[str] = []

    class _Admin:
        def __getattr__(self, name: str) -> Any:
            return getattr(admin, name)

        def topic_overrides(self, name: str) -> Any:
            asked.append(name)
            return admin.topic_overrides(name)

    transport.admin = lambda: _Admin()  # type: ignore[method-assign, assignment, return-value]

    class _Svc:
        policies: dict[str, Any] = {"retentionPolicies": {"retentionTimeInMinutes": 1}}
        cache = type("C", (), {"state": __import__("sync").CacheState.READY})()

        def applied(self, _topic: TopicName) -> dict[str, Any]:
            return self.policies

    svc = _Svc()
    rec = TopicConfigReconciler(transport, lambda: svc, LocalOwnership())  # type: ignore[arg-type, return-value]

    async def scenario() -> None:
        assert await rec.reconcile(topic)  # applied
        assert not await rec.reconcile(topic)  # checked once: equal
        checks = len(asked)
        svc.policies = {**svc.policies, "maxConsumerPerTopic": 3}  # no topic config
        assert not await rec.reconcile(topic)
        assert len(asked) == checks  # no admin call
        admin.alter_topic_config(kafka, {}, ["retention.ms"])  # drift behind our back
        assert not await rec.reconcile(topic)  # not noticed by a write...
        assert await rec.reconcile(topic, verify=True)  # ...repaired by the sweep
        svc.policies = {}
        assert await rec.reconcile(topic)  # a changed wanted config is applied at once

    asyncio.run(scenario())
    assert admin.topic_overrides(kafka) == {}


def test_only_changes_of_config_policies_wake_the_reconciler() -> None:
    """Every policy write reaches every sidecar's reconciler; one that changes no policy
    mapped to a topic config (maxConsumers, ...) wakes nothing: no key to reconcile, no
    ownership lookup, no admin call. A changed config policy, or a delete, does."""
    from sync import Policies
    from sync.messaging._topic_config import CONFIG_POLICIES

    # The policies outside CONFIG_POLICIES map to no topic config at all.
    others = {"maxConsumerPerTopic": 3, "maxProducerPerTopic": 2, "deduplicationEnabled": True}
    assert set(desired_topic_config(others).values()) == {None}
    assert set(CONFIG_POLICIES) == {"retentionPolicies", "maxMessageSize", "persistence"}

    rec = TopicConfigReconciler(MemoryTransport(), lambda: None, LocalOwnership())
    key = "persistent://t/n/wake"
    retention = {"retentionPolicies": {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1}}

    async def woken(value: Policies | None) -> bool:
        rec._loop = asyncio.get_running_loop()
        rec._pending.clear()
        rec._listener(key, value)
        await asyncio.sleep(0)  # the call_soon_threadsafe hand-over
        return key in rec._pending

    async def scenario() -> list[bool]:
        return [
            await woken(Policies({"maxConsumerPerTopic": 1})),  # first sight of the key
            await woken(Policies({"maxConsumerPerTopic": 2})),
            await woken(Policies({"maxConsumerPerTopic": 2, **retention})),
            await woken(Policies({"maxConsumerPerTopic": 3, **retention})),
            await woken(Policies({"maxConsumerPerTopic": 3, "maxMessageSize": 2_000_000})),
            await woken(None),  # deleted
            await woken(None),
        ]

    assert asyncio.run(scenario()) == [True, False, True, False, True, True, False]


def test_reconciler_backs_off_unknown_ownership_and_drops_missing_namespaces() -> None:
    from sync._errors import NotFoundError, UnavailableError
    from sync.messaging._topic_config import RETRY_MAX_S, TopicConfigReconciler

    class _Svc:
        cache = type("C", (), {"state": __import__("sync").CacheState.READY})()

        def applied(self, _topic: TopicName) -> dict[str, Any]:
            return {}

    class _Ownership:
        error: Exception = UnavailableError("lookup service STARTING")
        asked = 0

        async def owner_of(self, _topic: TopicName) -> Any:
            self.asked += 1
            raise self.error

    own = _Ownership()
    svc = _Svc()
    rec = TopicConfigReconciler(MemoryTransport(), lambda: svc, own)  # type: ignore[arg-type, return-value]
    topic = TopicName.parse("persistent://t/n/wait")

    async def scenario() -> list[tuple[int, float]]:
        seen = []
        for _ in range(8):
            assert not await rec.reconcile(topic)
            attempts, due = rec._retry[topic]
            seen.append((attempts, due - time.monotonic()))
        return seen

    # Each failure doubles the wait before the next try, up to the cap.
    seen = asyncio.run(scenario())
    assert [a for a, _ in seen] == [1, 2, 3, 4, 5, 6, 7, 8]
    waits = [w for _, w in seen]
    assert waits[0] < waits[1] < waits[2] < waits[3] and waits[-1] <= RETRY_MAX_S
    assert waits[-1] > RETRY_MAX_S / 2  # capped, not reset
    # Nothing is due right after a failure: the loop sleeps instead of spinning.
    assert 0 < rec._next_wait() <= 1.0
    # A namespace that does not exist is not retried at all (the sweep applies it later).
    own.error = NotFoundError("Namespace not found")
    assert not asyncio.run(rec.reconcile(topic))
    assert topic not in rec._retry and rec._next_wait() == 1.0


def test_the_reconciler_stops_when_cancelled_as_it_is_woken() -> None:
    # Python 3.11's asyncio.wait_for returns the inner result when a cancel arrives in
    # the same loop turn as the event it waits for: the reconciler then swallowed its
    # cancel and engine close() waited for it forever (30 s in a unit test).
    rec = TopicConfigReconciler(MemoryTransport(), lambda: None, LocalOwnership())

    async def scenario() -> bool:
        await rec.start()
        await asyncio.sleep(0.05)  # the loop now waits on its wake event
        task = rec._task
        assert task is not None
        rec._wake.set()
        task.cancel()
        await asyncio.wait({task}, timeout=5.0)
        return task.cancelled()

    assert asyncio.run(scenario())


def test_the_last_persisted_sequence_id_is_where_a_producer_resumes() -> None:
    """Only sequence ids Kafka acknowledged count; a refused one may be sent again."""
    dedup = Deduplicator("t", 1, partitioned=False)
    assert dedup.last_persisted("p") == -1
    for seq in (3, 4):
        assert dedup.check("p", seq)[0] is Verdict.NEW
    dedup.persisted("p", 3, MessageId(-1, 10))
    assert dedup.last_persisted("p") == 3  # 4 is still in flight
    dedup.failed("p", 4)
    assert dedup.last_persisted("p") == 3
    dedup.persisted("p", 5, MessageId(-1, 11))
    assert dedup.last_persisted("p") == 5
    assert dedup.last_persisted("other") == -1
