"""Backlog quotas enforced (Pulsar's ``BacklogQuotaManager``): a topic's backlog measured
and its quota's action applied (hold or refuse producers, evict the slowest
subscriptions), for the topics loaded here and, periodically, the owned topics that are
not loaded (``consumer_backlog_eviction`` only).

The measurement and the quota rules live in ``_backlog``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from sync import CacheState, PolicyService
from sync.naming._names import TopicName
from sync.policy._policies import Policies
from sync.transport import Admin, Transport

from ._backlog import (
    BACKLOG_EXCEEDED,
    BacklogAction,
    BacklogMeasure,
    BacklogQuotas,
    RecordSizes,
    measure_backlog,
    moved_position,
)
from ._config import MessagingConfig
from ._consumer import CloseCause, CloseReason
from ._owned_sweeps import OwnedTopicSweeps
from ._subscription import subscription_group
from ._topic_state import TopicProducer, TopicState

logger = logging.getLogger(__name__)

__all__ = ["BacklogQuotaMonitor", "ProducerCloser"]

#: Closes a producer of a topic (``MessagingEngine._close_producer``).
ProducerCloser = Callable[[TopicState, TopicProducer, CloseReason], None]


class BacklogQuotaMonitor:
    """Measures backlogs and applies backlog quotas.

    Args:
        transport: the Kafka seam.
        admin: the engine's shared Kafka admin client.
        policies: the current policy service (None while starting).
        topics: the engine's topics loaded here (shared, read only).
        owned: the sweeps over owned topics not loaded here.
        config: the engine's settings, read each time.
        close_producer: closes a producer refused by a ``producer_exception`` quota.
    """

    def __init__(
        self,
        transport: Transport,
        admin: Callable[[], Admin],
        policies: Callable[[], PolicyService | None],
        topics: dict[TopicName, TopicState],
        owned: OwnedTopicSweeps,
        config: Callable[[], MessagingConfig],
        close_producer: ProducerCloser,
    ) -> None:
        self.transport = transport
        self._admin = admin
        self._policies = policies
        self._topics = topics
        self._owned = owned
        self._config = config
        self._close_producer = close_producer
        #: Record sizes of the backlogs of topics with a ``limitSize`` quota.
        self._record_sizes: dict[str, RecordSizes] = {}
        self._sizes_locks: dict[str, asyncio.Lock] = {}

    async def check_quietly(self, ts: TopicState) -> None:
        try:
            await self.check(ts)
        except Exception:
            logger.exception("backlog check of %s failed; keeping its state", ts.topic)

    async def check(self, ts: TopicState) -> BacklogMeasure | None:
        """Measure the topic's backlog and apply its backlog quotas (see ``_backlog``)."""
        quotas = ts.limits.backlog
        if not quotas.active:
            self.set_state(ts, None)
            return None
        ts.backlog_checking = True
        try:
            avg = ts.published_bytes / ts.published_msgs if ts.published_msgs else 0.0
            measure = await self.measure_and_evict(
                ts.topic, ts.kafka_topic, ts.num_partitions, quotas, avg, ts
            )
        finally:
            ts.backlog_checking = False
        ts.backlog = measure
        state: BacklogAction | None = None
        for over, action in (
            (measure.over_size(quotas), quotas.size_action),
            (measure.over_time(quotas), quotas.time_action),
        ):
            if over and action is not BacklogAction.consumer_backlog_eviction:
                if state is not BacklogAction.producer_exception:
                    state = action
        self.set_state(ts, state)
        return measure

    async def measure_and_evict(
        self,
        topic: TopicName,
        kafka_topic: str,
        partitions: int,
        quotas: BacklogQuotas,
        avg_bytes: float,
        ts: TopicState | None,
    ) -> BacklogMeasure:
        """Measure the backlog of every durable subscription (connected or not) and move
        the ones a ``consumer_backlog_eviction`` quota evicts: a subscription loaded here
        moves its cursor, the others have their Kafka group positions moved (keeping their
        individual acknowledgements above the new position)."""
        prefix = subscription_group(kafka_topic, "")
        admin = self._admin()
        groups = await asyncio.to_thread(admin.list_groups, prefix)
        loaded = {} if ts is None else {s.group_id: s for s in ts.subscriptions.values()}
        groups = sorted(set(groups) | set(loaded))
        sizes = None
        if quotas.limit_bytes > 0:
            sizes = self._record_sizes.get(kafka_topic)
            if sizes is None:
                sizes = self._record_sizes[kafka_topic] = RecordSizes(kafka_topic)
        else:
            self._record_sizes.pop(kafka_topic, None)
        lock = self._sizes_locks.setdefault(kafka_topic, asyncio.Lock())
        async with lock:
            measure = await asyncio.to_thread(
                functools.partial(
                    measure_backlog,
                    admin,
                    kafka_topic,
                    partitions,
                    groups,
                    quotas,
                    avg_bytes,
                    transport=self.transport,
                    sizes=sizes,
                )
            )
        for group, offsets in measure.eviction_targets(quotas).items():
            sub = loaded.get(group)
            if sub is not None and sub.attached:
                sub.skip_to(offsets)  # the partitions it serves
                offsets = {p: o for p, o in offsets.items() if p not in sub.served}
                if not offsets:
                    continue
                # The others are not served here: their positions move in Kafka.
            if ts is None and self._topics.get(topic) is not None:
                continue  # loaded meanwhile: its own check evicts
            positions = {
                p: moved_position(
                    o,
                    measure.acked.get(p, {}).get(group) or [],
                    self._config().ack_metadata_max_bytes,
                )
                for p, o in offsets.items()
            }
            await asyncio.to_thread(admin.alter_group_positions, group, kafka_topic, positions)
            logger.info("%s: group %s moved to %s (backlog eviction)", topic, group, offsets)
        return measure

    async def enforce_unloaded(self) -> int:
        """Apply ``consumer_backlog_eviction`` quotas to the owned topics that are not
        loaded here (no connection), as Pulsar's periodic ``BacklogQuotaManager`` check
        does for every topic of the broker. Returns how many topics were measured."""
        svc = self._policies()
        if svc is None or svc.cache.state is not CacheState.READY:
            return 0
        measured = 0
        sized: set[str] = set()
        evicting = BacklogAction.consumer_backlog_eviction

        def evicting_quotas(policies: Policies) -> BacklogQuotas | None:
            quotas = BacklogQuotas.from_policy(policies.get("backLogQuotaMap"))
            if (quotas.limit_bytes > 0 and quotas.size_action is evicting) or (
                quotas.limit_time_s > 0 and quotas.time_action is evicting
            ):
                return quotas
            return None

        async for topic, kafka_topic, desc, quotas in self._owned.unloaded_owned(
            svc, evicting_quotas
        ):
            await self.measure_and_evict(topic, kafka_topic, desc.partitions, quotas, 0.0, None)
            measured += 1
            sized.add(kafka_topic)
        # Forget the record sizes of topics no longer measured (quota gone, not owned).
        sized |= {ts.kafka_topic for ts in self._topics.values()}
        for kafka_topic in set(self._record_sizes) - sized:
            del self._record_sizes[kafka_topic]
        for kafka_topic in set(self._sizes_locks) - sized:
            if not self._sizes_locks[kafka_topic].locked():
                del self._sizes_locks[kafka_topic]
        return measured

    def set_state(self, ts: TopicState, state: BacklogAction | None) -> None:
        if state is not ts.backlog_state:
            logger.info("%s: backlog quota state %s -> %s", ts.topic, ts.backlog_state, state)
        ts.backlog_state = state
        if state is BacklogAction.producer_request_hold:
            ts.writable.clear()
            ts.holding.set()
        else:
            ts.writable.set()
            ts.holding.clear()
        if state is BacklogAction.producer_exception:
            for handle in list(ts.producers.values()):
                self._close_producer(ts, handle, CloseReason(CloseCause.POLICY, BACKLOG_EXCEEDED))
