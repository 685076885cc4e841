"""Basic authentication as Pulsar's ``AuthenticationProviderBasic``.

The users are an htpasswd file (``basicAuthConf`` in the auth config: a ``data:`` or
``file:`` URL, a path, or base64 text, as Pulsar reads it), one ``user:hash`` per line;
the hash is Apache's APR1-MD5 (``$apr1$…``, ``htpasswd -m``) or DES crypt
(``htpasswd -d``), the two Pulsar checks. A client sends ``user:password``: the binary
protocol's CONNECT with auth method ``basic``, HTTP as ``Authorization: Basic <base64>``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from types import MappingProxyType

from passlib.hash import apr_md5_crypt, des_crypt

from sync._errors import AuthenticationError, ConfigurationError

from ._jwt import read_key

__all__ = ["BasicUsers"]

_REFUSED = "Unknown user or invalid password"


class BasicUsers:
    """The users of an htpasswd file and their password hashes."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = MappingProxyType(dict(users))

    @classmethod
    def load(cls, value: str) -> BasicUsers:
        """Read ``basicAuthConf``.

        Raises:
            ConfigurationError: unreadable, or a line that is not ``user:hash``.
        """
        raw = read_key(value, "basicAuthConf")
        users: dict[str, str] = {}
        for line in raw.decode("utf-8", "replace").splitlines():
            parts = line.split(":")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise ConfigurationError(
                    "basicAuthConf: The format of the password auth conf file is invalid"
                )
            users[parts[0]] = parts[1]
        return cls(users)

    def role_of(self, credentials: str) -> str:
        """The role (the user) of ``user:password``.

        Raises:
            AuthenticationError: "Unknown user or invalid password", or malformed.
        """
        parts = credentials.split(":")
        if len(parts) != 2:
            raise AuthenticationError("Base64 decoded params are invalid")
        user, password = parts
        stored = self._users.get(user)
        if stored is None or not _matches(password, stored):
            raise AuthenticationError(_REFUSED)
        return user

    def role_of_header(self, header: str) -> str:
        """The role of an ``Authorization: Basic <base64 of user:password>`` header."""
        scheme, _, encoded = header.strip().partition(" ")
        if scheme.lower() != "basic" or not encoded.strip():
            raise AuthenticationError('Authentication token has to be started with "Basic "')
        try:
            credentials = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError) as exc:
            raise AuthenticationError(f"Base64 decoding is failure: {exc}") from None
        return self.role_of(credentials)


def _matches(password: str, stored: str) -> bool:
    try:
        if stored.startswith("$apr1"):
            return bool(stored.count("$") == 3 and apr_md5_crypt.verify(password, stored))
        # Pulsar: crypt(password, the hash's first two characters) must give the hash
        return bool(des_crypt.identify(stored) and des_crypt.verify(password, stored))
    except (ValueError, TypeError):  # a malformed hash matches nothing
        return False
