"""Pulsar admin REST for tenants, namespaces, topics and clusters (issue 13, item 1).

Paths, methods, bodies, status codes and ``{"reason": …}`` texts as a Pulsar 4.0.7
standalone answers them (recorded in ``tests/compat/pulsar-4.0.7.json``)::

    GET    /admin/v2/tenants                                   ["public", …]
    GET    /admin/v2/tenants/{tenant}                          {"adminRoles", "allowedClusters"}
    PUT    /admin/v2/tenants/{tenant}                          TenantInfo -> 204
    POST   /admin/v2/tenants/{tenant}                          TenantInfo -> 204 (update)
    DELETE /admin/v2/tenants/{tenant}                          -> 204 (409 with namespaces)
    GET    /admin/v2/namespaces/{tenant}/{namespace}           Policies (bundles, clusters)
    DELETE /admin/v2/namespaces/{tenant}/{namespace}           -> 204 (409 with topics)
    GET    /admin/v2/namespaces/{tenant}/{namespace}/replication  its replication clusters
    POST   /admin/v2/namespaces/{tenant}/{namespace}/replication  ["c1", …] -> 204
    GET    /admin/v2/{domain}/{tenant}/{namespace}             topics and partitions
    GET    /admin/v2/{domain}/{tenant}/{namespace}/partitioned partitioned topics
    PUT    /admin/v2/{domain}/{tenant}/{namespace}/{topic}     non-partitioned -> 204
    DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}     -> 204
    POST   /admin/v2/{domain}/{t}/{ns}/{topic}/partitions      body N: more partitions -> 204
    DELETE /admin/v2/{domain}/{t}/{ns}/{topic}/partitions      -> 204
    GET    /admin/v2/clusters/{cluster}                        ClusterData
    PUT    /admin/v2/clusters/{cluster}                        register a cluster (ClusterData)
    POST   /admin/v2/clusters/{cluster}                        update its ClusterData
    DELETE /admin/v2/clusters/{cluster}                        unregister it (no tenant allows it)
    GET    /admin/v2/brokers                                   ["host:port", …]

Tenants and namespaces are compacted records of the registry topic, seen by every
sidecar; a topic is a Kafka topic. Refused requests write nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from sync import NamespaceName, PolicyService, PolicyTarget
from sync.cluster import ClusterService
from sync.errors import BadRequestError, NotFoundError

from ._cluster_http import (
    ClusterHandler,
    add_cluster_routes,
    check_admin,
    check_super,
    namespace_of,
    role,
)
from ._http_shell import java_int, json_body, topic_from_path
from ._live_cluster import LiveCluster
from ._policy_rest import NAMESPACE_POLICIES_JSON

__all__ = ["PolicySource", "add_admin_routes"]

#: The sidecar's current policy service, if any (the namespace GET shows its policies).
PolicySource = Callable[[], PolicyService | None]


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequestError(f"{what} must be a JSON list of strings")
    return list(value)


# -- tenants --------------------------------------------------------------------------------
async def list_tenants(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    check_super(service, request)
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response(service.admin.tenants())


async def get_tenant(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    tenant = request.match_info["tenant"]
    check_admin(service, request, tenant)
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response(service.admin.tenant(tenant).to_rest())


async def _tenant_info(request: web.Request) -> tuple[list[str], list[str]]:
    body = await json_body(request)
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadRequestError("TenantInfo must be a JSON object")
    return _strings(body.get("adminRoles"), "adminRoles"), _strings(
        body.get("allowedClusters"), "allowedClusters"
    )


async def create_tenant(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    check_super(service, request)
    roles, clusters = await _tenant_info(request)
    service.require_ready()
    await asyncio.to_thread(
        service.admin.create_tenant, request.match_info["tenant"], roles, clusters
    )
    return web.Response(status=204)


async def update_tenant(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    check_super(service, request)
    roles, clusters = await _tenant_info(request)
    service.require_ready()
    await asyncio.to_thread(
        service.admin.update_tenant, request.match_info["tenant"], roles, clusters
    )
    return web.Response(status=204)


async def delete_tenant(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    check_super(service, request)
    service.require_ready()
    await asyncio.to_thread(service.admin.delete_tenant, request.match_info["tenant"])
    return web.Response(status=204)


# -- namespaces -----------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """A stored policy value as Pulsar's JSON shows it (unset fields left out)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _stored_policies(policies: Mapping[str, Any] | None, cluster: str) -> dict[str, Any]:
    """The namespace-level policies we store, under Pulsar's Policies keys."""
    out: dict[str, Any] = {}
    for name, (keys, per_cluster) in NAMESPACE_POLICIES_JSON.items():
        value = None if policies is None else policies.get(name)
        if value is None:
            continue
        shown = _plain(value)
        if name == "backLogQuotaMap":  # with the deprecated ``limit`` (= limitSize)
            shown = {k: {"limit": q.get("limitSize", -1), **q} for k, q in shown.items()}
        for key in keys:
            out[key] = {cluster: shown} if per_cluster else shown
    return out


