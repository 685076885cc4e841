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
from collections.abc import Coroutine
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from sync import NamespaceName, TopicName
from sync.cluster import ClusterService, MemberState, ServiceState
from sync.errors import (
    BadRequestError,
    InvalidInputError,
    NotAcceptableError,
    NotFoundError,
)
from sync.messaging import OwnerInfo

from ._http_shell import Handler, java_int, json_body, query_flag, topic_from_path
from ._metrics import LookupMetrics
from ._supervisor import Backoff, supervise

logger = logging.getLogger(__name__)

__all__ = [
    "CLUSTER_KEY",
    "LOOKUP_METRICS_KEY",
    "CurrentService",
    "LookupOwnership",
    "add_lookup_routes",
]


class CurrentService:
    """The app's live :class:`ClusterService`; the supervisor replaces a failed one."""

    def __init__(self, service: ClusterService) -> None:
        self.service = service
        self.restarts = 0


class LookupOwnership:
    """This sidecar's lookups as the messaging engine's ``TopicOwnership`` (issue 5):
    a topic is local when this incarnation owns its bundle, else served at the owner's
    ``httpUrl``. Pass ``LookupOwnership(app[CLUSTER_KEY])`` to ``add_ws_routes``."""

    def __init__(self, current: CurrentService) -> None:
        self.current = current

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        """The live owner of ``topic``'s bundle (claimed first if it has none).

        Raises:
            UnavailableError: not ready, no owner in time, or the bundle is moving.
            NotFoundError: the topic's namespace does not exist.
        """
        service = self.current.service
        service.require_ready()
        live = await service.lookups.owner_of(topic)
        local = (
            live.broker_id == service.identity.broker_id and live.incarnation == service.incarnation
        )
        term = service.lookups.claim_of(topic) if local else None
        return OwnerInfo(
            local=local,
            http_url=live.registration.http_url,
            bundle=None if term is None else term[0],
            claim=None if term is None else str(term[1]),
        )


CLUSTER_KEY = web.AppKey("cluster", CurrentService)
LOOKUP_METRICS_KEY = web.AppKey("lookup-metrics", LookupMetrics)

_JSON = "application/json"
#: Content type of Pulsar's ``{"partitions": N, "properties": {…}}`` creation body.
_PARTITIONED_METADATA = "application/vnd.partitioned-topic-metadata+json"
_LISTENER_HEADER = "X-Pulsar-ListenerName"


def _service(request: web.Request) -> ClusterService:
    return request.app[CLUSTER_KEY].service


def _role(request: web.Request) -> str | None:
    """The authenticated role, or None when auth is off."""
    auth = _service(request).auth
    if auth is None:
        return None
    return auth.authenticate(request.headers.get("Authorization"))


def _check_lookup(request: web.Request, tenant: str) -> None:
    auth = _service(request).auth
    role = _role(request)
    if auth is not None and role is not None:
        auth.check_lookup(role, tenant)


def _check_admin(request: web.Request, tenant: str) -> None:
    auth = _service(request).auth
    role = _role(request)
    if auth is not None and role is not None:
        auth.check_tenant_admin(role, tenant)


def _check_super(request: web.Request) -> None:
    auth = _service(request).auth
    role = _role(request)
    if auth is not None and role is not None:
        auth.check_super_user(role)


def _topic(request: web.Request, first: int) -> TopicName:
    return topic_from_path(request, first)


def _namespace(request: web.Request) -> NamespaceName:
    m = request.match_info
    return NamespaceName(m["tenant"], m["namespace"])


