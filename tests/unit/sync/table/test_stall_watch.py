"""The stall watchdog's verdict on fixed positions and end offsets (``sync.table._stall``):
only a partition that had records waiting at the previous check and has not moved since is
stalled; a partition without lag, a slow one that moves, and records that arrived since the
previous check are not."""

from __future__ import annotations

import pytest

from sync.errors import ConfigurationError
from sync.table._stall import Stall, StallWatch


def _watch() -> StallWatch:
    return StallWatch(30.0, clock=lambda: 0.0)


def test_a_partition_without_lag_is_never_stalled() -> None:
    watch = _watch()
    for _ in range(5):
        assert watch.check({0: 7, 1: 0}, {0: 7, 1: 0}) == []


def test_a_partition_that_did_not_move_with_records_waiting_is_stalled() -> None:
    watch = _watch()
    assert watch.check({0: 3, 1: 4}, {0: 5, 1: 4}) == []  # the first check only looks
    assert watch.check({0: 3, 1: 4}, {0: 6, 1: 4}) == [Stall(0, 3, 6)]


def test_a_slow_partition_that_moves_is_not_stalled() -> None:
    watch = _watch()
    for position in range(10):
        assert watch.check({0: position}, {0: 1_000}) == []


def test_records_that_arrived_since_the_previous_check_get_a_whole_interval() -> None:
    watch = _watch()
    assert watch.check({0: 5}, {0: 5}) == []  # caught up
    assert watch.check({0: 5}, {0: 8}) == []  # new records, not read yet: not a stall
    assert watch.check({0: 5}, {0: 8}) == [Stall(0, 5, 8)]


def test_after_forget_two_more_checks_are_needed() -> None:
    watch = _watch()
    watch.check({0: 5}, {0: 8})
    watch.forget()  # the consumer was recreated, or the end offsets were unknown
    assert watch.check({0: 5}, {0: 8}) == []
    assert watch.check({0: 5}, {0: 8}) == [Stall(0, 5, 8)]


def test_a_partition_without_a_position_is_left_out() -> None:
    watch = _watch()
    watch.check({}, {0: 8})
    assert watch.check({}, {0: 8}) == []


def test_a_check_is_due_one_interval_after_the_previous_one() -> None:
    now = [100.0]
    watch = StallWatch(30.0, clock=lambda: now[0])
    assert not watch.due()
    now[0] = 130.0
    assert watch.due()
    watch.check({0: 1}, {0: 1})
    assert not watch.due()
    now[0] = 160.0
    assert watch.due()


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="stall check interval"):
        StallWatch(0.0)
