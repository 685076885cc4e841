"""Subscription types and the state machines of consumers, subscriptions and producers.

Every state change goes through :func:`transition`, which checks it against the one
table of allowed moves per machine (with the one lifecycle helper,
:func:`sync._lifecycle.check_move`; a forbidden move raises
:class:`~sync._errors.StateTransitionError`)::

    ConsumerState      ACTIVE ⇄ BLOCKED (maxUnackedMessagesOnConsumer reached / relieved)
                       ACTIVE | BLOCKED ──close / eviction──▶ CLOSED

    SubscriptionState  LOADING ──positions read──▶ ACTIVE ──last consumer left──▶ IDLE
                       IDLE ──consumer joined──▶ ACTIVE
                       LOADING | ACTIVE | IDLE ──close──▶ CLOSING ──final commit──▶ CLOSED
                       LOADING ──Kafka failed──▶ FAILED ──▶ CLOSED

    ProducerState      ACTIVE ──close / eviction──▶ CLOSED
"""

from __future__ import annotations

import enum
from typing import TypeVar

from sync._errors import StateTransitionError
from sync._lifecycle import check_move

__all__ = [
    "ConsumerState",
    "InitialPosition",
    "ProducerAccessMode",
    "ProducerState",
    "StateTransitionError",
    "SubscriptionState",
    "SubscriptionType",
    "transition",
]


class SubscriptionType(enum.Enum):
    """Pulsar's subscription types (the ``subscriptionType`` query parameter)."""

    Exclusive = "Exclusive"
    Shared = "Shared"
    Failover = "Failover"
    Key_Shared = "Key_Shared"

    @property
    def single_active(self) -> bool:
        """Whether one consumer at a time receives a partition's messages, in order."""
        return self in (SubscriptionType.Exclusive, SubscriptionType.Failover)


class ProducerAccessMode(enum.Enum):
    """Pulsar's producer access modes (``ProducerAccessMode``; the values of the binary
    protocol's ``producer_access_mode``)."""

    Shared = 0  # any number of producers
    Exclusive = 1  # refused (fenced) if the topic has any other producer
    WaitForExclusive = 2  # queued until it can be exclusive (not served here)
    ExclusiveWithFencing = 3  # closes the topic's other producers and holds it


class InitialPosition(enum.Enum):
    """Where a new subscription starts (Pulsar ``SubscriptionInitialPosition``)."""

    Latest = "Latest"
    Earliest = "Earliest"


class ConsumerState(enum.Enum):
    """Life of one consumer connection."""

    ACTIVE = "ACTIVE"
    BLOCKED = "BLOCKED"  # too many unacked messages: receives nothing until acks arrive
    CLOSED = "CLOSED"


class SubscriptionState(enum.Enum):
    """Life of one subscription in this sidecar."""

    LOADING = "LOADING"
    ACTIVE = "ACTIVE"
    IDLE = "IDLE"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


class ProducerState(enum.Enum):
    """Life of one producer connection."""

    ACTIVE = "ACTIVE"
    CLOSED = "CLOSED"


_S = TypeVar("_S", ConsumerState, SubscriptionState, ProducerState)

_ALLOWED: dict[enum.Enum, frozenset[enum.Enum]] = {
    ConsumerState.ACTIVE: frozenset({ConsumerState.BLOCKED, ConsumerState.CLOSED}),
    ConsumerState.BLOCKED: frozenset({ConsumerState.ACTIVE, ConsumerState.CLOSED}),
    ConsumerState.CLOSED: frozenset(),
    SubscriptionState.LOADING: frozenset(
        {SubscriptionState.ACTIVE, SubscriptionState.FAILED, SubscriptionState.CLOSING}
    ),
    SubscriptionState.ACTIVE: frozenset({SubscriptionState.IDLE, SubscriptionState.CLOSING}),
    SubscriptionState.IDLE: frozenset({SubscriptionState.ACTIVE, SubscriptionState.CLOSING}),
    SubscriptionState.CLOSING: frozenset({SubscriptionState.CLOSED}),
    SubscriptionState.FAILED: frozenset({SubscriptionState.CLOSED}),
    SubscriptionState.CLOSED: frozenset(),
    ProducerState.ACTIVE: frozenset({ProducerState.CLOSED}),
    ProducerState.CLOSED: frozenset(),
}


def transition(current: _S, new: _S, what: str) -> _S:
    """Return ``new`` if the move ``current → new`` is allowed; raise otherwise.

    Raises:
        StateTransitionError: the move is not in the table (names ``what`` moved).
    """
    check_move(_ALLOWED, current, new, what, StateTransitionError)
    return new