# -- lookup ------------------------------------------------------------------------------
async def lookup_topic(request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /lookup/v2/topic/…``: the owner's LookupData."""
    metrics = request.app[LOOKUP_METRICS_KEY]
    started = time.perf_counter()
    try:
        service = _service(request)
        topic = _topic(request, 4)
        if service.auth is not None:
            _check_lookup(request, topic.tenant)
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


async def topic_bundle(request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET …/bundle``: the bundle range serving the topic (a raw string)."""
    service = _service(request)
    topic = _topic(request, 4)
    _check_lookup(request, topic.tenant)
    service.require_ready()
    await service.lookups.layout_fresh(topic.namespace_name)
    bundle = service.lookups.bundle_of(topic)
    return web.Response(text=bundle.rpartition("/")[2], content_type=_JSON)


# -- partitioned topics ------------------------------------------------------------------
async def get_partitions(request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET …/partitions``: ``{"partitions": N}`` (0 when not partitioned)."""
    service = _service(request)
    topic = _topic(request, 3)
    _check_lookup(request, topic.tenant)
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


async def create_partitions(request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT …/partitions`` with body N: create the topic and its Kafka topic."""
    service = _service(request)
    topic = _topic(request, 3)
    _check_admin(request, topic.tenant)
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
async def list_clusters(request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/clusters``."""
    service = _service(request)
    _role(request)
    names = set(service.registry.clusters()) | {service.identity.cluster}
    return web.json_response(sorted(names))


async def list_brokers(request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/brokers/{cluster}``: live brokers as ``host:httpPort``."""
    service = _service(request)
    _check_super(request)
    cluster = request.match_info["cluster"]
    known = set(service.registry.clusters()) | {service.identity.cluster}
    if cluster not in known:
        # Pulsar 4.0.7 answers a cluster it does not know with its own active brokers.
        cluster = service.identity.cluster
    return web.json_response(sorted(r.web_address for r in service.registry.live_brokers(cluster)))


# -- namespaces and bundles ----------------------------------------------------------------
async def list_namespaces(request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET /admin/v2/namespaces/{tenant}``."""
    service = _service(request)
    tenant = request.match_info["tenant"]
    _check_lookup(request, tenant)
    service.require_ready()
    await service.lookups.refresh()
    names = service.admin.namespaces(tenant)
    if not names and tenant not in service.store.tenants:
        raise NotFoundError("Tenant not found")
    return web.json_response(names)


async def create_namespace(request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT /admin/v2/namespaces/{tenant}/{namespace}`` (policies: bundles only)."""
    service = _service(request)
    try:
        namespace = _namespace(request)
    except InvalidInputError as exc:
        raise InvalidInputError("Namespace name is not valid") from exc
    _check_admin(request, namespace.tenant)
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


async def get_bundles(request: web.Request) -> web.StreamResponse:
    """Pulsar ``GET …/bundles``: ``{"boundaries": […], "numBundles": N}``."""
    service = _service(request)
    namespace = _namespace(request)
    _check_lookup(request, namespace.tenant)
    service.require_ready()
    await service.lookups.refresh()  # an admin read: include splits made elsewhere
    return web.json_response(service.lookups.layout(namespace).bundles.to_json())


async def split_bundle(request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT …/{bundle}/split?unload=…&splitAlgorithmName=…``."""
    service = _service(request)
    namespace = _namespace(request)
    _check_admin(request, namespace.tenant)
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


async def unload_bundle(request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT …/{bundle}/unload``."""
    service = _service(request)
    namespace = _namespace(request)
    _check_admin(request, namespace.tenant)
    service.require_ready()
    await service.admin.unload_bundle(namespace, request.match_info["bundle"])
    return web.Response(status=204)


async def unload_namespace(request: web.Request) -> web.StreamResponse:
    """Pulsar ``PUT /admin/v2/namespaces/{tenant}/{namespace}/unload``."""
    service = _service(request)
    namespace = _namespace(request)
    _check_admin(request, namespace.tenant)
    service.require_ready()
    await service.admin.unload_namespace(namespace)
    return web.Response(status=204)


# -- NameServer ------------------------------------------------------------------------------
async def route_info(request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_ROUTEINFO_BY_TOPIC."""
    service = _service(request)
    topic = _topic(request, 4)
    _check_lookup(request, topic.tenant)
    service.require_ready()
    if service.store.topic(topic) is None:
        await service.lookups.refresh()
    return web.json_response(await service.lookups.route(topic))


async def cluster_info(request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_BROKER_CLUSTER_INFO."""
    service = _service(request)
    _role(request)
    return web.json_response(service.registry.cluster_info())


async def all_topics(request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
    service = _service(request)
    _role(request)
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response({"topicList": service.admin.topics()})


async def kv_list(request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_KVLIST_BY_NAMESPACE."""
    service = _service(request)
    _role(request)
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response({"table": service.admin.list_kv(request.match_info["namespace"])})


async def kv_get(request: web.Request) -> web.StreamResponse:
    """RocketMQ GET_KV_CONFIG."""
    service = _service(request)
    _role(request)
    service.require_ready()
    await service.lookups.refresh()
    m = request.match_info
    return web.json_response({"value": service.admin.get_kv(m["namespace"], m["key"])})


async def kv_put(request: web.Request) -> web.StreamResponse:
    """RocketMQ PUT_KV_CONFIG (the body is the value, as text)."""
    service = _service(request)
    _check_super(request)
    m = request.match_info
    value = await request.text()
    service.require_ready()
    await asyncio.to_thread(service.admin.put_kv, m["namespace"], m["key"], value)
    return web.Response(status=204)


async def kv_delete(request: web.Request) -> web.StreamResponse:
    """RocketMQ DELETE_KV_CONFIG."""
    service = _service(request)
    _check_super(request)
    m = request.match_info
    service.require_ready()
    await asyncio.to_thread(service.admin.delete_kv, m["namespace"], m["key"])
    return web.Response(status=204)


async def wipe_write_perm(request: web.Request) -> web.StreamResponse:
    """RocketMQ WIPE_WRITE_PERM_OF_BROKER."""
    service = _service(request)
    _check_super(request)
    service.require_ready()
    count = await asyncio.to_thread(
        service.admin.wipe_write_perm, request.match_info["broker_name"]
    )
    return web.json_response({"wipeTopicCount": count})


async def add_write_perm(request: web.Request) -> web.StreamResponse:
    """RocketMQ ADD_WRITE_PERM_OF_BROKER."""
    service = _service(request)
    _check_super(request)
    service.require_ready()
    count = await asyncio.to_thread(service.admin.add_write_perm, request.match_info["broker_name"])
    return web.json_response({"addTopicCount": count})


# -- operations ---------------------------------------------------------------------------
async def cluster_status(request: web.Request) -> web.StreamResponse:
    """This sidecar's view of its cluster."""
    service = _service(request)
    _check_super(request)
    return web.json_response(service.status())


async def ownership(request: web.Request) -> web.StreamResponse:
    """Ownership records of every current bundle (503 unless READY: a service that is
    starting, replaying its table or replaced by a new incarnation has a partial view, and
    an observer would see versions go back)."""
    service = _service(request)
    _check_super(request)
    service.require_ready()
    records = service.lookups.bundle_records()
    return web.json_response({"bundles": {k: v.to_rest() for k, v in sorted(records.items())}})


_SUPERVISOR_KEY = web.AppKey("cluster-supervisor", asyncio.Task[None])


def _supervise_cluster(current: CurrentService, backoff: Backoff) -> Coroutine[Any, Any, None]:
    """The one supervisor (:mod:`broker_shim._supervisor`) watching the cluster service.

    It is replaced with a fresh incarnation when it (or its ownership member) FAILED, e.g.
    Kafka was unreachable at start or a process with the same broker id fenced this one.
    The back-off stops at 4 s: once Kafka is back, /health is 200 again within seconds, not
    after a 30 s back-off (issue 11). /health reads ``current.service``, which is swapped
    before the fresh incarnation starts.
    """

    def failure() -> str | None:
        service = current.service
        if service.state is ServiceState.FAILED or service.member.state is MemberState.FAILED:
            return f"cluster service of {service.identity.broker_id}: " + str(
                service.failure or service.member.failure
            )
        return None

    def healthy() -> bool:
        service = current.service
        ready = service.state is ServiceState.READY
        return ready and service.member.state is not MemberState.FAILED

    def start_fresh() -> None:
        fresh = current.service.restarted()
        current.service = fresh
        current.restarts += 1
        fresh.start()

    return supervise(
        "cluster service",
        failure=failure,
        healthy=healthy,
        close_failed=lambda: current.service.close(),
        start_fresh=start_fresh,
        backoff=backoff,
    )


def add_lookup_routes(
    app: web.Application,
    service: ClusterService,
    *,
    restart_backoff_s: float = 0.5,
    metrics: LookupMetrics | None = None,
) -> None:
    """Register the routes above on ``app`` and start/close ``service`` with it.

    Call this before registering the generic ``/admin/v2/{domain}/…/{policy}`` routes:
    aiohttp matches in registration order, and ``…/partitions`` must win. ``metrics``:
    where lookups are counted and timed (the sidecar's ``/metrics`` registry; default: a
    registry of their own, ``app[LOOKUP_METRICS_KEY].registry``).
    """
    current = CurrentService(service)
    app[CLUSTER_KEY] = current
    metrics = metrics or LookupMetrics(CollectorRegistry())
    metrics.track(lambda: current.service)
    app[LOOKUP_METRICS_KEY] = metrics
    topic = "{domain}/{tenant}/{namespace}/{topic}"
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    routes: list[tuple[str, str, Handler]] = [
        ("GET", f"/lookup/v2/topic/{topic}/bundle", topic_bundle),
        ("GET", f"/lookup/v2/topic/{topic}", lookup_topic),
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
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    # Tenants, namespaces, topics, clusters (issue 13): same service, same error mapping.
    from ._admin_http import add_admin_routes  # noqa: PLC0415 - it imports this module

    add_admin_routes(app)

    async def on_startup(app: web.Application) -> None:
        await asyncio.to_thread(service.start)
        app[_SUPERVISOR_KEY] = asyncio.create_task(
            _supervise_cluster(current, Backoff(initial_s=restart_backoff_s, max_s=4.0))
        )

    async def leave(app: web.Application) -> None:
        # First on a stop, as a Pulsar broker unloads its bundles first: the next owners
        # claim them while this sidecar still closes its clients and caches. Also on
        # cleanup, for a start that failed before the shutdown steps (a no-op otherwise).
        if _SUPERVISOR_KEY in app:
            app[_SUPERVISOR_KEY].cancel()
        await asyncio.to_thread(current.service.close)

    app.on_startup.append(on_startup)
    app.on_shutdown.append(leave)
    app.on_cleanup.append(leave)
