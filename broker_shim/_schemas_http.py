"""Pulsar admin REST for the schema registry (what ``pulsar-admin schemas upload``, ``get``,
``delete`` and ``compatibility`` and ``PulsarAdmin.schemas()`` call), paths and bodies as
Pulsar's ``SchemasResource`` (v2)::

    GET    /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema            GetSchemaResponse
    GET    /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema/{version}  GetSchemaResponse
    GET    /admin/v2/schemas/{tenant}/{namespace}/{topic}/schemas
                                                     -> {"getSchemaResponses": [GetSchemaResponse…]}
    POST   /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema            PostSchemaPayload
                                                     -> 200 {"version": {"version": N}}
    DELETE /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema[?force=true] -> {"version": N}
    POST   /admin/v2/schemas/{tenant}/{namespace}/{topic}/compatibility     PostSchemaPayload
                        -> 202 {"compatibility": true, "schemaCompatibilityStrategy": "FULL"}
    POST   /admin/v2/schemas/{tenant}/{namespace}/{topic}/version           PostSchemaPayload
                                                     -> 200 {"version": N} (-1: none)

Where each answer comes from (``apache/pulsar``):

* the routes, statuses and the 409/422 of an upload: ``pulsar-broker/…/admin/v2/
  SchemasResource.java`` (an upload answers 200 with ``PostSchemaResponse``, whose version
  is a ``LongSchemaVersion`` object, hence the nested ``{"version": N}``; its 409 and 422
  are ``Response.status(code, reason)`` without a body, which Jetty answers with the reason
  in the status line and its JSON error page ``{"message", "url", "status"}``; the
  compatibility test ``Response.accepted()``, 202);
* authorization, "Schema not found" (404 for none, a deleted latest version, a deleted or
  unknown version, or a namespace that does not exist) and ``{"getSchemaResponses": …}``:
  ``…/admin/impl/SchemasResourceBase.java`` (uploads, deletes and tests need a tenant
  admin; reads and version lookups the topic's GET_METADATA, i.e. a role that may look the
  topic up);
* what is stored, deleted and compared: ``…/service/schema/SchemaRegistryServiceImpl.java``,
  ``…/schema/validator/*.java``, ``AvroSchemaBasedCompatibilityCheck.java``,
  ``SchemaCompatibilityCheck.java`` (see :mod:`sync.cluster._schema_compat`);
* the bodies: ``pulsar-common/…/protocol/schema/`` ``GetSchemaResponse``,
  ``GetAllVersionsSchemaResponse``, ``PostSchemaPayload``, ``PostSchemaResponse``,
  ``DeleteSchemaResponse``, ``IsCompatibilityResponse`` (Lombok's ``isCompatibility()``
  getter makes Jackson name it ``compatibility``) and ``LongSchemaVersionResponse``.

Every answer above was checked against a real Pulsar 4.0.7 (``tests/compat/``, the
``schema-…`` cases). Where this differs from Pulsar, on purpose: Pulsar answers an
incompatible schema or invalid schema data in a compatibility test, an unknown schema type,
a missing ``type``/``schema``, a JSON schema in the pre-Avro ``JsonSchema`` format and a
version that is not a number with a 500; here they are 409 (as an upload's), 422, 400, 422
and 412. Pulsar deletes the schema of a topic in a namespace that does not exist (200, a
marker written); here that is 404 "Namespace does not exist", as for an upload and a
compatibility test. Other refusals carry ``{"reason": …}``, as Pulsar's.

Everything a request carries is checked before anything is read from or written to Kafka.
"""

from __future__ import annotations

import asyncio
import re

from aiohttp import web

from sync import TopicName
from sync.cluster import TopicOperation, parse_schema_payload, validate_schema_data
from sync.errors import ConflictError, InvalidInputError, UnprocessableError

from ._cluster_http import ClusterHandler, add_cluster_routes, check_admin, check_topic, role
from ._http_errors import error_page, http_status
from ._http_shell import JAVA_LONG_MAX, JAVA_LONG_MIN, json_body, query_flag, topic_from_path
from ._live_cluster import LiveCluster

