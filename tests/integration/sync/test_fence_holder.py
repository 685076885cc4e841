"""The fence-holder election: exactly one member holds, another takes over when it leaves."""

from __future__ import annotations

from collections.abc import Callable

from sync import FenceHolder, HolderConfig, HolderState
from sync.transport import Transport
from tests.support.waits import wait_for

LIVENESS_S = 60.0


def _until(condition: Callable[[], bool], what: str) -> None:
    wait_for(condition, what, timeout_s=LIVENESS_S, interval_s=0.02)


def test_one_holder_at_a_time_and_a_hand_over(
    transport: Transport, unique_name: Callable[[str], str]
) -> None:
    table = unique_name("ce")
    topic = unique_name("election")
    members = [
        FenceHolder(
            transport,
            HolderConfig(
                table=table,
                address=f"http://127.0.0.1:{9000 + i}",
                session_timeout_ms=1_000,
                refresh_s=0.1,
                election_topic=topic,
            ),
        ).start()
        for i in range(3)
    ]
    try:
        _until(lambda: sum(m.holding for m in members) == 1, "one of three holding")
        first = next(m for m in members if m.holding)
        # Everyone learns who it is (the holder's own answer needs no question).
        _until(
            lambda: all(m.holder() == first.config.address for m in members),
            "every member naming the first holder",
        )
        first.close()
        assert first.state is HolderState.CLOSED and not first.holding
        rest = [m for m in members if m is not first]
        _until(lambda: sum(m.holding for m in rest) == 1, "one of the other two holding")
        second = next(m for m in rest if m.holding)
        assert second is not first and second.terms == 1
        _until(
            lambda: all(m.holder() == second.config.address for m in rest),
            "both naming the second holder",
        )
    finally:
        for m in members:
            m.close()
