"""Validation derived from the schema, immutable values, targets/keys, precedence."""

from __future__ import annotations

from typing import Any

import pytest

from sync import (
    Codec,
    FieldCatalog,
    InvalidPolicyError,
    InvalidTopicNameError,
    Policies,
    PolicyScope,
    PolicyTarget,
    effective_policies,
    parse_policy_json,
)


@pytest.fixture(scope="module")
def catalog() -> FieldCatalog:
    return FieldCatalog.from_change_event_schema(Codec().current.parsed)


def test_catalog_has_pulsars_fields(catalog: FieldCatalog) -> None:
    for name in (
        "maxConsumerPerTopic",
        "messageTTLInSeconds",
        "retentionPolicies",
        "dispatchRate",
        "subscriptionTypesEnabled",
        "backLogQuotaMap",
        "subscriptionPolicies",
        "schemaCompatibilityStrategy",
    ):
        assert name in catalog.fields


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"maxConsumerPerTopic": -1}, "maxConsumerPerTopic: must be between 0"),
        ({"maxConsumerPerTopic": "5"}, "expected an integer"),
        ({"maxConsumerPerTopic": True}, "expected an integer"),
        ({"maxConsumerPerTopic": 2**31}, "must be between"),
        ({"deduplicationEnabled": 1}, "expected true or false"),
        ({"bogus": 1}, "unknown policy field 'bogus'"),
        ({"isGlobal": True}, "set by the scope"),
        ({"dispatchRate": {"ratePeriodInSecond": -1}}, "dispatchRate.ratePeriodInSecond"),
        ({"publishRate": {"publishThrottlingRateInMsg": -(2**31) - 1}}, "negative: unlimited"),
        ({"dispatchRate": {"nope": 1}}, "unknown field(s) nope"),
        ({"dispatchRate": 5}, "expected a JSON object"),
        ({"subscriptionTypesEnabled": ["Exclusive", "Nope"]}, "not one of"),
        ({"subscriptionTypesEnabled": ["Shared", "Shared"]}, "duplicate"),
        ({"subscriptionTypesEnabled": "Shared"}, "expected a JSON array"),
        ({"backLogQuotaMap": {"weird": {"limitSize": 1}}}, "is not one of"),
        ({"retentionPolicies": {"retentionTimeInMinutes": -2}}, "-1 means infinite"),
        ({"persistence": {"managedLedgerMaxMarkDeleteRate": -1.0}}, "finite number >= 0"),
        ({"replicationClusters": [""]}, "non-empty string"),
    ],
)
def test_bad_values_are_refused_with_the_field_named(
    catalog: FieldCatalog, patch: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidPolicyError) as info:
        catalog.validate_patch(patch)
    assert message in str(info.value)


def test_not_an_object_is_refused(catalog: FieldCatalog) -> None:
    with pytest.raises(InvalidPolicyError, match="JSON object"):
        catalog.validate_patch([1, 2])


def test_good_values_are_normalized(catalog: FieldCatalog) -> None:
    out = catalog.validate_patch(
        {
            "retentionPolicies": {"retentionTimeInMinutes": -1},
            "dispatchRate": {"dispatchThrottlingRateInMsg": 100},
            "maxConsumerPerTopic": None,
        }
    )
    assert out["retentionPolicies"] == {"retentionTimeInMinutes": -1, "retentionSizeInMB": 0}
    assert out["dispatchRate"]["ratePeriodInSecond"] == 1
    assert out["maxConsumerPerTopic"] is None


@pytest.mark.parametrize(
    "patch",
    [
        # What `pulsar-admin topics set-publish-rate --msg-publish-rate 20` sends.
        {"publishRate": {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}},
        {"publishRate": {"publishThrottlingRateInMsg": -2, "publishThrottlingRateInByte": -2**63}},
        *(
            {name: {"dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": -7,
                    "relativeToPublishRate": False, "ratePeriodInSecond": 1}}
            for name in ("dispatchRate", "subscriptionDispatchRate", "replicatorDispatchRate")
        ),
        {"subscribeRate": {"subscribeThrottlingRatePerConsumer": -1, "ratePeriodInSecond": 30}},
        {"subscriptionPolicies": {"s": {"dispatchRate": {
            "dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": -1,
            "relativeToPublishRate": False, "ratePeriodInSecond": 1}}}},
    ],
)  # fmt: skip
def test_negative_rates_mean_unlimited_and_are_kept_as_sent(
    catalog: FieldCatalog, patch: dict[str, Any]
) -> None:
    """As Pulsar 4.0.7 stores them (tests/compat: ``*-get-unlimited``, ``*-get-negative``)."""
    assert catalog.validate_patch(patch) == patch


@pytest.mark.parametrize("text", ["{", '{"a": NaN}', '{"a": 1, "a": 2}', "[1,"])
def test_malformed_json_is_refused(text: str) -> None:
    with pytest.raises(InvalidPolicyError):
        parse_policy_json(text)


