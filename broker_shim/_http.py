"""The sidecar's HTTP API (aiohttp): health, metrics, Pulsar topic-policy REST, digests."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sync import CacheState, CacheStateError, NotFoundError, PolicyService, PolicyTarget
from sync.cluster import ClusterService, MemberState, ServiceState, ViewState
from sync.constants import SIDECAR_DIGEST_PATH, SIDECAR_ENTRIES_PATH, SIDECAR_WRITE_PATH
from sync.messaging import TopicOwnership

from ._admin_http import POLICY_SOURCE_KEY
from ._autocreate import topic_creator
from ._binary_app import add_binary_listener
from ._compaction_http import add_compaction_routes
from ._forward import FORWARDED_HEADER, WriteForwarder, receive_write
from ._http_shell import http_app
from ._lookup_http import CLUSTER_KEY, LookupOwnership, add_lookup_routes
from ._metrics import LookupMetrics
from ._process_tuning import freeze_startup_heap, raise_gc_young_threshold
from ._sidecar import Sidecar
from ._topic_policy_http import PolicyRoutes
from ._ws import add_ws_routes

logger = logging.getLogger(__name__)

__all__ = ["build_app"]

SIDECAR_KEY = web.AppKey("sidecar", Sidecar)
FORWARDER_KEY = web.AppKey("forwarder", WriteForwarder)
SUPERVISOR_KEY = web.AppKey("supervisor", asyncio.Task[None])
FREEZE_KEY = web.AppKey("freeze-heap", asyncio.Task[None])


def _ready_service(request: web.Request) -> PolicyService:
    svc = request.app[SIDECAR_KEY].service
    if svc is None or svc.cache.state is not CacheState.READY:
        state = "STARTING" if svc is None else svc.cache.state.value
        raise CacheStateError(f"policy cache is {state}, not READY")
    return svc


async def health(request: web.Request) -> web.Response:
    sidecar = request.app[SIDECAR_KEY]
    svc = sidecar.service
    state = "STARTING" if svc is None else svc.cache.state.value
    body: dict[str, Any] = {"state": state, "brokerId": sidecar.config.broker_id}
    ready = state == "READY"
    if CLUSTER_KEY in request.app:
        # With lookups on, the sidecar is ready only when it can also answer who owns what.
        # Read the *current* service: the supervisor replaces a failed one (issue 11: the
        # first instance, closed by the supervisor, kept /health at 503 for good).
        cluster = request.app[CLUSTER_KEY].service
        lookup = cluster.state.value
        body["lookup"] = lookup
        member = cluster.member.state
        body["ownership"] = member.value
        view = cluster.view
        body["view"] = view.value
        ready = ready and lookup == "READY" and member is MemberState.ACTIVE
        ready = ready and view is ViewState.FRESH
    if sidecar.last_failure:
        body["lastFailure"] = sidecar.last_failure
    body["writer"] = _writer_status(request.app, svc)
    return web.json_response(body, status=200 if ready else 503)


def _writer_status(app: web.Application, svc: PolicyService | None) -> dict[str, Any]:
    """Who holds the policy writer's fence, and how this sidecar's writes went."""
    forwarder = app[FORWARDER_KEY]
    holder = forwarder.holder
    status: dict[str, Any] = {
        "forwarded": forwarder.forwarded,
        "writtenHere": forwarder.written_here,
        "fallbacks": forwarder.fallbacks,
        "electionWaits": forwarder.election_waits,
    }
    if holder is not None:
        status["holding"] = holder.holding
        status["holder"] = holder.holder()
        status["election"] = holder.state.value
    if svc is not None:
        fence = svc.writer.fence
        status["fenceEpochs"] = fence.epochs
        status["fencedRetries"] = fence.fenced_retries
        status["transactions"] = fence.transactions
        status["batchedWrites"] = fence.batched_writes
    return status


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[SIDECAR_KEY].metrics.registry
    payload = await asyncio.to_thread(generate_latest, registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def digest(request: web.Request) -> web.Response:
    svc = _ready_service(request)
    value = await asyncio.to_thread(svc.cache.digest)
    return web.json_response(
        {
            "digest": value,
            "size": len(svc.cache),
            "positions": {str(p): o for p, o in svc.cache.positions().items()},
        }
    )


async def entries(request: web.Request) -> web.Response:
    """Every key with the sha256 of its value as written to Kafka (for reconciliation)."""
    svc = _ready_service(request)

    def collect() -> dict[str, str]:
        return {
            k.decode("utf-8", "replace"): hashlib.sha256(v).hexdigest()
            for k, v in svc.cache.raw_items()
        }

    return web.json_response({"entries": await asyncio.to_thread(collect)})


def _cluster_of(request: web.Request) -> ClusterService | None:
    return request.app[CLUSTER_KEY].service if CLUSTER_KEY in request.app else None


async def _write_policy(
    request: web.Request, svc: PolicyService, target: PolicyTarget, patch: dict[str, Any]
) -> None:
    """A checked policy write, through the fence holder (forwarded when it is elsewhere)."""
    await request.app[FORWARDER_KEY].set(svc, target, patch)


async def forwarded_write(request: web.Request) -> web.Response:
    """A policy write another sidecar forwarded to this one (the fence holder)."""
    if request.headers.get(FORWARDED_HEADER) != "1":
        raise NotFoundError(f"{SIDECAR_WRITE_PATH} only takes writes forwarded by sidecars")
    return await receive_write(request, _ready_service(request), request.app[FORWARDER_KEY])


def _ready(app: web.Application) -> bool:
    svc = app[SIDECAR_KEY].service
    if svc is None or svc.cache.state is not CacheState.READY:
        return False
    if CLUSTER_KEY not in app:
        return True
    cluster = app[CLUSTER_KEY].service
    return cluster.state is ServiceState.READY and cluster.member.state is MemberState.ACTIVE


async def _freeze_heap_when_ready(app: web.Application) -> None:
    """Once the sidecar is ready, move what start-up allocated out of the garbage
    collector's reach (:func:`~broker_shim._process_tuning.freeze_startup_heap`)."""
    while not _ready(app):
        await asyncio.sleep(0.2)
    freeze_startup_heap()


