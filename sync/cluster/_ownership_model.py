"""The vocabulary of bundle ownership, shared by its table, decisions, member and
housekeeping: settings, request operations, member states, slot and topic names, and the
shapes of a request and of a write.

How ownership works is told in :mod:`sync.cluster._ownership_member`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sync._constants import (
    DEFAULT_OWNERSHIP_SLOTS,
    OWNERSHIP_GROUP_PREFIX,
    OWNERSHIP_SLOTS_TOPIC_PREFIX,
    OWNERSHIP_TOPIC_PREFIX,
)
from sync._errors import ConfigurationError, PolicySyncError
from sync.naming._names import NamespaceName
from sync.routing import kafka_partition

from ._records import OwnershipRecord, decode_json, encode_json

__all__ = [
    "MEMBER_MOVES",
    "MemberState",
    "OwnershipConfig",
    "Request",
    "RequestOp",
    "Write",
    "group_id",
    "namespace_of_bundle",
    "ownership_topic",
    "slot_of",
    "slots_topic",
]


@dataclass(frozen=True, slots=True)
class OwnershipConfig:
    """Settings of bundle ownership in one cluster."""

    slots: int = DEFAULT_OWNERSHIP_SLOTS
    #: Liveness: a sidecar silent this long is dropped from the group (Kafka's expiry).
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int | None = None
    #: How often the slot-0 owner compares the group with the published membership.
    membership_poll_s: float = 0.2
    #: How often an owner re-checks that every bundle of its slots names it.
    reconcile_interval_s: float = 5.0
    #: A registration not in the group for this long (and not refreshed) is removed.
    registration_grace_s: float = 30.0
    #: A dead owner's open transaction blocks its slots until Kafka aborts it after this;
    #: None: tied to the liveness timeout (see :attr:`effective_transaction_timeout_ms`).
    transaction_timeout_ms: int | None = None
    #: How long one activation waits for a slot's offsets to become stable.
    activation_wait_s: float = 2.0
    #: How long a moving bundle stays Releasing before its new owner claims it, so that
    #: every sidecar sees it stop being owned before anyone sees the new owner (a reader
    #: lagging less than this never names two owners; issue 11).
    handover_s: float = 0.25
    poll_s: float = 0.02
    #: A loop step that keeps failing is retried after poll_s, doubling up to this.
    max_retry_delay_s: float = 1.0
    timeout_s: float = 30.0
    replication_factor: int = -1

    @property
    def effective_transaction_timeout_ms(self) -> int:
        """Half the liveness timeout, at least librdkafka's minimum (1 s), unless set."""
        if self.transaction_timeout_ms is not None:
            return self.transaction_timeout_ms
        return max(1_000, self.session_timeout_ms // 2)

    def __post_init__(self) -> None:
        if not 1 <= self.slots <= 10_000:
            raise ConfigurationError(f"ownership slots must be 1..10000, got {self.slots}")
        if self.session_timeout_ms < 500:
            raise ConfigurationError(
                f"session timeout {self.session_timeout_ms} ms is below 500 ms; Kafka's "
                "group.min.session.timeout.ms would refuse it"
            )


class RequestOp(enum.StrEnum):
    """What a record on the slots topic asks the slot's owner to do."""

    ACQUIRE = "acquire"
    UNLOAD = "unload"
    CLEANUP = "cleanup"


class MemberState(enum.Enum):
    """Where an ownership member is in its life."""

    NEW = "NEW"
    JOINING = "JOINING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    CLOSED = "CLOSED"


#: The moves a member may make (checked by :class:`sync._lifecycle.Lifecycle`).
MEMBER_MOVES: dict[MemberState, frozenset[MemberState]] = {
    MemberState.NEW: frozenset({MemberState.JOINING, MemberState.CLOSED}),
    MemberState.JOINING: frozenset({MemberState.ACTIVE, MemberState.FAILED, MemberState.CLOSED}),
    MemberState.ACTIVE: frozenset({MemberState.FAILED, MemberState.CLOSED}),
    MemberState.FAILED: frozenset({MemberState.CLOSED}),
    MemberState.CLOSED: frozenset(),
}


def slot_of(bundle: str, slots: int) -> int:
    """The slot of a bundle: Kafka's default partition of its UTF-8 name among ``slots``."""
    return kafka_partition(bundle.encode("utf-8"), slots)


def namespace_of_bundle(bundle: str) -> NamespaceName | None:
    """``tenant/ns`` of ``tenant/ns/0x.._0x..`` (None if it is not shaped like one)."""
    namespace, sep, _ = bundle.rpartition("/")
    if not sep:
        return None
    try:
        return NamespaceName.parse(namespace)
    except PolicySyncError:
        return None


def ownership_topic(cluster: str) -> str:
    """The compacted ownership topic of ``cluster``."""
    return f"{OWNERSHIP_TOPIC_PREFIX}{cluster}"


def slots_topic(cluster: str) -> str:
    """The slots (request) topic of ``cluster``."""
    return f"{OWNERSHIP_SLOTS_TOPIC_PREFIX}{cluster}"


def group_id(cluster: str) -> str:
    """The ownership consumer group of ``cluster``."""
    return f"{OWNERSHIP_GROUP_PREFIX}{cluster}"


@dataclass(frozen=True, slots=True)
class Request:
    """A request on the slots topic: ``op`` on ``bundle``, asked by broker ``requester``."""

    op: RequestOp
    bundle: str
    requester: str

    @classmethod
    def from_json(cls, raw: bytes) -> Request:
        """Decode a request; raises CodecError, KeyError or ValueError if it is malformed."""
        body = decode_json(raw, "ownership request")
        return cls(RequestOp(body["op"]), str(body["bundle"]), str(body.get("requester", "")))

    def to_json(self, timestamp_ms: int) -> bytes:
        """The record value, stamped with the time it was asked."""
        return encode_json(
            {
                "op": self.op.value,
                "bundle": self.bundle,
                "requester": self.requester,
                "ts": timestamp_ms,
            }
        )


@dataclass(slots=True)
class Write:
    """One record of a fenced ownership transaction: ``value`` None is a tombstone;
    ``record`` is the decoded ownership record (None for the registry's records)."""

    key: str
    value: bytes | None
    record: OwnershipRecord | None
    topic: str
