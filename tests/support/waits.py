"""Polling waits: a condition checked until it holds or a liveness bound runs out."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    check: Callable[[], bool], what: str, timeout_s: float = 60.0, interval_s: float = 0.05
) -> None:
    """Poll ``check`` every ``interval_s`` until it is true; fail naming ``what`` once
    ``timeout_s`` (a liveness bound, not a speed target) has passed."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(interval_s)
