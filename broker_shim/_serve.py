"""Serving the sidecar's aiohttp application: ``http://`` and, with TLS, ``https://``.

Pulsar's broker serves its web service on ``webServicePort`` and, with TLS configured,
on ``webServicePortTls`` too: the same admin REST, lookups, WebSocket API and metrics on
both. aiohttp's ``web.run_app`` takes one TLS context for every listener, so the sidecar
runs its app itself, as ``run_app`` does: one :class:`~aiohttp.web.AppRunner` (handling
SIGTERM and SIGINT), a plain site and a TLS site on it (:func:`start_sites`), and the
same graceful stop (:func:`run`): on the signal the sites stop accepting, the app's
``on_shutdown`` steps run (the bundles are released, clients closed), requests still
running get ``shutdown_timeout`` seconds, then its ``on_cleanup`` steps run (the caches
close, writing their snapshots). :class:`~broker_shim._shutdown.ShutdownGuard` bounds
the whole stop, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_log import AccessLogger

__all__ = ["run", "start_sites"]

logger = logging.getLogger(__name__)

#: What ``web.run_app`` gives an idle keep-alive connection (the runner's own default,
#: an hour, would keep idle clients of a stopped sidecar around much longer).
KEEPALIVE_TIMEOUT_S = 75.0


async def start_sites(
    runner: web.BaseRunner,
    *,
    host: str,
    port: int,
    sock: socket.socket | None = None,
    tls: ssl.SSLContext | None = None,
    tls_sock: socket.socket | None = None,
    tls_port: int | None = None,
) -> list[web.BaseSite]:
    """Start the plain site on ``sock`` (already bound) or ``host:port`` and, with
    ``tls``, the TLS one on ``tls_sock`` (already bound) or ``host:tls_port``; returns them
    (the runner stops them on cleanup)."""
    sites: list[web.BaseSite] = [
        web.TCPSite(runner, host, port) if sock is None else web.SockSite(runner, sock)
    ]
    if tls is not None and tls_sock is not None:
        sites.append(web.SockSite(runner, tls_sock, ssl_context=tls))
    elif tls is not None and tls_port is not None:
        sites.append(web.TCPSite(runner, host, tls_port, ssl_context=tls))
    for site in sites:
        await site.start()
    return sites


async def _serve(
    app: web.Application,
    *,
    host: str,
    port: int,
    sock: socket.socket | None,
    tls: ssl.SSLContext | None,
    tls_sock: socket.socket | None,
    shutdown_timeout: float,
    access_log: logging.Logger | None,
    access_log_class: type[AbstractAccessLogger],
) -> None:
    runner = web.AppRunner(
        app,
        handle_signals=True,
        shutdown_timeout=shutdown_timeout,
        keepalive_timeout=KEEPALIVE_TIMEOUT_S,
        access_log=access_log,
        access_log_class=access_log_class,
    )
    await runner.setup()  # on_startup: as run_app, no cleanup when it fails
    try:
        await start_sites(runner, host=host, port=port, sock=sock, tls=tls, tls_sock=tls_sock)
        while True:  # until SIGTERM/SIGINT (GracefulExit) cancels this task
            await asyncio.sleep(3600)
    finally:
        await runner.cleanup()  # sites, on_shutdown, open requests, on_cleanup


def run(
    app: web.Application,
    *,
    host: str,
    port: int,
    sock: socket.socket | None = None,
    tls: ssl.SSLContext | None = None,
    tls_sock: socket.socket | None = None,
    shutdown_timeout: float,
    access_log: logging.Logger | None,
    access_log_class: type[AbstractAccessLogger] = AccessLogger,
) -> None:
    """Serve ``app`` on ``sock`` (bound) or ``host:port`` and, with ``tls``, on the bound
    ``tls_sock``, until
    SIGTERM or SIGINT; then stop as ``web.run_app`` does (see the module's doc).

    The event loop is run the way ``web.run_app`` runs it: the signal raises
    ``GracefulExit`` out of the loop, the serving task is cancelled (its ``finally`` runs
    the runner's cleanup), then every task left is cancelled and the loop closed.
    """
    loop = asyncio.new_event_loop()
    main_task = loop.create_task(
        _serve(
            app,
            host=host,
            port=port,
            sock=sock,
            tls=tls,
            tls_sock=tls_sock,
            shutdown_timeout=shutdown_timeout,
            access_log=access_log,
            access_log_class=access_log_class,
        )
    )
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main_task)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        try:
            if not main_task.done():
                main_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    loop.run_until_complete(main_task)
        finally:
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await every task still pending (background tasks of the app), reporting
    any that failed, as ``web.run_app`` does after its serving task ended."""
    pending = asyncio.all_tasks(loop)
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    for task in pending:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )
