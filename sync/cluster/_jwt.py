"""JWT authentication as Pulsar's ``AuthenticationProviderToken``.

A token is a JWS signed with a secret key (HS256/384/512) or a private key whose public
half the sidecar holds (RSA: RS*/PS*, EC: ES*). Valid when its signature checks out, it
has not expired (``exp``) and is in force (``nbf``), and — with an audience configured —
its audience claim names this cluster. Its role is the ``sub`` claim (or the configured
one; a list gives its first entry).

Settings, with the names of Pulsar's ``broker.conf`` (the auth config's top-level keys,
see :mod:`._auth`)::

    tokenSecretKey      file:///path/secret.key | data:;base64,<key> | a path | base64 text
    tokenPublicKey      the same forms: a DER (Pulsar's ``tokens create-key-pair``) or PEM
                        SubjectPublicKeyInfo
    tokenPublicAlg      the public key's algorithm family (RS256 by default; ES256 … for EC)
    tokenAuthClaim      the claim holding the role (``sub``)
    tokenAudienceClaim  with tokenAudience: the claim that must name this cluster (``aud``)
    tokenAudience

Refusals carry Pulsar's wording: ``Failed to authentication token: <reason>``.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key

from sync._errors import AuthenticationError, ConfigurationError

__all__ = ["TOKEN_SETTINGS", "TokenSettings", "TokenVerifier", "read_key"]

#: The auth config keys of token authentication (Pulsar's setting names).
TOKEN_SETTINGS = frozenset(
    {
        "tokenSecretKey",
        "tokenPublicKey",
        "tokenPublicAlg",
        "tokenAuthClaim",
        "tokenAudienceClaim",
        "tokenAudience",
    }
)

_HMAC = ["HS256", "HS384", "HS512"]
_RSA = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
_EC = ["ES256", "ES384", "ES512"]


def read_key(value: str, what: str = "token key") -> bytes:
    """A key (or ``what`` else) as Pulsar's ``AuthTokenUtils.readKeyFromUrl`` reads it: a
    ``data:`` URL, a ``file:`` URL, a path that exists, or base64 text.

    Raises:
        ConfigurationError: none of these.
    """
    if value.startswith("data:"):
        meta, sep, data = value[len("data:") :].partition(",")
        if not sep:
            raise ConfigurationError(f"{what} {value[:40]!r}…: a data URL needs a comma")
        if meta.endswith(";base64"):
            try:
                return base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ConfigurationError(f"{what}: bad base64 in data URL: {exc}") from exc
        return urllib.parse.unquote_to_bytes(data)
    path = Path(urllib.parse.urlparse(value).path) if value.startswith("file:") else Path(value)
    try:
        is_path = value.startswith("file:") or path.exists()
    except OSError:  # e.g. base64 text with a "component" longer than a file name may be
        is_path = False
    try:
        if is_path:
            return path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {what} {path}: {exc}") from exc
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        if what == "token key":  # Pulsar's words
            raise ConfigurationError(
                f"Secret/Public Key file {value} doesn't exist (nor is it base64 text)"
            ) from None
        raise ConfigurationError(
            f"{what}: {value[:40]!r} is no data: or file: URL, existing path or base64 text"
        ) from None


@dataclass(frozen=True, slots=True)
class TokenSettings:
    """Token authentication: one validation key and the claims to read."""

    secret_key: bytes | None = None
    public_key: bytes | None = None
    public_alg: str = "RS256"
    auth_claim: str = "sub"
    audience_claim: str | None = None
    audience: str | None = None

    def __post_init__(self) -> None:
        if (self.secret_key is None) == (self.public_key is None):
            raise ConfigurationError(
                "token authentication needs exactly one of tokenSecretKey and tokenPublicKey"
            )
        if self.public_key is not None:
            _public_key(self.public_key, self.public_alg)  # refused at load, not at use
        if self.audience_claim and not self.audience:
            raise ConfigurationError(
                f"Token Audience Claim [{self.audience_claim}] configured, but Audience "
                "stands for this broker not."
            )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TokenSettings | None:
        """The token settings among the auth config's keys (None: none given).

        Raises:
            ConfigurationError: a wrong type, an unreadable key, both keys or neither.
        """
        given = {k: data[k] for k in TOKEN_SETTINGS if k in data}
        if not given:
            return None
        for k, v in given.items():
            if not isinstance(v, str) or not v:
                raise ConfigurationError(f"auth config: {k} must be a non-empty string")
        secret, public = given.get("tokenSecretKey"), given.get("tokenPublicKey")
        return cls(
            secret_key=None if secret is None else read_key(secret),
            public_key=None if public is None else read_key(public),
            public_alg=given.get("tokenPublicAlg", "RS256"),
            auth_claim=given.get("tokenAuthClaim", "sub"),
            audience_claim=given.get("tokenAudienceClaim"),
            audience=given.get("tokenAudience"),
        )


class TokenVerifier:
    """Validates tokens with one :class:`TokenSettings`."""

    def __init__(self, settings: TokenSettings) -> None:
        self.settings = settings
        key: Any
        if settings.secret_key is not None:
            key, self._algorithms = settings.secret_key, _HMAC
        else:
            assert settings.public_key is not None  # noqa: S101 - checked by TokenSettings
            key = _public_key(settings.public_key, settings.public_alg)
            self._algorithms = _EC if isinstance(key, EllipticCurvePublicKey) else _RSA
        self._key = key

    def role_of(self, token: str) -> str:
        """The role ``token`` authenticates.

        Raises:
            AuthenticationError: blank, badly signed, expired, not yet valid, for another
                audience, or without the role claim.
        """
        if not token.strip():
            raise AuthenticationError("Blank token found")
        s = self.settings
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algorithms,
                # As jjwt in Pulsar: exp and nbf are checked, iat is not (a token issued a
                # second "in the future" by a skewed clock is valid there).
                options={"verify_aud": False, "verify_iat": False, "require": []},
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError(f"Failed to authentication token: {exc}") from None
        except jwt.PyJWTError as exc:
            raise AuthenticationError(f"Failed to authentication token: {exc}") from None
        if s.audience_claim:
            self._check_audience(claims.get(s.audience_claim))
        role = claims.get(s.auth_claim)
        if isinstance(role, list):
            role = role[0] if role and isinstance(role[0], str) else None
        if not isinstance(role, str) or not role:
            raise AuthenticationError(
                f"Failed to authentication token: no {s.auth_claim!r} claim to take a role from"
            )
        return role

    def _check_audience(self, found: object) -> None:
        s = self.settings
        if found is None:
            raise AuthenticationError(
                "Failed to authentication token: Found null Audience in token, for claimed "
                f"field: {s.audience_claim}"
            )
        raw = found if isinstance(found, list) else [found]
        names = [n for n in raw if isinstance(n, str)]
        if len(names) != len(raw):
            raise AuthenticationError(f"Audiences in token is not in expected format: {found}")
        if s.audience not in names:
            raise AuthenticationError(
                f"Audiences in token: [{', '.join(names)}] not contains this broker: {s.audience}"
            )


def _public_key(data: bytes, alg: str) -> RSAPublicKey | EllipticCurvePublicKey:
    """A DER or PEM SubjectPublicKeyInfo of the family ``alg`` names."""
    pem = data.lstrip().startswith(b"-----")
    try:
        key = load_pem_public_key(data) if pem else load_der_public_key(data)
    except ValueError as exc:
        raise ConfigurationError(f"tokenPublicKey is not a DER or PEM public key: {exc}") from exc
    want: type = EllipticCurvePublicKey if alg.upper().startswith("ES") else RSAPublicKey
    if not isinstance(key, want):
        raise ConfigurationError(
            f"tokenPublicKey is a {type(key).__name__}, not a key for tokenPublicAlg {alg}"
        )
    return key  # type: ignore[return-value]
