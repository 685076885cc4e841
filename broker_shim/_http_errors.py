"""The one table from the library's exceptions to HTTP status codes (Pulsar's choices).

Every HTTP route of the sidecar (policies, lookups, admin, WebSocket upgrades) answers a
:class:`sync.errors.PolicySyncError` through :func:`error_response`: Pulsar's status code and
its ``{"reason": "..."}`` body.
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
    InvalidInputError,
    NotAcceptableError,
    NotFoundError,
    PolicySyncError,
    TooManyRequestsError,
    TransportError,
    UnavailableError,
    UnprocessableError,
)

logger = logging.getLogger(__name__)

__all__ = ["error_response", "http_status", "reason_response"]

#: Most specific first: an exception maps to the first class it is an instance of.
_STATUS: Final[tuple[tuple[type[PolicySyncError], int], ...]] = (
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


def http_status(exc: PolicySyncError) -> int:
    """Pulsar's status code for one of our errors (500 for anything unexpected)."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


def reason_response(status: int, reason: str) -> web.Response:
    """Pulsar's error body: ``{"reason": "..."}``."""
    return web.json_response({"reason": reason}, status=status)


def error_response(request: web.Request, exc: PolicySyncError) -> web.Response:
    """The answer to ``exc`` raised while serving ``request``."""
    status = http_status(exc)
    if status >= 500:
        logger.warning("%s %s failed: %s", request.method, request.path, exc)
    return reason_response(status, str(exc))
