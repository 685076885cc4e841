"""The sidecar's own HTTP routes: /health, /metrics, the policy table's digest and entries
and a geo sidecar's global table (for reconciliation), and the fence holder's endpoint for
forwarded policy writes."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sync import CacheState, CacheStateError, NotFoundError, PolicyService
from sync.cluster import MemberState, ViewState
from sync.constants import (
    SIDECAR_DIGEST_PATH,
    SIDECAR_ENTRIES_PATH,
    SIDECAR_GLOBAL_ENTRIES_PATH,
    SIDECAR_WRITE_PATH,
)
from sync.geo import GlobalPolicies

from ._forward import FORWARDED_HEADER, WriteForwarder, receive_write
from ._sidecar import Sidecar

__all__ = ["SidecarRoutes"]


class SidecarRoutes:
    """The routes of one sidecar, writing through ``forwarder``."""

    def __init__(self, sidecar: Sidecar, forwarder: WriteForwarder) -> None:
        self.sidecar = sidecar
        self.forwarder = forwarder

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/health", self.health),
            web.get("/metrics", self.metrics),
            web.get(SIDECAR_DIGEST_PATH, self.digest),
            web.get(SIDECAR_ENTRIES_PATH, self.entries),
            web.get(SIDECAR_GLOBAL_ENTRIES_PATH, self.global_entries),
            web.post(SIDECAR_WRITE_PATH, self.forwarded_write),
        ]

    def ready_service(self) -> PolicyService:
        """The policy service, once its cache is READY.

        Raises:
            CacheStateError: still starting, replaying, or replaced after a failure (503).
        """
        svc = self.sidecar.service
        if svc is None or svc.cache.state is not CacheState.READY:
            state = "STARTING" if svc is None else svc.cache.state.value
            raise CacheStateError(f"policy cache is {state}, not READY")
        return svc

    async def health(self, request: web.Request) -> web.Response:
        sidecar = self.sidecar
        svc = sidecar.service
        state = "STARTING" if svc is None else svc.cache.state.value
        body: dict[str, Any] = {"state": state, "brokerId": sidecar.config.broker_id}
        ready = state == "READY"
        geo = None if svc is None else svc.global_policies
        if isinstance(geo, GlobalPolicies):
            # Geo-replicated: the merged global table is read by its own readers (own topic
            # and mirrors); one not READY (replaying, or FAILED until the supervisor replaces
            # the service) means global reads and the global digest answer 503.
            body["global"] = {t: s.value for t, s in geo.table.states().items()}
            ready = ready and geo.ready()
        cluster = sidecar.cluster_service()
        if cluster is not None:
            # With lookups on, the sidecar is ready only when it can also answer who owns
            # what. Read the *current* service: the supervisor replaces a failed one (issue
            # 11: the first instance, closed by the supervisor, kept /health at 503 for good).
            lookup = cluster.state.value
            body["lookup"] = lookup
            member = cluster.member.state
            body["ownership"] = member.value
            view = cluster.view
            body["view"] = view.value
            ready = ready and lookup == "READY" and member is MemberState.ACTIVE
            ready = ready and view is ViewState.FRESH
        # Kafka unreachable (a consumer just stops receiving, so the cache stays READY), or
        # back but the cache not caught up yet: not ready either.
        kafka_ok, kafka = sidecar.kafka.report()
        body.update(kafka)
        ready = ready and kafka_ok
        if sidecar.last_failure:
            body["lastFailure"] = sidecar.last_failure
        body["writer"] = self._writer_status(svc)
        return web.json_response(body, status=200 if ready else 503)

    def _writer_status(self, svc: PolicyService | None) -> dict[str, Any]:
        """Who holds the policy writer's fence, and how this sidecar's writes went."""
        forwarder = self.forwarder
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
            status["terms"] = holder.terms
        if svc is not None:
            fence = svc.writer.fence
            status["fenceEpochs"] = fence.epochs
            status["fencedRetries"] = fence.fenced_retries
            status["transactions"] = fence.transactions
            status["batchedWrites"] = fence.batched_writes
        return status

    async def metrics(self, request: web.Request) -> web.Response:
        payload = await asyncio.to_thread(generate_latest, self.sidecar.metrics.registry)
        return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def digest(self, request: web.Request) -> web.Response:
        """The policy table's digest; with geo-replication also ``global``: the merged
        global table's (equal on every sidecar of every cluster that read the same
        records), its key count and its position in each topic it reads."""
        svc = self.ready_service()
        value = await asyncio.to_thread(svc.cache.digest)
        body: dict[str, Any] = {
            "digest": value,
            "size": len(svc.cache),
            "positions": {str(p): o for p, o in svc.cache.positions().items()},
        }
        geo = svc.global_policies
        if isinstance(geo, GlobalPolicies):
            body["global"] = await asyncio.to_thread(geo.summary)
        return web.json_response(body)

    async def entries(self, request: web.Request) -> web.Response:
        """Every key with the sha256 of its value as written to Kafka (for reconciliation)."""
        svc = self.ready_service()

        def collect() -> dict[str, str]:
            return {
                k.decode("utf-8", "replace"): hashlib.sha256(v).hexdigest()
                for k, v in svc.cache.raw_items()
            }

        return web.json_response({"entries": await asyncio.to_thread(collect)})

    async def global_entries(self, request: web.Request) -> web.Response:
        """A geo sidecar's merged global table: every key's winning stamp and whether it
        is a delete (for reconciliation across clusters); 404 on a sidecar without one."""
        svc = self.ready_service()
        geo = svc.global_policies
        if not isinstance(geo, GlobalPolicies):
            raise NotFoundError("this sidecar has no global table (it runs without --geo-peers)")

        def collect() -> dict[str, dict[str, Any]]:
            return {
                key: {
                    "hlc": v.stamp.hlc,
                    "cluster": v.stamp.cluster,
                    "eventId": v.stamp.event_id,
                    "deleted": v.value is None,
                }
                for key, v in geo.winners()
            }

        entries = await asyncio.to_thread(collect)
        return web.json_response({"cluster": geo.table.cluster, "entries": entries})

    async def forwarded_write(self, request: web.Request) -> web.Response:
        """A policy write another sidecar forwarded to this one (the fence holder)."""
        if request.headers.get(FORWARDED_HEADER) != "1":
            raise NotFoundError(f"{SIDECAR_WRITE_PATH} only takes writes forwarded by sidecars")
        return await receive_write(request, self.ready_service(), self.forwarder)
