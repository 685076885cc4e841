"""Policy writes reach the fence holder: forwarded over HTTP, or written here.

Every sidecar takes part in the election of :class:`~sync.FenceHolder`. A REST write that
arrives at a sidecar which does not hold the fence is sent to the holder's
``SIDECAR_WRITE_PATH``; the holder writes it through its fenced writer, where it joins
the group commit with every other sidecar's writes, and answers once committed with the
offsets to wait for (not waiting for its own cache). The forwarding sidecar waits until
its own cache reaches them, so a read from the sidecar that took the write shows it
(read-your-writes).

The fence, not the election, keeps writes safe: when the holder cannot be reached, is
not ready, or fails, this sidecar writes itself (taking the fence). Input errors the
holder refuses come back as the same Pulsar status (412, 404).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from sync import (
    ConflictError,
    FenceHolder,
    HolderState,
    InvalidInputError,
    InvalidPolicyError,
    NotFoundError,
    PolicyScope,
    PolicyService,
    PolicySyncError,
    PolicyTarget,
    TooManyRequestsError,
    UnavailableError,
    WriteResult,
)
from sync.constants import SIDECAR_WRITE_PATH

from ._http_errors import http_status
from ._http_shell import json_body

logger = logging.getLogger(__name__)

__all__ = ["FORWARDED_HEADER", "REFUSALS", "WriteForwarder"]

#: Set on forwarded requests: the receiver writes itself, never forwards again.
FORWARDED_HEADER = "X-Policy-Sync-Forwarded"
#: Threads that wait for writes (blocked on the fenced writer or the cache, not working):
#: asyncio's default pool (cores + 4) would cap a group commit at a handful of writes.
WRITE_THREADS = 256

#: Forwarded writes per request to the holder, and requests in flight at once. A request
#: lasts about one transaction of the holder: with 2 in flight, a write arriving while
#: both were out waited for one of them first (8 writers, all forwarded: 706-787 writes/s
#: with 2, 892-937 with 4, 884-942 with 8; the holder's group commit batches them anyway).
FORWARD_BATCH = 256
FORWARD_IN_FLIGHT = 4

T = TypeVar("T")

#: How long a write waits for a fence holder to be elected before writing here: about a
#: session timeout of the election group (a rebalance after a member left completes
#: within it). Measured under two CPU hogs beside the chaos soak: see docs/benchmarks.md.
ELECTION_WAIT_S = 6.0

#: A forwarded write's refusal by the holder, raised here as the same status (the one
#: table in _http_errors maps each class back to it); any other status (500) is written
#: here instead.
REFUSALS: dict[int, Callable[[str], PolicySyncError]] = {
    404: NotFoundError,
    409: ConflictError,
    412: InvalidPolicyError,
    429: TooManyRequestsError,
    503: UnavailableError,
}


class WriteForwarder:
    """Sends this sidecar's policy writes to the fence holder (see module doc)."""

    def __init__(self, holder: FenceHolder | None, timeout_s: float = 35.0) -> None:
        self.holder = holder
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=1.0)
        self._session: aiohttp.ClientSession | None = None
        self._pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="policy-write")
        self._pending: list[
            tuple[PolicyService, dict[str, Any], asyncio.Future[dict[str, Any] | None]]
        ] = []
        self._in_flight = 0
        self.forwarded = 0
        self.written_here = 0
        self.fallbacks = 0
        #: Writes that arrived while no fence holder was known (see _await_election).
        self.election_waits = 0

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on a write thread (it waits for Kafka and the cache)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def set(self, svc: PolicyService, target: PolicyTarget, fields: dict[str, Any]) -> None:
        """Merge ``fields`` (a validated-by-us JSON patch) into ``target``, wherever the
        fence is; returns once this sidecar's cache shows the write."""
        if target.scope is PolicyScope.GLOBAL and svc.global_policies is not None:
            # Geo: global policies have their own fenced writer, on the global topic.
            self.written_here += 1
            await self.blocking(svc.set, target, fields)
            return
        await self._await_election()
        address = self._holder_elsewhere()
        if address is not None:
            if await self._forward(address, svc, target, fields):
                self.forwarded += 1
                return
            self.fallbacks += 1
        self.written_here += 1
        await self.blocking(svc.set, target, fields)

    async def _await_election(self) -> None:
        """While no member is known to hold the fence (an election under way, a describe
        that failed), wait for one, at most ``ELECTION_WAIT_S``. Writing here at once would
        take the fence from whoever is elected a moment later, and on a loaded machine the
        members then fence each other in turn until the writes' deadlines pass. Past the
        bound this sidecar writes itself: the fence, not the election, keeps writes safe."""
        holder = self.holder
        if holder is None or holder.holding or holder.holder() is not None:
            return
        if holder.state is not HolderState.RUNNING:
            return  # no election to wait for (not started yet, failed or closed)
        self.election_waits += 1
        deadline = asyncio.get_running_loop().time() + ELECTION_WAIT_S
        while holder.holder() is None and not holder.holding:
            if holder.state is not HolderState.RUNNING:
                return
            if asyncio.get_running_loop().time() >= deadline:
                logger.info("no fence holder known after %.0fs; writing here", ELECTION_WAIT_S)
                return
            await asyncio.sleep(0.05)

    def _holder_elsewhere(self) -> str | None:
        holder = self.holder
        if holder is None or holder.holding:
            return None
        address = holder.holder()
        return None if address == holder.config.address else address

    async def _forward(
        self, address: str, svc: PolicyService, target: PolicyTarget, fields: dict[str, Any]
    ) -> bool:
        """True once the holder wrote it and this sidecar's cache applied it; False if the
        holder could not (then we write ourselves). Raises the holder's refusal of bad
        input, or the cache's failure to catch up in time.

        Writes forwarded while a request to the holder is in flight go together in the
        next one (at most ``FORWARD_BATCH``), as the holder's group commit does with them.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        self._pending.append((svc, {"key": target.key, "fields": fields}, future))
        if self._in_flight < FORWARD_IN_FLIGHT:
            self._in_flight += 1
            loop.create_task(self._send(address))
        outcome = await future
        if outcome is None:
            return False
        if "positions" in outcome:
            return True
        reason = str(outcome.get("reason", ""))
        refusal = REFUSALS.get(int(outcome.get("status", 500)))
        if refusal is not None:
            # The holder's answer stands: its refusal of the input, or its unavailability
            # after trying to the write's deadline (writing here would only fence it).
            raise refusal(reason)
        logger.info("fence holder %s failed a write (%s); writing here", address, reason)
        return False

    async def _send(self, address: str) -> None:
        try:
            while self._pending:
                batch = self._pending[:FORWARD_BATCH]
                del self._pending[:FORWARD_BATCH]
                try:
                    outcomes = await self._post(address, [w for _, w, _ in batch])
                    if outcomes is not None:
                        await self._wait_applied(batch, outcomes)
                except Exception as exc:  # never leave a caller waiting (pool closed, ...)
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for i, (_, _, future) in enumerate(batch):
                    if not future.done():
                        future.set_result(None if outcomes is None else outcomes[i])
        finally:
            self._in_flight -= 1

    async def _wait_applied(
        self,
        batch: list[tuple[PolicyService, dict[str, Any], asyncio.Future[dict[str, Any] | None]]],
        outcomes: list[dict[str, Any]],
    ) -> None:
        """Read-your-writes for a whole forwarded batch: one wait, in one thread, until
        this sidecar's cache applied every offset the holder answered."""
        wanted: dict[int, dict[int, int]] = {}
        services: dict[int, PolicyService] = {}
        for (svc, _, _), outcome in zip(batch, outcomes, strict=True):
            positions = outcome.get("positions") if isinstance(outcome, dict) else None
            if not isinstance(positions, dict):
                continue
            merged = wanted.setdefault(id(svc), {})
            services[id(svc)] = svc
            for p, o in positions.items():
                merged[int(p)] = max(merged.get(int(p), 0), int(o))
        for key, positions in wanted.items():
            svc = services[key]
            if svc.cache.reached(positions):
                continue  # applied while the answer travelled: no thread needed
            try:
                await self.blocking(svc.cache.wait_for, positions, svc.writer.config.timeout_s)
            except PolicySyncError as exc:
                for owner, _, future in batch:
                    if owner is svc and not future.done():
                        future.set_exception(exc)

    async def _post(
        self, address: str, writes: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.post(
                address + SIDECAR_WRITE_PATH,
                json={"writes": writes},
                headers={FORWARDED_HEADER: "1"},
            ) as resp:
                body = await resp.json(content_type=None)
                if resp.status == 200 and len(body["results"]) == len(writes):
                    return list(body["results"])
                logger.info("fence holder %s answered %d (%s); writing here", address,
                            resp.status, str(body)[:200])  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            logger.info("fence holder %s unreachable (%s); writing here", address, exc)
        if self.holder is not None:
            self.holder.forget()
        return None


async def receive_write(
    request: web.Request, svc: PolicyService, forwarder: WriteForwarder
) -> web.Response:
    """The holder's side: write forwarded patches here (each on its own: one refused
    write does not fail the others), answer each one's applied offsets or refusal."""
    body = await json_body(request)
    writes = body.get("writes") if isinstance(body, dict) else None
    if not isinstance(writes, list) or not all(
        isinstance(w, dict) and isinstance(w.get("fields"), dict) for w in writes
    ):
        raise InvalidInputError("forwarded writes need {'writes': [{'key', 'fields'}, ...]}")

    items: list[tuple[PolicyTarget, Any]] = []
    results: list[dict[str, Any] | None] = []
    for write in writes:
        try:
            items.append((PolicyTarget.from_key(str(write.get("key"))), write["fields"]))
            results.append(None)
        except InvalidInputError as exc:
            results.append(_answer(exc))
    # One thread for the whole batch: its writes are queued together for the group commit.
    # Answered once committed: the forwarding sidecar waits for its own cache, not ours.
    done = iter(await forwarder.blocking(functools.partial(svc.set_each, applied=False), items))
    answers = [_answer(next(done)) if r is None else r for r in results]
    return web.json_response({"results": answers})


def _answer(result: WriteResult | PolicySyncError) -> dict[str, Any]:
    """One forwarded write's outcome, as the forwarding sidecar reads it (a refusal with
    the status the holder's own clients would get: see :data:`REFUSALS`)."""
    if isinstance(result, PolicySyncError):
        return {"status": http_status(result), "reason": str(result)}
    return {"positions": {str(p): o for p, o in result.positions.items()}}
