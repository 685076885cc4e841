"""The official Pulsar Java client (Maven Central ``org.apache.pulsar:pulsar-client``
4.0.7) against two sidecars on Kafka: TLS, the authentication providers, permissions,
the subscription auth mode, producer access modes and sequence ids, as a Pulsar 4.0.7
broker answers them. ``tests/java/ClientChecks.java`` runs every check in one JVM start
and prints a line each; this module makes the keys, certificates, tokens, grants and
topics, and asserts each line.

* Sidecar ``a``: ``pulsar://`` and ``pulsar+ssl://`` (its certificate, checking client
  certificates against the test's CA), the token (HS256 secret key and listed tokens),
  TLS and basic providers, the anonymous role ``guest``.
* Sidecar ``b``: the token provider with an RSA public key (RS256).

What Pulsar's Java client makes of the sidecars' answers (``ClientCnx.handleError``,
``PulsarClientException.isRetriableError``): an ``AuthenticationError`` at CONNECT fails
the operation at once with ``AuthenticationException``; ``AuthorizationError`` with
``AuthorizationException``; ``ProducerFenced`` with ``ProducerFencedException`` and
``ProducerBusy`` with ``ProducerBusyException``.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from broker_shim._tls import TlsSettings
from sync import TopicName
from sync.cluster import AuthConfig, ClusterSettings
from tests.integration.broker_shim.binary.test_binary_java import JAVA
from tests.support.http import http
from tests.support.sidecars import BinarySidecar, applied, started_together
from tests.support.tls import make_tls_files
from tests.support.waits import wait_for
from tests.unit.sync.cluster.test_basic_auth import HTPASSWD

pytestmark = pytest.mark.timeout(600)

#: Listed tokens and their roles (JWTs are made below).
TOKENS = {"t-admin": "admin", "t-bob": "bob", "t-carol": "carol", "t-dave": "dave"}
SECRET = b"policy-sync-java-test-secret-key"  # 256 bits, made here
ADMIN = {"Authorization": "Bearer t-admin"}


def _post(sidecar: BinarySidecar, path: str, body: str) -> None:
    got = http("POST", sidecar.http_url + path, body, headers=ADMIN)
    assert got.status == 204, (path, got.status, got.body)


def _put(sidecar: BinarySidecar, path: str, body: str | None = None) -> None:
    got = http("PUT", sidecar.http_url + path, body, headers=ADMIN)
    assert got.status == 204, (path, got.status, got.body)


def _jwt(key: Any, algorithm: str, **claims: Any) -> str:
    return jwt.encode({"sub": "alice", **claims}, key, algorithm=algorithm)


@pytest.fixture(scope="module")
def checks(
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
    classpath: str,
) -> Iterator[dict[str, str]]:
    """Runs ClientChecks.java once against both sidecars: check name -> its result."""
    work = tmp_path_factory.mktemp("java-auth")
    files = make_tls_files(work / "tls")
    other = make_tls_files(work / "other-ca")
    users = work / "htpasswd"
    users.write_text(HTPASSWD)
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = work / "public.pem"
    public.write_bytes(
        rsa_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    auth_a = AuthConfig.from_json(
        {
            "tokens": TOKENS,
            "superUserRoles": ["admin"],
            "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
            "authenticationProviders": ["token", "tls", "basic"],
            "basicAuthConf": str(users),
            "anonymousUserRole": "guest",
        }
    )
    auth_b = AuthConfig.from_json(
        {"tokens": TOKENS, "superUserRoles": ["admin"], "tokenPublicKey": f"file://{public}"}
    )
    tls = TlsSettings(files.cert, files.key, trust_cert_file=files.ca)
    a = BinarySidecar(kafka_bootstrap, work / "a", tls=tls, lookup=ClusterSettings(auth=auth_a))
    b = BinarySidecar(kafka_bootstrap, work / "b", lookup=ClusterSettings(auth=auth_b))
    with started_together(a, b):
        tenant = "java" + uuid.uuid4().hex[:8]
        _put(a, f"/admin/v2/tenants/{tenant}", "{}")
        for ns in ("ns", "pns", "seq"):
            _put(a, f"/admin/v2/namespaces/{tenant}/{ns}")
        grants = {"alice": "produce,consume", "client": "produce,consume",
                  "guest": "produce,consume", "carol": "consume", "dave": "produce"}  # fmt: skip
        for role, actions in grants.items():
            _post(a, f"/admin/v2/namespaces/{tenant}/ns/permissions/{role}",
                  json.dumps(actions.split(",")))  # fmt: skip
        _post(a, f"/admin/v2/namespaces/{tenant}/pns/permissions/alice", '["consume"]')
        _post(a, f"/admin/v2/namespaces/{tenant}/pns/subscriptionAuthMode", '"Prefix"')
        _post(a, f"/admin/v2/namespaces/{tenant}/seq/deduplication", "true")
        seq = TopicName.parse(f"persistent://{tenant}/seq/t")
        wait_for(lambda: applied(a, seq, "deduplicationEnabled") is True, "dedup on")
        now = int(time.time())
        assert a.broker_url_tls is not None
        properties = {
            "url": a.broker_url,
            "url.tls": a.broker_url_tls,
            "url.rs": b.broker_url,
            "ca": files.ca,
            "ca.other": other.ca,
            "client.cert": files.client_cert,
            "client.key": files.client_key,
            "token.hs": _jwt(SECRET, "HS256", exp=now + 3600),
            "token.hs.wrong": _jwt(b"another-secret-key-of-256-bits!!", "HS256"),
            "token.hs.expired": _jwt(SECRET, "HS256", exp=now - 60),
            "token.rs": _jwt(rsa_key, "RS256", sub="admin"),
            "token.rs.wrong": _jwt(
                rsa.generate_private_key(public_exponent=65537, key_size=2048),
                "RS256",
                sub="admin",
            ),
            "token.admin": "t-admin",
            "token.bob": "t-bob",
            "token.carol": "t-carol",
            "token.dave": "t-dave",
            "basic.password": "secret",
            "topic": f"persistent://{tenant}/ns/t-{uuid.uuid4().hex[:6]}",
            "topic.prefix": f"persistent://{tenant}/pns/t",
            "topic.rs": f"persistent://public/default/rs-{uuid.uuid4().hex[:6]}",
            "topic.modes": f"persistent://{tenant}/ns/modes",
            "topic.wait": f"persistent://{tenant}/ns/wait",
            "topic.seq": str(seq),
        }
        spec = work / "checks.properties"
        # java.util.Properties reads backslashes as escapes; none of these has one
        spec.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        run = subprocess.run(
            ["java", "-cp", classpath, str(JAVA / "ClientChecks.java"), str(spec)],
            capture_output=True, text=True, timeout=500, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-4000:]
        print(run.stdout, *(x for x in run.stderr.splitlines() if x.startswith("took ")))
        lines = [line.split(" ", 2) for line in run.stdout.splitlines()]
        yield {line[1]: line[2] for line in lines if line[0] == "check" and len(line) == 3}


def _ok(results: dict[str, str], name: str) -> str:
    got = results[name]
    assert got.startswith("ok "), (name, got)
    return got.removeprefix("ok ")


def _error(results: dict[str, str], name: str, exception: str) -> str:
    got = results[name]
    assert got.startswith(f"error {exception} "), (name, got)
    return got.removeprefix(f"error {exception} ")


def test_tls_with_the_sidecars_certificate_and_a_client_certificate_as_role(
    checks: dict[str, str],
) -> None:
    assert _ok(checks, "tls-trusted") == "over tls"
    assert checks["tls-untrusted"].startswith("error "), checks["tls-untrusted"]
    assert _ok(checks, "tls-client-certificate") == "by certificate"  # role "client"


def test_tokens_basic_and_anonymous_as_pulsars_providers(checks: dict[str, str]) -> None:
    assert _ok(checks, "jwt-hs256") == "by hs256"
    assert _ok(checks, "jwt-rs256") == "by rs256"
    assert _ok(checks, "basic") == "by basic"
    assert _ok(checks, "anonymous") == "by guest"
    for wrong in ("jwt-hs256-wrong-key", "jwt-hs256-expired", "jwt-rs256-wrong-key",
                  "basic-wrong-password"):  # fmt: skip
        _error(checks, wrong, "AuthenticationException")
    # the anonymous role is authorized as any role: not granted on the other namespace
    _error(checks, "anonymous-not-granted", "AuthorizationException")


def test_permissions_refuse_with_pulsars_authorization_exception(checks: dict[str, str]) -> None:
    # no permission at all: the client's first request, PARTITIONED_METADATA, is refused
    for name in ("not-granted-produce", "not-granted-subscribe"):
        refusal = _error(checks, name, "AuthorizationException")
        assert '"errorMsg":"Client is not authorized to Get Partition Metadata"' in refusal
    # one of the two: the lookup passes, the other operation is refused
    assert _ok(checks, "consume-only-subscribe") == "subscribed"
    refusal = _error(checks, "consume-only-produce", "AuthorizationException")
    assert '"errorMsg":"Client is not authorized to Produce"' in refusal
    assert _ok(checks, "produce-only-produce") == "created"
    refusal = _error(checks, "produce-only-subscribe", "AuthorizationException")
    assert '"errorMsg":"Client is not authorized to subscribe"' in refusal


def test_subscription_auth_mode_prefix(checks: dict[str, str]) -> None:
    refusal = _error(checks, "prefix-other-name", "AuthorizationException")
    assert (
        '"errorMsg":"org.apache.pulsar.broker.PulsarServerException: Failed to create consumer'
        " - The subscription name needs to be prefixed by the authentication role, like "
        "alice-xxxx for topic: persistent://" in refusal
    ), refusal
    assert _ok(checks, "prefix-own-name") == "subscribed"


def test_producer_access_modes(checks: dict[str, str]) -> None:
    _ok(checks, "exclusive-first")
    assert '"errorMsg":"Topic has an existing exclusive producer: ex-1"' in _error(
        checks, "exclusive-second", "ProducerFencedException"
    )
    assert '"errorMsg":"Topic has an existing exclusive producer: ex-1"' in _error(
        checks, "shared-beside-exclusive", "ProducerBusyException"
    )
    assert _ok(checks, "exclusive-with-fencing") == "ex-3"
    _error(checks, "fenced-send", "ProducerFencedException")
    assert _ok(checks, "wait-for-exclusive") == "pending=true"


def test_a_producer_resumes_at_its_last_persisted_sequence_id(checks: dict[str, str]) -> None:
    assert _ok(checks, "sequence-ids") == "fresh=-1 resumed=14 sent=15 again=15 other=-1"


def test_every_check_ran(checks: dict[str, str]) -> None:
    source = (JAVA / "ClientChecks.java").read_text()
    names = {part.split('"', 2)[1] for part in source.split("check(")[1:] if part.startswith('"')}
    assert set(checks) == names
