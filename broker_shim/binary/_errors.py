"""The two tables that turn policy-sync's outcomes into Pulsar's binary answers.

``server_error_of``: an exception → Pulsar's ``ServerError`` code (for ERROR, SEND_ERROR and
failed lookup/metadata responses); the message is the exception's text, which for engine
refusals is Pulsar's own text ("Exclusive consumer is already connected", "Topic reached
max producers limit", "Failed due to too many pending lookup requests", ...).

``close_action_of``: the engine closed a producer or consumer → what the connection does,
by the engine's protocol-neutral :class:`~sync.messaging.CloseCause`:

====================== ===================================== ==============================
cause                  meaning                               binary answer
====================== ===================================== ==============================
``UNLOADED``           the topic moved to another sidecar    CLOSE_PRODUCER / CLOSE_CONSUMER:
                                                             the client looks up again
``POLICY``             a policy change forbids it now        CLOSE_PRODUCER / CLOSE_CONSUMER;
                                                             its re-subscribe is refused
                                                             with the ServerError
``SHUTDOWN``           the sidecar is shutting down          the connection closes (clients
                                                             reconnect and look up again)
``NORMAL``             closed on the client's request        nothing more to send
====================== ===================================== ==============================
"""

from __future__ import annotations

import enum

from sync.errors import (
    AuthenticationError,
    AuthorizationError,
    CacheStateError,
    ConsumerBusyError,
    InvalidTopicNameError,
    MessageTooLargeError,
    NotAllowedError,
    NotFoundError,
    PolicySyncError,
    ProducerAccessFencedError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusyError,
    SubscriptionBusyError,
    TooManyRequestsError,
    TopicNotFoundError,
    TransportError,
    UnavailableError,
)
from sync.messaging import CloseCause, CloseReason

from . import PulsarApi_pb2 as api
from ._framing import ChecksumError

__all__ = ["CloseAction", "IncompatibleSchemaError", "close_action_of", "server_error_of"]


class IncompatibleSchemaError(PolicySyncError):
    """A schema the topic's registry refuses (Pulsar's ``IncompatibleSchemaException`` and
    ``InvalidSchemaDataException``, both answered ``IncompatibleSchema``), with Pulsar's text."""


#: Most specific first: an exception maps to the first class it is an instance of.
_SERVER_ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (IncompatibleSchemaError, api.IncompatibleSchema),
    (AuthenticationError, api.AuthenticationError),
    (AuthorizationError, api.AuthorizationError),
    (TooManyRequestsError, api.TooManyRequests),
    (UnavailableError, api.ServiceNotReady),  # also BundleUnloadingError: clients retry
    (CacheStateError, api.ServiceNotReady),  # policies not loaded yet / shutting down
    (TopicNotFoundError, api.TopicNotFound),
    (NotFoundError, api.TopicNotFound),  # e.g. the namespace does not exist
    (InvalidTopicNameError, api.InvalidTopicName),
    (ChecksumError, api.ChecksumError),
    (ProducerBlockedQuotaExceededException, api.ProducerBlockedQuotaExceededException),
    (ProducerBlockedQuotaExceededError, api.ProducerBlockedQuotaExceededError),
    (ProducerBusyError, api.ProducerBusy),
    (ProducerAccessFencedError, api.ProducerFenced),
    (ConsumerBusyError, api.ConsumerBusy),
    (SubscriptionBusyError, api.ConsumerBusy),  # Pulsar's SubscriptionBusyException
    (NotAllowedError, api.NotAllowedError),
    (MessageTooLargeError, api.NotAllowedError),
    (TransportError, api.PersistenceError),  # Kafka refused or did not answer
    (PolicySyncError, api.UnknownError),
)


def server_error_of(exc: BaseException) -> int:
    """Pulsar's ``ServerError`` for ``exc`` (``UnknownError`` for anything unexpected)."""
    for kind, code in _SERVER_ERRORS:
        if isinstance(exc, kind):
            return code
    return api.UnknownError


class CloseAction(enum.Enum):
    """What a connection does when the engine closed one of its producers or consumers."""

    #: Send CLOSE_PRODUCER / CLOSE_CONSUMER: the client reconnects (looking up again).
    NOTIFY_CLIENT = "notify-client"
    #: Close the whole connection (the sidecar is going away).
    CLOSE_CONNECTION = "close-connection"
    #: Nothing to send (the client asked for it).
    NONE = "none"


_CLOSE_ACTIONS: dict[CloseCause, CloseAction] = {
    CloseCause.UNLOADED: CloseAction.NOTIFY_CLIENT,
    CloseCause.POLICY: CloseAction.NOTIFY_CLIENT,
    CloseCause.SHUTDOWN: CloseAction.CLOSE_CONNECTION,
    CloseCause.NORMAL: CloseAction.NONE,
}


def close_action_of(reason: CloseReason | None) -> CloseAction:
    """The binary answer to an engine-side close (see the module table)."""
    if reason is None:
        return CloseAction.NONE
    return _CLOSE_ACTIONS[reason.cause]
