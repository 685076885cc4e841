"""What the lookup routes (:mod:`broker_shim._lookup_http`) and the admin routes
(:mod:`broker_shim._admin_http`) share: how a route is bound to the live cluster service,
and Pulsar's authentication and authorization checks.

A handler takes the :class:`~broker_shim._live_cluster.LiveCluster` it serves and the
request; :func:`add_cluster_routes` binds it, so no handler looks its service up in the
aiohttp application. Errors are library exceptions, answered by the shell's one
middleware (:mod:`broker_shim._http_shell`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from sync import NamespaceName, TopicName
from sync.cluster import ClusterService, TopicOperation

from ._live_cluster import LiveCluster
from ._tls import peer_common_name

__all__ = [
    "ClusterHandler",
    "add_cluster_routes",
    "check_admin",
    "check_lookup",
    "check_topic",
    "check_super",
    "namespace_of",
    "role",
]

#: A route handler of the cluster's HTTP API: the live cluster, then the request.
ClusterHandler = Callable[[LiveCluster, web.Request], Awaitable[web.StreamResponse]]


def add_cluster_routes(
    app: web.Application,
    cluster: LiveCluster,
    routes: Iterable[tuple[str, str, ClusterHandler]],
) -> None:
    """Register each ``(method, path, handler)`` on ``app``, bound to ``cluster``."""
    for method, path, handler in routes:
        app.router.add_route(method, path, functools.partial(handler, cluster))


def role(service: ClusterService, request: web.Request) -> str | None:
    """The authenticated role, or None when auth is off. A WebSocket handshake may carry
    its token as the ``token`` query parameter instead (Pulsar's WebSocket service takes
    it so, for browsers, which cannot set headers on one). Over HTTPS, with the ``tls``
    provider, a request without credentials but with a verified client certificate has
    the certificate's common name as its role (Pulsar's ``AuthenticationProviderTls``).

    Raises:
        AuthenticationError: auth is on and the request has no valid token (401).
    """
    auth = service.auth
    if auth is None:
        return None
    header = request.headers.get("Authorization")
    if header is None and request.path.startswith("/ws/") and "token" in request.query:
        header = f"Bearer {request.query['token']}"
    if header is None and "tls" in auth.config.providers:
        name = peer_common_name(request.transport)
        if name:
            return auth.authenticate_certificate(name)
    return auth.authenticate(header)


def check_lookup(service: ClusterService, request: web.Request, tenant: str) -> None:
    """Raises AuthorizationError (403) unless the caller may look up ``tenant``'s topics."""
    auth = service.auth
    caller = role(service, request)
    if auth is not None and caller is not None:
        auth.check_lookup(caller, tenant)


def check_topic(
    service: ClusterService,
    request: web.Request,
    topic: TopicName,
    operation: TopicOperation,
    subscription: str = "",
) -> None:
    """Raises AuthorizationError (403) unless the caller may do ``operation`` on ``topic``
    (consuming: on ``subscription``)."""
    auth = service.auth
    caller = role(service, request)
    if auth is not None and caller is not None:
        auth.check_topic(caller, topic, operation, subscription)


def check_admin(service: ClusterService, request: web.Request, tenant: str) -> None:
    """Raises AuthorizationError (403) unless the caller administers ``tenant``."""
    auth = service.auth
    caller = role(service, request)
    if auth is not None and caller is not None:
        auth.check_tenant_admin(caller, tenant)


def check_super(service: ClusterService, request: web.Request) -> None:
    """Raises AuthorizationError (403) unless the caller is a super-user."""
    auth = service.auth
    caller = role(service, request)
    if auth is not None and caller is not None:
        auth.check_super_user(caller)


def namespace_of(request: web.Request) -> NamespaceName:
    """The namespace of a ``…/{tenant}/{namespace}/…`` path.

    Raises:
        InvalidInputError: not a valid namespace name (412).
    """
    m = request.match_info
    return NamespaceName(m["tenant"], m["namespace"])
