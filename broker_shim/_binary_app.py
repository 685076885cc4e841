"""Starts and stops the sidecar's Pulsar binary-protocol listener with its aiohttp app."""

from __future__ import annotations

import socket

from aiohttp import web

from sync.cluster import ClusterService
from sync.messaging import MessagingEngine

from ._lookup_http import CLUSTER_KEY
from ._sidecar import Sidecar
from .binary import BinaryServer

__all__ = ["BINARY_KEY", "add_binary_listener"]

BINARY_KEY = web.AppKey("binary_server", BinaryServer)


def add_binary_listener(
    app: web.Application,
    sidecar: Sidecar,
    engine: MessagingEngine,
    *,
    sock: socket.socket | None = None,
) -> BinaryServer:
    """Serve ``pulsar://`` on ``sock`` or ``sidecar.config.broker_port`` with ``engine``
    (the WebSocket API's), answering lookups with the app's cluster service if it has one."""
    config = sidecar.config

    def cluster() -> ClusterService | None:
        return app[CLUSTER_KEY].service if CLUSTER_KEY in app else None

    server = BinaryServer(
        engine,
        cluster=cluster,
        advertised_url=config.advertised_broker_url,
        producer_name_prefix=f"{config.cluster}-{config.broker_id}",
        registry=sidecar.metrics.registry,
    )
    app[BINARY_KEY] = server

    async def start(_app: web.Application) -> None:
        if sock is not None:
            await server.start(sock=sock)
        else:
            await server.start(config.host, config.broker_port or 0)

    async def stop(_app: web.Application) -> None:
        await server.close()

    app.on_startup.append(start)
    app.on_shutdown.append(stop)
    return server
