"""Consumer-group membership over confluent-kafka: the real side of ``GroupConsumer``.

Kept apart from :mod:`sync.transport._kafka` (which imports from here) so the group
protocol -- cooperative-sticky assignment, rebalance callbacks, generations, KIP-447
offset fencing -- reads in one place.

Facts this relies on (checked against a real broker by the contract tests):

* ``partition.assignment.strategy=cooperative-sticky``: on a membership change only the
  partitions that move are revoked, and ``on_revoke`` runs while the member's generation
  is still valid, so it may still commit a transaction.
* A member whose session expired learns it in ``on_lost``; its old group metadata makes
  ``send_offsets_to_transaction`` fail with ``ILLEGAL_GENERATION``/``UNKNOWN_MEMBER_ID``.
* With ``isolation.level=read_committed`` librdkafka fetches committed offsets with
  ``require_stable``: a new owner of a partition waits until a transaction of the previous
  owner that commits offsets for it is committed or aborted.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any, cast

from confluent_kafka import Consumer as _RdConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from sync._errors import ConfigurationError, GroupFencedError, TransportError

from ._base import (
    OFFSET_INVALID,
    GroupDescription,
    GroupMember,
    GroupMetadata,
    KafkaConfig,
    Message,
    RebalanceListener,
)
from ._kafka_clients import client_id as _client_id
from ._kafka_clients import created, fetched
from ._kafka_failures import GROUP_FENCED_CODES, has_code, kafka_error_of

logger = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger("sync.librdkafka")

__all__ = ["KafkaGroupConsumer", "describe_group"]


# librdkafka serializes ConsumerGroupMetadata as b"CGMDv2:" + generation (int32, host byte
# order) + group id + NUL + member id + ...; only the generation is read here, for logs
# and records, never to make a fencing decision (the broker makes those).
_CGMD_MAGIC = b"CGMDv2:"

# Kafka's group states as the Java admin client spells them.
_STATE_NAMES = {
    "STABLE": "Stable",
    "PREPARING_REBALANCE": "PreparingRebalance",
    "COMPLETING_REBALANCE": "CompletingRebalance",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "UNKNOWN": "Unknown",
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
}


def _group_error(exc: KafkaException, what: str) -> TransportError:
    err = kafka_error_of(exc)
    if err is not None and err.code() in GROUP_FENCED_CODES:
        return GroupFencedError(f"{what}: group generation is no longer valid ({err.str()})")
    return TransportError(f"{what} failed: {exc}")


def generation_of(metadata: GroupMetadata) -> int:
    """The generation inside librdkafka's serialized group metadata (-1 if unreadable)."""
    raw = metadata if isinstance(metadata, bytes) else b""
    if not raw.startswith(_CGMD_MAGIC) or len(raw) < len(_CGMD_MAGIC) + 4:
        return -1
    start = len(_CGMD_MAGIC)
    return int.from_bytes(raw[start : start + 4], sys.byteorder, signed=True)


