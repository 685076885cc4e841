"""The HTTP shell every route of the sidecar shares: one middleware, one way to read a request.

Every route (policies, lookups, admin, compaction, WebSocket upgrades, the sidecar's
own) is served by an app from :func:`http_app`, inside its one middleware,
:func:`pulsar_answers`, which answers:

* a library error (:class:`sync.errors.PolicySyncError`, raised anywhere below a handler)
  with Pulsar's status and ``{"reason": ...}``, from the one table in
  :mod:`broker_shim._http_errors`;
* a body of a media type Pulsar's admin resources do not read (a form, octet-stream, XML,
  or no ``Content-Type`` at all): 415 Unsupported Media Type, before the handler runs, as
  Pulsar 4.0.7 answers (it reads ``application/json``, ``application/*+json``,
  ``text/plain`` and ``*/*``). Before anything else, so a bad request never waits on
  Kafka (issue 11, chaos run 13: a form POST to an unknown topic got 503 during a broker
  outage, from the refresh that looks the topic up);
* a charset Python does not know (``Content-Type: application/json; charset=bogus``):
  415, before the handler runs too;
* a body that is not valid in its charset: 400;
* JSON nested deeper than the parser's recursion limit: 400;
* JSON that does not parse (a handler that forgot to map it): 400;
* a method a known admin path does not take (aiohttp's 405): Jersey's 405, through Jetty's
  error page (:func:`broker_shim._http_errors.error_page`), as Pulsar 4.0.7 answers;

and gives every 503 (not ready, bundle being moved, no owner yet) a ``Retry-After``, so
Pulsar clients and load balancers retry instead of giving up. A request that cannot be
decoded is the client's fault: never aiohttp's bare 500 "Server got itself in trouble"
(issue 11: deeply nested JSON, invalid UTF-8, random bytes, a bogus charset).

Reading a request, in one place each:

* every JSON body and JSON query-string value is parsed by :func:`json_body` /
  :func:`json_value` (the library's strict parser): malformed JSON, NaN, Infinity,
  duplicate keys, an integer no Java long holds (a 5,000-digit one included) and a number
  no double holds (``1e999``) are 400 with a reason, as Pulsar's Jackson answers them,
  before the handler looks anything up in Kafka; :func:`java_int` binds a Java ``int``;
* a boolean query parameter is read by :func:`query_flag`;
* topic names in URL paths are decoded by :func:`topic_from_path`, from the raw path, as
  Pulsar does: so ``%25`` and ``%FF`` mean the same on the policy, lookup and WebSocket
  routes, and one name has one key.

A request redirected to a topic's owner goes to :func:`owner_base_url`: the owner's
``https://`` URL when the request came over HTTPS (``--http-port-tls``), else its
``http://`` one.
"""

from __future__ import annotations

import codecs
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from sync import InvalidPolicyError, NotFoundError, TopicName, kafka_topic_of, parse_policy_json
from sync.errors import BadRequestError, InvalidInputError, PolicySyncError

from ._http_errors import RETRY_AFTER_S, error_page, error_response, reason_response

logger = logging.getLogger(__name__)

__all__ = [
    "JAVA_INT_MAX",
    "JAVA_INT_MIN",
    "JAVA_LONG_MAX",
    "JAVA_LONG_MIN",
    "HTTPS_URL_OF",
    "Handler",
    "http_app",
    "java_int",
    "json_body",
    "json_value",
    "owner_base_url",
    "pulsar_answers",
    "query_flag",
    "topic_from_path",
]

#: An aiohttp request handler.
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The ``https://`` URL of the sidecar serving at an ``http://`` URL (None: it serves no
#: HTTPS), for redirects of requests that came over HTTPS (set by the app with a cluster).
HTTPS_URL_OF: web.AppKey[Callable[[str], str | None]] = web.AppKey("https-url-of")


def owner_base_url(request: web.Request, http_url: str) -> str:
    """Where ``request`` is redirected at the sidecar serving at ``http_url``: that URL,
    or for a request that came over HTTPS the owner's ``https://`` URL, as Pulsar
    redirects (``isRequestHttps() ? webServiceUrlTls : webServiceUrl``).

    Raises:
        InvalidInputError: the request came over HTTPS and the owner serves none (412,
            Pulsar's answer): never downgraded to plain HTTP.
    """
    if not request.secure:
        return http_url
    https_url_of = request.app.get(HTTPS_URL_OF)
    found = None if https_url_of is None else https_url_of(http_url)
    if not found:
        raise InvalidInputError(
            f"Redirected cluster's service url is not configured (the owner at {http_url} "
            "serves no https://)"
        )
    return found


#: The body media types Pulsar's JAX-RS resources read (Jersey's JSON and text readers).
READABLE_MEDIA_TYPES = frozenset({"application/json", "text/plain", "*/*"})
#: The methods whose Pulsar resources read the body, and where those resources live
#: (the registry's own KV routes take any text).
_ENTITY_METHODS = frozenset({"POST", "PUT", "PATCH"})
PULSAR_ADMIN_PREFIX = "/admin/"


def _bad_media_type(request: web.Request) -> str | None:
    if "Content-Type" not in request.headers:
        return "a request body needs a Content-Type; send application/json"
    media = request.content_type.lower()
    if media in READABLE_MEDIA_TYPES or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return None
    return f"unsupported media type {media!r} for a request body; send application/json"


def _bad_charset(request: web.Request) -> str | None:
    try:
        charset = request.charset
    except (ValueError, LookupError):  # an unparsable Content-Type header
        return f"unparsable Content-Type {request.headers.get('Content-Type', '')!r}"
    if charset is None:
        return None
    try:
        codecs.lookup(charset)
    except LookupError:
        return f"unsupported charset {charset!r} in Content-Type; send UTF-8"
    return None


