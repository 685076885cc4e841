"""Pulsar's produce/consume permissions: the ``AuthPolicies`` of a namespace.

Pulsar keeps, in each namespace's policies, which roles may do what
(``auth_policies``): ``namespace_auth`` (role -> actions, for every topic of the
namespace) and ``destination_auth`` (topic -> role -> actions). Here that is one registry
record per namespace, ``auth/<tenant>/<namespace>``, in Pulsar's JSON, written by the one
fenced metadata writer (:mod:`._permission_admin`) and read by every sidecar's
:class:`~sync.cluster._metadata.MetadataStore`.

What a role may do with a topic (Pulsar's ``PulsarAuthorizationProvider``): produce with
``produce`` granted on the namespace or on the topic, consume with ``consume``, look up
with either. Grants are kept under the name they were given for: a partition
(``…-partition-N``) has grants of its own, as in Pulsar, and is checked with its own and
then its partitioned topic's (a grant on a partitioned topic covers its partitions).
Super-users and the tenant's admins may do all of it (see
:class:`~sync.cluster._auth.Authorizer`).

With Pulsar's ``authorizationAllowWildcardsMatching`` (off by default), a grant to a role
pattern with ``*`` at its end or its start (``app-*``, ``*.ops``; ``*`` alone: any role)
counts for every role it matches (:func:`wildcard_matches`), on the namespace and on the
topic alike; a ``*`` elsewhere matches only itself. Subscription roles are names, never
patterns, as in Pulsar.

The namespace's ``subscriptionAuthMode`` (Pulsar keeps it beside ``auth_policies`` in the
namespace's Policies, as ``subscription_auth_mode``) is kept in the same record, under
that key, written only when it is ``Prefix`` (a record without it is ``None``, so records
written before it existed read the same). With ``Prefix`` a role that is neither a
super-user nor a tenant admin may consume only on subscriptions whose names start with
the role (:meth:`AuthPolicies.prefix_refusal`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sync._constants import REGISTRY_KEY_AUTH
from sync._errors import BadRequestError, CodecError
from sync.naming._names import NamespaceName, TopicName

from ._records import decode_json, encode_json

__all__ = [
    "AuthAction",
    "AuthPolicies",
    "SubscriptionAuthMode",
    "TopicOperation",
    "auth_key",
    "parse_actions",
    "parse_roles",
    "parse_subscription_auth_mode",
    "wildcard_matches",
]


class AuthAction(enum.StrEnum):
    """Pulsar's ``AuthAction``: what a permission allows."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


class TopicOperation(enum.Enum):
    """The topic operations the front ends authorize, with Pulsar's refusal texts."""

    LOOKUP = "Client is not authorized to Lookup"
    PRODUCE = "Client is not authorized to Produce"
    CONSUME = "Client is not authorized to subscribe"


class SubscriptionAuthMode(enum.StrEnum):
    """Pulsar's ``SubscriptionAuthMode``: the namespace policy ``subscriptionAuthMode``."""

    #: Every subscription name is open to a role with ``consume`` (the default).
    NONE = "None"
    #: A role consumes only on subscription names that start with the role.
    PREFIX = "Prefix"


def parse_subscription_auth_mode(body: Any) -> SubscriptionAuthMode:
    """The mode of a ``POST …/subscriptionAuthMode`` body (a JSON string); none (an
    empty body, ``null``) is ``None``, as Pulsar's ``internalSetSubscriptionAuthMode``.

    Raises:
        BadRequestError: not one of the modes (Pulsar's JSON binding reads an unknown
            name as null, i.e. ``None``, and stores it; refused here, nothing written).
    """
    if body is None:
        return SubscriptionAuthMode.NONE
    known = [m.value for m in SubscriptionAuthMode]
    if not isinstance(body, str) or body not in known:
        raise BadRequestError(
            f"Cannot deserialize value of type `SubscriptionAuthMode` from {body!r}: "
            f"not one of the values accepted for Enum class: {known}"
        )
    return SubscriptionAuthMode(body)


#: Which granted action allows an operation (a lookup: either of them).
_NEEDS = {
    TopicOperation.LOOKUP: frozenset({AuthAction.PRODUCE, AuthAction.CONSUME}),
    TopicOperation.PRODUCE: frozenset({AuthAction.PRODUCE}),
    TopicOperation.CONSUME: frozenset({AuthAction.CONSUME}),
}

Grants = Mapping[str, frozenset[AuthAction]]