@pytest.mark.parametrize(
    "text",
    [
        "9" * 5000,  # past int()'s 4,300-digit limit: was a ValueError, not refused
        "-" + "9" * 4400,
        str(2**63),
        str(-(2**63) - 1),
        '{"messageTTLInSeconds": 18446744073709551616}',
        "[1, 2, 99999999999999999999]",
        "1e999",
        "-1e999",
        '{"rate": 1E400}',
    ],
)
def test_numbers_no_java_type_holds_are_refused(text: str) -> None:
    with pytest.raises(InvalidPolicyError, match="out of range") as refused:
        parse_policy_json(text)
    assert len(str(refused.value)) < 200  # a 5,000-digit number is not echoed whole


def test_numbers_java_holds_parse_as_before() -> None:
    assert parse_policy_json(str(2**63 - 1)) == 2**63 - 1
    assert parse_policy_json(str(-(2**63))) == -(2**63)
    assert parse_policy_json("[0, -0, 1000000000000000000, 1.5, 1e3, 1e-400]") == [
        0, 0, 10**18, 1.5, 1000.0, 0.0,
    ]  # fmt: skip


def test_bind_refuses_integers_their_java_type_cannot_hold(catalog: FieldCatalog) -> None:
    # Pulsar's JSON binding (400) runs before its own range checks (412): maxMessageSize
    # is an int, compactionThreshold a long.
    for patch in (
        {"maxMessageSize": 2**31},
        {"messageTTLInSeconds": -(2**31) - 1},
        {"retentionPolicies": {"retentionTimeInMinutes": 2**31, "retentionSizeInMB": 1}},
        {"backLogQuotaMap": {"destination_storage": {"limitTime": 2**40}}},
        {"compactionThreshold": 2**63},
    ):
        with pytest.raises(InvalidPolicyError, match="out of range of a Java"):
            catalog.bind(patch)
    # Everything else is validate_patch's to refuse (or Pulsar's own checks').
    left: tuple[dict[str, Any], ...] = (
        {"maxMessageSize": -1},
        {"compactionThreshold": 2**63 - 1},
        {"messageTTLInSeconds": 1.5},
        {"maxMessageSize": "x"},
        {"retentionPolicies": [2**40]},
        {"unknownField": 2**70},
    )
    for patch in left:
        catalog.bind(patch)


def test_policies_are_immutable_and_merge_by_copy() -> None:
    a = Policies({"maxConsumerPerTopic": 1, "subscriptionTypesEnabled": ["Shared"]})
    b = a.merged({"maxProducerPerTopic": 2, "maxConsumerPerTopic": None})
    assert dict(a) == {"maxConsumerPerTopic": 1, "subscriptionTypesEnabled": ("Shared",)}
    assert b.to_json_obj() == {"maxProducerPerTopic": 2, "subscriptionTypesEnabled": ["Shared"]}
    with pytest.raises(TypeError):
        a["x"] = 1  # type: ignore[index]
    nested = Policies({"dispatchRate": {"dispatchThrottlingRateInMsg": 1}})
    with pytest.raises(TypeError):
        nested["dispatchRate"]["dispatchThrottlingRateInMsg"] = 2


@pytest.mark.parametrize(
    ("text", "is_global", "key", "scope"),
    [
        ("orders", False, "persistent://public/default/orders", PolicyScope.LOCAL),
        ("t/ns/orders-partition-7", False, "persistent://t/ns/orders", PolicyScope.LOCAL),
        ("persistent://t/ns/orders", True, "__G__persistent://t/ns/orders", PolicyScope.GLOBAL),
        ("non-persistent://t/ns/x", False, "non-persistent://t/ns/x", PolicyScope.LOCAL),
        ("t/ns", False, "__NS__t/ns", PolicyScope.NAMESPACE),
    ],
)
def test_targets_and_keys(text: str, is_global: bool, key: str, scope: PolicyScope) -> None:
    target = PolicyTarget.parse(text, is_global=is_global)
    assert target.key == key and target.scope is scope
    assert PolicyTarget.from_key(key) == target


def test_bad_targets() -> None:
    with pytest.raises(InvalidTopicNameError):
        PolicyTarget.parse("a/b/c/d")
    with pytest.raises(InvalidTopicNameError):
        PolicyTarget.parse("t/ns", is_global=True)


def test_precedence_is_per_field() -> None:
    local = Policies({"maxConsumerPerTopic": 1})
    glob = Policies({"maxConsumerPerTopic": 2, "messageTTLInSeconds": 20})
    ns = Policies({"messageTTLInSeconds": 30, "maxProducerPerTopic": 3})
    defaults = {"maxProducerPerTopic": 4, "maxSubscriptionsPerTopic": 5}
    eff = effective_policies(local, glob, ns, defaults)
    assert eff.to_json_obj() == {
        "maxConsumerPerTopic": 1,
        "messageTTLInSeconds": 20,
        "maxProducerPerTopic": 3,
        "maxSubscriptionsPerTopic": 5,
    }
    assert effective_policies(None, None, None, None).to_json_obj() == {}
