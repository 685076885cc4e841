"""The one place where the library's exceptions become HTTP answers (Pulsar's choices).

Every HTTP route of the sidecar (policies, lookups, admin, compaction, the sidecar's own
routes) raises :class:`sync.errors.PolicySyncError`; the shell's one middleware
(:func:`broker_shim._http_shell.pulsar_answers`) answers it through :func:`error_response`:
the status of :data:`_STATUS` and Pulsar's ``{"reason": "..."}`` body.

The WebSocket handshake is answered differently by Pulsar's WebSocket proxy (400 for a
bad query parameter, 409 for a busy subscription, the reason prefixed with what failed):
its table is :data:`_HANDSHAKE_STATUS`, answered by :func:`handshake_refusal`.

A 503 always carries ``Retry-After`` (:data:`RETRY_AFTER_S`), so Pulsar clients and load
balancers retry instead of giving up.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web

from sync.errors import (
    AuthenticationError,
    AuthorizationError,
    BadRequestError,
    CacheStateError,
    ConflictError,
    ConsumerBusyError,
    InvalidInputError,
    MessagingError,
    NotAcceptableError,
    NotAllowedError,
    NotFoundError,
    PolicySyncError,
    ProducerBusyError,
    SubscriptionBusyError,
    TooManyRequestsError,
    TransportError,
    UnavailableError,
    UnprocessableError,
)

logger = logging.getLogger(__name__)

__all__ = [
    "RETRY_AFTER_S",
    "error_page",
    "error_response",
    "handshake_refusal",
    "http_status",
    "reason_response",
]

#: Seconds a client should wait before retrying a 503 (a bundle moves in about a second).
RETRY_AFTER_S = 1

_Table = tuple[tuple[type[PolicySyncError] | tuple[type[PolicySyncError], ...], int], ...]

#: Most specific first: an exception maps to the first class it is an instance of.
_STATUS: Final[_Table] = (
    (AuthenticationError, 401),
    (AuthorizationError, 403),
    (TooManyRequestsError, 429),
    (UnavailableError, 503),
    # A table not READY (still replaying, replaced after a failure) or not caught up with
    # a write within its deadline: retry shortly, like any unavailability.
    (CacheStateError, 503),
    # Kafka refused a request or did not answer in time (a broker or coordinator gone, a
    # leader moving): transient by nature, so retry shortly rather than a server fault.
    (TransportError, 503),
    (ConflictError, 409),
    (NotFoundError, 404),
    (BadRequestError, 400),
    (NotAcceptableError, 406),
    (UnprocessableError, 422),
    # Pulsar answers invalid names and values with 412 Precondition Failed.
    (InvalidInputError, 412),
)

#: Pulsar's WebSocket proxy's answers to a refused producer, consumer or reader. A policy
#: that forbids it is 403 here (Pulsar's proxy says 500, which hides that the client must
#: change something); not ready yet, a bundle moving or Kafka failing is 503 (retry).
_HANDSHAKE_STATUS: Final[_Table] = (
    (AuthenticationError, 401),
    (AuthorizationError, 403),
    (InvalidInputError, 400),
    (NotFoundError, 404),
    ((ConsumerBusyError, ProducerBusyError, SubscriptionBusyError), 409),
    (ConflictError, 409),  # an IncompatibleSchemaException, as Pulsar's proxy
    (NotAllowedError, 403),
    (MessagingError, 409),
    ((CacheStateError, UnavailableError, TransportError), 503),
)


def _status_in(table: _Table, exc: PolicySyncError) -> int:
    for kind, status in table:
        if isinstance(exc, kind):
            return status
    return 500


def http_status(exc: PolicySyncError) -> int:
    """Pulsar's status code for one of our errors (500 for anything unexpected)."""
    return _status_in(_STATUS, exc)


def reason_response(status: int, reason: str) -> web.Response:
    """Pulsar's error body, ``{"reason": "..."}`` (with ``Retry-After`` on a 503)."""
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
    return web.json_response({"reason": reason}, status=status, headers=headers)


#: The methods Jetty writes its error page for (``ErrorHandler.errorPageForMethod``); any
#: other gets the status alone.
_ERROR_PAGE_METHODS = frozenset({"GET", "POST", "HEAD"})
_XML_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "'": "&apos;", '"': "&quot;"}


#: Java's ``Character.isWhitespace`` among the ISO control characters.
_JAVA_CONTROL_WHITESPACE = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")


def _sanitized_xml_char(c: str) -> str:
    if c in _XML_ESCAPES:
        return _XML_ESCAPES[c]
    control = ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F  # Java's Character.isISOControl
    return "?" if control and c not in _JAVA_CONTROL_WHITESPACE else c


def _sanitized_xml(text: str) -> str:
    """Jetty's ``StringUtil.sanitizeXmlString``: markup escaped, control characters other
    than whitespace as ``?``."""
    return "".join(_sanitized_xml_char(c) for c in text)


def _status_line_reason(text: str) -> str:
    """``text`` as Jetty puts it in the status line: what is not printable ASCII as ``?``."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    """Pulsar's answer where a resource gives only a status and a reason (``Response.status(
    409, reason)``, or Jersey itself, e.g. 405): the reason in the status line, and for GET,
    POST and HEAD Jetty's JSON error page, ``{"message", "url", "status"}`` (its markup
    escaped; Jetty also names its servlet, left out here); other methods get no body."""
    reason = _status_line_reason(message)
    if request.method not in _ERROR_PAGE_METHODS:
        return web.Response(status=status, reason=reason)
    page = {
        "message": _sanitized_xml(message),
        "url": request.raw_path.split("?", 1)[0],
        "status": str(status),
    }
    return web.json_response(page, status=status, reason=reason)


def error_response(request: web.Request, exc: PolicySyncError) -> web.Response:
    """The answer to ``exc`` raised while serving ``request``."""
    status = http_status(exc)
    if status >= 500:
        logger.warning("%s %s failed: %s", request.method, request.path, exc)
    return reason_response(status, str(exc))


def handshake_refusal(exc: PolicySyncError, prefix: str) -> web.Response:
    """Pulsar's answer to a WebSocket handshake refused with ``exc``; ``prefix`` says what
    failed (``Failed to subscribe``, ``Failed to create producer``, …)."""
    status = _status_in(_HANDSHAKE_STATUS, exc)
    if status == 400:
        return reason_response(400, f"Invalid query params: {exc}")
    if status >= 500 and status != 503:
        logger.warning("%s: %s", prefix, exc)
    return reason_response(status, f"{prefix}: {exc}")
