"""Policies changed through the sidecar's REST API take effect on live WebSocket clients."""

from __future__ import annotations

import json

from tests.support.kafka import make_topic
from tests.support.sidecars import ThreadSidecar
from tests.support.ws import (
    ack,
    closed_with,
    connect,
    consumer_url,
    policy_enforced,
    produce,
    producer_url,
    receive,
    refused,
    run,
    send_frame,
    set_policy,
    silent,
)


def test_lowering_max_consumers_per_subscription_closes_the_newest(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        sh = {"subscriptionType": "Shared"}
        async with connect(consumer_url(sidecar, topic, "s", consumerName="old", **sh)) as old:
            async with connect(consumer_url(sidecar, topic, "s", consumerName="new", **sh)) as new:
                async with connect(producer_url(sidecar, topic)) as prod:
                    await produce(prod, [f"m{i}".encode() for i in range(4)])
                held_by_new = await receive(new, 2)
                first = await receive(old, 2)
                await set_policy(sidecar.http_url, topic, "maxConsumersPerSubscription", 1)
                code, reason = await closed_with(new)
                assert (code, reason) == (1008, "Subscription reached max consumers limit")
                # what the evicted consumer held is redelivered to the one that stays
                moved = await receive(old, 2)
                assert {m["messageId"] for m in moved} == {m["messageId"] for m in held_by_new}
                await ack(old, first + moved)
                status, text = await refused(consumer_url(sidecar, topic, "s", **sh))
                assert status == 409
                assert text == "Failed to subscribe: Subscription reached max consumers limit"

    run(scenario())


def test_disabling_a_subscription_type_closes_live_consumers_of_it(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        async with connect(consumer_url(sidecar, topic, "a", subscriptionType="Shared")) as sh:
            async with connect(consumer_url(sidecar, topic, "b")) as excl:
                await set_policy(sidecar.http_url, topic, "subscriptionTypesEnabled", ["Exclusive"])
                code, reason = await closed_with(sh)
                assert code == 1008
                assert reason == f"Topic[{{{topic}}}] doesn't support Shared sub type!"
                assert await silent(excl, 0.2) == []  # still open
                status, text = await refused(
                    consumer_url(sidecar, topic, "c", subscriptionType="Shared")
                )
                assert status == 403 and "doesn't support Shared sub type" in text
                await set_policy(sidecar.http_url, topic, "subscriptionTypesEnabled", None)
                async with connect(consumer_url(sidecar, topic, "c", subscriptionType="Shared")):
                    pass

    run(scenario())


def test_dispatch_rate_applies_to_connected_consumers(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    """A dispatch rate of 10 messages an hour lets one period's burst (10) through and
    holds the rest, on a consumer connected before it was set; lifted, the rest follow.
    No clock in the assertions: the next token is six minutes away, so a machine that is
    slow only makes the silence longer."""
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        async with connect(consumer_url(sidecar, topic, "r", subscriptionType="Shared")) as cons:
            rate = {"dispatchThrottlingRateInMsg": 10, "ratePeriodInSecond": 3600}
            await set_policy(sidecar.http_url, topic, "dispatchRate", rate)
            await policy_enforced(sidecar, topic, "dispatchRate")
            async with connect(producer_url(sidecar, topic)) as prod:
                await produce(prod, [f"m{i}".encode() for i in range(60)])
            burst = await receive(cons, 10, timeout_s=30)
            await ack(cons, burst)
            assert await silent(cons, 1.0) == []  # unthrottled, all 60 come at once
            await set_policy(sidecar.http_url, topic, "dispatchRate", None)
            rest = await receive(cons, 50, timeout_s=30)
            assert len({m["messageId"] for m in burst + rest}) == 60

    run(scenario())


def test_max_unacked_on_consumer_blocks_and_releases_live(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        async with connect(consumer_url(sidecar, topic, "u", subscriptionType="Shared")) as cons:
            await set_policy(sidecar.http_url, topic, "maxUnackedMessagesOnConsumer", 3)
            await policy_enforced(sidecar, topic, "maxUnackedMessagesOnConsumer")
            async with connect(producer_url(sidecar, topic)) as prod:
                await produce(prod, [f"m{i}".encode() for i in range(10)])
            held = await receive(cons, 3)
            assert await silent(cons, 0.4) == []
            await set_policy(sidecar.http_url, topic, "maxUnackedMessagesOnConsumer", 0)
            rest = await receive(cons, 7)
            assert len(held) + len(rest) == 10

    run(scenario())


def test_producer_limits_max_producers_and_max_message_size(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        async with connect(producer_url(sidecar, topic)) as p1:
            async with connect(producer_url(sidecar, topic)) as p2:
                await set_policy(sidecar.http_url, topic, "maxProducers", 1)
                code, reason = await closed_with(p2)
                assert (code, reason) == (1008, "Topic reached max producers limit")
                status, text = await refused(producer_url(sidecar, topic))
                assert status == 409
                assert text == "Failed to create producer: Topic reached max producers limit"
            await set_policy(sidecar.http_url, topic, "maxMessageSize", 16)
            await policy_enforced(sidecar, topic, "maxMessageSize")
            assert len(await produce(p1, [b"x" * 16])) == 1
            await p1.send(send_frame(b"x" * 17, context="big"))
            reply = json.loads(await p1.recv())
            assert reply["result"] == "send-error:8" and reply["context"] == "big"
            assert "Exceed maximum message size" in reply["errorMsg"]

    run(scenario())


def test_max_subscriptions_per_topic_counts_durable_ones(
    sidecar: ThreadSidecar, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap, 1)

    async def scenario() -> None:
        await set_policy(sidecar.http_url, topic, "maxSubscriptionsPerTopic", 1)
        await policy_enforced(sidecar, topic, "maxSubscriptionsPerTopic")
        async with connect(consumer_url(sidecar, topic, "first")):
            pass
        status, text = await refused(consumer_url(sidecar, topic, "second"))
        assert status == 403
        assert text.endswith(f"Exceed the maximum number of subscriptions of the topic: {topic}")
        async with connect(consumer_url(sidecar, topic, "first")):
            pass

    run(scenario())
