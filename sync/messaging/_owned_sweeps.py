"""Periodic sweeps over the topics owned here that are not loaded (no connection here):
message TTL of their subscriptions (Kafka group positions moved past expired messages)
and inactive-topic deletion (``inactiveTopicPolicies``). A loaded topic is handled with
its live state instead (its subscriptions expire their own messages).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from sync import CacheState, PolicyService
from sync.naming._kafka_names import kafka_topic_of
from sync.naming._names import TopicName
from sync.policy._policies import Policies
from sync.transport import Admin, TopicDescription

from ._backlog import moved_position
from ._config import MessagingConfig
from ._cursor import decode_ack_state
from ._inactive import InactivePolicy, delete_topic, inactive_verdict
from ._ownership import TopicOwnership
from ._subscription import subscription_group
from ._topic_config import TopicConfigReconciler
from ._topic_state import TopicState

logger = logging.getLogger(__name__)

__all__ = ["OwnedTopicSweeps"]

_P = TypeVar("_P")


class OwnedTopicSweeps:
    """The TTL and inactive-topic sweeps over owned topics not loaded here.

    Args:
        admin: the engine's shared Kafka admin client.
        policies: the current policy service (None while starting).
        ownership: who owns a topic.
        topic_configs: lists the topics owned here with their Kafka config.
        topics: the engine's topics loaded here (shared, read only).
        loading: the topics being loaded now (shared, read only).
        config: the engine's settings, read each time.
    """

    def __init__(
        self,
        admin: Callable[[], Admin],
        policies: Callable[[], PolicyService | None],
        ownership: TopicOwnership,
        topic_configs: TopicConfigReconciler,
        topics: dict[TopicName, TopicState],
        loading: dict[TopicName, asyncio.Future[TopicState]],
        config: Callable[[], MessagingConfig],
    ) -> None:
        self._admin = admin
        self._policies = policies
        self.ownership = ownership
        self.topic_configs = topic_configs
        self._topics = topics
        self._topic_loading = loading
        self._config = config
        #: Wall-clock time since when a topic has had no connection here (dropped).
        self.idle_since: dict[TopicName, float] = {}
        self._started_wall = time.time()
        #: Completed sweeps of each kind (tests wait for some to have run after a change).
        self.expiry_sweeps = 0
        self.inactive_sweeps = 0

    async def unloaded_owned(
        self, svc: PolicyService, pick: Callable[[Policies], _P | None]
    ) -> AsyncIterator[tuple[TopicName, str, TopicDescription, _P]]:
        """The owned topics not loaded here whose applied policies ``pick`` something
        from, with their Kafka topic's description (periodic sweeps; a loaded topic is
        checked with its live state instead)."""
        admin = self._admin()
        for topic in await self.topic_configs.mapped_topics():
            if topic in self._topics or topic in self._topic_loading:
                continue
            picked = pick(svc.applied(topic))
            if picked is None or not (await self.ownership.owner_of(topic)).local:
                continue
            kafka_topic = kafka_topic_of(topic)
            desc = await asyncio.to_thread(admin.describe_topic, kafka_topic)
            if desc is not None:
                yield topic, kafka_topic, desc, picked

    async def expire_unloaded(self) -> int:
        """Move every durable subscription of an owned topic with ``messageTTLInSeconds``
        that is not loaded here past its expired messages (Kafka group positions; what is
        individually acknowledged above the new position is kept). Returns how many
        subscriptions moved."""
        svc = self._policies()
        if svc is None or svc.cache.state is not CacheState.READY:
            return 0
        moved = 0
        admin = self._admin()
        for topic in await self.topic_configs.mapped_topics():
            ttl = int(svc.applied(topic).get("messageTTLInSeconds") or 0)
            if ttl <= 0 or not (await self.ownership.owner_of(topic)).local:
                continue
            kafka_topic = kafka_topic_of(topic)
            prefix = subscription_group(kafka_topic, "")
            groups = await asyncio.to_thread(admin.list_groups, prefix)
            ts = self._topics.get(topic)
            loaded = set() if ts is None else {s.group_id for s in ts.subscriptions.values()}
            groups = [g for g in groups if g not in loaded]
            if not groups:
                continue
            desc = await asyncio.to_thread(admin.describe_topic, kafka_topic)
            if desc is None:
                continue
            parts = list(range(desc.partitions))
            cutoff_ms = int(time.time() * 1000) - ttl * 1000
            floor = await asyncio.to_thread(admin.list_offsets, kafka_topic, parts, cutoff_ms)
            for group in groups:
                committed = await asyncio.to_thread(admin.group_positions, group, kafka_topic)
                ahead: dict[int, tuple[int, str]] = {}
                for p, o in floor.items():
                    offset, metadata = committed.get(p, (0, ""))
                    if offset < o:
                        ranges, partials = decode_ack_state(offset, metadata)
                        ahead[p] = moved_position(
                            o, ranges, self._config().ack_metadata_max_bytes, partials
                        )
                ts = self._topics.get(topic)
                if ts is not None and group[len(prefix) :] in ts.subscriptions:
                    continue  # loaded meanwhile: its own dispatch expires the messages
                if ahead:
                    await asyncio.to_thread(admin.alter_group_positions, group, kafka_topic, ahead)
                    logger.info("%s: expired messages of %s skipped to %s", topic, group, ahead)
                    moved += 1
        self.expiry_sweeps += 1
        return moved

    async def reap_inactive(self) -> list[TopicName]:
        """Delete the owned topics that ``inactiveTopicPolicies`` says are inactive."""
        svc = self._policies()
        if svc is None or svc.cache.state is not CacheState.READY:
            return []
        deleted: list[TopicName] = []
        admin = self._admin()

        def inactive_policy(policies: Policies) -> InactivePolicy | None:
            return InactivePolicy.from_policy(policies.get("inactiveTopicPolicies"))

        async for topic, kafka_topic, desc, policy in self.unloaded_owned(svc, inactive_policy):
            idle = self.idle_since.get(topic, self._started_wall)
            prefix = subscription_group(kafka_topic, "")
            ok, groups = await asyncio.to_thread(
                inactive_verdict, admin, kafka_topic, desc.partitions, policy, idle, prefix
            )
            if ok and topic not in self._topics:
                await asyncio.to_thread(delete_topic, admin, kafka_topic, groups)
                self.idle_since.pop(topic, None)
                deleted.append(topic)
        self.inactive_sweeps += 1
        return deleted
