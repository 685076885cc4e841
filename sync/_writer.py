"""Policy writes that never lose an update: decide under a Kafka fence, then append.

Every writer of one change-events topic uses the same ``transactional.id``. Kafka
gives the id to one producer epoch at a time: ``init_transactions`` fences every
older producer and aborts its open transaction. A writer therefore:

1. holds the fence (``init_transactions`` once, again after being fenced);
2. waits until its own cache has applied everything committed so far;
3. computes the new value from that cache, with a pure function (no shared
   mutable object is ever modified);
4. writes it in a transaction and commits. If another writer took the fence in
   between, the commit fails with ProducerFenced and nothing becomes visible;
   the writer starts again from step 1;
5. returns only once its own cache has applied the write (read-your-writes).

Writes in one process are serialized by a lock; across processes the fence does
it. The last record of every key in the log is thus always the true state, as
Kafka's compaction (which keeps only the last record) requires.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._cache import PolicyCache
from ._codec import ACTION_INSERT, ACTION_UPDATE
from ._constants import (
    HEADER_AUTHOR,
    HEADER_EVENT_ID,
    HEADER_ORIGIN,
    HEADER_TIMESTAMP,
    WRITER_TRANSACTIONAL_ID_PREFIX,
)
from ._errors import ProducerFencedError, TransportError, WriteConflictError
from ._policies import Policies, PolicyScope, PolicyTarget
from .transport import DeliveryReport, Header, Producer, Transport

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


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a write did: the resulting value and where it landed (None if nothing changed)."""

    target: PolicyTarget
    policies: Policies | None
    action: str | None
    partition: int | None = None
    offset: int | None = None

    @property
    def changed(self) -> bool:
        return self.action is not None


