"""librdkafka's lines at the level of what they mean here: connection failures one per
client and minute instead of a flood, and a transactional producer's lost fence at INFO.

While a cluster is down every client of a sidecar (a dozen) logs each failed reconnect at
ERROR (``FAIL ... Connect to ipv4#127.0.0.1:9092 failed: Connection refused``): a
one-minute outage wrote 2,900 ERROR lines of one sidecar's log. The outage itself is
reported once by the reachability monitor (``kafka UNREACHABLE after N failed probes``,
and /health), so here a client's ``FAIL`` lines become WARNINGs, at most one per client per
``window_s``, the next one saying how many were left out.

A transactional producer that lost its fence (``init_transactions`` of the same
``transactional.id`` elsewhere) logs it at ERROR and CRITICAL ("Fatal error: ... fenced
by a newer instance", "old epoch"). Every sidecar writing a compacted table shares one id
(:mod:`sync.table._fenced_writer`), so two sidecars that write in turn fence each other as
designed: a bench round with two sidecars logged three such lines per write. The code that
owns the producer reports what a fence means (the table writer decides its batch again,
at INFO; an ownership member whose fence is final, at ERROR), so these lines pass at INFO.

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
#: What librdkafka says of a transactional producer another one fenced (PRODUCER_FENCED,
#: INVALID_PRODUCER_EPOCH).
_FENCED = ("fenced by a newer instance", "operation with an old epoch")


class ConnectionFailureFilter(logging.Filter):
    """Passes a client's first ``FAIL`` line of each ``window_s`` as a WARNING, drops the
    others and counts them; a fenced transactional producer's lines pass as INFO; every
    other line passes untouched."""

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        #: client name -> (when its last line passed, lines dropped since)
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 3:
            return True
        if args[0] != _FAIL:
            if record.levelno > logging.INFO and any(m in str(args[2]) for m in _FENCED):
                record.levelno, record.levelname = logging.INFO, "INFO"
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
