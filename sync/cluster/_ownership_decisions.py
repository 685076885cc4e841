"""What a slot's owner writes, decided without Kafka: pure functions from the records it
sees, the time and who it is, to the ownership records to write.

The member (:mod:`sync.cluster._ownership_member`) reads its view, calls these, and
commits what they return in one fenced transaction; nothing here reads a clock, sleeps,
or talks to Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from sync.naming._names import NamespaceName

from ._ownership_model import Request, RequestOp, Write, namespace_of_bundle, slot_of
from ._records import BundleState, OwnershipRecord, check_transition

__all__ = [
    "BundleLayout",
    "Decider",
    "Layouts",
    "Takeover",
    "claim_writes",
    "decide_request",
    "handover_wait_ms",
    "in_layout",
    "is_mine",
    "names_another_owner",
    "new_record",
    "plan_takeover",
    "release_writes",
    "tombstone",
]


class BundleLayout(Protocol):
    """What a decision needs of a namespace's bundle layout."""

    def contains(self, bundle_name: str) -> bool:
        """Whether ``bundle_name`` is one of the namespace's bundles."""
        ...


#: A namespace's bundle layout, None if the namespace does not exist
#: (:meth:`sync.cluster._metadata.MetadataStore.layout`).
Layouts = Callable[[NamespaceName], BundleLayout | None]


@dataclass(frozen=True, slots=True)
class Decider:
    """Who writes: the member's broker and incarnation, its group generation, the number
    of slots, and the ownership topic the records go to."""

    broker_id: str
    incarnation: str
    generation: int
    slots: int
    topic: str


def in_layout(bundle: str, layouts: Layouts) -> bool:
    """Whether ``bundle`` is a bundle of its namespace's current layout."""
    namespace = namespace_of_bundle(bundle)
    layout = None if namespace is None else layouts(namespace)
    return layout is not None and layout.contains(bundle)


def is_mine(record: OwnershipRecord | None, me: Decider) -> bool:
    """Whether ``record`` says this incarnation of this broker owns the bundle."""
    return (
        record is not None
        and record.state is BundleState.OWNED
        and record.broker == me.broker_id
        and record.incarnation == me.incarnation
    )


def names_another_owner(record: OwnershipRecord | None, me: Decider) -> bool:
    """Whether ``record`` is Owned or Releasing by someone else (or an old incarnation of
    us): a bundle of our slots we have to claim."""
    return (
        record is not None
        and not is_mine(record, me)
        and record.state in (BundleState.OWNED, BundleState.RELEASING)
    )


def new_record(
    bundle: str,
    current: OwnershipRecord | None,
    state: BundleState,
    reason: str,
    now_ms: int,
    me: Decider,
) -> Write:
    """The record moving ``bundle`` from ``current`` to ``state``: Owned (or a first
    record) names us; any other state keeps the current owner. Raises
    ConflictError if the state machine refuses the move."""
    ours = state is BundleState.OWNED or current is None
    broker = me.broker_id if ours or current is None else current.broker
    incarnation = me.incarnation if ours or current is None else current.incarnation
    check_transition(bundle, current, state, broker, incarnation)
    record = OwnershipRecord(
        bundle=bundle,
        state=state,
        broker=broker,
        incarnation=incarnation,
        version=(0 if current is None else current.version) + 1,
        generation=me.generation,
        slot=slot_of(bundle, me.slots),
        timestamp_ms=now_ms,
        reason=reason,
        previous=None if current is None else current.broker,
    )
    return Write(bundle, record.to_json(), record, me.topic)


def tombstone(bundle: str, me: Decider) -> Write:
    """The tombstone of ``bundle``'s record."""
    return Write(bundle, None, None, me.topic)


