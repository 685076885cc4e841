"""What a slot owner writes, decided without Kafka: the pure functions of
``sync.cluster._ownership_decisions`` (the member that runs them is exercised in
``test_ownership_cluster.py``)."""

from __future__ import annotations

import pytest

from sync._errors import CodecError, ConflictError
from sync.cluster import BundleState, OwnershipRecord, RequestOp, slot_of
from sync.cluster._metadata import Layout
from sync.cluster._ownership_decisions import (
    Decider,
    claim_writes,
    decide_request,
    handover_wait_ms,
    in_layout,
    is_mine,
    names_another_owner,
    new_record,
    plan_takeover,
    release_writes,
    tombstone,
)
from sync.cluster._ownership_model import Request
from sync.naming._bundles import NamespaceBundles
from sync.naming._names import NamespaceName

SLOTS = 8
TOPIC = "__policy_sync.ownership.c1"
ME = Decider("b1", "inc-new", generation=7, slots=SLOTS, topic=TOPIC)
NOW = 1_700_000_000_000
NS = NamespaceName.parse("t/ns")
LAYOUT = Layout.of(NamespaceBundles.default(NS, 4), 1)
BUNDLE, OTHER_BUNDLE = LAYOUT.names[0], LAYOUT.names[1]
SPLIT_AWAY = "t/ns/0x00000000_0x20000000"  # not a bundle of LAYOUT


def layouts(namespace: NamespaceName) -> Layout | None:
    return LAYOUT if namespace == NS else None


def rec(
    state: BundleState,
    broker: str = "b2",
    incarnation: str | None = None,
    *,
    bundle: str = BUNDLE,
    version: int = 3,
    timestamp_ms: int = NOW - 60_000,
    reason: str = "lookup",
) -> OwnershipRecord:
    return OwnershipRecord(
        bundle=bundle,
        state=state,
        broker=broker,
        incarnation=incarnation or f"inc-{broker}",
        version=version,
        generation=2,
        slot=slot_of(bundle, SLOTS),
        timestamp_ms=timestamp_ms,
        reason=reason,
    )


MINE = rec(BundleState.OWNED, "b1", "inc-new")
MY_OLD_INCARNATION = rec(BundleState.OWNED, "b1", "inc-old")
THEIRS = rec(BundleState.OWNED)


def test_a_bundle_is_mine_only_if_owned_by_this_incarnation() -> None:
    assert is_mine(MINE, ME)
    assert not is_mine(MY_OLD_INCARNATION, ME)
    assert not is_mine(THEIRS, ME)
    assert not is_mine(rec(BundleState.RELEASING, "b1", "inc-new"), ME)
    assert not is_mine(None, ME)


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (None, False),
        (MINE, False),
        (THEIRS, True),
        (MY_OLD_INCARNATION, True),
        (rec(BundleState.RELEASING), True),
        (rec(BundleState.FREE), False),
        (rec(BundleState.DELETED), False),
    ],
)
def test_only_owned_or_releasing_records_of_others_are_taken_over(
    record: OwnershipRecord | None, expected: bool
) -> None:
    assert names_another_owner(record, ME) is expected


def test_in_layout_needs_the_namespace_and_the_bundle() -> None:
    assert in_layout(BUNDLE, layouts)
    assert not in_layout(SPLIT_AWAY, layouts)
    assert not in_layout("other/ns/0x00000000_0xffffffff", layouts)
    assert not in_layout("no-slash", layouts)


def test_a_claim_names_us_and_follows_the_current_record() -> None:
    w = new_record(BUNDLE, THEIRS, BundleState.OWNED, "lookup", NOW, ME)
    assert w.key == BUNDLE and w.topic == TOPIC and w.record is not None
    assert w.value == w.record.to_json()
    assert w.record == OwnershipRecord(
        bundle=BUNDLE,
        state=BundleState.OWNED,
        broker="b1",
        incarnation="inc-new",
        version=4,
        generation=7,
        slot=slot_of(BUNDLE, SLOTS),
        timestamp_ms=NOW,
        reason="lookup",
        previous="b2",
    )
    first = new_record(BUNDLE, None, BundleState.OWNED, "lookup", NOW, ME).record
    assert first is not None and first.version == 1 and first.previous is None


def test_other_states_keep_the_current_owner() -> None:
    w = new_record(BUNDLE, THEIRS, BundleState.RELEASING, "failover", NOW, ME)
    assert w.record is not None
    assert (w.record.broker, w.record.incarnation, w.record.previous) == ("b2", "inc-b2", "b2")
    assert w.record.generation == 7  # written by us, under our generation


def test_a_move_the_state_machine_refuses_is_not_written() -> None:
    with pytest.raises(ConflictError):
        new_record(BUNDLE, None, BundleState.RELEASING, "revoked", NOW, ME)
    with pytest.raises(ConflictError):
        new_record(BUNDLE, MINE, BundleState.OWNED, "lookup", NOW, ME)


def test_acquire_claims_unless_already_mine() -> None:
    acquire = Request(RequestOp.ACQUIRE, BUNDLE, "b3")
    for current in (None, THEIRS, MY_OLD_INCARNATION, rec(BundleState.FREE)):
        w = decide_request(acquire, current, True, ME, NOW)
        assert w is not None and w.record is not None
        assert (w.record.state, w.record.broker, w.record.reason) == (
            BundleState.OWNED,
            "b1",
            "lookup",
        )
    assert decide_request(acquire, MINE, True, ME, NOW) is None


