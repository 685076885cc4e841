"""Polling waits: a condition checked until it holds or a liveness bound runs out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


def wait_for(
    check: Callable[[], bool], what: str, timeout_s: float = 60.0, interval_s: float = 0.05
) -> None:
    """Poll ``check`` every ``interval_s`` until it is true; fail naming ``what`` once
    ``timeout_s`` (a liveness bound, not a speed target) has passed."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(interval_s)


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    what: str,
    timeout_s: float = 60.0,
    interval_s: float = 0.02,
) -> None:
    """:func:`wait_for` on an event loop: ``check`` (a function, or a coroutine function)
    is asked every ``interval_s`` until it is true, without blocking the loop."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(interval_s)
