"""Polling waits: a condition checked until it holds or a liveness bound runs out.

``what`` names what is awaited, for the failure message; a function instead of a string
is called once the bound has run out, so the message can tell what was seen last (e.g.
``lambda: f"both sidecars own some topics: {owners}"``). With ``required=False`` a wait
that runs out is no failure: it returns False, for a best-effort wait before the next step
(the test judges the outcome itself later, or goes on either way).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

#: What a wait is for: a text, or a function that gives it when the wait has failed.
What = str | Callable[[], str]


def _told(what: What) -> str:
    return what if isinstance(what, str) else what()


def wait_for(
    check: Callable[[], bool],
    what: What,
    timeout_s: float = 60.0,
    interval_s: float = 0.05,
    *,
    required: bool = True,
) -> bool:
    """Poll ``check`` every ``interval_s`` until it is true; fail naming ``what`` once
    ``timeout_s`` (a liveness bound, not a speed target) has passed, or return False
    then if not ``required``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() >= deadline:
            assert not required, f"never happened: {_told(what)}"
            return False
        time.sleep(interval_s)
    return True


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    what: What,
    timeout_s: float = 60.0,
    interval_s: float = 0.02,
    *,
    required: bool = True,
) -> bool:
    """:func:`wait_for` on an event loop: ``check`` (a function, or a coroutine function)
    is asked every ``interval_s`` until it is true, without blocking the loop."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return True
        if time.monotonic() >= deadline:
            assert not required, f"never happened: {_told(what)}"
            return False
        await asyncio.sleep(interval_s)
