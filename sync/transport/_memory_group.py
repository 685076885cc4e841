"""The in-memory twin of Kafka's consumer-group protocol (cooperative-sticky).

What the layers above rely on, kept here:

* membership: members join on ``subscribe``, leave on ``close`` and are expired when they
  have not polled for ``session_timeout_ms`` (or at once with
  :meth:`GroupCoordinator.expire_member`, the twin of ``kill -9``);
* incremental cooperative rebalancing: a change first revokes only the partitions that must
  move (``on_revoke`` while the member's generation is valid), then, once every revocation
  is acknowledged, assigns them (``on_assign``); a sticky, balanced target assignment;
* generations: every rebalance bumps the group generation; a member learns it when it
  processes the rebalance in ``consume``; ``send_offsets_to_transaction`` with a stale
  member or generation raises :class:`~sync._errors.GroupFencedError`;
* KIP-447 stable offsets: offsets sent in an open transaction become committed only when
  it commits; ``committed()`` (and fetching from a newly assigned partition) waits while
  such a transaction is open.

It is a twin, not a simulator: there is one coordinator per broker, no heartbeat thread
(polling is the heartbeat) and rebalances complete as soon as members poll.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sync._errors import GroupFencedError, TransportError

from ._base import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    GroupDescription,
    GroupMember,
    GroupMetadata,
    Message,
    RebalanceListener,
)

__all__ = ["GroupCoordinator", "MemoryGroupConsumer", "MemoryGroupMetadata"]

_TxnKey = tuple[str, int]  # (transactional id, producer epoch)


@dataclass(frozen=True, slots=True)
class MemoryGroupMetadata:
    """What ``group_metadata()`` returns in the twin: who, in which generation."""

    group_id: str
    member_id: str
    generation: int


@dataclass(slots=True)
class _Member:
    member_id: str
    client_id: str
    topic: str
    session_timeout_s: float
    last_seen: float
    owned: set[int] = field(default_factory=set)
    #: (kind, partitions, generation); kind is "revoke", "assign" or "lost".
    events: deque[tuple[str, tuple[int, ...], int]] = field(default_factory=deque)


@dataclass(slots=True)
class _Group:
    group_id: str
    generation: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    revoking: dict[str, set[int]] = field(default_factory=dict)
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    pending: dict[_TxnKey, dict[tuple[str, int], int]] = field(default_factory=dict)


def sticky_assignment(owned: Mapping[str, set[int]], num_partitions: int) -> dict[str, set[int]]:
    """A balanced target that keeps as many current owners as possible.

    Members that own more keep the larger quotas; free partitions go to the member with
    the fewest, ties broken by member id, so the result is deterministic.
    """
    members = sorted(owned)
    if not members:
        return {}
    base, extra = divmod(num_partitions, len(members))
    ranked = sorted(members, key=lambda m: (-len(owned[m]), m))
    caps = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
    target: dict[str, set[int]] = {}
    taken: set[int] = set()
    for m in members:
        keep = sorted(p for p in owned[m] if p < num_partitions and p not in taken)[: caps[m]]
        target[m] = set(keep)
        taken.update(keep)
    for p in range(num_partitions):
        if p in taken:
            continue
        m = min(
            (m for m in members if len(target[m]) < caps[m]),
            key=lambda m: (len(target[m]), m),
        )
        target[m].add(p)
    return target


class GroupCoordinator:
    """Every consumer group of one :class:`~sync.transport.MemoryBroker`."""

    def __init__(self, lock: threading.Condition, partitions_of: Callable[[str], int]) -> None:
        self._lock = lock
        self._partitions_of = partitions_of
        self._groups: dict[str, _Group] = {}
        self._ids = itertools.count(1)

    # -- test controls -------------------------------------------------------------------
    def expire_member(self, group_id: str, client_id: str) -> int:
        """Drop every member of ``group_id`` with ``client_id`` as if its session expired
        (what ``kill -9`` looks like to Kafka). Returns how many were dropped."""
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return 0
            gone = [m for m in group.members.values() if m.client_id == client_id]
            for member in gone:
                self._remove(group, member, lost=True)
            if gone:
                self._rebalance(group)
            return len(gone)

    # -- membership ---------------------------------------------------------------------
    def _group(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = _Group(group_id)
        return group

    def join(self, group_id: str, client_id: str, topic: str, session_timeout_s: float) -> str:
        with self._lock:
            group = self._group(group_id)
            member_id = f"{client_id}-{next(self._ids)}"
            group.members[member_id] = _Member(
                member_id, client_id, topic, session_timeout_s, time.monotonic()
            )
            self._rebalance(group)
            return member_id

    def leave(self, group_id: str, member_id: str) -> None:
        with self._lock:
            group = self._groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None:
                return
            self._remove(group, member, lost=False)
            self._rebalance(group)

    def _remove(self, group: _Group, member: _Member, *, lost: bool) -> None:
        del group.members[member.member_id]
        group.revoking.pop(member.member_id, None)
        member.owned.clear()
        if lost:
            member.events.clear()
            member.events.append(("lost", (), group.generation))
        self._lock.notify_all()

    def _expire(self, group: _Group) -> None:
        now = time.monotonic()
        dead = [m for m in group.members.values() if now - m.last_seen > m.session_timeout_s]
        for member in dead:
            self._remove(group, member, lost=True)
        if dead:
            self._rebalance(group)

    def _rebalance(self, group: _Group) -> None:
        if group.revoking:
            return  # phase 2 waits for every revocation of phase 1
        if not group.members:
            group.generation += 1
            return
        topic = next(iter(group.members.values())).topic
        target = sticky_assignment(
            {m.member_id: set(m.owned) for m in group.members.values()},
            self._partitions_of(topic),
        )
        group.generation += 1
        revoke = {mid: group.members[mid].owned - parts for mid, parts in target.items()}
        if any(revoke.values()):
            for mid, parts in revoke.items():
                member = group.members[mid]
                if parts:
                    group.revoking[mid] = set(parts)
                    member.events.append(("revoke", tuple(sorted(parts)), group.generation))
                else:
                    member.events.append(("assign", (), group.generation))
        else:
            for mid, parts in target.items():
                member = group.members[mid]
                added = parts - member.owned
                member.owned |= added
                member.events.append(("assign", tuple(sorted(added)), group.generation))
        self._lock.notify_all()

    # -- what a member sees --------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str) -> tuple[str, tuple[int, ...], int] | None:
        """Mark the member alive and hand it its next rebalance event, if any.

        Returns ``("lost", (), gen)`` once if the member was thrown out.
        """
        with self._lock:
            group = self._group(group_id)
            member = group.members.get(member_id)
            if member is not None:
                member.last_seen = time.monotonic()
            self._expire(group)
            member = group.members.get(member_id)
            if member is None:
                return ("lost", (), group.generation)
            return member.events.popleft() if member.events else None

    def revoked(self, group_id: str, member_id: str, partitions: Sequence[int]) -> None:
        """The member finished handling ``on_revoke``: its partitions are free."""
        with self._lock:
            group = self._group(group_id)
            member = group.members.get(member_id)
            if member is None:
                return
            member.owned.difference_update(partitions)
            pending = group.revoking.get(member_id)
            if pending is not None:
                pending.difference_update(partitions)
                if not pending:
                    del group.revoking[member_id]
            if not group.revoking:
                self._rebalance(group)

    def describe(self, group_id: str) -> GroupDescription:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return GroupDescription(group_id, "Dead", ())
            self._expire(group)
            if not group.members:
                return GroupDescription(group_id, "Empty", ())
            busy = group.revoking or any(m.events for m in group.members.values())
            members = tuple(
                GroupMember(
                    m.member_id, m.client_id, "/127.0.0.1", {m.topic: tuple(sorted(m.owned))}
                )
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            )
            return GroupDescription(group_id, "PreparingRebalance" if busy else "Stable", members)

    # -- offsets (KIP-447) ---------------------------------------------------------------
    def stage_offsets(
        self, metadata: GroupMetadata, topic: str, offsets: Mapping[int, int], txn: _TxnKey
    ) -> None:
        """Attach offsets to an open transaction after checking the member's generation."""
        if not isinstance(metadata, MemoryGroupMetadata):
            raise TransportError(f"not group metadata of the memory twin: {metadata!r}")
        with self._lock:
            group = self._groups.get(metadata.group_id)
            if group is None or metadata.member_id not in group.members:
                raise GroupFencedError(
                    f"send offsets to transaction: member {metadata.member_id!r} is not in "
                    f"group {metadata.group_id!r} (Broker: Unknown member)"
                )
            if metadata.generation != group.generation:
                raise GroupFencedError(
                    f"send offsets to transaction: generation {metadata.generation} of "
                    f"{metadata.member_id!r} is stale, group {metadata.group_id!r} is at "
                    f"{group.generation} (Broker: Specified group generation id is not valid)"
                )
            staged = group.pending.setdefault(txn, {})
            for p, offset in offsets.items():
                staged[(topic, p)] = offset

    def finish(self, txn: _TxnKey, commit: bool) -> None:
        """A transaction ended: its staged offsets are committed or dropped."""
        with self._lock:
            for group in self._groups.values():
                staged = group.pending.pop(txn, None)
                if staged and commit:
                    group.committed.update(staged)
            self._lock.notify_all()

    def finish_older(self, transactional_id: str, epoch: int) -> None:
        """A new producer epoch aborts what older incarnations left open."""
        with self._lock:
            for group in self._groups.values():
                for key in [k for k in group.pending if k[0] == transactional_id and k[1] < epoch]:
                    del group.pending[key]
            self._lock.notify_all()

    def _unstable(self, group: _Group, topic: str, partitions: Sequence[int]) -> bool:
        wanted = {(topic, p) for p in partitions}
        return any(wanted.intersection(staged) for staged in group.pending.values())

    def committed(
        self, group_id: str, topic: str, partitions: Sequence[int], timeout_s: float
    ) -> dict[int, int]:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            group = self._group(group_id)
            while self._unstable(group, topic, partitions):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TransportError(
                        f"committed offsets of group {group_id!r} on {topic} stayed unstable "
                        f"for {timeout_s:.1f}s: a transaction that commits them is still open"
                    )
                self._lock.wait(remaining)
            return {p: group.committed.get((topic, p), OFFSET_INVALID) for p in partitions}

    def stable(self, group_id: str, topic: str, partition: int) -> bool:
        with self._lock:
            return not self._unstable(self._group(group_id), topic, [partition])


