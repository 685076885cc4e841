"""Registry and ownership records, the bundle state machine, auth configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sync._errors import (
    AuthenticationError,
    AuthorizationError,
    CodecError,
    ConfigurationError,
    ConflictError,
)
from sync.cluster import (
    AuthConfig,
    Authorizer,
    BundleState,
    OwnershipRecord,
    allowed_transitions,
)
from sync.cluster._records import (
    BrokerRegistration,
    DataVersion,
    ListenerUrls,
    MemberInfo,
    Membership,
    TopicRecord,
    WritePerm,
    check_transition,
    decode_layout,
    encode_layout,
    kv_key,
    split_kv_key,
)
from sync.naming._bundles import NamespaceBundles
from sync.naming._names import NamespaceName


def _owned(broker: str = "b1", version: int = 1) -> OwnershipRecord:
    return OwnershipRecord("t/ns/0x00000000_0x40000000", BundleState.OWNED, broker, "inc-" + broker,
                           version, 3, 5, 1_700_000_000_000, "lookup")  # fmt: skip


def test_ownership_record_round_trips_with_pip192_field_names() -> None:
    record = _owned()
    body = json.loads(record.to_json())
    assert body["state"] == "Owned" and body["versionId"] == 1 and body["broker"] == "b1"
    assert {"sourceBroker", "timestamp", "generation", "slot", "incarnation"} <= set(body)
    assert OwnershipRecord.from_json(record.to_json()) == record


@pytest.mark.parametrize("raw", [b"nope", b"[]", b'{"bundle": "x"}', b'{"state": "Weird"}'])
def test_bad_ownership_records_are_codec_errors(raw: bytes) -> None:
    with pytest.raises(CodecError):
        OwnershipRecord.from_json(raw)


def test_state_machine_allows_exactly_the_documented_transitions() -> None:
    o, r, f, d = BundleState.OWNED, BundleState.RELEASING, BundleState.FREE, BundleState.DELETED
    assert allowed_transitions(None) == {o}
    assert allowed_transitions(o) == {o, r, f, d}
    assert allowed_transitions(r) == {o, f, d}
    assert allowed_transitions(f) == {o, d}
    assert allowed_transitions(d) == {o}


def test_check_transition_refuses_illegal_moves_and_no_op_claims() -> None:
    bundle = "t/ns/0x00000000_0x40000000"
    check_transition(bundle, None, BundleState.OWNED, "b1")
    with pytest.raises(ConflictError, match="cannot go from no record to Releasing"):
        check_transition(bundle, None, BundleState.RELEASING, "b1")
    free = OwnershipRecord(bundle, BundleState.FREE, "b1", "i", 2, 1, 0, 0, "unload")
    with pytest.raises(ConflictError, match="cannot go from Free to Releasing"):
        check_transition(bundle, free, BundleState.RELEASING, "b1")
    with pytest.raises(ConflictError, match="already owned by b1"):
        check_transition(bundle, _owned("b1"), BundleState.OWNED, "b1")
    check_transition(bundle, _owned("b1"), BundleState.OWNED, "b2")  # failover


def test_a_restarted_broker_takes_back_what_its_dead_incarnation_owned() -> None:
    # issue 11: "bundle … is already owned by 21" (its own dead incarnation) wedged a
    # sidecar restarted with the same broker id.
    bundle = "t/ns/0x00000000_0x40000000"
    old = _owned("b1")
    check_transition(bundle, old, BundleState.OWNED, "b1", "a-new-incarnation")
    with pytest.raises(ConflictError, match="already owned by b1"):
        check_transition(bundle, old, BundleState.OWNED, "b1", old.incarnation)


def test_broker_registration_round_trip_and_web_address() -> None:
    reg = BrokerRegistration(
        cluster="standalone", broker_id="b1", broker_name="broker-a", replica_id=0,
        incarnation="abc", service_url="pulsar://h:6650", service_url_tls="pulsar+ssl://h:6651",
        http_url="http://h:8080", http_url_tls=None,
        advertised_listeners={"internal": ListenerUrls("pulsar://10.0.0.1:6650")},
        data_version=DataVersion(1, 2), heartbeat_ms=42,
    )  # fmt: skip
    assert BrokerRegistration.from_json(reg.to_json()) == reg
    assert reg.web_address == "h:8080"
    assert reg.key == "broker/standalone/b1"


def test_membership_topic_and_perm_records_round_trip() -> None:
    members = Membership(
        "c", (MemberInfo("policy-sync.member.x1", "m-1", "/h", (0, 2)),), "b1", 7, 9
    )
    assert Membership.from_json(members.to_json()) == members
    assert members.incarnations == {"x1"}
    topic = TopicRecord("persistent://t/ns/x", 3, "p.t.ns.x", 5)
    assert TopicRecord.from_json(topic.to_json()) == topic
    perm = WritePerm("c", "broker-a", 4, 6)
    assert WritePerm.from_json(perm.to_json()) == perm


def test_layout_encoding_is_pulsar_bundles_data_plus_a_version() -> None:
    ns = NamespaceName("t", "ns")
    bundles = NamespaceBundles.default(ns, 4)
    raw = encode_layout(bundles, 3)
    assert json.loads(raw)["boundaries"][1] == "0x40000000"
    assert decode_layout(ns, raw) == (bundles, 3)
    with pytest.raises(CodecError):
        decode_layout(ns, b'{"boundaries": ["0x00000000", "0x00000000"]}')


def test_kv_keys_quote_slashes() -> None:
    key = kv_key("ORDER_TOPIC_CONFIG", "persistent://t/ns/x")
    assert key.count("/") == 2
    assert split_kv_key(key) == ("ORDER_TOPIC_CONFIG", "persistent://t/ns/x")


def test_auth_config_refuses_unknown_keys_loudly(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unknown keys"):
        AuthConfig.from_json({"tokens": {}, "superusers": []})
    with pytest.raises(ConfigurationError, match="unknown keys"):
        AuthConfig.from_json({"tenants": {"t": {"admins": []}}})
    path = tmp_path / "auth.json"
    path.write_text("{not json")
    with pytest.raises(ConfigurationError, match="cannot read auth config"):
        AuthConfig.from_file(path)


def test_authorizer_roles() -> None:
    auth = Authorizer(
        AuthConfig.from_json(
            {
                "tokens": {"t-admin": "admin", "t-alice": "alice", "t-bob": "bob", "t-eve": "eve"},
                "superUserRoles": ["admin"],
                "tenants": {"acme": {"adminRoles": ["alice"], "lookupRoles": ["bob"]}},
            }
        )
    )
    with pytest.raises(AuthenticationError):
        auth.authenticate(None)
    with pytest.raises(AuthenticationError):
        auth.authenticate("Bearer nope")
    assert auth.authenticate("Bearer t-bob") == "bob"
    auth.check_lookup("bob", "acme")
    auth.check_lookup("alice", "acme")
    auth.check_lookup("admin", "other")
    with pytest.raises(AuthorizationError, match="Client is not authorized to Lookup"):
        auth.check_lookup("eve", "acme")
    auth.check_tenant_admin("alice", "acme")
    with pytest.raises(AuthorizationError, match="administrate"):
        auth.check_tenant_admin("bob", "acme")
    with pytest.raises(AuthorizationError, match="super-user"):
        auth.check_super_user("alice")