__all__ = ["add_schema_routes"]

_LONG = re.compile(r"[+-]?[0-9]+")


def _topic(request: web.Request) -> TopicName:
    """The persistent topic of ``/admin/v2/schemas/{tenant}/{namespace}/{topic}/…``."""
    return topic_from_path(request, 4, domain="persistent")


def _version(text: str) -> int:
    """A version as Java's ``Long.parseLong`` reads it.

    Raises:
        InvalidInputError: not a Java long (412).
    """
    if _LONG.fullmatch(text) and JAVA_LONG_MIN <= int(text) <= JAVA_LONG_MAX:
        return int(text)
    raise InvalidInputError(f'Invalid schema version: For input string: "{text}"')


async def get_schema(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = _topic(request)
    check_topic(service, request, topic, TopicOperation.LOOKUP)
    text = request.match_info.get("version")
    version = None if text is None else _version(text)
    service.require_ready()
    await service.lookups.refresh()
    schemas = service.schemas
    entry = schemas.latest(topic) if version is None else schemas.version(topic, version)
    return web.json_response(entry.response())


async def get_all_schemas(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = _topic(request)
    check_topic(service, request, topic, TopicOperation.LOOKUP)
    service.require_ready()
    await service.lookups.refresh()
    versions = service.schemas.versions(topic)
    return web.json_response({"getSchemaResponses": [v.response() for v in versions]})


async def post_schema(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = _topic(request)
    check_admin(service, request, topic.tenant)
    try:
        payload = parse_schema_payload(await json_body(request))
        validate_schema_data(payload)
        service.require_ready()
        user = role(service, request) or ""
        version = await asyncio.to_thread(service.schemas.post, topic, payload, user)
    except (ConflictError, UnprocessableError) as exc:
        # Pulsar: Response.status(409 or 422, reason), no entity: Jetty's error page
        return error_page(request, http_status(exc), str(exc))
    return web.json_response({"version": {"version": version}})


async def delete_schema(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = _topic(request)
    check_admin(service, request, topic.tenant)
    force = query_flag(request.query, "force")
    service.require_ready()
    user = role(service, request) or ""
    version = await asyncio.to_thread(service.schemas.delete, topic, user, force=force)
    return web.json_response({"version": version})


async def post_compatibility(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = _topic(request)
    check_admin(service, request, topic.tenant)
    payload = parse_schema_payload(await json_body(request))
    validate_schema_data(payload)
    service.require_ready()
    await service.lookups.refresh()
    strategy = await asyncio.to_thread(service.schemas.test_compatibility, topic, payload)
    body = {"compatibility": True, "schemaCompatibilityStrategy": strategy.value}
    return web.json_response(body, status=202)


async def get_version(cluster: LiveCluster, request: web.Request) -> web.StreamResponse:
    service = cluster.service
    topic = _topic(request)
    check_topic(service, request, topic, TopicOperation.LOOKUP)
    payload = parse_schema_payload(await json_body(request))
    service.require_ready()
    await service.lookups.refresh()
    return web.json_response({"version": service.schemas.find_version(topic, payload)})


def add_schema_routes(app: web.Application, cluster: LiveCluster) -> None:
    """Register the routes above (before the generic ``/admin/v2/{domain}/…`` routes,
    whose ``{domain}`` would take ``schemas``)."""
    base = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
    routes: list[tuple[str, str, ClusterHandler]] = [
        ("GET", f"{base}/schema", get_schema),
        ("GET", f"{base}/schema/{{version}}", get_schema),
        ("GET", f"{base}/schemas", get_all_schemas),
        ("POST", f"{base}/schema", post_schema),
        ("DELETE", f"{base}/schema", delete_schema),
        ("POST", f"{base}/compatibility", post_compatibility),
        ("POST", f"{base}/version", get_version),
    ]
    add_cluster_routes(app, cluster, routes)
