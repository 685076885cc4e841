"""A topic's ``replicationClusters`` over the admin REST, on the in-memory twin: no longer
refused as unsupported, but checked as Pulsar checks it against the registered clusters, the
tenant's allowed clusters and the namespace's replication (a refusal writes nothing)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.unit.broker_shim.test_sidecar_faults import _serve

TOPIC = "/admin/v2/persistent/public/default/geo"
REPL = f"{TOPIC}/replication"
GLOBAL_REASON = (
    "Please do not use the global topic level policy when namespace-level replication is "
    "not enabled, because the global level policy relies on namespace-level replication"
)
WEST = {"serviceUrl": "http://127.0.0.1:23080"}


def test_topic_replication_clusters_are_checked_against_the_registry() -> None:
    async def scenario(client: TestClient[Any, Any], _app: web.Application) -> None:
        local = (await (await client.get("/admin/v2/clusters")).json())[0]
        assert (await client.put(TOPIC)).status == 204

        async def refused(body: list[str], status: int, reason: str, query: str = "") -> None:
            resp = await client.post(REPL + query, data=json.dumps(body))
            assert (resp.status, (await resp.json())["reason"]) == (status, reason)

        await refused(
            ["west"],
            412,
            "Can not remove local cluster from the local topic-level replication clusters policy",
        )
        await refused([local, "west"], 403, "Invalid cluster id: west")
        assert (await client.put("/admin/v2/clusters/west", data=json.dumps(WEST))).status == 200
        await refused(
            [local, "west"],
            403,
            "Cluster [west] is not in the list of allowed clusters list for tenant [public]",
        )
        await refused([local, "west"], 412, GLOBAL_REASON, "?isGlobal=true")
        assert (await (await client.get(REPL)).read()) in (b"", b"null")  # nothing was written

        tenant = json.dumps({"allowedClusters": [local, "west"]})
        assert (await client.post("/admin/v2/tenants/public", data=tenant)).status == 204
        assert (await client.post(REPL, data=json.dumps([local, "west"]))).status == 204
        assert await (await client.get(REPL)).json() == [local, "west"]
        # A global one needs the namespace to replicate to more than one cluster.
        await refused([local, "west"], 412, GLOBAL_REASON, "?isGlobal=true")
        ns_repl = "/admin/v2/namespaces/public/default/replication"
        assert (await client.post(ns_repl, data=json.dumps([local, "west"]))).status == 204
        resp = await client.post(REPL + "?isGlobal=true", data=json.dumps(["west", local]))
        assert resp.status == 204, await resp.text()
        got = await (await client.get(REPL + "?isGlobal=true")).json()
        assert sorted(got) == sorted([local, "west"])

    _serve(scenario)


def test_a_global_write_where_the_namespace_does_not_replicate_is_refused() -> None:
    async def scenario(client: TestClient[Any, Any], _app: web.Application) -> None:
        local = (await (await client.get("/admin/v2/clusters")).json())[0]
        assert (await client.put(TOPIC)).status == 204
        assert (await client.put("/admin/v2/clusters/west", data=json.dumps(WEST))).status == 200
        tenant = json.dumps({"allowedClusters": [local, "west"]})
        assert (await client.post("/admin/v2/tenants/public", data=tenant)).status == 204
        ns_repl = "/admin/v2/namespaces/public/default/replication"
        assert (await client.post(ns_repl, data='["west"]')).status == 204
        resp = await client.post(f"{TOPIC}/maxConsumers?isGlobal=true", data="5")
        assert (resp.status, (await resp.json())["reason"]) == (
            412,
            "Namespace missing local cluster name in clusters list: "
            f"local_cluster={local} ns=public/default clusters=[west]",
        )
        got = await client.get(f"{TOPIC}/maxConsumers?isGlobal=true")
        assert (await got.read()) in (b"", b"null")  # nothing was written
        assert (await client.post(f"{TOPIC}/maxConsumers", data="5")).status == 204  # local: fine

    _serve(scenario)