def test_unload_frees_only_an_owned_bundle() -> None:
    unload = Request(RequestOp.UNLOAD, BUNDLE, "b3")
    w = decide_request(unload, THEIRS, True, ME, NOW)
    assert w is not None and w.record is not None
    assert (w.record.state, w.record.broker, w.record.reason) == (BundleState.FREE, "b2", "unload")
    assert decide_request(unload, None, True, ME, NOW) is None
    assert decide_request(unload, rec(BundleState.RELEASING), True, ME, NOW) is None


@pytest.mark.parametrize("op", list(RequestOp))
def test_a_bundle_gone_from_its_layout_loses_its_record_whatever_was_asked(op: RequestOp) -> None:
    request = Request(op, SPLIT_AWAY, "b3")
    assert decide_request(request, THEIRS, False, ME, NOW) == tombstone(SPLIT_AWAY, ME)
    assert decide_request(request, None, False, ME, NOW) is None


def test_cleanup_of_a_bundle_still_in_its_layout_changes_nothing() -> None:
    assert decide_request(Request(RequestOp.CLEANUP, BUNDLE, "b3"), THEIRS, True, ME, NOW) is None


def test_a_revoked_slot_releases_only_what_this_incarnation_owns() -> None:
    bundles = [
        (BUNDLE, MINE),
        (OTHER_BUNDLE, rec(BundleState.OWNED, bundle=OTHER_BUNDLE)),
        ("t/ns/free", None),
        ("t/ns/releasing", rec(BundleState.RELEASING, "b1", "inc-new", bundle="t/ns/releasing")),
    ]
    writes = release_writes(bundles, ME, NOW)
    assert [w.key for w in writes] == [BUNDLE]
    assert writes[0].record is not None
    assert (writes[0].record.state, writes[0].record.broker, writes[0].record.reason) == (
        BundleState.RELEASING,
        "b1",
        "revoked",
    )


def test_a_takeover_releases_dead_owners_bundles_before_claiming_them() -> None:
    releasing = rec(BundleState.RELEASING, bundle=OTHER_BUNDLE, reason="revoked")
    gone = rec(BundleState.OWNED, bundle=SPLIT_AWAY)
    bundles = [
        (BUNDLE, THEIRS),
        (OTHER_BUNDLE, releasing),
        (SPLIT_AWAY, gone),
        (LAYOUT.names[2], rec(BundleState.OWNED, "b1", "inc-new", bundle=LAYOUT.names[2])),
        (LAYOUT.names[3], rec(BundleState.FREE, bundle=LAYOUT.names[3])),
        ("t/ns/none", None),
    ]
    plan = plan_takeover(bundles, lambda b: in_layout(b, layouts), ME, NOW)
    assert plan.drop == [tombstone(SPLIT_AWAY, ME)]
    assert [w.key for w in plan.releasing] == [BUNDLE]
    released = plan.releasing[0].record
    assert released is not None
    assert (released.state, released.broker, released.reason) == (
        BundleState.RELEASING,
        "b2",
        "failover",
    )
    # The claims follow the records they replace: our Releasing one, and the revoked one.
    assert plan.claims == [(BUNDLE, released), (OTHER_BUNDLE, releasing)]

    claims = claim_writes(plan.claims, ME, NOW + 250)
    assert [(w.key, w.record.reason if w.record else None) for w in claims] == [
        (BUNDLE, "failover"),
        (OTHER_BUNDLE, "rebalance"),
    ]
    assert all(
        w.record is not None and w.record.state is BundleState.OWNED and is_mine(w.record, ME)
        for w in claims
    )
    assert claims[0].record is not None and claims[0].record.version == THEIRS.version + 2


def test_nothing_to_take_over_plans_nothing() -> None:
    plan = plan_takeover([(BUNDLE, MINE), ("t/ns/x", None)], lambda b: True, ME, NOW)
    assert (plan.drop, plan.releasing, plan.claims) == ([], [], [])


def test_the_claim_waits_until_the_newest_release_is_a_handover_old() -> None:
    def claims(*ages_ms: int) -> list[tuple[str, OwnershipRecord]]:
        return [
            (BUNDLE, rec(BundleState.RELEASING, timestamp_ms=NOW - age, reason="failover"))
            for age in ages_ms
        ]

    assert handover_wait_ms(claims(100), 0.25, NOW) == 150
    assert handover_wait_ms(claims(100, 0, 240), 0.25, NOW) == 250
    assert handover_wait_ms(claims(1_000), 0.25, NOW) <= 0
    # A record stamped by a host whose clock runs ahead: never longer than the handover.
    assert handover_wait_ms(claims(-5_000), 0.25, NOW) == 250


def test_requests_round_trip_and_malformed_ones_are_refused() -> None:
    request = Request(RequestOp.UNLOAD, BUNDLE, "b3")
    assert Request.from_json(request.to_json(NOW)) == request
    assert Request.from_json(b'{"op": "acquire", "bundle": "t/ns/x"}') == Request(
        RequestOp.ACQUIRE, "t/ns/x", ""
    )
    with pytest.raises(CodecError):
        Request.from_json(b"not json")
    with pytest.raises(KeyError):
        Request.from_json(b'{"op": "acquire"}')
    with pytest.raises(ValueError, match="steal"):
        Request.from_json(b'{"op": "steal", "bundle": "t/ns/x"}')
