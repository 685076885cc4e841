"""Issue 15: stored topic policies take effect on the data path (real Kafka, WebSocket).

Every test writes through one sidecar (``writer``, which owns no topic) and observes the
effect on another (``server``, which owns every topic): the Kafka topic config applied by
the owner's reconciler, or messages served by the owner's engine.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker_shim._http import build_app
from broker_shim._ws import ENGINE_KEY
from sync import PolicyTarget, TopicName
from sync._errors import InvalidPolicyError
from sync._kafka_names import kafka_topic_of
from sync.messaging import OwnerInfo
from sync.transport import KafkaConfig, KafkaTransport
from tests.integration._ws_harness import (
    ThreadSidecar,
    ack,
    connect,
    consumer_url,
    make_topic,
    path_of,
    produce,
    receive,
    run,
    send_frame,
    set_policy,
    silent,
)


class _NothingHere:
    """Ownership of a sidecar that serves no topic (it only takes the admin writes)."""

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        return OwnerInfo(local=False, http_url="http://127.0.0.1:1")


@pytest.fixture(scope="module")
def pair(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadSidecar, ThreadSidecar]]:
    writer = ThreadSidecar(kafka_bootstrap, tmp_path_factory.mktemp("writer"))
    writer._app_factory = lambda: build_app(writer.sidecar, ownership=_NothingHere())  # noqa: SLF001
    with writer, ThreadSidecar(kafka_bootstrap, tmp_path_factory.mktemp("server")) as server:
        yield writer, server


def _overrides(bootstrap: str, topic: TopicName) -> dict[str, str]:
    found = KafkaTransport(KafkaConfig(bootstrap)).admin().topic_overrides(kafka_topic_of(topic))
    assert found is not None
    return found


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def _request(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(  # noqa: S310 - test-local URL
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _policy_url(s: ThreadSidecar, topic: TopicName, name: str) -> str:
    return f"{s.http_url}/admin/v2/{path_of(topic)}/{name}"


def _applied(s: ThreadSidecar, topic: TopicName, name: str) -> Any:
    status, body = _request("GET", _policy_url(s, topic, name) + "?applied=true")
    return None if status == 204 else body


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
    _wait_for(lambda: retention() == ("300000", str(10 * 1024 * 1024)), "retention applied")
    body = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    run(set_policy(writer.http_url, topic, "retention", body))
    _wait_for(lambda: retention() == ("3600000", "-1"), "retention updated")
    run(set_policy(writer.http_url, topic, "retention", None))
    _wait_for(lambda: retention() == (None, None), "retention back to the broker default")


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
        _wait_for(
            lambda: _overrides(kafka_bootstrap, topic).get("retention.ms") == "420000",
            "namespace retention applied",
        )
        body = {"retentionTimeInMinutes": 9, "retentionSizeInMB": 0}
        run(set_policy(writer.http_url, topic, "retention", body))
        _wait_for(
            lambda: _overrides(kafka_bootstrap, topic).get("retention.ms") == "540000",
            "topic retention wins over the namespace",
        )
        run(set_policy(writer.http_url, topic, "retention", None))
        _wait_for(
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
    _wait_for(
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
    _wait_for(
        lambda: _overrides(kafka_bootstrap, topic).get("min.insync.replicas") == "1",
        "min.insync.replicas set",
    )
    run(set_policy(writer.http_url, topic, "maxMessageSize", None))
    run(set_policy(writer.http_url, topic, "persistence", None))
    _wait_for(
        lambda: (
            not {"max.message.bytes", "min.insync.replicas"}
            & set(_overrides(kafka_bootstrap, topic))
        ),
        "limits back to the broker default",
    )


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        (
            "persistence",
            {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1},
            "Bookkeeper Ensemble (1) >= WriteQuorum (2) >= AckQuoru (1)",
        ),
        ("replicationClusters", ["east", "west"], "geo-replication is not supported"),
        ("shadowTopics", ["persistent://public/default/x"], "not supported on this cluster"),
        ("schemaValidationEnforced", True, "not supported on this cluster"),
        ("compactionThreshold", 1024, "not supported on this cluster"),
        ("publishRate", {"publishThrottlingRateInMsg": -1}, "must be between 0"),
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
    status, body = _request("POST", _policy_url(writer, topic, name), value)
    assert status == 412, body
    assert reason in body["reason"]
    assert _request("GET", _policy_url(writer, topic, name))[0] == 204


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
    status, body = _request("POST", _policy_url(writer, topic, "retention"), bad)
    assert status == 412
    assert body["reason"] == (
        "Retention Quota must exceed configured backlog quota for topic. "
        "Please increase retention quota and retry"
    )
    stored = svc.get(target)
    assert stored is not None and "retentionPolicies" not in stored
    good = {"retentionTimeInMinutes": 11, "retentionSizeInMB": 1}
    assert _request("POST", _policy_url(writer, topic, "retention"), good)[0] == 204


def test_message_ttl_expires_messages_served_by_the_owner(
    pair: tuple[ThreadSidecar, ThreadSidecar], kafka_bootstrap: str
) -> None:
    writer, server = pair
    topic = make_topic(kafka_bootstrap, 1)
    producer = f"{server.ws_url}/producer/{path_of(topic)}"

    async def scenario() -> None:
        await set_policy(writer.http_url, topic, "messageTTL", 1)
        await asyncio.to_thread(
            _wait_for, lambda: _applied(server, topic, "messageTTL") == 1, "TTL seen by server"
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
                _wait_for, lambda: _applied(server, topic, "messageTTL") == 3600, "TTL update"
            )
            async with connect(consumer_url(server, topic, "s2", subscriptionType="Shared")) as c:
                got = await receive(c, 4)
                assert [_payload(m) for m in got] == [b"old-1", b"old-2", b"old-3", b"fresh"]
            await set_policy(writer.http_url, topic, "messageTTL", None)
            await asyncio.to_thread(
                _wait_for, lambda: _applied(server, topic, "messageTTL") is None, "TTL removed"
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
                _wait_for, lambda: engine_sub.expired >= 2, "periodic expiry", 60.0
            )
            assert [_payload(m) for m in first] == [b"a"]
            await set_policy(writer.http_url, topic, "messageTTL", None)

    run(scenario())


def _subscription(s: ThreadSidecar, topic: TopicName, name: str) -> Any:
    runner = s._runner  # noqa: SLF001
    assert runner is not None
    engine = runner.app[ENGINE_KEY]
    ts = engine.topic_state(topic)
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
                code, reason = await _closed_with(prod)
                assert (code, reason) == (
                    1008,
                    "Cannot create producer on topic with backlog quota exceeded",
                )
            status, text = await _refused(producer)
            assert status == 409
            assert "Cannot create producer on topic with backlog quota exceeded" in text
            # update: evict the slowest subscription instead
            await asyncio.to_thread(
                svc.set, target, {"backLogQuotaMap": _quota("consumer_backlog_eviction")}
            )

            def moved() -> bool:
                group = f"{_group_prefix(topic)}slow"
                return admin.group_offsets(group, kafka_topic_of(topic)).get(0, 0) >= 9

            await asyncio.to_thread(_wait_for, moved, "slow subscription moved forward")
            async with connect(producer) as prod:
                await produce(prod, [b"after-eviction"])
        # delete: no quota at all, even with a large backlog
        await asyncio.to_thread(svc.set, target, {"backLogQuotaMap": None})
        server_svc = server.sidecar.service
        assert server_svc is not None
        await asyncio.to_thread(
            _wait_for,
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
            engine = _engine(server)
            await asyncio.to_thread(
                _wait_for,
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


def _engine(s: ThreadSidecar) -> Any:
    runner = s._runner  # noqa: SLF001
    assert runner is not None
    return runner.app[ENGINE_KEY]


async def _closed_with(ws: Any, timeout_s: float = 60.0) -> tuple[int, str]:
    import websockets

    deadline = time.monotonic() + timeout_s
    try:
        while True:
            await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
    except websockets.ConnectionClosed as exc:
        assert exc.rcvd is not None, "closed without a close frame"
        return exc.rcvd.code, exc.rcvd.reason


async def _refused(url: str) -> tuple[int, str]:
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as info:
        async with connect(url):
            pass
    body = json.loads(info.value.response.body or b"{}")
    return info.value.response.status_code, str(body.get("reason"))


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

    async def payloads(sub: str) -> list[bytes]:
        async with connect(consumer_url(server, topic, sub, subscriptionType="Shared")) as c:
            return sorted(_payload(m) for m in await silent(c, 2.0))

    async def scenario() -> None:
        await set_policy(writer.http_url, topic, "deduplicationEnabled", True)
        await set_policy(writer.http_url, topic, "deduplicationSnapshotInterval", 1)
        await asyncio.to_thread(
            _wait_for,
            lambda: _applied(server, topic, "deduplicationSnapshotInterval") == 1,
            "dedup policies seen by the server",
        )
        first = await send_seq(producer, [0, 1, 2])
        assert all(a["result"] == "ok" for a in first)
        again = await send_seq(producer, [1, 2])  # re-sent: acknowledged, not written
        assert [a["result"] for a in again] == ["ok", "ok"]
        assert again[1]["messageId"] == first[2]["messageId"]
        assert await payloads("a") == [b"m0", b"m1", b"m2"]
        # the snapshot is in Kafka: another sidecar serving the topic knows the sequence
        group = dedup_group(kafka_topic_of(topic))
        await asyncio.to_thread(
            _wait_for, lambda: bool(admin.group_offsets(group, kafka_topic_of(topic))), "snapshot"
        )
        with ThreadSidecar(kafka_bootstrap, tmp_path_factory.mktemp("other")) as other:
            other_url = f"{other.ws_url}/producer/{path_of(topic)}?producerName=p1"
            moved = await send_seq(other_url, [2, 3])
            assert [a["result"] for a in moved] == ["ok", "ok"]
        assert await payloads("b") == [b"m0", b"m1", b"m2", b"m3"]
        # update: disabled, a re-send is written again
        await set_policy(writer.http_url, topic, "deduplicationEnabled", False)
        await asyncio.to_thread(
            _wait_for,
            lambda: _applied(server, topic, "deduplicationEnabled") is False,
            "dedup disabled on the server",
        )
        await send_seq(producer, [3])
        assert await payloads("c") == [b"m0", b"m1", b"m2", b"m3", b"m3"]
        # delete: the default (off) applies
        await set_policy(writer.http_url, topic, "deduplicationEnabled", None)
        await asyncio.to_thread(
            _wait_for,
            lambda: _applied(server, topic, "deduplicationEnabled") is None,
            "dedup policy removed",
        )
        await send_seq(producer, [3])
        assert await payloads("d") == [b"m0", b"m1", b"m2", b"m3", b"m3", b"m3"]

    run(scenario(), timeout_s=240)
