"""The audit's rules as pure functions: diffs, transitions, bursts, chart buckets."""

from __future__ import annotations

import pytest

from sync import ConfigurationError
from sync.audit import Action, AnomalyKind, AnomalyRules, Severity, changed_fields
from sync.audit import transition_anomaly as transition
from sync.audit._rules import TRANSITION_RULES, choose_bucket_seconds, find_bursts

FIELDS = (
    "maxConsumerPerTopic",
    "messageTTLInSeconds",
    "retentionPolicies",
    "backLogQuotaMap",
    "subscriptionTypesEnabled",
)


class TestChangedFields:
    def test_first_record_lists_every_set_field_in_schema_order(self) -> None:
        after = {"retentionPolicies": {"retentionTimeInMinutes": 1}, "maxConsumerPerTopic": 5}
        assert changed_fields(None, after, FIELDS) == ["maxConsumerPerTopic", "retentionPolicies"]

    def test_delete_lists_every_field_that_was_set(self) -> None:
        before = {"messageTTLInSeconds": 60, "subscriptionTypesEnabled": ["Shared"]}
        assert changed_fields(before, None, FIELDS) == [
            "messageTTLInSeconds",
            "subscriptionTypesEnabled",
        ]

    def test_update_lists_changed_added_and_removed_fields_only(self) -> None:
        before = {"maxConsumerPerTopic": 5, "messageTTLInSeconds": 60, "retentionPolicies": None}
        after = {"maxConsumerPerTopic": 6, "retentionPolicies": {"retentionSizeInMB": 1}}
        assert changed_fields(before, after, FIELDS) == [
            "maxConsumerPerTopic",
            "messageTTLInSeconds",
            "retentionPolicies",
        ]

    def test_identical_documents_change_nothing(self) -> None:
        doc = {"maxConsumerPerTopic": 5, "subscriptionTypesEnabled": ["Shared", "Failover"]}
        assert changed_fields(doc, dict(doc), FIELDS) == []
        assert changed_fields(None, None, FIELDS) == []

    def test_maps_compare_by_content_not_key_order(self) -> None:
        a = {"backLogQuotaMap": {"destination_storage": {"limitSize": 1}, "message_age": {}}}
        b = {"backLogQuotaMap": {"message_age": {}, "destination_storage": {"limitSize": 1}}}
        assert changed_fields(a, b, FIELDS) == []

    def test_nested_and_list_order_changes_count(self) -> None:
        a = {"retentionPolicies": {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2}}
        b = {"retentionPolicies": {"retentionTimeInMinutes": 1, "retentionSizeInMB": 3}}
        assert changed_fields(a, b, FIELDS) == ["retentionPolicies"]
        c = {"subscriptionTypesEnabled": ["Shared", "Failover"]}
        d = {"subscriptionTypesEnabled": ["Failover", "Shared"]}
        assert changed_fields(c, d, FIELDS) == ["subscriptionTypesEnabled"]

    def test_fields_outside_the_schema_are_refused(self) -> None:
        with pytest.raises(ValueError, match="outside the schema"):
            changed_fields(None, {"bogus": 1}, FIELDS)


class TestTransitions:
    @pytest.mark.parametrize(
        ("previous", "action", "kind", "severity"),
        [
            (None, Action.UPDATE, AnomalyKind.UPDATE_BEFORE_INSERT, Severity.WARNING),
            (Action.DELETE, Action.UPDATE, AnomalyKind.UPDATE_BEFORE_INSERT, Severity.ERROR),
            (None, Action.DELETE, AnomalyKind.DELETE_OF_UNKNOWN_KEY, Severity.WARNING),
            (Action.DELETE, Action.DELETE, AnomalyKind.DELETE_OF_UNKNOWN_KEY, Severity.ERROR),
            (Action.INSERT, Action.INSERT, AnomalyKind.INSERT_OF_EXISTING_KEY, Severity.ERROR),
            (Action.UPDATE, Action.INSERT, AnomalyKind.INSERT_OF_EXISTING_KEY, Severity.ERROR),
        ],
    )
    def test_anomalous_transitions(
        self, previous: Action | None, action: Action, kind: AnomalyKind, severity: Severity
    ) -> None:
        found = transition(previous, action)
        assert found is not None
        assert (found.kind, found.severity) == (kind, severity)
        assert found.detail

    @pytest.mark.parametrize(
        ("previous", "action"),
        [
            (None, Action.INSERT),
            (Action.INSERT, Action.UPDATE),
            (Action.UPDATE, Action.UPDATE),
            (Action.INSERT, Action.DELETE),
            (Action.UPDATE, Action.DELETE),
            (Action.DELETE, Action.INSERT),
        ],
    )
    def test_what_a_correct_writer_writes_is_normal(
        self, previous: Action | None, action: Action
    ) -> None:
        assert transition(previous, action) is None

    def test_every_pair_is_decided(self) -> None:
        changes = (Action.INSERT, Action.UPDATE, Action.DELETE)
        decided = {(p, a) for p in (None, *changes) for a in changes}
        assert set(TRANSITION_RULES) <= decided
        assert len(decided) == 12

    def test_poison_and_none_are_not_change_actions(self) -> None:
        with pytest.raises(ValueError):
            transition(None, Action.POISON)
        with pytest.raises(ValueError):
            transition(Action.NONE, Action.UPDATE)


class TestBursts:
    def test_more_than_the_threshold_in_one_window_is_a_burst(self) -> None:
        rules = AnomalyRules(burst_threshold=3, burst_window_s=60)
        minute = 1_700_000_040_000  # a multiple of 60,000 ms
        base = minute + 40_000
        changes = [("t/a", base + i * 1000) for i in range(4)]  # 4 within one minute
        changes += [("t/b", base + i * 1000) for i in range(3)]  # exactly the threshold
        assert find_bursts(changes, rules) == [("t/a", minute, 4)]

    def test_windows_are_tumbling_and_epoch_aligned(self) -> None:
        rules = AnomalyRules(burst_threshold=3, burst_window_s=60)
        start = 1_700_000_040_000 + 45_000
        # 6 changes, 5 s apart, across a minute boundary: 3 on each side, no burst.
        changes = [("t/a", start + i * 5_000) for i in range(6)]
        assert find_bursts(changes, rules) == []

    @pytest.mark.parametrize(
        "kwargs",
        [{"burst_threshold": 0}, {"burst_window_s": 0}, {"out_of_order_tolerance_ms": -1}],
    )
    def test_rules_are_validated(self, kwargs: dict[str, int]) -> None:
        with pytest.raises(ConfigurationError):
            AnomalyRules(**kwargs)

    def test_default_burst_rule_is_documented(self) -> None:
        rules = AnomalyRules()
        assert (rules.burst_threshold, rules.burst_window_s) == (100, 60)


@pytest.mark.parametrize(
    ("span_s", "bucket"),
    [(0, 1), (100, 1), (121, 5), (3600, 30), (86400, 1800), (10 * 86400, 21600)],
)
def test_chart_buckets_keep_the_timeline_readable(span_s: float, bucket: int) -> None:
    assert choose_bucket_seconds(span_s) == bucket
    assert span_s / choose_bucket_seconds(span_s) <= 120
