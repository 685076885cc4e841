"""Issue 15: stored topic policies take effect on the data path (real Kafka, WebSocket).

Every test writes through one sidecar (``writer``, which owns no topic) and observes the
effect on another (``server``, which owns every topic): the Kafka topic config applied by
the owner's reconciler, or messages served by the owner's engine.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker_shim._policy_rest import REST_POLICIES
from sync import PolicyTarget, TopicName
from sync._errors import InvalidPolicyError
from sync.messaging import MessagingConfig
from sync.messaging._backlog import BacklogQuotas
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.http import request_json
from tests.support.kafka import consume_some, make_topic
from tests.support.sidecars import NothingHere, ThreadSidecar, applied, cached
from tests.support.waits import wait_for
from tests.support.ws import (
    ack,
    closed_with,
    connect,
    consumer_url,
    path_of,
    produce,
    receive,
    receive_any,
    refused,
    run,
    send_frame,
    set_policy,
    silent,
)


@pytest.fixture(scope="module")
def pair(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadSidecar, ThreadSidecar]]:
    writer = ThreadSidecar(
        kafka_bootstrap, tmp_path_factory.mktemp("writer"), ownership=NothingHere()
    )
    # The owner's sweeps over topics not loaded here run every second, not every 10 s:
    # the inactive-topic and unloaded-TTL tests wait for some of them to have run.
    server = ThreadSidecar(
        kafka_bootstrap,
        tmp_path_factory.mktemp("server"),
        messaging=MessagingConfig(inactive_topic_check_s=1.0, unloaded_expiry_check_s=1.0),
    )
    with writer, server:
        yield writer, server


@contextlib.contextmanager
def _engine_settings(s: ThreadSidecar, **changes: Any) -> Iterator[None]:
    """The sidecar's engine settings changed for one test (read when they are used: a
    subscription takes them when it opens)."""
    before = s.engine.config
    s.engine.config = dataclasses.replace(before, **changes)
    try:
        yield
    finally:
        s.engine.config = before


async def _sweeps(count: Callable[[], int], what: str, n: int = 2) -> None:
    """Wait until ``n`` more of the owner's periodic sweeps have completed (of two, the
    second started after this call: it saw everything set before it)."""
    start = count()
    await asyncio.to_thread(wait_for, lambda: count() >= start + n, what)


def _overrides(bootstrap: str, topic: TopicName) -> dict[str, str]:
    found = KafkaTransport(KafkaConfig(bootstrap)).admin().topic_overrides(kafka_topic_of(topic))
    assert found is not None
    return found


def _policy_url(s: ThreadSidecar, topic: TopicName, name: str) -> str:
    return f"{s.http_url}/admin/v2/{path_of(topic)}/{name}"


def _applied(s: ThreadSidecar, topic: TopicName, name: str) -> Any:
    """The effective value of a REST policy as the sidecar's own cache has it (None: unset),
    once its engine enforces it on the live topic (``PENDING`` until then)."""
    return _thaw(applied(s, topic, REST_POLICIES[name].field))


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if hasattr(value, "items"):
        return {k: _thaw(v) for k, v in value.items()}
    return value


def test_retention_sets_the_kafka_topic_config_on_the_owner(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, _server = pair
    topic = make_topic(kafka_bootstrap, 2)

    def retention() -> tuple[str | None, str | None]:
        o = _overrides(kafka_bootstrap, topic)
        return o.get("retention.ms"), o.get("retention.bytes")

    body = {"retentionTimeInMinutes": 5, "retentionSizeInMB": 10}
    run(set_policy(writer.http_url, topic, "retention", body))
    wait_for(lambda: retention() == ("300000", str(10 * 1024 * 1024)), "retention applied")
    body = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    run(set_policy(writer.http_url, topic, "retention", body))
    wait_for(lambda: retention() == ("3600000", "-1"), "retention updated")
    run(set_policy(writer.http_url, topic, "retention", None))
    wait_for(lambda: retention() == (None, None), "retention back to the broker default")


def test_namespace_retention_applies_to_its_topics_and_topic_policy_wins(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, _server = pair
    topic = make_topic(kafka_bootstrap, 1)
    ns = writer.sidecar.service
    assert ns is not None
    target = PolicyTarget.namespace_of(topic.tenant, topic.namespace)
    ns_ret = {"retentionTimeInMinutes": 7, "retentionSizeInMB": 0}
    try:
        ns.set(target, {"retentionPolicies": ns_ret})
        wait_for(
            lambda: _overrides(kafka_bootstrap, topic).get("retention.ms") == "420000",
            "namespace retention applied",
        )
        body = {"retentionTimeInMinutes": 9, "retentionSizeInMB": 5}
        run(set_policy(writer.http_url, topic, "retention", body))
        wait_for(
            lambda: _overrides(kafka_bootstrap, topic).get("retention.ms") == "540000",
            "topic retention wins over the namespace",
        )
        run(set_policy(writer.http_url, topic, "retention", None))
        wait_for(
            lambda: _overrides(kafka_bootstrap, topic).get("retention.ms") == "420000",
            "namespace retention again",
        )
    finally:
        ns.set(target, {"retentionPolicies": None})


def test_max_message_size_and_persistence_set_kafka_limits(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, _server = pair
    topic = make_topic(kafka_bootstrap, 1)
    run(set_policy(writer.http_url, topic, "maxMessageSize", 2_000_000))
    wait_for(
        lambda: _overrides(kafka_bootstrap, topic).get("max.message.bytes") == "2016384",
        "max.message.bytes raised",
    )
    persistence = {
        "bookkeeperEnsemble": 1,
        "bookkeeperWriteQuorum": 1,
        "bookkeeperAckQuorum": 1,
        "managedLedgerMaxMarkDeleteRate": 0.0,
    }
    run(set_policy(writer.http_url, topic, "persistence", persistence))
    wait_for(
        lambda: _overrides(kafka_bootstrap, topic).get("min.insync.replicas") == "1",
        "min.insync.replicas set",
    )
    run(set_policy(writer.http_url, topic, "maxMessageSize", None))
    run(set_policy(writer.http_url, topic, "persistence", None))
    wait_for(
        lambda: (
            not {"max.message.bytes", "min.insync.replicas"}
            & set(_overrides(kafka_bootstrap, topic))
        ),
        "limits back to the broker default",
    )


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("shadowTopics", ["persistent://public/default/x"], "not supported on this cluster"),
    ],
)
def test_policies_that_cannot_apply_are_refused_and_not_written(
    pair: tuple[ThreadSidecar, ThreadSidecar],
    kafka_bootstrap: str,
    name: str,
    value: Any,
    reason: str,
) -> None:
    writer, _server = pair
    topic = make_topic(kafka_bootstrap, 1)
    status, body = request_json("POST", _policy_url(writer, topic, name), value)
    assert status == 412, body
    assert reason in body["reason"]
    svc = writer.sidecar.service
    assert svc is not None
    assert svc.get(PolicyTarget.for_topic(topic)) is None  # nothing written


def test_policy_rules_refuse_for_every_writer(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    """policyctl and every other writer get the same refusal as the REST API for a rule
    between fields. (replicationClusters is no longer refused here: clusters register
    since geo-replication, and the REST API checks a list against the registered
    clusters; docs/geo-design.md.)"""
    writer, _server = pair
    topic = make_topic(kafka_bootstrap, 1)
    svc = writer.sidecar.service
    assert svc is not None
    target = PolicyTarget.for_topic(topic)
    with pytest.raises(InvalidPolicyError, match=r"Ensemble \(1\) >= WriteQuorum \(2\)"):
        svc.set(
            target,
            {
                "persistence": {
                    "bookkeeperEnsemble": 1,
                    "bookkeeperWriteQuorum": 2,
                    "bookkeeperAckQuorum": 1,
                    "managedLedgerMaxMarkDeleteRate": 0.0,
                }
            },
        )
    assert svc.get(target) is None
    svc.set(target, {"replicationClusters": ["standalone"], "schemaValidationEnforced": True})


def test_backlog_quota_at_or_above_retention_is_refused(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, _server = pair
    topic = make_topic(kafka_bootstrap, 1)
    svc = writer.sidecar.service
    assert svc is not None
    target = PolicyTarget.for_topic(topic)
    svc.set(target, {"retentionPolicies": {"retentionTimeInMinutes": 10, "retentionSizeInMB": 1}})
    quota = {
        "destination_storage": {
            "limitSize": 2 * 1024 * 1024,
            "limitTime": -1,
            "policy": "producer_exception",
        }
    }
    with pytest.raises(InvalidPolicyError, match="Backlog Quota exceeds configured retention"):
        svc.set(target, {"backLogQuotaMap": quota})
    stored = svc.get(target)
    assert stored is not None and "backLogQuotaMap" not in stored
    # the other way round: a retention at or under the stored quota
    quota["destination_storage"]["limitSize"] = 512 * 1024
    quota["destination_storage"]["limitTime"] = 600
    svc.set(target, {"backLogQuotaMap": quota, "retentionPolicies": None})
    bad = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 1}  # 600 s >= 10 minutes
    status, body = request_json("POST", _policy_url(writer, topic, "retention"), bad)
    assert status == 412
    assert body["reason"] == (
        "Retention Quota must exceed configured backlog quota for topic. "
        "Please increase retention quota and retry"
    )
    stored = svc.get(target)
    assert stored is not None and "retentionPolicies" not in stored
    good = {"retentionTimeInMinutes": 11, "retentionSizeInMB": 1}
    assert request_json("POST", _policy_url(writer, topic, "retention"), good)[0] == 204


def test_message_ttl_expires_messages_served_by_the_owner(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = f"{server.ws_url}/producer/{path_of(topic)}"

    async def scenario() -> None:
        await set_policy(writer.http_url, topic, "messageTTL", 1)
        await asyncio.to_thread(
            wait_for, lambda: _applied(server, topic, "messageTTL") == 1, "TTL seen by server"
        )
        async with connect(producer) as prod:
            await produce(prod, [b"old-1", b"old-2", b"old-3"])
            await asyncio.sleep(2.5)  # older than the TTL
            async with connect(consumer_url(server, topic, "s1", subscriptionType="Shared")) as c:
                assert await silent(c, 1.0) == []  # expired: acknowledged, never delivered
                await produce(prod, [b"fresh"])
                got = await receive(c, 1)
                assert [_payload(m) for m in got] == [b"fresh"]
            await set_policy(writer.http_url, topic, "messageTTL", 3600)
            await asyncio.to_thread(
                wait_for, lambda: _applied(server, topic, "messageTTL") == 3600, "TTL update"
            )
            async with connect(consumer_url(server, topic, "s2", subscriptionType="Shared")) as c:
                got = await receive(c, 4)
                assert [_payload(m) for m in got] == [b"old-1", b"old-2", b"old-3", b"fresh"]
            await set_policy(writer.http_url, topic, "messageTTL", None)
            await asyncio.to_thread(
                wait_for, lambda: _applied(server, topic, "messageTTL") is None, "TTL removed"
            )
            async with connect(consumer_url(server, topic, "s3")) as c:
                got = await receive(c, 4)
                assert [_payload(m) for m in got] == [b"old-1", b"old-2", b"old-3", b"fresh"]

    run(scenario())


def test_message_ttl_expires_buffered_messages_periodically(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    """Messages waiting in a subscription whose consumer has no permits expire anyway."""
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = f"{server.ws_url}/producer/{path_of(topic)}"

    async def scenario() -> None:
        url = consumer_url(server, topic, "p", receiverQueueSize=1)
        async with connect(url) as c, connect(producer) as prod:
            await produce(prod, [b"a", b"b", b"c"])
            first = await receive(c, 1)  # holds its only permit: b and c stay buffered
            await set_policy(writer.http_url, topic, "messageTTL", 1)
            engine_sub = _subscription(server, topic, "p")
            await asyncio.to_thread(
                wait_for, lambda: engine_sub.expired >= 2, "periodic expiry", 60.0
            )
            assert [_payload(m) for m in first] == [b"a"]
            await set_policy(writer.http_url, topic, "messageTTL", None)

    run(scenario())


def _subscription(s: ThreadSidecar, topic: TopicName, name: str) -> Any:
    ts = s.engine.topic_state(topic)
    assert ts is not None
    return ts.subscriptions[name]


def _payload(frame: dict[str, Any]) -> bytes:
    return base64.b64decode(frame["payload"])


def _quota(policy: str, limit_size: int = 100, limit_time: int = -1) -> dict[str, Any]:
    return {
        "destination_storage": {"limitSize": limit_size, "limitTime": limit_time, "policy": policy}
    }


def test_backlog_quota_producer_exception_then_eviction_then_removed(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = f"{server.ws_url}/producer/{path_of(topic)}"
    svc = writer.sidecar.service
    assert svc is not None
    target = PolicyTarget.for_topic(topic)
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()

    async def scenario() -> None:
        # A slow subscription: receives, never acknowledges.
        async with connect(consumer_url(server, topic, "slow", receiverQueueSize=1)) as slow:
            async with connect(producer) as prod:
                await produce(prod, [b"x" * 100 for _ in range(10)])
                await receive(slow, 1)
                await asyncio.to_thread(
                    svc.set, target, {"backLogQuotaMap": _quota("producer_exception")}
                )
                code, reason = await closed_with(prod, 60.0)
                assert (code, reason) == (
                    1008,
                    "Cannot create producer on topic with backlog quota exceeded",
                )
            status, text = await refused(producer)
            assert status == 409
            assert "Cannot create producer on topic with backlog quota exceeded" in text
            # update: evict the slowest subscription instead
            await asyncio.to_thread(
                svc.set, target, {"backLogQuotaMap": _quota("consumer_backlog_eviction")}
            )

            def moved() -> bool:
                group = f"{_group_prefix(topic)}slow"
                return admin.group_offsets(group, kafka_topic_of(topic)).get(0, 0) >= 9

            await asyncio.to_thread(wait_for, moved, "slow subscription moved forward")
            async with connect(producer) as prod:
                await produce(prod, [b"after-eviction"])
        # delete: no quota at all, even with a large backlog
        await asyncio.to_thread(svc.set, target, {"backLogQuotaMap": None})
        server_svc = server.sidecar.service
        assert server_svc is not None
        await asyncio.to_thread(
            wait_for,
            lambda: "backLogQuotaMap" not in server_svc.applied(topic),
            "quota removal seen by the server",
        )
        async with connect(consumer_url(server, topic, "slow2", receiverQueueSize=1)) as slow2:
            async with connect(producer) as prod:
                await produce(prod, [b"y" * 100 for _ in range(10)])
                await receive(slow2, 1)
                assert await silent(prod, 5.0) == []  # still open after two checks

    run(scenario(), timeout_s=180)


def test_backlog_quota_producer_request_hold_holds_sends_until_acknowledged(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = f"{server.ws_url}/producer/{path_of(topic)}"
    svc = writer.sidecar.service
    assert svc is not None
    target = PolicyTarget.for_topic(topic)

    async def scenario() -> None:
        async with (
            connect(consumer_url(server, topic, "slow", receiverQueueSize=20)) as slow,
            connect(producer) as prod,
        ):
            await produce(prod, [b"x" * 100 for _ in range(10)])
            held = await receive(slow, 10)
            await asyncio.to_thread(
                svc.set, target, {"backLogQuotaMap": _quota("producer_request_hold")}
            )
            engine = server.engine
            await asyncio.to_thread(
                wait_for,
                lambda: (ts := engine.topic_state(topic)) is not None and not ts.writable.is_set(),
                "sends held",
            )
            await prod.send(send_frame(b"waits", context="w"))
            assert await silent(prod, 1.0) == []  # held: no answer yet
            await ack(slow, held)  # the backlog drops: the held send goes through
            answer = json.loads(await asyncio.wait_for(prod.recv(), 60))
            assert answer["result"] == "ok" and answer["context"] == "w"
            await asyncio.to_thread(svc.set, target, {"backLogQuotaMap": None})

    run(scenario(), timeout_s=180)


def _group_prefix(topic: TopicName) -> str:
    from sync.messaging import subscription_group

    return subscription_group(kafka_topic_of(topic), "")


def test_deduplication_acks_resends_without_writing_across_sidecars(
    pair: tuple[ThreadSidecar, ThreadSidecar],
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 2)
    producer = f"{server.ws_url}/producer/{path_of(topic)}?producerName=p1"
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()
    from sync.messaging._dedup import dedup_group

    async def send_seq(url: str, seqs: list[int]) -> list[dict[str, Any]]:
        async with connect(url) as prod:
            for s in seqs:
                await prod.send(send_frame(f"m{s}".encode(), context=str(s), sequenceId=s))
            return [json.loads(await asyncio.wait_for(prod.recv(), 30)) for _ in seqs]

    async def payloads(sub: str, count: int) -> list[bytes]:
        async with connect(consumer_url(server, topic, sub, subscriptionType="Shared")) as c:
            got = await receive(c, count, timeout_s=30.0)
            return sorted(_payload(m) for m in got + await silent(c, 1.0))

    async def scenario() -> None:
        await set_policy(writer.http_url, topic, "deduplicationEnabled", True)
        await set_policy(writer.http_url, topic, "deduplicationSnapshotInterval", 1)
        await asyncio.to_thread(
            wait_for,
            lambda: _applied(server, topic, "deduplicationSnapshotInterval") == 1,
            "dedup policies seen by the server",
        )
        first = await send_seq(producer, [0, 1, 2])
        assert all(a["result"] == "ok" for a in first)
        again = await send_seq(producer, [1, 2])  # re-sent: acknowledged, not written
        assert [a["result"] for a in again] == ["ok", "ok"]
        assert again[1]["messageId"] == first[2]["messageId"]
        assert await payloads("a", 3) == [b"m0", b"m1", b"m2"]
        # the snapshot is in Kafka: another sidecar serving the topic knows the sequence
        group = dedup_group(kafka_topic_of(topic))
        await asyncio.to_thread(
            wait_for, lambda: bool(admin.group_offsets(group, kafka_topic_of(topic))), "snapshot"
        )
        with ThreadSidecar(kafka_bootstrap, tmp_path_factory.mktemp("other")) as other:
            other_url = f"{other.ws_url}/producer/{path_of(topic)}?producerName=p1"
            moved = await send_seq(other_url, [2, 3])
            assert [a["result"] for a in moved] == ["ok", "ok"]
        assert await payloads("b", 4) == [b"m0", b"m1", b"m2", b"m3"]
        # update: disabled, a re-send is written again
        await set_policy(writer.http_url, topic, "deduplicationEnabled", False)
        await asyncio.to_thread(
            wait_for,
            lambda: _applied(server, topic, "deduplicationEnabled") is False,
            "dedup disabled on the server",
        )
        await send_seq(producer, [3])
        assert await payloads("c", 5) == [b"m0", b"m1", b"m2", b"m3", b"m3"]
        # delete: the default (off) applies
        await set_policy(writer.http_url, topic, "deduplicationEnabled", None)
        await asyncio.to_thread(
            wait_for,
            lambda: _applied(server, topic, "deduplicationEnabled") is None,
            "dedup policy removed",
        )
        await send_seq(producer, [3])
        assert await payloads("d", 6) == [b"m0", b"m1", b"m2", b"m3", b"m3", b"m3"]

    run(scenario(), timeout_s=240)


async def _acks_within(prod: Any, count: int, window_s: float) -> int:
    """Send ``count`` messages pipelined; how many were acknowledged within ``window_s``."""
    for i in range(count):
        await prod.send(send_frame(f"r{i}".encode(), context=str(i)))
    got = 0
    deadline = time.monotonic() + window_s
    while got < count and (left := deadline - time.monotonic()) > 0:
        try:
            await asyncio.wait_for(prod.recv(), left)
        except TimeoutError:
            break
        got += 1
    return got


def test_publish_rate_throttles_producers_on_the_owner(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = f"{server.ws_url}/producer/{path_of(topic)}"

    async def seen(value: Any) -> None:
        await asyncio.to_thread(
            wait_for, lambda: _applied(server, topic, "publishRate") == value, "publishRate"
        )

    async def scenario() -> None:
        rate = {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 0}
        await set_policy(writer.http_url, topic, "publishRate", rate)
        await seen(rate)
        async with connect(producer) as prod:
            # a burst of 10, then 10/s over 2 s (+2 for timer slack); unthrottled: all 60
            acked = await _acks_within(prod, 60, 2.0)
            assert 1 <= acked <= 32
        rate = {"publishThrottlingRateInMsg": 100_000, "publishThrottlingRateInByte": 0}
        await set_policy(writer.http_url, topic, "publishRate", rate)
        await seen(rate)
        async with connect(producer) as prod:
            assert await _acks_within(prod, 60, 60.0) == 60
        await set_policy(writer.http_url, topic, "publishRate", None)
        await seen(None)
        async with connect(producer) as prod:
            assert await _acks_within(prod, 60, 60.0) == 60

    run(scenario(), timeout_s=180)


def test_subscribe_rate_refuses_subscriptions_over_the_rate(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    url = consumer_url(server, topic, "s", consumerName="c1", subscriptionType="Shared")

    async def seen(value: Any) -> None:
        await asyncio.to_thread(
            wait_for, lambda: _applied(server, topic, "subscribeRate") == value, "subscribeRate"
        )

    async def scenario() -> None:
        rate = {"subscribeThrottlingRatePerConsumer": 1, "ratePeriodInSecond": 600}
        await set_policy(writer.http_url, topic, "subscribeRate", rate)
        await seen(rate)
        async with connect(url):
            pass
        status, text = await refused(url)
        assert status == 403
        assert text.endswith("Subscribe limited by subscribe rate limit per consumer.")
        rate = {"subscribeThrottlingRatePerConsumer": 1000, "ratePeriodInSecond": 1}
        await set_policy(writer.http_url, topic, "subscribeRate", rate)
        await seen(rate)
        for _ in range(3):
            async with connect(url):
                pass
        await set_policy(writer.http_url, topic, "subscribeRate", None)
        await seen(None)
        for _ in range(3):
            async with connect(url):
                pass

    run(scenario(), timeout_s=180)


def test_max_unacked_messages_on_subscription_pauses_dispatch(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = f"{server.ws_url}/producer/{path_of(topic)}"
    name = "maxUnackedMessagesOnSubscription"

    async def seen(value: Any) -> None:
        await asyncio.to_thread(wait_for, lambda: _applied(server, topic, name) == value, name)

    async def scenario() -> None:
        await set_policy(writer.http_url, topic, name, 4)
        await seen(4)
        url = consumer_url(server, topic, "u", subscriptionType="Shared")
        async with connect(url) as c1, connect(url) as c2, connect(producer) as prod:
            await produce(prod, [f"m{i}".encode() for i in range(20)])

            async def next_four() -> list[dict[str, Any]]:
                got = await receive_any([c1, c2], 4)
                # both consumers have room; the subscription does not
                assert await silent(c1, 0.5) + await silent(c2, 0.5) == []
                return got

            first = await next_four()
            await ack(c1, first)  # an ack counts from any consumer of the subscription
            # Dispatch resumes once fewer than half the limit are unacknowledged (as in
            # Pulsar). Acks read in one loop turn leave 0: 4 more come. Acks read a turn
            # apart resume it at 1 left (after the third): 3 more come, and the fourth ack
            # leaves 3, not below half, so it stays paused. Either way it pauses again.
            second = await receive_any([c1, c2], 3)
            second += await silent(c1, 0.5) + await silent(c2, 0.5)
            assert len(second) in (3, 4), second
            assert await silent(c1, 0.5) + await silent(c2, 0.5) == []
            await set_policy(writer.http_url, topic, name, 100)
            await seen(100)
            rest = await receive_any([c1, c2], 20 - len(first) - len(second))
            assert await silent(c1, 0.5) + await silent(c2, 0.5) == []
            assert sorted(_payload(m) for m in first + second + rest) == sorted(
                f"m{i}".encode() for i in range(20)
            )
            await set_policy(writer.http_url, topic, name, None)
            await seen(None)

    run(scenario(), timeout_s=180)


def test_delayed_delivery_holds_messages_on_shared_and_refuses_beyond_the_max(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = f"{server.ws_url}/producer/{path_of(topic)}"
    svc, server_svc = writer.sidecar.service, server.sidecar.service
    assert svc is not None and server_svc is not None
    target = PolicyTarget.for_topic(topic)

    async def apply(patch: dict[str, Any]) -> None:
        await asyncio.to_thread(svc.set, target, patch)
        want = {k: v for k, v in patch.items() if v is not None}
        await asyncio.to_thread(
            wait_for,
            lambda: (
                all(server_svc.applied(topic).get(k) == v for k, v in want.items())
                and not any(k in server_svc.applied(topic) for k, v in patch.items() if v is None)
            ),
            "delayed delivery policies seen by the server",
        )

    async def send(prod: Any, payload: bytes, **extra: Any) -> dict[str, Any]:
        await prod.send(send_frame(payload, context=payload.decode(), **extra))
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(prod.recv(), 30))
        return answer

    async def scenario() -> None:
        await apply(
            {
                "delayedDeliveryEnabled": True,
                "delayedDeliveryTickTimeMillis": 100,
                "delayedDeliveryMaxDelayInMillis": 600_000,
            }
        )
        shared = consumer_url(server, topic, "sh", subscriptionType="Shared")
        excl = consumer_url(server, topic, "ex")
        async with connect(shared) as sh, connect(excl) as ex, connect(producer) as prod:
            assert (await send(prod, b"late", deliverAfterMs=2000))["result"] == "ok"
            assert (await send(prod, b"now"))["result"] == "ok"
            first = await receive(sh, 1)
            assert [_payload(m) for m in first] == [b"now"]
            assert await silent(sh, 0.5) == []  # not due yet
            later = await receive(sh, 1, 30)
            assert [_payload(m) for m in later] == [b"late"]
            await ack(sh, first + later)
            # Exclusive subscriptions ignore the delay, as Pulsar
            assert [_payload(m) for m in await receive(ex, 2)] == [b"late", b"now"]
            too_far = await send(prod, b"far", deliverAfterMs=700_000)
            assert too_far["result"] != "ok"
            assert (
                "Exceeds max allowed delivery delay of 600000 milliseconds" in too_far["errorMsg"]
            )
        # update: disabled, a delayed message is delivered at once
        await apply({"delayedDeliveryEnabled": False})
        async with connect(shared) as sh, connect(producer) as prod:
            assert (await send(prod, b"undelayed", deliverAfterMs=60_000))["result"] == "ok"
            got = await receive(sh, 1)
            assert [_payload(m) for m in got] == [b"undelayed"]
            await ack(sh, got)
        # delete: Pulsar's defaults (enabled, no maximum)
        await apply(
            {
                "delayedDeliveryEnabled": None,
                "delayedDeliveryTickTimeMillis": None,
                "delayedDeliveryMaxDelayInMillis": None,
            }
        )
        async with connect(shared) as sh, connect(producer) as prod:
            assert (await send(prod, b"far", deliverAfterMs=700_000))["result"] == "ok"
            assert (await send(prod, b"soon", deliverAfterMs=1500))["result"] == "ok"
            assert await silent(sh, 0.5) == []
            assert [_payload(m) for m in await receive(sh, 1, 30)] == [b"soon"]

    run(scenario(), timeout_s=180)


def test_inactive_topic_policies_delete_unused_topics_on_the_owner(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()
    svc = writer.sidecar.service
    assert svc is not None

    def exists(topic: TopicName) -> bool:
        return admin.describe_topic(kafka_topic_of(topic)) is not None

    def policy(mode: str) -> dict[str, Any]:
        return {
            "inactiveTopicDeleteMode": mode,
            "maxInactiveDurationSeconds": 1,
            "deleteWhileInactive": True,
        }

    async def publish(topic: TopicName) -> None:
        async with connect(f"{server.ws_url}/producer/{path_of(topic)}") as prod:
            await produce(prod, [b"one"])

    def unloaded(topic: TopicName) -> bool:  # only unloaded topics are checked
        return server.engine.topic_state(topic) is None

    def mode_seen(topic: TopicName) -> str | None:  # the delete mode in the owner's cache
        value = cached(server, topic, REST_POLICIES["inactiveTopicPolicies"].field)
        return None if value is None else value.get("inactiveTopicDeleteMode")

    async def checks() -> None:
        await _sweeps(lambda: server.engine.inactive_topic_sweeps, "inactive-topic checks")

    async def scenario() -> None:
        # write: no subscriptions, idle → deleted (its Kafka topic)
        gone = make_topic(kafka_bootstrap, 1)
        await publish(gone)
        await set_policy(
            writer.http_url, gone, "inactiveTopicPolicies", policy("delete_when_no_subscriptions")
        )
        await asyncio.to_thread(wait_for, lambda: not exists(gone), "inactive topic deleted")
        # update: caught-up mode keeps a topic whose subscription has a backlog …
        kept = make_topic(kafka_bootstrap, 1)
        async with connect(consumer_url(server, kept, "s")) as c:
            await publish(kept)
            held = await receive(c, 1)
        await set_policy(
            writer.http_url, kept, "inactiveTopicPolicies", policy("delete_when_no_subscriptions")
        )
        mode = policy("delete_when_subscriptions_caught_up")
        await set_policy(writer.http_url, kept, "inactiveTopicPolicies", mode)
        await asyncio.to_thread(
            wait_for, lambda: mode_seen(kept) == mode["inactiveTopicDeleteMode"], "mode seen"
        )
        await asyncio.to_thread(wait_for, lambda: unloaded(kept), "idle topic unloaded")
        await checks()
        assert exists(kept)  # it has an unacknowledged message
        async with connect(consumer_url(server, kept, "s")) as c:
            again = await receive(c, 1)
            assert again[0]["messageId"] == held[0]["messageId"]
            await ack(c, again)
        await asyncio.to_thread(wait_for, lambda: not exists(kept), "caught-up topic deleted")
        # delete: without the policy an idle topic stays (set and removed while a producer
        # keeps it loaded, so no check can see it idle before the owner has the removal)
        stays = make_topic(kafka_bootstrap, 1)
        async with connect(f"{server.ws_url}/producer/{path_of(stays)}") as prod:
            await produce(prod, [b"one"])
            first = policy("delete_when_no_subscriptions")
            await set_policy(writer.http_url, stays, "inactiveTopicPolicies", first)
            await asyncio.to_thread(
                wait_for, lambda: mode_seen(stays) == first["inactiveTopicDeleteMode"], "seen"
            )
            await set_policy(writer.http_url, stays, "inactiveTopicPolicies", None)
            await asyncio.to_thread(wait_for, lambda: mode_seen(stays) is None, "removal seen")
        await asyncio.to_thread(wait_for, lambda: unloaded(stays), "idle topic unloaded")
        await checks()
        assert exists(stays)

    # A subscription without consumers closes after 1 s rather than 30 (its topic is
    # unloaded then, and only unloaded topics are checked for inactivity).
    with _engine_settings(server, idle_subscription_close_s=1.0):
        run(scenario(), timeout_s=240)


def test_message_ttl_moves_subscriptions_not_loaded_anywhere(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    kafka_topic = kafka_topic_of(topic)
    transport = KafkaTransport(KafkaConfig(kafka_bootstrap))
    admin = transport.admin()
    group = f"{_group_prefix(topic)}cold"

    def commit(offset: int) -> None:
        consumer = transport.consumer(group_id=group)
        try:
            consumer.commit(kafka_topic, {0: (offset, "")})
        finally:
            consumer.close()

    def position() -> int:
        return admin.group_offsets(group, kafka_topic).get(0, 0)

    def sweeps() -> int:
        return server.engine.unloaded_expiry_sweeps

    async def scenario() -> None:
        async with connect(f"{server.ws_url}/producer/{path_of(topic)}") as prod:
            await produce(prod, [b"a", b"b", b"c"])
        await asyncio.to_thread(commit, 0)  # a durable subscription nobody serves now
        await asyncio.sleep(1.5)
        await set_policy(writer.http_url, topic, "messageTTL", 1)
        await asyncio.to_thread(wait_for, lambda: position() == 3, "cold subscription expired")
        await set_policy(writer.http_url, topic, "messageTTL", 3600)
        await asyncio.to_thread(
            wait_for, lambda: _applied(server, topic, "messageTTL") == 3600, "TTL update"
        )
        await _sweeps(sweeps, "a TTL sweep", 1)  # none that read the old TTL still runs
        await asyncio.to_thread(commit, 0)
        await _sweeps(sweeps, "TTL sweeps")
        assert position() == 0  # nothing is an hour old
        await set_policy(writer.http_url, topic, "messageTTL", None)
        await asyncio.to_thread(
            wait_for, lambda: _applied(server, topic, "messageTTL") is None, "TTL removed"
        )
        await _sweeps(sweeps, "TTL sweeps")
        assert position() == 0

    run(scenario(), timeout_s=180)


def test_backlog_eviction_moves_subscriptions_not_loaded_anywhere_keeping_their_acks(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    """The owner enforces ``consumer_backlog_eviction`` on a topic nobody is connected to
    (Pulsar's periodic backlog quota check), counts the backlog exactly (an individual ack
    above the committed offset is not backlog), sizes it from the records read, and moves
    the subscription forward keeping its individual ack above the new position."""
    from sync.messaging._backlog import RecordSizes, measure_backlog, record_size
    from sync.messaging._cursor import decode_ack_ranges, encode_ack_ranges

    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    kafka_topic = kafka_topic_of(topic)
    transport = KafkaTransport(KafkaConfig(kafka_bootstrap))
    admin = transport.admin()
    group = f"{_group_prefix(topic)}cold"
    svc = writer.sidecar.service
    assert svc is not None
    target = PolicyTarget.for_topic(topic)

    def commit_acked_8() -> None:  # everything from 0 unacked, except offset 8
        metadata, _ = encode_ack_ranges(0, [(8, 9)], 4000)
        consumer = transport.consumer(group_id=group)
        try:
            consumer.commit(kafka_topic, {0: (0, metadata)})
        finally:
            consumer.close()

    def position() -> tuple[int, str]:
        return admin.group_positions(group, kafka_topic).get(0, (0, ""))

    def sizes_read() -> list[int]:
        consumer = transport.consumer()
        try:
            consumer.assign(kafka_topic, {0: 0})
            return [record_size(m) for m in consume_some(consumer, 10, poll_s=0.5)]
        finally:
            consumer.close()

    def limit_seen() -> int | None:
        server_svc = server.sidecar.service
        assert server_svc is not None
        quota = server_svc.applied(topic).get("backLogQuotaMap")
        return None if not quota else int(quota["destination_storage"]["limitSize"])

    async def scenario() -> None:
        async with connect(f"{server.ws_url}/producer/{path_of(topic)}") as prod:
            await produce(prod, [b"x" * 100 for _ in range(10)])
        await asyncio.to_thread(commit_acked_8)
        sizes = await asyncio.to_thread(sizes_read)
        assert len(sizes) == 10
        quotas = BacklogQuotas.from_policy(_quota("consumer_backlog_eviction", 450))
        m = await asyncio.to_thread(
            measure_backlog,
            admin,
            kafka_topic,
            1,
            [group],
            quotas,
            transport=transport,
            sizes=RecordSizes(kafka_topic),
        )
        assert m.messages() == 9  # exact: 10 published, offset 8 individually acked
        assert m.size_bytes() == sum(sizes) - sizes[8]
        engine = server.engine
        assert engine.topic_state(topic) is None  # nobody connected: not loaded

        await asyncio.to_thread(
            svc.set, target, {"backLogQuotaMap": _quota("consumer_backlog_eviction", 450)}
        )
        await asyncio.to_thread(wait_for, lambda: position()[0] > 0, "cold subscription evicted")
        offset, metadata = position()
        keep = sum(sizes[offset:])
        assert keep <= 450 < keep + sizes[offset - 1]  # just enough moved for the quota
        assert offset < 8
        assert decode_ack_ranges(offset, metadata) == [(8, 9)]  # the ack above is kept
        assert engine.topic_state(topic) is None

        # update: a quota the backlog fits in moves nothing
        check_s = engine.config.backlog_check_s
        await asyncio.to_thread(
            svc.set, target, {"backLogQuotaMap": _quota("consumer_backlog_eviction", 100_000)}
        )
        await asyncio.to_thread(
            wait_for, lambda: limit_seen() == 100_000, "quota update seen by the server"
        )
        await asyncio.to_thread(commit_acked_8)
        await asyncio.sleep(2.5 * check_s)
        assert position()[0] == 0
        # delete: no quota, nothing moves
        await asyncio.to_thread(svc.set, target, {"backLogQuotaMap": None})
        await asyncio.to_thread(
            wait_for, lambda: limit_seen() is None, "quota removal seen by the server"
        )
        await asyncio.sleep(2.5 * check_s)
        assert position()[0] == 0

    run(scenario(), timeout_s=180)
