"""Numbers no Java type holds, wherever an HTTP route reads JSON, on the in-memory twin.

A 5,000-digit integer in a body made ``json.loads`` raise ``ValueError`` (CPython's
4,300-digit limit), which no route mapped: 500 on every route that reads a body. One past
2**63, ``1e999``, NaN and Infinity are no Java ``long``/``double`` either. Every route
answers them as Pulsar's Jackson does: 400 with a ``{"reason"}``, nothing written, and
before any Kafka I/O (checked with the in-memory broker taken away: a route that asked
Kafka first would answer 503).
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from broker_shim._forward import FORWARDED_HEADER
from broker_shim._http import SIDECAR_KEY
from sync.constants import SIDECAR_DIGEST_PATH, SIDECAR_WRITE_PATH
from sync.transport import MemoryTransport
from tests.unit.broker_shim.test_sidecar_faults import _cluster, _serve

#: JSON numbers no Java type holds (and JSON's NaN/Infinity extensions).
BEYOND_JAVA = [
    "9" * 5000,
    "-" + "9" * 4400,
    str(2**63),
    str(-(2**63) - 1),
    "1e999",
    "-1e999",
    "NaN",
    "Infinity",
    "-Infinity",
]
#: Numbers a Java int field cannot take (Pulsar's partition counts, most policies).
NOT_AN_INT = ["1.5", "1e3", "-2.5e-3", str(2**31), str(-(2**31) - 1)]

JSON = {"Content-Type": "application/json"}
VND = {"Content-Type": "application/vnd.partitioned-topic-metadata+json"}
ROOT = "/admin/v2/persistent/public/default"
NS = "/admin/v2/namespaces/public/default"


async def _refused(
    client: TestClient[Any, Any], method: str, path: str, body: str | None, headers: Any = JSON
) -> None:
    data = None if body is None else body.encode()
    resp = await client.request(method, path, data=data, headers=headers)
    text = await resp.text()
    assert resp.status == 400, (method, path[:120], (body or "")[:40], resp.status, text[:300])
    assert (await resp.json())["reason"], (method, path[:120])


@contextlib.contextmanager
def _without_kafka(app: web.Application) -> Iterator[None]:
    """Every Kafka call fails while inside: a route that asks Kafka answers 503."""
    transport = app[SIDECAR_KEY].transport
    assert isinstance(transport, MemoryTransport)
    transport.broker.set_available(False)
    try:
        yield
    finally:
        transport.broker.set_available(True)


async def _written(client: TestClient[Any, Any], app: web.Application) -> tuple[Any, int]:
    """What a refused request must leave as it was: the policy table and the registry."""
    digest = await (await client.get(SIDECAR_DIGEST_PATH)).json()
    return digest["digest"], _cluster(app).service.store.version


def _embedded(number: str) -> dict[str, str]:
    """Topic-level policy path -> a body that carries ``number`` where Pulsar reads one."""
    return {
        "messageTTL": number,
        "maxConsumers": number,
        "compactionThreshold": number,
        "maxMessageSize": number,
        "deduplicationEnabled": number,
        "retention": f'{{"retentionTimeInMinutes": {number}, "retentionSizeInMB": 1}}',
        "persistence": f'{{"bookkeeperEnsemble": {number}, "bookkeeperWriteQuorum": 1,'
        ' "bookkeeperAckQuorum": 1, "managedLedgerMaxMarkDeleteRate": 1.0}',
        "publishRate": f'{{"publishThrottlingRateInMsg": {number},'
        ' "publishThrottlingRateInByte": 1}',
        "dispatchRate": f'{{"dispatchThrottlingRateInMsg": 1, "dispatchThrottlingRateInByte":'
        f' {number}, "ratePeriodInSecond": 1}}',
        "inactiveTopicPolicies": f'{{"maxInactiveDurationSeconds": {number}}}',
        "subscriptionTypesEnabled": f"[{number}]",
        "backlogQuota?backlogQuotaType=destination_storage": f'{{"limitSize": {number},'
        ' "policy": "producer_request_hold"}',
    }


def _namespace_embedded(number: str) -> dict[str, str]:
    """Namespace-level policy path -> a body carrying ``number``."""
    return {
        "messageTTL": number,
        "maxConsumersPerTopic": number,
        "compactionThreshold": number,
        "deduplication": number,
        "retention": f'{{"retentionTimeInMinutes": 1, "retentionSizeInMB": {number}}}',
        "persistence": f'{{"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": {number},'
        ' "bookkeeperAckQuorum": 1}',
        "autoTopicCreation": '{"allowAutoTopicCreation": true, "topicType": "partitioned",'
        f' "defaultNumPartitions": {number}}}',
        "inactiveTopicPolicies": f'{{"maxInactiveDurationSeconds": {number}}}',
    }


def test_policy_rest_refuses_numbers_no_java_type_holds() -> None:
    # The three: a namespace "policy" that is not one, a topic policy, and a policy
    # of a topic never created (its lookup would be Kafka I/O).
    topics = [f"{ROOT}/orders", "/admin/v2/non-persistent/public/default/default"]
    namespaces = [NS, "/admin/v2/namespaces/public/never-created"]

    async def refuse_all(client: TestClient[Any, Any]) -> None:
        for number in BEYOND_JAVA:
            for topic in topics:
                for policy, body in _embedded(number).items():
                    await _refused(client, "POST", f"{topic}/{policy}", body)
            for namespace in namespaces:
                for policy, body in _namespace_embedded(number).items():
                    await _refused(client, "POST", f"{namespace}/{policy}", body)
                await _refused(client, "POST", f"{namespace}/unload", number)

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        created = await client.put(f"{ROOT}/orders")
        assert created.status == 204, await created.text()
        before = await _written(client, app)
        await refuse_all(client)
        # An int policy given a float, or a number past Java's int: the type check's 400.
        for number in NOT_AN_INT:
            for policy in ("messageTTL", "maxConsumers", "maxMessageSize"):
                await _refused(client, "POST", f"{ROOT}/orders/{policy}", number)
            await _refused(client, "POST", f"{NS}/maxConsumersPerTopic", number)
        assert await _written(client, app) == before
        # The largest long is a long: still taken where the field is one.
        ok = await client.post(f"{ROOT}/orders/compactionThreshold", data=str(2**63 - 1))
        assert ok.status == 204, await ok.text()
        got = await client.get(f"{ROOT}/orders/compactionThreshold")
        assert await got.json() == 2**63 - 1
        with _without_kafka(app):
            await refuse_all(client)

    _serve(scenario)


def test_query_values_refuse_numbers_no_java_type_holds() -> None:
    # Pulsar's admin clients send these values in the query string (?messageTTL=60).
    queries = [
        ("messageTTL", "messageTTL"),
        ("compactionThreshold", "threshold"),
        ("deduplicationSnapshotInterval", "interval"),
    ]

    async def refuse_all(client: TestClient[Any, Any], topic: str) -> None:
        for number in BEYOND_JAVA:
            value = urllib.parse.quote(number)
            for policy, param in queries:
                await _refused(client, "POST", f"{topic}/{policy}?{param}={value}", None)

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        created = await client.put(f"{ROOT}/orders")
        assert created.status == 204, await created.text()
        before = await _written(client, app)
        await refuse_all(client, f"{ROOT}/orders")
        for number in NOT_AN_INT:  # messageTTL is an int
            await _refused(client, "POST", f"{ROOT}/orders/messageTTL?messageTTL={number}", None)
        assert await _written(client, app) == before
        resp = await client.get(f"{ROOT}/orders/messageTTL")
        assert resp.status == 200 and await resp.read() == b""  # unset, as before
        with _without_kafka(app):
            await refuse_all(client, f"{ROOT}/orders")
            await refuse_all(client, f"{ROOT}/never-created")

    _serve(scenario)


def test_namespace_and_tenant_ops_refuse_numbers_no_java_type_holds() -> None:
    fresh = "/admin/v2/namespaces/public/fresh"

    async def refuse_all(client: TestClient[Any, Any]) -> None:
        for number in BEYOND_JAVA + NOT_AN_INT:  # numBundles is a Java int
            await _refused(client, "PUT", fresh, f'{{"bundles": {{"numBundles": {number}}}}}')
        for number in BEYOND_JAVA:
            await _refused(client, "PUT", fresh, number)
            await _refused(client, "PUT", fresh, f'{{"bundles": {{}}, "x": [{number}]}}')
            tenant = f'{{"adminRoles": [], "allowedClusters": [], "x": {number}}}'
            await _refused(client, "PUT", "/admin/v2/tenants/fresh", tenant)
            await _refused(client, "POST", "/admin/v2/tenants/public", tenant)

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        before = await _written(client, app)
        await refuse_all(client)
        assert await _written(client, app) == before
        assert (await client.get(fresh)).status == 404
        assert (await client.get("/admin/v2/tenants/fresh")).status == 404
        with _without_kafka(app):
            await refuse_all(client)

    _serve(scenario)


def test_topic_ops_refuse_numbers_no_java_type_holds() -> None:
    async def refuse_all(client: TestClient[Any, Any]) -> None:
        for number in BEYOND_JAVA + NOT_AN_INT:
            await _refused(client, "PUT", f"{ROOT}/plain", f'{{"owner": {number}}}')
            await _refused(client, "PUT", f"{ROOT}/fresh/partitions", number)
            body = f'{{"partitions": {number}, "properties": {{}}}}'
            await _refused(client, "PUT", f"{ROOT}/fresh/partitions", body, VND)
            await _refused(client, "POST", f"{ROOT}/parted/partitions", number)
        for number in BEYOND_JAVA:
            await _refused(client, "PUT", f"{ROOT}/plain", number)

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        created = await client.put(f"{ROOT}/parted/partitions", data="2", headers=JSON)
        assert created.status == 204, await created.text()
        before = await _written(client, app)
        await refuse_all(client)
        assert await _written(client, app) == before
        for name in ("plain", "fresh"):
            assert (await client.get(f"{ROOT}/{name}/partitions")).status == 404
        meta = await (await client.get(f"{ROOT}/parted/partitions")).json()
        assert meta["partitions"] == 2
        with _without_kafka(app):
            await refuse_all(client)

    _serve(scenario)


def test_a_forwarded_write_with_a_huge_number_is_refused_not_500() -> None:
    """The fence holder's own endpoint (another sidecar's JSON) reads bodies too."""

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        before = await _written(client, app)
        body = '{"writes": [{"key": "public/default/orders", "fields": {"x": %s}}]}' % ("9" * 5000)
        resp = await client.post(
            SIDECAR_WRITE_PATH, data=body, headers={**JSON, FORWARDED_HEADER: "1"}
        )
        assert 400 <= resp.status < 500, await resp.text()
        assert (await resp.json())["reason"]
        assert await _written(client, app) == before

    _serve(scenario)
