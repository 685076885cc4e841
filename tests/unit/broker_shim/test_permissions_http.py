"""Produce/consume permissions over Pulsar's admin REST, on the in-memory twin: granted
and revoked by a tenant admin, seen by every sidecar, enforced on lookups; refused requests
write nothing. The same with the real client on a real Kafka:
``tests/integration/broker_shim/binary/test_binary_permissions.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from sync import NamespaceName, TopicName
from sync.cluster import (
    AuthAction,
    AuthConfig,
    AuthPolicies,
    ClusterService,
    SubscriptionAuthMode,
    TopicOperation,
    parse_actions,
    parse_roles,
    parse_subscription_auth_mode,
)
from sync.cluster._permissions import wildcard_matches
from sync.errors import AuthorizationError, BadRequestError, CodecError, ConfigurationError
from tests.support.waits import eventually
from tests.unit.broker_shim.test_lookup_http import AUTH, _bearer, cluster, run

NS = "/admin/v2/namespaces/acme/app"
TOPIC = "/admin/v2/persistent/acme/app/orders"


def test_auth_policies_round_trip_in_pulsars_json() -> None:
    orders = TopicName.parse("persistent://acme/app/orders")
    policies = AuthPolicies(
        {"bob": frozenset({AuthAction.PRODUCE})},
        {orders.canonical: {"carol": frozenset({AuthAction.CONSUME, AuthAction.PRODUCE})}},
    )
    assert AuthPolicies.from_json(policies.to_json()) == policies
    assert json.loads(policies.to_json()) == {
        "namespace_auth": {"bob": ["produce"]},
        "destination_auth": {"persistent://acme/app/orders": {"carol": ["consume", "produce"]}},
        "subscription_auth_roles": {},
    }
    # a partition is checked with its own grants, then its partitioned topic's; a lookup
    # needs either action
    partition = TopicName.parse("persistent://acme/app/orders-partition-1")
    assert policies.allows(partition, "carol", TopicOperation.CONSUME)
    own = AuthPolicies({}, {partition.canonical: {"dan": frozenset({AuthAction.CONSUME})}})
    assert own.allows(partition, "dan", TopicOperation.CONSUME)
    assert not own.allows(orders, "dan", TopicOperation.CONSUME)
    assert not own.allows(
        TopicName.parse("persistent://acme/app/orders-partition-0"), "dan", TopicOperation.LOOKUP
    )
    assert own.topic_grants(partition) == {"dan": ["consume"]}
    assert policies.topic_grants(partition) == {"bob": ["produce"]}  # not its topic's
    assert policies.allows(orders, "bob", TopicOperation.LOOKUP)
    assert not policies.allows(orders, "bob", TopicOperation.CONSUME)
    other = TopicName.parse("persistent://acme/app/other")
    assert not policies.allows(other, "carol", TopicOperation.LOOKUP)
    assert policies.topic_grants(orders) == {"bob": ["produce"], "carol": ["consume", "produce"]}
    with pytest.raises(CodecError):
        AuthPolicies.from_json(b'{"namespace_auth": {"bob": ["write"]}}')


def test_actions_are_pulsars_auth_actions() -> None:
    assert parse_actions(["produce", "consume"]) == {AuthAction.PRODUCE, AuthAction.CONSUME}
    assert parse_actions([]) == frozenset()
    for bad in (None, "produce", [1], ["write"]):
        with pytest.raises(BadRequestError):
            parse_actions(bad)
    with pytest.raises(BadRequestError, match="^Actions should not be null$"):
        parse_actions(None)
    with pytest.raises(BadRequestError, match="^Roles should not be null$"):
        parse_roles(None)


def test_grant_and_revoke_over_rest_like_pulsar() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        admin = _bearer("t-admin")
        services[0].admin.ensure_tenant("acme")
        assert (await a.put(NS, headers=_bearer("t-alice"))).status == 204
        namespace = NamespaceName("acme", "app")
        before = services[0].store.version
        # refused, nothing written: no admin, a bad body, an unknown namespace
        grant = f"{NS}/permissions/bob"
        assert (await a.post(grant, data='["produce"]', headers=_bearer("t-bob"))).status == 403
        bad = await a.post(grant, data='["write"]', headers=admin)
        assert bad.status == 400 and "AuthAction" in (await bad.json())["reason"]
        assert (await a.post(grant, data="{", headers=admin)).status == 400
        missing = "/admin/v2/namespaces/acme/nope/permissions/bob"
        resp = await a.post(missing, data='["produce"]', headers=admin)
        assert (resp.status, (await resp.json())["reason"]) == (
            404,
            "Topic's namespace does not exist",  # Pulsar's text
        )
        # a topic path needs the topic (Pulsar 4.0.7), and a partition one of its topic's
        carol = f"{TOPIC}/permissions/carol"
        for path in (carol, "/admin/v2/persistent/acme/nope/orders/permissions/carol"):
            resp = await a.post(path, data='["consume"]', headers=admin)
            assert resp.status == 404 and (await resp.json())["reason"].endswith(" not found")
        assert services[0].store.version == before
        assert (await a.put(TOPIC, headers=admin)).status == 204
        resp = await a.get(f"{TOPIC}-partition-0/permissions", headers=admin)
        assert await resp.json() == {
            "reason": "Topic persistent://acme/app/orders-partition-0 not found"
        }
        # a tenant admin grants; every sidecar sees it
        assert (await a.post(grant, data='["produce"]', headers=_bearer("t-alice"))).status == 204
        got = await b.get(f"{NS}/permissions", headers=admin)
        assert await got.json() == {"bob": ["produce"]}
        assert (await b.post(carol, data='["consume"]', headers=admin)).status == 204
        got = await a.get(f"{TOPIC}/permissions", headers=admin)
        assert await got.json() == {"bob": ["produce"], "carol": ["consume"]}
        assert await (await a.get(f"{NS}/permissions", headers=admin)).json() == {
            "bob": ["produce"]
        }
        # Pulsar 4.0: a topic-level revoke of what the topic has no grant of is a 204 that
        # leaves the namespace's grant in place
        before = services[0].store.version
        assert (await a.delete(f"{TOPIC}/permissions/bob", headers=admin)).status == 204
        assert services[0].store.version == before
        assert await (await a.get(f"{NS}/permissions", headers=admin)).json() == {
            "bob": ["produce"]
        }
        assert (await a.delete(carol, headers=admin)).status == 204
        assert (await a.delete(grant, headers=admin)).status == 204
        assert (await a.delete(grant, headers=admin)).status == 204  # Pulsar: idempotent
        assert await (await b.get(f"{TOPIC}/permissions", headers=admin)).json() == {}
        assert services[1].store.auth.get(namespace) == AuthPolicies()
        # the namespace's Policies show its permissions
        assert (await a.post(grant, data='["consume"]', headers=admin)).status == 204
        assert (await a.post(carol, data='["produce"]', headers=admin)).status == 204
        policies = await (await b.get(NS, headers=admin)).json()
        assert policies["auth_policies"] == {
            "namespace_auth": {"bob": ["consume"]},
            "destination_auth": {"persistent://acme/app/orders": {"carol": ["produce"]}},
            "subscription_auth_roles": {},
        }
        # deleting the namespace deletes its permissions (Pulsar's policies go with it)
        assert (await a.delete(TOPIC, headers=admin)).status == 204
        assert (await b.delete(NS, headers=admin)).status == 204
        assert namespace not in services[1].store.auth
        assert (await a.put(NS, headers=admin)).status == 204
        assert await (await a.get(f"{NS}/permissions", headers=admin)).json() == {}

    run(cluster(2, auth=AUTH), scenario)


def test_permissions_decide_who_produces_consumes_and_looks_up() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        c = clients[0]
        service = services[0]
        service.admin.ensure_tenant("acme")
        assert (await c.put(NS, headers=_bearer("t-alice"))).status == 204
        auth = service.auth
        assert auth is not None
        orders = TopicName.parse("persistent://acme/app/orders")
        # bob: a lookup role of the auth config looks up, but neither produces nor consumes
        auth.check_topic("bob", orders, TopicOperation.LOOKUP)
        for operation in (TopicOperation.PRODUCE, TopicOperation.CONSUME):
            with pytest.raises(AuthorizationError, match=operation.value):
                auth.check_topic("bob", orders, operation)
        # dave: nothing until granted; then only what was granted
        assert (await c.put(TOPIC, headers=_bearer("t-alice"))).status == 204
        lookup = "/lookup/v2/topic/persistent/acme/app/orders"
        resp = await c.get(lookup, headers=_bearer("t-dave"))
        assert resp.status == 403
        grant = f"{TOPIC}/permissions/dave"
        assert (await c.post(grant, data='["consume"]', headers=_bearer("t-alice"))).status == 204
        assert (await c.get(lookup, headers=_bearer("t-dave"))).status == 200
        auth.check_topic("dave", orders, TopicOperation.CONSUME)
        with pytest.raises(AuthorizationError, match="Client is not authorized to Produce"):
            auth.check_topic("dave", orders, TopicOperation.PRODUCE)
        # a tenant admin named only in the tenant's record may do everything
        tenant = json.dumps({"adminRoles": ["erin"], "allowedClusters": []})
        assert (
            await c.post("/admin/v2/tenants/acme", data=tenant, headers=_bearer("t-admin"))
        ).status == 204
        auth.check_topic("erin", orders, TopicOperation.PRODUCE)
        auth.check_tenant_admin("erin", "acme")

    tokens = {**AUTH.tokens, "t-dave": "dave"}
    config = type(AUTH)(tokens=tokens, super_user_roles=AUTH.super_user_roles, tenants=AUTH.tenants)
    run(cluster(1, auth=config), scenario)


def test_subscription_roles_narrow_who_consumes_on_a_subscription() -> None:
    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        admin = _bearer("t-admin")
        services[0].admin.ensure_tenant("acme")
        assert (await a.put(NS, headers=admin)).status == 204
        assert (
            await a.post(f"{NS}/permissions/bob", data='["consume"]', headers=admin)
        ).status == 204
        assert (
            await a.post(f"{NS}/permissions/dave", data='["consume"]', headers=admin)
        ).status == 204
        grant = f"{NS}/permissions/subscription/billing"
        assert (await a.post(grant, data='["x", 1]', headers=admin)).status == 400
        assert (await a.post(grant, data='["bob"]', headers=_bearer("t-bob"))).status == 403
        assert (await a.post(grant, data='["bob"]', headers=admin)).status == 204
        got = await b.get(f"{NS}/permissions/subscription", headers=admin)
        assert await got.json() == {"billing": ["bob"]}
        auth = services[1].auth
        assert auth is not None
        orders = TopicName.parse("persistent://acme/app/orders")
        auth.check_topic("bob", orders, TopicOperation.CONSUME, "billing")
        auth.check_topic("dave", orders, TopicOperation.CONSUME, "other")
        with pytest.raises(AuthorizationError, match="Client is not authorized to subscribe"):
            auth.check_topic("dave", orders, TopicOperation.CONSUME, "billing")
        # revoking the last role drops the subscription (as Pulsar): open to any consumer
        grant_none = f"{NS}/permissions/subscription/none"
        assert (await a.post(grant_none, data="", headers=admin)).status == 400
        assert (await a.post(grant_none, data="[]", headers=admin)).status == 204
        assert await (await b.get(f"{NS}/permissions/subscription", headers=admin)).json() == {
            "billing": ["bob"],
            "none": [],
        }
        assert (await b.delete(f"{NS}/permissions/billing/carol", headers=admin)).status == 204
        assert (await b.delete(f"{NS}/permissions/billing/bob", headers=admin)).status == 204
        assert (await b.delete(f"{NS}/permissions/none/bob", headers=admin)).status == 204
        assert await (await a.get(f"{NS}/permissions/subscription", headers=admin)).json() == {}
        auth = services[0].auth
        assert auth is not None
        auth.check_topic("dave", orders, TopicOperation.CONSUME, "billing")
        resp = await a.delete(f"{NS}/permissions/never/bob", headers=admin)
        assert (resp.status, (await resp.json())["reason"]) == (412, "couldn't find subscription")
        # namespace grants kept their place beside the subscription roles
        assert await (await a.get(f"{NS}/permissions", headers=admin)).json() == {
            "bob": ["consume"],
            "dave": ["consume"],
        }

    tokens = {**AUTH.tokens, "t-dave": "dave"}
    config = type(AUTH)(tokens=tokens, super_user_roles=AUTH.super_user_roles, tenants=AUTH.tenants)
    run(cluster(2, auth=config), scenario)


def test_subscription_auth_mode_prefix_as_pulsars() -> None:
    """``subscriptionAuthMode`` Prefix (Pulsar's ``canConsumeAsync``): a role consumes only
    on subscriptions whose names start with the role; the subscription's roles are checked
    first, the consume permission after; tenant admins are not held to it. Set and read by
    tenant admins over REST; a refused request writes nothing."""

    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        admin = _bearer("t-admin")
        services[0].admin.ensure_tenant("acme")
        assert (await a.put(NS, headers=admin)).status == 204
        mode = f"{NS}/subscriptionAuthMode"
        assert await (await b.get(mode, headers=admin)).json() == "None"
        for grant in ("bob", "dave"):
            path = f"{NS}/permissions/{grant}"
            assert (await a.post(path, data='["consume"]', headers=admin)).status == 204
        before = services[0].store.version
        refused = [
            await a.post(mode, data='"Prefix"', headers=_bearer("t-bob")),  # not an admin
            await a.post(mode, data='"Prefixed"', headers=admin),
            await a.post(mode, data="{", headers=admin),
            await a.post("/admin/v2/namespaces/acme/nope/subscriptionAuthMode", data='"Prefix"',
                         headers=admin),
        ]  # fmt: skip
        assert [r.status for r in refused] == [403, 400, 400, 404]
        assert "SubscriptionAuthMode" in (await refused[1].json())["reason"]
        assert services[0].store.version == before
        assert (await a.post(mode, data='"Prefix"', headers=_bearer("t-alice"))).status == 204
        assert await (await b.get(mode, headers=admin)).json() == "Prefix"
        assert (await b.get(NS, headers=admin)).status == 200
        assert (await (await b.get(NS, headers=admin)).json())["subscription_auth_mode"] == "Prefix"
        auth = services[1].auth
        assert auth is not None
        orders = TopicName.parse("persistent://acme/app/orders")
        auth.check_topic("bob", orders, TopicOperation.CONSUME, "bob-billing")
        auth.check_topic("bob", orders, TopicOperation.CONSUME, "bobby")  # startsWith(role)
        auth.check_topic("bob", orders, TopicOperation.LOOKUP)  # no subscription: no check
        auth.check_topic("alice", orders, TopicOperation.CONSUME, "any")  # a tenant admin
        with pytest.raises(AuthorizationError) as refusal:
            auth.check_topic("bob", orders, TopicOperation.CONSUME, "billing")
        assert str(refusal.value) == (
            "org.apache.pulsar.broker.PulsarServerException: Failed to create consumer - The "
            "subscription name needs to be prefixed by the authentication role, like bob-xxxx "
            "for topic: persistent://acme/app/orders"
        )
        # without consume the prefix does not help; the subscription's roles come first
        with pytest.raises(AuthorizationError, match="^Client is not authorized to subscribe$"):
            auth.check_topic("carol", orders, TopicOperation.CONSUME, "carol-1")
        grant = f"{NS}/permissions/subscription/dave-only"
        assert (await a.post(grant, data='["dave"]', headers=admin)).status == 204
        await b.get(f"{NS}/permissions/subscription", headers=admin)  # b caught up
        with pytest.raises(AuthorizationError, match="^Client is not authorized to subscribe$"):
            auth.check_topic("bob", orders, TopicOperation.CONSUME, "dave-only")
        auth.check_topic("dave", orders, TopicOperation.CONSUME, "dave-only")
        # the same mode again writes nothing; no body is None, as Pulsar
        before = services[0].store.version
        assert (await a.post(mode, data='"Prefix"', headers=admin)).status == 204
        assert services[0].store.version == before
        assert (await a.post(mode, data="", headers=admin)).status == 204
        assert await (await b.get(mode, headers=admin)).json() == "None"
        auth.check_topic("bob", orders, TopicOperation.CONSUME, "billing")

    tokens = {**AUTH.tokens, "t-dave": "dave", "t-carol": "carol"}
    config = type(AUTH)(tokens=tokens, super_user_roles=AUTH.super_user_roles, tenants=AUTH.tenants)
    run(cluster(2, auth=config), scenario)


def test_the_subscription_auth_mode_is_kept_only_when_prefix() -> None:
    """Records written before the mode existed read as None; Prefix round-trips."""
    prefix = AuthPolicies(subscription_auth_mode=SubscriptionAuthMode.PREFIX)
    assert json.loads(prefix.to_json())["subscription_auth_mode"] == "Prefix"
    assert AuthPolicies.from_json(prefix.to_json()) == prefix
    assert "subscription_auth_mode" not in json.loads(AuthPolicies().to_json())
    assert "subscription_auth_mode" not in prefix.to_dict()  # not in auth_policies
    with pytest.raises(CodecError):
        AuthPolicies.from_json(b'{"subscription_auth_mode": "Suffix"}')
    assert parse_subscription_auth_mode(None) is SubscriptionAuthMode.NONE
    for bad in ("prefix", 1, ["Prefix"]):
        with pytest.raises(BadRequestError):
            parse_subscription_auth_mode(bad)


def test_a_deleted_topic_takes_its_grants_and_schema_with_it() -> None:
    """Pulsar 4.0.7 deletes a topic's grants (its partitions' too) and its schema with the
    topic: a topic created again under the name starts without them."""

    async def scenario(clients: list[TestClient[Any, Any]], services: list[ClusterService]) -> None:
        a, b = clients
        admin = _bearer("t-admin")
        services[0].admin.ensure_tenant("acme")
        assert (await a.put(NS, headers=admin)).status == 204
        assert (await a.put(f"{TOPIC}/partitions", data="2", headers=admin)).status == 204
        for path, actions in ((TOPIC, '["consume"]'), (f"{TOPIC}-partition-1", '["produce"]')):
            resp = await a.post(f"{path}/permissions/carol", data=actions, headers=admin)
            assert resp.status == 204
        resp = await a.post(f"{NS}/permissions/bob", data='["consume"]', headers=admin)
        assert resp.status == 204
        schema = {"type": "STRING", "schema": "", "properties": {}}
        resp = await a.post("/admin/v2/schemas/acme/app/orders/schema", json=schema, headers=admin)
        assert resp.status == 200

        async def b_sees_the_grants() -> bool:
            resp = await b.get(f"{TOPIC}-partition-1/permissions", headers=admin)
            return bool(await resp.json() == {"bob": ["consume"], "carol": ["produce"]})

        # b's view follows the registry on its reader thread: wait for a's writes there
        await eventually(b_sees_the_grants, "b sees the grants written through a", 20)
        await eventually(
            lambda: "persistent://acme/app/orders" in services[1].store.schemas,
            "b sees the schema written through a",
            20,
        )
        assert (await b.delete(f"{TOPIC}/partitions", headers=admin)).status == 204
        namespace = NamespaceName("acme", "app")
        store = services[0].store
        await eventually(
            lambda: (
                not store.auth[namespace].destination_auth
                and "persistent://acme/app/orders" not in store.schemas
            ),
            "a sees the delete made through b",
            20,
        )
        assert store.auth[namespace].destination_auth == {}
        assert store.auth[namespace].namespace_auth == {"bob": frozenset({AuthAction.CONSUME})}
        assert "persistent://acme/app/orders" not in store.schemas
        assert (await a.put(f"{TOPIC}/partitions", data="2", headers=admin)).status == 204
        for path in (TOPIC, f"{TOPIC}-partition-1"):
            got = await (await a.get(f"{path}/permissions", headers=admin)).json()
            assert got == {"bob": ["consume"]}
        resp = await a.get("/admin/v2/schemas/acme/app/orders/schema", headers=admin)
        assert resp.status == 404

    run(cluster(2, auth=AUTH), scenario)


def test_wildcard_role_patterns_match_as_pulsars() -> None:
    """Pulsar's ``checkWildcardPermission``: ``*`` at the end is a prefix match, at the
    start a suffix match (the other characters, '*' included, literal), alone any role."""
    assert wildcard_matches("app-*", "app-1") and wildcard_matches("app-*", "app-")
    assert not wildcard_matches("app-*", "ap") and not wildcard_matches("app-*", "my-app-1")
    assert wildcard_matches("*.ops", "alice.ops") and not wildcard_matches("*.ops", "alice.dev")
    assert wildcard_matches("*", "anyone") and wildcard_matches("*", "")
    # one side at a time, the other '*' literal: not "contains"
    assert not wildcard_matches("*a*", "bab")
    assert wildcard_matches("*a*", "*ab") and wildcard_matches("*a*", "ba*")
    assert not wildcard_matches("a*c", "abc")  # not a pattern: only the exact name
    assert not wildcard_matches("a*c", "a*c")  # (which the exact-name check grants)
    assert not wildcard_matches("bob", "bob") and not wildcard_matches("", "bob")


def test_grants_to_role_patterns_count_only_with_wildcards_allowed() -> None:
    orders = TopicName.parse("persistent://acme/app/orders")
    other = TopicName.parse("persistent://acme/app/other")
    policies = AuthPolicies(
        {"app-*": frozenset({AuthAction.PRODUCE})},
        {orders.canonical: {"*.readers": frozenset({AuthAction.CONSUME})}},
        {"audit": frozenset({"auditor.readers"})},
    )
    # off (Pulsar's default): a pattern is only the role of that exact name
    assert not policies.allows(orders, "app-1", TopicOperation.PRODUCE)
    assert policies.allows(orders, "app-*", TopicOperation.PRODUCE)
    # on: the namespace's and the topic's patterns both count, for what they grant
    assert policies.allows(orders, "app-1", TopicOperation.PRODUCE, wildcards=True)
    assert policies.allows(other, "app-1", TopicOperation.LOOKUP, wildcards=True)
    assert not policies.allows(orders, "app-1", TopicOperation.CONSUME, wildcards=True)
    assert not policies.allows(orders, "web-1", TopicOperation.PRODUCE, wildcards=True)
    assert policies.allows(orders, "bi.readers", TopicOperation.CONSUME, "s", wildcards=True)
    assert policies.allows(orders, "bi.readers", TopicOperation.LOOKUP, wildcards=True)
    assert not policies.allows(other, "bi.readers", TopicOperation.CONSUME, wildcards=True)
    partition = TopicName.parse("persistent://acme/app/orders-partition-0")
    assert policies.allows(partition, "bi.readers", TopicOperation.CONSUME, wildcards=True)
    # a subscription's roles are names: the pattern grants consume, not that subscription
    assert policies.allows(
        orders, "auditor.readers", TopicOperation.CONSUME, "audit", wildcards=True
    )
    assert not policies.allows(
        orders, "bi.readers", TopicOperation.CONSUME, "audit", wildcards=True
    )


def test_the_auth_config_turns_wildcard_matching_on() -> None:
    """``"authorizationAllowWildcardsMatching": true`` in the auth config (Pulsar's broker
    setting, false by default): a grant over REST to ``app-*`` lets ``app-1`` look up and
    produce, and only with the setting on."""

    def config(wildcards: bool) -> AuthConfig:
        return AuthConfig.from_json(
            {
                "tokens": {"t-admin": "admin", "t-app": "app-1"},
                "superUserRoles": ["admin"],
                "authorizationAllowWildcardsMatching": wildcards,
            }
        )

    assert not AuthConfig.from_json({}).allow_wildcards
    for bad in ("true", 1, None):
        with pytest.raises(ConfigurationError, match="authorizationAllowWildcardsMatching"):
            AuthConfig.from_json({"authorizationAllowWildcardsMatching": bad})

    def scenario_for(wildcards: bool) -> Any:
        async def scenario(
            clients: list[TestClient[Any, Any]], services: list[ClusterService]
        ) -> None:
            c = clients[0]
            services[0].admin.ensure_tenant("acme")
            admin = _bearer("t-admin")
            assert (await c.put(NS, headers=admin)).status == 204
            grant = f"{NS}/permissions/app-*"
            assert (await c.post(grant, data='["produce"]', headers=admin)).status == 204
            got = await c.get(f"{NS}/permissions", headers=admin)
            assert await got.json() == {"app-*": ["produce"]}
            lookup = "/lookup/v2/topic/persistent/acme/app/orders"
            resp = await c.get(lookup, headers=_bearer("t-app"))
            assert resp.status == (200 if wildcards else 403)
            auth = services[0].auth
            assert auth is not None
            orders = TopicName.parse("persistent://acme/app/orders")
            if wildcards:
                auth.check_topic("app-1", orders, TopicOperation.PRODUCE)
            with pytest.raises(AuthorizationError, match="Client is not authorized to subscribe"):
                auth.check_topic("app-1", orders, TopicOperation.CONSUME)

        return scenario

    for wildcards in (False, True):
        run(cluster(1, auth=config(wildcards)), scenario_for(wildcards))
