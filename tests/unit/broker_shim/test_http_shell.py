"""The HTTP shell's shared readers and its one error path (no Kafka, no sidecar)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker_shim._http_errors import handshake_refusal, http_status, reason_response
from broker_shim._http_shell import http_app, query_flag
from sync.errors import (
    BadRequestError,
    CacheStateError,
    ConsumerBusyError,
    InvalidInputError,
    InvalidPolicyError,
    MessagingError,
    NotAllowedError,
    NotFoundError,
    PolicySyncError,
    TransportError,
    UnavailableError,
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, False),
        ({"f": ""}, False),  # blank: as absent
        ({"f": "true"}, True),
        ({"f": "TRUE"}, True),
        ({"f": "False"}, False),
    ],
)
def test_admin_flags_read_true_or_false(query: dict[str, str], expected: bool) -> None:
    assert query_flag(query, "f") is expected


@pytest.mark.parametrize("value", ["maybe", "1", "yes", " true"])
def test_admin_flags_refuse_anything_else_with_412(value: str) -> None:
    with pytest.raises(InvalidInputError, match="must be true or false") as refused:
        query_flag({"f": value}, "f")
    assert http_status(refused.value) == 412


def test_an_absent_flag_is_its_default() -> None:
    assert query_flag({}, "f", True) is True
    assert query_flag({"f": ""}, "f", True) is True
    assert query_flag({}, "f", True, lenient=True) is True


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("True", True), (" true ", True), ("", False), ("yes", False), ("1", False)],
)
def test_websocket_flags_follow_javas_parse_boolean(value: str, expected: bool) -> None:
    assert query_flag({"f": value}, "f", True, lenient=True) is expected


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (InvalidInputError("bad"), 400, "Invalid query params: bad"),
        (NotFoundError("gone"), 404, "Failed to subscribe: gone"),
        (ConsumerBusyError("busy"), 409, "Failed to subscribe: busy"),
        (NotAllowedError("no"), 403, "Failed to subscribe: no"),
        (MessagingError("other"), 409, "Failed to subscribe: other"),
        (CacheStateError("later"), 503, "Failed to subscribe: later"),
        (UnavailableError("later"), 503, "Failed to subscribe: later"),
        (TransportError("kafka"), 503, "Failed to subscribe: kafka"),
        (PolicySyncError("?"), 500, "Failed to subscribe: ?"),
    ],
)
def test_websocket_handshakes_are_refused_as_pulsars_proxy_does(
    error: PolicySyncError, status: int, reason: str
) -> None:
    refused = handshake_refusal(error, "Failed to subscribe")
    assert refused.status == status
    assert refused.text is not None and reason in refused.text
    assert ("Retry-After" in refused.headers) is (status == 503)


def test_every_503_carries_retry_after() -> None:
    assert reason_response(503, "later").headers["Retry-After"] == "1"
    assert "Retry-After" not in reason_response(404, "gone").headers


def test_one_middleware_answers_every_library_error() -> None:
    async def raises(request: web.Request) -> web.StreamResponse:
        raise {
            "bad": BadRequestError("bad body"),
            "policy": InvalidPolicyError("bad value"),
            "missing": NotFoundError("no such thing"),
            "later": CacheStateError("not READY"),
        }[request.match_info["kind"]]

    async def bare_503(_request: web.Request) -> web.StreamResponse:
        return web.json_response({"state": "STARTING"}, status=503)

    async def main() -> None:
        app = http_app()
        app.router.add_get("/raise/{kind}", raises)
        app.router.add_get("/bare", bare_503)
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        try:
            for kind, status, reason in (
                ("bad", 400, "bad body"),
                ("policy", 412, "bad value"),
                ("missing", 404, "no such thing"),
                ("later", 503, "not READY"),
            ):
                resp = await client.get(f"/raise/{kind}")
                assert resp.status == status
                assert await resp.json() == {"reason": reason}
                assert ("Retry-After" in resp.headers) is (status == 503)
            resp = await client.get("/bare")
            assert resp.status == 503 and resp.headers["Retry-After"] == "1"
        finally:
            await client.close()

    asyncio.run(main())
