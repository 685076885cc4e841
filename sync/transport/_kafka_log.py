"""librdkafka's connection-failure lines, one per client and minute instead of a flood.

While a cluster is down every client of a sidecar (a dozen) logs each failed reconnect at
ERROR (``FAIL ... Connect to ipv4#127.0.0.1:9092 failed: Connection refused``): a
one-minute outage wrote 2,900 ERROR lines of one sidecar's log. The outage itself is
reported once by the reachability monitor (``kafka UNREACHABLE after N failed probes``,
and /health), so here a client's ``FAIL`` lines become WARNINGs, at most one per client per
``window_s``, the next one saying how many were left out.

confluent-kafka hands each line to the ``logger`` config as ``log(level, "%s [%s] %s",
facility, client name, message)``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["ConnectionFailureFilter"]

#: librdkafka's facility of connection failures (refused, reset, timed out, all brokers down).
_FAIL = "FAIL"


class ConnectionFailureFilter(logging.Filter):
    """Passes a client's first ``FAIL`` line of each ``window_s`` as a WARNING, drops the
    others and counts them; every other line passes untouched."""

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        #: client name -> (when its last line passed, lines dropped since)
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 3 or args[0] != _FAIL:
            return True
        client = str(args[1])
        now = self._clock()
        with self._lock:
            passed_at, dropped = self._seen.get(client, (None, 0))
            if passed_at is not None and now - passed_at < self.window_s:
                self._seen[client] = (passed_at, dropped + 1)
                return False
            self._seen[client] = (now, 0)
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        if dropped:
            record.msg = f"{record.msg} (and {dropped} like it in the last {self.window_s:.0f} s)"
        return True
