"""The lookup part of ``make demo``: the same answer from every sidecar, then failover.

:func:`lookup_failover_demo` takes running sidecars (their HTTP base URL and a way to
``kill -9`` each), prints every sidecar's lookup of a few topics, kills the owner of the
first one, and prints how long it took until every survivor answered a live owner again.
Owners are told apart by ``httpUrl`` (sidecars on one host may advertise the same
``brokerUrl``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

__all__ = ["lookup_failover_demo"]


def _owner(base_url: str, topic: str) -> str | None:
    url = f"{base_url}/lookup/v2/topic/{topic.replace('://', '/')}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback demo
            return str(json.loads(resp.read())["httpUrl"])
    except (OSError, urllib.error.HTTPError, ValueError, KeyError):
        return None


def _table(sidecars: Sequence[str], topics: Sequence[str], out: Callable[[str], None]) -> None:
    out(
        "  "
        + "topic".ljust(40)
        + "".join(f"asked {s.rsplit(':', 1)[1]:>6}".rjust(26) for s in sidecars)
    )
    for topic in topics:
        answers = [(_owner(s, topic) or "-").removeprefix("http://") for s in sidecars]
        out("  " + topic[-40:].ljust(40) + "".join(a.rjust(26) for a in answers))


def lookup_failover_demo(
    sidecars: Sequence[tuple[str, Callable[[], None]]],
    topics: Sequence[str],
    *,
    out: Callable[[str], None] = print,
    timeout_s: float = 60.0,
) -> float:
    """Show lookups from every sidecar, kill the owner of ``topics[0]``, time re-ownership.

    ``sidecars`` are ``(base_url, kill)`` pairs. Returns the seconds from the kill until
    every survivor gave the same live owner for every topic.
    """
    urls = [url for url, _ in sidecars]
    out("who serves these topics? (answer: the owner's httpUrl, from each sidecar)")
    _table(urls, topics, out)
    owner = _owner(urls[0], topics[0])
    victim = next(((url, kill) for url, kill in sidecars if url == owner), None)
    if victim is None:
        raise RuntimeError(f"the owner of {topics[0]} ({owner}) is not one of the sidecars")
    survivors = [url for url in urls if url != victim[0]]
    out(f"kill -9 the owner of {topics[0]}: {victim[0]}")
    started = time.monotonic()
    victim[1]()
    while True:
        views = [[_owner(url, t) for t in topics] for url in survivors]
        if all(v == views[0] for v in views) and None not in views[0] and victim[0] not in views[0]:
            break
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"survivors did not agree on new owners within {timeout_s:.0f}s")
        time.sleep(0.02)
    took = time.monotonic() - started
    out(f"every survivor agrees on a live owner again after {took:.2f}s")
    _table(survivors, topics, out)
    return took
