"""Deduplication orchestration (Pulsar's ``MessageDeduplication`` around the state):
loading a topic's producer sequence state while ``deduplicationEnabled`` applies, and
snapshotting it periodically, on unload and when deduplication is turned off.

The state itself (verdicts, replay, the snapshot format) lives in ``_dedup``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sync.transport import Transport

from ._dedup import Deduplicator
from ._topic_state import TopicState

logger = logging.getLogger(__name__)

__all__ = ["DedupLoader"]


class DedupLoader:
    """Loads and snapshots the deduplication state of the topics served here.

    Args:
        transport: the Kafka seam.
        snapshot_s: the seconds between two snapshots (read each time) unless the
            topic's policy says otherwise.
    """

    def __init__(self, transport: Transport, snapshot_s: Callable[[], float]) -> None:
        self.transport = transport
        self.snapshot_s = snapshot_s

    async def load(self, ts: TopicState) -> None:
        dedup = Deduplicator(ts.kafka_topic, ts.num_partitions, ts.partitioned)
        await asyncio.to_thread(dedup.load, self.transport)
        if ts.dedup is None:
            ts.dedup = dedup

    async def load_quietly(self, ts: TopicState) -> None:
        async with ts.lock:
            if ts.dedup is not None or not ts.limits.dedup_enabled:
                return
            try:
                await self.load(ts)
            except Exception:
                logger.exception("loading the deduplication state of %s failed", ts.topic)

    async def snapshot(self, ts: TopicState, *, force: bool = False) -> None:
        dedup = ts.dedup
        if dedup is None:
            return
        period = ts.limits.dedup_snapshot_s or self.snapshot_s()
        if not force and time.monotonic() - dedup.last_snapshot < period:
            return
        try:
            await asyncio.to_thread(dedup.snapshot, self.transport)
        except Exception:
            logger.exception("deduplication snapshot of %s failed; retried later", ts.topic)

    async def snapshot_of(self, dedup: Deduplicator) -> None:
        try:
            await asyncio.to_thread(dedup.snapshot, self.transport)
        except Exception:
            logger.exception("final deduplication snapshot of %s failed", dedup.kafka_topic)
