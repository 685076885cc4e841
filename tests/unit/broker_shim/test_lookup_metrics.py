"""Lookup and bundle-ownership metrics on the sidecar's ``GET /metrics`` (in-memory twin),
and the start-up heap frozen out of the garbage collector once the sidecar is ready.

The whole sidecar app (``build_app``) is served, so the test also proves that the lookup
metrics land in the same registry as the cache's.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from broker_shim._http import FREEZE_KEY
from broker_shim._metrics import LOOKUP_RESULTS, LookupMetrics
from broker_shim._process_tuning import GC_YOUNG_THRESHOLD
from broker_shim._sidecar import Sidecar
from sync._errors import (
    AuthenticationError,
    AuthorizationError,
    BundleUnloadingError,
    ConflictError,
    InvalidTopicNameError,
    NotFoundError,
    TooManyRequestsError,
    UnavailableError,
)
from sync.cluster import LookupConfig
from sync.naming._names import TopicName
from tests.support.apps import app_client
from tests.support.sidecars import memory_sidecar
from tests.support.waits import eventually

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _sidecar(lookup: LookupConfig) -> Sidecar:
    return memory_sidecar(lookup, "m")


async def _scrape(client: TestClient[Any, Any]) -> Samples:
    resp = await client.get("/metrics")
    assert resp.status == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(await resp.text()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def _requests(samples: Samples, result: str) -> float:
    return samples[("policy_sync_lookup_requests_total", (("result", result),))]


def _serve(
    lookup: LookupConfig,
    scenario: Callable[[TestClient[Any, Any], Sidecar], Awaitable[None]],
    *,
    freeze_heap: bool = False,
) -> None:
    sidecar = _sidecar(lookup)

    async def main() -> None:
        async with app_client(sidecar, freeze_heap=freeze_heap) as client:
            await scenario(client, sidecar)

    asyncio.run(main())


def test_lookups_are_counted_by_result_and_timed() -> None:
    async def scenario(client: TestClient[Any, Any], sidecar: Sidecar) -> None:
        before = await _scrape(client)
        for result in LOOKUP_RESULTS:  # every result is exported from the start
            assert _requests(before, result) == 0
        assert before[("policy_sync_bundles_owned", ())] == 0
        assert before[("policy_sync_lookup_pending", ())] == 0
        assert before[("policy_sync_lookup_pending_limit", ())] == 50_000
        assert before[("policy_sync_ownership_slots", ())] == 8

        for _ in range(3):  # the first claims the bundle, the others find it owned
            resp = await client.get("/lookup/v2/topic/persistent/public/default/m-1")
            assert resp.status == 200, await resp.text()
        assert (await client.get("/lookup/v2/topic/bogus/public/default/t")).status == 412
        assert (await client.get("/lookup/v2/topic/persistent/nope/ns/t")).status == 404
        # Not a lookup: other routes are not counted.
        assert (await client.get("/admin/v2/namespaces/public/default/bundles")).status == 200

        after = await _scrape(client)
        assert _requests(after, "ok") == 3
        assert _requests(after, "invalid") == 1
        assert _requests(after, "not_found") == 1
        assert _requests(after, "unavailable") == 0
        assert after[("policy_sync_lookup_latency_seconds_count", ())] == 5
        assert after[("policy_sync_lookup_latency_seconds_sum", ())] > 0
        # Buckets are cumulative and end at the count.
        assert after[("policy_sync_lookup_latency_seconds_bucket", (("le", "+Inf"),))] == 5
        assert after[("policy_sync_lookup_acquisitions_total", ())] == 1
        assert after[("policy_sync_bundles_owned", ())] == 1
        assert after[("policy_sync_cluster_bundles_owned", (("broker", "b0"),))] == 1
        assert after[("policy_sync_bundle_claims_total", ())] == 1
        changes = after[("policy_sync_ownership_changes_total", ())]
        assert changes >= 1
        # The cache's metrics are still in the same registry.
        assert after[("policy_sync_cache_state", (("state", "READY"),))] == 1

        # Unloading moves the bundle out: fewer owned, more ownership changes.
        resp = await client.put("/admin/v2/namespaces/public/default/unload")
        assert resp.status == 204, await resp.text()

        async def released() -> bool:
            return (await _scrape(client))[("policy_sync_bundles_owned", ())] == 0

        await eventually(released, "the unloaded bundle is no longer owned", 10)
        later = await _scrape(client)
        assert later[("policy_sync_ownership_changes_total", ())] > changes

    _serve(LookupConfig(), scenario)


def test_pending_lookups_and_refusals_are_visible() -> None:
    async def scenario(client: TestClient[Any, Any], sidecar: Sidecar) -> None:
        service: Any = sidecar.cluster_service()
        # Nobody acts on claim requests any more: lookups of unowned bundles have to wait.
        service.member._stop.set()
        await asyncio.to_thread(service.member._thread.join, 5)
        names = ["my-topic", "t-3", "t-0"]  # three different bundles
        assert len({service.lookups.bundle_of(TopicName.parse(n)) for n in names}) == 3
        paths = [f"/lookup/v2/topic/persistent/public/default/{n}" for n in names]
        waiting = [asyncio.ensure_future(client.get(p)) for p in paths[:2]]
        await eventually(lambda: service.lookups.pending >= 2, "both lookups wait", 5)
        during = await _scrape(client)
        assert during[("policy_sync_lookup_pending", ())] == 2
        assert during[("policy_sync_lookup_pending_limit", ())] == 2
        assert (await client.get(paths[2])).status == 429
        for fut in waiting:
            assert (await fut).status == 503
        after = await _scrape(client)
        assert after[("policy_sync_lookup_pending", ())] == 0
        assert _requests(after, "too_many_pending") == 1
        assert _requests(after, "unavailable") == 2
        assert _requests(after, "ok") == 0
        # The two that waited took about the lookup timeout: they land in the 1-2.5 s bucket.
        slow = after[("policy_sync_lookup_latency_seconds_bucket", (("le", "2.5"),))]
        fast = after[("policy_sync_lookup_latency_seconds_bucket", (("le", "0.5"),))]
        assert (slow, fast) == (3, 1)

    _serve(LookupConfig(max_pending_lookups=2, lookup_timeout_s=1.0), scenario)


@pytest.mark.parametrize(
    ("error", "result"),
    [
        (None, "ok"),
        (AuthenticationError("x"), "unauthenticated"),
        (AuthorizationError("x"), "forbidden"),
        (TooManyRequestsError("x"), "too_many_pending"),
        (BundleUnloadingError("x"), "unloading"),
        (UnavailableError("x"), "unavailable"),
        (NotFoundError("x"), "not_found"),
        (InvalidTopicNameError("x"), "invalid"),
        (ConflictError("x"), "error"),
        (RuntimeError("x"), "error"),
    ],
)
def test_result_labels_follow_the_exception_tree(error: Exception | None, result: str) -> None:
    assert LookupMetrics.result_of(error) == result
    assert result in LOOKUP_RESULTS


def test_the_start_up_heap_is_frozen_once_the_sidecar_is_ready() -> None:
    async def scenario(client: TestClient[Any, Any], sidecar: Sidecar) -> None:
        await asyncio.wait_for(client.app[FREEZE_KEY], 10)
        # Modules, Kafka clients and tables: tens of thousands of objects no full
        # collection has to walk again.
        assert gc.get_freeze_count() > 10_000

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        _serve(LookupConfig(), scenario, freeze_heap=True)
    finally:
        gc.unfreeze()  # this process is the test runner, not a sidecar


def test_the_sidecar_raises_the_young_gc_threshold_while_it_serves() -> None:
    before = gc.get_threshold()

    async def raised(*_: Any) -> None:
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD

    async def never_lowered(*_: Any) -> None:
        assert gc.get_threshold()[0] == 50_000

    try:
        gc.set_threshold(700, *before[1:])
        _serve(LookupConfig(), raised)
        gc.set_threshold(50_000, *before[1:])
        _serve(LookupConfig(), never_lowered)
    finally:
        gc.set_threshold(*before)  # this process is the test runner, not a sidecar