def wildcard_matches(pattern: str, role: str) -> bool:
    """Whether the granted role ``pattern`` covers ``role`` when wildcards are allowed
    (Pulsar's ``checkWildcardPermission``): ``prefix*`` covers the roles starting with
    ``prefix``, ``*suffix`` those ending with ``suffix``, ``*`` every role."""
    if not pattern:
        return False
    if pattern[-1] == "*" and role.startswith(pattern[:-1]):
        return True
    return pattern[0] == "*" and role.endswith(pattern[1:])


def _wildcard_allows(grants: Grants, role: str, needs: frozenset[AuthAction]) -> bool:
    return any(
        needs & actions and wildcard_matches(pattern, role) for pattern, actions in grants.items()
    )


def parse_actions(body: Any) -> frozenset[AuthAction]:
    """The actions of a grant request's body (a JSON list, Pulsar's ``Set<AuthAction>``).

    Raises:
        BadRequestError: not a list of known action names.
    """
    if body is None:
        raise BadRequestError("Actions should not be null")
    if not isinstance(body, list) or not all(isinstance(a, str) for a in body):
        raise BadRequestError('the body must be a JSON list of actions, e.g. ["produce"]')
    known = {a.value for a in AuthAction}
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadRequestError(
            f"Cannot deserialize value of type `AuthAction` from String {unknown[0]!r}: "
            f"not one of the values accepted for Enum class: {sorted(known)}"
        )
    return frozenset(AuthAction(a) for a in body)


def parse_roles(body: Any) -> frozenset[str]:
    """The roles of a subscription grant's body (a JSON list of role names).

    Raises:
        BadRequestError: none (Pulsar's "Roles should not be null"), or not a list of
            non-empty strings.
    """
    if body is None:
        raise BadRequestError("Roles should not be null")
    if not isinstance(body, list) or not all(isinstance(r, str) and r for r in body):
        raise BadRequestError('the body must be a JSON list of roles, e.g. ["app"]')
    return frozenset(body)