def _namespace_policies(
    service: ClusterService, namespace: NamespaceName, stored: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Pulsar's Policies JSON of a namespace: its bundles, permissions and the policies
    stored for it, Pulsar's defaults for the rest."""
    layout = service.lookups.layout(namespace)
    auth = service.permissions.of(namespace)
    return {
        "auth_policies": auth.to_dict(),
        "replication_clusters": service.replication.stored(namespace),
        "allowed_clusters": [],
        "bundles": layout.bundles.to_json(),
        "backlog_quota_map": {},
        "clusterDispatchRate": {},
        "topicDispatchRate": {},
        "subscriptionDispatchRate": {},
        "replicatorDispatchRate": {},
        "clusterSubscribeRate": {},
        "publishMaxMessageRate": {},
        "latency_stats_sample_rate": {},
        "deleted": False,
        "encryption_required": False,
        "subscription_auth_mode": auth.subscription_auth_mode.value,
        "offload_threshold": -1,
        "offload_threshold_in_seconds": -1,
        "schema_compatibility_strategy": "UNDEFINED",
        "is_allow_auto_update_schema": True,
        "schema_validation_enforced": False,
        "subscription_types_enabled": [],
        "properties": {},
        "migrated": False,
        **_stored_policies(stored, service.identity.cluster),
    }


async def get_namespace(
    cluster: LiveCluster, request: web.Request, *, policies: PolicySource
) -> web.StreamResponse:
    service = cluster.service
    namespace = namespace_of(request)
    check_admin(service, request, namespace.tenant)
    service.require_ready()
    await service.lookups.refresh()
    if service.store.layout(namespace) is None:
        raise NotFoundError("Namespace does not exist")
    svc = policies()
    stored = (
        None
        if svc is None
        else svc.get(PolicyTarget.namespace_of(namespace.tenant, namespace.namespace))
    )
    return web.json_response(_namespace_policies(service, namespace, stored))


async def delete_namespace(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    namespace = namespace_of(request)
    check_admin(service, request, namespace.tenant)
    service.require_ready()
    await asyncio.to_thread(service.admin.delete_namespace, namespace)
    return web.Response(status=204)


# -- topics ---------------------------------------------------------------------------------
def _namespace_of_path(request: web.Request) -> tuple[str, NamespaceName]:
    m = request.match_info
    domain = m["domain"]
    if domain not in ("persistent", "non-persistent"):
        raise NotFoundError(f"no admin resource for domain {domain!r}")
    return domain, NamespaceName(m["tenant"], m["namespace"])


async def list_topics(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Non-partitioned topics and every partition of the partitioned ones."""
    service = cluster.service
    domain, namespace = _namespace_of_path(request)
    check_admin(service, request, namespace.tenant)
    service.require_ready()
    await service.lookups.refresh()
    names: list[str] = []
    for record in service.admin.topics_of(namespace):
        if not record.topic.startswith(f"{domain}://"):
            continue
        if record.partitions == 0:
            names.append(record.topic)
        else:
            names.extend(f"{record.topic}-partition-{i}" for i in range(record.partitions))
    return web.json_response(names)


async def list_partitioned(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    domain, namespace = _namespace_of_path(request)
    check_admin(service, request, namespace.tenant)
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response(
        [
            r.topic
            for r in service.admin.topics_of(namespace)
            if r.partitions > 0 and r.topic.startswith(f"{domain}://")
        ]
    )


async def create_topic(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT /admin/v2/{domain}/{t}/{ns}/{topic}``: a non-partitioned topic."""
    service = cluster.service
    topic = topic_from_path(request, 3)
    check_admin(service, request, topic.tenant)
    body = await json_body(request)
    properties = _properties(body) if body is not None else {}
    service.require_ready()
    await service.lookups.refresh()
    if service.store.layout(topic.namespace_name) is None:
        raise NotFoundError("Namespace not found")
    await asyncio.to_thread(service.admin.create_topic, topic, 0, properties)
    return web.Response(status=204)


def _properties(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BadRequestError("topic properties must be a JSON object of strings")
    return dict(value)


async def delete_topic(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = topic_from_path(request, 3)
    check_admin(service, request, topic.tenant)
    service.require_ready()
    await service.lookups.refresh()
    await asyncio.to_thread(service.admin.delete_topic, topic, partitioned=False)
    return web.Response(status=204)


async def delete_partitioned(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = topic_from_path(request, 3)
    check_admin(service, request, topic.tenant)
    service.require_ready()
    await service.lookups.refresh()
    await asyncio.to_thread(service.admin.delete_topic, topic, partitioned=True)
    return web.Response(status=204)


async def update_partitions(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = topic_from_path(request, 3)
    check_admin(service, request, topic.tenant)
    body = java_int(await json_body(request), "the body (the number of partitions)")
    service.require_ready()
    await service.lookups.refresh()
    await asyncio.to_thread(service.admin.update_partitions, topic, body)
    return web.Response(status=204)


async def get_replication(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/namespaces/{t}/{ns}/replication``: its replication clusters."""
    service = cluster.service
    namespace = namespace_of(request)
    check_admin(service, request, namespace.tenant)
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response(service.replication.of(namespace))


async def set_replication(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``POST /admin/v2/namespaces/{t}/{ns}/replication`` (a JSON list): 204."""
    service = cluster.service
    namespace = namespace_of(request)
    check_admin(service, request, namespace.tenant)
    clusters = _strings(await json_body(request), "the replication clusters")
    service.require_ready()
    await asyncio.to_thread(service.replication.set, namespace, clusters)
    return web.Response(status=204)


# -- clusters and brokers -------------------------------------------------------------------
async def get_cluster(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/clusters/{cluster}``: ClusterData of a known cluster."""
    service = cluster.service
    role(service, request)
    name = request.match_info["cluster"]
    registered = service.clusters.get(name)
    if registered is not None:
        return web.json_response(registered.to_rest())
    if not service.clusters.exists(name) and name not in service.registry.clusters():
        raise NotFoundError("Cluster does not exist")
    live = service.registry.live_brokers(name)
    first = live[0] if live else None
    body: dict[str, Any] = {
        "serviceUrl": first.http_url if first is not None else None,
        "brokerServiceUrl": first.service_url if first is not None else None,
        "brokerClientTlsEnabled": False,
        "tlsAllowInsecureConnection": False,
        "brokerClientTlsEnabledWithKeyStore": False,
        "brokerClientTlsTrustStoreType": "JKS",
        "brokerClientTlsKeyStoreType": "JKS",
        "brokerClientSslFactoryPlugin": "org.apache.pulsar.common.util.DefaultPulsarSslFactory",
    }
    return web.json_response({k: v for k, v in body.items() if v is not None})


async def create_cluster(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT /admin/v2/clusters/{cluster}`` (super-user): 200, empty."""
    service = cluster.service
    check_super(service, request)
    body = await json_body(request)
    service.require_ready()
    await asyncio.to_thread(service.clusters.create, request.match_info["cluster"], body)
    return web.Response(status=200)


async def update_cluster(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``POST /admin/v2/clusters/{cluster}`` (super-user): 200, empty."""
    service = cluster.service
    check_super(service, request)
    body = await json_body(request)
    service.require_ready()
    await asyncio.to_thread(service.clusters.update, request.match_info["cluster"], body)
    return web.Response(status=200)


async def delete_cluster(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``DELETE /admin/v2/clusters/{cluster}`` (super-user): 204."""
    service = cluster.service
    check_super(service, request)
    service.require_ready()
    await asyncio.to_thread(service.clusters.delete, request.match_info["cluster"])
    return web.Response(status=204)


async def list_active_brokers(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/brokers``: the live brokers of this sidecar's cluster."""
    service = cluster.service
    check_super(service, request)
    live = service.registry.live_brokers(service.identity.cluster)
    return web.json_response(sorted(r.web_address for r in live))


def add_admin_routes(
    app: web.Application, cluster: LiveCluster, *, policies: PolicySource = lambda: None
) -> None:
    """Register the routes above, serving ``cluster`` (after :func:`add_lookup_routes`,
    before the generic topic-policy routes: ``…/partitions`` and ``…/partitioned`` must
    win). ``policies``: the sidecar's current policy service, if any."""
    tenant = "/admin/v2/tenants/{tenant}"
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    # Only topic domains: /admin/v2/namespaces/{t}/{ns}/{policy} is a namespace policy.
    nsp = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}"
    topic = f"{nsp}/{{topic}}"
    routes: list[tuple[str, str, ClusterHandler]] = [
        ("GET", "/admin/v2/tenants", list_tenants),
        ("GET", tenant, get_tenant),
        ("PUT", tenant, create_tenant),
        ("POST", tenant, update_tenant),
        ("DELETE", tenant, delete_tenant),
        ("GET", ns, functools.partial(get_namespace, policies=policies)),
        ("DELETE", ns, delete_namespace),
        ("GET", f"{ns}/replication", get_replication),
        ("POST", f"{ns}/replication", set_replication),
        ("GET", "/admin/v2/clusters/{cluster}", get_cluster),
        ("PUT", "/admin/v2/clusters/{cluster}", create_cluster),
        ("POST", "/admin/v2/clusters/{cluster}", update_cluster),
        ("DELETE", "/admin/v2/clusters/{cluster}", delete_cluster),
        ("GET", "/admin/v2/brokers", list_active_brokers),
        ("GET", f"{nsp}/partitioned", list_partitioned),
        ("GET", nsp, list_topics),
        ("PUT", topic, create_topic),
        ("DELETE", topic, delete_topic),
        ("POST", f"{topic}/partitions", update_partitions),
        ("DELETE", f"{topic}/partitions", delete_partitioned),
    ]
    add_cluster_routes(app, cluster, routes)