@web.middleware
async def pulsar_answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one error path of every route (see the module doc)."""
    refused = None
    if request.body_exists:
        if request.method in _ENTITY_METHODS and request.path.startswith(PULSAR_ADMIN_PREFIX):
            refused = _bad_media_type(request)
        refused = refused or _bad_charset(request)
    if refused is not None:
        return reason_response(415, refused)
    try:
        response = await handler(request)
    except PolicySyncError as exc:
        return error_response(request, exc)
    except web.HTTPMethodNotAllowed:
        if not request.path.startswith(PULSAR_ADMIN_PREFIX):
            raise
        return error_page(request, 405, "Method Not Allowed")  # Jersey's, on a known path
    except web.HTTPException as exc:
        if exc.status == 503 and "Retry-After" not in exc.headers:
            exc.headers["Retry-After"] = str(RETRY_AFTER_S)
        raise
    except UnicodeDecodeError as exc:
        return reason_response(
            400, f"request body is not valid {request.charset or 'UTF-8'} text: {exc.reason}"
        )
    except RecursionError:
        return reason_response(400, "request body nests too deeply to be parsed")
    except json.JSONDecodeError as exc:
        return reason_response(400, f"request body is not valid JSON: {exc}")
    if response.status == 503 and "Retry-After" not in response.headers:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def http_app() -> web.Application:
    """An aiohttp application whose routes answer as Pulsar does (:func:`pulsar_answers`)."""
    return web.Application(middlewares=[pulsar_answers])


def query_flag(
    query: Mapping[str, str], name: str, default: bool = False, *, lenient: bool = False
) -> bool:
    """The boolean query parameter ``name`` (``default`` when absent).

    The admin REST routes take ``true`` or ``false`` in any case (a blank value counts as
    absent) and refuse anything else with 412: Pulsar's JAX-RS binding would read a typo
    such as ``?applied=ture`` as false and answer something else than was asked.
    ``lenient``: Java's ``Boolean.parseBoolean``, as Pulsar's WebSocket proxy reads its
    parameters: ``true`` in any case (surrounding blanks ignored) is true, anything else
    false.

    Raises:
        InvalidInputError: not ``true`` or ``false`` (strict only; 412).
    """
    value = query.get(name)
    if value is None:
        return default
    if lenient:
        return value.strip().lower() == "true"
    if value == "":
        return default
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise InvalidInputError(f"query parameter {name} must be true or false, got {value!r}")
    return lowered == "true"


def json_value(text: str) -> Any:
    """``text`` (a request body or a query-string value) as JSON.

    Raises:
        BadRequestError: not strict JSON, or a number out of Java's range (400).
    """
    try:
        return parse_policy_json(text)
    except InvalidPolicyError as exc:
        raise BadRequestError(str(exc)) from exc


#: Java's ``int``: Pulsar binds partition and bundle counts to it.
JAVA_INT_MIN = -(2**31)
JAVA_INT_MAX = 2**31 - 1
#: Java's ``long``: the widest integer anywhere in Pulsar's REST and WebSocket APIs.
JAVA_LONG_MIN = -(2**63)
JAVA_LONG_MAX = 2**63 - 1


def java_int(value: Any, what: str) -> int:
    """``value`` bound to a Java ``int`` as Pulsar's Jackson binds it.

    Raises:
        BadRequestError: not a JSON integer, or outside ``int``'s range (400).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"{what} must be a JSON integer, got {value!r}")
    if not JAVA_INT_MIN <= value <= JAVA_INT_MAX:
        raise BadRequestError(
            f"{what} {value} is out of range of a Java int ({JAVA_INT_MIN} to {JAVA_INT_MAX})"
        )
    return value


async def json_body(request: web.Request) -> Any:
    """The request body as JSON (None when empty).

    Raises:
        BadRequestError: see :func:`json_value` (400).
    """
    text = await request.text()
    if not text.strip():
        return None
    return json_value(text)


@functools.lru_cache(maxsize=65_536)
def _topic(domain: str, tenant: str, namespace: str, local: str) -> TopicName:
    topic = TopicName.from_rest(domain, tenant, namespace, local, encoded=True)
    kafka_topic_of(topic)  # a name no Kafka topic can hold is refused here, before any I/O
    return topic


def topic_from_path(request: web.Request, first: int, *, domain: str | None = None) -> TopicName:
    """The topic whose four still-encoded segments start at path segment ``first`` (with
    ``domain``: its three segments tenant, namespace and name, as on Pulsar's
    ``/admin/v2/schemas/…`` paths, which name persistent topics).

    Pulsar decodes the local name itself (``java.net.URLDecoder``: ``+`` is a space), so the
    segments come from the raw path, not from aiohttp's decoded ``match_info`` (which keeps
    an invalid escape such as ``%FF`` literally while it decodes ``%25``).

    Raises:
        InvalidTopicNameError: not a valid topic name (412 on admin routes).
    """
    parts = request.raw_path.split("?", 1)[0].split("/")
    if domain is None:
        domain, tenant, namespace, local = parts[first : first + 4]
    else:
        tenant, namespace, local = parts[first : first + 3]
    if tenant in _DOT_SEGMENTS or namespace in _DOT_SEGMENTS:
        # Pulsar 4.0.7: 404 (its web server resolves dot segments; no such namespace).
        # Answered here, without asking Kafka whether such a namespace exists.
        raise NotFoundError("Namespace does not exist")
    return _topic(domain, tenant, namespace, local)


_DOT_SEGMENTS = frozenset({".", ".."})
