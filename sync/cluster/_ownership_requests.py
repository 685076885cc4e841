"""Requests to the owners of slots, from any thread: a lookup that finds a bundle unowned
(or owned by a dead incarnation), or the admin unloading one, produces a request to the
bundle's slot partition of the slots topic; the slot's owner consumes it and decides (see
:mod:`sync.cluster._ownership_member`).
"""

from __future__ import annotations

import logging
import threading
import time

from sync._errors import CodecError
from sync.transport import Message, Producer, Transport

from ._ownership_model import Request, RequestOp, slot_of, slots_topic

logger = logging.getLogger(__name__)

__all__ = ["OwnershipRequests", "read_request"]


class OwnershipRequests:
    """This sidecar's producer of ownership requests (thread-safe, non-blocking)."""

    def __init__(self, transport: Transport, *, cluster: str, slots: int, broker_id: str) -> None:
        self.broker_id = broker_id
        self._transport = transport
        self._slots = slots
        self._slots_topic = slots_topic(cluster)
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        """Create the producer now rather than on the first request."""
        with self._lock:
            # An idempotent producer's first send waits for its producer id, which would
            # otherwise add ~0.5 s to the first lookup that needs a claim.
            self._producer = self._transport.producer()

    def request(self, op: RequestOp, bundle: str) -> None:
        """Ask the owner of ``bundle``'s slot to act on it (non-blocking)."""
        value = Request(op, bundle, self.broker_id).to_json(int(time.time() * 1000))
        with self._lock:
            if self._producer is None:
                self._producer = self._transport.producer()
            self._producer.produce(
                self._slots_topic,
                bundle.encode("utf-8"),
                value,
                partition=slot_of(bundle, self._slots),
            )
            self._producer.poll(0)

    def close(self) -> None:
        """Close the producer (a later request opens a new one)."""
        with self._lock:
            if self._producer is not None:
                self._producer.close()
                self._producer = None


def read_request(msg: Message) -> Request | None:
    """The request a slots-topic record carries; None (logged) if it is malformed."""
    raw = msg.value()
    if raw is None:
        return None
    try:
        return Request.from_json(raw)
    except (CodecError, KeyError, ValueError) as exc:
        logger.warning(
            "skipping bad ownership request %s[%s]@%s: %s",
            msg.topic(),
            msg.partition(),
            msg.offset(),
            exc,
        )
        return None