def _grants(value: Any, what: str) -> dict[str, frozenset[AuthAction]]:
    if not isinstance(value, dict):
        raise CodecError(f"auth policies: {what} must be an object")
    try:
        return {str(role): parse_actions(actions) for role, actions in value.items()}
    except BadRequestError as exc:
        raise CodecError(f"auth policies: {what}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class AuthPolicies:
    """One namespace's permissions (Pulsar's ``AuthPolicies``)."""

    namespace_auth: Grants = field(default_factory=dict)
    #: Topic or partition (canonical name) -> role -> actions.
    destination_auth: Mapping[str, Grants] = field(default_factory=dict)
    #: Subscription name -> the only roles that may consume on it (none listed: any role
    #: with ``consume``), Pulsar's ``…/permissions/subscription/{subscription}``.
    subscription_auth_roles: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: The namespace's ``subscriptionAuthMode`` (Pulsar's ``subscription_auth_mode``).
    subscription_auth_mode: SubscriptionAuthMode = SubscriptionAuthMode.NONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "namespace_auth", MappingProxyType(dict(self.namespace_auth)))
        object.__setattr__(
            self, "subscription_auth_roles", MappingProxyType(dict(self.subscription_auth_roles))
        )
        object.__setattr__(
            self,
            "destination_auth",
            MappingProxyType(
                {t: MappingProxyType(dict(g)) for t, g in self.destination_auth.items()}
            ),
        )

    def allows(
        self,
        topic: TopicName,
        role: str,
        operation: TopicOperation,
        subscription: str = "",
        *,
        wildcards: bool = False,
    ) -> bool:
        """Whether ``role`` was granted what ``operation`` needs on ``topic`` (to consume
        on ``subscription``, the subscription's roles, if it has any, must include it);
        with ``wildcards``, a grant to a matching role pattern counts too."""
        needs = _NEEDS[operation]
        if operation is TopicOperation.CONSUME and not self.subscription_allows(subscription, role):
            return False
        if needs & self.namespace_auth.get(role, frozenset()):
            return True
        names = (topic.canonical, topic.base.canonical)  # a partition: then its topic's
        if any(
            needs & self.destination_auth.get(name, {}).get(role, frozenset()) for name in names
        ):
            return True
        return wildcards and (
            _wildcard_allows(self.namespace_auth, role, needs)
            or any(
                _wildcard_allows(self.destination_auth.get(name, {}), role, needs) for name in names
            )
        )

    def topic_grants(self, topic: TopicName) -> dict[str, list[str]]:
        """Pulsar's ``GET …/{topic}/permissions``: the namespace's grants with the
        topic's own added (a partition's own: not its partitioned topic's)."""
        merged: dict[str, set[str]] = {r: set(a) for r, a in self.namespace_auth.items()}
        for r, a in self.destination_auth.get(topic.canonical, {}).items():
            merged.setdefault(r, set()).update(a)
        return {r: sorted(a) for r, a in sorted(merged.items())}

    def subscription_allows(self, subscription: str, role: str) -> bool:
        """Whether ``role`` may use ``subscription`` (any role, when none is listed)."""
        roles = self.subscription_auth_roles.get(subscription) if subscription else None
        return not roles or role in roles

    def prefix_refusal(self, topic: TopicName, role: str, subscription: str) -> str | None:
        """Why ``role`` may not consume on ``subscription`` under the ``Prefix`` mode (None:
        it may, or the mode is ``None``, or no subscription is named).

        Pulsar's ``PulsarAuthorizationProvider.canConsumeAsync`` checks
        ``subscription.startsWith(role)`` (no ``-`` needed, whatever its text suggests)
        and fails the check with a ``PulsarServerException``; the broker's
        ``ServerCnx.handleSubscribe`` answers ``AuthorizationError`` with the message of
        the ``CompletionException`` around it, which starts with the class's name (as
        clients report it: apache/pulsar-client-node#415, milvus-io/milvus#24430).
        """
        if self.subscription_auth_mode is not SubscriptionAuthMode.PREFIX or not subscription:
            return None
        if subscription.startswith(role):
            return None
        return (
            "org.apache.pulsar.broker.PulsarServerException: Failed to create consumer - The "
            "subscription name needs to be prefixed by the authentication role, like "
            f"{role}-xxxx for topic: {topic.canonical}"
        )

    def subscription_grants(self) -> dict[str, list[str]]:
        """Pulsar's ``GET …/permissions/subscription``: subscription -> roles."""
        return {s: sorted(r) for s, r in sorted(self.subscription_auth_roles.items())}

    def namespace_grants(self) -> dict[str, list[str]]:
        """Pulsar's ``GET /admin/v2/namespaces/{t}/{ns}/permissions``."""
        return {r: sorted(a) for r, a in sorted(self.namespace_auth.items())}

    def to_dict(self) -> dict[str, Any]:
        """Pulsar's ``auth_policies`` JSON (its namespace Policies show it so)."""
        return {
            "namespace_auth": self.namespace_grants(),
            "destination_auth": {
                t: {r: sorted(a) for r, a in sorted(g.items())}
                for t, g in sorted(self.destination_auth.items())
            },
            "subscription_auth_roles": self.subscription_grants(),
        }

    def to_json(self) -> bytes:
        """The record's value in the registry topic: Pulsar's ``auth_policies`` JSON, with
        ``subscription_auth_mode`` when it is not ``None``."""
        record = self.to_dict()
        if self.subscription_auth_mode is not SubscriptionAuthMode.NONE:
            record["subscription_auth_mode"] = self.subscription_auth_mode.value
        return encode_json(record)

    @classmethod
    def from_json(cls, raw: bytes) -> AuthPolicies:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not an auth-policies record.
        """
        d = decode_json(raw, "auth policies")
        destinations = d.get("destination_auth", {})
        if not isinstance(destinations, dict):
            raise CodecError("auth policies: destination_auth must be an object")
        subscriptions = d.get("subscription_auth_roles", {})
        if not isinstance(subscriptions, dict) or not all(
            isinstance(r, list) and all(isinstance(x, str) for x in r)
            for r in subscriptions.values()
        ):
            raise CodecError("auth policies: subscription_auth_roles must map names to roles")
        mode = d.get("subscription_auth_mode", SubscriptionAuthMode.NONE.value)
        if mode not in {m.value for m in SubscriptionAuthMode}:
            raise CodecError(f"auth policies: unknown subscription_auth_mode {mode!r}")
        return cls(
            _grants(d.get("namespace_auth", {}), "namespace_auth"),
            {str(t): _grants(g, f"destination_auth[{t}]") for t, g in destinations.items()},
            {str(s): frozenset(r) for s, r in subscriptions.items()},
            SubscriptionAuthMode(mode),
        )


def auth_key(namespace: NamespaceName) -> str:
    """Registry key of a namespace's permissions."""
    return f"{REGISTRY_KEY_AUTH}{namespace}"
