"""Producer access modes on the binary protocol, on the in-memory twin: a
``WaitForExclusive`` producer is answered "not ready" (PRODUCER_SUCCESS with
``producer_ready`` false) while another producer holds the topic, and ready once that one
leaves, as Pulsar's ``ServerCnx`` and ``AbstractTopic.incrementTopicEpochIfNeeded``;
while it waits, Shared and Exclusive producers are refused; an ExclusiveWithFencing
producer fails it ("Fenced out"); closing it takes it out of the queue."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary._framing import encode_command
from tests.unit.broker_shim.binary.test_binary_schemas import Peer, serve_with_admin

_T = api.BaseCommand
TOPIC = "persistent://public/default/waiting"
MODES = api.ProducerAccessMode


def _send(peer: Peer, kind: int, field: str, **values: Any) -> None:
    cmd = _T(type=kind)  # type: ignore[arg-type]
    sub = getattr(cmd, field)
    sub.SetInParent()
    for key, value in values.items():
        setattr(sub, key, value)
    peer.writer.write(encode_command(cmd))


def _producer(peer: Peer, producer_id: int, name: str, mode: int) -> None:
    _send(
        peer, _T.PRODUCER, "producer", topic=TOPIC, producer_id=producer_id,
        request_id=producer_id, producer_name=name, producer_access_mode=mode,
    )  # fmt: skip


async def _answer(peer: Peer, request_id: int) -> api.BaseCommand:
    cmd = await peer.recv()
    got = cmd.producer_success.request_id if cmd.type == _T.PRODUCER_SUCCESS else None
    got = cmd.error.request_id if cmd.type == _T.ERROR else got
    got = cmd.success.request_id if cmd.type == _T.SUCCESS else got
    assert got == request_id, cmd
    return cmd


async def _nothing_more(peer: Peer) -> None:
    """No command arrives while the server has time to answer (a queued producer stays
    queued): a PING answered proves everything before it was handled."""
    _send(peer, _T.PING, "ping")
    cmd = await peer.recv()
    assert cmd.type == _T.PONG, cmd


def test_wait_for_exclusive_is_queued_then_takes_the_topic() -> None:
    async def scenario(peer: Peer, _client: TestClient[Any, Any]) -> None:
        _producer(peer, 1, "holder", MODES.Exclusive)
        assert (await _answer(peer, 1)).producer_success.producer_ready
        _producer(peer, 2, "waiter", MODES.WaitForExclusive)
        queued = await _answer(peer, 2)
        assert queued.type == _T.PRODUCER_SUCCESS and not queued.producer_success.producer_ready
        assert queued.producer_success.producer_name == "waiter"
        # while it waits, it counts as an exclusive producer for the others
        _producer(peer, 3, "shared", MODES.Shared)
        busy = await _answer(peer, 3)
        assert (busy.error.error, busy.error.message) == (
            api.ProducerBusy,
            "Topic has an existing exclusive producer: holder",
        )
        _producer(peer, 4, "exclusive", MODES.Exclusive)
        assert (await _answer(peer, 4)).error.error == api.ProducerFenced
        await _nothing_more(peer)
        # the holder leaves: the waiter is ready, under its first request id
        _send(peer, _T.CLOSE_PRODUCER, "close_producer", producer_id=1, request_id=5)
        answers = {(c.type, c.producer_success.request_id or c.success.request_id)
                   for c in [await peer.recv(), await peer.recv()]}  # fmt: skip
        assert answers == {(_T.SUCCESS, 5), (_T.PRODUCER_SUCCESS, 2)}
        # it holds the topic now
        _producer(peer, 6, "late", MODES.Exclusive)
        late = await _answer(peer, 6)
        assert late.error.message == "Topic has an existing exclusive producer: waiter"

    serve_with_admin(scenario)


def test_a_queued_producer_is_fenced_out_or_leaves_the_queue() -> None:
    async def scenario(peer: Peer, _client: TestClient[Any, Any]) -> None:
        _producer(peer, 1, "holder", MODES.Exclusive)
        await _answer(peer, 1)
        _producer(peer, 2, "w-1", MODES.WaitForExclusive)
        assert not (await _answer(peer, 2)).producer_success.producer_ready
        _producer(peer, 3, "w-2", MODES.WaitForExclusive)
        assert not (await _answer(peer, 3)).producer_success.producer_ready
        # w-1 gives up (its client closes it): w-2 is first, and is fenced out with the
        # holder by an ExclusiveWithFencing producer
        _send(peer, _T.CLOSE_PRODUCER, "close_producer", producer_id=2, request_id=4)
        assert (await _answer(peer, 4)).type == _T.SUCCESS
        await _nothing_more(peer)
        _producer(peer, 5, "fencer", MODES.ExclusiveWithFencing)
        got = [await peer.recv() for _ in range(3)]
        fenced = next(c for c in got if c.type == _T.ERROR)
        assert (fenced.error.request_id, fenced.error.error, fenced.error.message) == (
            3,
            api.ProducerFenced,
            "Fenced out",
        )
        assert any(c.type == _T.CLOSE_PRODUCER and c.close_producer.producer_id == 1 for c in got)
        ready = next(c for c in got if c.type == _T.PRODUCER_SUCCESS)
        assert ready.producer_success.request_id == 5 and ready.producer_success.producer_ready

    serve_with_admin(scenario)


def test_topic_epochs_fence_a_producer_that_comes_back_after_its_fencer() -> None:
    """Pulsar's topic epoch: every exclusive producer holds the topic under the next epoch
    (PRODUCER_SUCCESS.topic_epoch); one that reconnects presenting an older epoch is
    fenced, the holder's own epoch is taken back."""

    async def scenario(peer: Peer, _client: TestClient[Any, Any]) -> None:
        _producer(peer, 1, "ex-1", MODES.Exclusive)
        assert (await _answer(peer, 1)).producer_success.topic_epoch == 0
        _producer(peer, 2, "ex-2", MODES.ExclusiveWithFencing)
        got = [await peer.recv() for _ in range(2)]  # ex-1 closed, ex-2 answered
        fencer = next(c for c in got if c.type == _T.PRODUCER_SUCCESS)
        assert fencer.producer_success.topic_epoch == 1
        _send(peer, _T.CLOSE_PRODUCER, "close_producer", producer_id=2, request_id=3)
        assert (await _answer(peer, 3)).type == _T.SUCCESS
        # ex-1 comes back with the epoch it held: the topic has moved on
        _send(
            peer, _T.PRODUCER, "producer", topic=TOPIC, producer_id=4, request_id=4,
            producer_name="ex-1", producer_access_mode=MODES.Exclusive, topic_epoch=0,
        )  # fmt: skip
        stale = await _answer(peer, 4)
        assert (stale.error.error, stale.error.message) == (
            api.ProducerFenced,
            "Topic epoch has already moved. Current epoch: 1, Producer epoch: 0",
        )
        # the latest holder's epoch is taken back; a new exclusive producer gets the next
        _send(
            peer, _T.PRODUCER, "producer", topic=TOPIC, producer_id=5, request_id=5,
            producer_name="ex-2", producer_access_mode=MODES.Exclusive, topic_epoch=1,
        )  # fmt: skip
        assert (await _answer(peer, 5)).producer_success.topic_epoch == 1
        _send(peer, _T.CLOSE_PRODUCER, "close_producer", producer_id=5, request_id=6)
        await _answer(peer, 6)
        _producer(peer, 7, "ex-3", MODES.Exclusive)
        assert (await _answer(peer, 7)).producer_success.topic_epoch == 2

    serve_with_admin(scenario)
