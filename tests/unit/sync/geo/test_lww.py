"""The one merge rule: whatever order records arrive in, with MirrorMaker 2's duplicates and
replays after restarts, every reader that read the same records holds the same state, and it
is each key's largest stamp. Seeded random cases (property style, reproducible)."""

from __future__ import annotations

import random

import pytest

from sync.geo import HybridClock, LwwTable, Stamp, next_hlc, pack_hlc, unpack_hlc, wins

Record = tuple[str, Stamp, str | None]


def _records(rng: random.Random, n: int) -> list[Record]:
    """Writes from two clusters to a few shared keys, with many equal hybrid timestamps (so
    the cluster and event-id ties matter), some of them deletes."""
    out: list[Record] = []
    for i in range(n):
        stamp = Stamp(
            hlc=pack_hlc(1_700_000_000_000 + rng.randrange(5), rng.randrange(3)),
            cluster=rng.choice(("east", "west")),
            event_id=f"e{i:04d}",
        )
        value = None if rng.random() < 0.2 else f"v{i}"
        out.append((rng.choice("abcd"), stamp, value))
    return out


def _arrivals(rng: random.Random, records: list[Record]) -> list[Record]:
    """One reader's view: a shuffled order, duplicates, and replays of prefixes (a restart
    re-reads from an earlier offset; MM2 re-copies after kill -9)."""
    order = records[:]
    rng.shuffle(order)
    arrivals: list[Record] = []
    for record in order:
        arrivals.append(record)
        if rng.random() < 0.2:
            arrivals.append(record)  # duplicated
        if rng.random() < 0.05:
            arrivals.extend(arrivals[: rng.randrange(len(arrivals) + 1)])  # replayed
    return arrivals


def _state(arrivals: list[Record]) -> dict[str, tuple[Stamp, str | None]]:
    table: LwwTable[str] = LwwTable()
    for key, stamp, value in arrivals:
        table.offer(key, stamp, value)
    return {key: (v.stamp, v.value) for key, v in table.items()}


@pytest.mark.parametrize("seed", range(200))
def test_any_interleaving_duplicates_and_replays_give_one_state(seed: int) -> None:
    rng = random.Random(seed)
    records = _records(rng, rng.randrange(1, 40))
    expected: dict[str, tuple[Stamp, str | None]] = {}
    for key in {r[0] for r in records}:
        best = max((r for r in records if r[0] == key), key=lambda r: r[1].order_key())
        expected[key] = (best[1], best[2])
    states = [_state(_arrivals(rng, records)) for _ in range(4)]
    assert all(state == expected for state in states)


def test_ties_go_to_the_greater_cluster_then_the_greater_event_id() -> None:
    east = Stamp(pack_hlc(10, 0), "east", "z")
    west = Stamp(pack_hlc(10, 0), "west", "a")
    assert wins(west, east) and not wins(east, west)
    assert wins(Stamp(pack_hlc(10, 0), "west", "b"), west)
    assert wins(Stamp(pack_hlc(10, 1), "east", "a"), west)  # a larger clock always wins
    assert not wins(west, west)  # a duplicate changes nothing


def test_a_delete_keeps_its_stamp_so_an_older_value_cannot_return() -> None:
    table: LwwTable[str] = LwwTable()
    assert table.offer("k", Stamp(pack_hlc(5, 0), "east", "1"), "old")
    assert table.offer("k", Stamp(pack_hlc(6, 0), "west", "2"), None)
    assert not table.offer("k", Stamp(pack_hlc(5, 1), "east", "3"), "late")
    assert table.get("k") is None
    version = table.version("k")
    assert version is not None and version.stamp.event_id == "2"


def test_clock_increases_strictly_when_the_wall_clock_stalls_or_steps_back() -> None:
    wall = iter([100, 100, 100, 90, 101, 101])
    clock = HybridClock(lambda: next(wall))
    stamps = [clock.tick() for _ in range(6)]
    assert stamps == sorted(set(stamps))
    assert unpack_hlc(stamps[0]) == (100, 0)
    assert unpack_hlc(stamps[3]) == (100, 3)  # the wall clock went back: the counter goes on
    assert unpack_hlc(stamps[4]) == (101, 0)


def test_a_write_after_seeing_a_stamp_issues_a_larger_one() -> None:
    clock = HybridClock(lambda: 50)
    seen = pack_hlc(80, 7)  # another cluster's clock runs ahead
    assert clock.tick(seen) == seen + 1
    assert next_hlc(pack_hlc(80, 7), 81) == pack_hlc(81, 0)
    with pytest.raises(ValueError):
        pack_hlc(1, 1 << 16)