class PolicyWriter:
    """Serialized, fenced writes of policy records, each confirmed by the local cache."""

    def __init__(
        self,
        transport: Transport,
        cache: PolicyCache,
        config: WriterConfig | None = None,
    ) -> None:
        self.config = config or WriterConfig()
        self._transport = transport
        self._cache = cache
        self._topic = cache.config.topic
        self._tid = WRITER_TRANSACTIONAL_ID_PREFIX + self._topic
        self._producer: Producer | None = None
        #: Values this update_many call committed under the current producer epoch.
        self._committed: dict[str, Policies | None] = {}
        self._unapplied = False  # a bulk transaction committed, not yet seen by the cache
        self._lock = threading.Lock()
        self.fenced_retries = 0
        # Event ids need uniqueness, not secrecy: one urandom seed, then a fast PRNG.
        self._ids = random.Random(os.urandom(16))  # noqa: S311

    def update(self, target: PolicyTarget, fn: Update) -> WriteResult:
        """Apply ``fn(current) -> new`` to one target; ``None`` from fn deletes it."""
        return self.update_many([(target, fn)])[0]

    def update_many(self, updates: Iterable[tuple[PolicyTarget, Update]]) -> list[WriteResult]:
        """Apply many updates, in order, in transactions of ``transaction_batch`` records.

        While one producer epoch holds the fence, nobody else can have committed: what
        this call committed in earlier transactions is known without reading it back
        (``_committed``), so transactions follow each other without waiting for the cache;
        the call returns once the cache has applied them all (read-your-writes). If the
        fence is lost, the overlay goes with it and the cache is synced again.
        """
        items = list(updates)
        results: list[WriteResult] = []
        with self._lock:
            self._committed, self._unapplied = {}, False
            try:
                size = max(1, self.config.transaction_batch)
                for start in range(0, len(items), size):
                    results.extend(self._write_chunk(items[start : start + size]))
                if self._unapplied:
                    self._cache.sync_written(max(1.0, self.config.timeout_s))
            finally:
                self._committed, self._unapplied = {}, False
        return results

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.close()
                self._producer = None

    # -- internals ---------------------------------------------------------------------
    def _fresh_producer(self, timeout_s: float) -> Producer:
        if self._producer is None:
            producer = self._transport.producer(
                transactional_id=self._tid, linger_ms=self.config.linger_ms
            )
            try:
                producer.init_transactions(timeout_s)
            except TransportError:
                producer.close()
                raise
            self._producer = producer
            self._committed = {}
            # We may have been fenced out before: what others committed must be seen.
            self._cache.sync(timeout_s)
        return self._producer

    def _write_chunk(self, items: list[tuple[PolicyTarget, Update]]) -> list[WriteResult]:
        delay = 0.005
        last: TransportError | None = None
        deadline = time.monotonic() + self.config.timeout_s
        attempt = 0
        for attempt in range(1, self.config.max_attempts + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return self._attempt(items, remaining)
            except ProducerFencedError as exc:
                self.fenced_retries += 1
                last = exc
                self._producer = None
                logger.info("policy writer fenced (attempt %d); retrying", attempt)
            except TransportError as exc:
                # Outcome unknown (e.g. an EndTxn error): a new producer epoch aborts our
                # transaction if it is still open; if it did commit, the retry re-reads
                # the cache and the merge finds nothing left to change.
                last = exc
                self._abort_quietly()
                logger.warning("policy write failed (attempt %d): %s; retrying", attempt, exc)
            time.sleep(delay * (0.5 + random.random()))  # noqa: S311 - jitter, not crypto
            delay = min(delay * 2, 0.5)
        if isinstance(last, ProducerFencedError):
            raise WriteConflictError(
                f"gave up after {attempt} attempts in {self.config.timeout_s:.0f}s: other "
                "writers kept fencing this one; retry later"
            ) from last
        raise TransportError(
            f"policy write failed after {attempt} attempts in {self.config.timeout_s:.0f}s: "
            f"{last}; is Kafka reachable?"
        ) from last

    def _abort_quietly(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.abort_transaction(5.0)
            except TransportError:
                logger.debug("abort after a failed write failed too", exc_info=True)

    def _attempt(
        self, items: list[tuple[PolicyTarget, Update]], timeout_s: float
    ) -> list[WriteResult]:
        producer = self._fresh_producer(timeout_s)
        overlay: dict[str, Policies | None] = {}
        committed = self._committed
        get = self._cache.get
        planned: list[tuple[PolicyTarget, Policies | None, str | None]] = []
        for target, fn in items:
            key = target.key
            if key in overlay:
                current = overlay[key]
            else:
                current = committed[key] if key in committed else get(key)
            new = fn(current)
            if new is not None and len(new) == 0:
                new = None  # an empty policy set is a delete: tombstones compact away
            if new == current:
                planned.append((target, current, None))
                continue
            action = "DELETE" if new is None else (ACTION_UPDATE if current else ACTION_INSERT)
            overlay[key] = new
            planned.append((target, new, action))
        if all(action is None for _, _, action in planned):
            return [WriteResult(t, p, None) for t, p, _ in planned]

        reports: list[DeliveryReport] = []
        # Bulk writes skip per-record delivery reports (a Python callback each): a commit
        # fails if any record failed, and read-your-writes then waits for the end offsets.
        bulk = sum(action is not None for _, _, action in planned) > 1
        on_delivery = None if bulk else reports.append
        producer.begin_transaction()
        now_ms = int(time.time() * 1000)
        for target, policies, planned_action in planned:
            if planned_action is None:
                continue
            value = None
            headers = None
            if policies is not None:
                value = self._encode(target, policies, planned_action, now_ms)
            else:
                headers = self._tombstone_headers(now_ms)
            producer.produce(
                self._topic, target.key_bytes, value, headers=headers, on_delivery=on_delivery
            )
        producer.commit_transaction(timeout_s)
        self._committed.update(overlay)
        if bulk:
            # update_many waits for the cache once, after its last transaction.
            self._unapplied = True
            return [WriteResult(t, p, a) for t, p, a in planned]
        producer.poll(0)
        failed = [r for r in reports if r.error]
        if failed:
            raise TransportError(
                f"{len(failed)} policy records were not written: {failed[0].error}"
            )
        wanted: dict[int, int] = {}
        for r in reports:
            wanted[r.partition] = max(wanted.get(r.partition, 0), r.offset + 1)
        self._cache.wait_for(wanted, max(1.0, timeout_s))
        # Delivery reports arrive per partition, not in produce order; one key always
        # lands in one partition, so its reports in offset order follow its writes.
        by_key: dict[bytes | None, list[DeliveryReport]] = {}
        for r in sorted(reports, key=lambda r: r.offset):
            by_key.setdefault(r.key, []).append(r)
        results = []
        for target, policies, done in planned:
            if done is None:
                results.append(WriteResult(target, policies, None))
            else:
                r = by_key[target.key_bytes].pop(0)
                results.append(WriteResult(target, policies, done, r.partition, r.offset))
        return results

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
