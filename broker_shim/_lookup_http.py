"""HTTP routes of the registry, bundles, ownership and lookup (aiohttp).

Pulsar-compatible (same paths, JSON shapes and status codes as a Pulsar broker)::

    GET  /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}          LookupData
         ?listenerName=NAME or header X-Pulsar-ListenerName: an advertised listener
    GET  /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle   "0x…_0x…" (raw)
    GET  /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions      {"partitions": N}
    PUT  /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions      body N -> 204
    GET  /admin/v2/clusters                                              ["standalone"]
    GET  /admin/v2/brokers/{cluster}                                     ["host:port", …]
    GET  /admin/v2/namespaces/{tenant}                                   ["tenant/ns", …]
    PUT  /admin/v2/namespaces/{tenant}/{namespace}                       body (optional)
         {"bundles": {"numBundles": N}} or {"bundles": {"boundaries": […]}} -> 204
    GET  /admin/v2/namespaces/{tenant}/{namespace}/bundles     {"boundaries": […], "numBundles": N}
    PUT  /admin/v2/namespaces/{tenant}/{namespace}/unload                             -> 204
    PUT  /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload                    -> 204
    PUT  /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split
         ?unload=false&splitAlgorithmName=range_equally_divide|topic_count_equally_divide -> 204

NameServer (RocketMQ semantics, JSON in RocketMQ's field names)::

    GET    /registry/v1/route/{domain}/{tenant}/{namespace}/{topic}      TopicRouteData
    GET    /registry/v1/cluster-info                 {"brokerAddrTable", "clusterAddrTable"}
    GET    /registry/v1/topics                                           {"topicList": […]}
    GET    /registry/v1/kv/{namespace}                                   {"table": {k: v}}
    GET    /registry/v1/kv/{namespace}/{key}                             {"value": v}
    PUT    /registry/v1/kv/{namespace}/{key}         body: the value (text) -> 204
    DELETE /registry/v1/kv/{namespace}/{key}                                        -> 204
    POST   /registry/v1/brokers/{broker_name}/wipe-write-perm            {"wipeTopicCount": n}
    POST   /registry/v1/brokers/{broker_name}/add-write-perm             {"addTopicCount": n}

Operations::

    GET    /policy-sync/v1/cluster        this sidecar's view: state, slots, live brokers
    GET    /policy-sync/v1/ownership      {"bundles": {bundle: record}} of current bundles

Errors are ``{"reason": "…"}``: 412 invalid name or value, 404 missing, 409 exists, 401 no
valid token, 403 not allowed, 429 "Failed due to too many pending lookup requests", 503
no owner yet / "Namespace bundle … is being unloaded" / still starting.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from sync.cluster import TopicOperation
from sync.errors import BadRequestError, InvalidInputError, NotAcceptableError, NotFoundError

from ._cluster_http import (
    ClusterHandler,
    add_cluster_routes,
    check_admin,
    check_lookup,
    check_super,
    check_topic,
    namespace_of,
    role,
)
from ._http_shell import java_int, json_body, query_flag, topic_from_path
from ._live_cluster import LiveCluster
from ._metrics import LookupMetrics

logger = logging.getLogger(__name__)

__all__ = ["add_lookup_routes"]

_JSON = "application/json"
#: Content type of Pulsar's ``{"partitions": N, "properties": {…}}`` creation body.
_PARTITIONED_METADATA = "application/vnd.partitioned-topic-metadata+json"
_LISTENER_HEADER = "X-Pulsar-ListenerName"


# -- lookup ------------------------------------------------------------------------------
async def lookup_topic(
    cluster: LiveCluster, request: web.Request, *, metrics: LookupMetrics
) -> web.StreamResponse:
    """Pulsar ``GET /lookup/v2/topic/…``: the owner's LookupData."""
    started = time.perf_counter()
    try:
        service = cluster.service
        topic = topic_from_path(request, 4)
        if service.auth is not None:
            check_topic(service, request, topic, TopicOperation.LOOKUP)
        service.require_ready()
        listener = request.query.get("listenerName") or request.headers.get(_LISTENER_HEADER)
        lookups = service.lookups
        body = lookups.lookup_now(topic, listener)
        if body is None:
            body = await lookups.lookup(topic, listener)
    except Exception as exc:
        metrics.observe(time.perf_counter() - started, exc)
        raise
    metrics.observe(time.perf_counter() - started)
    return web.Response(body=body, content_type=_JSON)