def decide_request(
    request: Request,
    current: OwnershipRecord | None,
    bundle_in_layout: bool,
    me: Decider,
    now_ms: int,
) -> Write | None:
    """The answer to one request for a bundle of our slots, or None if nothing changes.

    ``bundle_in_layout``: whether the bundle is (still) one of its namespace's bundles; a
    bundle that is not (e.g. split) has its record dropped whatever was asked.
    """
    bundle = request.bundle
    if not bundle_in_layout:
        return tombstone(bundle, me) if current is not None else None
    if request.op is RequestOp.ACQUIRE:
        if is_mine(current, me):
            return None
        return new_record(bundle, current, BundleState.OWNED, "lookup", now_ms, me)
    if request.op is RequestOp.UNLOAD:
        if current is None or current.state is not BundleState.OWNED:
            return None
        return new_record(bundle, current, BundleState.FREE, "unload", now_ms, me)
    return None  # CLEANUP of a bundle still in its layout: nothing to do


def release_writes(
    bundles: Iterable[tuple[str, OwnershipRecord | None]], me: Decider, now_ms: int
) -> list[Write]:
    """On revoke: mark Releasing every bundle among ``bundles`` (name, current record)
    that this incarnation owns."""
    return [
        new_record(bundle, current, BundleState.RELEASING, "revoked", now_ms, me)
        for bundle, current in bundles
        if current is not None
        and current.state is BundleState.OWNED
        and current.incarnation == me.incarnation
    ]


@dataclass(slots=True)
class Takeover:
    """How a new owner takes over a slot's bundles, in two transactions: first ``drop``
    and ``releasing``, then (after the handover) the claims of ``claims``."""

    #: Tombstones of bundles no longer in their namespace's layout.
    drop: list[Write] = field(default_factory=list)
    #: Releasing records of bundles another (dead) owner still holds as Owned.
    releasing: list[Write] = field(default_factory=list)
    #: Bundles to claim, each with the Releasing record the claim follows.
    claims: list[tuple[str, OwnershipRecord]] = field(default_factory=list)


def plan_takeover(
    bundles: Iterable[tuple[str, OwnershipRecord | None]],
    bundle_in_layout: Callable[[str], bool],
    me: Decider,
    now_ms: int,
) -> Takeover:
    """What to write to claim every bundle among ``bundles`` (name, current record) that
    names another (or an old) owner.

    A bundle still Owned by someone else (a dead owner, which could not release it) is
    first marked Releasing; a bundle is claimed only once it has been Releasing for the
    handover (:func:`handover_wait_ms`), so a sidecar whose view lags less than that sees
    the old owner stop before anyone sees the new one.
    """
    plan = Takeover()
    for bundle, current in bundles:
        if current is None or not names_another_owner(current, me):
            continue
        if not bundle_in_layout(bundle):
            plan.drop.append(tombstone(bundle, me))
            continue
        if current.state is BundleState.OWNED:
            w = new_record(bundle, current, BundleState.RELEASING, "failover", now_ms, me)
            assert w.record is not None  # noqa: S101 - a record, not a tombstone
            plan.releasing.append(w)
            plan.claims.append((bundle, w.record))
        else:
            plan.claims.append((bundle, current))
    return plan


def handover_wait_ms(
    claims: Iterable[tuple[str, OwnershipRecord]], handover_s: float, now_ms: int
) -> float:
    """How long to wait before claiming: until the newest Releasing record of ``claims``
    is ``handover_s`` old (``claims`` is not empty). A record from another host's clock
    never makes us wait longer than the handover itself."""
    handover_ms = handover_s * 1000
    return max(min(handover_ms, handover_ms - (now_ms - c.timestamp_ms)) for _, c in claims)


def claim_writes(
    claims: Iterable[tuple[str, OwnershipRecord]], me: Decider, now_ms: int
) -> list[Write]:
    """The Owned records that claim ``claims`` after the handover."""
    return [
        new_record(
            bundle,
            current,
            BundleState.OWNED,
            "failover" if current.reason == "failover" else "rebalance",
            now_ms,
            me,
        )
        for bundle, current in claims
    ]
