"""Writing global policies to this cluster's ``policy-sync-global-events``.

The one fenced writer (:class:`sync.table.FencedWriter`: fence, decide, group commit,
confirm) with its own transactional id (``policy-sync.writer.policy-sync-global-events``),
deciding each write against the *merged* winner of its key (own topic and every mirror, see
:mod:`._global_table`), so a read-modify-write sees remote values. Every record carries its
stamp in headers: ``hlc`` from the cluster's :class:`~._hlc.HybridClock`, ticked past the
winner's (a write made after seeing another wins it), this cluster's name and a fresh event
id. A delete is a ``DELETE`` event with no policies, never a tombstone: it must compete in
the order like any write (docs/geo-design.md §3).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sync._constants import (
    GLOBAL_EVENTS_TOPIC,
    HEADER_AUTHOR,
    HEADER_CLUSTER,
    HEADER_EVENT_ID,
    HEADER_HLC,
    HEADER_ORIGIN,
    HEADER_TIMESTAMP,
    WRITER_TRANSACTIONAL_ID_PREFIX,
)
from sync._errors import CodecError
from sync.naming._names import TopicName
from sync.policy import Codec, Policies, PolicyTarget, WriteResult
from sync.table import Effect, judge
from sync.table._fenced_writer import Draft, FenceConfig, FencedWriter
from sync.transport import Transport

from ._global_table import GlobalTable
from ._hlc import HybridClock
from ._lww import Stamp, Version, wins

__all__ = ["GlobalPolicyWriter", "policy_decoder"]

Update = Callable[[Policies | None], Policies | None]


def policy_decoder(codec: Codec) -> Callable[[bytes, bytes | None], Policies | None]:
    """How a global topic's record becomes a value: the change-event rule
    (:func:`sync.table.judge`); DELETE is None; anything but a policy INSERT, UPDATE or
    DELETE is refused (the reader quarantines it)."""

    def decode(key: bytes, raw: bytes | None) -> Policies | None:
        verdict = judge(codec, key, raw)
        if verdict.effect is Effect.DELETE:
            return None
        if verdict.effect in (Effect.INSERT, Effect.UPDATE):
            return verdict.policies
        raise CodecError(verdict.detail or f"not a policy change ({verdict.effect.name})")

    return decode


class GlobalPolicyWriter:
    """Global policy writes of one cluster (see the module)."""

    def __init__(
        self,
        transport: Transport,
        table: GlobalTable[Policies],
        codec: Codec,
        *,
        cluster: str,
        author: str = "policy-sync",
        origin: str = "broker-shim",
        timeout_s: float = 30.0,
        clock: HybridClock | None = None,
    ) -> None:
        self._table = table
        self._codec = codec
        self.cluster = cluster
        self._author = author
        self._origin = origin
        self._clock = clock or HybridClock()
        config = FenceConfig(
            transactional_id=f"{WRITER_TRANSACTIONAL_ID_PREFIX}{GLOBAL_EVENTS_TOPIC}",
            topic=GLOBAL_EVENTS_TOPIC,
            name="global",
            timeout_s=timeout_s,
        )
        self._fence: FencedWriter[Version[Policies]] = FencedWriter(
            transport, table.readers[0], config, table.version
        )

    def update(self, target: PolicyTarget, fn: Update) -> WriteResult:
        """Decide ``target``'s new policies with ``fn(current merged value)`` and append
        them stamped; returns once this cluster's table applied the write."""
        return self._fence.write(lambda draft: self._decide(draft, target, fn))

    def update_many(self, updates: Sequence[tuple[PolicyTarget, Update]]) -> list[WriteResult]:
        """Decide every update in order, all in one transaction (a later update of a key
        sees the earlier one: the draft chains them); if one is refused, nothing is
        written. Returns once this cluster's table applied them."""
        items = list(updates)
        if not items:
            return []
        return self._fence.write(lambda draft: [self._decide(draft, t, fn) for t, fn in items])

    def _decide(
        self, draft: Draft[Version[Policies]], target: PolicyTarget, fn: Update
    ) -> WriteResult:
        key = target.key
        held, merged = draft.get(key), self._table.version(key)
        base = merged if held is None or (merged and wins(merged.stamp, held.stamp)) else held
        current = None if base is None else base.value
        new = fn(current)
        if new is not None and len(new) == 0:
            new = None
        if new == current:
            return WriteResult(target, current, None)
        now_ms = int(time.time() * 1000)
        seen = 0 if base is None else base.stamp.hlc
        stamp = Stamp(self._clock.tick(seen), self.cluster, str(uuid.uuid4()))
        action = "DELETE" if new is None else "UPDATE"
        value = self._codec.encode(self._event(target, new, action, now_ms, stamp.event_id))
        headers = [
            (HEADER_HLC, str(stamp.hlc).encode()),
            (HEADER_CLUSTER, self.cluster.encode()),
            (HEADER_EVENT_ID, stamp.event_id.encode()),
            (HEADER_AUTHOR, self._author.encode()),
            (HEADER_TIMESTAMP, str(now_ms).encode()),
            (HEADER_ORIGIN, self._origin.encode()),
        ]
        draft.put(key, Version(stamp, new), value, key_bytes=target.key_bytes, headers=headers)
        return WriteResult(target, new, action)

    def close(self) -> None:
        """Stop the writer thread (queued writes fail)."""
        self._fence.close()

    def _event(
        self,
        target: PolicyTarget,
        policies: Policies | None,
        action: str,
        now_ms: int,
        event_id: str,
    ) -> dict[str, Any]:
        topic: TopicName | None = target.topic
        fields: dict[str, Any] | None = None
        if policies is not None:
            fields = policies.to_avro()
            fields["isGlobal"] = True
        return {
            "eventType": "TOPIC_POLICY",
            "actionType": action,
            "topicPoliciesEvent": {
                "domain": "" if topic is None else topic.domain.value,
                "tenant": target.tenant,
                "namespace": target.namespace,
                "topic": "" if topic is None else topic.local_name,
                "policies": fields,
            },
            "replicateTo": [self.cluster],
            "metadata": {
                "eventId": event_id,
                "author": self._author,
                "timestampMillis": now_ms,
                "origin": self._origin,
            },
        }
