"""One place where malformed requests become 4xx answers, and "not now" becomes 503.

Every route of the sidecar (policies, lookups, admin, WebSocket upgrades) runs inside
:func:`malformed_input`. Whatever a handler does with the request (``request.text()``,
``json.loads``, Pulsar's strict policy parser), a request that cannot be decoded is the
client's fault and gets ``{"reason": ...}`` with a 4xx, never aiohttp's bare 500
"Server got itself in trouble" (issue 11: deeply nested JSON, invalid UTF-8, random
bytes, a bogus charset in the Content-Type):

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
* JSON that does not parse (a handler that forgot to map it): 400.

Every JSON body and JSON query-string value is parsed by :func:`json_body` /
:func:`json_value` (the library's strict parser): malformed JSON, NaN, Infinity, duplicate
keys, an integer no Java long holds (a 5,000-digit one included) and a number no double
holds (``1e999``) are 400 with a reason, as Pulsar's Jackson answers them, before the
handler looks anything up in Kafka.

Topic names in URL paths are decoded in one place too (:func:`topic_from_path`), from the
raw path, as Pulsar does: so ``%25`` and ``%FF`` mean the same on the policy, lookup and
WebSocket routes, and one name has one key.

A 503 (not ready, bundle being moved, no owner yet) always carries ``Retry-After``, so
Pulsar clients and load balancers retry instead of giving up.
"""

from __future__ import annotations

import codecs
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sync import InvalidPolicyError, NotFoundError, TopicName, kafka_topic_of, parse_policy_json
from sync.errors import BadRequestError

logger = logging.getLogger(__name__)

__all__ = [
    "JAVA_INT_MAX",
    "JAVA_INT_MIN",
    "JAVA_LONG_MAX",
    "JAVA_LONG_MIN",
    "RETRY_AFTER_S",
    "java_int",
    "json_body",
    "json_value",
    "malformed_input",
    "topic_from_path",
    "unavailable",
]

#: Seconds a client should wait before retrying a 503 (a bundle moves in about a second).
RETRY_AFTER_S = 1

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def unavailable(reason: str, retry_after_s: int = RETRY_AFTER_S) -> web.Response:
    """A 503 that tells the client when to try again."""
    return web.json_response(
        {"reason": reason}, status=503, headers={"Retry-After": str(retry_after_s)}
    )


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
async def malformed_input(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map undecodable requests to 4xx and give every 503 a ``Retry-After``."""
    refused = None
    if request.body_exists:
        if request.method in _ENTITY_METHODS and request.path.startswith(PULSAR_ADMIN_PREFIX):
            refused = _bad_media_type(request)
        refused = refused or _bad_charset(request)
    if refused is not None:
        return _reason(415, refused)
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        if exc.status == 503 and "Retry-After" not in exc.headers:
            exc.headers["Retry-After"] = str(RETRY_AFTER_S)
        raise
    except UnicodeDecodeError as exc:
        return _reason(
            400, f"request body is not valid {request.charset or 'UTF-8'} text: {exc.reason}"
        )
    except RecursionError:
        return _reason(400, "request body nests too deeply to be parsed")
    except json.JSONDecodeError as exc:
        return _reason(400, f"request body is not valid JSON: {exc}")
    if response.status == 503 and "Retry-After" not in response.headers:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


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


def topic_from_path(request: web.Request, first: int) -> TopicName:
    """The topic whose four still-encoded segments start at path segment ``first``.

    Pulsar decodes the local name itself (``java.net.URLDecoder``: ``+`` is a space), so the
    segments come from the raw path, not from aiohttp's decoded ``match_info`` (which keeps
    an invalid escape such as ``%FF`` literally while it decodes ``%25``).

    Raises:
        InvalidTopicNameError: not a valid topic name (412 on admin routes).
    """
    parts = request.raw_path.split("?", 1)[0].split("/")
    domain, tenant, namespace, local = parts[first : first + 4]
    if tenant in _DOT_SEGMENTS or namespace in _DOT_SEGMENTS:
        # Pulsar 4.0.7: 404 (its web server resolves dot segments; no such namespace).
        # Answered here, without asking Kafka whether such a namespace exists.
        raise NotFoundError("Namespace does not exist")
    return _topic(domain, tenant, namespace, local)


_DOT_SEGMENTS = frozenset({".", ".."})
