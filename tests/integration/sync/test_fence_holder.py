"""The fence-holder election: exactly one member holds, another takes over when it leaves."""

from __future__ import annotations

import time
from collections.abc import Callable

from sync import FenceHolder, HolderConfig, HolderState
from sync.transport import Transport

LIVENESS_S = 60.0


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LIVENESS_S
    while not condition():
        assert time.monotonic() < deadline, "not reached within the liveness bound"
        time.sleep(0.02)


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
        _until(lambda: sum(m.holding for m in members) == 1)
        first = next(m for m in members if m.holding)
        # Everyone learns who it is (the holder's own answer needs no question).
        _until(lambda: all(m.holder() == first.config.address for m in members))
        first.close()
        assert first.state is HolderState.CLOSED and not first.holding
        rest = [m for m in members if m is not first]
        _until(lambda: sum(m.holding for m in rest) == 1)
        second = next(m for m in rest if m.holding)
        assert second is not first and second.terms == 1
        _until(lambda: all(m.holder() == second.config.address for m in rest))
    finally:
        for m in members:
            m.close()
