"""One sidecar's aiohttp application: its front ends wired around a :class:`Sidecar`.

The sidecar (:mod:`broker_shim._sidecar`) builds the library's objects; :func:`build_app`
hands them to the front ends and runs them with the app:

* HTTP (the shell of :mod:`broker_shim._http_shell`): the lookup and admin routes with
  the live cluster service, the compaction routes with the messaging engine, Pulsar's
  topic and namespace policy routes, the sidecar's own routes;
* WebSocket (:mod:`broker_shim.ws`) and the Pulsar binary protocol
  (:mod:`broker_shim._binary_app`), both with the one messaging engine.

Start-up runs in this order (shutdown leaves the cluster first, then closes the engine,
then the binary listener): the cluster service and its supervisor, the policy service
and its supervisor, the fence-holder election, the messaging engine, the binary listener.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections.abc import Callable

from aiohttp import web

from sync import CacheState, TopicName
from sync.cluster import MemberState, ServiceState, TopicOperation
from sync.errors import ConflictError

from ._admin_http import add_admin_routes
from ._binary_app import add_binary_listener
from ._cluster_http import check_topic
from ._compaction_http import add_compaction_routes
from ._forward import WriteForwarder
from ._http_shell import HTTPS_URL_OF, http_app
from ._live_cluster import LiveCluster
from ._lookup_http import add_lookup_routes
from ._metrics import LookupMetrics
from ._permissions_http import add_permission_routes
from ._process_tuning import freeze_startup_heap, raise_gc_young_threshold
from ._schemas_http import add_schema_routes
from ._sidecar import Sidecar
from ._sidecar_http import SidecarRoutes
from ._topic_policy_http import PolicyRoutes
from .binary import IncompatibleSchemaError, admit_schemaless_producer
from .ws import AdmitProducer, Authorize, add_ws_routes, allow_all

logger = logging.getLogger(__name__)

__all__ = ["FREEZE_KEY", "SIDECAR_KEY", "build_app"]

#: The sidecar an app serves, for whoever holds only the app (tests, tools).
SIDECAR_KEY = web.AppKey("sidecar", Sidecar)
#: The task that freezes the start-up heap once the sidecar is ready.
FREEZE_KEY = web.AppKey("freeze-heap", asyncio.Task[None])
_SUPERVISOR_KEY = web.AppKey("supervisor", asyncio.Task[None])


def _ready(sidecar: Sidecar) -> bool:
    svc = sidecar.service
    if svc is None or svc.cache.state is not CacheState.READY:
        return False
    cluster = sidecar.cluster_service()
    if cluster is None:
        return True
    return cluster.state is ServiceState.READY and cluster.member.state is MemberState.ACTIVE


async def _freeze_heap_when_ready(sidecar: Sidecar) -> None:
    """Once the sidecar is ready, move what start-up allocated out of the garbage
    collector's reach (:func:`~broker_shim._process_tuning.freeze_startup_heap`)."""
    while not _ready(sidecar):
        await asyncio.sleep(0.2)
    freeze_startup_heap()


def ws_authorizer(cluster: LiveCluster | None) -> Authorize:
    """The WebSocket API's authorization: the cluster service's, when it has an auth
    config (Pulsar's WebSocket service authorizes against its brokers' permissions)."""
    if cluster is None:
        return allow_all

    def authorize(
        request: web.Request, topic: TopicName, operation: TopicOperation, subscription: str
    ) -> None:
        check_topic(cluster.service, request, topic, operation, subscription)

    return authorize


def ws_producer_admission(sidecar: Sidecar) -> AdmitProducer:
    """The WebSocket producers' schema checks: Pulsar's proxy produces without a schema,
    so the owner refuses it as it refuses a binary producer without one
    (:func:`~broker_shim.binary._schemas.admit_schemaless_producer`: 409 at the handshake,
    Pulsar's proxy's status for its client's ``IncompatibleSchemaException``)."""

    async def admit(topic: TopicName) -> None:
        svc = sidecar.cluster_service()
        if svc is None:
            return  # no cluster, no schema registry
        try:
            await admit_schemaless_producer(svc, topic)
        except IncompatibleSchemaError as exc:
            raise ConflictError(str(exc)) from None

    return admit