class MemoryGroupConsumer:
    """Group-consumer twin: membership from the coordinator, records from a plain
    :class:`~sync.transport.MemoryConsumer` re-assigned as partitions come and go."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        fetcher: Consumer,
        group_id: str,
        client_id: str,
        session_timeout_ms: int,
        start_offset: Callable[[str, int], int],
    ) -> None:
        self._coordinator = coordinator
        self._fetcher = fetcher
        self._group_id = group_id
        self._client_id = client_id
        self._session_timeout_s = session_timeout_ms / 1000.0
        self._start_offset = start_offset
        self._topic: str | None = None
        self._listener: RebalanceListener | None = None
        self._member_id = ""
        self._generation = -1
        self._assigned: set[int] = set()
        self._positions: dict[int, int] = {}
        self._waiting: set[int] = set()  # assigned, committed offset not stable yet
        self._closed = False

    def subscribe(self, topic: str, listener: RebalanceListener) -> None:
        self._topic = topic
        self._listener = listener
        self._member_id = self._coordinator.join(
            self._group_id, self._client_id, topic, self._session_timeout_s
        )

    def _refetch(self) -> None:
        assert self._topic is not None  # noqa: S101 - subscribed
        live = {p: self._positions[p] for p in sorted(self._assigned - self._waiting)}
        if live:
            self._fetcher.assign(self._topic, live)
        else:
            self._fetcher.close()

    def _resolve_waiting(self) -> None:
        assert self._topic is not None  # noqa: S101 - subscribed
        ready = [
            p for p in self._waiting if self._coordinator.stable(self._group_id, self._topic, p)
        ]
        if not ready:
            return
        committed = self._coordinator.committed(self._group_id, self._topic, ready, 0.0)
        for p in ready:
            offset = committed[p]
            self._positions[p] = (
                offset if offset != OFFSET_INVALID else self._start_offset(self._topic, p)
            )
            self._waiting.discard(p)
        self._refetch()

    def _sync_positions(self) -> None:
        if self._topic is None:
            return
        live = sorted(self._assigned - self._waiting)
        if live:
            for p, pos in self._fetcher.positions(self._topic, live).items():
                if pos >= 0:
                    self._positions[p] = pos

    def _handle(self, event: tuple[str, tuple[int, ...], int]) -> None:
        kind, partitions, generation = event
        listener = self._listener
        if kind == "lost":
            lost = sorted(self._assigned)
            self._assigned.clear()
            self._waiting.clear()
            self._refetch()
            if listener is not None:
                listener.on_lost(lost)
            # librdkafka rejoins on its own after being fenced; so does the twin.
            if not self._closed and self._topic is not None:
                self._member_id = self._coordinator.join(
                    self._group_id, self._client_id, self._topic, self._session_timeout_s
                )
            return
        self._generation = generation
        if kind == "revoke":
            self._sync_positions()
            try:
                if listener is not None:
                    listener.on_revoke(list(partitions))
            finally:
                self._assigned.difference_update(partitions)
                self._waiting.difference_update(partitions)
                self._refetch()
                self._coordinator.revoked(self._group_id, self._member_id, partitions)
            return
        self._sync_positions()
        self._assigned.update(partitions)
        self._waiting.update(partitions)
        self._resolve_waiting()
        if listener is not None:
            listener.on_assign(list(partitions))

    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]:
        deadline = time.monotonic() + timeout_s
        if self._topic is None or self._closed:
            time.sleep(max(0.0, timeout_s))
            return []
        while True:
            event = self._coordinator.heartbeat(self._group_id, self._member_id)
            while event is not None:
                self._handle(event)
                event = self._coordinator.heartbeat(self._group_id, self._member_id)
            if self._waiting:
                self._resolve_waiting()
            remaining = deadline - time.monotonic()
            batch: Sequence[Message] = []
            if self._assigned - self._waiting:
                batch = self._fetcher.consume(max_messages, max(0.0, min(remaining, 0.01)))
            elif remaining > 0:
                time.sleep(min(remaining, 0.01))
            if batch:
                for msg in batch:
                    p, off = msg.partition(), msg.offset()
                    if p is not None and off is not None:
                        self._positions[p] = off + 1
                return batch
            if time.monotonic() >= deadline:
                return []

    def assignment(self) -> list[int]:
        return sorted(self._assigned)

    def committed(self, partitions: Sequence[int], timeout_s: float) -> dict[int, int]:
        if self._topic is None:
            return {}
        return self._coordinator.committed(self._group_id, self._topic, partitions, timeout_s)

    def seek(self, partition: int, offset: int) -> None:
        if partition not in self._assigned:
            raise TransportError(f"seek on partition {partition} that is not assigned")
        self._sync_positions()
        self._positions[partition] = offset
        if partition not in self._waiting:
            self._refetch()

    def group_metadata(self) -> GroupMetadata:
        return MemoryGroupMetadata(self._group_id, self._member_id, self._generation)

    def generation(self) -> int:
        return self._generation

    def member_id(self) -> str:
        return self._member_id

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._assigned and self._listener is not None:
            # Kafka delivers the final revocation from close(), generation still valid.
            self._listener.on_revoke(sorted(self._assigned))
        self._assigned.clear()
        if self._member_id:
            self._coordinator.leave(self._group_id, self._member_id)
        self._fetcher.close()


def start_offset_of(
    offsets: Callable[[str, Sequence[int]], dict[int, int]],
) -> Callable[[str, int], int]:
    """``auto.offset.reset=earliest`` for the twin, from a start-offsets function."""

    def start(topic: str, partition: int) -> int:
        found = offsets(topic, [partition]).get(partition, OFFSET_BEGINNING)
        return found if found >= 0 else 0

    return start
