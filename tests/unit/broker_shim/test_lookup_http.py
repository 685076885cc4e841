"""The lookup, bundle, topic and NameServer HTTP API on the in-memory twin.

Shapes, status codes and reasons follow Pulsar (TopicLookupBase, NamespacesBase,
BrokersBase, LookupData); the same API is exercised on real Kafka with real processes
in ``tests/integration/broker_shim/test_lookup_http.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker_shim._admin_http import add_admin_routes
from broker_shim._http_shell import http_app
from broker_shim._live_cluster import LiveCluster, LookupOwnership
from broker_shim._lookup_http import add_lookup_routes
from broker_shim._permissions_http import add_permission_routes
from broker_shim._schemas_http import add_schema_routes
from sync.cluster import (
    AuthConfig,
    BrokerIdentity,
    BundleState,
    ClusterConfig,
    ClusterService,
    ListenerUrls,
    LookupConfig,
    OwnershipConfig,
    OwnershipRecord,
)
from sync.cluster._ownership_model import ownership_topic
from sync.naming._bundles import NamespaceBundles, topic_hash
from sync.naming._kafka_names import kafka_topic_of
from sync.naming._names import NamespaceName, TopicName
from sync.transport import MemoryTransport
from tests.support.waits import eventually

#: The live cluster service each app of :func:`run` serves.
LIVE = web.AppKey("live-cluster", LiveCluster)
Scenario = Callable[[list[TestClient[Any, Any]], list[ClusterService]], Awaitable[None]]


def _service(
    transport: MemoryTransport,
    cluster: str,
    index: int,
    *,
    lookup: LookupConfig | None = None,
    auth: AuthConfig | None = None,
    listeners: dict[str, ListenerUrls] | None = None,
) -> ClusterService:
    identity = BrokerIdentity(
        f"b{index}",
        cluster=cluster,
        service_url=f"pulsar://127.0.0.1:{6650 + index}",
        http_url=f"http://127.0.0.1:{8080 + index}",
        advertised_listeners=listeners or {},
    )
    return ClusterService(
        transport,
        ClusterConfig(
            identity,
            ownership=OwnershipConfig(
                slots=8, session_timeout_ms=60_000, membership_poll_s=0.02, poll_s=0.005
            ),
            lookup=lookup or LookupConfig(lookup_timeout_s=5.0, request_retry_s=0.5),
            auth=auth,
        ),
    )


def _synced(live: LiveCluster) -> Any:
    """A middleware that lets a request in once the live service's registry view holds every
    write committed before it: each sidecar's view follows the registry on its reader
    thread, so a request right after another sidecar's write could see the view before
    it (eventual, by design; propagation is measured and tested on real Kafka). The
    scenarios here check Pulsar's answers, as a client that waits for propagation sees
    them. A view that cannot sync (not ready, closed) lets the request through: the
    handler answers for that state."""

    def sync() -> None:
        with contextlib.suppress(Exception):
            live.service.store.table.sync(20)

    @web.middleware
    async def synced(request: web.Request, handler: Any) -> web.StreamResponse:
        await asyncio.to_thread(sync)
        return await handler(request)  # type: ignore[no-any-return]

    return synced


def run(services: list[ClusterService], scenario: Scenario) -> None:
    """Serve each service from its own aiohttp app and run ``scenario`` against them."""

    async def main() -> None:
        clients: list[TestClient[Any, Any]] = []
        try:
            for service in services:
                app = http_app()
                live = LiveCluster(service)
                app.middlewares.append(_synced(live))
                live.serve_with(app, restart_backoff_s=0.1)
                add_permission_routes(app, live)
                add_schema_routes(app, live)
                add_lookup_routes(app, live)
                add_admin_routes(app, live)
                app[LIVE] = live
                client: TestClient[Any, Any] = TestClient(TestServer(app))
                await client.start_server()
                clients.append(client)
            for service in services:
                await asyncio.to_thread(service.wait_ready, 20)
            names = {s.identity.broker_id for s in services}
            await eventually(
                lambda: all(set(s.registry.live) == names for s in services),
                "membership settles",
                10,
            )
            await scenario(clients, services)
        finally:
            for client in clients:
                await client.close()

    asyncio.run(main())


def cluster(n: int = 1, **kwargs: Any) -> list[ClusterService]:
    transport = MemoryTransport()
    name = "c" + uuid.uuid4().hex[:8]
    return [_service(transport, name, i, **kwargs) for i in range(n)]


LOOKUP = "/lookup/v2/topic/persistent/public/default/my-topic"


def test_lookup_returns_pulsar_lookup_data_and_every_sidecar_agrees() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        bodies = []
        for client in clients:
            resp = await client.get(LOOKUP)
            assert resp.status == 200
            assert resp.content_type == "application/json"
            bodies.append(await resp.json())
        assert bodies[0] == bodies[1]
        # Pulsar omits the TLS URLs that are not configured.
        assert set(bodies[0]) == {"brokerUrl", "httpUrl", "nativeUrl", "brokerUrlSsl"}
        assert bodies[0]["nativeUrl"] == bodies[0]["brokerUrl"]
        assert bodies[0]["brokerUrl"].startswith("pulsar://127.0.0.1:665")
        # The bundle endpoint answers the range as a raw string, like Pulsar.
        resp = await clients[1].get(LOOKUP + "/bundle")
        expected = NamespaceBundles.default("public/default").find_topic("my-topic")
        assert await resp.text() == expected.name
        assert topic_hash("persistent://public/default/my-topic") == 0x2BAD45F7
        assert expected.name == "0x00000000_0x40000000"

    run(cluster(2), scenario)


def test_invalid_names_are_refused_with_pulsars_reason() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        client = clients[0]
        cases = {
            "/lookup/v2/topic/bogus/public/default/t": "Invalid topic domain",
            "/lookup/v2/topic/persistent/te$nant/default/t": "Invalid tenant name",
            "/lookup/v2/topic/persistent/public/default/%20": "local name is blank",
        }
        for path, reason in cases.items():
            resp = await client.get(path)
            assert resp.status == 412, path
            assert reason in (await resp.json())["reason"], path
        resp = await client.get("/lookup/v2/topic/persistent/nope/default/t")
        assert resp.status == 404
        assert (await resp.json())["reason"] == "Namespace not found"
        # "+" in a local name is a space (java.net.URLDecoder), as Pulsar decodes it.
        resp = await client.get("/lookup/v2/topic/persistent/public/default/a+b/bundle")
        expected = NamespaceBundles.default("public/default").find_topic("a b").name
        assert await resp.text() == expected

    run(cluster(1), scenario)


def test_advertised_listeners_by_query_or_header() -> None:
    listeners = {"internal": ListenerUrls("pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651")}

    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        client = clients[0]
        body = await (await client.get(LOOKUP + "?listenerName=internal")).json()
        assert body["brokerUrl"] == "pulsar://10.0.0.5:6650"
        assert body["brokerUrlTls"] == "pulsar+ssl://10.0.0.5:6651"
        resp = await client.get(LOOKUP, headers={"X-Pulsar-ListenerName": "internal"})
        assert (await resp.json())["brokerUrl"] == "pulsar://10.0.0.5:6650"
        resp = await client.get(LOOKUP + "?listenerName=external")
        assert resp.status == 412
        assert "the broker do not have external listener" in (await resp.json())["reason"]

    run(cluster(1, listeners=listeners), scenario)


def test_pending_lookup_limit_answers_429_and_unclaimed_bundles_503() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        service = services[0]
        # Nobody acts on requests any more: lookups of unowned bundles have to wait.
        service.member._stop.set()
        await asyncio.to_thread(service.member._thread.join, 5)  # type: ignore[union-attr]
        names = ["my-topic", "t-3", "t-0"]  # three different bundles
        assert len({service.lookups.bundle_of(TopicName.parse(n)) for n in names}) == 3
        paths = [f"/lookup/v2/topic/persistent/public/default/{n}" for n in names]
        first = [asyncio.ensure_future(clients[0].get(p)) for p in paths[:2]]
        await asyncio.sleep(0.2)
        assert service.lookups.pending == 2
        third = await clients[0].get(paths[2])
        assert third.status == 429
        assert (await third.json())["reason"] == "Failed due to too many pending lookup requests"
        for fut in first:
            resp = await fut
            assert resp.status == 503
            assert "No broker was available to own" in (await resp.json())["reason"]

    run(cluster(1, lookup=LookupConfig(max_pending_lookups=2, lookup_timeout_s=1.0)), scenario)


def test_a_moving_bundle_is_being_unloaded() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        service = services[0]
        bundle = service.lookups.bundle_of(TopicName.parse("my-topic"))
        record = OwnershipRecord(bundle, BundleState.RELEASING, "b0", service.incarnation,
                                 1, 1, 0, 0, "revoked")  # fmt: skip
        producer = service._transport.producer()
        producer.produce(
            ownership_topic(service.identity.cluster), bundle.encode(), record.to_json()
        )
        while service.ownership.get(bundle) is None:
            await asyncio.sleep(0.01)
        resp = await clients[0].get(LOOKUP)
        assert resp.status == 503
        assert (await resp.json())["reason"] == f"Namespace bundle {bundle} is being unloaded"

    run(cluster(1), scenario)


def test_namespaces_bundles_split_and_unload_over_http() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        ns = "/admin/v2/namespaces/acme/orders"
        resp = await a.put(ns, data=json.dumps({"bundles": {"numBundles": 8}}))
        assert resp.status == 404  # Pulsar: the tenant must exist first
        assert (await resp.json())["reason"] == "Tenant does not exist"
        assert (await a.put("/admin/v2/tenants/acme", data="{}")).status == 204
        resp = await a.put(ns, data=json.dumps({"bundles": {"numBundles": 8}}))
        assert resp.status == 204
        resp = await b.put(ns)
        assert resp.status == 409
        assert (await resp.json())["reason"] == "Namespace already exists"
        body = await (await b.get(ns + "/bundles")).json()
        assert body["numBundles"] == 8 and body["boundaries"][1] == "0x20000000"
        assert await (await b.get("/admin/v2/namespaces/acme")).json() == ["acme/orders"]
        resp = await a.put(ns + "/0x00000000_0x20000000/split?splitAlgorithmName=nope")
        assert resp.status == 412
        assert (await resp.json())["reason"].startswith(
            "Unsupported namespace bundle split algorithm, supported algorithms are"
        )
        resp = await a.put(ns + "/0x00000000_0x20000000/split?unload=true")
        assert resp.status == 204
        assert (await (await b.get(ns + "/bundles")).json())["numBundles"] == 9
        resp = await a.put(ns + "/0x00000000_0x20000000/split")
        assert resp.status == 404
        lookup = "/lookup/v2/topic/persistent/acme/orders/o-1"
        assert (await a.get(lookup)).status == 200
        bundle = await (await a.get(lookup + "/bundle")).text()
        assert (await b.put(f"{ns}/{bundle}/unload")).status == 204
        assert (await b.put(f"{ns}/unload")).status == 204
        assert (await a.put(f"{ns}/0x00000001_0x00000002/unload")).status == 404
        resp = await a.put(
            "/admin/v2/namespaces/acme/bad", data=json.dumps({"bundles": {"numBundles": 0}})
        )
        assert resp.status == 412

    run(cluster(2), scenario)


def test_partitioned_topics_over_http() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        path = "/admin/v2/persistent/public/default/orders/partitions"
        missing = await a.get(path)
        assert missing.status == 404
        reason = (await missing.json())["reason"]
        assert reason == "Topic persistent://public/default/orders not found"
        auto = await a.get(path + "?checkAllowAutoCreation=true")
        assert await auto.json() == {"partitions": 0, "deleted": False}
        assert (await a.put(path, data="3")).status == 204
        assert await (await b.get(path)).json() == {"partitions": 3, "deleted": False}
        resp = await b.put(path, data="3")
        assert resp.status == 409
        assert (await resp.json())["reason"] == "This topic already exists"
        zero = await a.put("/admin/v2/persistent/public/default/z/partitions", data="0")
        assert zero.status == 406
        assert (await zero.json())["reason"] == "Number of partitions should be more than 0"
        assert (
            await a.put("/admin/v2/persistent/public/default/z/partitions", data="x")
        ).status == 400
        assert (await a.put("/admin/v2/persistent/nope/ns/z/partitions", data="2")).status == 404
        kafka_name = kafka_topic_of(TopicName.parse("persistent://public/default/orders"))
        desc = services[0]._transport.admin().describe_topic(kafka_name)
        assert desc is not None and desc.partitions == 3
        # A partition is not itself partitioned.
        part = "/admin/v2/persistent/public/default/orders-partition-1/partitions"
        assert await (await a.get(part)).json() == {"partitions": 0, "deleted": False}

    run(cluster(2), scenario)


def test_nameserver_endpoints() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        name = services[0].identity.cluster
        assert name in await (await a.get("/admin/v2/clusters")).json()
        assert await (await b.get(f"/admin/v2/brokers/{name}")).json() == [
            "127.0.0.1:8080", "127.0.0.1:8081",
        ]  # fmt: skip
        # Pulsar 4.0.7 answers a cluster it does not know with its own active brokers.
        assert await (await a.get("/admin/v2/brokers/nosuch")).json() == [
            "127.0.0.1:8080", "127.0.0.1:8081",
        ]  # fmt: skip
        assert await (await a.get("/admin/v2/brokers")).json() == [
            "127.0.0.1:8080", "127.0.0.1:8081",
        ]  # fmt: skip
        info = await (await a.get("/registry/v1/cluster-info")).json()
        assert info["clusterAddrTable"][name] == ["b0", "b1"]
        assert info["brokerAddrTable"]["b0"]["brokerAddrs"] == {"0": "127.0.0.1:6650"}
        # KV config, incl. ORDER_TOPIC_CONFIG in route info.
        topic = "persistent://public/default/routed"
        kv = "/registry/v1/kv/ORDER_TOPIC_CONFIG/" + topic.replace("/", "%2F")
        assert (await a.put(kv, data="b0:2;b1:2")).status == 204
        assert await (await b.get(kv)).json() == {"value": "b0:2;b1:2"}
        table = await (await b.get("/registry/v1/kv/ORDER_TOPIC_CONFIG")).json()
        assert table == {"table": {topic: "b0:2;b1:2"}}
        assert (
            await a.put("/admin/v2/persistent/public/default/routed/partitions", data="4")
        ).status == 204
        assert await (await b.get("/registry/v1/topics")).json() == {"topicList": [topic]}
        route = await (await b.get("/registry/v1/route/persistent/public/default/routed")).json()
        assert route["orderTopicConf"] == "b0:2;b1:2"
        assert sum(q["readQueueNums"] for q in route["queueDatas"]) == 4
        assert {q["perm"] for q in route["queueDatas"]} == {6}
        on_b0 = any(q["brokerName"] == "b0" for q in route["queueDatas"])
        wiped = await (await a.post("/registry/v1/brokers/b0/wipe-write-perm")).json()
        assert wiped == {"wipeTopicCount": 1 if on_b0 else 0}
        route = await (await a.get("/registry/v1/route/persistent/public/default/routed")).json()
        for q in route["queueDatas"]:
            assert q["perm"] == (4 if q["brokerName"] == "b0" else 6)
            assert q["writeQueueNums"] == (0 if q["brokerName"] == "b0" else q["readQueueNums"])
        assert (await a.post("/registry/v1/brokers/b0/add-write-perm")).status == 200
        assert (await a.post("/registry/v1/brokers/nobody/wipe-write-perm")).status == 404
        assert (await a.delete(kv)).status == 204
        assert (await b.get(kv)).status == 404
        assert (await b.get("/registry/v1/route/persistent/public/default/unknown")).status == 404
        status = await (await a.get("/policy-sync/v1/cluster")).json()
        assert status["state"] == "READY" and status["liveBrokers"] == ["b0", "b1"]
        owned = await (await a.get("/policy-sync/v1/ownership")).json()
        assert all(r["state"] == "Owned" for r in owned["bundles"].values())

    run(cluster(2), scenario)


def test_the_ownership_view_is_served_only_while_ready() -> None:
    # Seen on real Kafka: an observer polling a sidecar whose cluster service was not
    # READY got a partial view, ownership versions going back from v9 to v2.
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        client = clients[0]
        assert (await client.get("/policy-sync/v1/ownership")).status == 200
        await asyncio.to_thread(services[0].close)
        resp = await client.get("/policy-sync/v1/ownership")
        assert resp.status == 503
        assert "not READY" in (await resp.json())["reason"]

    run(cluster(1), scenario)


AUTH = AuthConfig.from_json(
    {
        "tokens": {"t-admin": "admin", "t-alice": "alice", "t-bob": "bob"},
        "superUserRoles": ["admin"],
        "tenants": {"acme": {"adminRoles": ["alice"], "lookupRoles": ["bob"]}},
    }
)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_auth_refuses_before_writing_anything() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        c = clients[0]
        service = services[0]
        service.admin.ensure_tenant("acme")
        ns = "/admin/v2/namespaces/acme/app"
        assert (await c.put(ns)).status == 401
        resp = await c.put(ns, headers=_bearer("t-bob"))
        assert resp.status == 403
        assert service.store.layout(NamespaceName("acme", "app")) is None
        assert (await c.put(ns, headers=_bearer("t-alice"))).status == 204
        path = "/admin/v2/persistent/acme/app/t/partitions"
        resp = await c.put(path, data="2", headers=_bearer("t-bob"))
        assert resp.status == 403
        assert service.store.topics == {}
        kafka_name = kafka_topic_of(TopicName.parse("persistent://acme/app/t"))
        assert service._transport.admin().describe_topic(kafka_name) is None
        assert (await c.put(path, data="2", headers=_bearer("t-alice"))).status == 204
        lookup = "/lookup/v2/topic/persistent/acme/app/t-partition-0"
        assert (await c.get(lookup)).status == 401
        assert (await c.get(lookup, headers=_bearer("nope"))).status == 401
        assert (await c.get(lookup, headers=_bearer("t-bob"))).status == 200
        resp = await c.get("/lookup/v2/topic/persistent/public/default/x", headers=_bearer("t-bob"))
        assert resp.status == 403
        assert "Client is not authorized to Lookup" in (await resp.json())["reason"]
        kv = "/registry/v1/kv/NS/key"
        assert (await c.put(kv, data="v", headers=_bearer("t-alice"))).status == 403
        assert service.store.kv == {}
        assert (await c.put(kv, data="v", headers=_bearer("t-admin"))).status == 204
        name = service.identity.cluster
        assert (await c.get(f"/admin/v2/brokers/{name}", headers=_bearer("t-alice"))).status == 403
        assert (await c.get(f"/admin/v2/brokers/{name}", headers=_bearer("t-admin"))).status == 200

    run(cluster(1, auth=AUTH), scenario)


def test_a_failed_service_is_replaced_by_a_new_incarnation() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        client = clients[0]
        current = client.app[LIVE]
        first = current.service
        # Another process takes our broker id: it registers a newer incarnation, then fences
        # our ownership producer (a sidecar's start-up order) ...
        transport = first._transport
        rival_registration = dataclasses.replace(
            first.registrar.registration(int(time.time() * 1000)), incarnation="rival"
        )
        writer = transport.producer()
        writer.produce(
            first.store.table.spec.name,
            rival_registration.key.encode("utf-8"),
            rival_registration.to_json(),
        )
        writer.flush(5)
        rival = transport.producer(
            transactional_id=f"policy-sync.ownership.{first.identity.cluster}.b0"
        )
        rival.init_transactions(5)
        resp = await client.get("/lookup/v2/topic/persistent/public/default/fenced-0")
        # ... so that fence is final: the member FAILED, the lookup got 503, and this
        # incarnation stopped refreshing its registration.
        assert resp.status == 503
        assert first.member.producer_renewals == 0
        await eventually(lambda: first.registrar.superseded, "the registrar yields", 10)
        await eventually(
            lambda: current.restarts > 0 and current.service.state.value == "READY",
            "a restart to READY",
            10,
        )
        assert first.member.state.value == "CLOSED"
        assert current.service.incarnation != first.incarnation
        resp = await client.get("/lookup/v2/topic/persistent/public/default/fenced")
        assert resp.status == 200

    run(cluster(1, lookup=LookupConfig(lookup_timeout_s=1.0)), scenario)


def test_lookups_serve_as_the_messaging_engines_topic_ownership() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        topic = TopicName.parse("persistent://public/default/owned")
        answers = [await LookupOwnership(c.app[LIVE]).owner_of(topic) for c in clients]
        assert sorted(a.local for a in answers) == [False, True]
        assert answers[0].http_url == answers[1].http_url
        owner = next(s for s, a in zip(services, answers, strict=True) if a.local)
        assert answers[0].http_url == owner.identity.http_url

    run(cluster(2), scenario)
