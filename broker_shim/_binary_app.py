"""Starts and stops the sidecar's Pulsar binary-protocol listener with its aiohttp app."""

from __future__ import annotations

import socket
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from sync.cluster import ClusterService
from sync.messaging import MessagingEngine

from ._sidecar import SidecarConfig
from .binary import BinaryConfig, BinaryServer

__all__ = ["BINARY_KEY", "add_binary_listener"]

#: The app's binary listener, for whoever holds only the app (tests, tools).
BINARY_KEY = web.AppKey("binary_server", BinaryServer)


def add_binary_listener(
    app: web.Application,
    engine: MessagingEngine,
    *,
    cluster: Callable[[], ClusterService | None],
    config: SidecarConfig,
    registry: CollectorRegistry,
    sock: socket.socket | None = None,
    tls_sock: socket.socket | None = None,
) -> BinaryServer:
    """Serve ``pulsar://`` on ``sock`` or ``config.broker_port`` with ``engine`` (the
    WebSocket API's), and ``pulsar+ssl://`` on ``tls_sock`` or ``config.broker_port_tls``
    when ``config.tls`` is set, answering lookups with ``cluster()`` (the live cluster
    service, or None without one) while ``app`` runs.

    Raises:
        ConfigurationError: the TLS certificate or key cannot be used.
    """
    tls = None if config.tls is None else config.tls.server_context()
    server = BinaryServer(
        engine,
        cluster=cluster,
        advertised_url=config.advertised_broker_url,
        advertised_url_tls=config.advertised_broker_url_tls if tls else None,
        producer_name_prefix=f"{config.cluster}-{config.broker_id}",
        registry=registry,
        config=BinaryConfig(store_entries=config.entry_format == "entry"),
    )
    app[BINARY_KEY] = server

    async def start(_app: web.Application) -> None:
        if sock is not None:
            await server.start(sock=sock)
        else:
            await server.start(config.host, config.broker_port or 0)
        if tls is None:
            return
        if tls_sock is not None:
            await server.start(sock=tls_sock, tls=tls)
        elif config.broker_port_tls is not None:
            await server.start(config.host, config.broker_port_tls, tls=tls)

    async def stop(_app: web.Application) -> None:
        await server.close()

    app.on_startup.append(start)
    app.on_shutdown.append(stop)
    return server