def _https_url_of(cluster: LiveCluster, http_url: str) -> str | None:
    """The registered ``https://`` URL (``webServiceUrlTls``) of the live sidecar of this
    cluster serving at ``http_url`` (None: none, or it serves no HTTPS)."""
    for live in cluster.service.registry.live.values():
        if live.registration.http_url == http_url:
            return live.registration.http_url_tls
    return None


def build_app(
    sidecar: Sidecar,
    *,
    freeze_heap: bool = True,
    broker_socket: socket.socket | None = None,
    broker_tls_socket: socket.socket | None = None,
) -> web.Application:
    """The aiohttp application of one sidecar (everything is started on startup).

    ``freeze_heap``: ``gc.freeze()`` once the sidecar is ready (see
    :func:`_freeze_heap_when_ready`); pass False when the app shares its process.
    ``broker_socket``: an already bound socket for the binary protocol (else
    ``sidecar.config.broker_port`` is bound on start, if set); ``broker_tls_socket`` the
    same for ``pulsar+ssl://`` (else ``sidecar.config.broker_port_tls``).
    """
    app = http_app()
    app[SIDECAR_KEY] = sidecar
    cluster = sidecar.cluster
    engine = sidecar.engine
    forwarder = WriteForwarder(sidecar.holder)
    own = SidecarRoutes(sidecar, forwarder)
    if cluster is not None:
        # First: it starts first and leaves first (see LiveCluster.serve_with).
        cluster.serve_with(app)
        https_url_of: Callable[[str], str | None] = functools.partial(_https_url_of, cluster)
        app[HTTPS_URL_OF] = https_url_of
        # Before the lookup routes' …/{bundle}/… and the generic …/{policy} routes.
        add_permission_routes(app, cluster)
        # Before the generic /admin/v2/{domain}/… routes: "schemas" is not a domain.
        add_schema_routes(app, cluster)
        # First too: its GET …/partitions must win over the generic …/{policy} route
        # (issue 4), as the admin API's …/partitions and …/partitioned (issue 13).
        add_lookup_routes(app, cluster, metrics=LookupMetrics(sidecar.metrics.registry))
        add_admin_routes(app, cluster, policies=lambda: sidecar.service)
    # Before the generic …/{policy} routes: …/compaction is an action, not a policy.
    add_compaction_routes(app, engine)
    policy = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/{policy}"
    ns_policy = "/admin/v2/namespaces/{tenant}/{namespace}/{policy}"
    policies = PolicyRoutes(
        own.ready_service, sidecar.cluster_service, forwarder.set, sidecar.catalog
    )
    app.add_routes(
        [
            *own.routes(),
            web.get(ns_policy, policies.ns_get),
            web.post(ns_policy, policies.ns_set),
            web.put(ns_policy, policies.ns_set),  # the few Pulsar sets with PUT
            web.delete(ns_policy, policies.ns_delete),
            web.get(policy, policies.get),
            web.post(policy, policies.set),
            web.put(policy, policies.set),
            web.delete(policy, policies.delete),
        ]
    )
    # Pulsar WebSocket producers/consumers (issue 5): with the cluster enabled, a topic is
    # served by the owner of its bundle; other sidecars answer 307 to the owner.
    add_ws_routes(app, engine, ws_authorizer(cluster), ws_producer_admission(sidecar))

    async def on_startup(app: web.Application) -> None:
        await asyncio.to_thread(sidecar.start_service)
        sidecar.kafka.start()
        if sidecar.holder is not None:
            await asyncio.to_thread(sidecar.holder.start)
        app[_SUPERVISOR_KEY] = asyncio.create_task(sidecar.supervise())
        if freeze_heap:
            app[FREEZE_KEY] = asyncio.create_task(_freeze_heap_when_ready(sidecar))
        raise_gc_young_threshold()  # while the engine serves (see _process_tuning)
        await engine.start()

    async def on_shutdown(_app: web.Application) -> None:
        await engine.close()  # every connection closed (1001), every position committed

    async def on_cleanup(app: web.Application) -> None:
        app[_SUPERVISOR_KEY].cancel()
        if FREEZE_KEY in app:
            app[FREEZE_KEY].cancel()
        await forwarder.close()
        await asyncio.to_thread(sidecar.close)

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    if sidecar.config.broker_port is not None or broker_socket is not None:
        add_binary_listener(
            app,
            engine,
            cluster=sidecar.cluster_service,
            config=sidecar.config,
            registry=sidecar.metrics.registry,
            sock=broker_socket,
            tls_sock=broker_tls_socket,
        )
    return app
