"""The publish path: a producer connection's handle (Pulsar's ``Producer``) and the
shared Kafka producers it writes through (one per ``linger.ms``).

Sends are checked here against the topic's live limits (``maxMessageSize``, delayed
delivery, deduplication, ``publishRate`` accounting, backlog-quota holds).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import Callable

from sync._constants import HEADER_SEQUENCE
from sync._errors import DuplicateInFlightError, NotAllowedError, PolicySyncError
from sync.transport import Header, Transport

from ._consumer import CloseReason
from ._dedup import DUPLICATE_IN_FLIGHT, Deduplicator, Verdict
from ._delayed import HEADER_DELIVER_AT, max_delay_refusal
from ._producer import (
    MessageId,
    OutboundMessage,
    PartitionedProducer,
    ProducerClient,
    SendCallback,
    origin_headers,
)
from ._producer_client import IDEMPOTENT_WINDOW
from ._ratelimit import RateLimiter
from ._topic_state import TopicState
from ._types import ProducerState, transition

logger = logging.getLogger(__name__)

__all__ = ["ProducerHandle", "ProducerPool"]

_SEQ = itertools.count(1)


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
        #: The topic's epoch as this producer holds it (Pulsar's
        #: ``PRODUCER_SUCCESS.topic_epoch``; None: no exclusive producer held the topic).
        self.topic_epoch: int | None = None
        self._closed = asyncio.Event()
        name = producer.config.producer_name
        #: The producer-name header every message of a named producer carries (encoded once).
        self._origin: Header | None = None if not name else origin_headers(name, 0)[0]

    @property
    def closed(self) -> bool:
        """True once closed by the client or evicted."""
        return self.state is ProducerState.CLOSED

    @property
    def last_sequence_id(self) -> int:
        """The last sequence id persisted for this producer's name while deduplication is
        on (-1 otherwise, or for a name never seen): where a producer resumes."""
        ts = self.topic_state
        name = self.producer.config.producer_name
        if not name or ts.dedup is None or not ts.limits.dedup_enabled:
            return -1
        return ts.dedup.last_persisted(name)

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
        count: int = 1,
        overhead: int = 0,
    ) -> None:
        """Route and queue one message under the topic's live ``maxMessageSize``.

        ``callback`` runs on the engine's event loop once Kafka acknowledged the message
        (or refused it). With ``deduplicationEnabled``, a named producer and a
        ``sequence_id``, a duplicate is answered at once with the message id of the
        producer's last persisted message and not written (see ``_dedup``).

        ``deliver_at_ms`` (epoch ms) asks for delayed delivery (see ``_delayed``);
        ``headers`` are reserved (``__pulsar.``) headers the message carries as given.
        ``count``: the messages the record holds (a stored entry: a client's whole batch,
        whose ``sequence_id`` is the batch's highest), as ``publishRate`` counts them;
        ``overhead``: bytes of ``payload`` that ``maxMessageSize`` does not count (a stored
        entry's metadata).

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
        limit = ts.limits.max_message_size + overhead
        if dedup is not None and name and sequence_id is not None:
            if len(payload) > limit:
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
            max_message_size=limit,
            reserved_headers=reserved,
        )
        limiter = ts.publish_limiters[partition] if ts.publish_limiters else None
        if limiter is not None and not limiter.spec.unlimited:
            limiter.wait_s(0)  # refill first
            limiter.consume(len(payload), count)
        ts.published_msgs += count
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


class ProducerPool:
    """The shared Kafka producers, one per ``linger.ms`` (see ProducerConfig.linger_ms).

    Their delivery reports are served here, on the loop, rather than by a thread of the
    client: a report thread takes the GIL once per message and fights the loop for it,
    which cost more than half of the producing throughput. Callbacks (the WebSocket acks)
    then run on the loop and need no hand-off.
    """

    def __init__(self, transport: Transport, report_poll_interval_s: Callable[[], float]) -> None:
        self.transport = transport
        self.report_poll_interval_s = report_poll_interval_s
        self._clients: dict[int, ProducerClient] = {}
        self._reports_due = asyncio.Event()
        self._reports_task: asyncio.Task[None] | None = None

    def reports_queued(self) -> None:
        """A send was queued: serve delivery reports until none is in flight."""
        if not self._reports_due.is_set():
            self._reports_due.set()

    async def _serve_reports(self) -> None:
        """Poll the shared producers while sends are in flight; sleep while none are."""
        due = self._reports_due
        interval = self.report_poll_interval_s()
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

    async def client(self, linger_ms: int) -> ProducerClient:
        """The shared Kafka producer whose ``linger.ms`` is ``linger_ms`` (made on first use)."""
        client = self._clients.get(linger_ms)
        if client is None:
            client = await asyncio.to_thread(
                ProducerClient,
                self.transport,
                linger_ms=linger_ms,
                serve_reports=False,
                hold_at=IDEMPOTENT_WINDOW,
            )
            if self._clients.setdefault(linger_ms, client) is not client:  # made meanwhile
                await asyncio.to_thread(client.close)
                client = self._clients[linger_ms]
        if self._reports_task is None:
            self._reports_task = asyncio.create_task(self._serve_reports(), name="producer-reports")
        return client

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Wait (at most ``timeout_s`` per client) for the reports of every queued send."""
        for client in list(self._clients.values()):
            await _drain_reports(client, timeout_s)

    async def close(self) -> None:
        """Drain and close every shared producer."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await _drain_reports(client, timeout_s=10.0)
        if self._reports_task is not None:
            self._reports_task.cancel()
            self._reports_task = None
        for client in clients:
            await asyncio.to_thread(client.close)


async def _drain_reports(client: ProducerClient, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while client.in_flight and time.monotonic() < deadline:
        client.poll(0)
        await asyncio.sleep(0.005)
