"""Registry housekeeping by the owner of slot 0: it publishes the ownership group's
membership, tombstones the registrations (and wiped write perms) of brokers that left
it, and forgets whole clusters whose every broker died.

What to write is decided by the pure functions here; :class:`Housekeeping` describes the
groups, schedules the jobs and hands the writes to the member, which commits them fenced
by slot 0's offset (see :mod:`sync.cluster._ownership_member`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from sync._constants import OWNERSHIP_MEMBER_CLIENT_PREFIX
from sync._errors import GroupFencedError, PolicySyncError, ProducerFencedError, TransportError
from sync.transport import Admin, GroupDescription, Transport

from ._metadata import MetadataStore
from ._ownership_model import OwnershipConfig, Write, group_id, slots_topic
from ._records import (
    BrokerRegistration,
    MemberInfo,
    Membership,
    WritePerm,
    broker_key,
    members_key,
    perm_key,
)

logger = logging.getLogger(__name__)

__all__ = [
    "Housekeeping",
    "describe_members",
    "forget_cluster_writes",
    "group_members",
    "membership_writes",
    "quiet_clusters",
]

Registrations = Mapping[tuple[str, str], BrokerRegistration]
Perms = Mapping[tuple[str, str], WritePerm]


def group_members(desc: GroupDescription, slots_topic_name: str) -> tuple[MemberInfo, ...]:
    """The ownership members of a described group (other clients of the group left out),
    by client id, each with the slots it is assigned."""
    return tuple(
        MemberInfo(
            m.client_id,
            m.member_id,
            m.host,
            tuple(m.assignment.get(slots_topic_name, ())),
        )
        for m in sorted(desc.members, key=lambda m: m.client_id)
        if m.client_id.startswith(OWNERSHIP_MEMBER_CLIENT_PREFIX)
    )


def membership_writes(
    *,
    cluster: str,
    members: tuple[MemberInfo, ...],
    previous: Membership | None,
    registrations: Registrations,
    perms: Perms,
    leader: str,
    generation: int,
    grace_s: float,
    now_ms: float,
    topic: str,
) -> list[Write]:
    """The registry records that bring ``cluster`` up to date with its group's
    ``members``: a new membership snapshot if it changed, and tombstones of the
    registrations of brokers gone from the group (at once if they were in ``previous``,
    else once not refreshed for ``grace_s``) and of the write perms of their names."""
    writes: list[Write] = []
    if previous is None or previous.members != members:
        snapshot = Membership(
            cluster=cluster,
            members=members,
            leader=leader,
            generation=generation,
            timestamp_ms=int(now_ms),
        )
        writes.append(Write(members_key(cluster), snapshot.to_json(), None, topic))
    alive = frozenset(m.incarnation for m in members)
    was_alive = frozenset() if previous is None else previous.incarnations
    expired_names: set[str] = set()
    live_names: set[str] = set()
    for (reg_cluster, broker_id), reg in registrations.items():
        if reg_cluster != cluster:
            continue
        if reg.incarnation in alive:
            live_names.add(reg.broker_name)
            continue
        stale = now_ms - reg.heartbeat_ms > grace_s * 1000
        if reg.incarnation in was_alive or stale:
            logger.info(
                "broker %s (incarnation %s) left the group: removing its registration",
                broker_id,
                reg.incarnation,
            )
            writes.append(Write(broker_key(cluster, broker_id), None, None, topic))
            expired_names.add(reg.broker_name)
    for perm_cluster, name in perms:
        if perm_cluster == cluster and name in expired_names and name not in live_names:
            writes.append(Write(perm_key(perm_cluster, name), None, None, topic))
    return writes


def quiet_clusters(
    own_cluster: str,
    registrations: Registrations,
    memberships: Mapping[str, Membership],
    *,
    grace_s: float,
    now_ms: float,
) -> list[str]:
    """Other clusters, by name, with neither a registration nor a membership snapshot
    refreshed within ``grace_s``: dead, unless their group still has members."""
    grace_ms = grace_s * 1000
    candidates = {c for c, _ in registrations} | set(memberships)
    candidates.discard(own_cluster)
    quiet: list[str] = []
    for cluster in sorted(candidates):
        if any(
            now_ms - reg.heartbeat_ms <= grace_ms
            for (c, _), reg in registrations.items()
            if c == cluster
        ):
            continue
        snapshot = memberships.get(cluster)
        if snapshot is not None and now_ms - snapshot.timestamp_ms <= grace_ms:
            continue
        quiet.append(cluster)
    return quiet


def forget_cluster_writes(
    cluster: str,
    registrations: Registrations,
    memberships: Mapping[str, Membership],
    perms: Perms,
    topic: str,
) -> list[Write]:
    """Tombstones of everything the registry holds of ``cluster``: registrations,
    membership snapshot, write perms."""
    writes = [
        Write(broker_key(c, bid), None, None, topic) for c, bid in registrations if c == cluster
    ]
    if cluster in memberships:
        writes.append(Write(members_key(cluster), None, None, topic))
    writes += [Write(perm_key(c, name), None, None, topic) for c, name in perms if c == cluster]
    return writes


class Housekeeping:
    """The slot-0 owner's periodic registry jobs: publishing the membership (when the
    group changed, else every ``membership_poll_s``, backing off while describing fails)
    and sweeping dead clusters (every ``reconcile_interval_s``)."""

    def __init__(
        self,
        config: OwnershipConfig,
        *,
        cluster: str,
        broker_id: str,
        store: MetadataStore,
        transport: Transport,
        commit: Callable[[Sequence[Write]], None],
    ) -> None:
        """``commit`` writes records fenced by slot 0 (raising GroupFencedError or
        TransportError if it could not)."""
        self.config = config
        self.cluster = cluster
        self.broker_id = broker_id
        self.store = store
        self._transport = transport
        self._admin_client: Admin | None = None
        self._commit = commit
        self._group = group_id(cluster)
        self._slots_topic = slots_topic(cluster)
        #: Set when the group may have changed: publish at the next step.
        self.dirty = True
        self._last_membership = 0.0
        self._last_sweep = time.monotonic()
        self._backoff = config.membership_poll_s
        self._retry_at = 0.0
        #: Counter for tests and metrics.
        self.membership_published = 0

    def open_admin(self) -> Admin:
        """Create the admin client now, for the member's life (it also creates the
        member's topics): the slot-0 owner describes the group every membership_poll_s,
        and a client per call would mean new connections."""
        self._admin_client = admin = self._transport.admin()
        # Its group calls run in a worker process: start it now, off the boot path, so a
        # new slot-0 owner does not spend seconds starting one while a failover waits.
        warm_up = getattr(admin, "warm_up", None)
        if warm_up is not None:
            threading.Thread(
                target=_warm_up, args=(warm_up,), name="admin-warm-up", daemon=True
            ).start()
        return admin

    def close_admin(self) -> None:
        """Close the admin client (its coordinator calls run in a worker process)."""
        admin, self._admin_client = self._admin_client, None
        close_admin = getattr(admin, "close", None)
        if close_admin is not None:
            close_admin()

    def _admin(self) -> Admin:
        if self._admin_client is None:
            self._admin_client = self._transport.admin()
        return self._admin_client

    def run_due(self, now: float, generation: int) -> None:
        """Run the jobs that are due at monotonic time ``now`` (we own slot 0)."""
        if now >= self._retry_at and (
            self.dirty or now - self._last_membership >= self.config.membership_poll_s
        ):
            self._publish_membership_backing_off(now, generation)
        if now - self._last_sweep >= self.config.reconcile_interval_s:
            self._last_sweep = now
            self.sweep_dead_clusters()

    def _publish_membership_backing_off(self, now: float, generation: int) -> None:
        """Publish the membership; while describing the group keeps failing (coordinator
        moving after a broker died), retry after 0.2 s doubling to 5 s, without holding
        up the rest of the loop (issue 11: ~24 describes a second for over a minute)."""
        try:
            self.publish_membership(generation)
        except (GroupFencedError, ProducerFencedError):
            raise  # handled by the loop: a rebalance, or fatal
        except TransportError as exc:
            delay = self._backoff
            self._backoff = min(delay * 2, 5.0)
            self._retry_at = now + delay * (0.5 + random.random())  # noqa: S311
            logger.info("publishing the membership failed: %s; next try in %.1fs", exc, delay)
            return
        self._backoff = self.config.membership_poll_s

    def publish_membership(self, generation: int) -> None:
        """Publish the group's membership and remove the registrations that left it."""
        self._last_membership = time.monotonic()
        desc = self._admin().describe_group(self._group, 5.0)
        if desc.state != "Stable":
            self.dirty = True
            return
        self.dirty = False
        writes = membership_writes(
            cluster=self.cluster,
            members=group_members(desc, self._slots_topic),
            previous=self.store.memberships.get(self.cluster),
            registrations=dict(self.store.registrations),
            perms=dict(self.store.perms),
            leader=self.broker_id,
            generation=generation,
            grace_s=self.config.registration_grace_s,
            now_ms=time.time() * 1000,
            topic=self.store.table.spec.name,
        )
        if writes:
            self._commit(writes)
            self.membership_published += 1

    def sweep_dead_clusters(self) -> None:
        """Forget other clusters whose every broker died: no registration refreshed within
        the grace period and an empty ownership group (nobody is left there to do it)."""
        registrations = dict(self.store.registrations)
        memberships = dict(self.store.memberships)
        perms = dict(self.store.perms)
        writes: list[Write] = []
        for cluster in quiet_clusters(
            self.cluster,
            registrations,
            memberships,
            grace_s=self.config.registration_grace_s,
            now_ms=time.time() * 1000,
        ):
            if self._admin().describe_group(group_id(cluster), 5.0).members:
                continue
            logger.info("cluster %s has no live broker left: forgetting it", cluster)
            writes += forget_cluster_writes(
                cluster, registrations, memberships, perms, self.store.table.spec.name
            )
        if writes:
            self._commit(writes)


def _warm_up(warm_up: Callable[[], None]) -> None:
    try:
        warm_up()
    except PolicySyncError as exc:
        logger.info("starting the Kafka admin worker failed: %s (retried on use)", exc)


def describe_members(store: MetadataStore, cluster: str) -> list[dict[str, object]]:
    """The published membership with broker ids resolved, for status endpoints."""
    members = store.memberships.get(cluster)
    if members is None:
        return []
    by_incarnation = {
        reg.incarnation: broker_id
        for (c, broker_id), reg in list(store.registrations.items())
        if c == cluster
    }
    return [
        {
            "brokerId": by_incarnation.get(m.incarnation),
            "incarnation": m.incarnation,
            "memberId": m.member_id,
            "slots": list(m.slots),
        }
        for m in members.members
    ]
