"""Pulsar admin REST for produce/consume permissions (what ``pulsar-admin namespaces
grant-permission`` and ``topics grant-permission`` call)::

    GET    /admin/v2/namespaces/{tenant}/{namespace}/permissions          {role: [actions]}
    POST   /admin/v2/namespaces/{tenant}/{namespace}/permissions/{role}   ["produce", …] -> 204
    DELETE /admin/v2/namespaces/{tenant}/{namespace}/permissions/{role}   -> 204
    GET    /admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions    namespace's + topic's
    POST   /admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions/{role}   -> 204
    DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions/{role}   -> 204
    GET    /admin/v2/namespaces/{tenant}/{namespace}/permissions/subscription     {sub: [roles]}
    POST   …/namespaces/{tenant}/{namespace}/permissions/subscription/{sub}  ["role"] -> 204
    DELETE …/namespaces/{tenant}/{namespace}/permissions/{sub}/{role}         -> 204
    GET    /admin/v2/namespaces/{tenant}/{namespace}/subscriptionAuthMode  "None" | "Prefix"
    POST   /admin/v2/namespaces/{tenant}/{namespace}/subscriptionAuthMode  "Prefix" -> 204

A tenant admin's operations (as Pulsar's GRANT_PERMISSION and REVOKE_PERMISSION); the
body and names are checked before anything is read or written. Stored as the namespace's
``auth/…`` registry record (:mod:`sync.cluster._permissions`) and enforced, with an auth
config, on the binary protocol's lookups, producers and consumers and on HTTP lookups.

Answers as a real Pulsar 4.0.7 gives them (``tests/compat/``, the ``perm-…`` cases): a topic
path needs the topic (404 "Topic persistent://… not found", also for a namespace that does
not exist and for a partition of a topic without it); a partition has grants of its own;
revoking what was never granted is 204; a subscription whose last role is revoked is
dropped. Where this differs from Pulsar, on purpose: an unknown action (``["fly"]``, which
Pulsar stores as null) and a topic grant without a body are 400; revoking on an unknown
subscription is 412 and a subscription grant in a namespace that does not exist 404
(Pulsar: 500); a revoke in a namespace that does not exist names it (Pulsar: an empty
reason).

``subscriptionAuthMode`` (Pulsar's ``Namespaces.setSubscriptionAuthMode`` and
``getSubscriptionAuthMode``, tenant-admin operations): a POST without a body (or ``null``)
sets ``None``, as Pulsar's ``internalSetSubscriptionAuthMode``; a name that is not a mode
is 400 and writes nothing (Pulsar's JSON binding reads it as null and sets ``None``). It
is kept in the namespace's ``auth/…`` record; with ``Prefix`` a consumer's subscription
must start with its role (:meth:`sync.cluster.AuthPolicies.prefix_refusal`).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from sync import NamespaceName, TopicName
from sync.cluster import (
    AuthPolicies,
    ClusterService,
    parse_actions,
    parse_roles,
    parse_subscription_auth_mode,
)
from sync.errors import NotFoundError

from ._cluster_http import ClusterHandler, add_cluster_routes, check_admin, namespace_of
from ._http_shell import json_body, topic_from_path
from ._live_cluster import LiveCluster

__all__ = ["add_permission_routes"]


def _target(
    cluster: LiveCluster, request: web.Request
) -> tuple[ClusterService, NamespaceName, TopicName | None]:
    """The cluster service, the namespace and, on a topic path, the topic of a request
    (validated), once the caller is known to administer the tenant (Pulsar's
    GRANT_PERMISSION, REVOKE_PERMISSION and GET_PERMISSION are tenant-admin operations)."""
    service = cluster.service
    topic: TopicName | None = None
    if "topic" in request.match_info:
        found = topic_from_path(request, 3)
        topic, namespace = found, found.namespace_name
    else:
        namespace = namespace_of(request)
    check_admin(service, request, namespace.tenant)
    return service, namespace, topic


def _topic_exists(service: ClusterService, topic: TopicName) -> bool:
    record = service.store.topic(topic)
    if record is None or service.store.layout(topic.namespace_name) is None:
        return False
    return not topic.is_partition or topic.partition_index < record.partitions


async def _require_topic(service: ClusterService, topic: TopicName | None) -> None:
    """Pulsar's check of a topic path (after the body's): the topic must exist, and a
    partition must be one of its partitioned topic's.

    Raises:
        NotFoundError: "Topic persistent://… not found".
    """
    if topic is None:
        return
    if not _topic_exists(service, topic):
        await service.lookups.refresh()  # an admin call: see other sidecars' writes
        if not _topic_exists(service, topic):
            raise NotFoundError(f"Topic {topic.canonical} not found")


async def _current(
    cluster: LiveCluster, request: web.Request
) -> tuple[AuthPolicies, TopicName | None]:
    """The namespace's permissions as the registry has them now (an admin read catches
    this sidecar up), and the topic of a topic path (which must exist)."""
    service, namespace, topic = _target(cluster, request)
    service.require_ready()
    await service.lookups.refresh()
    await _require_topic(service, topic)
    return service.permissions.of(namespace), topic


async def get_permissions(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    policies, topic = await _current(cluster, request)
    grants = policies.namespace_grants() if topic is None else policies.topic_grants(topic)
    return web.json_response(grants)


async def grant_permission(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service, namespace, topic = _target(cluster, request)
    actions = parse_actions(await json_body(request))
    service.require_ready()
    await _require_topic(service, topic)
    role = request.match_info["role"]
    await asyncio.to_thread(service.permissions.grant, namespace, role, actions, topic)
    return web.Response(status=204)


async def get_subscription_permissions(
    cluster: LiveCluster, request: web.Request
) -> web.StreamResponse:
    policies, _topic = await _current(cluster, request)
    return web.json_response(policies.subscription_grants())


async def grant_subscription_permission(
    cluster: LiveCluster, request: web.Request
) -> web.StreamResponse:
    service, namespace, _topic = _target(cluster, request)
    roles = parse_roles(await json_body(request))
    service.require_ready()
    subscription = request.match_info["subscription"]
    await asyncio.to_thread(service.permissions.grant_subscription, namespace, subscription, roles)
    return web.Response(status=204)


async def revoke_subscription_permission(
    cluster: LiveCluster, request: web.Request
) -> web.StreamResponse:
    service, namespace, _topic = _target(cluster, request)
    service.require_ready()
    m = request.match_info
    await asyncio.to_thread(
        service.permissions.revoke_subscription, namespace, m["subscription"], m["role"]
    )
    return web.Response(status=204)


async def revoke_permission(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service, namespace, topic = _target(cluster, request)
    service.require_ready()
    await _require_topic(service, topic)
    role = request.match_info["role"]
    await asyncio.to_thread(service.permissions.revoke, namespace, role, topic)
    return web.Response(status=204)


async def get_subscription_auth_mode(
    cluster: LiveCluster, request: web.Request
) -> web.StreamResponse:
    policies, _topic = await _current(cluster, request)
    return web.json_response(policies.subscription_auth_mode.value)


async def set_subscription_auth_mode(
    cluster: LiveCluster, request: web.Request
) -> web.StreamResponse:
    service, namespace, _topic = _target(cluster, request)
    mode = parse_subscription_auth_mode(await json_body(request))
    service.require_ready()
    await asyncio.to_thread(service.permissions.set_subscription_auth_mode, namespace, mode)
    return web.Response(status=204)


def add_permission_routes(app: web.Application, cluster: LiveCluster) -> None:
    """Register the routes above (before the generic ``…/{policy}`` routes)."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
    topic = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/permissions"
    mode = "/admin/v2/namespaces/{tenant}/{namespace}/subscriptionAuthMode"
    routes: list[tuple[str, str, ClusterHandler]] = [
        # before …/permissions/{role}: "subscription" is not a role here
        ("GET", f"{ns}/subscription", get_subscription_permissions),
        ("POST", f"{ns}/subscription/{{subscription}}", grant_subscription_permission),
        ("DELETE", f"{ns}/{{subscription}}/{{role}}", revoke_subscription_permission),
        # before the generic …/{policy} routes: kept with the permissions, not a policy
        ("GET", mode, get_subscription_auth_mode),
        ("POST", mode, set_subscription_auth_mode),
    ]
    for base in (ns, topic):
        routes += [
            ("GET", base, get_permissions),
            ("POST", f"{base}/{{role}}", grant_permission),
            ("DELETE", f"{base}/{{role}}", revoke_permission),
        ]
    add_cluster_routes(app, cluster, routes)
