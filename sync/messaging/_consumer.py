"""One consumer connection as the subscription engine sees it.

Flow control follows Pulsar's WebSocket consumer: in the default (push) mode a consumer
may hold ``receiverQueueSize`` delivered-but-unacknowledged messages; with
``pullMode=true`` it receives exactly the permits it sends. Independently, the topic's
``maxUnackedMessagesOnConsumer`` blocks a consumer that holds that many unacknowledged
messages until it is down to half of them (Pulsar's hysteresis).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sync.naming._names import TopicName

from ._cursor import Entry
from ._message_id import MessageId
from ._types import ConsumerState, SubscriptionType, transition

if TYPE_CHECKING:
    from ._subscription import Subscription

logger = logging.getLogger(__name__)

__all__ = ["CloseReason", "Consumer", "Delivery"]

_SEQ = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message handed to a consumer (``redelivery_count`` as of this delivery)."""

    message_id: MessageId
    entry: Entry
    redelivery_count: int
    #: The entry's batch indexes acknowledged as of this delivery (bit ``i``: index
    #: ``i``): not sent again (Pulsar's ``CommandMessage.ack_set``).
    acked_bits: int = 0

    @property
    def messages(self) -> int:
        """The messages this delivery carries (those of its entry not acknowledged)."""
        return self.entry.count - self.acked_bits.bit_count()


class CloseCause(enum.Enum):
    """Why a connection ends, independent of any protocol."""

    NORMAL = "normal"  # the client's own request (e.g. unsubscribe)
    SHUTDOWN = "shutdown"  # the sidecar is shutting down
    POLICY = "policy"  # a policy change forbids this connection now
    UNLOADED = "unloaded"  # the topic moved to another sidecar: reconnect (and be redirected)


@dataclass(frozen=True, slots=True)
class CloseReason:
    """Why the engine closed a consumer or producer: a protocol-neutral cause and a text.

    Each front end maps the cause to its own code in one table (WebSocket close codes,
    the binary protocol's CLOSE_PRODUCER/CLOSE_CONSUMER).
    """

    cause: CloseCause
    reason: str


