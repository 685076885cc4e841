"""Policy writes that never lose an update: policy records decided by the fenced writer.

The mechanism (one shared ``transactional.id`` as the fence, decide against the cache
plus what is already decided, group commit, retry from a fresh view when fenced,
read-your-writes) is :mod:`sync.table._fenced_writer`'s, shared with the registry metadata writer.
This module decides *policy* records: it merges ``fn(current)``, picks the action
(INSERT/UPDATE/DELETE), and encodes the change event or the tombstone's headers.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sync._constants import (
    HEADER_AUTHOR,
    HEADER_EVENT_ID,
    HEADER_ORIGIN,
    HEADER_TIMESTAMP,
    WRITER_TRANSACTIONAL_ID_PREFIX,
)
from sync._errors import PolicySyncError
from sync.table._fenced_writer import Draft, FenceConfig, FencedWriter, Ticket
from sync.transport import Header, Transport

from ._codec import ACTION_INSERT, ACTION_UPDATE
from ._policies import Policies, PolicyScope, PolicyTarget
from ._policy_cache import PolicyCache

logger = logging.getLogger(__name__)

__all__ = ["PolicyWriter", "WriteResult", "WriterConfig"]

_UUID_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID_SET = (0x4000 << 64) | (0x8000 << 48)


def _uuid4(bits: int) -> str:
    """``str(uuid.UUID(int=bits, version=4))`` without building a UUID object."""
    h = "%032x" % ((bits & _UUID_CLEAR) | _UUID_SET)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


Update = Callable[[Policies | None], Policies | None]


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Who writes, and how hard to try."""

    author: str = "anonymous"
    origin: str = f"policy-sync@{socket.gethostname()}"
    cluster: str = "standalone"
    max_attempts: int = 50
    timeout_s: float = 30.0
    transaction_batch: int = 5_000
    #: Lets bulk transactions go out in large batches. A single write does not wait for
    #: it: committing a transaction flushes, and librdkafka's flush ignores linger.
    linger_ms: int = 20
    #: Group commit: at most this many writes share one transaction, and the writer waits
    #: at most ``group_linger_ms`` for more once one is queued (0: take what is queued
    #: while the previous transaction was in flight).
    group_max_writes: int = 256
    group_linger_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a write did: the resulting value and where it landed (None if nothing changed)."""

    target: PolicyTarget
    policies: Policies | None
    action: str | None
    partition: int | None = None
    offset: int | None = None
    #: Offsets (per partition, exclusive) the writer's cache had applied when the write
    #: returned: another cache that reaches them shows this write (read-your-writes).
    positions: Mapping[int, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.action is not None


class PolicyWriter:
    """Fenced, group-committed writes of policy records, each confirmed by the local cache.

    The fence, group commit, retries and read-your-writes are :class:`FencedWriter`'s;
    this class decides policy records (merge, action, encoding) against its draft.
    """

    def __init__(
        self,
        transport: Transport,
        cache: PolicyCache,
        config: WriterConfig | None = None,
    ) -> None:
        self.config = config or WriterConfig()
        self._cache = cache
        self._topic = cache.config.topic
        self._fence: FencedWriter[Policies] = FencedWriter(
            transport,
            cache,
            FenceConfig(
                transactional_id=WRITER_TRANSACTIONAL_ID_PREFIX + self._topic,
                topic=self._topic,
                name="policy",
                timeout_s=self.config.timeout_s,
                max_attempts=self.config.max_attempts,
                max_ops=self.config.group_max_writes,
                max_records=max(1, self.config.transaction_batch),
                linger_ms=self.config.group_linger_ms,
                producer_linger_ms=self.config.linger_ms,
            ),
            cache.get,
        )
        # Event ids need uniqueness, not secrecy: one urandom seed, then a fast PRNG.
        self._ids = random.Random(os.urandom(16))  # noqa: S311

    @property
    def fence(self) -> FencedWriter[Policies]:
        """The fenced writer underneath (counters: transactions, epochs, fenced_retries)."""
        return self._fence

    @property
    def fenced_retries(self) -> int:
        return self._fence.fenced_retries

    def update(self, target: PolicyTarget, fn: Update) -> WriteResult:
        """Apply ``fn(current) -> new`` to one target; ``None`` from fn deletes it.

        ``fn`` runs on the writer thread against the latest decided state and may raise
        (e.g. :class:`~sync._errors.NotFoundError`) to refuse: then nothing is written.
        """
        return self.update_many([(target, fn)])[0]

    def update_many(self, updates: Iterable[tuple[PolicyTarget, Update]]) -> list[WriteResult]:
        """Apply many updates, in order, in transactions of ``transaction_batch`` records.

        Each chunk is one write of the fenced writer: later chunks are decided against
        what earlier ones decided, without waiting for the cache, and fail if an earlier
        chunk failed. Returns once the cache has applied them all (read-your-writes).
        """
        items = list(updates)
        size = max(1, self.config.transaction_batch)
        tickets: list[Ticket[list[tuple[PolicyTarget, Policies | None, str | None]]]] = []
        previous: Ticket[Any] | None = None
        for start in range(0, len(items), size):
            chunk = items[start : start + size]
            previous = self._fence.submit(self._decider(chunk), after=previous)
            tickets.append(previous)
        results: list[WriteResult] = []
        for ticket in tickets:
            planned = ticket.result()
            reports, done = iter(ticket.reports), ticket.positions
            for target, policies, action in planned:
                if action is None:
                    results.append(WriteResult(target, policies, None, positions=done))
                else:
                    r = next(reports)
                    results.append(
                        WriteResult(target, policies, action, r.partition, r.offset, done)
                    )
        return results

    def update_each(
        self, updates: Iterable[tuple[PolicyTarget, Update]], *, applied: bool = True
    ) -> list[WriteResult | PolicySyncError]:
        """Apply independent updates, each its own write (they share group commits, and
        one refused write does not fail the others): per update, its result or the error
        that refused it. Returns once the cache has applied them all (read-your-writes),
        or with ``applied=False`` once they are committed (the caller waits for each
        result's ``positions`` in another cache: writes forwarded by another sidecar)."""
        tickets = [
            (target, self._fence.submit(self._decider([(target, fn)]))) for target, fn in updates
        ]
        out: list[WriteResult | PolicySyncError] = []
        for target, ticket in tickets:
            try:
                ((_, policies, action),) = ticket.result(applied=applied)
            except PolicySyncError as exc:
                out.append(exc)
                continue
            if action is None:
                out.append(WriteResult(target, policies, None, positions=ticket.positions))
            else:
                r = ticket.reports[0]
                out.append(
                    WriteResult(target, policies, action, r.partition, r.offset, ticket.positions)
                )
        return out

    def close(self) -> None:
        self._fence.close()

    # -- internals ---------------------------------------------------------------------
    def _decider(
        self, items: list[tuple[PolicyTarget, Update]]
    ) -> Callable[[Draft[Policies]], list[tuple[PolicyTarget, Policies | None, str | None]]]:
        def decide(
            draft: Draft[Policies],
        ) -> list[tuple[PolicyTarget, Policies | None, str | None]]:
            planned: list[tuple[PolicyTarget, Policies | None, str | None]] = []
            now_ms = int(time.time() * 1000)
            for target, fn in items:
                key = target.key
                current = draft.get(key)
                new = fn(current)
                if new is not None and len(new) == 0:
                    new = None  # an empty policy set is a delete: tombstones compact away
                if new == current:
                    planned.append((target, current, None))
                    continue
                if new is None:
                    action = "DELETE"
                    draft.put(
                        key, None, None, key_bytes=target.key_bytes,
                        headers=self._tombstone_headers(now_ms),
                    )  # fmt: skip
                else:
                    action = ACTION_UPDATE if current else ACTION_INSERT
                    value = self._encode(target, new, action, now_ms)
                    draft.put(key, new, value, key_bytes=target.key_bytes)
                planned.append((target, new, action))
            return planned

        return decide

    def _tombstone_headers(self, now_ms: int) -> list[Header]:
        """A delete's event metadata: a tombstone has no body, so it travels as headers."""
        return [
            (HEADER_AUTHOR, self.config.author.encode()),
            (HEADER_EVENT_ID, str(uuid.UUID(int=self._ids.getrandbits(128), version=4)).encode()),
            (HEADER_TIMESTAMP, str(now_ms).encode()),
            (HEADER_ORIGIN, self.config.origin.encode()),
        ]

    def _encode(self, target: PolicyTarget, policies: Policies, action: str, now_ms: int) -> bytes:
        fields: dict[str, Any] = policies.to_avro()
        if target.scope is PolicyScope.GLOBAL:
            fields["isGlobal"] = True
        elif target.scope is PolicyScope.LOCAL:
            fields["isGlobal"] = False
        topic = target.topic
        event: Mapping[str, Any] = {
            "eventType": "NAMESPACE_POLICY" if topic is None else "TOPIC_POLICY",
            "actionType": action,
            "topicPoliciesEvent": {
                "domain": "" if topic is None else topic.domain.value,
                "tenant": target.tenant,
                "namespace": target.namespace,
                "topic": "" if topic is None else topic.local_name,
                "policies": fields,
            },
            "replicateTo": [self.config.cluster],
            "metadata": {
                "eventId": _uuid4(self._ids.getrandbits(128)),
                "author": self.config.author,
                "timestampMillis": now_ms,
                "origin": self.config.origin,
            },
        }
        return self._cache.codec.encode(event)
