"""Opening, resetting and deleting the subscriptions of the topics served here: what
:meth:`MessagingEngine.subscribe`, ``reset_subscription`` and ``unsubscribe`` do under the
topic's lock, after the engine read the topic's limits.

A consumer is admitted by ``_admission`` (Pulsar's refusals), then attached to the
subscription, which is loaded (from its committed position) when it is not served here
yet; a subscription whose last consumer left is closed (``close_idle``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from sync._errors import ConsumerBusyError
from sync.naming._names import TopicName
from sync.transport import Admin, Transport

from . import _admission as admission
from ._compaction_jobs import CompactionJobs
from ._config import MessagingConfig
from ._consumer import CloseCause, CloseReason, Consumer
from ._message_id import MessageId
from ._ownership_watch import OwnershipWatch
from ._policy import TopicLimits
from ._subscription import Subscription, subscription_group
from ._topic_state import TopicState, partitions_of, start_offsets
from ._topic_table import TopicTable
from ._types import InitialPosition, SubscriptionType

logger = logging.getLogger(__name__)

__all__ = ["SubscriptionOps"]


class SubscriptionOps:
    """Opens, resets and deletes subscriptions of the topics in ``table``.

    Args:
        transport: the Kafka seam.
        table: the engine's topic table.
        config: the engine's settings, read each time.
        admin: the engine's Kafka admin client (made on first use).
        apply_limits: makes limits read now the topic's limits.
        compaction: the compacted views (``readCompacted``).
        watch_owner: remembers the ownership term a name is first used under.
        spawn: runs a task the engine keeps (cancelled on close).
        creates_topics: whether a missing topic may be auto-created (its refusal text).
    """

    def __init__(
        self,
        transport: Transport,
        table: TopicTable,
        config: Callable[[], MessagingConfig],
        admin: Callable[[], Admin],
        apply_limits: Callable[[TopicState, TopicLimits], None],
        compaction: CompactionJobs,
        watch_owner: OwnershipWatch,
        spawn: Callable[[Coroutine[Any, Any, None], str], None],
        *,
        creates_topics: bool,
    ) -> None:
        self.transport = transport
        self._table = table
        self._config = config
        self._admin = admin
        self._apply_limits = apply_limits
        self._compaction = compaction
        self._watch_owner = watch_owner
        self._spawn = spawn
        self._creates_topics = creates_topics

    async def open(
        self,
        topic: TopicName,
        subscription: str,
        limits: TopicLimits,
        *,
        sub_type: SubscriptionType,
        consumer_name: str | None,
        receiver_queue_size: int | None,
        pull_mode: bool,
        initial_position: InitialPosition,
        negative_ack_delay_s: float | None,
        durable: bool = True,
        start_message_id: MessageId | None = None,
        read_compacted: bool = False,
    ) -> Consumer:
        """Attach a consumer under the topic's lock, creating the subscription if needed
        (see :meth:`MessagingEngine.subscribe`); ``limits`` are the topic's, read now."""
        if read_compacted:
            admission.admit_read_compacted(topic, sub_type)
        missing = f"Topic {topic} does not exist" if self._creates_topics else None
        async with self._table.locked(topic, limits, missing) as ts:
            parts = partitions_of(topic, ts.num_partitions)
            self._apply_limits(ts, limits)
            admission.admit_sub_type(topic, limits, sub_type)
            admission.take_subscribe_permit(ts, topic, limits, consumer_name)
            sub = ts.subscriptions.get(subscription)
            if sub is not None and not sub.attached:
                sub = None
            if sub is None and durable and limits.max_subscriptions_per_topic > 0:
                existing = await self.durable_subscriptions(ts)
                admission.admit_new_subscription(topic, limits, subscription, existing)
            admission.admit_consumer(ts, topic, limits, parts, sub, sub_type)
            if sub is None:
                compacted = await self._compaction.compacted_view(ts) if read_compacted else None
                sub = Subscription(
                    topic=ts.topic,
                    kafka_topic=ts.kafka_topic,
                    name=subscription,
                    num_partitions=ts.num_partitions,
                    partitioned=ts.partitioned,
                    transport=self.transport,
                    config=self._config(),
                    topic_limiters=ts.dispatch_limiters,
                    limits=lambda: ts.limits,
                    on_idle=lambda s: self._spawn(self.close_idle(ts, s), "close-idle-sub"),
                    durable=durable,
                    start_offsets=start_offsets(start_message_id, ts.num_partitions),
                    compacted=compacted,
                )
                ts.subscriptions[subscription] = sub
                try:
                    await sub.load(initial_position, parts)
                except BaseException:
                    if ts.subscriptions.get(subscription) is sub:
                        del ts.subscriptions[subscription]
                    await sub.close()
                    raise
            else:
                if not sub.durable and start_message_id is not None:
                    # A reader of another partition: it starts where it says, too.
                    sub.start_at(start_offsets(start_message_id, ts.num_partitions))
                await sub.serve(parts)
            await self._watch_owner.note_claim(ts, topic)
            queue = receiver_queue_size or self._config().default_receiver_queue_size
            consumer = Consumer(
                sub,
                topic=topic,
                name=consumer_name or uuid.uuid4().hex[:10],
                sub_type=sub_type,
                partitions=parts,
                receiver_queue_size=max(1, min(queue, self._config().max_receiver_queue_size)),
                pull_mode=pull_mode,
                negative_ack_delay_s=(
                    self._config().default_negative_ack_delay_s
                    if negative_ack_delay_s is None
                    else negative_ack_delay_s
                ),
            )
            sub.add_consumer(consumer)
            return consumer

    async def durable_subscriptions(self, ts: TopicState) -> set[str]:
        """The subscriptions of ``ts`` with a Kafka group, and those loaded here."""
        prefix = subscription_group(ts.kafka_topic, "")
        admin = self._admin()
        groups = await asyncio.to_thread(admin.list_groups, prefix)
        return {g[len(prefix) :] for g in groups} | set(ts.subscriptions)

    async def reset(
        self, topic: TopicName, name: str, offsets: dict[int, int], limits: TopicLimits
    ) -> None:
        """Move subscription ``name`` of ``topic`` to ``offsets``, closing it first if it
        is loaded (see :meth:`MessagingEngine.reset_subscription`)."""
        async with self._table.locked(topic, limits) as ts:
            sub = ts.subscriptions.pop(name, None)
            if sub is not None:
                # Under the lock: a consumer reconnecting now loads the new position.
                await sub.close(
                    CloseReason(CloseCause.UNLOADED, "Subscription was reset by a seek; reconnect")
                )
            positions = {p: (o, "") for p, o in offsets.items()}
            group = subscription_group(ts.kafka_topic, name)

            def commit() -> None:
                kafka = self.transport.consumer(group_id=group)
                try:
                    kafka.commit(ts.kafka_topic, positions)
                finally:
                    kafka.close()

            await asyncio.to_thread(commit)
        logger.info("subscription %s of %s reset to %s", name, ts.topic, offsets)
        self._table.maybe_drop(ts)

    async def unsubscribe(self, consumer: Consumer) -> None:
        """Delete the consumer's subscription, its Kafka group too (see
        :meth:`MessagingEngine.unsubscribe`)."""
        sub = consumer.subscription
        ts = self._table.topics.get(sub.topic)
        if ts is None or ts.subscriptions.get(sub.name) is not sub:
            return
        async with ts.lock:
            others = [c for c in sub.consumers.values() if c is not consumer and not c.closed]
            if others:
                raise ConsumerBusyError(
                    "Unconnected or shared consumer attempting to unsubscribe", topic=str(ts.topic)
                )
            del ts.subscriptions[sub.name]
            # Under the lock: a new subscription of that name waits until the group is gone.
            await sub.close(CloseReason(CloseCause.NORMAL, "Unsubscribed"))
            admin = self._admin()
            await asyncio.to_thread(admin.delete_group, sub.group_id)
        logger.info("subscription %s deleted", sub.label)
        self._table.maybe_drop(ts)

    async def close_idle(self, ts: TopicState, sub: Subscription) -> None:
        """End ``sub`` if no consumer came back (its last consumer left)."""
        async with ts.lock:
            if sub.consumers or ts.subscriptions.get(sub.name) is not sub:
                return
            del ts.subscriptions[sub.name]
            # Under the lock: a consumer arriving now loads the position after this commit.
            await sub.close()
        self._table.maybe_drop(ts)
