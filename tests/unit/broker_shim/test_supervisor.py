"""The one supervisor: restarts a FAILED component, backs off while restarts keep failing,
and resets the back-off once an incarnation is healthy."""

from __future__ import annotations

import asyncio

import pytest

from broker_shim._supervisor import Backoff, supervise


def test_restarts_back_off_and_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", recorded_sleep)
    # What each check finds: three failures in a row, one healthy check, one more failure.
    checks = iter(["broken", "broken", "broken", None, "broken"])
    events: list[str] = []

    def failure() -> str | None:
        try:
            return next(checks)
        except StopIteration:
            raise asyncio.CancelledError from None  # end of the script: stop supervising

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await supervise(
                "component",
                failure=failure,
                healthy=lambda: True,
                close_failed=lambda: events.append("close"),
                start_fresh=lambda: events.append("start"),
                backoff=Backoff(check_s=0.01, initial_s=1.0, max_s=3.0),
            )

    asyncio.run(main())
    assert events == ["close", "start"] * 4
    restart_waits = [w for w in waits if w != 0.01]
    # 1, 2, 3 (capped at max_s) while failing; the healthy check resets it to 1.
    assert restart_waits == [1.0, 2.0, 3.0, 1.0]
