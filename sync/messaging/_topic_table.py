"""The table of topics served here: a topic is loaded on first use (one load at a time
per name, later callers wait for it), locked while a connection is added to it, and
dropped when nothing uses it any more.

The engine (:class:`~sync.messaging.MessagingEngine`) owns the table and closes the
connections of a topic (``_unload``); this module only keeps the table: which base topics
are live, and the Kafka lookups and auto-creation that a first use needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from sync._errors import TopicNotFoundError
from sync.naming._kafka_names import kafka_topic_of
from sync.naming._names import TopicName
from sync.transport import Admin

from ._autocreate import AutoTopicCreation, TopicCreator
from ._policy import TopicLimits
from ._ratelimit import RateLimiter
from ._topic_state import TopicState

logger = logging.getLogger(__name__)

__all__ = ["TopicTable"]


class TopicTable:
    """The base topics served here, by name.

    Args:
        admin: the engine's Kafka admin client (made on first use).
        auto_creation_for: the auto-creation rule of a topic's namespace, read each time.
        create_topic: creates a missing topic when its rule allows (None: never).
        changed: called after a topic was added or removed (the live policy keys).
        dropped: called after an unused topic was dropped (not after :meth:`forget`).
    """

    def __init__(
        self,
        admin: Callable[[], Admin],
        auto_creation_for: Callable[[TopicName], AutoTopicCreation],
        create_topic: TopicCreator | None,
        changed: Callable[[], None],
        dropped: Callable[[TopicState], None],
    ) -> None:
        #: The live topics (shared, never replaced: the engine's roles read it).
        self.topics: dict[TopicName, TopicState] = {}
        #: The loads in progress, by base topic (shared, never replaced).
        self.loading: dict[TopicName, asyncio.Future[TopicState]] = {}
        self._admin = admin
        self._auto_creation_for = auto_creation_for
        self._create_topic = create_topic
        self._changed = changed
        self._dropped = dropped

    async def exists(self, topic: TopicName) -> bool:
        """Whether the base topic of ``topic`` is live here or exists in Kafka."""
        if topic.base in self.topics:
            return True
        admin = self._admin()
        return await asyncio.to_thread(admin.describe_topic, kafka_topic_of(topic.base)) is not None

    async def auto_create(self, topic: TopicName, *, partitioned_only: bool = False) -> bool:
        """Create the missing base topic of ``topic`` if its rule allows (True: created).

        ``partitioned_only``: only a partitioned type creates now (Pulsar's partitioned
        metadata request; a non-partitioned topic is created by its first producer or
        consumer).
        """
        if self._create_topic is None:
            return False
        rule = self._auto_creation_for(topic)
        if not rule.allow:
            return False
        if partitioned_only and rule.partitions == 0:
            return True
        if topic.is_partition and rule.partitions <= topic.partition_index:
            return False  # Pulsar: a partition beyond the partitioned default is not created
        logger.info("auto-creating %s with %d partition(s)", topic.base, rule.partitions)
        await self._create_topic(topic.base, rule.partitions)
        return True

    async def load(
        self, topic: TopicName, limits: TopicLimits, missing: str | None = None
    ) -> TopicState:
        """The live state of ``topic``'s base topic, loaded (and auto-created if allowed)
        on first use.

        Raises:
            TopicNotFoundError: no such topic (``missing``: the refusal text).
        """
        base = topic.base
        ts = self.topics.get(base)
        if ts is not None:
            return ts
        loading = self.loading.get(base)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[TopicState] = asyncio.get_running_loop().create_future()
        self.loading[base] = future
        try:
            kafka_topic = kafka_topic_of(base)
            admin = self._admin()
            desc = await asyncio.to_thread(admin.describe_topic, kafka_topic)
            if desc is None and await self.auto_create(topic):
                desc = await asyncio.to_thread(admin.describe_topic, kafka_topic)
            if desc is None:
                raise TopicNotFoundError(
                    missing
                    or (
                        f"Topic {base} does not exist (no Kafka topic {kafka_topic!r}); "
                        "create it with the admin API"
                    ),
                    topic=str(base),
                )
            ts = TopicState(
                topic=base,
                kafka_topic=kafka_topic,
                num_partitions=desc.partitions,
                limits=limits,
                dispatch_limiters=[
                    RateLimiter(limits.dispatch_rate) for _ in range(desc.partitions)
                ],
                publish_limiters=[RateLimiter(limits.publish_rate) for _ in range(desc.partitions)],
            )
            self.topics[base] = ts
            self._changed()
            future.set_result(ts)
            return ts
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning if nobody waits
            raise
        finally:
            del self.loading[base]

    @contextlib.asynccontextmanager
    async def locked(
        self, topic: TopicName, limits: TopicLimits, missing: str | None = None
    ) -> AsyncIterator[TopicState]:
        """The topic's live state, locked; retried if it was dropped while we waited.

        ``missing``: the refusal text when the topic does not exist and is not created.
        """
        while True:
            ts = await self.load(topic, limits, missing)
            async with ts.lock:
                if self.topics.get(ts.topic) is not ts:
                    continue  # dropped (or unloaded) meanwhile: take the current one
                yield ts
                return

    def maybe_drop(self, ts: TopicState) -> None:
        """Drop ``ts`` if nothing uses it (``dropped`` is then called)."""
        # Never while someone holds the lock: they may be about to add to this state.
        if (
            not ts.subscriptions
            and not ts.producers
            and not ts.lock.locked()
            and self.topics.get(ts.topic) is ts
        ):
            del self.topics[ts.topic]
            self._changed()
            self._dropped(ts)

    def forget(self, ts: TopicState) -> None:
        """Remove ``ts`` now, used or not (an unload closes its connections)."""
        if self.topics.get(ts.topic) is ts:
            del self.topics[ts.topic]
            self._changed()
