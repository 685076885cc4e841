"""The real ``pulsar-client`` with ``AuthenticationBasic`` against a sidecar whose auth
config enables Pulsar's basic provider: right credentials connect (and the user is the
role the permissions name), wrong ones are refused at CONNECT and nothing is served.

The sidecar answers wrong credentials as Pulsar's ServerCnx does: ERROR AuthenticationError
("Unknown user or invalid password") and the connection closed. The C++ core of the Python
client takes any ERROR before CONNECTED as a dropped connection (``ClientConnection::
handleIncomingCommand``: "Expected CONNECTED command but received ERROR", ResultDisconnected)
and retries until its operation timeout, so the application sees ``Timeout``, not
``ConnectError``."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from pathlib import Path

import pulsar
import pytest

from tests.integration.broker_shim.binary.test_binary_cluster import AuthBinaryShim
from tests.integration.broker_shim.test_lookup_auth import TOKENS, call
from tests.unit.sync.cluster.test_basic_auth import HTPASSWD

pytestmark = pytest.mark.timeout(300)


def _sidecar(
    kafka_bootstrap: str, tmp_path: Path, tenant: str, settings: Mapping[str, object]
) -> AuthBinaryShim:
    """A ready sidecar with these auth settings (and the test tokens, ``admin`` a
    super-user), and ``tenant/ns`` created."""
    config = tmp_path / "auth.json"
    config.write_text(json.dumps({"tokens": TOKENS, "superUserRoles": ["admin"], **settings}))
    shim = AuthBinaryShim(
        kafka_bootstrap, "ba" + uuid.uuid4().hex[:6], "b0", tmp_path,
        extra=("--auth-config", str(config)),
    )  # fmt: skip
    shim.start()
    try:
        shim.wait_ready()
        assert call(shim, "PUT", f"/admin/v2/tenants/{tenant}", "t-admin", "{}").status == 204
        assert call(shim, "PUT", f"/admin/v2/namespaces/{tenant}/ns", "t-admin").status == 204
    except BaseException:
        shim.stop()
        raise
    return shim


def test_basic_credentials_connect_and_wrong_ones_are_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tenant = "ba" + uuid.uuid4().hex[:6]
    users = tmp_path / "htpasswd"
    users.write_text(HTPASSWD)
    settings = {"authenticationProviders": ["token", "basic"], "basicAuthConf": str(users)}
    shim = _sidecar(kafka_bootstrap, tmp_path, tenant, settings)
    try:
        grant = f"/admin/v2/namespaces/{tenant}/ns/permissions/alice"
        assert call(shim, "POST", grant, "t-admin", '["produce", "consume"]').status == 204
        topic = f"persistent://{tenant}/ns/t-{uuid.uuid4().hex[:6]}"
        for password in ("Secret", "secret!"):
            wrong = pulsar.Client(
                shim.broker_url,
                authentication=pulsar.AuthenticationBasic("alice", password),
                operation_timeout_seconds=5,
            )
            with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
                wrong.create_producer(topic, send_timeout_millis=2000)
            wrong.close()
        client = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationBasic("alice", "secret"),
            operation_timeout_seconds=30,
        )
        try:
            consumer = client.subscribe(
                topic, "s", initial_position=pulsar.InitialPosition.Earliest
            )
            client.create_producer(topic).send(b"by alice")
            assert consumer.receive(timeout_millis=30_000).data() == b"by alice"
        finally:
            client.close()
        # carol authenticates (crypt hash) but was granted nothing
        carol = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationBasic("carol", "secret"),
            operation_timeout_seconds=10,
        )
        try:
            with pytest.raises(pulsar.AuthorizationError):
                carol.create_producer(topic, send_timeout_millis=2000)
        finally:
            carol.close()
        # HTTP: the same users, as Authorization: Basic
        basic = "Basic " + base64.b64encode(b"alice:secret").decode()
        lookup = f"/lookup/v2/topic/persistent/{tenant}/ns/{topic.rsplit('/', 1)[1]}"
        from tests.support.http import http

        assert http("GET", shim.url + lookup, headers={"Authorization": basic}).status == 200
        bad = "Basic " + base64.b64encode(b"alice:nope").decode()
        assert http("GET", shim.url + lookup, headers={"Authorization": bad}).status == 401
    finally:
        shim.stop()


def test_a_client_without_credentials_gets_the_anonymous_role(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tenant = "an" + uuid.uuid4().hex[:6]
    shim = _sidecar(kafka_bootstrap, tmp_path, tenant, {"anonymousUserRole": "guest"})
    try:
        topic = f"persistent://{tenant}/ns/t-{uuid.uuid4().hex[:6]}"
        anonymous = pulsar.Client(shim.broker_url, operation_timeout_seconds=30)
        try:
            with pytest.raises(pulsar.AuthorizationError):  # guest was granted nothing yet
                anonymous.create_producer(topic, send_timeout_millis=2000)
            grant = f"/admin/v2/namespaces/{tenant}/ns/permissions/guest"
            assert call(shim, "POST", grant, "t-admin", '["produce", "consume"]').status == 204
            consumer = anonymous.subscribe(
                topic, "s", initial_position=pulsar.InitialPosition.Earliest
            )
            anonymous.create_producer(topic).send(b"by guest")
            assert consumer.receive(timeout_millis=30_000).data() == b"by guest"
        finally:
            anonymous.close()
    finally:
        shim.stop()


def test_a_subscription_with_roles_refuses_other_consumers(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tenant = "sr" + uuid.uuid4().hex[:6]
    shim = _sidecar(kafka_bootstrap, tmp_path, tenant, {})
    try:
        ns = f"/admin/v2/namespaces/{tenant}/ns"
        for role in ("alice", "bob"):
            grant = f"{ns}/permissions/{role}"
            assert call(shim, "POST", grant, "t-admin", '["consume"]').status == 204
        sub = f"{ns}/permissions/subscription/billing"
        assert call(shim, "POST", sub, "t-admin", '["alice"]').status == 204
        topic = f"persistent://{tenant}/ns/t-{uuid.uuid4().hex[:6]}"
        bob = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationToken("t-bob"),
            operation_timeout_seconds=30,
        )
        alice = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationToken("t-alice"),
            operation_timeout_seconds=30,
        )
        try:
            with pytest.raises(pulsar.AuthorizationError):
                bob.subscribe(topic, "billing")
            bob.subscribe(topic, "audit").close()  # another subscription: his consume holds
            alice.subscribe(topic, "billing").close()
        finally:
            bob.close()
            alice.close()
    finally:
        shim.stop()
