"""Pulsar's schema registry over its admin REST (``pulsar-admin schemas …``), on the
in-memory twin with two sidecars: versions, identity, compatibility, soft and forced
deletes as Pulsar answers them; refused requests write nothing; every sidecar sees the
same history."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient

from sync.cluster import ClusterService, LookupConfig
from tests.support.apps import app_client
from tests.support.sidecars import memory_sidecar
from tests.support.waits import eventually
from tests.unit.broker_shim.test_lookup_http import AUTH, _bearer, cluster, run
from tests.unit.sync.cluster.test_schemas import RETYPED, V1, WITH_DEFAULT

BASE = "/admin/v2/schemas/public/default/orders"
TOPIC = "persistent://public/default/orders"


def avro(definition: str, **properties: str) -> dict[str, Any]:
    """A ``PostSchemaPayload`` of an AVRO schema."""
    return {"type": "AVRO", "schema": definition, "properties": properties}


async def answer(resp: Any) -> tuple[int, Any]:
    return resp.status, await resp.json()


def test_upload_get_evolve_delete_like_pulsar() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        store = services[0].store
        not_found = (404, {"reason": "Schema not found"})
        assert await answer(await a.get(f"{BASE}/schema")) == not_found
        assert await answer(await a.get(f"{BASE}/schemas")) == (200, {"getSchemaResponses": []})

        # upload: version 0, seen by the other sidecar
        resp = await a.post(f"{BASE}/schema", json=avro(V1, owner="billing"))
        assert await answer(resp) == (200, {"version": {"version": 0}})
        status, got = await answer(await b.get(f"{BASE}/schema"))
        assert status == 200 and got["timestamp"] > 0
        assert got == {"version": 0, "type": "AVRO", "timestamp": got["timestamp"], "data": V1,
                       "properties": {"owner": "billing"}}  # fmt: skip

        # a compatible change (a field with a default): version 1
        resp = await b.post(f"{BASE}/schema", json=avro(WITH_DEFAULT))
        assert await answer(resp) == (200, {"version": {"version": 1}})
        # the same schema again, written differently: still version 1, nothing written
        assert (await (await a.get(f"{BASE}/schema")).json())["version"] == 1  # a has synced
        before = store.version
        again = avro(json.dumps(json.loads(WITH_DEFAULT), indent=2))
        assert await answer(await a.post(f"{BASE}/schema", json=again)) == (
            200,
            {"version": {"version": 1}},
        )
        # incompatible under the default FULL (a field's type changed): Pulsar's 409, its
        # reason in the status line and in Jetty's error page (markup escaped), the
        # schemas as Avro Java prints them
        resp = await a.post(f"{BASE}/schema", json=avro(RETYPED))
        status, body = await answer(resp)
        assert status == 409 and set(body) == {"message", "url", "status"}
        assert (body["url"], body["status"]) == (f"{BASE}/schema", "409")
        assert body["message"].startswith(
            "Error during schema compatibility check with strategy FULL: "
            "org.apache.avro.SchemaValidationException: Unable to read schema: \n{\n"
            "  &quot;type&quot; : &quot;record&quot;,\n"
        )
        assert (resp.reason or "").startswith(
            "Error during schema compatibility check with strategy FULL: "
            'org.apache.avro.SchemaValidationException: Unable to read schema: ?{?  "type" : '
        )
        as_json = {"type": "JSON", "schema": V1}
        status, body = await answer(await a.post(f"{BASE}/schema", json=as_json))
        assert (status, body["message"]) == (
            409,
            "Incompatible schema: exists schema type AVRO, new schema type JSON",
        )
        assert store.version == before

        # the versions, from either sidecar; a partition answers for its partitioned topic
        status, listed = await answer(await b.get(f"{BASE}/schemas"))
        assert [v["version"] for v in listed["getSchemaResponses"]] == [0, 1]
        assert [v["data"] for v in listed["getSchemaResponses"]] == [V1, WITH_DEFAULT]
        partition = "/admin/v2/schemas/public/default/orders-partition-3"
        assert (await (await a.get(f"{partition}/schema")).json())["version"] == 1
        status, got = await answer(await a.get(f"{BASE}/schema/0"))
        assert (status, got["data"]) == (200, V1)
        assert await answer(await a.get(f"{BASE}/schema/7")) == not_found
        assert (await a.get(f"{BASE}/schema/latest")).status == 412

        # a compatibility test writes nothing: 202 with the strategy, or the upload's 409
        resp = await b.post(f"{BASE}/compatibility", json=avro(V1))
        assert await answer(resp) == (
            202,
            {"compatibility": True, "schemaCompatibilityStrategy": "FULL"},
        )
        assert (await b.post(f"{BASE}/compatibility", json=avro(RETYPED))).status == 409
        # a version lookup compares the exact text
        assert await answer(await a.post(f"{BASE}/version", json=avro(V1))) == (200, {"version": 0})
        assert await answer(await a.post(f"{BASE}/version", json=again)) == (200, {"version": -1})
        assert store.version == before

        # soft delete: a marker (version 2); the history stays but nothing of it is served
        assert await answer(await b.delete(f"{BASE}/schema")) == (200, {"version": 2})
        for client in (a, b):
            assert await answer(await client.get(f"{BASE}/schema")) == not_found
            assert await answer(await client.get(f"{BASE}/schema/1")) == not_found
            listed = await (await client.get(f"{BASE}/schemas")).json()
            assert listed == {"getSchemaResponses": []}
        assert await answer(await a.post(f"{BASE}/version", json=avro(V1))) == (
            200,
            {"version": -1},
        )
        assert [v.version for v in store.schemas[TOPIC].versions] == [0, 1, 2]
        # after a delete anything goes, numbered on: version 3
        resp = await a.post(f"{BASE}/schema", json=avro(RETYPED))
        assert await answer(resp) == (200, {"version": {"version": 3}})
        assert (await (await b.get(f"{BASE}/schema")).json())["data"] == RETYPED

        # a forced delete drops the history: -1, and numbering starts over
        assert await answer(await a.delete(f"{BASE}/schema?force=true")) == (200, {"version": -1})
        # the other sidecar's view follows the registry (its reader thread): wait for it
        await eventually(
            lambda: TOPIC not in services[1].store.schemas, "the forced delete reaches b", 20
        )
        resp = await b.post(f"{BASE}/schema", json=avro(V1))
        assert await answer(resp) == (200, {"version": {"version": 0}})

        # properties bind as Pulsar's Map<String, String>: numbers and booleans as text
        numbers = {"type": "STRING", "schema": "", "properties": {"n": 1, "b": True}}
        resp = await a.post("/admin/v2/schemas/public/default/other/schema", json=numbers)
        assert await answer(resp) == (200, {"version": {"version": 0}})
        got = await (await b.get("/admin/v2/schemas/public/default/other/schema")).json()
        assert got["properties"] == {"b": "true", "n": "1"}

        # reads in a namespace that does not exist: no schema, as Pulsar's
        nowhere = "/admin/v2/schemas/public/nowhere/x"
        assert await answer(await a.get(f"{nowhere}/schema")) == not_found
        assert await answer(await a.get(f"{nowhere}/schema/0")) == not_found
        assert await answer(await a.get(f"{nowhere}/schemas")) == (
            200,
            {"getSchemaResponses": []},
        )
        assert await answer(await a.post(f"{nowhere}/version", json=avro(V1))) == (
            200,
            {"version": -1},
        )

    run(cluster(2), scenario)


def test_refused_requests_write_nothing() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        c = clients[0]
        store = services[0].store
        assert (await c.post(f"{BASE}/schema", json=avro(V1))).status == 200
        before = store.version
        # an upload's 409 and 422 are Jetty's error page ("message"), the rest {"reason"}
        refused: list[tuple[str, str, Any, int, str]] = [
            (BASE, "schema", "{", 400, "malformed JSON"),
            (BASE, "schema", [], 400, "the body must be a schema payload"),
            (BASE, "schema", {"type": "AVRO"}, 400, "schema must be a string"),
            (BASE, "schema", {"type": "STRING", "schema": "", "properties": {"a": [1]}}, 400,
             "properties must be a JSON object of strings"),
            (BASE, "schema", {"type": "PICKLE", "schema": ""}, 422, "No enum constant"),
            (BASE, "schema", avro("{nope"), 422, "Invalid schema definition data for AVRO"),
            (BASE, "schema", {"type": "STRING", "schema": "x"}, 422,
             "string schema : &apos;x&apos;"),
            (BASE, "compatibility", avro('["int", "null"]'), 422, "[UNION] is not supported"),
            ("/admin/v2/schemas/bad!tenant/default/x", "schema", avro(V1), 412, "tenant"),
            ("/admin/v2/schemas/public/nowhere/x", "schema", avro(V1), 404,
             "Namespace does not exist"),
            ("/admin/v2/schemas/public/nowhere/x", "compatibility", avro(V1), 404,
             "Namespace does not exist"),
        ]  # fmt: skip
        for base, action, body, status, reason in refused:
            data = body if isinstance(body, str) else json.dumps(body)
            resp = await c.post(f"{base}/{action}", data=data,
                                headers={"Content-Type": "application/json"})  # fmt: skip
            got = await resp.json()
            text = got.get("message") if status in (409, 422) and action == "schema" else None
            text = text or got["reason"]
            assert (resp.status, reason in text) == (status, True), (body, got)
        resp = await c.delete("/admin/v2/schemas/public/nowhere/x/schema")
        assert (resp.status, await resp.json()) == (404, {"reason": "Namespace does not exist"})
        resp = await c.delete(f"{BASE}/schema?force=maybe")
        assert resp.status == 412
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        resp = await c.post(f"{BASE}/schema", data="type=AVRO", headers=form)
        assert resp.status == 415
        assert store.version == before
        assert [v.version for v in store.schemas[TOPIC].versions] == [0]

    run(cluster(1), scenario)


def test_tenant_admins_write_lookup_roles_read() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        c = clients[0]
        services[0].admin.ensure_tenant("acme")
        assert (
            await c.put("/admin/v2/namespaces/acme/app", headers=_bearer("t-alice"))
        ).status == 204
        base = "/admin/v2/schemas/acme/app/orders"
        before = services[0].store.version
        assert (await c.post(f"{base}/schema", json=avro(V1))).status == 401
        resp = await c.post(f"{base}/schema", json=avro(V1), headers=_bearer("t-bob"))
        assert resp.status == 403
        assert (await c.delete(f"{base}/schema", headers=_bearer("t-bob"))).status == 403
        resp = await c.post(f"{base}/compatibility", json=avro(V1), headers=_bearer("t-bob"))
        assert resp.status == 403
        assert services[0].store.version == before
        resp = await c.post(f"{base}/schema", json=avro(V1), headers=_bearer("t-alice"))
        assert resp.status == 200
        # bob may look the topic up, so he reads its schema (Pulsar's GET_METADATA)
        got = await (await c.get(f"{base}/schema", headers=_bearer("t-bob"))).json()
        assert got["data"] == V1
        resp = await c.post(f"{base}/version", json=avro(V1), headers=_bearer("t-bob"))
        assert await resp.json() == {"version": 0}
        history = services[0].store.schemas["persistent://acme/app/orders"]
        assert history.versions[0].user == "alice"

    run(cluster(1, auth=AUTH), scenario)


def test_the_sidecar_app_routes_schemas_before_its_generic_admin_routes() -> None:
    """``/admin/v2/{domain}/{tenant}/{namespace}/{topic}/{policy}`` would take ``schemas``
    as a domain: the whole app (``build_app``) answers the registry's routes."""

    async def main() -> None:
        async with app_client(memory_sidecar(LookupConfig(), "schemas")) as client:
            assert await answer(await client.get(f"{BASE}/schema")) == (
                404,
                {"reason": "Schema not found"},
            )
            resp = await client.post(f"{BASE}/schema", json=avro(V1))
            assert await answer(resp) == (200, {"version": {"version": 0}})
            assert (await (await client.get(f"{BASE}/schema/0")).json())["data"] == V1

    asyncio.run(main())


