"""The schema policies' REST, on the in-memory twin, answering as a real Pulsar 4.0.7
standalone answered the same requests (recorded by hand against ``make pulsar-up``):
``/admin/v2/namespaces/{t}/{ns}/schemaValidationEnforced`` and ``…/isAllowAutoUpdateSchema``
(GET and POST only, a Java ``boolean`` body bound as Jackson binds it), and the topic-level
``schemaValidationEnforced``. What the binary protocol does with them:
``tests/unit/broker_shim/binary/test_binary_schemas.py``.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.support.waits import eventually
from tests.unit.broker_shim.test_number_bodies import _without_kafka, _written
from tests.unit.broker_shim.test_sidecar_faults import _serve

NS = "/admin/v2/namespaces/public/default"
MISSING = "/admin/v2/namespaces/public/never-created"
TOPIC = "/admin/v2/persistent/public/default/orders"
JSON = {"Content-Type": "application/json"}

#: A body Pulsar's Jackson binds to a Java ``boolean``, and what it reads.
ACCEPTED = [
    ("true", True), ("false", False), ('"TRUE"', True), ('"True"', True), ('"false"', False),
    ("1", True), ("0", False), ("2", True), ("null", False),
]  # fmt: skip
#: Bodies it refuses (400), with the start of Jackson's text.
REFUSED = {
    '"maybe"': 'Cannot deserialize value of type `boolean` from String "maybe": only '
    '"true"/"True"/"TRUE" or "false"/"False"/"FALSE" recognized',
    "{}": "Cannot deserialize value of type `boolean` from Object value "
    "(token `JsonToken.START_OBJECT`)",
    "[true]": "Cannot deserialize value of type `boolean` from Array value "
    "(token `JsonToken.START_ARRAY`)",
    "1.5": "Cannot deserialize value of type `boolean` from Floating-point value "
    "(token `JsonToken.VALUE_NUMBER_FLOAT`)",
}
POLICIES = {"schemaValidationEnforced": False, "isAllowAutoUpdateSchema": True}


async def _post(client: TestClient[Any, Any], path: str, body: str) -> tuple[int, Any]:
    resp = await client.post(path, data=body.encode(), headers=JSON)
    return resp.status, (await resp.json() if resp.status != 204 else None)


async def _reads(client: TestClient[Any, Any], path: str, expected: Any) -> None:
    async def check() -> bool:
        resp = await client.get(path)
        return resp.status == 200 and await resp.json() == expected

    await eventually(check, f"{path} reads {expected!r}", 20)


async def _refuse_bad_bodies(client: TestClient[Any, Any]) -> None:
    """Every refused body, on a namespace that exists and on one never created: 400 with
    Jackson's text (the binding comes before Pulsar's namespace check)."""
    for namespace in (NS, MISSING):
        for policy in POLICIES:
            for body, reason in REFUSED.items():
                assert await _post(client, f"{namespace}/{policy}", body) == (
                    400,
                    {"reason": reason},
                ), (namespace, policy, body)


def test_namespace_schema_policies_answer_as_pulsar() -> None:
    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        for policy, unset in POLICIES.items():
            path = f"{NS}/{policy}"
            # unset: Pulsar's defaults (a primitive false; the broker's true)
            for query in ("", "?applied=true"):
                resp = await client.get(path + query)
                assert (resp.status, await resp.json()) == (200, unset)
            for body, value in ACCEPTED:
                assert await _post(client, path, body) == (204, None), (policy, body)
                await _reads(client, path, value)
            # Pulsar has no DELETE (its bundle route answers), nor a PUT
            resp = await client.delete(path)
            assert (resp.status, await resp.json()) == (
                412,
                {"reason": f"Invalid bundle range: {policy}"},
            )
            assert (await client.put(path, json=True)).status == 405
            # a namespace never created: 404, whatever the method
            for resp in (await client.get(f"{MISSING}/{policy}"),
                         await client.post(f"{MISSING}/{policy}", json=True),
                         await client.delete(f"{MISSING}/{policy}")):  # fmt: skip
                assert (resp.status, await resp.json()) == (
                    404,
                    {"reason": "Namespace does not exist"},
                )
        # the namespace's Policies JSON shows them under Pulsar's keys
        assert await _post(client, f"{NS}/schemaValidationEnforced", "true") == (204, None)
        assert await _post(client, f"{NS}/isAllowAutoUpdateSchema", "false") == (204, None)
        await _reads(client, f"{NS}/schemaValidationEnforced", True)
        await _reads(client, f"{NS}/isAllowAutoUpdateSchema", False)
        shown = await (await client.get(NS)).json()
        assert (shown["schema_validation_enforced"], shown["is_allow_auto_update_schema"]) == (
            True,
            False,
        )
        # refused bodies write nothing, and are refused without Kafka
        before = await _written(client, app)
        await _refuse_bad_bodies(client)
        assert await _written(client, app) == before
        with _without_kafka(app):
            await _refuse_bad_bodies(client)
        resp = await client.post(f"{NS}/isAllowAutoUpdateSchema", data=b"", headers=JSON)
        assert resp.status == 400

    _serve(scenario)


def test_topic_schema_validation_enforced_binds_a_java_boolean() -> None:
    """The topic level takes the same bodies; an explicit false (``null`` binds to false,
    as in Pulsar) overrides the namespace's true in the applied value."""

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        assert (await client.put(TOPIC)).status == 204
        path = f"{TOPIC}/schemaValidationEnforced"
        assert await _post(client, f"{NS}/schemaValidationEnforced", "true") == (204, None)
        await _reads(client, f"{path}?applied=true", True)
        assert await _post(client, path, '"TRUE"') == (204, None)
        await _reads(client, path, True)
        assert await _post(client, path, "null") == (204, None)
        await _reads(client, path, False)
        await _reads(client, f"{path}?applied=true", False)
        for body, reason in REFUSED.items():
            assert await _post(client, path, body) == (400, {"reason": reason}), body
        assert (await client.delete(path)).status == 405
        assert json.loads(await (await client.get(path)).text()) is False

    _serve(scenario)
