"""Topic auto-creation on real Kafka, through the WebSocket API and the binary protocol.

One sidecar runs with ``allowAutoTopicCreation=false`` (``broker-shim run
--allow-auto-topic-creation false``): a producer or consumer on a topic never created is
refused with Pulsar's answer (WebSocket 404, binary ``TopicNotFound``) and nothing is
created. A namespace's ``autoTopicCreationOverride`` then allows it, non-partitioned or
partitioned with its ``defaultNumPartitions``; removing the override refuses again.
Pulsar's default (allowed, non-partitioned) is covered by ``test_ws.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from websockets.exceptions import InvalidStatus

from broker_shim._sidecar import Sidecar
from sync import TopicName
from sync.messaging import AutoTopicCreation, TopicType
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.http import request_json
from tests.support.sidecars import BinarySidecar
from tests.support.waits import wait_for
from tests.support.ws import connect, path_of, run, send_frame


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BinarySidecar]:
    s = BinarySidecar(kafka_bootstrap, tmp_path_factory.mktemp("auto"))
    s.sidecar = Sidecar(
        dataclasses.replace(s.sidecar.config, auto_topic_creation=AutoTopicCreation(allow=False))
    )
    with s:
        yield s


@pytest.fixture(scope="module")
def admin(kafka_bootstrap: str) -> Iterator[Any]:
    transport = KafkaTransport(KafkaConfig(kafka_bootstrap))
    yield transport.admin()


def _kafka_partitions(admin: Any, topic: TopicName) -> int | None:
    desc = admin.describe_topic(kafka_topic_of(topic))
    return None if desc is None else int(desc.partitions)


def _topic(namespace: str) -> TopicName:
    return TopicName.parse(f"persistent://public/{namespace}/t-{uuid.uuid4().hex[:8]}")


def _set_override(s: BinarySidecar, namespace: str, body: Any) -> tuple[int, Any]:
    return request_json(
        "POST", f"{s.http_url}/admin/v2/namespaces/public/{namespace}/autoTopicCreation", body
    )


def _wait_override(s: BinarySidecar, namespace: str, expected: Any) -> None:
    seen: list[Any] = []

    def applied() -> bool:
        status, body = request_json(
            "GET", f"{s.http_url}/admin/v2/namespaces/public/{namespace}/autoTopicCreation"
        )
        assert status == 200
        seen[:] = [body]
        return bool(body == expected)

    wait_for(
        applied,
        lambda: f"the override {expected} (last read: {seen})",
        timeout_s=30,
        interval_s=0.1,
    )


def _ws_refusal(url: str) -> tuple[int, dict[str, Any]]:
    async def attempt() -> tuple[int, dict[str, Any]]:
        with pytest.raises(InvalidStatus) as info:
            async with connect(url):
                pass
        response = info.value.response
        return response.status_code, json.loads(response.body or b"{}")

    return run(attempt())


def _ws_produce(s: BinarySidecar, topic: TopicName, payload: bytes) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        async with connect(f"{s.ws_url}/producer/{path_of(topic)}") as prod:
            await prod.send(send_frame(payload))
            reply: dict[str, Any] = json.loads(await asyncio.wait_for(prod.recv(), 30))
            return reply

    return run(scenario())


def test_refused_when_not_allowed_and_nothing_is_created(
    sidecar: BinarySidecar, admin: Any
) -> None:
    topic = _topic("off")
    status, body = _ws_refusal(f"{sidecar.ws_url}/producer/{path_of(topic)}")
    assert (status, body["reason"]) == (404, "Failed to create producer: Topic Not Found.")
    status, body = _ws_refusal(f"{sidecar.ws_url}/consumer/{path_of(topic)}/sub")
    assert status == 404
    assert body["reason"] == f"Failed to subscribe: Topic {topic} does not exist"
    client = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        with pytest.raises(pulsar.exceptions.TopicNotFound):
            client.create_producer(str(topic))
        with pytest.raises(pulsar.exceptions.TopicNotFound):
            client.subscribe(str(topic), "sub")
    finally:
        client.close()
    assert _kafka_partitions(admin, topic) is None


def test_namespace_override_allows_non_partitioned(sidecar: BinarySidecar, admin: Any) -> None:
    ns = f"np-{uuid.uuid4().hex[:6]}"
    override = {"allowAutoTopicCreation": True, "topicType": "non-partitioned"}
    assert _set_override(sidecar, ns, override) == (204, None)
    _wait_override(sidecar, ns, override)
    topic = _topic(ns)
    assert _ws_produce(sidecar, topic, b"first")["result"] == "ok"
    assert _kafka_partitions(admin, topic) == 1
    # the binary protocol creates too: partitioned metadata 0, then the producer
    other = _topic(ns)
    client = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        producer = client.create_producer(str(other))
        producer.send(b"x")
        assert client.get_topic_partitions(str(other)) == [str(other)]
    finally:
        client.close()
    assert _kafka_partitions(admin, other) == 1


def test_namespace_override_partitioned_then_removed(sidecar: BinarySidecar, admin: Any) -> None:
    ns = f"pt-{uuid.uuid4().hex[:6]}"
    override = {
        "allowAutoTopicCreation": True,
        "topicType": "partitioned",
        "defaultNumPartitions": 3,
    }
    assert _set_override(sidecar, ns, override) == (204, None)
    _wait_override(sidecar, ns, override)
    topic = _topic(ns)
    # binary: the partitioned-metadata request creates the partitioned topic
    client = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        assert len(client.get_topic_partitions(str(topic))) == 3
        producer = client.create_producer(str(topic))
        producer.send(b"y")
    finally:
        client.close()
    assert _kafka_partitions(admin, topic) == 3
    ws_topic = _topic(ns)
    assert _ws_produce(sidecar, ws_topic, b"z")["result"] == "ok"
    assert _kafka_partitions(admin, ws_topic) == 3
    status, _ = request_json(
        "DELETE", f"{sidecar.http_url}/admin/v2/namespaces/public/{ns}/autoTopicCreation"
    )
    assert status == 204
    _wait_override(sidecar, ns, None)
    gone = _topic(ns)
    status, body = _ws_refusal(f"{sidecar.ws_url}/producer/{path_of(gone)}")
    assert status == 404
    assert _kafka_partitions(admin, gone) is None


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0},
         412, "[defaultNumPartitions] cannot be less than 1 for partition type."),
        ({"allowAutoTopicCreation": True, "topicType": "partitioned"},
         412, "[defaultNumPartitions] cannot be null when the type is partitioned."),
        ({"allowAutoTopicCreation": True, "topicType": "non-partitioned",
          "defaultNumPartitions": 2},
         412, "[defaultNumPartitions] is not allowed to be set when the type is non-partition."),
        ({"allowAutoTopicCreation": True, "topicType": "sideways"},
         412, "Unknown topic type [sideways]"),
        ({"allowAutoTopicCreation": "yes"}, 400, None),
    ],
)  # fmt: skip
def test_bad_overrides_are_refused_and_write_nothing(
    sidecar: BinarySidecar, admin: Any, body: Any, status: int, reason: str | None
) -> None:
    ns = f"bad-{uuid.uuid4().hex[:6]}"
    policy_topic = sidecar.sidecar.config.topic
    before = admin.list_offsets(policy_topic, [0], "latest")
    got, answer = _set_override(sidecar, ns, body)
    assert got == status
    if reason is not None:
        assert answer["reason"] == (
            f"Invalid configuration for autoTopicCreationOverride. the detail is {reason}"
        )
    status_get, stored = request_json(
        "GET", f"{sidecar.http_url}/admin/v2/namespaces/public/{ns}/autoTopicCreation"
    )
    assert (status_get, stored) == (200, None)
    assert admin.list_offsets(policy_topic, [0], "latest") == before


def test_broker_flags_build_the_defaults() -> None:
    from broker_shim.cli.shim import auto_topic_creation, build_parser

    args = build_parser().parse_args(
        ["run", "--broker-id", "b", "--http-port", "1", "--allow-auto-topic-creation", "false",
         "--allow-auto-topic-creation-type", "partitioned", "--default-num-partitions", "4"]
    )  # fmt: skip
    assert auto_topic_creation(args) == AutoTopicCreation(False, TopicType.PARTITIONED, 4)
    defaults = build_parser().parse_args(["run", "--broker-id", "b", "--http-port", "1"])
    assert auto_topic_creation(defaults) == AutoTopicCreation()


def test_cluster_sidecar_registers_auto_created_topics(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, admin: Any
) -> None:
    """With the cluster registry, an auto-created topic is a topic of the admin API (every
    sidecar lists it); a namespace that does not exist is not created implicitly."""
    from tests.integration.compat.test_pulsar_compat import CompatSidecar

    shim = CompatSidecar(
        kafka_bootstrap,
        tmp_path_factory.mktemp("auto-cluster"),
        ("--allow-auto-topic-creation-type", "partitioned", "--default-num-partitions", "2"),
    )
    try:
        shim.wait_ready()
        ws = shim.url.replace("http://", "ws://") + "/ws/v2"
        topic = _topic("default")

        async def produce() -> dict[str, Any]:
            async with connect(f"{ws}/producer/{path_of(topic)}") as prod:
                await prod.send(send_frame(b"hello"))
                reply: dict[str, Any] = json.loads(await asyncio.wait_for(prod.recv(), 30))
                return reply

        assert run(produce())["result"] == "ok"
        status, listed = request_json(
            "GET", f"{shim.url}/admin/v2/persistent/public/default/partitioned"
        )
        assert status == 200 and str(topic) in listed
        status, meta = request_json(
            "GET",
            f"{shim.url}/admin/v2/persistent/{path_of(topic)[len('persistent/') :]}/partitions",
        )
        assert (status, meta["partitions"]) == (200, 2)
        assert _kafka_partitions(admin, topic) == 2
        missing_ns = TopicName.parse(f"persistent://public/nons-{uuid.uuid4().hex[:6]}/t")
        status, body = _ws_refusal(f"{ws}/producer/{path_of(missing_ns)}")
        assert status == 404
        assert _kafka_partitions(admin, missing_ns) is None
    finally:
        shim.stop()
