"""Why one global write beats another (what ``policy-audit geo`` reports), and the
cross-cluster comparison of ``policy-audit reconcile --cluster``: pure functions."""

from __future__ import annotations

import random

import pytest

from sync.audit._geo import ONLY_WRITE, _winner
from sync.audit._geo_reconcile import compare_global, cross_cluster_lines
from sync.geo import LATER_HLC, TIE_CLUSTER, TIE_EVENT_ID, Stamp, pack_hlc, why, wins


def test_why_names_the_part_of_the_order_that_decides() -> None:
    east, west = Stamp(pack_hlc(5, 0), "east", "b"), Stamp(pack_hlc(5, 0), "west", "a")
    assert why(west, east) == TIE_CLUSTER
    assert why(Stamp(pack_hlc(5, 1), "east", "a"), west) == LATER_HLC
    assert why(Stamp(east.hlc, "east", "c"), east) == TIE_EVENT_ID
    with pytest.raises(ValueError, match="does not win"):
        why(east, west)


def test_the_audit_winner_is_the_merge_rule_winner() -> None:
    rng = random.Random(11)
    for _ in range(200):
        stamps = [
            Stamp(pack_hlc(rng.randrange(3), rng.randrange(2)), rng.choice("ew"), str(i))
            for i in range(rng.randrange(1, 6))
        ]
        rows = [{"hlc": s.hlc, "stamp_cluster": s.cluster, "event_id": s.event_id} for s in stamps]
        hlc, cluster, event_id, reason = _winner(rows)  # type: ignore[arg-type]
        best = Stamp(hlc, cluster, event_id)
        assert all(s == best or wins(best, s) for s in stamps)
        rest = [s for s in stamps if s != best]
        if not rest:
            assert reason == ONLY_WRITE
        else:
            runner_up = max(rest, key=Stamp.order_key)
            assert reason == why(best, runner_up)


def test_compare_global_classifies_each_key() -> None:
    old, new = Stamp(pack_hlc(1, 0), "east", "x"), Stamp(pack_hlc(2, 0), "west", "y")
    expected = {"a": (new, False), "b": (old, False), "c": (old, True), "d": (old, False)}
    held = {"a": (old, False), "b": (new, False), "c": (old, True), "e": (new, False)}
    result = compare_global("http://s:1", "west", expected, held)
    assert (result.matching, result.older, result.newer, result.missing, result.extra) == (
        1,
        1,
        1,
        1,
        1,
    )
    assert [(k, kind) for k, kind, _, _ in result.examples] == [
        ("a", "older"),
        ("b", "newer"),
        ("d", "missing"),
        ("e", "extra"),
    ]
    assert result.diverged
    same = compare_global("http://t:1", "east", expected, expected)
    assert not same.diverged
    assert cross_cluster_lines([same, same]) == ["2 sidecars of east hold the same global table"]
