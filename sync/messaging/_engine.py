"""The messaging engine: topics served by this sidecar, their producers and subscriptions,
and the live enforcement of their policies.

Admission (on connect), with Pulsar's refusals:

=============================== ================================================ ==========
check                           refusal (``reason``)                              error
=============================== ================================================ ==========
subscriptionTypesEnabled        ``Topic[{<topic>}] doesn't support <T> sub type!`` NotAllowed
maxSubscriptionsPerTopic        ``Exceed the maximum number of subscriptions of   NotAllowed
                                the topic: <topic>``
maxConsumerPerTopic             ``Topic reached max consumers limit``             ConsumerBusy
other type on the subscription  ``Subscription is of different type``             SubscriptionBusy
Exclusive already taken         ``Exclusive consumer is already connected``       ConsumerBusy
maxConsumersPerSubscription     ``Subscription reached max consumers limit``      ConsumerBusy
maxProducerPerTopic             ``Topic reached max producers limit``             ProducerBusy
=============================== ================================================ ==========

Counts are per partition, as in Pulsar where every partition is a topic: a connection to
the base topic counts on every partition, one to ``…-partition-N`` on partition N only.
``maxSubscriptionsPerTopic`` counts durable subscriptions (Kafka consumer groups), not
just connected ones.

Live changes (a policy listener on the cache, plus a periodic re-read): connections that
a new policy forbids are closed, newest first, with cause POLICY and the same
reason text (a disabled subscription type; more consumers or producers than a lowered
maximum). Rates and ``maxUnackedMessagesOnConsumer`` apply to the next dispatch.
Lowering ``maxSubscriptionsPerTopic`` never deletes a subscription (neither does Pulsar);
``maxMessageSize`` is read on every send.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sync import CacheState, PolicyService, PolicyTarget
from sync._constants import GLOBAL_KEY_PREFIX, HEADER_SEQUENCE, NAMESPACE_KEY_PREFIX
from sync._errors import (
    CacheStateError,
    ConflictError,
    ConsumerBusyError,
    DuplicateInFlightError,
    InvalidInputError,
    NotAllowedError,
    PolicySyncError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusyError,
    SubscriptionBusyError,
    TopicNotFoundError,
    TransportError,
    UnavailableError,
)
from sync._kafka_names import kafka_topic_of
from sync._names import TopicName
from sync._policies import Policies
from sync.messaging._producer import (
    MessageId,
    OutboundMessage,
    PartitionedProducer,
    ProducerClient,
    ProducerConfig,
    SendCallback,
    origin_headers,
)
from sync.transport import Admin, Header, TopicDescription, Transport

from ._autocreate import AutoTopicCreation, TopicCreator
from ._backlog import (
    BACKLOG_EXCEEDED,
    BacklogAction,
    BacklogMeasure,
    BacklogQuotas,
    RecordSizes,
    measure_backlog,
    moved_position,
)
from ._compaction import (
    CompactedView,
    CompactionState,
    CompactionStatus,
    Compactor,
    over_threshold,
)
from ._config import MessagingConfig
from ._consumer import CloseCause, CloseReason, Consumer
from ._cursor import decode_ack_ranges
from ._dedup import DUPLICATE_IN_FLIGHT, Deduplicator, Verdict
from ._delayed import HEADER_DELIVER_AT, max_delay_refusal
from ._inactive import InactivePolicy, delete_topic, inactive_verdict
from ._ownership import LocalOwnership, OwnerInfo, TopicOwnership
from ._policy import TopicLimits
from ._ratelimit import RateLimiter
from ._subscription import Subscription, subscription_group
from ._topic_config import TopicConfigReconciler
from ._types import InitialPosition, ProducerState, SubscriptionType, transition

logger = logging.getLogger(__name__)

__all__ = [
    "MessagingEngine",
    "ProducerHandle",
    "TopicState",
]

#: WebSocket close codes the engine asks connections to close with.

PolicySource = Callable[[], PolicyService | None]


class ProducerHandle:
    """A producer connection on a topic served here."""

    def __init__(
        self,
        topic_state: TopicState,
        producer: PartitionedProducer,
        partitions: frozenset[int],
        on_queued: Callable[[], None] = lambda: None,
        hold_timeout_s: float = 30.0,
    ) -> None:
        self.seq = next(_SEQ)
        self.hold_timeout_s = hold_timeout_s
        self.topic_state = topic_state
        self.producer = producer
        self.partitions = partitions
        self._on_queued = on_queued
        self.state = ProducerState.ACTIVE
        self.close_reason: CloseReason | None = None
        self._closed = asyncio.Event()
        name = producer.config.producer_name
        #: The producer-name header every message of a named producer carries (encoded once).
        self._origin: Header | None = None if not name else origin_headers(name, 0)[0]

    @property
    def closed(self) -> bool:
        """True once closed by the client or evicted."""
        return self.state is ProducerState.CLOSED

    @property
    def max_message_size(self) -> int:
        """The topic's ``maxMessageSize`` right now."""
        return self.topic_state.limits.max_message_size

    def send(
        self,
        payload: bytes,
        callback: SendCallback,
        *,
        key: str | None = None,
        properties: dict[str, str] | None = None,
        event_time_ms: int | None = None,
        sequence_id: int | None = None,
        deliver_at_ms: int | None = None,
        headers: list[Header] | None = None,
    ) -> None:
        """Route and queue one message under the topic's live ``maxMessageSize``.

        ``callback`` runs on the engine's event loop once Kafka acknowledged the message
        (or refused it). With ``deduplicationEnabled``, a named producer and a
        ``sequence_id``, a duplicate is answered at once with the message id of the
        producer's last persisted message and not written (see ``_dedup``).

        ``deliver_at_ms`` (epoch ms) asks for delayed delivery (see ``_delayed``);
        ``headers`` are reserved (``__pulsar.``) headers the message carries as given.

        Raises:
            MessageTooLargeError, InvalidInputError, RoutingError: nothing was queued.
            DuplicateInFlightError: the same sequence id is still being persisted.
            NotAllowedError: delayed beyond ``delayedDeliveryMaxDelayInMillis``.
        """
        ts = self.topic_state
        reserved = _deliver_at_header(ts, deliver_at_ms)
        if headers:
            reserved = [*headers] if reserved is None else reserved + headers
        dedup = ts.dedup if ts.limits.dedup_enabled else None
        name = self.producer.config.producer_name
        if dedup is not None and name and sequence_id is not None:
            if len(payload) > ts.limits.max_message_size:
                dedup = None  # refused below, before the sequence counts as sent
            else:
                verdict, last = dedup.check(name, sequence_id)
                if verdict is Verdict.DUPLICATE:
                    if last is None:
                        raise DuplicateInFlightError(DUPLICATE_IN_FLIGHT, topic=str(ts.topic))
                    asyncio.get_running_loop().call_soon(callback, last, None)
                    return
                if verdict is Verdict.IN_FLIGHT:
                    raise DuplicateInFlightError(DUPLICATE_IN_FLIGHT, topic=str(ts.topic))
                callback = functools.partial(_dedup_report, dedup, name, sequence_id, callback)
        origin = self._origin
        if origin is not None and sequence_id is not None:
            # Who sent it, kept for consumers (and deduplication's replay).
            sequence = (HEADER_SEQUENCE, str(sequence_id).encode("ascii"))
            if reserved is None:
                reserved = [origin, sequence]
            else:
                reserved += (origin, sequence)
        partition = self.producer.send_callback(
            payload,
            callback,
            key=key,
            properties=properties,
            event_time_ms=event_time_ms,
            max_message_size=ts.limits.max_message_size,
            reserved_headers=reserved,
        )
        limiter = ts.publish_limiters[partition] if ts.publish_limiters else None
        if limiter is not None and not limiter.spec.unlimited:
            limiter.wait_s(0)  # refill first
            limiter.consume(len(payload))
        ts.published_msgs += 1
        ts.published_bytes += len(payload)
        self._on_queued()

    def send_batch(
        self,
        messages: list[OutboundMessage],
        callback: SendCallback,
        *,
        deliver_at_ms: int | None = None,
    ) -> None:
        """Route and queue a producer's batch (one SEND frame); ``callback`` runs ONCE, on
        the engine's loop, when the last message is answered: the lowest message id
        stored, or the first error.

        The same rules as :meth:`send`, checked once per batch where they are the same for
        every message (``maxMessageSize``, the delayed-delivery limit, ``publishRate``
        accounting): every message is checked before the first is queued, so a refusal
        raises and writes nothing. With deduplication on for a named producer each
        message goes through :meth:`send` (its own verdict), answered together.

        Raises:
            MessageTooLargeError, InvalidInputError, RoutingError, NotAllowedError:
                nothing was queued.
        """
        if not messages:
            asyncio.get_running_loop().call_soon(callback, None, None)
            return
        ts = self.topic_state
        limits = ts.limits
        if limits.dedup_enabled and self.producer.config.producer_name:
            gather = _Gather(len(messages), callback)
            for payload, key, properties, event_time_ms, sequence_id, extra in messages:
                try:
                    self.send(
                        payload,
                        gather,
                        key=key,
                        properties=dict(properties) if properties else None,
                        event_time_ms=event_time_ms,
                        sequence_id=sequence_id,
                        deliver_at_ms=deliver_at_ms,
                        headers=extra,
                    )
                except PolicySyncError as exc:
                    gather(None, exc)
            return
        reserved = _deliver_at_header(ts, deliver_at_ms)
        routed = self.producer.send_batch(
            messages,
            callback,
            max_message_size=limits.max_message_size,
            reserved_headers=reserved,
            origin=self._origin,
        )
        total = 0
        for message in messages:
            total += len(message[0])
        limiters = ts.publish_limiters
        if limiters:
            if isinstance(routed, int):
                _take(limiters[routed], total, len(messages))
            else:
                for message, partition in zip(messages, routed, strict=True):
                    _take(limiters[partition], len(message[0]), 1)
        ts.published_msgs += len(messages)
        ts.published_bytes += total
        self._on_queued()

    def publish_wait_s(self) -> float:
        """How long the front end should stop reading this producer (``publishRate``):
        0.0 unless a partition it writes to is over its rate (Pulsar pauses the
        connection's reads the same way)."""
        limiters = self.topic_state.publish_limiters
        wait = 0.0
        for p in self.partitions:
            lim = limiters[p] if p < len(limiters) else None
            if lim is not None and not lim.spec.unlimited:
                wait = max(wait, lim.wait_s(0))
        return wait

    @property
    def held(self) -> bool:
        """Sends must wait: the topic is over a ``producer_request_hold`` backlog quota."""
        return not self.topic_state.writable.is_set()

    async def wait_held(self) -> None:
        """Return once a ``producer_request_hold`` backlog quota holds this topic's sends
        (the binary front end then disconnects the producer, as Pulsar's broker does)."""
        await self.topic_state.holding.wait()

    async def wait_writable(self, timeout_s: float | None = None) -> bool:
        """Wait while sends are held by a backlog quota (at most ``timeout_s``, default the
        engine's ``backlog_hold_timeout_s``); False if still held at the end."""
        if not self.held:
            return True
        timeout = self.hold_timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout):
                await self.topic_state.writable.wait()
        except TimeoutError:
            return False
        return True

    def mark_closed(self, reason: CloseReason | None) -> None:
        """Enter CLOSED (idempotent) and wake whoever waits for it."""
        if self.state is ProducerState.CLOSED:
            return
        self.state = transition(
            self.state, ProducerState.CLOSED, f"producer on {self.producer.topic}"
        )
        self.close_reason = reason
        self.producer.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        """Return once the producer is closed (e.g. evicted by a policy change)."""
        await self._closed.wait()

    def __repr__(self) -> str:
        return f"ProducerHandle({self.producer.topic}, {self.state.value})"


