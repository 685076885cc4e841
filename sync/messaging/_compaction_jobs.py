"""Topic compaction orchestration: the periodic ``compactionThreshold`` check, the
admin's ``topics compact`` and the compacted view a ``readCompacted`` subscription reads.

One :class:`~._compaction.Compactor` (and its view of the companion topic) per Kafka
topic, each used under its own lock; the compaction itself lives in ``_compaction``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sync import CacheState, PolicyService
from sync._errors import ConflictError, TopicNotFoundError, TransportError
from sync.naming._kafka_names import kafka_topic_of
from sync.naming._names import TopicName
from sync.transport import Admin, Transport

from ._compaction import (
    CompactedView,
    CompactionState,
    CompactionStatus,
    Compactor,
    over_threshold,
)
from ._entry_codec import EntryCodec
from ._ownership import TopicOwnership
from ._topic_config import TopicConfigReconciler
from ._topic_state import TopicState

logger = logging.getLogger(__name__)

__all__ = ["CompactionJobs"]


class CompactionJobs:
    """Compacts the topics owned here (Pulsar's ``checkCompaction`` and ``compact``).

    Args:
        transport: the Kafka seam.
        admin: the engine's shared Kafka admin client.
        policies: the current policy service (None while starting).
        ownership: who owns a topic.
        topic_configs: lists the topics owned here with their Kafka config.
        track: keeps a started compaction's task until it ends.
        codec: reads stored entries, so compaction keeps the latest message per key
            inside batches (None: an entry is compacted by its Kafka key).
    """

    def __init__(
        self,
        transport: Transport,
        admin: Callable[[], Admin],
        policies: Callable[[], PolicyService | None],
        ownership: TopicOwnership,
        topic_configs: TopicConfigReconciler,
        track: Callable[[asyncio.Task[None]], None],
        codec: EntryCodec | None = None,
    ) -> None:
        self.transport = transport
        self._admin = admin
        self._policies = policies
        self.ownership = ownership
        self.topic_configs = topic_configs
        self._track = track
        self._codec = codec
        self._compactors: dict[str, Compactor] = {}
        self._compaction_locks: dict[str, asyncio.Lock] = {}
        #: Completed compaction sweeps (tests wait for one to have run after a change).
        self.sweeps = 0

    def _compactor(self, kafka_topic: str) -> tuple[Compactor, asyncio.Lock]:
        compactor = self._compactors.get(kafka_topic)
        if compactor is None:
            compactor = self._compactors[kafka_topic] = Compactor(kafka_topic, codec=self._codec)
        lock = self._compaction_locks.setdefault(kafka_topic, asyncio.Lock())
        return compactor, lock

    async def compact_due(self) -> int:
        """Compact the partitions of owned topics whose bytes since the last compaction
        exceed their ``compactionThreshold`` (Pulsar's ``checkCompaction``, every
        ``compaction_check_s``). Returns how many topics were compacted."""
        svc = self._policies()
        if svc is None or svc.cache.state is not CacheState.READY:
            return 0
        admin = self._admin()
        compacted = 0
        for topic in await self.topic_configs.mapped_topics():
            threshold = int(svc.applied(topic).get("compactionThreshold") or 0)
            if threshold <= 0 or not (await self.ownership.owner_of(topic)).local:
                continue
            kafka_topic = kafka_topic_of(topic)
            desc = await asyncio.to_thread(admin.describe_topic, kafka_topic)
            if desc is None:
                continue
            compactor, lock = self._compactor(kafka_topic)
            if lock.locked():
                continue  # a compaction of this topic is running
            async with lock:
                sizes = await asyncio.to_thread(
                    compactor.bytes_since_horizon, self.transport, admin, desc.partitions
                )
                # Decide on the policy as it is now, not as it was before the awaits
                # above: a threshold removed (or raised) meanwhile must not compact
                # messages that were sent after the change was applied.
                threshold = int(svc.applied(topic).get("compactionThreshold") or 0)
                due = over_threshold(sizes, threshold)
                if not due:
                    continue
                logger.info(
                    "%s: %s bytes since the last compaction exceed compactionThreshold %d "
                    "on partitions %s",
                    topic,
                    {p: sizes[p] for p in due},
                    threshold,
                    due,
                )
                await self._run_compaction(compactor, admin, desc.partitions, due)
                compacted += 1
        self.sweeps += 1
        return compacted

    async def _run_compaction(
        self, compactor: Compactor, admin: Admin, num_partitions: int, partitions: list[int] | None
    ) -> None:
        status = compactor.status
        status.status, status.last_error = CompactionState.RUNNING, ""
        try:
            await asyncio.to_thread(
                compactor.compact, self.transport, admin, num_partitions, partitions
            )
        except Exception as exc:
            status.status, status.last_error = CompactionState.ERROR, str(exc)
            raise
        status.status = CompactionState.SUCCESS
        status.runs += 1
        status.horizons = compactor.view.horizons

    async def start_compaction(self, topic: TopicName) -> asyncio.Task[None]:
        """Start compacting every partition of ``topic`` now, whatever the threshold
        (Pulsar's ``topics compact``); the returned task ends when it is written (its
        outcome is in :meth:`compaction_status`).

        Raises:
            TopicNotFoundError: no such topic.
            ConflictError: a compaction of the topic is running (Pulsar: 409).
        """
        kafka_topic = kafka_topic_of(topic)
        admin = self._admin()
        desc = await asyncio.to_thread(admin.describe_topic, kafka_topic)
        if desc is None:
            raise TopicNotFoundError(f"Topic {topic.base} not found", topic=str(topic))
        compactor, lock = self._compactor(kafka_topic)
        if lock.locked() or compactor.status.status is CompactionState.RUNNING:
            raise ConflictError("Compaction already in progress")
        compactor.status.status = CompactionState.RUNNING

        async def run() -> None:
            try:
                async with lock:
                    await self._run_compaction(compactor, admin, desc.partitions, None)
            except Exception:
                logger.exception("compaction of %s failed", topic)

        task = asyncio.create_task(run(), name=f"compact:{topic}")
        self._track(task)
        return task

    async def compact(self, topic: TopicName) -> None:
        """:meth:`start_compaction` and wait for it.

        Raises:
            TopicNotFoundError, ConflictError: as :meth:`start_compaction`.
            TransportError: Kafka failed; nothing of this compaction is visible.
        """
        await (await self.start_compaction(topic))
        status = self.compaction_status(topic)
        if status.status is CompactionState.ERROR:
            raise TransportError(f"compaction of {topic} failed: {status.last_error}")

    def compaction_status(self, topic: TopicName) -> CompactionStatus:
        """The last compaction of ``topic`` started by this sidecar (NOT_RUN: none)."""
        compactor = self._compactors.get(kafka_topic_of(topic))
        return CompactionStatus() if compactor is None else compactor.status

    async def compacted_view(self, ts: TopicState) -> CompactedView | None:
        """The topic's compacted view for a ``readCompacted`` subscription (None: the
        topic was never compacted)."""
        compactor, lock = self._compactor(ts.kafka_topic)
        async with lock:
            await asyncio.to_thread(compactor.view.refresh, self.transport, self._admin())
            return compactor.view.snapshot() if compactor.view.horizons else None
