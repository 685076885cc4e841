"""Pulsar's topic compaction admin API: ``PUT …/{topic}/compaction`` starts a compaction
now (``pulsar-admin topics compact``), ``GET …/{topic}/compaction`` answers the status
of the last one (``topics compaction-status``).

Both act on the owner of the topic's bundle, as in Pulsar: another sidecar answers
``307 Temporary Redirect`` to the owner's same path (Pulsar's admin clients follow it).
The compaction itself is :meth:`sync.messaging.MessagingEngine.compact`.
"""

from __future__ import annotations

import functools
import logging

from aiohttp import web
from yarl import URL

from sync import TopicName
from sync.errors import UnavailableError
from sync.messaging import MessagingEngine

from ._http_shell import owner_base_url, topic_from_path

logger = logging.getLogger(__name__)

__all__ = ["add_compaction_routes"]


async def _owned_here(engine: MessagingEngine, request: web.Request, topic: TopicName) -> None:
    """Raise a 307 to the owner when another sidecar owns ``topic``."""
    owner = await engine.owner_of(topic)
    if owner.local:
        return
    if not owner.http_url:
        raise UnavailableError(f"No broker was available to own {topic}")
    base = URL(owner_base_url(request, owner.http_url))
    target = base.with_path(request.rel_url.raw_path, encoded=True)
    raise web.HTTPTemporaryRedirect(str(target.with_query(request.rel_url.query_string)))


async def trigger(engine: MessagingEngine, request: web.Request) -> web.StreamResponse:
    """``PUT``: start compacting the topic (204 at once; 409 while one runs)."""
    topic = topic_from_path(request, 3)
    await _owned_here(engine, request, topic)
    await engine.start_compaction(topic)
    return web.Response(status=204)


async def status(engine: MessagingEngine, request: web.Request) -> web.StreamResponse:
    """``GET``: Pulsar's ``LongRunningProcessStatus`` of the last compaction."""
    topic = topic_from_path(request, 3)
    await _owned_here(engine, request, topic)
    return web.json_response(engine.compaction_status(topic).as_pulsar())


def add_compaction_routes(app: web.Application, engine: MessagingEngine) -> None:
    """Register the routes, served by ``engine`` (before the generic
    ``…/{topic}/{policy}`` routes)."""
    path = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/compaction"
    app.router.add_route("PUT", path, functools.partial(trigger, engine))
    app.router.add_route("GET", path, functools.partial(status, engine))