class KafkaGroupConsumer:
    """A cooperative-sticky consumer-group member reading one topic, offsets never
    auto-committed (commit them in a transaction with ``send_offsets_to_transaction``)."""

    def __init__(
        self,
        config: KafkaConfig,
        group_id: str,
        *,
        client_id: str | None,
        session_timeout_ms: int,
        heartbeat_interval_ms: int | None,
        read_committed: bool,
        fetch_wait_max_ms: int,
    ) -> None:
        heartbeat = heartbeat_interval_ms or max(100, session_timeout_ms // 3)
        # An explicit client id is the member's identity in describe_group (kept as is);
        # the threads are recorded under it with the kind and owner appended.
        label = _client_id(client_id or config.client_id, "group")
        conf: dict[str, Any] = {
            "bootstrap.servers": config.bootstrap_servers,
            "client.id": client_id or label,
            "group.id": group_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": heartbeat,
            # A member that stops polling this long is thrown out even if it heartbeats.
            "max.poll.interval.ms": max(60_000, session_timeout_ms * 3),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "fetch.wait.max.ms": fetch_wait_max_ms,
            "auto.offset.reset": "earliest",
            "logger": _RDKAFKA_LOG,
        }
        conf.update(config.extra)
        self._group_id = group_id
        self._session_timeout_ms = session_timeout_ms
        self._topic: str | None = None
        self._listener: RebalanceListener | None = None
        self._consumer = created(label, lambda: _RdConsumer(conf))

    # -- rebalance callbacks (librdkafka calls them from inside poll/consume/close) -------
    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if self._listener is not None:
            self._listener.on_assign(sorted(tp.partition for tp in partitions))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # The listener runs first: its generation is still valid until we give them up.
        try:
            if self._listener is not None:
                self._listener.on_revoke(sorted(tp.partition for tp in partitions))
        finally:
            consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        try:
            if self._listener is not None:
                self._listener.on_lost(sorted(tp.partition for tp in partitions))
        finally:
            consumer.incremental_unassign(partitions)

    # -- the GroupConsumer protocol --------------------------------------------------------
    def subscribe(self, topic: str, listener: RebalanceListener) -> None:
        self._topic = topic
        self._listener = listener
        self._consumer.subscribe(
            [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]:
        """Wait up to ``timeout_s`` for the first record, then take what is already fetched."""
        try:
            batch = fetched(self._consumer, max_messages, timeout_s)
        except KafkaException as exc:
            raise _group_error(exc, f"consume in group {self._group_id!r}") from exc
        kept: list[Message] = []
        for msg in batch:
            err = msg.error()
            if err is None:
                kept.append(cast(Message, msg))
            elif err.fatal():
                raise TransportError(f"group consumer {self._group_id!r} failed: {err.str()}")
            elif err.code() == KafkaError.INVALID_SESSION_TIMEOUT:
                raise ConfigurationError(
                    f"Kafka refused session.timeout.ms={self._session_timeout_ms} for group "
                    f"{self._group_id!r}: it must lie within the broker's "
                    "group.min.session.timeout.ms and group.max.session.timeout.ms "
                    "(stock Kafka: 6000..1800000); raise the timeout or lower the broker's minimum"
                )
            elif err.code() != KafkaError._PARTITION_EOF:  # noqa: SLF001 - public constant
                logger.warning(
                    "consume error on %s[%s] in group %s: %s",
                    msg.topic(),
                    msg.partition(),
                    self._group_id,
                    err.str(),
                )
        return kept

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self._consumer.assignment())

    def committed(self, partitions: Sequence[int], timeout_s: float) -> dict[int, int]:
        if self._topic is None or not partitions:
            return {}
        try:
            tps = self._consumer.committed(
                [TopicPartition(self._topic, p) for p in partitions], timeout=timeout_s
            )
        except KafkaException as exc:
            raise _group_error(exc, f"committed offsets of group {self._group_id!r}") from exc
        out: dict[int, int] = {}
        for tp in tps:
            if tp.error is not None:
                raise TransportError(
                    f"committed offset of {self._topic}[{tp.partition}] in group "
                    f"{self._group_id!r}: {tp.error}"
                )
            out[tp.partition] = tp.offset if tp.offset >= 0 else OFFSET_INVALID
        return out

    def seek(self, partition: int, offset: int) -> None:
        if self._topic is None:
            return
        try:
            self._consumer.seek(TopicPartition(self._topic, partition, offset))
        except KafkaException as exc:
            raise _group_error(exc, f"seek {self._topic}[{partition}]@{offset}") from exc

    def group_metadata(self) -> GroupMetadata:
        return cast(GroupMetadata, self._consumer.consumer_group_metadata())

    def generation(self) -> int:
        return generation_of(self._consumer.consumer_group_metadata())

    def member_id(self) -> str:
        return str(self._consumer.memberid() or "")

    def close(self) -> None:
        self._consumer.close()


def describe_group(admin: AdminClient, group_id: str, timeout_s: float) -> GroupDescription:
    """Ask the group coordinator for ``group_id``'s state and members."""
    try:
        desc = admin.describe_consumer_groups([group_id], request_timeout=timeout_s)[
            group_id
        ].result()
    except KafkaException as exc:
        if has_code(exc, KafkaError.GROUP_ID_NOT_FOUND):
            return GroupDescription(group_id, "Dead", ())
        raise TransportError(f"describe consumer group {group_id!r} failed: {exc}") from exc
    state = getattr(desc.state, "name", str(desc.state))
    members = []
    for m in desc.members:
        assignment: dict[str, list[int]] = {}
        for tp in m.assignment.topic_partitions if m.assignment is not None else ():
            assignment.setdefault(tp.topic, []).append(tp.partition)
        members.append(
            GroupMember(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.host,
                assignment={t: tuple(sorted(ps)) for t, ps in assignment.items()},
            )
        )
    members.sort(key=lambda member: member.member_id)
    return GroupDescription(group_id, _STATE_NAMES.get(state, state), tuple(members))
