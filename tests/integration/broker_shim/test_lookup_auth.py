"""Token auth of the lookup and admin APIs on real Kafka: two ``broker-shim run``
processes started with ``--auth-config``, and the real Pulsar client with a token.

A refused request (401 without a valid token, 403 without the right) must write nothing:
the test reads the registry, ownership and slots topics byte for byte from Kafka after
the refusals, and checks that no backing Kafka topic was created. Lookups are authorized
like Pulsar's ``TopicOperation.LOOKUP``, and a refused lookup claims no bundle.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sync._constants import REGISTRY_TOPIC
from sync.cluster._ownership_model import ownership_topic, slots_topic
from sync.naming._kafka_names import kafka_topic_of
from sync.naming._names import TopicName
from sync.transport import KafkaConfig, KafkaTransport
from tests.integration.broker_shim.test_lookup_http import ShimProcess
from tests.support.http import HttpResult, http
from tests.support.waits import wait_for

TOKENS = {"t-admin": "admin", "t-alice": "alice", "t-bob": "bob", "t-eve": "eve"}


def call(
    shim: ShimProcess, method: str, path: str, token: str | None = None, body: str | None = None
) -> HttpResult:
    headers = None if token is None else {"Authorization": f"Bearer {token}"}
    return http(method, shim.url + path, body, headers=headers)


class AuthShim(ShimProcess):
    """A sidecar with auth on: its status endpoint needs a super-user token."""

    def status(self) -> dict[str, Any] | None:
        try:
            result = call(self, "GET", "/policy-sync/v1/cluster", "t-admin")
        except OSError:
            return None
        return dict(result.json()) if result.status == 200 else None


def records(transport: KafkaTransport, topic: str) -> list[tuple[str, str]]:
    """Every record of ``topic`` from its start, aborted transactions included, as text."""
    desc = transport.admin().describe_topic(topic)
    assert desc is not None, topic
    partitions = list(range(desc.partitions))
    consumer = transport.consumer(read_committed=False)
    try:
        start = consumer.start_offsets(topic, partitions)
        end = consumer.end_offsets(topic, partitions)
        consumer.assign(topic, start)
        out: list[tuple[str, str]] = []
        positions = dict(start)
        deadline = time.monotonic() + 30
        while any(positions[p] < end[p] for p in partitions):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for msg in consumer.consume(1000, 0.2):
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                positions[partition] = offset + 1
                key, value = msg.key() or b"", msg.value() or b""
                out.append((key.decode(errors="replace"), value.decode(errors="replace")))
            # A transaction marker may be the last offset: it is never delivered, so the
            # consumer's own position says when the end is reached.
            for partition, position in consumer.positions(topic, partitions).items():
                positions[partition] = max(positions[partition], position)
        return out
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def cluster(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, list[AuthShim]]]:
    workdir = tmp_path_factory.mktemp("lookup-auth")
    name = "au" + uuid.uuid4().hex[:8]
    tenant = "acme" + uuid.uuid4().hex[:6]  # namespaces are global: unique per run
    config = workdir / "auth.json"
    config.write_text(
        json.dumps(
            {
                "tokens": TOKENS,
                "superUserRoles": ["admin"],
                "tenants": {tenant: {"adminRoles": ["alice"], "lookupRoles": ["bob"]}},
            }
        )
    )
    shims = [
        AuthShim(
            kafka_bootstrap, name, f"b{i}", workdir,
            session_timeout_ms=1000, slots=16, extra=("--auth-config", str(config)),
        )
        for i in range(2)
    ]  # fmt: skip
    try:
        for shim in shims:
            shim.start()
        for shim in shims:
            shim.wait_ready()
        wait_for(
            lambda: all(
                (s := shim.status()) is not None and set(s["liveBrokers"]) == {"b0", "b1"}
                for shim in shims
            ),
            "the two sidecars seeing each other",
            timeout_s=30,
        )
        # Pulsar: a tenant exists before its namespaces; only a super-user creates one.
        assert call(shims[0], "PUT", f"/admin/v2/tenants/{tenant}", "t-alice", "{}").status == 403
        assert call(shims[0], "PUT", f"/admin/v2/tenants/{tenant}", "t-admin", "{}").status == 204
        yield name, tenant, shims
    finally:
        for shim in shims:
            shim.stop()


def _mentions(found: list[tuple[str, str]], text: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in found if text in k or text in v]


def test_refused_writes_change_nothing_in_kafka(
    cluster: tuple[str, str, list[AuthShim]], kafka_bootstrap: str
) -> None:
    name, tenant, (a, b) = cluster
    denied_ns = f"/admin/v2/namespaces/{tenant}/denied"
    # No token, an unknown token: 401. A valid token without the right: 403.
    assert call(a, "PUT", denied_ns).status == 401
    assert call(b, "PUT", denied_ns, "t-nope").status == 401
    assert call(a, "PUT", denied_ns, "t-bob").status == 403  # lookup role only
    refused = call(b, "PUT", denied_ns, "t-eve")  # no role on the tenant
    assert refused.status == 403
    assert "Don't have permission to administrate" in refused.json()["reason"]

    # The tenant's admin may create a namespace; then refused topic, split, unload,
    # KV and write-perm requests on it.
    app_ns = f"/admin/v2/namespaces/{tenant}/app"
    assert call(a, "PUT", app_ns, "t-alice", '{"bundles": {"numBundles": 4}}').status == 204
    topic = f"persistent://{tenant}/app/denied-topic"
    partitions = "/admin/v2/" + topic.replace("://", "/") + "/partitions"
    assert call(b, "PUT", partitions, None, "3").status == 401
    assert call(b, "PUT", partitions, "t-bob", "3").status == 403
    assert call(a, "PUT", partitions, "t-eve", "3").status == 403
    bundles = call(b, "GET", app_ns + "/bundles", "t-bob").json()
    first = f"{bundles['boundaries'][0]}_{bundles['boundaries'][1]}"
    assert call(a, "PUT", f"{app_ns}/{first}/split", "t-bob").status == 403
    assert call(a, "PUT", f"{app_ns}/{first}/unload", "t-eve").status == 403
    assert call(b, "PUT", f"{app_ns}/unload", "t-bob").status == 403
    kv = f"/registry/v1/kv/{tenant}-NS/denied-key"
    assert call(a, "PUT", kv, "t-alice", "v").status == 403  # cluster-wide: super-user only
    assert call(b, "DELETE", kv, "t-bob").status == 403
    wipe = f"/registry/v1/brokers/{name}-denied/wipe-write-perm"
    assert call(a, "POST", wipe, "t-alice").status == 403
    # A write that is allowed, after all the refused ones: once both sidecars see it,
    # everything written before it is in the topic too.
    done_ns = f"/admin/v2/namespaces/{tenant}/after"
    assert call(b, "PUT", done_ns, "t-alice").status == 204
    for shim in (a, b):
        assert call(shim, "GET", done_ns + "/bundles", "t-bob").status == 200

    transport = KafkaTransport(KafkaConfig(kafka_bootstrap))
    registry = records(transport, REGISTRY_TOPIC)
    assert _mentions(registry, f"{tenant}/after"), "the allowed write is not in the registry"
    assert _mentions(registry, f"{tenant}/app")  # the namespace alice created
    assert _mentions(registry, f"{tenant}/denied") == []
    assert _mentions(registry, f"{tenant}/app/denied-topic") == []
    assert _mentions(registry, f"{tenant}-NS") == []
    assert _mentions(registry, f"{name}-denied") == []
    assert transport.admin().describe_topic(kafka_topic_of(TopicName.parse(topic))) is None
    # The bundle layout of tenant/app is still the one alice created (no split).
    for shim in (a, b):
        assert call(shim, "GET", app_ns + "/bundles", "t-admin").json()["numBundles"] == 4
        assert call(shim, "GET", denied_ns + "/bundles", "t-admin").status == 404
        assert call(shim, "GET", partitions, "t-admin").status == 404  # never created
        assert call(shim, "GET", kv, "t-admin").status == 404


def test_lookups_are_authorized_like_pulsar_topic_lookup(
    cluster: tuple[str, str, list[AuthShim]], kafka_bootstrap: str
) -> None:
    import pulsar

    name, tenant, (a, b) = cluster
    ns = f"/admin/v2/namespaces/{tenant}/lookups"
    assert call(a, "PUT", ns, "t-alice", '{"bundles": {"numBundles": 4}}').status == 204
    lookup = f"/lookup/v2/topic/persistent/{tenant}/lookups/t-1"
    bundle = call(b, "GET", lookup + "/bundle", "t-bob").body
    assert bundle.startswith("0x")
    # Refused lookups, through both sidecars: none may claim the unowned bundle.
    for shim in (a, b):
        assert call(shim, "GET", lookup).status == 401
        assert call(shim, "GET", lookup, "t-nope").status == 401
        refused = call(shim, "GET", lookup, "t-eve")
        assert refused.status == 403
        assert "Client is not authorized to Lookup" in refused.json()["reason"]
        assert call(shim, "GET", lookup + "/bundle", "t-eve").status == 403
        assert call(shim, "GET", f"/admin/v2/persistent/{tenant}/lookups/t-1/partitions",
                    "t-eve").status == 403  # fmt: skip
        # bob may look up acme's topics, not other tenants'.
        other = call(shim, "GET", "/lookup/v2/topic/persistent/public/default/x", "t-bob")
        assert other.status == 403
    transport = KafkaTransport(KafkaConfig(kafka_bootstrap))
    owned = call(a, "GET", "/policy-sync/v1/ownership", "t-admin").json()["bundles"]
    assert f"{tenant}/lookups/{bundle}" not in owned
    assert _mentions(records(transport, ownership_topic(name)), f"{tenant}/lookups") == []
    assert _mentions(records(transport, slots_topic(name)), f"{tenant}/lookups") == []

    # Allowed: the lookup role, the tenant's admin role, a super-user; the same owner
    # from both sidecars.
    answers = {
        call(shim, "GET", lookup, token).json()["brokerUrl"]
        for shim in (a, b)
        for token in ("t-bob", "t-alice", "t-admin")
    }
    assert len(answers) == 1 and answers <= {a.broker_url, b.broker_url}
    owned = call(b, "GET", "/policy-sync/v1/ownership", "t-admin").json()["bundles"]
    assert owned[f"{tenant}/lookups/{bundle}"]["state"] == "Owned"

    # The real Pulsar client sends its token on HTTP lookups.
    topic = f"persistent://{tenant}/lookups/part"
    path = "/admin/v2/" + topic.replace("://", "/") + "/partitions"
    assert call(a, "PUT", path, "t-alice", "2").status == 204
    allowed = pulsar.Client(b.url, authentication=pulsar.AuthenticationToken("t-bob"))
    try:
        assert allowed.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(2)]
    finally:
        allowed.close()
    for token in ("t-eve", "t-nope"):
        refused_client = pulsar.Client(
            a.url, authentication=pulsar.AuthenticationToken(token), operation_timeout_seconds=5
        )
        try:
            with pytest.raises(pulsar.PulsarException):
                refused_client.get_topic_partitions(topic)
        finally:
            refused_client.close()


def test_websocket_handshakes_need_the_permission(
    cluster: tuple[str, str, list[AuthShim]], kafka_bootstrap: str
) -> None:
    """Pulsar's WebSocket API with auth: the token in the ``Authorization`` header or the
    ``token`` query parameter; producing needs ``produce``, consuming ``consume`` (and under
    ``subscriptionAuthMode`` Prefix a subscription named after the role: 403 here, where
    Pulsar's proxy answers the provider's exception with 500 "Server error")."""
    import websockets

    from tests.support.ws import connect, path_of, produce, receive, refused, run

    name, tenant, (a, _b) = cluster
    assert call(a, "PUT", f"/admin/v2/namespaces/{tenant}/ws", "t-alice").status == 204
    topic = TopicName.parse(f"persistent://{tenant}/ws/t-{uuid.uuid4().hex[:6]}")
    base = f"ws://127.0.0.1:{a.port}/ws/v2"
    producer = f"{base}/producer/{path_of(topic)}"
    consumer = f"{base}/consumer/{path_of(topic)}/s?subscriptionInitialPosition=Earliest"

    async def scenario() -> None:
        assert (await refused(producer))[0] == 401
        assert (await refused(producer + "?token=t-nope"))[0] == 401
        status, reason = await refused(producer + "?token=t-bob")  # a lookup role only
        assert (status, reason) == (
            403,
            "Failed to create producer: Client is not authorized to Produce",
        )
        grant = f"/admin/v2/namespaces/{tenant}/ws/permissions/bob"
        assert call(a, "POST", grant, "t-alice", '["produce"]').status == 204
        async with connect(producer + "?token=t-bob") as ws:
            await produce(ws, [b"by bob"])
        status, reason = await refused(consumer + "&token=t-bob")
        assert (status, reason) == (
            403,
            "Failed to subscribe: Client is not authorized to subscribe",
        )
        # subscriptionAuthMode Prefix: bob consumes only on subscriptions named bob…
        assert call(a, "POST", grant, "t-alice", '["produce", "consume"]').status == 204
        mode = f"/admin/v2/namespaces/{tenant}/ws/subscriptionAuthMode"
        assert call(a, "POST", mode, "t-alice", '"Prefix"').status == 204
        for s in (a, _b):  # an admin read catches a sidecar up with the registry
            assert call(s, "GET", mode, "t-alice").json() == "Prefix"
        status, reason = await refused(consumer + "&token=t-bob")
        assert status == 403, reason
        assert reason == (
            "Failed to subscribe: org.apache.pulsar.broker.PulsarServerException: Failed to "
            "create consumer - The subscription name needs to be prefixed by the "
            f"authentication role, like bob-xxxx for topic: {topic}"
        )
        async with connect(consumer.replace("/s?", "/bob-s?") + "&token=t-bob"):
            pass
        # The tenant's admin, the header way, straight to the owner: a client drops the
        # Authorization header on a redirect to another origin (the query token stays).
        lookup = f"/lookup/v2/topic/persistent/{tenant}/ws/{topic.local_name}"
        owner = call(a, "GET", lookup, "t-admin").json()["httpUrl"].replace("http", "ws", 1)
        direct = consumer.replace(base, f"{owner}/ws/v2")
        headers = {"Authorization": "Bearer t-alice"}
        async with websockets.connect(direct, additional_headers=headers, open_timeout=30) as ws:
            assert [m["payload"] for m in await receive(ws, 1, 30)] == ["YnkgYm9i"]

    run(scenario())
