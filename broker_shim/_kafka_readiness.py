"""Readiness as far as Kafka goes: the cluster answers, and after an outage the policy
cache has caught up with what was committed meanwhile.

A consumer whose brokers are all gone just stops receiving, so the policy cache stays
READY through a whole outage; the transport's reachability monitor is what notices
(:class:`~sync.transport.ReachabilityMonitor`, with hysteresis). While it says
UNREACHABLE, /health answers 503. When it says REACHABLE again, the cache's end offsets
are read once (in the monitor's thread, never in a request) and /health stays 503 until
the cache has applied up to them: other clients may have written while this sidecar could
not read (a partition of this sidecar alone). A cache replaced meanwhile by the supervisor
bootstraps to the end by itself, so the catch-up is then dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sync import CacheState, PolicyCache, PolicyService
from sync.transport import Reachability, ReachabilityMonitor, ReachabilityStatus

logger = logging.getLogger(__name__)

__all__ = ["KafkaReadiness"]

#: Attempts to read the cache's end offsets once Kafka answers again.
_END_OFFSET_ATTEMPTS = 3


class KafkaReadiness:
    """Kafka's part of one sidecar's readiness (see the module)."""

    def __init__(
        self, monitor: ReachabilityMonitor, service: Callable[[], PolicyService | None]
    ) -> None:
        self.monitor = monitor
        self._service = service
        self._lock = threading.Lock()
        #: An outage ended (or is under way) and the cache has not caught up yet.
        self._pending = False
        #: The cache to catch up and the positions it must reach (None: being read).
        self._target: tuple[PolicyCache, dict[int, int]] | None = None
        monitor.on_change(self._changed)

    def start(self) -> None:
        self.monitor.start()

    def close(self) -> None:
        self.monitor.close()

    def _changed(self, status: ReachabilityStatus) -> None:
        """A move of the monitor (in its thread)."""
        if status.state is Reachability.UNREACHABLE:
            with self._lock:
                self._pending, self._target = True, None
            return
        with self._lock:
            if not self._pending:
                return
        svc = self._service()
        if svc is None or svc.cache.state is not CacheState.READY:
            # A cache not READY gates readiness itself, and bootstraps to the end.
            with self._lock:
                self._pending = False
            return
        cache = svc.cache
        for attempt in range(1, _END_OFFSET_ATTEMPTS + 1):
            try:
                target = cache.end_offsets()
            except Exception as exc:  # noqa: BLE001 - Kafka may flap again
                logger.warning("kafka back: policy cache end offsets unread (%d): %s", attempt, exc)
                continue
            logger.info("kafka back: policy cache catching up to %s", target)
            with self._lock:
                if self._pending:
                    self._target = (cache, target)
            return
        logger.warning("kafka back: readiness no longer waits for the policy cache's catch-up")
        with self._lock:
            self._pending = False

    def report(self) -> tuple[bool, dict[str, Any]]:
        """Whether Kafka allows readiness, and the /health fields that say why (no I/O)."""
        status = self.monitor.status()
        fields: dict[str, Any] = {
            "kafka": status.state.value,
            "kafkaSince": datetime.fromtimestamp(status.since, UTC).isoformat(
                timespec="milliseconds"
            ),
        }
        if status.last_error is not None:
            fields["kafkaLastError"] = status.last_error
        if status.state is Reachability.UNREACHABLE:
            return False, fields
        with self._lock:
            if not self._pending:
                return True, fields
            if self._target is None:
                fields["kafkaCatchUp"] = "reading end offsets"
                return False, fields
            cache, target = self._target
            svc = self._service()
            if svc is None or svc.cache is not cache or cache.reached(target):
                self._pending, self._target = False, None
                return True, fields
        fields["kafkaCatchUp"] = {
            "positions": {str(p): o for p, o in cache.positions().items()},
            "target": {str(p): o for p, o in target.items()},
        }
        return False, fields
