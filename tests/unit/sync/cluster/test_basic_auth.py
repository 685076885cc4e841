"""Basic authentication as Pulsar's AuthenticationProviderBasic: htpasswd users with
APR1-MD5 or DES crypt hashes, over the binary protocol's ``user:password`` and HTTP's
``Authorization: Basic``."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from sync.cluster import AuthConfig, Authorizer
from sync.cluster._basic_auth import BasicUsers
from sync.errors import AuthenticationError, ConfigurationError

#: Made by ``openssl passwd -apr1 secret`` and glibc's ``crypt("secret", "Wf")`` (other
#: implementations than the one checking them).
HTPASSWD = "alice:$apr1$atGoqIFq$HBP836r.ZZb8ScLTuwYy9/\ncarol:WfGfkwuY9asZI\n"


def _header(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


def test_htpasswd_users_check_apr1_and_crypt_hashes(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text(HTPASSWD)
    data = "data:;base64," + base64.b64encode(HTPASSWD.encode()).decode()
    for source in (str(path), f"file://{path}", data, base64.b64encode(HTPASSWD.encode()).decode()):
        users = BasicUsers.load(source)
        assert users.role_of("alice:secret") == "alice"
        assert users.role_of("carol:secret") == "carol"
        assert users.role_of_header(_header("alice:secret")) == "alice"
    for wrong in ("alice:Secret", "carol:secreT", "dave:secret", "alice:", "alice"):
        with pytest.raises(AuthenticationError):
            users.role_of(wrong)
    with pytest.raises(AuthenticationError, match="Basic"):
        users.role_of_header("Bearer alice:secret")
    with pytest.raises(AuthenticationError, match="Base64"):
        users.role_of_header("Basic !!!")
    with pytest.raises(ConfigurationError, match="format"):
        BasicUsers.load("data:,alice")
    with pytest.raises(ConfigurationError):
        BasicUsers.load("no such file, nor base64")


def test_the_basic_provider_is_configured_like_pulsars() -> None:
    data = "data:;base64," + base64.b64encode(HTPASSWD.encode()).decode()
    config = AuthConfig.from_json(
        {
            "authenticationProviders": [
                "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"
            ],
            "basicAuthConf": data,
        }
    )
    auth = Authorizer(config)
    assert auth.authenticate(_header("alice:secret")) == "alice"
    assert auth.authenticate_basic("carol:secret") == "carol"
    with pytest.raises(AuthenticationError, match="Unknown user or invalid password"):
        auth.authenticate(_header("alice:nope"))
    with pytest.raises(AuthenticationError, match=r"\[token\]"):
        auth.authenticate("Bearer t")
    with pytest.raises(AuthenticationError, match="Basic"):
        auth.authenticate(None)
    with pytest.raises(ConfigurationError, match="No basic authentication config provided"):
        AuthConfig.from_json({"authenticationProviders": ["basic"]})
    tokens_only = Authorizer(AuthConfig.from_json({"tokens": {"t": "r"}}))
    with pytest.raises(AuthenticationError, match=r"\[basic\]"):
        tokens_only.authenticate(_header("alice:secret"))


def test_the_anonymous_role_is_pulsars_anonymous_user_role() -> None:
    auth = Authorizer(AuthConfig.from_json({"tokens": {"t": "r"}, "anonymousUserRole": "guest"}))
    assert auth.authenticate(None) == "guest"
    assert auth.authenticate("Bearer unknown") == "guest"  # as Pulsar's HTTP authentication
    assert auth.authenticate("Bearer t") == "r"
    assert auth.anonymous() == "guest"
    # a binary client's wrong token is refused, not given the anonymous role (ServerCnx)
    assert auth.authenticate_token("t") == "r"
    with pytest.raises(AuthenticationError):
        auth.authenticate_token("unknown")
    strict = Authorizer(AuthConfig.from_json({"tokens": {"t": "r"}}))
    with pytest.raises(AuthenticationError, match="No anonymous role"):
        strict.anonymous()
    with pytest.raises(ConfigurationError, match="anonymousUserRole"):
        AuthConfig.from_json({"anonymousUserRole": ""})
