"""One fence holder at a time: a Kafka consumer group elects who writes a table.

Every process that can write a change-events topic joins one consumer group on a
one-partition election topic. Kafka's group coordinator assigns that partition to exactly
one live member: that member is the *fence holder*; it writes through its own
:class:`~sync.table._fenced_writer.FencedWriter` (with group commit), so the writer's fence
stays with it instead of moving on every write. The others forward their writes to it. Each member
joins with ``client.id = <prefix><address>``, so anyone can find the holder's address by
describing the group (the member whose assignment holds partition 0).

Election is an optimisation, never the safety mechanism: the transactional fence still
serializes every write, so a forwarding member that cannot reach the holder (it died, the
group is rebalancing) writes itself, and a stale holder's commits are refused by Kafka.
When the holder dies its session expires (``session_timeout_ms``) and the coordinator gives
the partition to another member: the liveness bound of the hand-over.

States: ``NEW → RUNNING → CLOSED`` (or ``FAILED`` if the group cannot be joined).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sync._constants import (
    WRITER_ELECTION_CLIENT_PREFIX,
    WRITER_ELECTION_GROUP_PREFIX,
    WRITER_ELECTION_TOPIC,
)
from sync._errors import ConfigurationError, PolicySyncError, StateTransitionError, TransportError
from sync._lifecycle import Lifecycle
from sync.transport import Admin, GroupConsumer, TopicSpec, Transport

logger = logging.getLogger(__name__)

__all__ = ["FenceHolder", "HolderConfig", "HolderState", "elected_holder"]


class HolderState(enum.Enum):
    NEW = "NEW"
    RUNNING = "RUNNING"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


_ALLOWED: dict[HolderState, frozenset[HolderState]] = {
    HolderState.NEW: frozenset({HolderState.RUNNING, HolderState.CLOSED, HolderState.FAILED}),
    HolderState.RUNNING: frozenset({HolderState.CLOSED, HolderState.FAILED}),
    HolderState.FAILED: frozenset({HolderState.CLOSED}),
    HolderState.CLOSED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class HolderConfig:
    """Election of the fence holder of ``table`` (a change-events topic)."""

    table: str
    #: Where this member accepts forwarded writes (e.g. its HTTP base URL).
    address: str
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int | None = None
    poll_s: float = 0.2
    #: How long another member's view of who holds the fence is trusted.
    refresh_s: float = 1.0
    election_topic: str = WRITER_ELECTION_TOPIC
    replication_factor: int = -1

    def __post_init__(self) -> None:
        if not self.address or "|" in self.address:
            raise ConfigurationError(f"holder address {self.address!r} is empty or has '|'")
        if self.session_timeout_ms < 500:
            raise ConfigurationError("session_timeout_ms must be at least 500")

    @property
    def group_id(self) -> str:
        return WRITER_ELECTION_GROUP_PREFIX + self.table


def elected_holder(
    admin: Admin,
    table: str,
    election_topic: str = WRITER_ELECTION_TOPIC,
    timeout_s: float = 5.0,
) -> str | None:
    """The address of the member elected to write ``table`` as the group coordinator
    tells it, or None if nobody holds the election partition now (no member, or a
    rebalance under way). Any process can ask: ``policyctl`` sends its writes there.

    Raises:
        TransportError: the coordinator did not answer.
    """
    desc = admin.describe_group(WRITER_ELECTION_GROUP_PREFIX + table, timeout_s)
    for member in desc.members:
        if 0 in member.assignment.get(election_topic, ()) and member.client_id.startswith(
            WRITER_ELECTION_CLIENT_PREFIX
        ):
            return member.client_id[len(WRITER_ELECTION_CLIENT_PREFIX) :]
    return None


class FenceHolder:
    """This process's membership in the election of one table's fence holder."""

    def __init__(self, transport: Transport, config: HolderConfig) -> None:
        self.config = config
        self._transport = transport
        self._life = Lifecycle(
            f"fence holder election of {config.table}",
            HolderState.NEW,
            _ALLOWED,
            terminal=HolderState.CLOSED,
            error=StateTransitionError,
            log=logger,
        )
        self._holding = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: GroupConsumer | None = None
        self._known: tuple[float, str | None] = (0.0, None)
        #: One admin client for the member's lifetime (a Kafka one runs its group calls in
        #: a worker process: creating one per question would start a process each time).
        self._admin: Admin | None = None
        self.failure: BaseException | None = None
        #: Times this member became the holder (tests and metrics).
        self.terms = 0

    @property
    def state(self) -> HolderState:
        return self._life.state

    def _transition(self, new: HolderState) -> bool:
        return self._life.try_move(new)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> FenceHolder:
        """Join the election (returns at once; membership follows on a thread)."""
        if not self._transition(HolderState.RUNNING):
            raise StateTransitionError(f"fence holder election is {self.state.value}")
        self._admin = self._transport.admin()  # the topic is created on the thread
        self._thread = threading.Thread(
            target=self._run, name=f"holder-{self.config.table}", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Leave the group (the partition moves to another member at once)."""
        if not self._transition(HolderState.CLOSED):
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._holding = False
        admin, self._admin = self._admin, None
        close_admin = getattr(admin, "close", None)
        if close_admin is not None:
            close_admin()

    # -- who holds the fence -----------------------------------------------------------
    @property
    def holding(self) -> bool:
        """True while this member is the elected fence holder."""
        return self._holding and self._life.state is HolderState.RUNNING

    def holder(self) -> str | None:
        """The address of the current holder (maybe this member's), or None if unknown.

        Never blocks: the member thread asks the group coordinator every ``refresh_s``
        (at once after :meth:`forget`).
        """
        if self.holding:
            return self.config.address
        return self._known[1]

    def forget(self) -> None:
        """Ask the group again now (the holder we knew did not answer)."""
        self._known = (0.0, None)

    def _describe(self) -> str | None:
        """The holder's address as the group coordinator tells it (None: nobody holds
        partition 0 now, e.g. a rebalance is under way). If the coordinator does not
        answer, the holder known before is kept: on a loaded machine a describe can time
        out while the holder is alive, and forgetting it would make every member write
        itself, fencing the others."""
        if self._admin is None:
            self._admin = self._transport.admin()
        try:
            return elected_holder(self._admin, self.config.table, self.config.election_topic)
        except PolicySyncError as exc:
            logger.info("describing the writer election group failed: %s", exc)
            return self._known[1]

    # -- the member thread ---------------------------------------------------------------
    def _ensure_topic(self) -> None:
        """Create the election topic, retrying with back-off while Kafka refuses: start-up
        must not end the sidecar whatever Kafka does (issue 11: a just-created topic's
        configs were still unknown to the broker asked, and the process exited)."""
        delay = 0.1
        while True:
            try:
                admin = self._admin or self._transport.admin()
                admin.ensure_topic(
                    TopicSpec(
                        self.config.election_topic,
                        1,
                        replication_factor=self.config.replication_factor,
                    )
                )
                return
            except TransportError as exc:
                logger.warning("election topic not ready (%s); retrying in %.1fs", exc, delay)
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, 5.0)

    def _run(self) -> None:
        try:
            self._ensure_topic()
            if self._stop.is_set():
                return
            consumer = self._transport.group_consumer(
                self.config.group_id,
                client_id=WRITER_ELECTION_CLIENT_PREFIX + self.config.address,
                session_timeout_ms=self.config.session_timeout_ms,
                heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            )
            self._consumer = consumer
            consumer.subscribe(self.config.election_topic, self)
            while not self._stop.is_set():
                consumer.consume(10, self.config.poll_s)  # nothing is ever written there
                if not self._holding and (
                    time.monotonic() - self._known[0] >= self.config.refresh_s
                ):
                    self._known = (time.monotonic(), self._describe())
            consumer.close()
            admin, self._admin = self._admin, None
            close = getattr(admin, "close", None)
            if close is not None:
                close()
        except BaseException as exc:
            self.failure = exc
            self._holding = False
            if self._transition(HolderState.FAILED):
                logger.error("fence holder election of %s failed: %s", self.config.table, exc)
        finally:
            self._consumer = None

    # RebalanceListener (called from inside consume on the member thread)
    def on_assign(self, partitions: Sequence[int]) -> None:
        if 0 in partitions and not self._holding:
            self._holding = True
            self.terms += 1
            logger.info("%s: now the fence holder of %s", self.config.address, self.config.table)

    def on_revoke(self, partitions: Sequence[int]) -> None:
        if 0 in partitions and self._holding:
            self._holding = False
            logger.info(
                "%s: no longer the fence holder of %s", self.config.address, self.config.table
            )

    def on_lost(self, partitions: Sequence[int]) -> None:
        self.on_revoke(partitions)
