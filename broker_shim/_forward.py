"""Policy writes reach the fence holder: forwarded over HTTP, or written here.

Every sidecar takes part in the election of :class:`~sync.FenceHolder`. A REST write that
arrives at a sidecar which does not hold the fence is sent to the holder's
``SIDECAR_WRITE_PATH``; the holder writes it through its fenced writer, where it joins
the group commit with every other sidecar's writes, and answers with the offsets its
cache had applied. The forwarding sidecar waits until its own cache reaches them, so a
read from the sidecar that took the write shows it (read-your-writes).

The fence, not the election, keeps writes safe: when the holder cannot be reached, is
not ready, or fails, this sidecar writes itself (taking the fence). Input errors the
holder refuses come back as the same Pulsar status (412, 404).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from sync import (
    FenceHolder,
    InvalidInputError,
    InvalidPolicyError,
    NotFoundError,
    PolicyService,
    PolicyTarget,
)
from sync.constants import SIDECAR_WRITE_PATH

logger = logging.getLogger(__name__)

__all__ = ["FORWARDED_HEADER", "WriteForwarder"]

#: Set on forwarded requests: the receiver writes itself, never forwards again.
FORWARDED_HEADER = "X-Policy-Sync-Forwarded"
#: Threads that wait for writes (blocked on the fenced writer or the cache, not working):
#: asyncio's default pool (cores + 4) would cap a group commit at a handful of writes.
WRITE_THREADS = 256

T = TypeVar("T")


class WriteForwarder:
    """Sends this sidecar's policy writes to the fence holder (see module doc)."""

    def __init__(self, holder: FenceHolder | None, timeout_s: float = 35.0) -> None:
        self.holder = holder
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=1.0)
        self._session: aiohttp.ClientSession | None = None
        self._pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="policy-write")
        self.forwarded = 0
        self.written_here = 0
        self.fallbacks = 0

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
        address = self._holder_elsewhere()
        if address is not None:
            positions = await self._forward(address, target, fields)
            if positions is not None:
                self.forwarded += 1
                await self.blocking(svc.cache.wait_for, positions, svc.writer.config.timeout_s)
                return
            self.fallbacks += 1
        self.written_here += 1
        await self.blocking(svc.set, target, fields)

    def _holder_elsewhere(self) -> str | None:
        holder = self.holder
        if holder is None or holder.holding:
            return None
        address = holder.holder()
        return None if address == holder.config.address else address

    async def _forward(
        self, address: str, target: PolicyTarget, fields: dict[str, Any]
    ) -> dict[int, int] | None:
        """The holder's applied offsets after it wrote, or None if it could not (then we
        write ourselves). Raises the holder's refusal of bad input."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.post(
                address + SIDECAR_WRITE_PATH,
                json={"key": target.key, "fields": fields},
                headers={FORWARDED_HEADER: "1"},
            ) as resp:
                body = await resp.json(content_type=None)
                if resp.status == 200:
                    return {int(p): int(o) for p, o in body["positions"].items()}
                reason = str(body.get("reason", "")) if isinstance(body, dict) else ""
                if resp.status == 412:
                    raise InvalidPolicyError(reason)
                if resp.status == 404:
                    raise NotFoundError(reason)
                logger.info("fence holder %s answered %d (%s); writing here", address,
                            resp.status, reason)  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            logger.info("fence holder %s unreachable (%s); writing here", address, exc)
        if self.holder is not None:
            self.holder.forget()
        return None


async def receive_write(
    request: web.Request, svc: PolicyService, forwarder: WriteForwarder
) -> web.Response:
    """The holder's side: write a forwarded patch here, answer the applied offsets."""
    try:
        body = await request.json()
    except ValueError as exc:
        raise InvalidInputError(f"forwarded write is not JSON: {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("fields"), dict):
        raise InvalidInputError("forwarded write needs {'key': ..., 'fields': {...}}")
    target = PolicyTarget.from_key(str(body.get("key")))
    result = await forwarder.blocking(svc.set, target, body["fields"])
    return web.json_response({"positions": {str(p): o for p, o in result.positions.items()}})
