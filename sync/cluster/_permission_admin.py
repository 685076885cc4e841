"""Granting and revoking Pulsar's produce/consume permissions (the ``…/permissions``
admin REST): each a fenced read-modify-write of the namespace's ``auth/…`` registry record
(see :mod:`._permissions`), so a refused request writes nothing."""

from __future__ import annotations

import logging

from sync._errors import InvalidInputError, NotFoundError
from sync.naming._names import NamespaceName, TopicName

from ._metadata import Change, MetadataStore, MetadataWriter
from ._permissions import AuthAction, AuthPolicies, auth_key

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
            NotFoundError: the namespace does not exist.
            InvalidInputError: an empty role.
        """
        if not role:
            raise InvalidInputError("Role should not be empty")

        def decide(store: MetadataStore) -> Change[None]:
            current = _require(store, namespace)
            if topic is None:
                updated = AuthPolicies(
                    {**current.namespace_auth, role: actions}, current.destination_auth
                )
            else:
                name = topic.base.canonical
                grants = {**current.destination_auth.get(name, {}), role: actions}
                updated = AuthPolicies(
                    current.namespace_auth, {**current.destination_auth, name: grants}
                )
            return Change({auth_key(namespace): updated.to_json()}, None)

        self.writer.update(decide)
        logger.info("granted %s to role %s on %s", sorted(actions), role, topic or namespace)

    def revoke(self, namespace: NamespaceName, role: str, topic: TopicName | None = None) -> None:
        """Take ``role``'s permissions on the namespace (or on ``topic``) away.

        Raises:
            NotFoundError: the namespace does not exist.
            InvalidInputError: on a topic, "Permissions are not set at the topic level"
                (Pulsar's 412) when the role has no grant of the topic's own.
        """

        def decide(store: MetadataStore) -> Change[None]:
            current = _require(store, namespace)
            if topic is None:
                grants = {r: a for r, a in current.namespace_auth.items() if r != role}
                updated = AuthPolicies(grants, current.destination_auth)
            else:
                name = topic.base.canonical
                own = current.destination_auth.get(name, {})
                if role not in own:
                    raise InvalidInputError("Permissions are not set at the topic level")
                rest = {r: a for r, a in own.items() if r != role}
                destinations = {t: g for t, g in current.destination_auth.items() if t != name}
                if rest:
                    destinations[name] = rest
                updated = AuthPolicies(current.namespace_auth, destinations)
            return Change({auth_key(namespace): updated.to_json()}, None)

        self.writer.update(decide)
        logger.info("revoked the permissions of role %s on %s", role, topic or namespace)


def _require(store: MetadataStore, namespace: NamespaceName) -> AuthPolicies:
    if store.layout(namespace) is None:
        raise NotFoundError("Namespace does not exist")
    return store.auth.get(namespace, AuthPolicies())