def _deliver_at_header(ts: TopicState, deliver_at_ms: int | None) -> list[Header] | None:
    """The header a delayed message carries (None: deliver at once); refuses a delay over
    the topic's delayedDeliveryMaxDelayInMillis, as Pulsar does (one rule for every send)."""
    if deliver_at_ms is None:
        return None
    limits = ts.limits
    delay = deliver_at_ms - int(time.time() * 1000)
    if limits.delayed_enabled and limits.delayed_max_ms > 0 and delay > limits.delayed_max_ms:
        raise NotAllowedError(max_delay_refusal(limits.delayed_max_ms), topic=str(ts.topic))
    return [(HEADER_DELIVER_AT, str(deliver_at_ms).encode("ascii"))] if delay > 0 else None


def _take(limiter: RateLimiter | None, nbytes: int, msgs: int) -> None:
    """Account sent messages against a ``publishRate`` bucket (refilled first)."""
    if limiter is not None and not limiter.spec.unlimited:
        limiter.wait_s(0)
        limiter.consume(nbytes, msgs)


class _Gather:
    """Answers a batch sent message by message once: the lowest id, or the first error."""

    __slots__ = ("callback", "error", "first", "remaining")

    def __init__(self, count: int, callback: SendCallback) -> None:
        self.remaining = count
        self.callback = callback
        self.first: MessageId | None = None
        self.error: PolicySyncError | None = None

    def __call__(self, message_id: MessageId | None, error: PolicySyncError | None) -> None:
        if error is not None:
            if self.error is None:
                self.error = error
        elif message_id is not None and (self.first is None or message_id < self.first):
            self.first = message_id
        self.remaining -= 1
        if self.remaining == 0:
            if self.error is not None:
                self.callback(None, self.error)
            else:
                self.callback(self.first, None)