def build_app(
    sidecar: Sidecar,
    *,
    freeze_heap: bool = True,
    ownership: TopicOwnership | None = None,
    broker_socket: socket.socket | None = None,
) -> web.Application:
    """The aiohttp application of one sidecar (the service is started on startup).

    ``freeze_heap``: ``gc.freeze()`` once the sidecar is ready (see
    :func:`_freeze_heap_when_ready`); pass False when the app shares its process.
    ``ownership``: who serves a topic (default: the cluster's bundle ownership, or every
    topic here without a cluster).
    ``broker_socket``: an already bound socket for the binary protocol (else
    ``sidecar.config.broker_port`` is bound on start, if set).
    """
    app = http_app()
    app[SIDECAR_KEY] = sidecar
    app[FORWARDER_KEY] = WriteForwarder(sidecar.holder)
    app[POLICY_SOURCE_KEY] = lambda: sidecar.service
    if sidecar.cluster is not None:
        # First: its GET …/partitions must win over the generic …/{policy} route (issue 4).
        add_lookup_routes(app, sidecar.cluster, metrics=LookupMetrics(sidecar.metrics.registry))
    # Before the generic …/{policy} routes: …/compaction is an action, not a policy.
    add_compaction_routes(app)
    policy = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/{policy}"
    ns_policy = "/admin/v2/namespaces/{tenant}/{namespace}/{policy}"
    policies = PolicyRoutes(_ready_service, _cluster_of, _write_policy, sidecar.catalog)
    app.add_routes(
        [
            web.get("/health", health),
            web.get("/metrics", metrics),
            web.get(SIDECAR_DIGEST_PATH, digest),
            web.get(SIDECAR_ENTRIES_PATH, entries),
            web.post(SIDECAR_WRITE_PATH, forwarded_write),
            web.get(ns_policy, policies.ns_get),
            web.post(ns_policy, policies.ns_set),
            web.delete(ns_policy, policies.ns_delete),
            web.get(policy, policies.get),
            web.post(policy, policies.set),
            web.delete(policy, policies.delete),
        ]
    )

    async def on_startup(app: web.Application) -> None:
        raise_gc_young_threshold()  # before the messaging engine starts (see _process_tuning)
        await asyncio.to_thread(sidecar.start_service)
        if sidecar.holder is not None:
            await asyncio.to_thread(sidecar.holder.start)
        app[SUPERVISOR_KEY] = asyncio.create_task(sidecar.supervise())
        if freeze_heap:
            app[FREEZE_KEY] = asyncio.create_task(_freeze_heap_when_ready(app))

    async def on_cleanup(app: web.Application) -> None:
        app[SUPERVISOR_KEY].cancel()
        if FREEZE_KEY in app:
            app[FREEZE_KEY].cancel()
        await app[FORWARDER_KEY].close()
        await asyncio.to_thread(sidecar.close)

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    # Pulsar WebSocket producers/consumers (issue 5): with the cluster enabled, a topic is
    # served by the owner of its bundle; other sidecars answer 307 to the owner.
    if ownership is None and sidecar.cluster is not None:
        ownership = LookupOwnership(app[CLUSTER_KEY])
    engine = add_ws_routes(
        app, sidecar, ownership=ownership, create_topic=topic_creator(app, sidecar)
    )
    if sidecar.config.broker_port is not None or broker_socket is not None:
        add_binary_listener(app, sidecar, engine, sock=broker_socket)
    return app
