"""Rate policies over the admin REST API, on the in-memory twin: -1 means unlimited.

``pulsar-admin topics set-publish-rate --msg-publish-rate 20`` sends
``{"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}``: Pulsar's rate
fields default to -1. Pulsar 4.0.7 stores any negative rate as sent and fills the fields a
body leaves out (the answers recorded in ``tests/compat/pulsar-4.0.7.json``, compared on
real Kafka by ``tests/integration/compat/test_pulsar_compat.py``).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.unit.broker_shim.test_sidecar_faults import _serve

TOPIC = "/admin/v2/persistent/public/default/rated"
NAMESPACE = "/admin/v2/namespaces/public/default"
DISPATCH_RATES = ("dispatchRate", "subscriptionDispatchRate", "replicatorDispatchRate")
#: What ``pulsar-admin … set-dispatch-rate`` sends when no limit is given.
UNLIMITED_DISPATCH = {
    "dispatchThrottlingRateInMsg": -1,
    "dispatchThrottlingRateInByte": -1,
    "relativeToPublishRate": False,
    "ratePeriodInSecond": 1,
}


async def _set_and_read(
    client: TestClient[Any, Any], path: str, body: dict[str, Any]
) -> tuple[int, Any]:
    resp = await client.post(path, data=json.dumps(body))
    assert resp.status == 204, (path, body, resp.status, await resp.text())
    got = await client.get(path)
    return got.status, await got.json()


def test_topic_rates_take_minus_one_and_read_it_back() -> None:
    async def scenario(client: TestClient[Any, Any], _app: web.Application) -> None:
        assert (await client.put(TOPIC)).status == 204
        publish = f"{TOPIC}/publishRate"
        sent = {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}
        assert await _set_and_read(client, publish, sent) == (200, sent)
        other = {"publishThrottlingRateInMsg": -2, "publishThrottlingRateInByte": -1024}
        assert await _set_and_read(client, publish, other) == (200, other)
        # Left out: Pulsar's PublishRate has -1 there.
        assert await _set_and_read(client, publish, {"publishThrottlingRateInMsg": 20}) == (
            200,
            sent,
        )
        for name in DISPATCH_RATES:
            assert await _set_and_read(client, f"{TOPIC}/{name}", UNLIMITED_DISPATCH) == (
                200,
                UNLIMITED_DISPATCH,
            )
            # Left out: 0 in Pulsar's DispatchRateImpl, the period too.
            partial = {"dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": -1}
            assert await _set_and_read(client, f"{TOPIC}/{name}", partial) == (
                200,
                {**partial, "relativeToPublishRate": False, "ratePeriodInSecond": 0},
            )
        subscribe = f"{TOPIC}/subscribeRate"
        assert await _set_and_read(
            client, subscribe, {"subscribeThrottlingRatePerConsumer": -1}
        ) == (
            200,
            {"subscribeThrottlingRatePerConsumer": -1, "ratePeriodInSecond": 30},
        )
        # Still refused: a value no Java int holds.
        resp = await client.post(publish, data='{"publishThrottlingRateInMsg": -2147483649}')
        assert resp.status == 400, await resp.text()
        assert "publishRate.publishThrottlingRateInMsg" in (await resp.json())["reason"]

    _serve(scenario)


def test_namespace_rates_take_minus_one_and_topics_apply_them() -> None:
    async def scenario(client: TestClient[Any, Any], _app: web.Application) -> None:
        assert (await client.put(TOPIC)).status == 204
        sent = {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}
        assert await _set_and_read(client, f"{NAMESPACE}/publishRate", sent) == (200, sent)
        for name in DISPATCH_RATES:
            path = f"{NAMESPACE}/{name}"
            assert await _set_and_read(client, path, UNLIMITED_DISPATCH) == (
                200,
                UNLIMITED_DISPATCH,
            )
            applied = await client.get(f"{TOPIC}/{name}?applied=true")
            assert await applied.json() == UNLIMITED_DISPATCH
        subscribe = {"subscribeThrottlingRatePerConsumer": -1, "ratePeriodInSecond": 30}
        assert await _set_and_read(client, f"{NAMESPACE}/subscribeRate", subscribe) == (
            200,
            subscribe,
        )
        # Pulsar's namespace Policies JSON shows them per cluster.
        policies = await (await client.get(NAMESPACE)).json()
        assert list(policies["publishMaxMessageRate"].values()) == [sent]
        assert list(policies["clusterSubscribeRate"].values()) == [subscribe]

    _serve(scenario)