def _dedup_report(
    dedup: Deduplicator,
    name: str,
    sequence_id: int,
    callback: SendCallback,
    message_id: MessageId | None,
    error: PolicySyncError | None,
) -> None:
    if message_id is not None and error is None:
        dedup.persisted(name, sequence_id, message_id)
    else:
        dedup.failed(name, sequence_id)
    callback(message_id, error)


_SEQ = itertools.count(1)
_T = TypeVar("_T")
_P = TypeVar("_P")


@dataclass(eq=False)
class TopicState:
    """A base topic served here: partitions, live limits, producers and subscriptions."""

    topic: TopicName
    kafka_topic: str
    num_partitions: int
    limits: TopicLimits
    dispatch_limiters: list[RateLimiter]
    #: ``publishRate``, one bucket per partition (every partition is a topic in Pulsar).
    publish_limiters: list[RateLimiter] = field(default_factory=list)
    #: ``subscribeRate``: one bucket per consumer name.
    subscribe_limiters: dict[str, RateLimiter] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    producers: dict[int, ProducerHandle] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Clear while a ``producer_request_hold`` backlog quota holds the sends.
    writable: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set while a ``producer_request_hold`` backlog quota holds the sends (``writable``'s
    #: complement, to wait on).
    holding: asyncio.Event = field(default_factory=asyncio.Event)
    #: The backlog action in force (None: within every quota).
    backlog_state: BacklogAction | None = None
    backlog: BacklogMeasure | None = None
    backlog_checking: bool = False
    published_msgs: int = 0
    published_bytes: int = 0
    #: Deduplication state, loaded while ``deduplicationEnabled`` applies.
    dedup: Deduplicator | None = None
    #: The ownership term each name in use is served under (:attr:`OwnerInfo.bundle` and
    #: ``claim``), by the name the clients used (absent: unknown).
    owner_claims: dict[TopicName, tuple[str | None, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.writable.set()

    @property
    def partitioned(self) -> bool:
        """More than one partition: message ids carry the partition index."""
        return self.num_partitions > 1

    def consumers(self) -> list[Consumer]:
        """Every attached (not closed) consumer, oldest first."""
        return sorted(
            (c for s in self.subscriptions.values() for c in s.consumers.values() if not c.closed),
            key=lambda c: c.seq,
        )

    def names(self) -> set[TopicName]:
        """The names the live connections used: the base topic and/or its partitions."""
        names = {c.topic for c in self.consumers()}
        names.update(h.producer.topic for h in self.producers.values())
        return names

    def consumers_on(self, partition: int) -> list[Consumer]:
        """Consumers of every subscription attached to ``partition``, oldest first."""
        return [c for c in self.consumers() if partition in c.partitions]

    def producers_on(self, partition: int) -> list[ProducerHandle]:
        """Producers writing to ``partition``, oldest first."""
        return sorted(
            (h for h in self.producers.values() if partition in h.partitions),
            key=lambda h: h.seq,
        )


def _start_offsets(message_id: MessageId | None, count: int) -> dict[int, int]:
    """A reader's first offset: right after ``message_id`` on its partition."""
    if message_id is None:
        return {}
    partition = message_id.kafka_partition
    if partition >= count:
        raise InvalidInputError(f"messageId names partition {partition}; the topic has {count}")
    return {partition: message_id.offset + 1}


def _partitions_of(topic: TopicName, count: int) -> frozenset[int]:
    if topic.partition_index >= 0:
        if topic.partition_index >= count:
            raise TopicNotFoundError(
                f"Topic {topic} does not exist: {topic.base} has {count} partition(s)",
                topic=str(topic),
            )
        return frozenset({topic.partition_index})
    return frozenset(range(count))


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
    ) -> None:
        self.transport = transport
        self.auto_creation = auto_creation or AutoTopicCreation()
        self._create_topic = create_topic
        self.config = config or MessagingConfig()
        self.ownership: TopicOwnership = ownership or LocalOwnership()
        self._policies = policies
        self._topics: dict[TopicName, TopicState] = {}
        self._topic_loading: dict[TopicName, asyncio.Future[TopicState]] = {}
        self._admin: Admin | None = None
        #: The shared Kafka producers, one per ``linger.ms`` (see ProducerConfig.linger_ms).
        self._clients: dict[int, ProducerClient] = {}
        self._reports_due = asyncio.Event()
        self._reports_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._service: PolicyService | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._live_keys: frozenset[str] = frozenset()
        self._closing = False
        #: Wall-clock time since when a topic has had no connection here (dropped).
        self._idle_since: dict[TopicName, float] = {}
        #: Periodic sweeps running now (each runs once at a time).
        self._sweeping: set[str] = set()
        #: Record sizes of the backlogs of topics with a ``limitSize`` quota.
        self._record_sizes: dict[str, RecordSizes] = {}
        self._sizes_locks: dict[str, asyncio.Lock] = {}
        #: Topic compaction (``compactionThreshold``): one compactor (and its view of the
        #: companion topic) per Kafka topic, each used under its own lock.
        self._compactors: dict[str, Compactor] = {}
        self._compaction_locks: dict[str, asyncio.Lock] = {}
        #: Completed compaction sweeps (tests wait for one to have run after a change).
        self.compaction_sweeps = 0
        self._started_wall = time.time()
        #: Keeps the Kafka topic config of owned topics equal to their policies.
        self.topic_configs = TopicConfigReconciler(
            transport, policies, self.ownership, sweep_s=self.config.topic_config_sweep_s
        )

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start watching policies and ownership (call on the serving event loop)."""
        self._loop = asyncio.get_running_loop()
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name="messaging-watch")
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
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await self._drain_reports(client, timeout_s=10.0)
        if self._reports_task is not None:
            self._reports_task.cancel()
            self._reports_task = None
        for client in clients:
            await asyncio.to_thread(client.close)
        for task in list(self._tasks):
            task.cancel()

    # -- delivery reports --------------------------------------------------------------
    # The shared Kafka producer's reports are served here, on the loop, rather than by a
    # thread of the client: a report thread takes the GIL once per message and fights the
    # loop for it, which cost more than half of the producing throughput. Callbacks (the
    # WebSocket acks) then run on the loop and need no hand-off.

    def _reports_queued(self) -> None:
        if not self._reports_due.is_set():
            self._reports_due.set()

    async def _serve_reports(self) -> None:
        """Poll the shared producers while sends are in flight; sleep while none are."""
        due = self._reports_due
        interval = self.config.report_poll_interval_s
        while True:
            await due.wait()
            due.clear()
            while busy := [c for c in self._clients.values() if c.in_flight]:
                for client in busy:
                    try:
                        client.poll(0)
                    except Exception:
                        logger.exception("serving Kafka delivery reports failed; continuing")
                await asyncio.sleep(interval)

    async def _shared_client(self, linger_ms: int) -> ProducerClient:
        """The shared Kafka producer whose ``linger.ms`` is ``linger_ms`` (made on first use)."""
        client = self._clients.get(linger_ms)
        if client is None:
            client = await asyncio.to_thread(
                ProducerClient, self.transport, linger_ms=linger_ms, serve_reports=False
            )
            if self._clients.setdefault(linger_ms, client) is not client:  # made meanwhile
                await asyncio.to_thread(client.close)
                client = self._clients[linger_ms]
        if self._reports_task is None:
            self._reports_task = asyncio.create_task(self._serve_reports(), name="producer-reports")
        return client

    async def _drain_reports(self, client: ProducerClient, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while client.in_flight and time.monotonic() < deadline:
            client.poll(0)
            await asyncio.sleep(0.005)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
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
        svc = self._policies()
        if svc is None:
            raise CacheStateError("policy cache is STARTING, not READY; retry shortly")
        state = svc.cache.state
        if state is not CacheState.READY:
            raise CacheStateError(f"policy cache is {state.value}, not READY; retry shortly")
        policies: Policies = svc.applied(topic.base)
        return TopicLimits.from_policies(
            policies, default_max_message_size=self.config.default_max_message_size
        )

    def _listener(self, key: str, _value: Policies | None) -> None:
        # Cache listener thread: forward only keys that concern a live topic.
        if key in self._live_keys and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._policy_key_changed, key)
            except RuntimeError:  # the loop is closed
                pass

    def _update_live_keys(self) -> None:
        keys: set[str] = set()
        for topic in self._topics:
            keys.add(topic.canonical)
            keys.add(GLOBAL_KEY_PREFIX + topic.canonical)
            keys.add(f"{NAMESPACE_KEY_PREFIX}{topic.tenant}/{topic.namespace}")
        self._live_keys = frozenset(keys)

    def _policy_key_changed(self, key: str) -> None:
        try:
            target = PolicyTarget.from_key(key)
        except Exception:
            return
        for ts in list(self._topics.values()):
            if target.topic is None:
                hit = (ts.topic.tenant, ts.topic.namespace) == (target.tenant, target.namespace)
            else:
                hit = ts.topic == target.topic
            if hit:
                self.refresh_policies(ts)

    def refresh_policies(self, ts: TopicState) -> None:
        """Re-read the topic's policies and apply them to its live connections."""
        try:
            limits = self.read_limits(ts.topic)
        except CacheStateError:
            return  # keep enforcing the last known policies
        except Exception:
            logger.exception("reading policies of %s failed", ts.topic)
            return
        self._apply_limits(ts, limits)

    def _apply_limits(self, ts: TopicState, limits: TopicLimits) -> None:
        old, ts.limits = ts.limits, limits
        if old != limits:
            logger.info("%s: applying changed policies %s", ts.topic, limits)
        for limiter in ts.dispatch_limiters:
            limiter.update(limits.dispatch_rate)
        for limiter in ts.publish_limiters:
            limiter.update(limits.publish_rate)
        if limits.subscribe_rate != old.subscribe_rate:
            ts.subscribe_limiters.clear()
        evicted: set[int] = set()
        topic = ts.topic
        for c in ts.consumers():
            if not limits.type_enabled(c.sub_type):
                self._evict(c, f"Topic[{{{topic}}}] doesn't support {c.sub_type.value} sub type!")
                evicted.add(c.seq)
        if limits.max_consumers_per_subscription > 0:
            for sub in ts.subscriptions.values():
                for p in range(ts.num_partitions):
                    live = [c for c in sub.consumers_on(p) if c.seq not in evicted]
                    for c in _newest(live, len(live) - limits.max_consumers_per_subscription):
                        self._evict(c, "Subscription reached max consumers limit")
                        evicted.add(c.seq)
        if limits.max_consumers_per_topic > 0:
            for p in range(ts.num_partitions):
                live = [c for c in ts.consumers_on(p) if c.seq not in evicted]
                for c in _newest(live, len(live) - limits.max_consumers_per_topic):
                    self._evict(c, "Topic reached max consumers limit")
                    evicted.add(c.seq)
        if limits.max_producers_per_topic > 0:
            gone: set[int] = set()
            for p in range(ts.num_partitions):
                live_p = [h for h in ts.producers_on(p) if h.seq not in gone]
                for h in _newest(live_p, len(live_p) - limits.max_producers_per_topic):
                    reason = CloseReason(CloseCause.POLICY, "Topic reached max producers limit")
                    self._close_producer(ts, h, reason)
                    gone.add(h.seq)
        for sub in ts.subscriptions.values():
            sub.apply_limits(limits)
        if limits.dedup_enabled and ts.dedup is None and ts.producers:
            self._spawn(self._load_dedup_quietly(ts), "dedup-load")
        elif not limits.dedup_enabled and ts.dedup is not None:
            dedup, ts.dedup = ts.dedup, None  # Pulsar forgets the state when disabled
            self._spawn(self._snapshot_dedup_of(dedup), "dedup-final-snapshot")

    def _evict(self, consumer: Consumer, reason: str) -> None:
        logger.info(
            "closing consumer %s on %s: %s", consumer.name, consumer.subscription.label, reason
        )
        # What it leaves unserved is committed by the subscription (on a task).
        consumer.subscription.detach(consumer, CloseReason(CloseCause.POLICY, reason))

    # -- watching ----------------------------------------------------------------------
    async def _watch(self) -> None:
        last_policy = last_owner = last_expiry = last_backlog = time.monotonic()
        last_inactive = last_cold_expiry = last_compaction = time.monotonic()
        while True:
            try:
                svc = self._policies()
                if svc is not self._service:
                    if self._remove_listener is not None:
                        self._remove_listener()
                        self._remove_listener = None
                    self._service = svc
                    if svc is not None:
                        self._remove_listener = svc.cache.add_listener(self._listener)
                    for ts in list(self._topics.values()):
                        self.refresh_policies(ts)
                now = time.monotonic()
                if now - last_policy >= self.config.policy_check_s:
                    last_policy = now
                    for ts in list(self._topics.values()):
                        self.refresh_policies(ts)
                for ts in list(self._topics.values()):
                    if ts.dedup is not None:
                        self._spawn(self._snapshot_dedup(ts), "dedup-snapshot")
                if now - last_expiry >= self.config.message_expiry_check_s:
                    last_expiry = now
                    for ts in list(self._topics.values()):
                        for sub in list(ts.subscriptions.values()):
                            sub.expire_messages()
                if now - last_backlog >= self.config.backlog_check_s:
                    last_backlog = now
                    for ts in list(self._topics.values()):
                        if (ts.limits.backlog.active or ts.backlog_state) and not (
                            ts.backlog_checking
                        ):
                            self._spawn(self._check_backlog_quietly(ts), "backlog-check")
                    self._spawn_sweep("backlog-unloaded", self.enforce_unloaded_backlogs)
                if now - last_inactive >= self.config.inactive_topic_check_s:
                    last_inactive = now
                    self._spawn_sweep("inactive-topics", self.reap_inactive)
                if now - last_cold_expiry >= self.config.unloaded_expiry_check_s:
                    last_cold_expiry = now
                    self._spawn_sweep("expire-unloaded", self.expire_unloaded)
                if now - last_compaction >= self.config.compaction_check_s:
                    last_compaction = now
                    self._spawn_sweep("compaction", self.compact_due)
                if now - last_owner >= self.config.ownership_check_s:
                    last_owner = now
                    await self._check_ownership()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("messaging watch loop failed; continuing")
            await asyncio.sleep(min(0.5, self.config.policy_check_s))

    # -- backlog quotas ----------------------------------------------------------------
    async def _check_backlog_quietly(self, ts: TopicState) -> None:
        try:
            await self.check_backlog(ts)
        except Exception:
            logger.exception("backlog check of %s failed; keeping its state", ts.topic)

    async def check_backlog(self, ts: TopicState) -> BacklogMeasure | None:
        """Measure the topic's backlog and apply its backlog quotas (see ``_backlog``)."""
        quotas = ts.limits.backlog
        if not quotas.active:
            self._set_backlog_state(ts, None)
            return None
        ts.backlog_checking = True
        try:
            avg = ts.published_bytes / ts.published_msgs if ts.published_msgs else 0.0
            measure = await self._measure_and_evict(
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
        self._set_backlog_state(ts, state)
        return measure

    async def _measure_and_evict(
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
        admin = self._admin_client()
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
                    o, measure.acked.get(p, {}).get(group) or [], self.config.ack_metadata_max_bytes
                )
                for p, o in offsets.items()
            }
            await asyncio.to_thread(admin.alter_group_positions, group, kafka_topic, positions)
            logger.info("%s: group %s moved to %s (backlog eviction)", topic, group, offsets)
        return measure

    async def _unloaded_owned(
        self, svc: PolicyService, pick: Callable[[Policies], _P | None]
    ) -> AsyncIterator[tuple[TopicName, str, TopicDescription, _P]]:
        """The owned topics not loaded here whose applied policies ``pick`` something
        from, with their Kafka topic's description (periodic sweeps; a loaded topic is
        checked with its live state instead)."""
        admin = self._admin_client()
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

    async def enforce_unloaded_backlogs(self) -> int:
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

        async for topic, kafka_topic, desc, quotas in self._unloaded_owned(svc, evicting_quotas):
            await self._measure_and_evict(topic, kafka_topic, desc.partitions, quotas, 0.0, None)
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

    def _set_backlog_state(self, ts: TopicState, state: BacklogAction | None) -> None:
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

    # -- message TTL of subscriptions not loaded here -----------------------------------
    async def expire_unloaded(self) -> int:
        """Move every durable subscription of an owned topic with ``messageTTLInSeconds``
        that is not loaded here past its expired messages (Kafka group positions; what is
        individually acknowledged above the new position is kept). Returns how many
        subscriptions moved."""
        svc = self._policies()
        if svc is None or svc.cache.state is not CacheState.READY:
            return 0
        moved = 0
        admin = self._admin_client()
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
                        ranges = decode_ack_ranges(offset, metadata)
                        ahead[p] = moved_position(o, ranges, self.config.ack_metadata_max_bytes)
                ts = self._topics.get(topic)
                if ts is not None and group[len(prefix) :] in ts.subscriptions:
                    continue  # loaded meanwhile: its own dispatch expires the messages
                if ahead:
                    await asyncio.to_thread(admin.alter_group_positions, group, kafka_topic, ahead)
                    logger.info("%s: expired messages of %s skipped to %s", topic, group, ahead)
                    moved += 1
        return moved

    # -- inactive topics ---------------------------------------------------------------
    async def reap_inactive(self) -> list[TopicName]:
        """Delete the owned topics that ``inactiveTopicPolicies`` says are inactive."""
        svc = self._policies()
        if svc is None or svc.cache.state is not CacheState.READY:
            return []
        deleted: list[TopicName] = []
        admin = self._admin_client()

        def inactive_policy(policies: Policies) -> InactivePolicy | None:
            return InactivePolicy.from_policy(policies.get("inactiveTopicPolicies"))

        async for topic, kafka_topic, desc, policy in self._unloaded_owned(svc, inactive_policy):
            idle = self._idle_since.get(topic, self._started_wall)
            prefix = subscription_group(kafka_topic, "")
            ok, groups = await asyncio.to_thread(
                inactive_verdict, admin, kafka_topic, desc.partitions, policy, idle, prefix
            )
            if ok and topic not in self._topics:
                await asyncio.to_thread(delete_topic, admin, kafka_topic, groups)
                self._idle_since.pop(topic, None)
                deleted.append(topic)
        return deleted

    # -- topic compaction --------------------------------------------------------------
    def _compactor(self, kafka_topic: str) -> tuple[Compactor, asyncio.Lock]:
        compactor = self._compactors.get(kafka_topic)
        if compactor is None:
            compactor = self._compactors[kafka_topic] = Compactor(kafka_topic)
        lock = self._compaction_locks.setdefault(kafka_topic, asyncio.Lock())
        return compactor, lock

    async def compact_due(self) -> int:
        """Compact the partitions of owned topics whose bytes since the last compaction
        exceed their ``compactionThreshold`` (Pulsar's ``checkCompaction``, every
        ``compaction_check_s``). Returns how many topics were compacted."""
        svc = self._policies()
        if svc is None or svc.cache.state is not CacheState.READY:
            return 0
        admin = self._admin_client()
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
        self.compaction_sweeps += 1
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
        admin = self._admin_client()
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
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
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

    async def _compacted_view(self, ts: TopicState) -> CompactedView | None:
        """The topic's compacted view for a ``readCompacted`` subscription (None: the
        topic was never compacted)."""
        compactor, lock = self._compactor(ts.kafka_topic)
        async with lock:
            await asyncio.to_thread(compactor.view.refresh, self.transport, self._admin_client())
            return compactor.view.snapshot() if compactor.view.horizons else None

    # -- deduplication -----------------------------------------------------------------
    async def _load_dedup(self, ts: TopicState) -> None:
        dedup = Deduplicator(ts.kafka_topic, ts.num_partitions, ts.partitioned)
        await asyncio.to_thread(dedup.load, self.transport)
        if ts.dedup is None:
            ts.dedup = dedup

    async def _load_dedup_quietly(self, ts: TopicState) -> None:
        async with ts.lock:
            if ts.dedup is not None or not ts.limits.dedup_enabled:
                return
            try:
                await self._load_dedup(ts)
            except Exception:
                logger.exception("loading the deduplication state of %s failed", ts.topic)

    async def _snapshot_dedup(self, ts: TopicState, *, force: bool = False) -> None:
        dedup = ts.dedup
        if dedup is None:
            return
        period = ts.limits.dedup_snapshot_s or self.config.dedup_snapshot_s
        if not force and time.monotonic() - dedup.last_snapshot < period:
            return
        try:
            await asyncio.to_thread(dedup.snapshot, self.transport)
        except Exception:
            logger.exception("deduplication snapshot of %s failed; retried later", ts.topic)

    async def _snapshot_dedup_of(self, dedup: Deduplicator) -> None:
        try:
            await asyncio.to_thread(dedup.snapshot, self.transport)
        except Exception:
            logger.exception("final deduplication snapshot of %s failed", dedup.kafka_topic)

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = self.transport.admin()
        return self._admin

    async def _check_ownership(self) -> None:
        """Close the connections to names served elsewhere now, or unloaded meanwhile.

        Ownership is asked by the name each client used: a base topic, or one partition
        of it (Pulsar clients look each partition up on its own, and the partitions of
        one topic may be owned by different sidecars).
        """
        for ts in list(self._topics.values()):
            names = ts.names()
            for gone in set(ts.owner_claims) - names:
                del ts.owner_claims[gone]
            for name in sorted(names, key=str):
                reason = await self._moved(ts, name)
                if reason is not None:
                    await self._unload(ts, reason, name)

    def release_blocking(self, moving: Callable[[TopicName], bool]) -> None:
        """Close, now, the connections to every name ``moving`` accepts, and wait until
        they are closed (at most ``release_wait_s``); any thread but the loop's.

        The ownership member calls this while a bundle moves away, before another sidecar
        may claim it: the topics' acknowledgements are committed and their clients told to
        reconnect first, so two sidecars never serve a partition of a subscription at once
        (the newer would deliver again, with redelivery count 0, what the older delivered
        meanwhile). The periodic ownership check is only a backstop.
        """
        loop = self._loop
        if loop is None or self._closing or loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(self.release(moving), loop)
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is loop:
                return  # called on the loop itself: it runs once this returns
        try:
            future.result(timeout=self.config.release_wait_s)
        except concurrent.futures.TimeoutError:
            logger.warning(
                "topics of a moving bundle not closed within %.0fs; the move goes on",
                self.config.release_wait_s,
            )
        except Exception:
            logger.exception("closing the topics of a moving bundle failed")

    async def release(self, moving: Callable[[TopicName], bool]) -> None:
        """Close the connections to every name in use that ``moving`` accepts (cause
        UNLOADED: clients look the topic up again and find its new owner)."""
        reason = CloseReason(
            CloseCause.UNLOADED, "Topic ownership moved; reconnect to be redirected"
        )
        for ts in list(self._topics.values()):
            for name in sorted(ts.names(), key=str):
                if moving(name):
                    logger.info("%s is moving away: unloading it", name)
                    await self._unload(ts, reason, name)

    async def _moved(self, ts: TopicState, name: TopicName) -> CloseReason | None:
        """Why the connections to ``name`` must close now (None: they stay)."""
        try:
            owner = await self.ownership.owner_of(name)
        except UnavailableError as exc:
            # The lookup service is starting, recovering or stopping: an expected
            # state (no traceback); asked again at the next check.
            level = logging.DEBUG if self._closing else logging.WARNING
            logger.log(level, "owner of %s unknown (%s); keeping it", name, exc)
            return None
        except Exception:
            logger.exception("ownership lookup of %s failed; keeping it", name)
            return None
        if not owner.local:
            logger.info("%s is now owned by %s: unloading", name, owner.http_url)
            return CloseReason(
                CloseCause.UNLOADED, "Topic ownership moved; reconnect to be redirected"
            )
        if owner.claim is None:
            return None
        seen = ts.owner_claims.get(name)
        ts.owner_claims[name] = (owner.bundle, owner.claim)
        if seen is None or seen == (owner.bundle, owner.claim) or seen[0] != owner.bundle:
            return None  # first seen, the same term, or split into a bundle owned here too
        logger.info(
            "%s was unloaded (ownership of %s: term %s, now %s): closing its clients",
            name,
            owner.bundle,
            seen[1],
            owner.claim,
        )
        return CloseReason(CloseCause.UNLOADED, "Topic was unloaded; reconnect")

    async def _note_claim(self, ts: TopicState, name: TopicName) -> None:
        """Remember the ownership term ``name`` is served under when first used, so that
        an unload between now and the next check is noticed too."""
        if name not in ts.owner_claims:
            claim = await self._claim_of(name)
            if claim is not None:
                ts.owner_claims.setdefault(name, claim)

    async def _claim_of(self, topic: TopicName) -> tuple[str | None, str] | None:
        """The ownership term a topic is loaded under (None if unknown right now: the
        first ownership check records it)."""
        try:
            owner = await self.ownership.owner_of(topic)
        except Exception as exc:  # noqa: BLE001 - best effort; the periodic check retries
            logger.debug("ownership term of %s unknown: %s", topic, exc)
            return None
        if not owner.local or owner.claim is None:
            return None
        return owner.bundle, owner.claim

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

    async def _exists(self, topic: TopicName) -> bool:
        if topic.base in self._topics:
            return True
        if self._admin is None:
            self._admin = self.transport.admin()
        admin = self._admin
        return await asyncio.to_thread(admin.describe_topic, kafka_topic_of(topic.base)) is not None

    async def _auto_create(self, topic: TopicName, *, partitioned_only: bool = False) -> bool:
        """Create the missing base topic of ``topic`` if its rule allows (True: created).

        ``partitioned_only``: only a partitioned type creates now (Pulsar's partitioned
        metadata request; a non-partitioned topic is created by its first producer or
        consumer).
        """
        if self._create_topic is None:
            return False
        rule = self.auto_creation_for(topic)
        if not rule.allow:
            return False
        if partitioned_only and rule.partitions == 0:
            return True
        if topic.is_partition and rule.partitions <= topic.partition_index:
            return False  # Pulsar: a partition beyond the partitioned default is not created
        logger.info("auto-creating %s with %d partition(s)", topic.base, rule.partitions)
        await self._create_topic(topic.base, rule.partitions)
        return True

    async def prepare_metadata(self, topic: TopicName) -> None:
        """Pulsar's partitioned-metadata request on a topic that may not exist: a missing
        topic is created when its rule is the partitioned type, left to its first producer
        or consumer when non-partitioned, and refused when auto-creation is off.

        Raises:
            TopicNotFoundError: missing, and not allowed to be created (Pulsar's
                ``TopicNotFound`` with an empty message).
        """
        if await self._exists(topic):
            return
        if not await self._auto_create(topic, partitioned_only=True):
            raise TopicNotFoundError("", topic=str(topic))

    async def _topic_state(
        self, topic: TopicName, limits: TopicLimits, missing: str | None = None
    ) -> TopicState:
        base = topic.base
        ts = self._topics.get(base)
        if ts is not None:
            return ts
        loading = self._topic_loading.get(base)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[TopicState] = asyncio.get_running_loop().create_future()
        self._topic_loading[base] = future
        try:
            kafka_topic = kafka_topic_of(base)
            if self._admin is None:
                self._admin = self.transport.admin()
            admin = self._admin
            desc = await asyncio.to_thread(admin.describe_topic, kafka_topic)
            if desc is None and await self._auto_create(topic):
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
            self._topics[base] = ts
            self._update_live_keys()
            future.set_result(ts)
            return ts
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning if nobody waits
            raise
        finally:
            del self._topic_loading[base]

    def _maybe_drop(self, ts: TopicState) -> None:
        # Never while someone holds the lock: they may be about to add to this state.
        if (
            not ts.subscriptions
            and not ts.producers
            and not ts.lock.locked()
            and self._topics.get(ts.topic) is ts
        ):
            del self._topics[ts.topic]
            self._update_live_keys()
            self._idle_since[ts.topic] = time.time()
            if ts.dedup is not None:
                self._spawn(self._snapshot_dedup_of(ts.dedup), "dedup-final-snapshot")

    @contextlib.asynccontextmanager
    async def _locked(
        self, topic: TopicName, limits: TopicLimits, missing: str | None = None
    ) -> AsyncIterator[TopicState]:
        """The topic's live state, locked; retried if it was dropped while we waited.

        ``missing``: the refusal text when the topic does not exist and is not created.
        """
        while True:
            ts = await self._topic_state(topic, limits, missing)
            async with ts.lock:
                if self._topics.get(ts.topic) is not ts:
                    continue  # dropped (or unloaded) meanwhile: take the current one
                yield ts
                return

    async def _unload(
        self, ts: TopicState, reason: CloseReason, name: TopicName | None = None
    ) -> None:
        """Close the connections to a topic: all of them, or those that used ``name``.

        A subscription commits what its consumers acknowledged before they are told to
        close, so that where they reconnect (after a move, on the new owner) nothing they
        acknowledged here comes again.
        """
        if name is None and self._topics.get(ts.topic) is ts:
            del self._topics[ts.topic]
            self._update_live_keys()
        handles = [h for h in ts.producers.values() if name is None or h.producer.topic == name]
        for handle in handles:
            handle.mark_closed(reason)
            ts.producers.pop(handle.seq, None)
        if ts.dedup is not None and (handles or name is None):
            for client in list(self._clients.values()):
                await self._drain_reports(client, timeout_s=10.0)
            await self._snapshot_dedup(ts, force=True)
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
        self._maybe_drop(ts)

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
            return await self._subscribe(
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
                self._maybe_drop(ts)
            raise

    async def _subscribe(
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
        if read_compacted and not sub_type.single_active:
            raise NotAllowedError(
                "readCompacted only allowed on failover or exclusive subscriptions",
                topic=str(topic),
            )
        missing = f"Topic {topic} does not exist" if self._create_topic else None
        async with self._locked(topic, limits, missing) as ts:
            parts = _partitions_of(topic, ts.num_partitions)
            self._apply_limits(ts, limits)
            if not limits.type_enabled(sub_type):
                raise NotAllowedError(
                    f"Topic[{{{topic}}}] doesn't support {sub_type.value} sub type!",
                    topic=str(topic),
                )
            if not limits.subscribe_rate.unlimited:
                who = consumer_name or ""
                limiter = ts.subscribe_limiters.get(who)
                if limiter is None:
                    limiter = ts.subscribe_limiters[who] = RateLimiter(limits.subscribe_rate)
                if limiter.wait_s(0) > 0.0:
                    raise NotAllowedError(
                        "Subscribe limited by subscribe rate limit per consumer.",
                        topic=str(topic),
                    )
                limiter.consume(0)
            sub = ts.subscriptions.get(subscription)
            if sub is not None and not sub.attached:
                sub = None
            if sub is None and durable and limits.max_subscriptions_per_topic > 0:
                existing = await self._durable_subscriptions(ts)
                if (
                    subscription not in existing
                    and len(existing) >= limits.max_subscriptions_per_topic
                ):
                    raise NotAllowedError(
                        f"Exceed the maximum number of subscriptions of the topic: {topic.base}",
                        topic=str(topic),
                    )
            if limits.max_consumers_per_topic > 0 and any(
                len(ts.consumers_on(p)) >= limits.max_consumers_per_topic for p in parts
            ):
                raise ConsumerBusyError("Topic reached max consumers limit", topic=str(topic))
            if sub is not None and sub.consumers:
                if sub.sub_type is not sub_type:
                    raise SubscriptionBusyError(
                        "Subscription is of different type", topic=str(topic)
                    )
                if sub_type is SubscriptionType.Exclusive and any(
                    sub.consumers_on(p) for p in parts
                ):
                    raise ConsumerBusyError(
                        "Exclusive consumer is already connected", topic=str(topic)
                    )
                if limits.max_consumers_per_subscription > 0 and any(
                    len(sub.consumers_on(p)) >= limits.max_consumers_per_subscription for p in parts
                ):
                    raise ConsumerBusyError(
                        "Subscription reached max consumers limit", topic=str(topic)
                    )
            if sub is None:
                compacted = await self._compacted_view(ts) if read_compacted else None
                sub = Subscription(
                    topic=ts.topic,
                    kafka_topic=ts.kafka_topic,
                    name=subscription,
                    num_partitions=ts.num_partitions,
                    partitioned=ts.partitioned,
                    transport=self.transport,
                    config=self.config,
                    topic_limiters=ts.dispatch_limiters,
                    limits=lambda: ts.limits,
                    on_idle=lambda s: self._spawn(self._close_idle(ts, s), "close-idle-sub"),
                    durable=durable,
                    start_offsets=_start_offsets(start_message_id, ts.num_partitions),
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
                await sub.serve(parts)
            await self._note_claim(ts, topic)
            queue = receiver_queue_size or self.config.default_receiver_queue_size
            consumer = Consumer(
                sub,
                topic=topic,
                name=consumer_name or uuid.uuid4().hex[:10],
                sub_type=sub_type,
                partitions=parts,
                receiver_queue_size=max(1, min(queue, self.config.max_receiver_queue_size)),
                pull_mode=pull_mode,
                negative_ack_delay_s=(
                    self.config.default_negative_ack_delay_s
                    if negative_ack_delay_s is None
                    else negative_ack_delay_s
                ),
            )
            sub.add_consumer(consumer)
            return consumer

    async def _durable_subscriptions(self, ts: TopicState) -> set[str]:
        prefix = subscription_group(ts.kafka_topic, "")
        if self._admin is None:
            self._admin = self.transport.admin()
        groups = await asyncio.to_thread(self._admin.list_groups, prefix)
        return {g[len(prefix) :] for g in groups} | set(ts.subscriptions)

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
        async with self._locked(topic, self.read_limits(topic)) as ts:
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
        self._maybe_drop(ts)

    async def unsubscribe(self, consumer: Consumer) -> None:
        """Delete the consumer's subscription (its Kafka group too); closes the consumer.

        Raises:
            ConsumerBusyError: other consumers are still attached (as Pulsar refuses).
        """
        sub = consumer.subscription
        ts = self._topics.get(sub.topic)
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
            if self._admin is None:
                self._admin = self.transport.admin()
            await asyncio.to_thread(self._admin.delete_group, sub.group_id)
        logger.info("subscription %s deleted", sub.label)
        self._maybe_drop(ts)

    async def _close_idle(self, ts: TopicState, sub: Subscription) -> None:
        async with ts.lock:
            if sub.consumers or ts.subscriptions.get(sub.name) is not sub:
                return
            del ts.subscriptions[sub.name]
            # Under the lock: a consumer arriving now loads the position after this commit.
            await sub.close()
        self._maybe_drop(ts)

    # -- producers ---------------------------------------------------------------------
    async def create_producer(
        self, topic: TopicName, config: ProducerConfig | None = None
    ) -> ProducerHandle:
        """Open a producer on a topic served here (checks ``maxProducerPerTopic``).

        Raises:
            TopicNotFoundError, CacheStateError, UnavailableError (shutting down),
            ProducerBusyError, ConfigurationError.
        """
        if self._closing:
            raise UnavailableError("the sidecar is shutting down; retry on another broker")
        limits = self.read_limits(topic)
        with self._drop_if_unused(topic):
            return await self._create_producer(topic, config, limits)

    async def _create_producer(
        self, topic: TopicName, config: ProducerConfig | None, limits: TopicLimits
    ) -> ProducerHandle:
        # Pulsar's producer refusal (ServerCnx: the topic future completes empty).
        missing = "Topic Not Found." if self._create_topic else None
        async with self._locked(topic, limits, missing) as ts:
            parts = _partitions_of(topic, ts.num_partitions)
            self._apply_limits(ts, limits)
            if limits.max_producers_per_topic > 0 and any(
                len(ts.producers_on(p)) >= limits.max_producers_per_topic for p in parts
            ):
                raise ProducerBusyError("Topic reached max producers limit", topic=str(topic))
            if limits.dedup_enabled and ts.dedup is None:
                await self._load_dedup(ts)
            if limits.backlog.active or ts.backlog_state is not None:
                await self.check_backlog(ts)
                if ts.backlog_state is BacklogAction.producer_exception:
                    raise ProducerBlockedQuotaExceededException(BACKLOG_EXCEEDED, topic=str(topic))
                if ts.backlog_state is not None:
                    raise ProducerBlockedQuotaExceededError(BACKLOG_EXCEEDED, topic=str(topic))
            await self._note_claim(ts, topic)
            linger = None if config is None else config.linger_ms
            if linger is None:
                linger = self.config.producer_linger_ms
            producer = PartitionedProducer(
                await self._shared_client(linger), topic, config, num_partitions=ts.num_partitions
            )
            handle = ProducerHandle(
                ts,
                producer,
                parts,
                self._reports_queued,
                hold_timeout_s=self.config.backlog_hold_timeout_s,
            )
            ts.producers[handle.seq] = handle
            logger.info("producer %d opened on %s", handle.seq, topic)
            return handle

    def close_producer(self, handle: ProducerHandle) -> None:
        """The client went away: forget the producer (queued messages still complete)."""
        self._close_producer(handle.topic_state, handle, None)

    def _close_producer(
        self, ts: TopicState, handle: ProducerHandle, reason: CloseReason | None
    ) -> None:
        if reason is not None:
            logger.info("closing producer %d on %s: %s", handle.seq, ts.topic, reason.reason)
        handle.mark_closed(reason)
        ts.producers.pop(handle.seq, None)
        self._maybe_drop(ts)


def _newest(items: list[_T], excess: int) -> list[_T]:
    """The ``excess`` newest of ``items`` (which are oldest first)."""
    if excess <= 0:
        return []
    return items[-excess:]