async def topic_bundle(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET …/bundle``: the bundle range serving the topic (a raw string)."""
    service = cluster.service
    topic = topic_from_path(request, 4)
    check_topic(service, request, topic, TopicOperation.LOOKUP)
    service.require_ready()
    await service.lookups.layout_fresh(topic.namespace_name)
    bundle = service.lookups.bundle_of(topic)
    return web.Response(text=bundle.rpartition("/")[2], content_type=_JSON)


# -- partitioned topics ------------------------------------------------------------------
async def get_partitions(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET …/partitions``: ``{"partitions": N}`` (0 when not partitioned)."""
    service = cluster.service
    topic = topic_from_path(request, 3)
    check_topic(service, request, topic, TopicOperation.LOOKUP)
    service.require_ready()
    partitions = await service.lookups.partitions_fresh(topic)
    record = service.store.topic(topic)
    if (
        record is None
        and not topic.is_partition
        and not query_flag(request.query, "checkAllowAutoCreation")
    ):
        # Pulsar 4: metadata of a topic never created is 404, unless the client asks
        # whether auto-creation would make it (then: 0, a non-partitioned topic).
        if service.store.layout(topic.namespace_name) is None:
            raise NotFoundError("Namespace not found")
        raise NotFoundError(f"Topic {topic.base.canonical} not found")
    body: dict[str, Any] = {"partitions": partitions, "deleted": False}
    if record is not None and record.properties and not topic.is_partition:
        body["properties"] = dict(record.properties)
    return web.json_response(body)


async def create_partitions(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT …/partitions`` with body N: create the topic and its Kafka topic."""
    service = cluster.service
    topic = topic_from_path(request, 3)
    check_admin(service, request, topic.tenant)
    body = await json_body(request)
    properties: dict[str, str] = {}
    if isinstance(body, dict) and request.content_type == _PARTITIONED_METADATA:
        # Go pulsaradmin / Java createPartitionedTopic(t, n, properties).
        raw_properties = body.get("properties") or {}
        if not isinstance(raw_properties, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw_properties.items()
        ):
            raise BadRequestError("properties must be a JSON object of strings")
        properties = dict(raw_properties)
        body = body.get("partitions")
    body = java_int(body, "the request body (the number of partitions)")
    if body <= 0:
        raise NotAcceptableError("Number of partitions should be more than 0")
    service.require_ready()
    await service.lookups.refresh()
    if service.store.layout(topic.namespace_name) is None:
        raise NotFoundError("Namespace not found")
    await asyncio.to_thread(service.admin.create_topic, topic, body, properties)
    return web.Response(status=204)


# -- clusters and brokers ----------------------------------------------------------------
async def list_clusters(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/clusters``."""
    service = cluster.service
    role(service, request)
    names = set(service.registry.clusters()) | set(service.clusters.names())
    return web.json_response(sorted(names))


async def list_brokers(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/brokers/{cluster}``: live brokers as ``host:httpPort``."""
    service = cluster.service
    check_super(service, request)
    name = request.match_info["cluster"]
    known = set(service.registry.clusters()) | {service.identity.cluster}
    if name not in known:
        # Pulsar 4.0.7 answers a cluster it does not know with its own active brokers.
        name = service.identity.cluster
    return web.json_response(sorted(r.web_address for r in service.registry.live_brokers(name)))


# -- namespaces and bundles ----------------------------------------------------------------
async def list_namespaces(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/namespaces/{tenant}``."""
    service = cluster.service
    tenant = request.match_info["tenant"]
    check_lookup(service, request, tenant)
    service.require_ready()
    await service.lookups.refresh()
    names = service.admin.namespaces(tenant)
    if not names and tenant not in service.store.tenants:
        raise NotFoundError("Tenant not found")
    return web.json_response(names)


async def create_namespace(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT /admin/v2/namespaces/{tenant}/{namespace}`` (policies: bundles only)."""
    service = cluster.service
    try:
        namespace = namespace_of(request)
    except InvalidInputError as exc:
        raise InvalidInputError("Namespace name is not valid") from exc
    check_admin(service, request, namespace.tenant)
    body = await json_body(request)
    num_bundles: int | None = None
    boundaries: list[str] | None = None
    if body is not None:
        if not isinstance(body, dict):
            raise InvalidInputError("namespace policies must be a JSON object")
        bundles = body.get("bundles")
        if bundles is not None:
            if not isinstance(bundles, dict) or set(bundles) - {"numBundles", "boundaries"}:
                raise InvalidInputError(
                    'bundles must be {"numBundles": N} or {"boundaries": [...], "numBundles": N}'
                )
            raw_count = bundles.get("numBundles")
            if raw_count is not None:
                num_bundles = java_int(raw_count, "numBundles")
            raw_bounds = bundles.get("boundaries")
            if raw_bounds is not None:
                if not isinstance(raw_bounds, list) or not all(
                    isinstance(b, str) for b in raw_bounds
                ):
                    raise InvalidInputError("boundaries must be a list of hex strings")
                boundaries = raw_bounds
    service.require_ready()
    await service.lookups.refresh()
    await asyncio.to_thread(
        functools.partial(
            service.admin.create_namespace,
            namespace,
            num_bundles=num_bundles,
            boundaries=boundaries,
            require_tenant=True,
        )
    )
    return web.Response(status=204)


async def get_bundles(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET …/bundles``: ``{"boundaries": […], "numBundles": N}``."""
    service = cluster.service
    namespace = namespace_of(request)
    check_lookup(service, request, namespace.tenant)
    service.require_ready()
    await service.lookups.refresh()  # an admin read: include splits made elsewhere
    return web.json_response(service.lookups.layout(namespace).bundles.to_json())


async def split_bundle(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT …/{bundle}/split?unload=…&splitAlgorithmName=…``."""
    service = cluster.service
    namespace = namespace_of(request)
    check_admin(service, request, namespace.tenant)
    unload = query_flag(request.query, "unload")
    algorithm = request.query.get("splitAlgorithmName")
    service.require_ready()
    await asyncio.to_thread(
        service.admin.split_bundle,
        namespace,
        request.match_info["bundle"],
        algorithm=algorithm,
        unload=unload,
    )
    return web.Response(status=204)


async def unload_bundle(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT …/{bundle}/unload``."""
    service = cluster.service
    namespace = namespace_of(request)
    check_admin(service, request, namespace.tenant)
    service.require_ready()
    await service.admin.unload_bundle(namespace, request.match_info["bundle"])
    return web.Response(status=204)


async def unload_namespace(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT /admin/v2/namespaces/{tenant}/{namespace}/unload``."""
    service = cluster.service
    namespace = namespace_of(request)
    check_admin(service, request, namespace.tenant)
    service.require_ready()
    await service.admin.unload_namespace(namespace)
    return web.Response(status=204)


# -- NameServer ------------------------------------------------------------------------------
async def route_info(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_ROUTEINFO_BY_TOPIC."""
    service = cluster.service
    topic = topic_from_path(request, 4)
    check_topic(service, request, topic, TopicOperation.LOOKUP)
    service.require_ready()
    if service.store.topic(topic) is None:
        await service.lookups.refresh()
    return web.json_response(await service.lookups.route(topic))


async def cluster_info(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_BROKER_CLUSTER_INFO."""
    service = cluster.service
    role(service, request)
    return web.json_response(service.registry.cluster_info())


async def all_topics(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
    service = cluster.service
    role(service, request)
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response({"topicList": service.admin.topics()})


async def kv_list(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_KVLIST_BY_NAMESPACE."""
    service = cluster.service
    role(service, request)
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response({"table": service.admin.list_kv(request.match_info["namespace"])})


async def kv_get(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_KV_CONFIG."""
    service = cluster.service
    role(service, request)
    service.require_ready()
    await service.lookups.refresh()
    m = request.match_info
    return web.json_response({"value": service.admin.get_kv(m["namespace"], m["key"])})


async def kv_put(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ PUT_KV_CONFIG (the body is the value, as text)."""
    service = cluster.service
    check_super(service, request)
    m = request.match_info
    value = await request.text()
    service.require_ready()
    await asyncio.to_thread(service.admin.put_kv, m["namespace"], m["key"], value)
    return web.Response(status=204)


async def kv_delete(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ DELETE_KV_CONFIG."""
    service = cluster.service
    check_super(service, request)
    m = request.match_info
    service.require_ready()
    await asyncio.to_thread(service.admin.delete_kv, m["namespace"], m["key"])
    return web.Response(status=204)


async def wipe_write_perm(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ WIPE_WRITE_PERM_OF_BROKER."""
    service = cluster.service
    check_super(service, request)
    service.require_ready()
    count = await asyncio.to_thread(
        service.admin.wipe_write_perm, request.match_info["broker_name"]
    )
    return web.json_response({"wipeTopicCount": count})


async def add_write_perm(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """RocketMQ ADD_WRITE_PERM_OF_BROKER."""
    service = cluster.service
    check_super(service, request)
    service.require_ready()
    count = await asyncio.to_thread(service.admin.add_write_perm, request.match_info["broker_name"])
    return web.json_response({"addTopicCount": count})


# -- operations ---------------------------------------------------------------------------
async def cluster_status(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """This sidecar's view of its cluster."""
    service = cluster.service
    check_super(service, request)
    return web.json_response(service.status())


async def ownership(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    """Ownership records of every current bundle (503 unless READY: a service that is
    starting, replaying its table or replaced by a new incarnation has a partial view, and
    an observer would see versions go back)."""
    service = cluster.service
    check_super(service, request)
    service.require_ready()
    records = service.lookups.bundle_records()
    return web.json_response({"bundles": {k: v.to_rest() for k, v in sorted(records.items())}})


def add_lookup_routes(
    app: web.Application, cluster: LiveCluster, *, metrics: LookupMetrics | None = None
) -> None:
    """Register the routes above on ``app``, serving ``cluster``.

    Call this before registering the generic ``/admin/v2/{domain}/…/{policy}`` routes:
    aiohttp matches in registration order, and ``…/partitions`` must win. ``metrics``:
    where lookups are counted and timed (the sidecar's ``/metrics`` registry; default: a
    registry of their own).
    """
    metrics = metrics or LookupMetrics(CollectorRegistry())
    metrics.track(lambda: cluster.service)
    topic = "{domain}/{tenant}/{namespace}/{topic}"
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    routes: list[tuple[str, str, ClusterHandler]] = [
        ("GET", f"/lookup/v2/topic/{topic}/bundle", topic_bundle),
        ("GET", f"/lookup/v2/topic/{topic}", functools.partial(lookup_topic, metrics=metrics)),
        ("GET", "/admin/v2/clusters", list_clusters),
        ("GET", "/admin/v2/brokers/{cluster}", list_brokers),
        ("GET", "/admin/v2/namespaces/{tenant}", list_namespaces),
        ("PUT", ns, create_namespace),
        ("GET", f"{ns}/bundles", get_bundles),
        ("PUT", f"{ns}/unload", unload_namespace),
        ("PUT", f"{ns}/{{bundle}}/unload", unload_bundle),
        ("PUT", f"{ns}/{{bundle}}/split", split_bundle),
        ("GET", f"/admin/v2/{topic}/partitions", get_partitions),
        ("PUT", f"/admin/v2/{topic}/partitions", create_partitions),
        ("GET", f"/registry/v1/route/{topic}", route_info),
        ("GET", "/registry/v1/cluster-info", cluster_info),
        ("GET", "/registry/v1/topics", all_topics),
        ("GET", "/registry/v1/kv/{namespace}", kv_list),
        ("GET", "/registry/v1/kv/{namespace}/{key}", kv_get),
        ("PUT", "/registry/v1/kv/{namespace}/{key}", kv_put),
        ("DELETE", "/registry/v1/kv/{namespace}/{key}", kv_delete),
        ("POST", "/registry/v1/brokers/{broker_name}/wipe-write-perm", wipe_write_perm),
        ("POST", "/registry/v1/brokers/{broker_name}/add-write-perm", add_write_perm),
        ("GET", "/policy-sync/v1/cluster", cluster_status),
        ("GET", "/policy-sync/v1/ownership", ownership),
    ]
    add_cluster_routes(app, cluster, routes)
