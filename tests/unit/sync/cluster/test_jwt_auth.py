"""JWT authentication as Pulsar's AuthenticationProviderToken: keys in Pulsar's forms
(secret key, DER or PEM public key; file:, data: or a path), the role claim, expiry,
audience, and the refusals. Keys and tokens are made here, never committed."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from sync.cluster import AuthConfig, Authorizer
from sync.errors import AuthenticationError, ConfigurationError

SECRET = b"0123456789abcdef0123456789abcdef"  # 256 bits, as `pulsar tokens create-secret-key`


def _auth(**settings: object) -> Authorizer:
    return Authorizer(AuthConfig.from_json(settings))


def _bearer(token: str) -> str:
    return f"Bearer {token}"


def test_a_token_signed_with_the_secret_key_authenticates_its_subject(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    key.write_bytes(SECRET)
    # issued a minute "in the future" by a skewed clock: jjwt does not check iat either
    token = jwt.encode({"sub": "alice", "iat": int(time.time()) + 60}, SECRET, algorithm="HS256")
    for form in (f"file://{key}", str(key), f"data:;base64,{base64.b64encode(SECRET).decode()}"):
        assert _auth(tokenSecretKey=form).authenticate(_bearer(token)) == "alice"
    # The listed tokens still work beside JWTs.
    both = _auth(tokens={"static-1": "ops"}, tokenSecretKey=f"file://{key}")
    assert both.authenticate(_bearer("static-1")) == "ops"
    assert both.authenticate(_bearer(token)) == "alice"


@pytest.mark.parametrize("encoding", [Encoding.DER, Encoding.PEM])
def test_a_token_signed_with_the_private_key_authenticates(
    tmp_path: Path, encoding: Encoding
) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = tmp_path / "public.key"
    public.write_bytes(
        private.public_key().public_bytes(encoding, PublicFormat.SubjectPublicKeyInfo)
    )
    token = jwt.encode({"sub": "bob", "exp": int(time.time()) + 600}, private, algorithm="RS256")
    assert _auth(tokenPublicKey=f"file://{public}").authenticate(_bearer(token)) == "bob"


def test_an_ec_key_and_a_custom_role_claim(tmp_path: Path) -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    public = tmp_path / "ec.key"
    public.write_bytes(
        private.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    )
    token = jwt.encode({"roles": ["carol", "other"]}, private, algorithm="ES256")
    auth = _auth(tokenPublicKey=str(public), tokenPublicAlg="ES256", tokenAuthClaim="roles")
    assert auth.authenticate(_bearer(token)) == "carol"


@pytest.mark.parametrize(
    ("claims", "key", "reason"),
    [
        ({"sub": "alice", "exp": 1}, SECRET, "Signature has expired"),
        ({"sub": "alice", "nbf": int(time.time()) + 3600}, SECRET, "not yet valid"),
        ({"sub": "alice"}, b"another-secret-another-secret-32", "Signature verification failed"),
        ({"name": "alice"}, SECRET, "no 'sub' claim"),
    ],
)
def test_refused_tokens_say_why_as_pulsar(
    claims: dict[str, object], key: bytes, reason: str
) -> None:
    token = jwt.encode(claims, key, algorithm="HS256")
    with pytest.raises(AuthenticationError, match="Failed to authentication token") as err:
        _auth(tokenSecretKey=f"data:;base64,{base64.b64encode(SECRET).decode()}").authenticate(
            _bearer(token)
        )
    assert reason in str(err.value)


def test_unsigned_and_garbage_tokens_are_refused() -> None:
    auth = _auth(tokenSecretKey=base64.b64encode(SECRET).decode())

    def part(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    header, claims = part(b'{"alg":"none","typ":"JWT"}'), part(b'{"sub":"admin"}')
    unsigned = header + "." + claims + "."

    for token in (unsigned, "not.a.jwt", "x"):
        with pytest.raises(AuthenticationError):
            auth.authenticate(_bearer(token))
    with pytest.raises(AuthenticationError, match="Authentication required"):
        auth.authenticate(None)


def test_the_audience_must_name_this_cluster() -> None:
    auth = _auth(
        tokenSecretKey=base64.b64encode(SECRET).decode(),
        tokenAudienceClaim="aud",
        tokenAudience="cluster-a",
    )
    ok = jwt.encode({"sub": "alice", "aud": ["x", "cluster-a"]}, SECRET, algorithm="HS256")
    assert auth.authenticate(_bearer(ok)) == "alice"
    other = jwt.encode({"sub": "alice", "aud": "cluster-b"}, SECRET, algorithm="HS256")
    with pytest.raises(AuthenticationError, match="not contains this broker: cluster-a"):
        auth.authenticate(_bearer(other))
    missing = jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256")
    with pytest.raises(AuthenticationError, match="Found null Audience"):
        auth.authenticate(_bearer(missing))


def test_token_settings_are_checked_when_loaded(tmp_path: Path) -> None:
    secret = base64.b64encode(SECRET).decode()
    with pytest.raises(ConfigurationError, match="exactly one"):
        AuthConfig.from_json({"tokenSecretKey": secret, "tokenPublicKey": secret})
    with pytest.raises(ConfigurationError, match="exactly one"):
        AuthConfig.from_json({"tokenAuthClaim": "sub"})
    with pytest.raises(ConfigurationError, match="doesn't exist"):
        AuthConfig.from_json({"tokenSecretKey": str(tmp_path / "missing.key")})
    with pytest.raises(ConfigurationError, match="not a DER or PEM public key"):
        AuthConfig.from_json({"tokenPublicKey": secret})
    with pytest.raises(ConfigurationError, match="Audience stands for this broker not"):
        AuthConfig.from_json({"tokenSecretKey": secret, "tokenAudienceClaim": "aud"})
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    der = private.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ConfigurationError, match="not a key for tokenPublicAlg ES256"):
        AuthConfig.from_json(
            {"tokenPublicKey": base64.b64encode(der).decode(), "tokenPublicAlg": "ES256"}
        )


def test_authentication_providers_token_and_tls() -> None:
    """Pulsar's ``authenticationProviders`` (short or class names): with ``tls`` a client
    certificate's common name is a role; without ``token`` no bearer token is taken."""
    tls_class = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
    both = _auth(tokens={"t": "ops"}, authenticationProviders=["token", tls_class])
    assert both.authenticate_certificate("client") == "client"
    assert both.authenticate(_bearer("t")) == "ops"
    with pytest.raises(AuthenticationError, match="unable to authenticate with TLS"):
        both.authenticate_certificate(None)
    tls_only = _auth(authenticationProviders=["tls"])
    with pytest.raises(AuthenticationError, match=r"Unsupported authentication method: \[token\]"):
        tls_only.authenticate(_bearer("t"))
    token_only = _auth(tokens={"t": "ops"})  # the default: tokens only
    with pytest.raises(AuthenticationError, match=r"Unsupported authentication method: \[tls\]"):
        token_only.authenticate_certificate("client")
    for bad in (["kerberos"], []):
        with pytest.raises(ConfigurationError, match="authenticationProviders"):
            AuthConfig.from_json({"authenticationProviders": bad})


def test_base64_text_longer_than_a_file_name_is_read_as_base64() -> None:
    """A key given as base64 text is not a path even when the system refuses it as one
    (a run of more than 255 characters without a '/': "File name too long")."""
    from sync.cluster._jwt import read_key

    text = base64.b64encode(b"\x00" * 300).decode()
    assert "/" not in text and len(text) > 255
    assert read_key(text) == b"\x00" * 300
