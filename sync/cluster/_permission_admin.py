"""Granting and revoking Pulsar's produce/consume permissions (the ``…/permissions``
admin REST): each a fenced read-modify-write of the namespace's ``auth/…`` registry record
(see :mod:`._permissions`), so a refused request writes nothing."""

from __future__ import annotations

import dataclasses
import logging

from sync._errors import InvalidInputError, NotFoundError
from sync.naming._names import NamespaceName, TopicName

from ._metadata import Change, MetadataStore, MetadataWriter
from ._permissions import AuthAction, AuthPolicies, SubscriptionAuthMode, auth_key

logger = logging.getLogger(__name__)

__all__ = ["PermissionAdmin"]


class PermissionAdmin:
    """Grants and revokes permissions (Pulsar's ``…/permissions`` admin REST), each a
    fenced read-modify-write of the namespace's record: a refused request writes nothing."""

    def __init__(self, store: MetadataStore, writer: MetadataWriter) -> None:
        self.store = store
        self.writer = writer

    def of(self, namespace: NamespaceName) -> AuthPolicies:
        """The namespace's permissions (none granted: empty).

        Raises:
            NotFoundError: "Namespace does not exist".
        """
        _require(self.store, namespace)
        return self.store.auth.get(namespace, AuthPolicies())

    def grant(
        self,
        namespace: NamespaceName,
        role: str,
        actions: frozenset[AuthAction],
        topic: TopicName | None = None,
    ) -> None:
        """Set ``role``'s actions on the namespace (or on ``topic``), replacing earlier ones.

        Raises:
            NotFoundError: the namespace does not exist (Pulsar's text for a namespace
                grant: "Topic's namespace does not exist").
            InvalidInputError: an empty role.
        """
        if not role:
            raise InvalidInputError("Role should not be empty")

        def decide(store: MetadataStore) -> Change[None]:
            if topic is None and store.layout(namespace) is None:
                raise NotFoundError("Topic's namespace does not exist")
            current = _require(store, namespace)
            if topic is None:
                updated = dataclasses.replace(
                    current, namespace_auth={**current.namespace_auth, role: actions}
                )
            else:
                name = topic.canonical  # a partition's grants are its own
                grants = {**current.destination_auth.get(name, {}), role: actions}
                updated = dataclasses.replace(
                    current, destination_auth={**current.destination_auth, name: grants}
                )
            return Change({auth_key(namespace): updated.to_json()}, None)

        self.writer.update(decide)
        logger.info("granted %s to role %s on %s", sorted(actions), role, topic or namespace)

    def revoke(self, namespace: NamespaceName, role: str, topic: TopicName | None = None) -> None:
        """Take ``role``'s permissions on the namespace (or on ``topic``: its grants of the
        topic's own, a namespace grant stays) away; nothing to take away is no error, as in
        Pulsar 4.0.

        Raises:
            NotFoundError: the namespace does not exist.
        """

        def decide(store: MetadataStore) -> Change[None]:
            current = _require(store, namespace)
            if topic is None:
                if role not in current.namespace_auth:
                    return Change({}, None)
                grants = {r: a for r, a in current.namespace_auth.items() if r != role}
                updated = dataclasses.replace(current, namespace_auth=grants)
            else:
                name = topic.canonical
                own = current.destination_auth.get(name, {})
                if role not in own:
                    return Change({}, None)
                rest = {r: a for r, a in own.items() if r != role}
                destinations = {t: g for t, g in current.destination_auth.items() if t != name}
                if rest:
                    destinations[name] = rest
                updated = dataclasses.replace(current, destination_auth=destinations)
            return Change({auth_key(namespace): updated.to_json()}, None)

        self.writer.update(decide)
        logger.info("revoked the permissions of role %s on %s", role, topic or namespace)

    def grant_subscription(
        self, namespace: NamespaceName, subscription: str, roles: frozenset[str]
    ) -> None:
        """Let only ``roles`` consume on ``subscription`` (replacing its roles, as Pulsar).

        Raises:
            NotFoundError: the namespace does not exist.
        """

        def decide(store: MetadataStore) -> Change[None]:
            current = _require(store, namespace)
            updated = dataclasses.replace(
                current,
                subscription_auth_roles={**current.subscription_auth_roles, subscription: roles},
            )
            return Change({auth_key(namespace): updated.to_json()}, None)

        self.writer.update(decide)
        logger.info("granted subscription %s of %s to %s", subscription, namespace, sorted(roles))

    def revoke_subscription(self, namespace: NamespaceName, subscription: str, role: str) -> None:
        """Take ``role`` off ``subscription``'s roles; with none left the subscription is
        dropped, as in Pulsar (open to any role with ``consume`` again).

        Raises:
            NotFoundError: the namespace does not exist.
            InvalidInputError: "couldn't find subscription" (none granted; Pulsar answers
                its IllegalArgumentException with a 500, here 412).
        """

        def decide(store: MetadataStore) -> Change[None]:
            current = _require(store, namespace)
            roles = current.subscription_auth_roles.get(subscription)
            if roles is None:
                raise InvalidInputError("couldn't find subscription")
            rest = {s: r for s, r in current.subscription_auth_roles.items() if s != subscription}
            if roles - {role}:
                rest[subscription] = roles - {role}
            updated = dataclasses.replace(current, subscription_auth_roles=rest)
            return Change({auth_key(namespace): updated.to_json()}, None)

        self.writer.update(decide)
        logger.info("revoked role %s from subscription %s of %s", role, subscription, namespace)

    def set_subscription_auth_mode(
        self, namespace: NamespaceName, mode: SubscriptionAuthMode
    ) -> None:
        """Set the namespace's ``subscriptionAuthMode`` (Pulsar's
        ``internalSetSubscriptionAuthMode``); the same mode again writes nothing.

        Raises:
            NotFoundError: the namespace does not exist.
        """

        def decide(store: MetadataStore) -> Change[None]:
            current = _require(store, namespace)
            if current.subscription_auth_mode is mode:
                return Change({}, None)
            updated = dataclasses.replace(current, subscription_auth_mode=mode)
            return Change({auth_key(namespace): updated.to_json()}, None)

        self.writer.update(decide)
        logger.info("subscription auth mode of %s set to %s", namespace, mode.value)


def _require(store: MetadataStore, namespace: NamespaceName) -> AuthPolicies:
    if store.layout(namespace) is None:
        raise NotFoundError("Namespace does not exist")
    return store.auth.get(namespace, AuthPolicies())
