"""``policyctl set`` writes through the elected fence holder when there is one.

Every ``policyctl`` run is a new transactional producer of the change-events topic: had it
written itself, its ``init_transactions`` would take the fence from the sidecar elected to
hold it, and that sidecar's writes in flight would be decided again -- on a busy machine,
over and over until they gave up. So ``policyctl`` asks the election group who holds the
fence and sends its write there, as a sidecar forwards one; it then waits until its own
cache applied the write, and prints the result from it. With no holder elected, or none
reachable, it writes itself: the fence, not the election, keeps writes safe.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

from sync import PolicyService, PolicySyncError, PolicyTarget, elected_holder
from sync.constants import SIDECAR_WRITE_PATH
from sync.transport import Transport

from .._forward import FORWARDED_HEADER, REFUSALS

logger = logging.getLogger(__name__)

__all__ = ["set_via_holder"]


def set_via_holder(
    svc: PolicyService,
    transport: Transport,
    target: PolicyTarget,
    fields: dict[str, Any],
    timeout_s: float,
) -> bool:
    """Merge ``fields`` into ``target`` through the fence holder; True once this
    process's cache shows it, False if there is no holder to write through (then the
    caller writes itself). Raises the holder's refusal with its status's error."""
    admin = transport.admin()
    try:
        address = elected_holder(admin, svc.config.cache.topic)
    except PolicySyncError as exc:
        logger.info("cannot tell who holds the fence (%s); writing here", exc)
        return False
    finally:
        close = getattr(admin, "close", None)
        if close is not None:
            close()
    if address is None:
        return False
    request = urllib.request.Request(  # noqa: S310 - a sidecar's own address
        address + SIDECAR_WRITE_PATH,
        data=json.dumps({"writes": [{"key": target.key, "fields": fields}]}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", FORWARDED_HEADER: "1"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s + 5) as resp:  # noqa: S310
            outcome = json.loads(resp.read())["results"][0]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        # urllib's HTTPError is an OSError: a holder not ready (503) is written around
        logger.info("fence holder %s did not take the write (%s); writing here", address, exc)
        return False
    if isinstance(outcome, dict) and isinstance(outcome.get("positions"), dict):
        svc.cache.wait_for({int(p): int(o) for p, o in outcome["positions"].items()}, timeout_s)
        return True
    status = int(outcome.get("status", 500)) if isinstance(outcome, dict) else 500
    reason = str(outcome.get("reason", "")) if isinstance(outcome, dict) else str(outcome)
    refusal = REFUSALS.get(status)
    if refusal is not None:
        raise refusal(reason)
    logger.info("fence holder %s failed the write (%s); writing here", address, reason)
    return False
