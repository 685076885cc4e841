"""The messaging engine: topics served by this sidecar, their producers and subscriptions,
and the live enforcement of their policies.

Admission (on connect) is checked by ``_admission`` (Pulsar's refusals, in one table).

Live changes (a policy listener on the cache, plus a periodic re-read): connections that
a new policy forbids are closed, newest first, with cause POLICY and the same
reason text (a disabled subscription type; more consumers or producers than a lowered
maximum). Rates and ``maxUnackedMessagesOnConsumer`` apply to the next dispatch.
Lowering ``maxSubscriptionsPerTopic`` never deletes a subscription (neither does Pulsar);
``maxMessageSize`` is read on every send.

This class is the facade over the roles in their own modules: ``_topic_state`` (a topic
served here), ``_publish`` (producer handles, the shared Kafka producers), ``_monitors``
(the periodic jobs' scheduler; the table is :meth:`MessagingEngine._jobs`),
``_quota_monitor``, ``_owned_sweeps``, ``_compaction_jobs``, ``_dedup_loader``,
``_ownership_watch``, ``_live_limits``, ``_admission``, ``_topic_table`` (the topics
served here: loaded on first use, locked, dropped when unused), ``_policy_follow``
(when the topics' policies are read again) and ``_subscriptions`` (opening, resetting and
deleting subscriptions). What stays here is the public surface the front ends call (its
docstrings are the contract), the wiring of the roles, the periodic jobs' table, unloading
a topic and opening producers (which ties the pool, deduplication, backlog quotas and
admission together under one topic lock).

Why this file is past 600 lines: most of it is that public surface, one or two
delegating lines under each contract docstring; the roles behind it are in their modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

from sync import PolicyService, PolicyTarget
from sync._errors import (
    ConsumerBusyError,
    InvalidInputError,
    TopicNotFoundError,
    UnavailableError,
)
from sync.naming._names import TopicName
from sync.transport import Admin, Transport

from . import _admission as admission
from ._autocreate import AutoTopicCreation, TopicCreator
from ._backlog import (
    BacklogMeasure,
)
from ._compaction import (
    CompactionStatus,
)
from ._compaction_jobs import CompactionJobs
from ._config import MessagingConfig
from ._consumer import CloseCause, CloseReason, Consumer
from ._dedup_loader import DedupLoader
from ._entry_codec import EntryCodec
from ._epoch_store import MemoryTopicEpochs, TopicEpochStore
from ._exclusive_wait import ExclusiveQueue
from ._live_limits import apply_live_limits
from ._monitors import PeriodicJob, Scheduler, every_tick
from ._owned_sweeps import OwnedTopicSweeps
from ._ownership import LocalOwnership, OwnerInfo, TopicOwnership
from ._ownership_watch import OwnershipWatch
from ._policy import TopicLimits
from ._policy_follow import PolicyFollower
from ._producer import MessageId, PartitionedProducer, ProducerConfig
from ._publish import ProducerHandle, ProducerPool
from ._quota_monitor import BacklogQuotaMonitor
from ._subscriptions import SubscriptionOps
from ._topic_config import TopicConfigReconciler
from ._topic_state import TopicProducer, TopicState, partitions_of
from ._topic_table import TopicTable
from ._types import InitialPosition, ProducerAccessMode, SubscriptionType

logger = logging.getLogger(__name__)

__all__ = ["MessagingEngine"]

PolicySource = Callable[[], PolicyService | None]


class MessagingEngine:
    """Serves producers and consumers of the topics this sidecar owns.

    Args:
        transport: the Kafka seam.
        policies: returns the current policy service (or None while starting); called
            again periodically, so a service restarted by the sidecar is picked up.
        ownership: who owns a topic (default: every topic is local).
        config: engine settings.
        auto_creation: the broker's topic auto-creation defaults (a namespace's
            ``autoTopicCreationOverride`` replaces them for its topics).
        create_topic: creates a missing topic when auto-creation allows it; None: a topic
            is never created implicitly (every missing topic is refused).
        epochs: where the topics' epochs of exclusive producers are kept (default: in this
            process only; the sidecar's survive restarts and moves).
        entry_codec: reads stored entries (the binary front end's), so compaction keeps
            the latest message per key inside batches; None: per record.
    """

    def __init__(
        self,
        transport: Transport,
        policies: PolicySource,
        *,
        ownership: TopicOwnership | None = None,
        config: MessagingConfig | None = None,
        auto_creation: AutoTopicCreation | None = None,
        create_topic: TopicCreator | None = None,
        epochs: TopicEpochStore | None = None,
        entry_codec: EntryCodec | None = None,
    ) -> None:
        self.transport = transport
        self.auto_creation = auto_creation or AutoTopicCreation()
        self._create_topic = create_topic
        self.config = config or MessagingConfig()
        self.ownership: TopicOwnership = ownership or LocalOwnership()
        self._policies = policies
        #: The topics served here (loaded on first use, dropped when unused).
        self._table = TopicTable(
            self._admin_client,
            self.auto_creation_for,
            create_topic,
            lambda: self._follow.update_live_keys(),
            self._dropped,
        )
        self._topics = self._table.topics
        self._topic_loading = self._table.loading
        #: The topics' limits, re-applied when their policies change.
        self._follow = PolicyFollower(
            policies, self._topics, lambda: self.config, lambda: self._loop, self._apply_limits
        )
        self._admin: Admin | None = None
        #: The queued ``WaitForExclusive`` producers.
        self._exclusive = ExclusiveQueue()
        #: The topics' epochs (Pulsar's ``topicEpoch``).
        self.epochs: TopicEpochStore = epochs or MemoryTopicEpochs()
        #: The shared Kafka producers, one per ``linger.ms``, and their delivery reports.
        self._pool = ProducerPool(transport, lambda: self.config.report_poll_interval_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        #: Periodic sweeps running now (each runs once at a time).
        self._sweeping: set[str] = set()
        #: Keeps the Kafka topic config of owned topics equal to their policies.
        self.topic_configs = TopicConfigReconciler(
            transport, policies, self.ownership, sweep_s=self.config.topic_config_sweep_s
        )
        #: TTL and inactive-topic sweeps over owned topics not loaded here.
        self._owned = OwnedTopicSweeps(
            self._admin_client,
            policies,
            self.ownership,
            self.topic_configs,
            self._topics,
            self._topic_loading,
            lambda: self.config,
        )
        #: Backlog quotas (Pulsar's BacklogQuotaManager).
        self._quotas = BacklogQuotaMonitor(
            transport,
            self._admin_client,
            policies,
            self._topics,
            self._owned,
            lambda: self.config,
            self._close_producer,
        )
        #: Closes the connections to names no longer served here.
        self._watch_owner = OwnershipWatch(
            self.ownership,
            self._topics,
            self._unload,
            lambda: self._closing,
            lambda: self._loop,
            lambda: self.config.release_wait_s,
        )
        #: Deduplication state: loading and snapshots.
        self._dedup = DedupLoader(transport, lambda: self.config.dedup_snapshot_s)
        #: Topic compaction (``compactionThreshold`` and the admin's ``topics compact``).
        self._compaction = CompactionJobs(
            transport,
            self._admin_client,
            policies,
            self.ownership,
            self.topic_configs,
            self._track,
            entry_codec,
        )
        #: Opening, resetting and deleting subscriptions.
        self._subs = SubscriptionOps(
            transport,
            self._table,
            lambda: self.config,
            self._admin_client,
            self._apply_limits,
            self._compaction,
            self._watch_owner,
            self._spawn,
            creates_topics=create_topic is not None,
        )

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start watching policies and ownership (call on the serving event loop)."""
        self._loop = asyncio.get_running_loop()
        if self._watcher is None:
            self._watcher = asyncio.create_task(
                Scheduler(lambda: self.config, self._jobs()).run(), name="messaging-watch"
            )
        await self.topic_configs.start()

    async def close(self) -> None:
        """Close every connection (cause SHUTDOWN), commit every subscription, flush producers."""
        self._closing = True
        await self.topic_configs.close()
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        reason = CloseReason(CloseCause.SHUTDOWN, "Broker is shutting down")
        for ts in list(self._topics.values()):
            await self._unload(ts, reason)
        self._follow.stop()
        await self._pool.close()
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._track(asyncio.create_task(coro, name=name))

    def _track(self, task: asyncio.Task[None]) -> None:
        """Keep ``task`` until it ends (cancelled on close)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn_sweep(self, name: str, sweep: Callable[[], Awaitable[object]]) -> None:
        """Run a periodic sweep unless it is still running; a failure is logged and the
        next period tries again."""
        if name in self._sweeping:
            return
        self._sweeping.add(name)

        async def run() -> None:
            try:
                await sweep()
            except Exception:
                logger.exception("%s sweep failed; retried later", name)
            finally:
                self._sweeping.discard(name)

        self._spawn(run(), name)

    # -- policies ----------------------------------------------------------------------
    def read_limits(self, topic: TopicName) -> TopicLimits:
        """The topic's messaging limits from the effective policies, right now.

        Raises:
            CacheStateError: no policy service, or its cache is not READY (fail closed).
        """
        return self._follow.read_limits(topic)

    def refresh_policies(self, ts: TopicState) -> None:
        """Re-read the topic's policies and apply them to its live connections."""
        self._follow.refresh(ts)

    def _apply_limits(self, ts: TopicState, limits: TopicLimits) -> None:
        apply_live_limits(ts, limits, self._close_producer)
        for sub in ts.subscriptions.values():
            sub.apply_limits(limits)
        if limits.dedup_enabled and ts.dedup is None and ts.producers:
            self._spawn(self._dedup.load_quietly(ts), "dedup-load")
        elif not limits.dedup_enabled and ts.dedup is not None:
            dedup, ts.dedup = ts.dedup, None  # Pulsar forgets the state when disabled
            self._spawn(self._dedup.snapshot_of(dedup), "dedup-final-snapshot")

    # -- periodic jobs -----------------------------------------------------------------
    def _jobs(self) -> list[PeriodicJob]:
        """The scheduler's table: what runs periodically, how often, in this order."""

        def sweep(name: str, run: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
            async def spawn() -> None:
                self._spawn_sweep(name, run)

            return spawn

        return [
            PeriodicJob("policy-service", every_tick, self._follow.follow_service),
            PeriodicJob("policy-refresh", lambda c: c.policy_check_s, self._follow.refresh_all),
            PeriodicJob("dedup-snapshots", every_tick, self._snapshot_dedups),
            PeriodicJob(
                "message-expiry", lambda c: c.message_expiry_check_s, self._expire_messages
            ),
            PeriodicJob("backlog-check", lambda c: c.backlog_check_s, self._check_backlogs),
            PeriodicJob(
                "inactive-topics",
                lambda c: c.inactive_topic_check_s,
                sweep("inactive-topics", self.reap_inactive),
            ),
            PeriodicJob(
                "expire-unloaded",
                lambda c: c.unloaded_expiry_check_s,
                sweep("expire-unloaded", self.expire_unloaded),
            ),
            PeriodicJob(
                "compaction", lambda c: c.compaction_check_s, sweep("compaction", self.compact_due)
            ),
            PeriodicJob("ownership", lambda c: c.ownership_check_s, self._watch_owner.check),
        ]

    async def _snapshot_dedups(self) -> None:
        for ts in list(self._topics.values()):
            if ts.dedup is not None:
                self._spawn(self._dedup.snapshot(ts), "dedup-snapshot")

    async def _expire_messages(self) -> None:
        for ts in list(self._topics.values()):
            for sub in list(ts.subscriptions.values()):
                sub.expire_messages()

    async def _check_backlogs(self) -> None:
        for ts in list(self._topics.values()):
            if (ts.limits.backlog.active or ts.backlog_state) and not ts.backlog_checking:
                self._spawn(self._quotas.check_quietly(ts), "backlog-check")
        self._spawn_sweep("backlog-unloaded", self.enforce_unloaded_backlogs)

    # -- backlog quotas (see _quota_monitor) ------------------------------------------
    async def check_backlog(self, ts: TopicState) -> BacklogMeasure | None:
        """Measure the topic's backlog and apply its backlog quotas (see ``_backlog``)."""
        return await self._quotas.check(ts)

    async def enforce_unloaded_backlogs(self) -> int:
        """Apply ``consumer_backlog_eviction`` quotas to the owned topics not loaded here;
        returns how many topics were measured."""
        return await self._quotas.enforce_unloaded()

    # -- sweeps of owned topics not loaded here (see _owned_sweeps) ---------------------
    async def expire_unloaded(self) -> int:
        """Move the subscriptions of owned topics not loaded here past their expired
        messages (``messageTTLInSeconds``); returns how many subscriptions moved."""
        return await self._owned.expire_unloaded()

    async def reap_inactive(self) -> list[TopicName]:
        """Delete the owned topics that ``inactiveTopicPolicies`` says are inactive."""
        return await self._owned.reap_inactive()

    @property
    def unloaded_expiry_sweeps(self) -> int:
        """Completed :meth:`expire_unloaded` sweeps (tests wait for some after a change)."""
        return self._owned.expiry_sweeps

    @property
    def inactive_topic_sweeps(self) -> int:
        """Completed :meth:`reap_inactive` sweeps (tests wait for some after a change)."""
        return self._owned.inactive_sweeps

    # -- topic compaction (see _compaction_jobs) ----------------------------------------
    @property
    def compaction_sweeps(self) -> int:
        """Completed periodic compaction sweeps (tests wait for one after a change)."""
        return self._compaction.sweeps

    async def compact_due(self) -> int:
        """Compact the owned topics over their ``compactionThreshold`` (see
        :meth:`CompactionJobs.compact_due`); returns how many were compacted."""
        return await self._compaction.compact_due()

    async def start_compaction(self, topic: TopicName) -> asyncio.Task[None]:
        """Start compacting ``topic`` now (see :meth:`CompactionJobs.start_compaction`).

        Raises:
            TopicNotFoundError: no such topic.
            ConflictError: a compaction of the topic is running (Pulsar: 409).
        """
        return await self._compaction.start_compaction(topic)

    async def compact(self, topic: TopicName) -> None:
        """:meth:`start_compaction` and wait for it.

        Raises:
            TopicNotFoundError, ConflictError: as :meth:`start_compaction`.
            TransportError: Kafka failed; nothing of this compaction is visible.
        """
        await self._compaction.compact(topic)

    def compaction_status(self, topic: TopicName) -> CompactionStatus:
        """The last compaction of ``topic`` started by this sidecar (NOT_RUN: none)."""
        return self._compaction.compaction_status(topic)

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = self.transport.admin()
        return self._admin

    def release_blocking(self, moving: Callable[[TopicName], bool]) -> None:
        """Close, now, the connections to every name ``moving`` accepts, and wait until
        they are closed (at most ``release_wait_s``); any thread but the loop's (see
        :meth:`OwnershipWatch.release_blocking`)."""
        self._watch_owner.release_blocking(moving)

    async def release(self, moving: Callable[[TopicName], bool]) -> None:
        """Close the connections to every name in use that ``moving`` accepts (see
        :meth:`OwnershipWatch.release`)."""
        await self._watch_owner.release(moving)

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        """Ask the ownership seam who serves ``topic``."""
        return await self.ownership.owner_of(topic)

    # -- topics ------------------------------------------------------------------------
    def topic_state(self, topic: TopicName) -> TopicState | None:
        """The live state of a base topic, if it is served right now."""
        return self._topics.get(topic.base)

    def auto_creation_for(self, topic: TopicName) -> AutoTopicCreation:
        """The auto-creation rule of ``topic``'s namespace (its override, else the broker's)."""
        svc = self._policies()
        found = None
        if svc is not None:
            found = svc.get(PolicyTarget.namespace_of(topic.tenant, topic.namespace))
        override = None if found is None else found.get("autoTopicCreationOverride")
        return self.auto_creation.with_override(override)

    async def prepare_metadata(self, topic: TopicName) -> None:
        """Pulsar's partitioned-metadata request on a topic that may not exist: a missing
        topic is created when its rule is the partitioned type, left to its first producer
        or consumer when non-partitioned, and refused when auto-creation is off.

        Raises:
            TopicNotFoundError: missing, and not allowed to be created (Pulsar's
                ``TopicNotFound`` with an empty message).
        """
        if await self._table.exists(topic):
            return
        if not await self._table.auto_create(topic, partitioned_only=True):
            raise TopicNotFoundError("", topic=str(topic))

    def _dropped(self, ts: TopicState) -> None:
        """An unused topic was dropped from the table."""
        self._owned.idle_since[ts.topic] = time.time()
        if ts.dedup is not None:
            self._spawn(self._dedup.snapshot_of(ts.dedup), "dedup-final-snapshot")

    async def _unload(
        self, ts: TopicState, reason: CloseReason, name: TopicName | None = None
    ) -> None:
        """Close the connections to a topic: all of them, or those that used ``name``.

        A subscription commits what its consumers acknowledged before they are told to
        close, so that where they reconnect (after a move, on the new owner) nothing they
        acknowledged here comes again.
        """
        if name is None:
            self._table.forget(ts)
        handles = [h for h in ts.producers.values() if name is None or h.producer.topic == name]
        for handle in handles:
            handle.mark_closed(reason)
            ts.producers.pop(handle.seq, None)
        if ts.dedup is not None and (handles or name is None):
            await self._pool.drain(timeout_s=10.0)
            await self._dedup.snapshot(ts, force=True)
        if name is None:
            subs = list(ts.subscriptions.values())
            ts.subscriptions.clear()
            results = await asyncio.gather(*(s.close(reason) for s in subs), return_exceptions=True)
            for sub, result in zip(subs, results, strict=True):
                if isinstance(result, BaseException):
                    logger.error("closing subscription %s failed: %s", sub.label, result)
            return
        for sub in list(ts.subscriptions.values()):
            leaving = [c for c in sub.consumers.values() if c.topic == name]
            if leaving:
                await sub.hand_over(leaving, reason)
        async with ts.lock:  # a subscription nobody uses here any more ends now
            for sub in list(ts.subscriptions.values()):
                if not sub.consumers and ts.subscriptions.get(sub.name) is sub:
                    del ts.subscriptions[sub.name]
                    await sub.close(reason)
        self._table.maybe_drop(ts)

    # -- consumers ---------------------------------------------------------------------
    async def subscribe(
        self,
        topic: TopicName,
        subscription: str,
        *,
        sub_type: SubscriptionType = SubscriptionType.Exclusive,
        consumer_name: str | None = None,
        receiver_queue_size: int | None = None,
        pull_mode: bool = False,
        initial_position: InitialPosition = InitialPosition.Latest,
        negative_ack_delay_s: float | None = None,
        durable: bool = True,
        start_message_id: MessageId | None = None,
        read_compacted: bool = False,
    ) -> Consumer:
        """Attach a consumer, creating the (durable) subscription if needed.

        ``durable=False``: a reader's subscription (Pulsar's non-durable cursor), which
        commits nothing and ends with its consumer; ``start_message_id``: it starts right
        after that message (on its partition; the others at ``initial_position``).
        ``read_compacted``: a subscription loaded for this consumer reads the topic's
        compacted view up to the compaction horizon, then the topic (Exclusive and
        Failover only, as Pulsar; a subscription already loaded keeps how it reads).

        Raises:
            InvalidInputError: empty subscription name.
            TopicNotFoundError: no such topic or partition.
            CacheStateError: policies are not available yet.
            UnavailableError: the sidecar is shutting down.
            NotAllowedError, ConsumerBusyError, SubscriptionBusyError: refused by policy
                or by the subscription's current state (see the module docstring).
            TransportError: Kafka failed while loading the subscription.
        """
        if not subscription:
            raise InvalidInputError("Empty subscription name")
        if self._closing:
            raise UnavailableError("the sidecar is shutting down; retry on another broker")
        limits = self.read_limits(topic)
        with self._drop_if_unused(topic):
            return await self._subs.open(
                topic,
                subscription,
                limits,
                sub_type=sub_type,
                consumer_name=consumer_name,
                receiver_queue_size=receiver_queue_size,
                pull_mode=pull_mode,
                initial_position=initial_position,
                negative_ack_delay_s=negative_ack_delay_s,
                durable=durable,
                start_message_id=start_message_id,
                read_compacted=read_compacted,
            )

    @contextlib.contextmanager
    def _drop_if_unused(self, topic: TopicName) -> Iterator[None]:
        """On a refusal, forget a topic state that was created only for this request."""
        try:
            yield
        except BaseException:
            ts = self._topics.get(topic.base)
            if ts is not None:
                self._table.maybe_drop(ts)
            raise

    async def reset_cursor(self, consumer: Consumer, offsets: dict[int, int]) -> None:
        """Move the consumer's subscription to ``offsets`` (Kafka partition → the offset
        delivered next; other partitions keep their position), as Pulsar's seek does: every
        consumer of the subscription is disconnected (cause UNLOADED: reconnect) and
        resumes there, with no individual acknowledgements above the new position.

        Raises:
            ConsumerBusyError: the consumer's subscription is not served here any more.
            TransportError: Kafka refused the new position.
        """
        sub = consumer.subscription
        ts = self._topics.get(sub.topic)
        if ts is None or ts.subscriptions.get(sub.name) is not sub:
            raise ConsumerBusyError(
                "Subscription is not served here any more", topic=str(sub.topic)
            )
        await self.reset_subscription(sub.topic, sub.name, offsets)

    async def reset_subscription(
        self, topic: TopicName, name: str, offsets: dict[int, int]
    ) -> None:
        """Move subscription ``name`` of ``topic`` to ``offsets`` (Kafka partition → the
        offset delivered next; other partitions keep their position), whether or not it is
        loaded: a loaded one is closed first (its consumers get cause UNLOADED and
        reconnect at the new position). Pulsar seeks each partition of a partitioned topic
        on its own; the partitions' seeks of one client arrive one after the other, and the
        first already disconnected the others' consumers, so this works by name.

        Raises:
            TopicNotFoundError: no such topic.
            TransportError: Kafka refused the new position.
        """
        await self._subs.reset(topic, name, offsets, self.read_limits(topic))

    async def unsubscribe(self, consumer: Consumer) -> None:
        """Delete the consumer's subscription (its Kafka group too); closes the consumer.

        Raises:
            ConsumerBusyError: other consumers are still attached (as Pulsar refuses).
        """
        await self._subs.unsubscribe(consumer)

    # -- producers ---------------------------------------------------------------------
    async def create_producer(
        self,
        topic: TopicName,
        config: ProducerConfig | None = None,
        on_queued: Callable[[], None] = lambda: None,
    ) -> ProducerHandle:
        """Open a producer on a topic served here (checks ``maxProducerPerTopic``); a
        ``WaitForExclusive`` one is queued while the topic has other producers
        (``on_queued`` is called when it starts waiting; see :mod:`._exclusive_wait`).

        Raises:
            TopicNotFoundError, CacheStateError, UnavailableError (shutting down),
            ProducerBusyError, ConfigurationError.
        """
        if self._closing:
            raise UnavailableError("the sidecar is shutting down; retry on another broker")
        if config is not None and config.access_mode is ProducerAccessMode.WaitForExclusive:

            async def attempt() -> ProducerHandle:
                if self._closing:
                    raise UnavailableError("the sidecar is shutting down; retry on another broker")
                if not (await self.owner_of(topic)).local:  # its bundle moved while queued
                    raise UnavailableError(
                        f"Namespace bundle for topic ({topic}) not served by this instance. "
                        "Please redo the lookup."
                    )
                with self._drop_if_unused(topic):
                    return await self._create_producer(topic, config, self.read_limits(topic))

            return await self._exclusive.wait_turn(topic, attempt, on_queued)
        limits = self.read_limits(topic)
        with self._drop_if_unused(topic):
            return await self._create_producer(topic, config, limits)

    async def _create_producer(
        self, topic: TopicName, config: ProducerConfig | None, limits: TopicLimits
    ) -> ProducerHandle:
        # Pulsar's producer refusal (ServerCnx: the topic future completes empty).
        missing = "Topic Not Found." if self._create_topic else None
        async with self._table.locked(topic, limits, missing) as ts:
            parts = partitions_of(topic, ts.num_partitions)
            self._apply_limits(ts, limits)
            admission.admit_producer(ts, topic, limits, parts)
            mode = ProducerAccessMode.Shared if config is None else config.access_mode
            waiting = self._exclusive.waiting(topic)
            fenced = admission.admit_producer_access(ts, topic, mode, parts, waiting=waiting)
            if mode is ProducerAccessMode.ExclusiveWithFencing and waiting:
                self._exclusive.fence(topic)
            if limits.dedup_enabled and ts.dedup is None:
                await self._dedup.load(ts)
            if limits.backlog.active or ts.backlog_state is not None:
                await self.check_backlog(ts)
                admission.admit_producer_backlog(ts, topic)
            epoch = await self._topic_epoch(topic, mode, config)
            await self._watch_owner.note_claim(ts, topic)
            linger = None if config is None else config.linger_ms
            if linger is None:
                linger = self.config.producer_linger_ms
            producer = PartitionedProducer(
                await self._pool.client(linger), topic, config, num_partitions=ts.num_partitions
            )
            handle = ProducerHandle(
                ts,
                producer,
                parts,
                self._pool.reports_queued,
                hold_timeout_s=self.config.backlog_hold_timeout_s,
            )
            ts.producers[handle.seq] = handle  # first: the topic stays in use
            handle.topic_epoch = epoch
            fence = CloseReason(CloseCause.POLICY, "Fenced by an ExclusiveWithFencing producer")
            for other in fenced:
                self._close_producer(ts, other, fence)
            logger.info("producer %d opened on %s (%s)", handle.seq, topic, mode.name)
            return handle

    async def _topic_epoch(
        self, topic: TopicName, mode: ProducerAccessMode, config: ProducerConfig | None
    ) -> int | None:
        """The epoch a producer holds ``topic`` under (Pulsar's ``incrementTopicEpochIfNeeded``):
        a Shared one is told the current epoch; an exclusive one's is decided and stored
        durably before it is answered, as Pulsar writes it to the ledger's properties first.

        Raises:
            ProducerAccessFencedError: the epoch it presents has moved on.
        """
        if mode is ProducerAccessMode.Shared:
            return self.epochs.current(topic)
        presented = None if config is None else config.topic_epoch

        def decide(current: int | None) -> int:
            return admission.admit_topic_epoch(topic, current, presented)

        return await asyncio.to_thread(self.epochs.take, topic, decide)

    def close_producer(self, handle: ProducerHandle) -> None:
        """The client went away: forget the producer (queued messages still complete)."""
        self._close_producer(handle.topic_state, handle, None)

    def _close_producer(
        self, ts: TopicState, handle: TopicProducer, reason: CloseReason | None
    ) -> None:
        if reason is not None:
            logger.info("closing producer %d on %s: %s", handle.seq, ts.topic, reason.reason)
        handle.mark_closed(reason)
        ts.producers.pop(handle.seq, None)
        self._table.maybe_drop(ts)
        self._exclusive.notify()  # a queued WaitForExclusive producer may take the topic
