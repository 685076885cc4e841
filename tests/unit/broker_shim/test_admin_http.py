"""Tenants, namespaces and topics over Pulsar's admin REST, on the in-memory twin (issue 13).

The same surface is compared with a real Pulsar's recorded answers in
``tests/integration/compat/test_pulsar_compat.py`` (real Kafka); these are the fast checks of
the lifecycle rules: two sidecars see the same records, and refused requests write nothing.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp.test_utils import TestClient

from sync import TopicName
from sync.cluster import ClusterService
from sync.cluster._records import TenantRecord, TopicRecord
from tests.unit.broker_shim.test_lookup_http import cluster, run

VND = {"Content-Type": "application/vnd.partitioned-topic-metadata+json"}


def test_tenant_and_topic_records_round_trip() -> None:
    tenant = TenantRecord("acme", ("alice",), ("standalone",))
    assert TenantRecord.from_json(tenant.to_json()) == tenant
    assert tenant.to_rest() == {"adminRoles": ["alice"], "allowedClusters": ["standalone"]}
    topic = TopicRecord("persistent://a/b/c", 3, "k", 1, (("owner", "x"),))
    assert TopicRecord.from_json(topic.to_json()) == topic
    plain = TopicRecord("persistent://a/b/d", 0, "k2", 1)
    assert b"properties" not in plain.to_json()  # records of earlier releases stay identical
    assert TopicRecord.from_json(plain.to_json()) == plain


def test_tenant_namespace_topic_lifecycle_like_pulsar() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        name = services[0].identity.cluster
        registry_before = services[0].store.version
        # Refused: nothing written.
        bad = await a.put("/admin/v2/tenants/bad%20name", data="{}")
        assert (bad.status, (await bad.json())["reason"]) == (412, "Tenant name is not valid")
        unknown = await a.put("/admin/v2/tenants/acme", data='{"allowedClusters": ["nope"]}')
        assert (unknown.status, (await unknown.json())["reason"]) == (412, "Clusters do not exist")
        assert (await a.put("/admin/v2/tenants/acme", data="{")).status == 400
        assert services[0].store.version == registry_before
        # Tenant, seen by the other sidecar.
        info = json.dumps({"allowedClusters": [name], "adminRoles": ["ops"]})
        assert (await a.put("/admin/v2/tenants/acme", data=info)).status == 204
        assert (await a.put("/admin/v2/tenants/acme", data=info)).status == 409
        got = await b.get("/admin/v2/tenants/acme")
        assert await got.json() == {"adminRoles": ["ops"], "allowedClusters": [name]}
        assert "acme" in await (await b.get("/admin/v2/tenants")).json()
        # Namespace and topics.
        ns = "/admin/v2/namespaces/acme/ops"
        assert (await b.put(ns)).status == 204
        policies = await (await a.get(ns)).json()
        assert policies["bundles"]["numBundles"] == 4
        assert policies["replication_clusters"] == [name]
        root = "/admin/v2/persistent/acme/ops"
        assert (await a.put(f"{root}/plain")).status == 204
        assert (await b.put(f"{root}/plain")).status == 409
        body = json.dumps({"partitions": 2, "properties": {"k": "v"}})
        assert (await a.put(f"{root}/parted/partitions", data=body, headers=VND)).status == 204
        meta = await (await b.get(f"{root}/parted/partitions")).json()
        assert meta == {"partitions": 2, "deleted": False, "properties": {"k": "v"}}
        assert (await a.post(f"{root}/parted/partitions", data="3")).status == 204
        fewer = await a.post(f"{root}/parted/partitions", data="1")
        assert fewer.status == 422
        assert await (await b.get(f"{root}/partitioned")).json() == ["persistent://acme/ops/parted"]
        assert await (await b.get(root)).json() == [
            "persistent://acme/ops/parted-partition-0",
            "persistent://acme/ops/parted-partition-1",
            "persistent://acme/ops/parted-partition-2",
            "persistent://acme/ops/plain",
        ]
        kafka = services[0].store.topic(TopicName.parse("persistent://acme/ops/parted"))
        assert kafka is not None
        desc = services[0]._transport.admin().describe_topic(kafka.kafka_topic)
        assert desc is not None and desc.partitions == 3  # the Kafka topic grew too
        # Deletes: only when empty.
        assert (await a.delete("/admin/v2/tenants/acme")).status == 409
        assert (await a.delete(ns)).status == 409
        assert (await a.delete(f"{root}/plain")).status == 204
        assert (await a.delete(f"{root}/plain")).status == 404
        assert (await b.delete(f"{root}/parted/partitions")).status == 204
        assert (await a.delete(ns)).status == 204
        assert (await a.get(ns)).status == 404
        assert (await b.delete("/admin/v2/tenants/acme")).status == 204
        assert (await b.get("/admin/v2/tenants/acme")).status == 404

    run(cluster(2), scenario)
