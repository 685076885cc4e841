"""Forwarded policy writes: the holder's answer keeps its status, and a write waits (within
a bound) for an election instead of taking the fence from whoever is elected next (on a
machine busy enough that elections take seconds, sidecars that wrote themselves fenced
each other until their writes gave up with a 500)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from broker_shim import _forward
from broker_shim._forward import WriteForwarder
from broker_shim._http_errors import http_status
from sync import (
    ConflictError,
    HolderConfig,
    HolderState,
    PolicySyncError,
    PolicyTarget,
    UnavailableError,
)
from sync.constants import SIDECAR_WRITE_PATH
from sync.errors import KafkaUnavailableError, WriteConflictError
from sync.transport import MemoryTransport

TARGET = PolicyTarget.from_key("persistent://public/default/t")


class _Holder:
    """A FenceHolder as the forwarder sees it: who holds the fence, if anyone."""

    def __init__(self, known: str | None, state: HolderState = HolderState.RUNNING) -> None:
        self.known = known
        self.holding = False
        self.state = state
        self.config = HolderConfig("__change_events", "http://127.0.0.1:1")

    def holder(self) -> str | None:
        return self.known

    def forget(self) -> None:
        pass


class _Service:
    """Records writes made here (the forwarder calls ``set`` on a write thread)."""

    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []
        self.cache = self  # read-your-writes: every position counts as applied

    def reached(self, positions: dict[int, int]) -> bool:
        return True

    def set(self, target: PolicyTarget, fields: dict[str, Any]) -> None:
        self.written.append(fields)


async def _holder_answering(outcome: dict[str, Any]) -> TestServer:
    async def receive(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"results": [outcome for _ in body["writes"]]})

    app = web.Application()
    app.router.add_post(SIDECAR_WRITE_PATH, receive)
    server = TestServer(app)
    await server.start_server()
    return server


def _run(outcome: dict[str, Any]) -> tuple[BaseException | None, WriteForwarder, _Service]:
    async def main() -> tuple[BaseException | None, WriteForwarder, _Service]:
        server = await _holder_answering(outcome)
        address = str(server.make_url("")).rstrip("/")
        forwarder = WriteForwarder(_Holder(address))  # type: ignore[arg-type]
        svc = _Service()
        error: BaseException | None = None
        try:
            await forwarder.set(svc, TARGET, {"maxConsumerPerTopic": 1})  # type: ignore[arg-type]
        except PolicySyncError as exc:
            error = exc
        finally:
            await forwarder.close()
            await server.close()
        return error, forwarder, svc

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("status", "kind"), [(503, UnavailableError), (409, ConflictError), (429, UnavailableError)]
)
def test_the_holders_unavailability_or_conflict_keeps_its_status(
    status: int, kind: type[PolicySyncError]
) -> None:
    error, forwarder, svc = _run({"status": status, "reason": "policy write gave up"})
    assert isinstance(error, kind) and http_status(error) == status
    assert svc.written == [] and forwarder.written_here == 0  # not written here: no fencing


def test_a_holder_that_failed_unexpectedly_is_written_around() -> None:
    error, forwarder, svc = _run({"status": 500, "reason": "a bug"})
    assert error is None and svc.written == [{"maxConsumerPerTopic": 1}]
    assert forwarder.fallbacks == 1


def test_writes_that_gave_up_to_fencing_or_kafka_are_503() -> None:
    assert http_status(WriteConflictError("other writers kept fencing this one")) == 503
    assert http_status(KafkaUnavailableError("is Kafka reachable?")) == 503


def test_a_write_waits_for_the_election_then_forwards(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> tuple[WriteForwarder, _Service]:
        server = await _holder_answering({"positions": {}})
        holder = _Holder(None)
        forwarder = WriteForwarder(holder)  # type: ignore[arg-type]
        svc = _Service()

        async def elect() -> None:
            await asyncio.sleep(0.2)
            holder.known = str(server.make_url("")).rstrip("/")

        try:
            await asyncio.gather(
                elect(),
                forwarder.set(svc, TARGET, {"maxConsumerPerTopic": 1}),  # type: ignore[arg-type]
            )
        finally:
            await forwarder.close()
            await server.close()
        return forwarder, svc

    forwarder, svc = asyncio.run(main())
    assert forwarder.election_waits == 1 and forwarder.forwarded == 1
    assert svc.written == [] and forwarder.written_here == 0


def _write_with_no_holder_known(holder: _Holder) -> tuple[WriteForwarder, _Service]:
    async def main() -> tuple[WriteForwarder, _Service]:
        forwarder = WriteForwarder(holder)  # type: ignore[arg-type]
        svc = _Service()
        try:
            await forwarder.set(svc, TARGET, {"maxConsumerPerTopic": 1})  # type: ignore[arg-type]
        finally:
            await forwarder.close()
        return forwarder, svc

    return asyncio.run(main())


def test_with_no_holder_elected_in_time_the_write_is_made_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_forward, "ELECTION_WAIT_S", 0.1)

    forwarder, svc = _write_with_no_holder_known(_Holder(None))
    assert forwarder.election_waits == 1 and forwarder.written_here == 1
    assert svc.written == [{"maxConsumerPerTopic": 1}]


def test_a_describe_that_fails_keeps_the_holder_known_before() -> None:
    from sync import FenceHolder

    holder = FenceHolder(MemoryTransport(), HolderConfig("__change_events", "http://a:1"))

    class _Failing:
        def describe_group(self, group_id: str, timeout_s: float) -> Any:
            raise KafkaUnavailableError("describe_groups timed out")

    holder._admin = _Failing()  # type: ignore[assignment]  # noqa: SLF001
    holder._known = (1.0, "http://b:2")  # noqa: SLF001
    assert holder._describe() == "http://b:2"  # noqa: SLF001


@pytest.mark.parametrize("state", [HolderState.FAILED, HolderState.NEW, HolderState.CLOSED])
def test_with_no_election_running_a_write_does_not_wait(state: HolderState) -> None:
    """A failed (or not started) election elects nobody: waiting would only delay every
    write by ELECTION_WAIT_S."""

    forwarder, svc = _write_with_no_holder_known(_Holder(None, state))
    assert forwarder.election_waits == 0 and forwarder.written_here == 1
