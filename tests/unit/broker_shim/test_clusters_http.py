"""Registering clusters as Pulsar does (``/admin/v2/clusters``), on the in-memory twin:
statuses and reasons of ``ClustersBase``, refusals write nothing, and a registered cluster
becomes allowed for tenants everywhere."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from sync import CodecError
from sync.cluster import ClusterRecord, ClusterService
from sync.errors import BadRequestError
from tests.unit.broker_shim.test_lookup_http import cluster, run

EAST = {"serviceUrl": "http://127.0.0.1:21080", "brokerServiceUrl": "pulsar://127.0.0.1:6650"}


def test_cluster_record_round_trips_and_checks_urls_like_pulsar() -> None:
    record = ClusterRecord.of("east", EAST)
    assert ClusterRecord.from_json(record.to_json()) == record
    assert record.to_rest() == EAST
    with pytest.raises(BadRequestError, match="^cluster data is required$"):
        ClusterRecord.of("east", None)
    with pytest.raises(BadRequestError, match="^Illegal service url, example: http://"):
        ClusterRecord.of("east", {"serviceUrl": "pulsar://x:1"})
    with pytest.raises(BadRequestError, match="^Illegal broker service tls url"):
        ClusterRecord.of("east", {"brokerServiceUrlTls": "pulsar://x:1"})
    with pytest.raises(CodecError):
        ClusterRecord.from_json(b'{"cluster": 1}')


def test_register_update_list_and_remove_clusters_like_pulsar() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        local = services[0].identity.cluster
        before = services[0].store.version

        async def refused(
            method: str, path: str, body: str | None, status: int, reason: str
        ) -> None:
            resp = await a.request(method, path, data=body)
            assert (resp.status, (await resp.json())["reason"]) == (status, reason)

        # Refusals, in Pulsar's order; nothing is written.
        await refused(
            "PUT", "/admin/v2/clusters/bad%20name", "{}", 412, "Cluster name is not valid"
        )
        await refused("PUT", "/admin/v2/clusters/east", "null", 400, "cluster data is required")
        bad_url = json.dumps({"serviceUrl": "ftp://x"})
        await refused(
            "PUT",
            "/admin/v2/clusters/east",
            bad_url,
            400,
            "Illegal service url, example: http://pulsar.example.com:8080",
        )
        await refused("POST", "/admin/v2/clusters/east", "{}", 404, "Cluster does not exist")
        await refused("DELETE", "/admin/v2/clusters/east", None, 404, "Cluster does not exist")
        await refused("GET", "/admin/v2/clusters/east", None, 404, "Cluster does not exist")
        tenant = json.dumps({"allowedClusters": ["east"]})
        await refused("PUT", "/admin/v2/tenants/geo", tenant, 412, "Clusters do not exist")
        assert services[0].store.version == before

        # Register: seen by the other sidecar, listed beside the local cluster.
        assert (await a.put("/admin/v2/clusters/east", data=json.dumps(EAST))).status == 200
        await refused("PUT", "/admin/v2/clusters/east", "{}", 409, "Cluster already exists")
        assert await (await b.get("/admin/v2/clusters/east")).json() == EAST
        assert await (await b.get("/admin/v2/clusters")).json() == sorted(["east", local])
        moved = {**EAST, "serviceUrl": "http://127.0.0.1:21081"}
        assert (await b.post("/admin/v2/clusters/east", data=json.dumps(moved))).status == 200
        assert await (await a.get("/admin/v2/clusters/east")).json() == moved

        # A tenant may now allow it; then the cluster cannot go until the tenant lets it go.
        both = json.dumps({"allowedClusters": ["east", local]})
        assert (await a.put("/admin/v2/tenants/geo", data=both)).status == 204
        await refused("DELETE", "/admin/v2/clusters/east", None, 412, "Cluster not empty")
        only_local = json.dumps({"allowedClusters": [local]})
        assert (await b.post("/admin/v2/tenants/geo", data=only_local)).status == 204
        assert (await b.delete("/admin/v2/clusters/east")).status == 204
        assert (await a.get("/admin/v2/clusters/east")).status == 404
        assert await (await a.get("/admin/v2/clusters")).json() == [local]

    run(cluster(2), scenario)


def test_namespace_replication_clusters_like_pulsar() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        local = services[0].identity.cluster
        ns = "/admin/v2/namespaces/geo/ns"
        repl = f"{ns}/replication"
        assert (await a.put("/admin/v2/clusters/west", data=json.dumps(EAST))).status == 200
        assert (await a.put("/admin/v2/clusters/other", data=json.dumps(EAST))).status == 200
        tenant = json.dumps({"allowedClusters": [local, "west"]})
        assert (await a.put("/admin/v2/tenants/geo", data=tenant)).status == 204
        assert (await a.put(ns)).status == 204
        # Default: the local cluster, as before.
        assert await (await b.get(repl)).json() == [local]
        assert (await b.get(ns)).status == 200
        before = services[0].store.version

        async def refused(body: str, status: int, reason: str) -> None:
            resp = await a.post(repl, data=body)
            assert (resp.status, (await resp.json())["reason"]) == (status, reason)

        await refused("[]", 412, "ClusterIds should not be null or empty")
        await refused("null", 412, "ClusterIds should not be null or empty")
        await refused(
            '["global"]', 412, "Cannot specify global in the list of replication clusters"
        )
        await refused('["nowhere"]', 403, "Invalid cluster id: nowhere")
        await refused(
            '["other"]',
            403,
            "Cluster [other] is not in the list of allowed clusters list for tenant [geo]",
        )
        assert (
            await a.post("/admin/v2/namespaces/geo/none/replication", data='["west"]')
        ).status == 404
        assert (await a.post(repl, data='"west"')).status == 400
        assert services[0].store.version == before

        both = json.dumps(["west", local, "west"])
        assert (await a.post(repl, data=both)).status == 204
        assert await (await b.get(repl)).json() == sorted([local, "west"])
        policies = await (await b.get(ns)).json()
        assert policies["replication_clusters"] == sorted([local, "west"])
        # It goes with its namespace.
        assert (await a.delete(ns)).status == 204
        assert (await a.put(ns)).status == 204
        assert await (await b.get(repl)).json() == [local]

    run(cluster(2), scenario)
