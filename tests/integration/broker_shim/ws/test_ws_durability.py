"""Subscription positions live in Kafka: restarts, crashes and ownership moves lose no
unacknowledged message and redeliver no acknowledged one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import websockets
from aiohttp import web

from sync import PolicyService, TopicName
from sync.messaging import MessagingConfig, MessagingEngine, OwnerInfo
from sync.messaging._message_id import MessageId
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.kafka import make_topic
from tests.support.sidecars import ProcessSidecar, ThreadSidecar, ws_app
from tests.support.ws import ack, connect, path_of, produce, receive, run, silent

Msg = dict[str, Any]


def sub_url(ws_url: str, topic: TopicName, sub: str = "durable") -> str:
    return (
        f"{ws_url}/consumer/{path_of(topic)}/{sub}"
        "?subscriptionType=Shared&subscriptionInitialPosition=Earliest"
    )


def prod_url(ws_url: str, topic: TopicName) -> str:
    return f"{ws_url}/producer/{path_of(topic)}?messageRoutingMode=RoundRobinPartition"


def _holey(messages: list[Msg]) -> tuple[list[Msg], set[str]]:
    """Ack everything except offsets ≡ 1 (mod 3): holes above every committed offset."""
    acked, kept = [], set()
    for m in messages:
        if MessageId.from_base64(m["messageId"]).offset % 3 == 1:
            kept.add(m["messageId"])
        else:
            acked.append(m)
    return acked, kept


async def _first_life(ws_url: str, topic: TopicName, count: int) -> set[str]:
    async with connect(sub_url(ws_url, topic)) as cons:
        async with connect(prod_url(ws_url, topic)) as prod:
            await produce(prod, [f"m{i}".encode() for i in range(count)])
        got = await receive(cons, count)
        acked, kept = _holey(got)
        await ack(cons, acked)
        await asyncio.sleep(0.5)  # > the 100 ms commit interval
    return kept


async def _second_life(ws_url: str, topic: TopicName, expected: set[str]) -> None:
    async with connect(sub_url(ws_url, topic)) as cons:
        got = await receive(cons, len(expected))
        assert {m["messageId"] for m in got} == expected
        assert await silent(cons, 1.0) == []  # nothing acknowledged comes back
        async with connect(prod_url(ws_url, topic)) as prod:
            (new_id,) = await produce(prod, [b"after-restart"])
        (fresh,) = await receive(cons, 1)
        assert fresh["messageId"] == new_id


def test_acks_survive_a_clean_sidecar_restart(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = make_topic(kafka_bootstrap, 3)
    with ThreadSidecar(kafka_bootstrap, tmp_path / "a") as first:
        kept = run(_first_life(first.ws_url, topic, 30))
    assert len(kept) > 0
    with ThreadSidecar(kafka_bootstrap, tmp_path / "b") as second:
        run(_second_life(second.ws_url, topic, kept))


def test_acks_survive_a_sidecar_killed_with_sigkill(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = make_topic(kafka_bootstrap, 2)
    with ProcessSidecar(kafka_bootstrap, tmp_path / "a") as first:
        kept = run(_first_life(first.ws_url, topic, 20))

        async def connected_then_killed() -> None:
            # Killed while a consumer holds the subscription: no clean close, no final commit.
            async with connect(sub_url(first.ws_url, topic)) as cons:
                got = await receive(cons, len(kept))
                assert {m["messageId"] for m in got} == kept
                first.kill()
                with pytest.raises(websockets.ConnectionClosed):
                    await asyncio.wait_for(cons.recv(), 10)

        run(connected_then_killed())
    with ProcessSidecar(kafka_bootstrap, tmp_path / "b") as second:
        run(_second_life(second.ws_url, topic, kept))


class _Switch:
    """Ownership that can be moved to another sidecar during the test."""

    def __init__(self) -> None:
        self.owner: str | None = None

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        return OwnerInfo(local=self.owner is None, http_url=self.owner)


def test_ownership_move_unloads_and_clients_continue_at_the_new_owner(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, 2)
    transport = KafkaTransport(KafkaConfig(kafka_bootstrap))
    svc = PolicyService(transport).start(timeout_s=60)
    switch = _Switch()

    def app() -> web.Application:
        config = MessagingConfig(ownership_check_s=0.2)
        return ws_app(MessagingEngine(transport, lambda: svc, ownership=switch, config=config))

    try:
        with ThreadSidecar(kafka_bootstrap, tmp_path / "new") as new_owner:
            with ThreadSidecar(kafka_bootstrap, tmp_path / "old", app) as old_owner:

                async def scenario() -> None:
                    async with connect(sub_url(old_owner.ws_url, topic)) as cons:
                        async with connect(prod_url(old_owner.ws_url, topic)) as prod:
                            await produce(prod, [f"m{i}".encode() for i in range(12)])
                        got = await receive(cons, 12)
                        acked, kept = _holey(got)
                        await ack(cons, acked)
                        await asyncio.sleep(0.3)
                        switch.owner = new_owner.http_url
                        # Closed (1012) once the engine sees the move; the 10 s wait bounds
                        # it without asserting the machine's speed.
                        with pytest.raises(websockets.ConnectionClosed) as info:
                            while True:
                                await asyncio.wait_for(cons.recv(), 10)
                        assert info.value.rcvd is not None and info.value.rcvd.code == 1012
                    # The client reconnects to the old address and is redirected.
                    async with connect(sub_url(old_owner.ws_url, topic)) as cons:
                        again = await receive(cons, len(kept))
                        assert {m["messageId"] for m in again} == kept
                        assert await silent(cons, 0.5) == []

                run(scenario())
    finally:
        svc.close()