def test_the_compatibility_strategy_policy_decides_what_an_upload_may_change() -> None:
    """``schemaCompatibilityStrategy`` at topic level (``PUT``, as Pulsar), else at
    namespace level, else the broker's FULL, is what the registry checks uploads with."""

    async def main() -> None:
        async with app_client(memory_sidecar(LookupConfig(), "strategy")) as client:
            policy = "/admin/v2/persistent/public/default/orders/schemaCompatibilityStrategy"
            ns_policy = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"
            assert (await client.put("/admin/v2/persistent/public/default/orders")).status == 204
            unset = await client.get(policy)  # Pulsar's null: 200, an empty body
            assert (unset.status, await unset.read()) == (200, b"")
            assert await (await client.get(ns_policy)).json() == "UNDEFINED"
            assert await (await client.get(policy + "?applied=true")).json() == "FULL"
            resp = await client.post(policy, json="ALWAYS_COMPATIBLE")
            assert await answer(resp) == (
                405,
                {"message": "Method Not Allowed", "url": policy, "status": "405"},
            )
            assert (await client.put(policy, json="SOMETIMES")).status == 400
            assert (await client.post(f"{BASE}/schema", json=avro(V1))).status == 200
            refused = await client.post(f"{BASE}/schema", json=avro(RETYPED))
            assert refused.status == 409  # FULL: a field of another type
            assert (await client.put(policy, json="ALWAYS_COMPATIBLE")).status == 204

            async def applied() -> bool:
                resp = await client.post(f"{BASE}/compatibility", json=avro(RETYPED))
                body = await resp.json()
                return bool(body.get("schemaCompatibilityStrategy") == "ALWAYS_COMPATIBLE")

            await eventually(applied, "the topic's strategy applies", 20)
            assert await (await client.get(policy)).json() == "ALWAYS_COMPATIBLE"
            resp = await client.post(f"{BASE}/schema", json=avro(RETYPED))
            assert await answer(resp) == (200, {"version": {"version": 1}})
            # the namespace's strategy applies once the topic's is removed
            assert (await client.put(ns_policy, json="ALWAYS_INCOMPATIBLE")).status == 204
            assert (await client.delete(policy)).status == 204

            async def namespace_applies() -> bool:
                resp = await client.get(policy + "?applied=true")
                return bool(await resp.json() == "ALWAYS_INCOMPATIBLE")

            await eventually(namespace_applies, "the namespace's strategy applies", 20)
            assert await (await client.get(ns_policy)).json() == "ALWAYS_INCOMPATIBLE"
            assert (await client.post(f"{BASE}/schema", json=avro(WITH_DEFAULT))).status == 409
            # UNDEFINED: the namespace's means the broker's FULL; the topic's is Pulsar's
            # null (the policy removed)
            assert (await client.put(ns_policy, json="UNDEFINED")).status == 204
            assert await (await client.get(policy + "?applied=true")).json() == "FULL"
            assert (await client.put(policy, json="FORWARD")).status == 204

            async def forward() -> bool:
                return bool(await (await client.get(policy)).read() == b'"FORWARD"')

            await eventually(forward, "the topic's strategy is set", 20)
            assert (await client.put(policy, json="UNDEFINED")).status == 204

            async def removed() -> bool:
                return bool(await (await client.get(policy)).read() == b"")

            await eventually(removed, "UNDEFINED removes the topic's strategy", 20)
            assert await (await client.get(policy + "?applied=true")).json() == "FULL"

    asyncio.run(main())
