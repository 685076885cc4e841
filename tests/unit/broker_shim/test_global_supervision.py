"""A geo sidecar whose global-table reader fails, on the in-memory twin: the supervisor
replaces the policy service (as it does when the policy cache fails), so the merged table
reads every topic again and the global digest comes back equal to a fresh merge.

Before, a reader of the own global topic or of a mirror that FAILED stayed failed: the
supervisor only watched the policy cache, /health said 200, and ``global.digest`` answered
503 for good (one way a sidecar never converges after a fault, docs/geo-design.md §5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from sync.constants import (
    GLOBAL_EVENTS_TOPIC,
    SIDECAR_DIGEST_PATH,
)
from sync.geo import GlobalPolicies, mirror_topic
from sync.transport import MemoryTransport, Message
from tests.support.waits import eventually
from tests.unit.broker_shim.test_global_digest import (
    _expected,
    _geo_sidecar,
    _mirror_a_newer_copy,
    _write_one_global_policy,
)
from tests.unit.broker_shim.test_sidecar_faults import _serve

FAULT = "injected global reader fault"


def _break(batch: Sequence[Message]) -> None:
    """What a reader meets when something it did not expect goes wrong in a batch."""
    raise RuntimeError(FAULT)


def test_a_failed_global_reader_is_replaced_and_the_digest_comes_back() -> None:
    transport = MemoryTransport()
    sidecar, cluster = _geo_sidecar(transport)

    async def scenario(client: TestClient[Any, Any], _app: web.Application) -> None:
        await _write_one_global_policy(client, cluster)

        first = sidecar.service
        assert first is not None
        geo = first.global_policies
        assert isinstance(geo, GlobalPolicies)
        (mirror,) = [r for r in geo.table.readers if r.spec.name == mirror_topic("west")]
        mirror._apply_replay = _break  # type: ignore[method-assign]

        # West's newer write of the key arrives in its mirror; the mirror's reader fails on it.
        _mirror_a_newer_copy(transport)

        seen: list[Any] = []

        async def converged() -> bool:
            resp = await client.get(SIDECAR_DIGEST_PATH)
            seen[:] = [resp.status, await resp.text()]
            if resp.status != 200:
                return False
            return bool((await resp.json())["global"]["digest"] == _expected(transport, cluster)[0])

        await eventually(converged, lambda: f"the global digest converges: {seen}", timeout_s=30)
        assert sidecar.service is not first
        assert sidecar.restarts == 1
        assert FAULT in (sidecar.last_failure or "")
        health = await client.get("/health")
        body = await health.json()
        assert health.status == 200, body
        assert body["global"] == {GLOBAL_EVENTS_TOPIC: "READY", mirror_topic("west"): "READY"}

    _serve(scenario, sidecar)
