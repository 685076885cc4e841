"""Optional token authentication and per-tenant authorization (off unless configured).

A request authenticates with ``Authorization: Bearer <token>`` (the binary protocol's
CONNECT with the ``token`` method): a token listed in ``tokens`` maps to its role, and,
with Pulsar's token settings given, any other token is validated as a JWT whose ``sub``
claim is the role (see :mod:`._jwt`).
Permissions, as Pulsar's ``PulsarAuthorizationProvider``:

* super-user roles may do everything (cluster-wide operations need one: broker listing,
  KV config, write perms);
* a tenant's admin roles (the tenant's ``adminRoles``, and those of this file) administrate
  its namespaces and topics (create, split, unload, grant) and may produce and consume;
* other roles produce and consume with the ``produce`` and ``consume`` permissions granted
  on the namespace or the topic (``…/permissions/{role}``, :mod:`._permissions`); either
  lets them look the topic up; with ``"authorizationAllowWildcardsMatching": true`` a
  grant to ``app-*``, ``*.ops`` or ``*`` counts for every role it matches;
* a tenant's lookup roles of this file may look its topics up and read partition and
  bundle metadata (Pulsar's ``TopicOperation.LOOKUP``), without producing or consuming.

Checks run before anything is written: a refused request (401 without a valid token, 403
without the right) changes nothing.

Configuration file (JSON; unknown keys are refused)::

    {"tokens": {"<token>": "<role>", ...},
     "tokenSecretKey": "file:///path/secret.key",
     "superUserRoles": ["admin"],
     "tenants": {"acme": {"adminRoles": ["alice"], "lookupRoles": ["bob"]}}}

(``tokenSecretKey`` or ``tokenPublicKey``, with ``tokenPublicAlg``, ``tokenAuthClaim``,
``tokenAudienceClaim`` and ``tokenAudience``: Pulsar's ``broker.conf`` names.)
``"authenticationProviders": ["token", "tls", "basic"]`` (or Pulsar's class names) also
lets a client authenticate with its TLS certificate: the role is the certificate's
common name, as Pulsar's ``AuthenticationProviderTls``; and any client with a user and
password of the htpasswd file ``basicAuthConf`` (:mod:`._basic_auth`); the default is
``["token"]``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from sync._errors import AuthenticationError, AuthorizationError, ConfigurationError
from sync.naming._names import NamespaceName, TopicName

from ._basic_auth import BasicUsers
from ._jwt import TOKEN_SETTINGS, TokenSettings, TokenVerifier
from ._permissions import AuthPolicies, TopicOperation
from ._records import TenantRecord

__all__ = ["AuthConfig", "Authorizer", "Grants", "TenantRoles"]


class Grants(Protocol):
    """Where the tenants' admin roles and the namespaces' permissions are read (the
    registry's :class:`~sync.cluster._metadata.MetadataStore`)."""

    @property
    def tenants(self) -> Mapping[str, TenantRecord]: ...

    @property
    def auth(self) -> Mapping[NamespaceName, AuthPolicies]: ...


#: Authentication providers by Pulsar's class names and their short names.
_PROVIDERS = {
    "token": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "tls": "tls",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
    "basic": "basic",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
}


@dataclass(frozen=True, slots=True)
class TenantRoles:
    """Who may administrate, and who may look up, one tenant's resources."""

    admin_roles: frozenset[str] = frozenset()
    lookup_roles: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Tokens, super-users and per-tenant roles."""

    tokens: Mapping[str, str] = field(default_factory=dict)
    super_user_roles: frozenset[str] = frozenset()
    tenants: Mapping[str, TenantRoles] = field(default_factory=dict)
    #: JWT validation (None: only the listed tokens authenticate).
    token: TokenSettings | None = None
    #: The authentication methods a client may use: ``token``, ``tls``, ``basic``.
    providers: frozenset[str] = frozenset({"token"})
    #: The users of ``basicAuthConf`` (with the ``basic`` provider).
    basic: BasicUsers | None = None
    #: Pulsar's ``anonymousUserRole``: the role of a client that sends no credentials.
    anonymous_role: str | None = None
    #: Pulsar's ``authorizationAllowWildcardsMatching``: a produce/consume grant to a
    #: role pattern (``app-*``, ``*.ops``, ``*``) counts for the roles it matches.
    allow_wildcards: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", MappingProxyType(dict(self.tokens)))
        object.__setattr__(self, "tenants", MappingProxyType(dict(self.tenants)))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AuthConfig:
        """Build from the documented JSON shape.

        Raises:
            ConfigurationError: unknown keys or wrong types.
        """
        keys = {
            "tokens",
            "superUserRoles",
            "tenants",
            "authenticationProviders",
            "basicAuthConf",
            "anonymousUserRole",
            "authorizationAllowWildcardsMatching",
            *TOKEN_SETTINGS,
        }
        _only(data, keys, "auth config")
        names = _strings(data.get("authenticationProviders", ["token"]), "authenticationProviders")
        unknown = [n for n in names if n not in _PROVIDERS]
        if unknown or not names:
            raise ConfigurationError(
                f"auth config: authenticationProviders {unknown or names} are not among "
                f"{sorted(_PROVIDERS)}"
            )
        tokens = data.get("tokens", {})
        if not isinstance(tokens, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in tokens.items()
        ):
            raise ConfigurationError('auth config: "tokens" must map non-empty tokens to roles')
        tenants: dict[str, TenantRoles] = {}
        for tenant, roles in dict(data.get("tenants", {})).items():
            if not isinstance(roles, dict):
                raise ConfigurationError(f"auth config: tenant {tenant!r} must be an object")
            _only(roles, {"adminRoles", "lookupRoles"}, f"auth config tenant {tenant!r}")
            tenants[str(tenant)] = TenantRoles(
                frozenset(_strings(roles.get("adminRoles", []), f"{tenant}.adminRoles")),
                frozenset(_strings(roles.get("lookupRoles", []), f"{tenant}.lookupRoles")),
            )
        providers = frozenset(_PROVIDERS[n] for n in names)
        basic = data.get("basicAuthConf")
        if basic is not None and not isinstance(basic, str):
            raise ConfigurationError("auth config: basicAuthConf must be a string")
        if "basic" in providers and not basic:
            raise ConfigurationError("auth config: No basic authentication config provided")
        anonymous = data.get("anonymousUserRole")
        if anonymous is not None and (not isinstance(anonymous, str) or not anonymous):
            raise ConfigurationError("auth config: anonymousUserRole must be a non-empty string")
        wildcards = data.get("authorizationAllowWildcardsMatching", False)
        if not isinstance(wildcards, bool):
            raise ConfigurationError(
                "auth config: authorizationAllowWildcardsMatching must be true or false"
            )
        return cls(
            tokens=tokens,
            super_user_roles=frozenset(_strings(data.get("superUserRoles", []), "superUserRoles")),
            tenants=tenants,
            token=TokenSettings.from_json(data),
            providers=providers,
            basic=BasicUsers.load(basic) if basic and "basic" in providers else None,
            anonymous_role=anonymous,
            allow_wildcards=wildcards,
        )

    @classmethod
    def from_file(cls, path: Path) -> AuthConfig:
        """Load the JSON file at ``path``.

        Raises:
            ConfigurationError: unreadable, not JSON, or invalid.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigurationError(f"cannot read auth config {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigurationError(f"auth config {path} must hold a JSON object")
        return cls.from_json(data)


def _only(data: Mapping[str, Any], allowed: set[str], what: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigurationError(f"{what}: unknown keys {unknown}; allowed: {sorted(allowed)}")


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"auth config: {what} must be a list of strings")
    return list(value)


class Authorizer:
    """Applies an :class:`AuthConfig` to requests."""

    def __init__(self, config: AuthConfig, grants: Grants | None = None) -> None:
        self.config = config
        self._grants = grants
        self._jwt = None if config.token is None else TokenVerifier(config.token)

    def authenticate(self, authorization: str | None) -> str:
        """The role of an ``Authorization`` header: a ``Bearer`` token, or ``Basic``
        credentials with the basic provider; failing those, the anonymous role if there is
        one (Pulsar's ``authenticateHttpRequest``).

        Raises:
            AuthenticationError: none, an unknown token, a JWT that does not validate, or
                wrong credentials, and no anonymous role.
        """
        try:
            return self._authenticate(authorization)
        except AuthenticationError:
            if self.config.anonymous_role is None:
                raise
            return self.config.anonymous_role

    def authenticate_token(self, token: str) -> str:
        """The role of a binary client's token (CONNECT with the ``token`` method): a
        listed token or a JWT. Wrong credentials are refused, never given the anonymous
        role: Pulsar's ``ServerCnx.handleConnect`` gives that role only to a client whose
        method no provider serves (HTTP falls back to it, see :meth:`authenticate`).

        Raises:
            AuthenticationError: an unknown token or a JWT that does not validate.
        """
        return self._authenticate(f"Bearer {token}")

    def anonymous(self) -> str:
        """The role of a binary client that names no method this sidecar provides.

        Raises:
            AuthenticationError: no anonymous role (Pulsar's words).
        """
        if self.config.anonymous_role is None:
            raise AuthenticationError(
                "No anonymous role, and no authentication provider configured"
            )
        return self.config.anonymous_role

    def _authenticate(self, authorization: str | None) -> str:
        if authorization and authorization[:6].lower() == "basic ":
            return self.authenticate_basic(None, header=authorization)
        if "token" not in self.config.providers:
            if authorization:
                raise AuthenticationError("Unsupported authentication method: [token]")
            raise AuthenticationError(
                "Authentication required: send 'Authorization: Basic <user:password in base64>'"
            )
        if not authorization or not authorization.startswith("Bearer "):
            raise AuthenticationError(
                "Authentication required: send 'Authorization: Bearer <token>'"
            )
        token = authorization[len("Bearer ") :].strip()
        for known, role in self.config.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return role
        if self._jwt is not None:
            return self._jwt.role_of(token)
        raise AuthenticationError("Authentication failed: the token is not valid")

    def authenticate_basic(self, credentials: str | None, *, header: str | None = None) -> str:
        """The role of ``user:password`` (the binary protocol's ``basic`` auth data), or of
        an HTTP ``Basic`` header: the user, as Pulsar's ``AuthenticationProviderBasic``.

        Raises:
            AuthenticationError: basic authentication is not enabled, or the user is
                unknown or the password wrong.
        """
        basic = self.config.basic
        if basic is None:
            raise AuthenticationError("Unsupported authentication method: [basic]")
        if header is not None:
            return basic.role_of_header(header)
        return basic.role_of(credentials or "")

    def authenticate_certificate(self, common_name: str | None) -> str:
        """The role of a TLS client certificate: its common name (Pulsar's
        ``AuthenticationProviderTls``).

        Raises:
            AuthenticationError: TLS authentication is not enabled, or the client sent no
                certificate with a common name.
        """
        if "tls" not in self.config.providers:
            raise AuthenticationError("Unsupported authentication method: [tls]")
        if not common_name:
            raise AuthenticationError("Client unable to authenticate with TLS certificate")
        return common_name

    def is_super_user(self, role: str) -> bool:
        """True for a super-user role."""
        return role in self.config.super_user_roles

    def check_super_user(self, role: str) -> None:
        """Raises:
        AuthorizationError: ``role`` is not a super-user."""
        if not self.is_super_user(role):
            raise AuthorizationError(f"This operation requires super-user access (role {role!r})")

    def is_tenant_admin(self, role: str, tenant: str) -> bool:
        """A super-user, or an admin role of ``tenant`` (its record's or this file's)."""
        if self.is_super_user(role):
            return True
        roles = self.config.tenants.get(tenant)
        if roles is not None and role in roles.admin_roles:
            return True
        record = None if self._grants is None else self._grants.tenants.get(tenant)
        return record is not None and role in record.admin_roles

    def check_tenant_admin(self, role: str, tenant: str) -> None:
        """Raises:
        AuthorizationError: ``role`` may not administrate ``tenant``."""
        if not self.is_tenant_admin(role, tenant):
            raise AuthorizationError(
                f"Don't have permission to administrate resources on this tenant "
                f"({tenant}, role {role!r})"
            )

    def check_lookup(self, role: str, tenant: str) -> None:
        """Pulsar's ``TopicOperation.LOOKUP``.

        Raises:
            AuthorizationError: "Client is not authorized to Lookup".
        """
        if not self._may_look_up(role, tenant):
            raise AuthorizationError(f"Client is not authorized to Lookup (role {role!r})")

    def _may_look_up(self, role: str, tenant: str) -> bool:
        if self.is_tenant_admin(role, tenant):
            return True
        roles = self.config.tenants.get(tenant)
        return roles is not None and role in roles.lookup_roles

    def check_topic(
        self, role: str, topic: TopicName, operation: TopicOperation, subscription: str = ""
    ) -> None:
        """Pulsar's topic operations: a super-user or tenant admin may do all of them;
        anyone else needs the permission (:mod:`._permissions`; to consume, also a role of
        ``subscription`` if it has roles, and under the namespace's ``subscriptionAuthMode``
        ``Prefix`` a subscription name that starts with the role), or, to look up, one of
        the tenant's lookup roles of this file.

        Raises:
            AuthorizationError: Pulsar's text ("Client is not authorized to Produce", …;
                the ``Prefix`` mode's: :meth:`AuthPolicies.prefix_refusal`).
        """
        if operation is TopicOperation.LOOKUP:
            if self._may_look_up(role, topic.tenant):
                return
        elif self.is_tenant_admin(role, topic.tenant):
            return
        grants = None if self._grants is None else self._grants.auth.get(topic.namespace_name)
        if grants is None:
            raise AuthorizationError(operation.value)
        if operation is TopicOperation.CONSUME and grants.subscription_allows(subscription, role):
            # Pulsar's order (canConsumeAsync): the subscription's roles, then the
            # namespace's subscriptionAuthMode, then the consume permission.
            refusal = grants.prefix_refusal(topic, role, subscription)
            if refusal is not None:
                raise AuthorizationError(refusal)
        if not grants.allows(
            topic, role, operation, subscription, wildcards=self.config.allow_wildcards
        ):
            raise AuthorizationError(operation.value)
