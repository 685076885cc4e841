"""``/policy-sync/v1/digest`` of a geo-replicated sidecar, on the in-memory twin: beside the
policy table's fields (unchanged) it reports ``global``, the merged global table's digest,
key count and positions; the digest is :func:`sync.geo.policies_digest` of the same records
folded by the one rule, and a peer's newer record arriving in its mirror changes it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from broker_shim._sidecar import Sidecar
from sync import Codec
from sync.cluster import LookupConfig
from sync.constants import (
    GLOBAL_EVENTS_TOPIC,
    HEADER_CLUSTER,
    HEADER_EVENT_ID,
    HEADER_HLC,
    SIDECAR_DIGEST_PATH,
)
from sync.geo import GlobalTable, mirror_topic, policies_digest, policy_decoder
from sync.transport import MemoryTransport, Message, TopicSpec
from tests.support.sidecars import memory_sidecar
from tests.support.waits import eventually
from tests.unit.broker_shim.test_sidecar_faults import _serve

TOPIC = "/admin/v2/persistent/public/default/geo"


def _geo_sidecar(transport: MemoryTransport) -> tuple[Sidecar, str]:
    plain = _plain_sidecar()
    config = dataclasses.replace(plain.config, geo_peers=("west",))
    for topic in (GLOBAL_EVENTS_TOPIC, mirror_topic("west")):
        transport.admin().ensure_topic(TopicSpec(topic, 4))
    return Sidecar(config, transport=transport), config.cluster


def _plain_sidecar() -> Sidecar:
    return memory_sidecar(LookupConfig(lookup_timeout_s=5.0, request_retry_s=0.5), "g")


def _expected(transport: MemoryTransport, cluster: str) -> tuple[str, int]:
    """The merged table read afresh from the same topics (own + west's mirror)."""
    table = GlobalTable(transport, cluster, ["west"], policy_decoder(Codec())).start()
    try:
        table.wait_ready(20)
        return policies_digest(table.table), len(table.table)
    finally:
        table.close()


def _records(transport: MemoryTransport, topic: str) -> list[Message]:
    consumer = transport.consumer()
    try:
        consumer.assign(topic, dict.fromkeys(range(4), 0))
        return list(consumer.consume(100, 0.5))
    finally:
        consumer.close()


async def _write_one_global_policy(client: TestClient[Any, Any], cluster: str) -> None:
    """Register west, replicate public/default to both clusters, and write one global
    policy of TOPIC (maxConsumers 5) through the sidecar's admin REST."""
    west = {"serviceUrl": "http://127.0.0.1:23080"}
    assert (await client.put("/admin/v2/clusters/west", data=json.dumps(west))).status == 200
    tenant = json.dumps({"allowedClusters": [cluster, "west"]})
    assert (await client.post("/admin/v2/tenants/public", data=tenant)).status == 204
    ns_repl = "/admin/v2/namespaces/public/default/replication"
    assert (await client.post(ns_repl, data=json.dumps([cluster, "west"]))).status == 204
    assert (await client.put(TOPIC)).status == 204
    resp = await client.post(f"{TOPIC}/maxConsumers?isGlobal=true", data="5")
    assert resp.status == 204, await resp.text()


def _mirror_a_newer_copy(transport: MemoryTransport) -> None:
    """West's newer write of this cluster's one global key arrives in west's mirror topic,
    as MirrorMaker 2 copies it (a later HLC, cluster west): it wins the merge."""
    (own,) = [m for m in _records(transport, GLOBAL_EVENTS_TOPIC) if m.key()]
    hlc = int(bytes(dict(own.headers() or ())[HEADER_HLC]).decode()) + 1
    producer = transport.producer()
    producer.produce(
        mirror_topic("west"),
        own.key(),
        own.value(),
        headers=[
            (HEADER_HLC, str(hlc).encode()),
            (HEADER_CLUSTER, b"west"),
            (HEADER_EVENT_ID, b"west-1"),
        ],
    )
    producer.flush(10)


def test_the_digest_reports_the_merged_global_table_beside_the_unchanged_fields() -> None:
    transport = MemoryTransport()
    sidecar, cluster = _geo_sidecar(transport)

    async def scenario(client: TestClient[Any, Any], _app: web.Application) -> None:
        async def digest() -> dict[str, Any]:
            resp = await client.get(SIDECAR_DIGEST_PATH)
            assert resp.status == 200, await resp.text()
            body: dict[str, Any] = await resp.json()
            return body

        empty = await digest()
        assert {"digest", "size", "positions", "global"} <= set(empty)
        assert empty["global"]["keys"] == 0
        assert set(empty["global"]["positions"]) == {GLOBAL_EVENTS_TOPIC, mirror_topic("west")}

        await _write_one_global_policy(client, cluster)

        written = await digest()
        assert written["global"]["keys"] == 1
        assert (written["global"]["digest"], 1) == _expected(transport, cluster)
        assert written["global"]["digest"] != empty["global"]["digest"]

        # West's newer write of the same key arrives in its mirror (as MM2 copies it): the
        # winner, hence the digest, changes, and equals a fresh merge again.
        _mirror_a_newer_copy(transport)

        async def moved() -> bool:
            return bool((await digest())["global"]["digest"] != written["global"]["digest"])

        await eventually(moved, "the mirror's newer record wins", timeout_s=20)
        later = await digest()
        assert later["global"]["keys"] == 1
        assert (later["global"]["digest"], 1) == _expected(transport, cluster)
        # The policy table's own fields are its own: a global record does not move them.
        assert (later["digest"], later["size"]) == (written["digest"], written["size"])
        assert later["positions"] == written["positions"]

    _serve(scenario, sidecar)


def test_without_geo_the_digest_has_no_global_field() -> None:
    async def scenario(client: TestClient[Any, Any], _app: web.Application) -> None:
        body = await (await client.get(SIDECAR_DIGEST_PATH)).json()
        assert set(body) == {"digest", "size", "positions"}

    _serve(scenario)