class Consumer:
    """A consumer attached to a :class:`Subscription` (create it with the engine)."""

    def __init__(
        self,
        subscription: Subscription,
        *,
        topic: TopicName,
        name: str,
        sub_type: SubscriptionType,
        partitions: frozenset[int],
        receiver_queue_size: int,
        pull_mode: bool,
        negative_ack_delay_s: float,
    ) -> None:
        self.seq = next(_SEQ)
        self.subscription = subscription
        #: The topic as the client named it: the base topic or one of its partitions
        #: (ownership is asked by this name).
        self.topic = topic
        self.name = name
        self.sub_type = sub_type
        #: Kafka partitions this consumer receives from.
        self.partitions = partitions
        self.receiver_queue_size = receiver_queue_size
        self.pull_mode = pull_mode
        self.permits = 0 if pull_mode else receiver_queue_size
        self.negative_ack_delay_s = negative_ack_delay_s
        #: Delivered to this consumer and not acknowledged by it, by (partition, offset).
        self.delivered: dict[tuple[int, int], Entry] = {}
        #: Per held key, the messages :attr:`held_messages` was charged for it.
        self._charged: dict[tuple[int, int], int] = {}
        #: The messages those entries hold (a stored entry holds its batch): what
        #: ``receiverQueueSize`` and ``maxUnacked*`` count.
        self.held_messages = 0
        #: Negatively acknowledged, waiting for their redelivery delay.
        self.nack_pending: dict[tuple[int, int], Entry] = {}
        self.state = ConsumerState.ACTIVE
        self.close_reason: CloseReason | None = None
        self.delivered_total = 0
        self.acked_total = 0
        self._outbox: deque[Delivery] = deque()
        self._signal = asyncio.Event()
        #: Set when this consumer became or stopped being its partitions' active consumer
        #: (Exclusive/Failover), and when it closes: front ends that announce it (the binary
        #: protocol's ACTIVE_CONSUMER_CHANGE) clear it, read :meth:`is_active` and wait.
        self.active_changed = asyncio.Event()

    # -- flow control ------------------------------------------------------------------
    def can_receive(self) -> bool:
        """Whether dispatch may hand this consumer one more message now."""
        if self.state is not ConsumerState.ACTIVE:
            return False
        if self.pull_mode:
            return self.permits > 0
        return self.held_messages < self.receiver_queue_size

    def hold(self, key: tuple[int, int], entry: Entry) -> None:
        """``entry`` (at ``(partition, offset)``) is out with this consumer: it holds the
        entry's unacknowledged messages (what it was charged is kept per key, so a copy
        whose indexes were acknowledged while another consumer held it is given back at
        the charge, never leaking into :attr:`held_messages`)."""
        self.held_messages -= self._charged.pop(key, 0)
        self.delivered[key] = entry
        self._charged[key] = entry.unacked
        self.held_messages += entry.unacked

    def unhold(self, key: tuple[int, int]) -> Entry | None:
        """The entry at ``key`` is back (acked or returned): it, or None if not held."""
        entry = self.delivered.pop(key, None)
        self.held_messages -= self._charged.pop(key, 0)
        return entry

    def indexes_acked(self, key: tuple[int, int], entry: Entry, count: int) -> None:
        """``count`` more messages of ``entry`` (at ``key``) were acknowledged by batch
        index: if it is out with this consumer, it holds that many fewer."""
        if self.delivered.get(key) is entry:
            charged = self._charged.get(key, 0)
            less = min(count, charged)
            self._charged[key] = charged - less
            self.held_messages -= less

    def unhold_all(self) -> list[Entry]:
        """Every entry this consumer holds, given back."""
        held = list(self.delivered.values())
        self.delivered.clear()
        self._charged.clear()
        self.held_messages = 0
        return held

    def update_blocked(self, max_unacked: int) -> bool:
        """Apply ``maxUnackedMessagesOnConsumer``; True if the consumer was unblocked."""
        held = self.held_messages
        if self.state is ConsumerState.ACTIVE and max_unacked > 0 and held >= max_unacked:
            self.state = transition(self.state, ConsumerState.BLOCKED, f"consumer {self.name}")
            logger.info(
                "consumer %s on %s blocked: %d unacked messages (maxUnackedMessagesOnConsumer %d)",
                self.name,
                self.subscription.label,
                held,
                max_unacked,
            )
        elif self.state is ConsumerState.BLOCKED and (
            max_unacked <= 0 or held == 0 or held * 2 < max_unacked
        ):
            self.state = transition(self.state, ConsumerState.ACTIVE, f"consumer {self.name}")
            return True
        return False

    # -- called by the subscription ------------------------------------------------------
    def push(self, delivery: Delivery) -> None:
        """Queue a delivery for the connection to send."""
        self._outbox.append(delivery)
        self.delivered_total += 1
        if self.pull_mode:
            # A stored entry takes the permits of its messages not acknowledged yet, and
            # goes out whole even when it overdraws them (Pulsar dispatches at least one
            # entry the same way, and subtracts its acknowledged indexes).
            self.permits -= delivery.messages
        self._signal.set()

    def mark_closed(self, reason: CloseReason | None) -> None:
        """Enter CLOSED (idempotent) and wake the connection."""
        if self.state is ConsumerState.CLOSED:
            return
        self.state = transition(self.state, ConsumerState.CLOSED, f"consumer {self.name}")
        self.close_reason = reason
        self._signal.set()
        self.active_changed.set()

    # -- called by the connection --------------------------------------------------------
    def is_active(self) -> bool:
        """Exclusive/Failover: whether the subscription dispatches to this consumer now (on
        any of its partitions)."""
        sub = self.subscription
        return any(sub.active_consumer(p) is self for p in self.partitions)

    @property
    def closed(self) -> bool:
        """True once the consumer left (or was evicted)."""
        return self.state is ConsumerState.CLOSED

    async def receive_batch(self, max_messages: int = 1_000) -> list[Delivery]:
        """Wait for deliveries; returns up to ``max_messages`` of them, or [] once closed."""
        while not self._outbox:
            if self.closed:
                return []
            self._signal.clear()
            await self._signal.wait()
        if self.closed:
            return []
        out: list[Delivery] = []
        box = self._outbox
        while box and len(out) < max_messages:
            out.append(box.popleft())
        return out

    def ack(self, message_id: MessageId, unacked: int | None = None) -> None:
        """Acknowledge one message (individually, as Pulsar's WebSocket consumer does).

        ``unacked``: a batch-index acknowledgement of the stored entry at ``message_id``,
        Pulsar's ack set: the bit set of its indexes the client still has unacknowledged
        (bit ``i``: index ``i``); the others are acknowledged. None: the whole entry.
        """
        self.subscription.ack(self, message_id, unacked)

    def nack(self, message_id: MessageId) -> None:
        """Ask for a redelivery of one message after the negative-ack delay."""
        self.subscription.nack(self, message_id)

    def add_permits(self, count: int) -> None:
        """Pull mode: allow ``count`` more messages."""
        if count > 0 and self.pull_mode:
            self.permits += count
            self.subscription.dispatch()

    async def close(self) -> None:
        """Leave the subscription; unacknowledged messages go to other consumers."""
        await self.subscription.remove_consumer(self)

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, {self.sub_type.value}, {self.state.value})"
