"""A whole sidecar app (``build_app``) served in the test's event loop, for unit tests on
the in-memory twin."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from broker_shim._http import build_app
from broker_shim._sidecar import Sidecar
from tests.support.waits import eventually


@contextlib.asynccontextmanager
async def app_client(
    sidecar: Sidecar, *, freeze_heap: bool = False, healthy: bool = True
) -> AsyncIterator[TestClient[Any, Any]]:
    """A client of ``sidecar``'s whole app, once ``/health`` answers 200 (unless
    ``healthy`` is False); the app is closed on the way out."""
    client: TestClient[Any, Any] = TestClient(
        TestServer(build_app(sidecar, freeze_heap=freeze_heap))
    )
    await client.start_server()
    try:
        if healthy:

            async def ready() -> bool:
                return (await client.get("/health")).status == 200

            await eventually(ready, "the sidecar is healthy", 20)
        yield client
    finally:
        await client.close()
