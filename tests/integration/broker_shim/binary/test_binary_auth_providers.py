"""The real ``pulsar-client`` against one sidecar whose auth config enables Pulsar's token
and basic providers and an anonymous role: right credentials connect (the user is the role
the permissions name), wrong ones are refused at CONNECT and nothing is served, a client
without credentials gets the anonymous role, and a subscription narrowed to some roles
refuses the others.

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
from collections.abc import Iterator

import pulsar
import pytest

from tests.integration.broker_shim.binary.test_binary_cluster import AuthBinaryShim
from tests.integration.broker_shim.test_lookup_auth import TOKENS, call
from tests.support.http import http
from tests.unit.sync.cluster.test_basic_auth import HTPASSWD

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def shim(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AuthBinaryShim]:
    workdir = tmp_path_factory.mktemp("auth-providers")
    users = workdir / "htpasswd"
    users.write_text(HTPASSWD)
    config = workdir / "auth.json"
    config.write_text(
        json.dumps(
            {
                "tokens": TOKENS,
                "superUserRoles": ["admin"],
                "authenticationProviders": ["token", "basic"],
                "basicAuthConf": str(users),
                "anonymousUserRole": "guest",
            }
        )
    )
    sidecar = AuthBinaryShim(
        kafka_bootstrap, "ap" + uuid.uuid4().hex[:6], "b0", workdir,
        extra=("--auth-config", str(config)),
    )  # fmt: skip
    sidecar.start()
    try:
        sidecar.wait_ready()
        yield sidecar
    finally:
        sidecar.stop()


def _namespace(shim: AuthBinaryShim, grants: dict[str, str]) -> str:
    """A new ``tenant/ns`` with these roles granted these actions; its admin path."""
    tenant = "ap" + uuid.uuid4().hex[:6]
    assert call(shim, "PUT", f"/admin/v2/tenants/{tenant}", "t-admin", "{}").status == 204
    ns = f"/admin/v2/namespaces/{tenant}/ns"
    assert call(shim, "PUT", ns, "t-admin").status == 204
    for role, actions in grants.items():
        assert call(shim, "POST", f"{ns}/permissions/{role}", "t-admin", actions).status == 204
    return ns


def _topic(ns: str) -> str:
    return "persistent://" + ns.removeprefix("/admin/v2/namespaces/") + f"/t-{uuid.uuid4().hex[:6]}"


def test_basic_credentials_connect_and_wrong_ones_are_refused(shim: AuthBinaryShim) -> None:
    ns = _namespace(shim, {"alice": '["produce", "consume"]'})
    topic = _topic(ns)
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
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
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
    # HTTP: the same users, as Authorization: Basic; wrong credentials fall back to the
    # anonymous role (Pulsar's HTTP authentication), which may not look the topic up
    lookup = "/lookup/v2/topic/" + topic.replace("://", "/")
    basic = "Basic " + base64.b64encode(b"alice:secret").decode()
    assert http("GET", shim.url + lookup, headers={"Authorization": basic}).status == 200
    bad = "Basic " + base64.b64encode(b"alice:nope").decode()
    assert http("GET", shim.url + lookup, headers={"Authorization": bad}).status == 403


def test_a_client_without_credentials_gets_the_anonymous_role(shim: AuthBinaryShim) -> None:
    ns = _namespace(shim, {})
    topic = _topic(ns)
    anonymous = pulsar.Client(shim.broker_url, operation_timeout_seconds=30)
    try:
        with pytest.raises(pulsar.AuthorizationError):  # guest was granted nothing yet
            anonymous.create_producer(topic, send_timeout_millis=2000)
        grant = f"{ns}/permissions/guest"
        assert call(shim, "POST", grant, "t-admin", '["produce", "consume"]').status == 204
        consumer = anonymous.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        anonymous.create_producer(topic).send(b"by guest")
        assert consumer.receive(timeout_millis=30_000).data() == b"by guest"
    finally:
        anonymous.close()


def test_a_subscription_with_roles_refuses_other_consumers(shim: AuthBinaryShim) -> None:
    ns = _namespace(shim, {"alice": '["consume"]', "bob": '["consume"]'})
    assert (
        call(shim, "POST", f"{ns}/permissions/subscription/billing", "t-admin", '["alice"]').status
        == 204
    )
    topic = _topic(ns)
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
