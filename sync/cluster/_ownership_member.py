"""Bundle ownership on Kafka: group membership for liveness, group assignment for the right
to decide, transactions for fencing, a compacted topic for the truth.

How it works
------------
* Every sidecar of a cluster is a member of the consumer group
  ``policy-sync.ownership.<cluster>`` subscribed to the *slots* topic
  ``__policy_sync.slots.<cluster>`` (``P`` partitions, default 64). Being a member *is*
  being alive: a sidecar that stops heartbeating for ``session.timeout.ms`` is removed by
  the group coordinator.
* A bundle's slot is Kafka's default partition of its name (``<tenant>/<ns>/<range>``)
  among the ``P`` slots. The member assigned slot ``s`` owns every bundle in ``s``: it is
  the only one that writes their records. The assignor is **cooperative-sticky**: a
  membership change moves only the slots that must move (a dead member's; a fair share to a
  new member), so bundles of everyone else never blink, and a moving slot is revoked from
  its old owner (which writes ``Releasing`` while its generation is still valid) before the
  new owner gets it. The eager protocol would revoke every slot on every change and make
  every bundle "being unloaded" each time any sidecar joins or leaves.
* Writes go to the compacted ownership topic ``__policy_sync.ownership.<cluster>`` (key =
  bundle) in a Kafka transaction that also commits the slots' consumer offsets with
  ``send_offsets_to_transaction(offsets, group metadata)``. The group coordinator checks the
  member id and generation: a zombie (session expired, or its slots moved) has its
  transaction refused and aborted, so read_committed readers never see its record.
* A new owner starts deciding for a slot only after (1) ``committed()`` returned, which
  with read_committed waits until any transaction of the previous owner that commits
  offsets of that slot has committed or aborted (KIP-447), and (2) its view of the
  ownership topic has caught up with the end offsets. So its first record is appended after
  everything the previous owner committed: the last record per key is always the truth.
* A moving bundle passes through ``Releasing``: the old owner writes it on revoke; for a
  dead owner (which cannot), the slot's new owner writes it first. The new owner claims
  the bundle only once it has been ``Releasing`` for ``handover_s`` (0.25 s), so a sidecar
  whose view lags by less never names the old owner while another names the new one.
* Lookups that find a bundle unowned (or owned by a dead incarnation) produce an
  ``acquire`` request to the bundle's slot partition; its owner consumes it and claims the
  bundle in the same fenced transaction that commits the request's offset.
* The owner of slot 0 also publishes the group's membership (``describe_consumer_groups``)
  to the registry and tombstones registrations (and wiped perms) of expired brokers,
  fenced the same way; it also forgets whole clusters whose every broker died
  (:mod:`sync.cluster._ownership_housekeeping`).
* Every transaction that writes also commits offsets of slots we hold (a slot never
  committed is committed at 0, which changes nothing), so *every* write is fenced;
  :meth:`sync.cluster._ownership_transactions.SlotTransactions.commit` refuses a write
  without them.

Load spread: the assignor balances slot counts over live members, and bundles hash
uniformly onto slots, so bundles spread evenly by count; an unloaded bundle is claimed
again by its slot's owner (placement follows the slot, not per-bundle load reports).

If an owner dies with a transaction open (they last milliseconds), the new owner of those
slots waits until Kafka aborts it: the transaction timeout plus the broker's abort sweep
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s by default; our
brokers run it every second) -- unless the dead broker restarts first (its
``init_transactions`` aborts it at once). So the transaction timeout is tied to the
liveness timeout (half of it, at least librdkafka's minimum of 1 s): the dead owner's
transaction is gone about when the group notices it died, and failover stays within 2x the
liveness timeout given a sweep no longer than half of it (issue 11: 14.3 s with a 2 s
liveness timeout and a fixed 5 s transaction timeout). Other slots are not held up (each
slot activates on its own).

A member that fails (e.g. fenced by another process using the same broker id) leaves the
group without writing, so its slots move; the HTTP supervisor starts a new incarnation.

Who does what: this module is the member (group membership, activation, the step loop);
what it writes is decided by the pure functions of ``_ownership_decisions`` and committed
by ``_ownership_transactions``; the slot-0 jobs are in ``_ownership_housekeeping``,
requests from lookups go out through ``_ownership_requests``, every sidecar reads the
ownership topic through ``_ownership_table``, and settings, names and record shapes are in
``_ownership_model`` (all in :mod:`sync.cluster`).

State of the member (checked in one place, :class:`sync._lifecycle.Lifecycle`)::

    NEW ──start()──▶ JOINING ──first assignment handled──▶ ACTIVE ──close()──▶ CLOSED
                        └──────────── fatal error ──────────▶ FAILED ──close()──▶ CLOSED

Why this file is past 600 lines: about 75 of them are this description of the design;
the code (~540 lines) is the member alone (membership, activation of slots, the step loop
and the assignment callbacks), which share its per-slot state and run on its one thread.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from sync._constants import (
    OWNERSHIP_MEMBER_CLIENT_PREFIX,
    OWNERSHIP_SLOTS_CREATE_CONFIG,
)
from sync._errors import (
    GroupFencedError,
    PolicySyncError,
    ProducerFencedError,
    StateTransitionError,
    TransportError,
)
from sync._lifecycle import Lifecycle
from sync.transport import (
    OFFSET_INVALID,
    GroupConsumer,
    Message,
    TopicSpec,
    Transport,
)

from ._metadata import MetadataStore
from ._ownership_decisions import (
    Decider,
    claim_writes,
    decide_request,
    handover_wait_ms,
    in_layout,
    names_another_owner,
    plan_takeover,
    release_writes,
)
from ._ownership_housekeeping import Housekeeping
from ._ownership_model import (
    MEMBER_MOVES,
    MemberState,
    OwnershipConfig,
    Request,
    RequestOp,
    Write,
    group_id,
    slot_of,
    slots_topic,
)
from ._ownership_requests import OwnershipRequests, read_request
from ._ownership_table import OwnershipTable
from ._ownership_transactions import SlotTransactions
from ._records import BundleState, OwnershipRecord

logger = logging.getLogger(__name__)

__all__ = ["RENEWAL_WINDOW_S", "OwnershipMember"]


#: A fenced ownership producer renewed again within this many seconds waits the step's
#: back-off first (see ``OwnershipMember._renew_producer``).
RENEWAL_WINDOW_S = 30.0


class OwnershipMember:
    """This sidecar as a member of its cluster's ownership group."""

    def __init__(
        self,
        transport: Transport,
        config: OwnershipConfig,
        *,
        cluster: str,
        broker_id: str,
        incarnation: str,
        table: OwnershipTable,
        store: MetadataStore,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.broker_id = broker_id
        self.incarnation = incarnation
        self.table = table
        self.store = store
        self._transport = transport
        self._slots_topic = slots_topic(cluster)
        self._group = group_id(cluster)
        self._client_id = f"{OWNERSHIP_MEMBER_CLIENT_PREFIX}{incarnation}"
        self._life = Lifecycle(
            f"ownership member {broker_id} ({cluster})",
            MemberState.NEW,
            MEMBER_MOVES,
            terminal=MemberState.CLOSED,
            error=StateTransitionError,
            log=logger,
        )
        self._failure: BaseException | None = None
        self._stop = threading.Event()
        self._graceful = True
        self._joined = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: GroupConsumer | None = None
        self._requests = OwnershipRequests(
            transport, cluster=cluster, slots=config.slots, broker_id=broker_id
        )
        self._tx = SlotTransactions(
            transport, config, cluster=cluster, broker_id=broker_id, table=table
        )
        #: Slots whose bundles we decide for; slots assigned but not yet activated.
        self.active: set[int] = set()
        self._pending: set[int] = set()
        #: Slots being revoked right now: their bundles are not served here any more.
        self._leaving: frozenset[int] = frozenset()
        #: Slots being taken over right now: their bundles are served as soon as claimed.
        self._activating: frozenset[int] = frozenset()
        #: Told, before a revoke returns (so before another member can be given the
        #: slots), which bundles stop being ours: the messaging engine closes their topics.
        self.on_release: Callable[[Callable[[str], bool]], None] | None = None
        self._last_reconcile = time.monotonic()
        self.generation = -1
        #: The registry jobs of the slot-0 owner.
        self.housekeeping = Housekeeping(
            config,
            cluster=cluster,
            broker_id=broker_id,
            store=store,
            transport=transport,
            commit=lambda writes: self._commit(writes, self._tx.fence([0])),
        )
        #: Counters for tests and metrics.
        self.claims = 0
        self.releases = 0
        self.fenced = 0
        self.requests_handled = 0
        self.step_failures = 0
        self.producer_renewals = 0
        self._renewed_at = -RENEWAL_WINDOW_S
        self._retry_delay = config.poll_s

    # -- lifecycle -------------------------------------------------------------------
    @property
    def state(self) -> MemberState:
        """The member's lifecycle state."""
        return self._life.state

    @property
    def failure(self) -> BaseException | None:
        """Why the member FAILED, if it did."""
        return self._failure

    def _transition(self, new: MemberState) -> bool:
        return self._life.move(new)

    def topics(self) -> list[TopicSpec]:
        """The topics this member needs (the slots topic; the table view makes its own)."""
        return [
            TopicSpec(
                self._slots_topic,
                self.config.slots,
                config=OWNERSHIP_SLOTS_CREATE_CONFIG,
                replication_factor=self.config.replication_factor,
            )
        ]

    def start(self) -> None:
        """Join the group in a background thread (returns at once)."""
        admin = self.housekeeping.open_admin()
        for spec in self.topics():
            admin.ensure_topic(spec, self.config.timeout_s)
        self._requests.open()
        self._transition(MemberState.JOINING)
        self._thread = threading.Thread(
            target=self._run, name=f"ownership-{self.broker_id}", daemon=True
        )
        self._thread.start()

    def wait_joined(self, timeout_s: float) -> bool:
        """True once the first assignment was handled (or the member stopped)."""
        return self._joined.wait(timeout_s)

    def close(self, *, graceful: bool = True) -> None:
        """Leave the group. Graceful: release owned bundles first (Releasing records)."""
        if not self._transition(MemberState.CLOSED):
            return
        self._graceful = graceful
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.config.timeout_s)
        self._requests.close()
        self.housekeeping.close_admin()

    def request(self, op: RequestOp, bundle: str) -> None:
        """Ask the owner of ``bundle``'s slot to act on it (any thread, non-blocking)."""
        self._requests.request(op, bundle)

    # -- the member thread -------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._consumer = self._transport.group_consumer(
                self._group,
                client_id=self._client_id,
                session_timeout_ms=self.config.session_timeout_ms,
                heartbeat_interval_ms=self.config.heartbeat_interval_ms,
                read_committed=True,
            )
            # The group join runs in the client's background while init_transactions takes
            # the fence (each ~1 s at start-up on 2 loaded cores); the assignment is only
            # handled on the first consume, after it, so no claim precedes the fence.
            self._consumer.subscribe(self._slots_topic, self)
            self._tx.open_producer()
            while not self._stop.is_set():
                self._step()
            if self._graceful:
                # close() revokes every slot through on_revoke: Releasing records.
                self._consumer.close()
                self._consumer = None
            # Not graceful (a crash, in tests): the consumer is left as a killed process
            # would leave it, and the group expires it after session.timeout.ms.
        except ProducerFencedError as exc:
            self._fail(exc, "another process registered as the same broker id fenced this one")
        except BaseException as exc:
            self._fail(exc, "ownership member failed")
        finally:
            self._joined.set()
            self._tx.close_producer()

    def _registered_incarnation(self) -> str | None:
        """The incarnation registered with our broker id now (None: no registration), read
        after the registry caught up with its end offsets."""
        self.store.table.sync(self.config.timeout_s)
        reg = self.store.registrations.get((self.cluster, self.broker_id))
        return None if reg is None else reg.incarnation

    def _renew_producer(self, exc: ProducerFencedError) -> bool:
        """Replace a producer fenced while this incarnation is still the registered one.

        Whoever else takes our transactional id registers first (a sidecar started with our
        broker id writes its registration, then fences us with ``init_transactions``), so
        the registry tells the two fences apart. A newer incarnation registered: that fence
        is final (False). None: the fence is the coordinator's -- our transaction outlived
        ``transaction.timeout.ms`` (a stalled process or broker) and it bumped the epoch --
        so take a fresh producer and re-activate our slots (the aborted transaction wrote
        nothing). A fence again within ``RENEWAL_WINDOW_S`` of a renewal (a client racing
        for the id, repeated stalls) is renewed too, after the step's back-off, so nothing
        spins. (Until 2026-11-29 a second fence that soon was final; a fresh-clone run
        failed its cluster service so when the test's own epoch bump, retried on
        CONCURRENT_TRANSACTIONS, landed after the renewal.)

        Raises:
            TransportError: the registry could not be read in time, so whether a newer
                incarnation holds our broker id is unknown yet: the step is tried again.
        """
        try:
            holder = self._registered_incarnation()
        except PolicySyncError as unknown:
            # The registry did not catch up in time (a loaded machine): that says nothing
            # about a newer incarnation, so the step is tried again (still fenced, so it
            # writes nothing) instead of giving the broker id up.
            raise TransportError(
                f"fenced ownership producer of broker {self.broker_id}: whether a newer "
                f"incarnation holds it is unknown yet ({unknown})"
            ) from exc
        if holder is not None and holder != self.incarnation:
            logger.error(
                "ownership producer of broker %s fenced by incarnation %s, registered with "
                "its broker id after this one (%s): %s",
                self.broker_id,
                holder,
                self.incarnation,
                exc,
            )
            return False
        now = time.monotonic()
        since = now - self._renewed_at
        if since < RENEWAL_WINDOW_S:
            logger.warning(
                "ownership producer of broker %s fenced again %.1fs after its renewal, no "
                "newer incarnation registered",
                self.broker_id,
                since,
            )
            self._back_off(exc)
            now = time.monotonic()
        self._renewed_at = now
        logger.warning(
            "ownership producer of broker %s fenced with no newer incarnation registered "
            "(its transaction timed out?): %s; renewing it",
            self.broker_id,
            exc,
        )
        self._tx.renew_producer()
        self.producer_renewals += 1
        slots = set(self.active)
        self._forget(slots)
        self._pending.update(slots)  # activated again, after the table caught up
        return True

    def _fail(self, exc: BaseException, what: str) -> None:
        self._failure = exc
        if self._life.state not in (MemberState.CLOSED, MemberState.FAILED):
            logger.error("%s (broker %s): %s", what, self.broker_id, exc)
            self._transition(MemberState.FAILED)
        # Leave the group so our slots move to live members; write nothing on the way out
        # (on_revoke sees FAILED and only forgets).
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:
                logger.debug("closing the ownership consumer after a failure", exc_info=True)

    def _step(self) -> None:
        assert self._consumer is not None  # noqa: S101 - set before the loop
        try:
            batch = self._consumer.consume(500, self.config.poll_s)
            if self._pending:
                self._activate()
            if batch:
                self._handle(batch)
            now = time.monotonic()
            if 0 in self.active:
                self.housekeeping.run_due(now, self.generation)
            if self.active and now - self._last_reconcile >= self.config.reconcile_interval_s:
                self._last_reconcile = now
                self._reconcile()
        except ProducerFencedError as exc:
            try:
                renewed = self._renew_producer(exc)
            except TransportError as unknown:
                self._back_off(unknown)
                return
            if not renewed:
                raise  # fatal: a newer process with our broker id owns the transactional id
        except (GroupFencedError, TransportError) as exc:
            # Not fatal: a rebalance moved our generation on (the listener will tell us
            # what we still own), or Kafka hiccupped. Nothing we wrote became visible.
            self.fenced += isinstance(exc, GroupFencedError)
            self._back_off(exc)
        else:
            self._retry_delay = self.config.poll_s

    def _back_off(self, exc: PolicySyncError) -> None:
        """A step that did not commit: wait, doubling while it keeps failing (issue 11:
        "describe consumer group … NOT_COORDINATOR" was retried ~24 times a second for
        over a minute)."""
        self.step_failures += 1
        logger.info(
            "ownership step of %s did not commit: %s; next try in %.2fs",
            self.broker_id,
            exc,
            self._retry_delay,
        )
        time.sleep(self._retry_delay * (0.5 + random.random()))  # noqa: S311 - jitter
        # Capped well below the liveness timeout: this thread also activates slots.
        cap = min(self.config.max_retry_delay_s, self.config.session_timeout_ms / 4000)
        self._retry_delay = min(self._retry_delay * 2, cap)

    # -- RebalanceListener (called from inside consume/close) ---------------------------
    def on_assign(self, partitions: Sequence[int]) -> None:
        """New slots: activate them (after the previous owner's writes are visible)."""
        self.housekeeping.dirty = True
        self._pending.update(partitions)
        if self._consumer is not None:
            self.generation = self._consumer.generation()
        if not partitions and not self._pending:
            self._mark_joined()

    def on_revoke(self, partitions: Sequence[int]) -> None:
        """Slots moving away: mark our bundles there Releasing while we still may write,
        then stop serving them (:attr:`on_release`) before the revoke returns: the
        cooperative protocol gives the slots to another member only after that, so no
        two sidecars ever serve a bundle at once (Pulsar closes a bundle's topics before
        it gives the bundle up)."""
        self.housekeeping.dirty = True
        moving = frozenset(partitions)
        self._leaving = moving
        self._pending.difference_update(moving)
        try:
            if self._life.state is MemberState.FAILED or self._tx.producer is None:
                return
            leaving = sorted(moving & self.active)
            now_ms = int(time.time() * 1000)
            writes = release_writes(self._tx.view(leaving), self._decider(), now_ms)
            offsets = self._tx.fence(leaving)
            try:
                if writes or offsets:
                    self._commit(writes, offsets)
                    self.releases += len(writes)
            except (GroupFencedError, TransportError) as exc:
                logger.info("releasing slots %s of %s failed: %s", leaving, self.broker_id, exc)
        finally:
            self._forget(moving)
            self._leaving = frozenset()
            self._released(moving)

    def on_lost(self, partitions: Sequence[int]) -> None:
        """We were thrown out (session expired): stop deciding and serving, write nothing."""
        self.housekeeping.dirty = True
        lost = set(partitions) | self.active | self._pending
        logger.warning(
            "ownership member %s lost slots %s (session expired?)", self.broker_id, sorted(lost)
        )
        self._pending.clear()
        self._forget(lost)
        self._released(frozenset(lost))

    def _released(self, slots: frozenset[int]) -> None:
        if not slots or self.on_release is None:
            return
        count = self.config.slots
        try:
            self.on_release(lambda bundle: slot_of(bundle, count) in slots)
        except Exception:
            logger.exception("closing the topics of released slots %s failed", sorted(slots))

    def holds(self, bundle: str) -> bool:
        """Whether this member decides for ``bundle``'s slot now (from the takeover that
        claims its bundles until a revoke begins): a bundle is served here only while this
        holds (any thread)."""
        slot = slot_of(bundle, self.config.slots)
        if slot in self._leaving:
            return False
        return slot in self.active or slot in self._activating

    def _forget(self, slots: Iterable[int]) -> None:
        slots = set(slots)
        self.active.difference_update(slots)
        self._tx.forget(slots)

    def _mark_joined(self) -> None:
        if not self._joined.is_set():
            self._joined.set()
            if self._life.state is MemberState.JOINING:
                self._transition(MemberState.ACTIVE)

    # -- deciding ------------------------------------------------------------------------
    def _in_layout(self, bundle: str) -> bool:
        return in_layout(bundle, self.store.layout)

    def _decider(self) -> Decider:
        return Decider(
            self.broker_id,
            self.incarnation,
            self.generation,
            self.config.slots,
            self.table.table.spec.name,
        )

    def _decide(
        self, request: Request, now_ms: int, staged: dict[str, OwnershipRecord | None]
    ) -> Write | None:
        current = self._tx.current(request.bundle, staged)
        bundle_in_layout = self._in_layout(request.bundle)
        if not bundle_in_layout or request.op is RequestOp.CLEANUP:
            # The requester may have seen a newer layout (a split) than we have yet.
            self.store.table.sync(self.config.timeout_s)
            bundle_in_layout = self._in_layout(request.bundle)
        return decide_request(request, current, bundle_in_layout, self._decider(), now_ms)

    def _activate(self) -> None:
        """Start deciding for newly assigned slots, after the previous owner's last word."""
        assert self._consumer is not None  # noqa: S101 - called from the loop
        committed = self._stable_offsets(sorted(self._pending))
        if not committed:
            return
        slots = sorted(committed)
        self.table.table.sync(self.config.timeout_s)
        self.store.table.sync(self.config.timeout_s)
        # A slot nobody ever committed starts at 0: equivalent (every processed request
        # is committed with its decision), and it puts the slot under the fence too.
        offsets = {s: max(0, committed.get(s, OFFSET_INVALID)) for s in slots}
        # Served from the moment our claims can be read, not once they all are written.
        self._activating = frozenset(slots)
        try:
            claimed = self._take_over(slots, offsets)
            self._tx.started(offsets)
            self.active.update(slots)
        finally:
            self._activating = frozenset()
        self._pending.difference_update(slots)
        self._mark_joined()
        logger.info(
            "broker %s now decides for slots %s (claimed %d bundles, generation %d)",
            self.broker_id,
            slots,
            claimed,
            self.generation,
        )

    def _take_over(self, slots: Sequence[int], offsets: dict[int, int]) -> int:
        """Claim every bundle of ``slots`` that names another (or an old) owner; returns
        how many. Fenced by ``offsets``.

        A bundle still Owned by someone else (a dead owner, which could not release it)
        is first marked Releasing, and a bundle is claimed only once it has been Releasing
        for ``handover_s``: a sidecar whose view lags less than that sees the old owner
        stop before anyone sees the new one, so no two sidecars name different owners.
        """
        me = self._decider()
        plan = plan_takeover(self._tx.view(slots), self._in_layout, me, int(time.time() * 1000))
        if not plan.claims:
            self._commit(plan.drop, offsets)
            return 0
        if plan.releasing or plan.drop:
            self._commit([*plan.drop, *plan.releasing], offsets)
        wait_ms = handover_wait_ms(plan.claims, self.config.handover_s, int(time.time() * 1000))
        if wait_ms > 0:
            time.sleep(wait_ms / 1000)
        writes = claim_writes(plan.claims, me, int(time.time() * 1000))
        self._commit(writes, offsets)
        self.claims += len(writes)
        return len(writes)

    def _stable_offsets(self, slots: list[int]) -> dict[int, int]:
        """Committed offsets of the slots whose previous owner has no transaction open.

        A dead owner's open transaction keeps its slots' offsets unstable until Kafka
        aborts it (transaction timeout plus the broker's abort sweep); those slots are
        retried on the next loop while the others start at once.
        """
        assert self._consumer is not None  # noqa: S101 - called from the loop
        wait = min(self.config.timeout_s, self.config.activation_wait_s)
        try:
            return self._consumer.committed(slots, wait)
        except TransportError:
            if len(slots) == 1:
                logger.info("slot %d: previous owner's transaction still open", slots[0])
                return {}
        found: dict[int, int] = {}
        for slot in slots:
            try:
                found.update(self._consumer.committed([slot], wait / 4))
            except TransportError:
                logger.info("slot %d: previous owner's transaction still open", slot)
        return found

    def _handle(self, batch: Sequence[Message]) -> None:
        writes: list[Write] = []
        touched: dict[int, int] = {}
        now_ms = int(time.time() * 1000)
        staged: dict[str, OwnershipRecord | None] = {}
        for msg in batch:
            slot, offset = msg.partition(), msg.offset()
            if slot is None or offset is None or slot not in self.active:
                continue
            self._tx.read(slot, offset)
            touched[slot] = offset + 1
            request = read_request(msg)
            if request is None:
                continue
            self.requests_handled += 1
            if slot_of(request.bundle, self.config.slots) != slot:
                logger.warning(
                    "request for %s arrived on slot %d, not its slot; ignored",
                    request.bundle,
                    slot,
                )
                continue
            # Later requests in this batch must see earlier decisions.
            write = self._decide(request, now_ms, staged)
            if write is not None:
                writes.append(write)
                staged[write.key] = write.record
        if not touched:
            return
        self._commit(writes, touched)
        self.claims += sum(
            1 for w in writes if w.record is not None and w.record.state is BundleState.OWNED
        )

    def _reconcile(self) -> None:
        """Claim any bundle of our slots that still names another (or an old) owner."""
        slots = sorted(self.active)
        me = self._decider()
        if any(names_another_owner(current, me) for _, current in self._tx.view(slots)):
            self._take_over(slots, self._tx.fence(slots))

    def _commit(self, writes: Sequence[Write], offsets: dict[int, int]) -> None:
        self._tx.commit(self._consumer, writes, offsets)
