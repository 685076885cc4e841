"""Topic-policy REST handlers answering as Pulsar 4.0.7 does (issue 13, item 3).

``GET|POST|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/{policy}`` plus
``…/backlogQuotaMap`` (GET) and ``…/backlogQuota?backlogQuotaType=…`` (POST, DELETE).

Checks in Pulsar's order: a body (or a ``?messageTTL=``-style query value) that is not
strict JSON, or holds a number out of Java's range, is 400 (``_http_shell.json_value``),
and so is an integer its field's Java type cannot hold (``FieldCatalog.bind``), both
before any Kafka I/O; a partition (``…-partition-N``) is 412 "Not allowed to set/get topic
policy for a partition"; with the cluster registry on, a missing namespace is 404
"Namespace not found" and a topic never created is 404 "Topic … not found"; then Pulsar's
own value checks (412/400 with its reasons) and the catalog's type checks (400). Nothing
is written unless all pass. Every refusal is a library error (``InvalidInputError`` 412,
``BadRequestError`` 400, ``NotFoundError`` 404) answered by the shell's one middleware.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sync import (
    FieldCatalog,
    InvalidInputError,
    InvalidPolicyError,
    NamespaceName,
    NotFoundError,
    PolicyService,
    PolicySyncError,
    PolicyTarget,
    TopicName,
)
from sync.cluster import ClusterService, check_global_write, check_topic_replication
from sync.errors import BadRequestError

from ._http_errors import error_page
from ._http_shell import json_value, query_flag, topic_from_path
from ._policy_rest import (
    BACKLOG_QUOTA_TYPES,
    DEFAULT_BACKLOG_QUOTA,
    NAMESPACE_POLICIES,
    REST_POLICIES,
    RestPolicy,
)

__all__ = ["PolicyRoutes"]

_QUOTA_FIELD = "backLogQuotaMap"
_AUTO_CREATION_FIELD = "autoTopicCreationOverride"
_PARTITION_REASON = "Not allowed to set/get topic policy for a partition"

#: The policy service, READY (raises CacheStateError otherwise: 503).
ServiceOf = Callable[[], PolicyService]
#: The live cluster service (None without the cluster registry).
ClusterOf = Callable[[], ClusterService | None]
#: Writes a checked patch (the app's write path: the fence holder, forwarded if remote).
WriteFn = Callable[[PolicyService, PolicyTarget, dict[str, Any]], Awaitable[None]]


def _to_json(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if hasattr(value, "items"):
        return {k: _to_json(v) for k, v in value.items()}
    return value


def _quota_json(quotas: Any) -> dict[str, Any]:
    """Our BacklogQuota map as Pulsar shows it (with the deprecated ``limit`` = limitSize)."""
    out: dict[str, Any] = {}
    for kind, quota in (quotas or {}).items():
        body = _to_json(quota)
        out[kind] = {"limit": body.get("limitSize", -1), **body}
    return out


async def _refresh(cluster: ClusterService, refusal: InvalidInputError | None) -> None:
    """Bring the registry up to date (Kafka I/O); if Kafka cannot answer and the request
    is refused anyway, answer the refusal rather than the unavailability."""
    try:
        await cluster.lookups.refresh()
    except PolicySyncError:
        if refusal is None:
            raise
        raise refusal from None


class PolicyRoutes:
    """The handlers, bound to how the app finds its policy service and cluster service."""

    def __init__(
        self, service_of: ServiceOf, cluster_of: ClusterOf, write: WriteFn, catalog: FieldCatalog
    ) -> None:
        self._service_of = service_of
        self._cluster_of = cluster_of
        self._write_fn = write
        #: Checks values without the service: a refusal needs neither a READY cache nor Kafka.
        self._catalog = catalog

    # -- shared checks ------------------------------------------------------------------
    def _topic(self, request: web.Request) -> TopicName:
        # /admin/v2/{domain}/{tenant}/{namespace}/{topic}/{policy}: decoded like lookups.
        return topic_from_path(request, 3)

    async def _check_topic(
        self, request: web.Request, topic: TopicName, refusal: InvalidInputError | None = None
    ) -> None:
        """Pulsar's existence checks, then ``refusal`` (the request's value, checked
        beforehand without any I/O): a request already known to be refused gets its 4xx
        even when Kafka cannot tell whether the topic exists."""
        if topic.is_partition:
            raise InvalidInputError(_PARTITION_REASON)
        cluster = self._cluster_of()
        if cluster is not None:
            store = cluster.store
            if store.layout(topic.namespace_name) is None or store.topic(topic) is None:
                await _refresh(cluster, refusal)  # an admin call: see other sidecars' writes
            if store.layout(topic.namespace_name) is None:
                raise NotFoundError("Namespace not found")
            if store.topic(topic) is None:
                raise NotFoundError(f"Topic {topic.base.canonical} not found")
        if refusal is not None:
            raise refusal

    @staticmethod
    def _policy(request: web.Request) -> tuple[str, RestPolicy]:
        name = request.match_info["policy"]
        rest = REST_POLICIES.get(name)
        if rest is None:
            raise NotFoundError(
                f"unknown topic policy {name!r}; supported: "
                f"{', '.join(sorted([*REST_POLICIES, 'backlogQuota', 'backlogQuotaMap']))}"
            )
        return name, rest

    def _bind(self, field: str, value: Any) -> None:
        """Pulsar's JSON binding, before any check of Pulsar's own or any Kafka I/O: an
        integer the field's Java type cannot hold is 400."""
        try:
            self._catalog.bind({field: value})
        except InvalidPolicyError as exc:
            raise BadRequestError(str(exc)) from exc

    def _local_cluster(self) -> str:
        cluster = self._cluster_of()
        return "standalone" if cluster is None else cluster.identity.cluster

    # -- GET ----------------------------------------------------------------------------
    async def get(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["policy"] == "backlogQuotaMap":
            return await self._get_quotas(request)
        name, rest = self._policy(request)
        topic = self._topic(request)
        is_global = query_flag(request.query, "isGlobal")
        applied = query_flag(request.query, "applied")
        await self._check_topic(request, topic)
        svc = self._service_of()
        if applied:
            value = svc.applied(topic).get(rest.field)
            if value is not None and value == rest.undefined:
                value = None
            if value is None:
                value = [self._local_cluster()] if name == "replication" else rest.default
        else:
            found = svc.get(PolicyTarget.for_topic(topic, is_global=is_global))
            value = None if found is None else found.get(rest.field)
            if value is None:
                value = rest.unset_body
        if value is None:
            # Pulsar: 200 with an empty body for most unset policies, 204 for a few.
            return web.Response(status=rest.unset_status)
        return web.json_response(_to_json(value))

    async def _get_quotas(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        is_global = query_flag(request.query, "isGlobal")
        applied = query_flag(request.query, "applied")
        await self._check_topic(request, topic)
        svc = self._service_of()
        if applied:
            quotas = svc.applied(topic).get(_QUOTA_FIELD)
            if not quotas:
                defaults = {k: dict(DEFAULT_BACKLOG_QUOTA) for k in BACKLOG_QUOTA_TYPES}
                return web.json_response(defaults)
        else:
            found = svc.get(PolicyTarget.for_topic(topic, is_global=is_global))
            quotas = None if found is None else found.get(_QUOTA_FIELD)
        return web.json_response(_quota_json(quotas))

    # -- POST ---------------------------------------------------------------------------
    async def set(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["policy"] == "backlogQuota":
            if request.method != "POST":
                return web.Response(status=405)
            return await self._set_quota(request)
        name, rest = self._policy(request)
        if request.method != rest.set_method:
            return error_page(request, 405, "Method Not Allowed")
        topic = self._topic(request)
        is_global = query_flag(request.query, "isGlobal")
        if rest.query_param is not None and rest.query_param in request.query:
            text = request.query[rest.query_param]
        else:
            text = await request.text()
        if not text.strip():
            raise BadRequestError(f"{name}: the request has no value; send it as the JSON body")
        value = rest.bound(json_value(text))
        self._bind(rest.field, value)
        if rest.undefined is not None and value == rest.undefined:
            value = None  # Pulsar stores null: the policy is unset
        extra = (
            (lambda: self._check_replication(value, is_global, topic))
            if name == "replication"
            else None
        )
        patch, refusal = self._decide(rest, value, extra)
        await self._check_topic(request, topic, refusal)
        await self._write(request, topic, is_global, patch)
        return web.Response(status=204)

    def _decide(
        self, rest: RestPolicy, value: Any, extra: Callable[[], None] | None = None
    ) -> tuple[dict[str, Any], InvalidInputError | None]:
        """The patch that writes ``value``, or why it is refused: Pulsar's value checks
        and the catalog's, all without I/O. The refusal is raised only after the existence
        checks, in Pulsar's order (see :meth:`_check_topic`)."""
        try:
            if extra is not None:
                extra()
            refused = None if rest.check is None else rest.check(value)
            if refused is not None:
                raise refused
            return self._checked({rest.field: rest.completed(value)}), None
        except InvalidInputError as exc:
            return {}, exc

    def _check_replication(self, value: Any, is_global: bool, topic: TopicName) -> None:
        """Pulsar's checks of a topic's replication clusters, on the registry view (no I/O;
        the one implementation, shared with ``policyctl``: ``check_topic_replication``)."""
        cluster = self._cluster_of()
        check_topic_replication(
            None if cluster is None else cluster.store,
            self._local_cluster(),
            topic.namespace_name,
            value,
            is_global=is_global,
        )

    def _checked(self, patch: dict[str, Any]) -> dict[str, Any]:
        """``patch`` checked by the policy catalog (no I/O, whatever state the cache is in)."""
        try:
            return self._catalog.validate_patch(patch)
        except InvalidPolicyError as exc:
            # A value of the wrong type or shape: Pulsar's JSON binding refuses it with 400.
            raise BadRequestError(str(exc)) from exc

    async def _write(
        self, request: web.Request, topic: TopicName, is_global: bool, patch: dict[str, Any]
    ) -> None:
        svc = self._service_of()
        if is_global:
            self._check_local_replicates(topic)
        target = PolicyTarget.for_topic(topic, is_global=is_global)
        await self._write_fn(svc, target, self._checked(patch))

    def _check_local_replicates(self, topic: TopicName) -> None:
        """A global policy is written in a cluster of the namespace's replication clusters
        (Pulsar's ``PulsarWebResource.checkLocalOrGetPeerReplicationCluster``: 412)."""
        cluster = self._cluster_of()
        if cluster is not None:
            check_global_write(cluster.store, cluster.identity.cluster, topic.namespace_name)

    def _quota_type(self, request: web.Request) -> str:
        kind = request.query.get("backlogQuotaType") or BACKLOG_QUOTA_TYPES[0]
        if kind not in BACKLOG_QUOTA_TYPES:
            raise NotFoundError(
                f"backlogQuotaType {kind!r} is not one of {', '.join(BACKLOG_QUOTA_TYPES)}",
            )
        return kind

    async def _set_quota(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        is_global = query_flag(request.query, "isGlobal")
        kind = self._quota_type(request)
        value = json_value(await request.text())
        if not isinstance(value, dict):
            raise BadRequestError("backlogQuota must be a JSON object")
        quota = {k: v for k, v in value.items() if k != "limit"}
        if "limitSize" not in quota and "limit" in value:
            quota["limitSize"] = value["limit"]
        self._bind(_QUOTA_FIELD, {kind: quota})
        refusal = None
        try:
            self._checked({_QUOTA_FIELD: {kind: quota}})
        except InvalidInputError as exc:
            refusal = exc
        await self._check_topic(request, topic, refusal)
        svc = self._service_of()
        found = svc.get(PolicyTarget.for_topic(topic, is_global=is_global))
        current = _to_json(found.get(_QUOTA_FIELD) if found is not None else None) or {}
        await self._write(request, topic, is_global, {_QUOTA_FIELD: {**current, kind: quota}})
        return web.Response(status=204)

    # -- DELETE -------------------------------------------------------------------------
    async def delete(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["policy"] == "backlogQuota":
            return await self._delete_quota(request)
        _name, rest = self._policy(request)
        if not rest.deletable:
            return error_page(request, 405, "Method Not Allowed")
        topic = self._topic(request)
        is_global = query_flag(request.query, "isGlobal")
        await self._check_topic(request, topic)
        await self._write(request, topic, is_global, {rest.field: None})
        return web.Response(status=204)

    async def _delete_quota(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        is_global = query_flag(request.query, "isGlobal")
        kind = self._quota_type(request)
        await self._check_topic(request, topic)
        svc = self._service_of()
        found = svc.get(PolicyTarget.for_topic(topic, is_global=is_global))
        current = _to_json(found.get(_QUOTA_FIELD) if found is not None else None) or {}
        current.pop(kind, None)
        await self._write(request, topic, is_global, {_QUOTA_FIELD: current or None})
        return web.Response(status=204)

    # -- namespace level ----------------------------------------------------------------
    @staticmethod
    def _namespace_rest(request: web.Request) -> tuple[NamespaceName, RestPolicy]:
        m = request.match_info
        rest = NAMESPACE_POLICIES.get(m["policy"])
        if rest is None:
            raise NotFoundError(
                f"unknown namespace policy {m['policy']!r}; supported: "
                f"{', '.join(sorted(NAMESPACE_POLICIES))}"
            )
        return NamespaceName(m["tenant"], m["namespace"]), rest

    async def _check_namespace(
        self,
        request: web.Request,
        namespace: NamespaceName,
        refusal: InvalidInputError | None = None,
    ) -> None:
        """404 for a namespace never created, then ``refusal`` (see :meth:`_check_topic`)."""
        cluster = self._cluster_of()
        if cluster is not None:
            if cluster.store.layout(namespace) is None:
                await _refresh(cluster, refusal)
            if cluster.store.layout(namespace) is None:
                raise NotFoundError("Namespace does not exist")
        if refusal is not None:
            raise refusal

    async def _namespace_policy(self, request: web.Request) -> tuple[NamespaceName, RestPolicy]:
        namespace, rest = self._namespace_rest(request)
        await self._check_namespace(request, namespace)
        return namespace, rest

    async def ns_get(self, request: web.Request) -> web.StreamResponse:
        namespace, rest = await self._namespace_policy(request)
        svc = self._service_of()
        found = svc.get(PolicyTarget.namespace_of(namespace.tenant, namespace.namespace))
        value = None if found is None else found.get(rest.field)
        if value is None:
            value = rest.unset_body
        if value is None:
            return web.Response(status=200)  # Pulsar: an unset namespace policy is empty
        body = _to_json(value)
        if rest.field == _AUTO_CREATION_FIELD:  # Pulsar's JSON leaves out unset fields
            body = {k: v for k, v in body.items() if v is not None}
        return web.json_response(body)

    async def ns_set(self, request: web.Request) -> web.StreamResponse:
        text = await request.text()
        if not text.strip():
            raise BadRequestError("the request has no value; send it as the JSON body")
        value = json_value(text)
        namespace, rest = self._namespace_rest(request)
        if request.method != rest.set_method:
            return error_page(request, 405, "Method Not Allowed")
        value = rest.bound(value)
        self._bind(rest.field, value)
        patch, refusal = self._decide(rest, value)
        await self._check_namespace(request, namespace, refusal)
        await self._write_namespace(request, namespace, patch)
        return web.Response(status=204)

    async def ns_delete(self, request: web.Request) -> web.StreamResponse:
        namespace, rest = await self._namespace_policy(request)
        if not rest.deletable:
            # Pulsar has no DELETE for it: the request reaches its namespace-bundle route
            raise InvalidInputError(f"Invalid bundle range: {request.match_info['policy']}")
        await self._write_namespace(request, namespace, {rest.field: None})
        return web.Response(status=204)

    async def _write_namespace(
        self, request: web.Request, namespace: NamespaceName, patch: dict[str, Any]
    ) -> None:
        svc = self._service_of()
        target = PolicyTarget.namespace_of(namespace.tenant, namespace.namespace)
        await self._write_fn(svc, target, self._checked(patch))
