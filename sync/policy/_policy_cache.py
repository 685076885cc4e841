"""The policy cache: a replica of ``__change_events`` in every sidecar (Pulsar TableView).

The replay/tail machinery, positions, ``wait_for``/``sync`` and the lifecycle are the
one compacted-table reader's (:class:`sync.table.TableReader`), shared with the
registry, ownership and metadata tables. Lifecycle::

    NEW ──start()──▶ BOOTSTRAPPING ──caught up──▶ READY ──close()──▶ CLOSED
                         │  └──time limit / error──▶ FAILED ──close()──▶ CLOSED
                         └──close()──▶ CLOSED

Bootstrap replays from the start (or from a still-valid local snapshot) up to the
end offsets captured when it began, then tails. During replay a record is only
classified from its header and first two body bytes; values are kept as raw bytes
and decoded on first read, so a replay decodes nothing it does not need. After
READY the reader verifies the replayed values in small chunks between tail
batches, so undecodable bodies are still found, counted and quarantined.

What each record does is :mod:`sync.table._rules` (one rule for every reader): an
unreadable record makes its key absent and is quarantined (:class:`sync.table.Quarantine`,
copied once to the dead-letter topic). The fast path only postpones decoding, never
changes the outcome: an INSERT that meets a stored value not decoded yet decodes it
first (an unreadable one means the key is absent), records whose first bytes classify as
DELETE or ignored are judged whole, and :meth:`PolicyCache.digest`, :meth:`keys` and
:meth:`raw_items` finish the verification before they answer, so a live cache and a
fresh replay of the same log hold the same keys and values.

Values are held packed (:mod:`._policy_store`: ~200 bytes per policy instead of ~310) and
unpacked byte for byte when read. One thread (the reader) mutates the store; reads
are lock-free dict lookups.

The replay fast path, the live path, the background verification of what the fast path
did not decode and the snapshots are one invariant over one packed store (a live cache and
a fresh replay hold the same keys and values), so they stay here together. Around them,
each in its own module: the settings and counters (:mod:`._policy_cache_config`), the
classification by first bytes (:mod:`._policy_classify`), the listeners
(:mod:`._policy_listeners`), the store, the snapshot format, the record rule and the
search for a dropped record's offset (:func:`sync.table._quarantine.locate_records`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sync._constants import SINGLE_OBJECT_HEADER_LEN, SINGLE_OBJECT_MAGIC
from sync.naming._names import TopicName
from sync.table import Effect, PoisonKind, TableReader, judge
from sync.table._quarantine import locate_records
from sync.transport import Message, Transport

from ._codec import Codec
from ._policies import Policies, PolicyTarget, effective_policies
from ._policy_cache_config import CacheConfig, CacheState, CacheStats
from ._policy_classify import HeaderTables, header_problem_of, header_tables
from ._policy_listeners import Listener, ListenerDispatcher
from ._policy_snapshot import Snapshot, load_snapshot, save_snapshot
from ._policy_store import PolicyStore

logger = logging.getLogger(__name__)

__all__ = ["CacheConfig", "CacheState", "CacheStats", "Listener", "PolicyCache"]

_INSERT, _UPDATE = Effect.INSERT, Effect.UPDATE


@dataclass(slots=True)
class _Counters:
    applied: int = 0
    bootstrap_records: int = 0
    ignored: int = 0
    conflicting_inserts: int = 0
    listener_errors: int = 0


class PolicyCache(TableReader):
    """Every policy of one change-events topic, kept current in memory."""

    def __init__(
        self,
        transport: Transport,
        *,
        config: CacheConfig | None = None,
        codec: Codec | None = None,
        on_apply: Callable[[float], None] | None = None,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        """``on_apply``: called with each applied change's age (seconds since it was
        written); ``on_ready``: called once replay is done, on the reader thread (the
        sidecar gives the heap freed by replay back to the OS there)."""
        self.config = cfg = config or CacheConfig()
        super().__init__(
            transport,
            cfg.topic_spec(),
            what=f"policy cache for {cfg.topic}",
            create_topic=cfg.create_topic,
            bootstrap_timeout_s=cfg.bootstrap_timeout_s,
            replay_batch=cfg.batch_size,
            tail_batch=cfg.batch_size,
            tail_poll_s=cfg.tail_poll_s,
            fetch_wait_max_ms=cfg.fetch_wait_max_ms,
            dead_letter=cfg.dead_letter,
            thread_name="policy-reader",
            stall_check_s=cfg.stall_check_s,
        )
        self.codec = codec or Codec()
        self._on_apply = on_apply
        self._on_ready_callback = on_ready
        self._quarantine = self.quarantine
        self._store = PolicyStore(self.codec.header)
        self._decoded: OrderedDict[bytes, tuple[bytes, Policies | None]] = OrderedDict()
        self._decoded_lock = threading.Lock()
        self._counters = _Counters()
        self._dispatcher = ListenerDispatcher(self._listener_failed)
        #: stored values found unreadable after they were stored: (key, token, reason)
        self._lazy_poison: list[tuple[bytes, bytes, str]] = []
        #: dropped values still to be located and copied to the dead-letter topic
        self._pending_dlq: list[tuple[bytes, bytes, str]] = []
        self._unverified: list[bytes] = []
        self._verify_prefixes: list[bytes] = []
        self._verify_prefix = b""
        self._verify_locals: list[bytes] = []
        self._snapshot_note = "none"
        self._last_snapshot = time.monotonic()
        self._snapshot_thread: threading.Thread | None = None

    # -- lifecycle (sync.table.TableReader) -----------------------------------------------
    def start(self) -> PolicyCache:
        """Begin bootstrapping in a background reader thread (returns at once)."""
        self._start_reader()
        return self

    def _on_close(self, was_ready: bool) -> None:
        if self._snapshot_thread is not None:
            self._snapshot_thread.join(timeout=60)
        if was_ready and self.config.snapshot_path is not None:
            self._write_snapshot(self._store.packed_state(), dict(self._applied))
        self._dispatcher.close()

    def _on_ready(self) -> None:
        self._counters.bootstrap_records = self.bootstrap_records
        self._verify_prefixes = self._store.prefixes()
        if self._on_ready_callback is not None:
            self._on_ready_callback()
        logger.info(
            "policy cache %s: %d policies (%s)",
            self.config.topic,
            len(self._store),
            self._snapshot_note,
        )

    def _restore(self, starts: Mapping[int, int]) -> dict[int, int]:
        return self._restore_snapshot(starts)

    @property
    def _delete_retention_ms(self) -> int:
        return int(self._topic_config.get("delete.retention.ms", "86400000"))

    def _apply_replay(
        self, batch: Sequence[Message], stored_keys: list[bytes] | None = None
    ) -> None:
        """The hot path of replay: classify by header bytes, store raw values.

        Also used while tailing when nobody listens: then the keys stored are handed
        to the verifier (``stored_keys``), which decodes them between batches.
        Positions are not tracked per record: the consumer's position is read after
        the batch.
        """
        keys = [m.key() for m in batch]
        values = [m.value() for m in batch]
        self._counters.applied += len(batch)
        fast = self._header_tables()
        heads = [None if v is None else v[:12] for v in values]
        store = self._store
        if None not in keys:
            if all(h in fast.updates for h in heads):
                # A batch of current-schema UPDATEs: Pulsar's rule is "replace".
                store.put_many(keys, values)  # type: ignore[arg-type]
                if stored_keys is not None:
                    stored_keys.extend(keys)  # type: ignore[arg-type]
                return
            if all(h in fast.inserts for h in heads):
                # INSERTs: "add if absent". A key counts as present only if its stored
                # value is readable: the rare conflicts are checked in log order.
                conflicts = store.insert_many(keys, values)  # type: ignore[arg-type]
                for i in conflicts:
                    self._insert(keys[i], values[i], stored_keys)  # type: ignore[arg-type]
                if stored_keys is not None:
                    stored_keys.extend(keys)  # type: ignore[arg-type]
                return
        for m, k, v in zip(batch, keys, values, strict=True):
            try:
                self._apply_one(m, k, v, stored_keys)
            except Exception as exc:  # noqa: BLE001 - no record may stop the reader
                self._poison(m, PoisonKind.UNDECODABLE.value, f"{type(exc).__name__}: {exc}")

    def _insert(self, k: bytes, v: bytes, stored_keys: list[bytes] | None) -> None:
        """An INSERT of a key found in the store: applies if the stored value is poison.

        A conflicting INSERT changes nothing only if it is readable itself: one whose body
        does not decode is poison, and the key becomes absent (the rule judges the record
        met in the log, whatever the key held before; live readers judge it first).
        """
        if self._present(k):
            verdict = judge(self.codec, k, v)
            if verdict.effect is Effect.POISON:
                self._drop_stored(k, v, verdict.detail)
                return
            self._counters.conflicting_inserts += 1
            return
        self._store.put(k, v)
        if stored_keys is not None:
            stored_keys.append(k)

    def _present(self, k: bytes) -> bool:
        """Whether ``k`` holds a readable value (one stored but found unreadable now is
        dropped and quarantined: the key is absent, as it is live and in a fresh replay)."""
        token = self._store.token(k)
        if token is None:
            return False
        with self._decoded_lock:
            hit = self._decoded.get(k)
        if hit is not None and hit[0] is token:
            return True
        value = self._store.unpack(k, token)
        verdict = judge(self.codec, k, value)
        if verdict.effect is Effect.POISON:
            self._drop_stored(k, value, verdict.detail)
            return False
        self._remember(k, token, verdict.policies)
        return True

    def _apply_one(
        self, m: Message, k: bytes | None, v: bytes | None, stored_keys: list[bytes] | None
    ) -> None:
        store = self._store
        if k is None:
            self._poison(m, PoisonKind.NO_KEY.value, "record has no key")
            return
        if v is None:
            store.pop(k)
            return
        table = self._header_tables().actions.get(v[2:SINGLE_OBJECT_HEADER_LEN])
        if v[:2] != SINGLE_OBJECT_MAGIC or table is None or len(v) < SINGLE_OBJECT_HEADER_LEN + 2:
            self._poison(m, *header_problem_of(self.codec, v))
            return
        action = table.get(v[SINGLE_OBJECT_HEADER_LEN : SINGLE_OBJECT_HEADER_LEN + 2])
        if action == _UPDATE:
            store.put(k, v)
            if stored_keys is not None:
                stored_keys.append(k)
        elif action == _INSERT:
            if k in store:
                self._insert(k, v, stored_keys)
            else:
                store.put(k, v)
                if stored_keys is not None:
                    stored_keys.append(k)
        else:
            # DELETE, ignored events and bytes that are no valid enum index: rare, and
            # what they do depends on whether the whole record decodes. Judge it whole.
            verdict = judge(self.codec, k, v)
            if verdict.effect is Effect.POISON:
                self._poison(m, verdict.kind or PoisonKind.UNDECODABLE.value, verdict.detail)
            elif verdict.effect is Effect.DELETE:
                store.pop(k)
            else:
                self._counters.ignored += 1

    def _header_tables(self) -> HeaderTables:
        tables = getattr(self, "_tables", None)
        if tables is None:
            tables = self._tables = header_tables(self.codec)
        return tables

    # -- snapshots --------------------------------------------------------------------
    def _restore_snapshot(self, starts: Mapping[int, int]) -> dict[int, int]:
        path = self.config.snapshot_path
        if path is None:
            return {}
        snap, why = load_snapshot(path)
        reject = None
        if snap is None:
            reject = why
        elif snap.topic != self.config.topic or snap.topic_id != self._topic_id:
            reject = "snapshot is of another topic (or the topic was recreated)"
        elif snap.header != self.codec.header:
            reject = "snapshot was written with another schema version"
        elif sorted(snap.positions) != self._partitions:
            reject = "snapshot partitions differ from the topic's"
        elif time.time() * 1000 - snap.created_ms >= self._delete_retention_ms:
            reject = (
                f"snapshot is older than delete.retention.ms ({self._delete_retention_ms} ms): "
                "tombstones it never saw may be gone, rebuilding from scratch"
            )
        elif any(snap.positions[p] < starts[p] for p in self._partitions):
            reject = "the log was truncated past the snapshot's offsets"
        if reject is not None or snap is None:
            self._snapshot_note = f"snapshot not used: {reject}"
            logger.info("policy cache %s: %s", self.config.topic, self._snapshot_note)
            return {}
        self._store = PolicyStore.restore(self.codec.header, snap.store)
        self._snapshot_note = f"resumed from snapshot with {len(self._store)} policies"
        return dict(snap.positions)

    def _write_snapshot(
        self, store: dict[bytes, dict[bytes, bytes]], positions: dict[int, int]
    ) -> None:
        path = self.config.snapshot_path
        if path is None:
            return
        try:
            save_snapshot(
                path,
                Snapshot(
                    self.config.topic,
                    self._topic_id,
                    int(time.time() * 1000),
                    positions,
                    store,
                    self.codec.header,
                ),
            )
        except OSError:
            logger.exception("writing the cache snapshot to %s failed", path)

    def _maybe_snapshot(self) -> None:
        if self.config.snapshot_path is None:
            return
        if time.monotonic() - self._last_snapshot < self.config.snapshot_interval_s:
            return
        if self._snapshot_thread is not None and self._snapshot_thread.is_alive():
            return
        self._last_snapshot = time.monotonic()
        # Packed values are immutable bytes: copying the dicts is a consistent snapshot.
        store, positions = self._store.packed_state(), dict(self._applied)
        self._snapshot_thread = threading.Thread(
            target=self._write_snapshot, args=(store, positions), name="policy-snapshot"
        )
        self._snapshot_thread.start()

    # -- tailing (hooks of sync.table.TableReader) -------------------------------------
    def _apply_tail(self, batch: Sequence[Message]) -> None:
        if not self._dispatcher.active:
            # Nobody listens: classify only; first read or the verifier decodes.
            self._apply_replay(batch, self._unverified)
            for m in batch:
                self._observe(m)
        else:
            for m in batch:
                self._apply_live(m)

    def _on_idle(self) -> None:
        self._drain_lazy_poison()
        self._verify_some()

    def _after_batch(self) -> None:
        with self._apply_lock:
            self._drain_lazy_poison()
            dropped, self._pending_dlq = self._pending_dlq, []
        self._copy_dropped(dropped)
        self._maybe_snapshot()

    def _apply_live(self, m: Message) -> None:
        k = m.key()
        v = m.value()
        self._counters.applied += 1
        verdict = judge(self.codec, k, v)
        effect = verdict.effect
        if effect is Effect.POISON or k is None:
            self._poison(m, verdict.kind or PoisonKind.NO_KEY.value, verdict.detail)
            return
        key = k.decode("utf-8", "replace")
        if effect is Effect.DELETE:
            if self._store.pop(k) or self._dispatcher.active:
                self._notify(key, None)
        elif effect is Effect.INSERT and self._present(k):
            self._counters.conflicting_inserts += 1
        elif effect is Effect.INSERT or effect is Effect.UPDATE:
            assert v is not None  # noqa: S101 - judge() gives INSERT/UPDATE for values only
            self._remember(k, self._store.put(k, v), verdict.policies)
            self._notify(key, verdict.policies)
        else:
            self._counters.ignored += 1
        self._observe(m)

    def _observe(self, m: Message) -> None:
        if self._on_apply is not None:
            kind, ts = m.timestamp()
            if kind != 0 and ts > 0:
                self._on_apply(max(0.0, time.time() - ts / 1000.0))

    def _notify(self, key: str, value: Policies | None) -> None:
        if self._dispatcher.active:
            self._dispatcher.submit(key, value)

    # -- poison ------------------------------------------------------------------------
    def _poison(self, m: Message, kind: str, reason: str) -> None:
        """Quarantine a record met in the log: its key becomes absent (sync.table._rules)."""
        topic, p, off = m.topic(), m.partition(), m.offset()
        key = m.key()
        if key is not None and self._store.pop(key):
            self._notify(key.decode("utf-8", "replace"), None)
        self._quarantine.record(key, m.value(), kind, reason, f"{topic}[{p}]@{off}")

    def _drop_stored(self, k: bytes, value: bytes, reason: str) -> None:
        """A stored value turned out unreadable: the key is absent from now on; the record
        is located and quarantined by the reader (:meth:`_copy_dropped`)."""
        self._store.pop(k)
        self._notify(k.decode("utf-8", "replace"), None)
        self._pending_dlq.append((k, value, reason))

    def _drain_lazy_poison(self) -> None:
        """Drop the stored values reads found unreadable (under the apply lock)."""
        while self._lazy_poison:
            k, token, reason = self._lazy_poison.pop()
            if self._store.token(k) is token:
                self._drop_stored(k, self._store.unpack(k, token), reason)

    def _copy_dropped(self, pending: list[tuple[bytes, bytes, str]]) -> None:
        """Locate and quarantine dropped values (reader thread, outside the apply lock).

        Every value dropped since the last call is located in one scan, not one scan each:
        a log with thousands of unreadable bodies must not hold the reader for long.
        """
        if not pending:
            return
        where: dict[tuple[bytes, bytes], str] = {}
        if self.config.dead_letter:
            where = locate_records(
                self._transport,
                self.config.topic,
                self._partitions,
                self._applied,
                {(k, v) for k, v, _ in pending},
                self.config.batch_size,
            )
        for k, value, reason in pending:
            source = where.get((k, value), f"{self.config.topic}[?]@? (key {k!r})")
            self._quarantine.record(k, value, PoisonKind.UNDECODABLE.value, reason, source)

    def _unverified_left(self) -> bool:
        return bool(self._unverified or self._verify_locals or self._verify_prefixes)

    def _verify_some(self, *, force: bool = False) -> None:
        """Decode a chunk of replayed-but-never-decoded values (finds poison bodies).

        Call with the apply lock held.
        """
        if not self.config.verify and not force:
            return
        size = self.config.verify_chunk
        if self._unverified:
            chunk = self._unverified[-size:]
            del self._unverified[-size:]
        else:
            # Walk the replayed store one key prefix (namespace) at a time, holding only
            # references to its local names, never a list of every full key.
            while not self._verify_locals and self._verify_prefixes:
                self._verify_prefix = self._verify_prefixes.pop()
                self._verify_locals = self._store.locals_under(self._verify_prefix)
            if not self._verify_locals:
                return
            prefix = self._verify_prefix
            chunk = [prefix + local for local in self._verify_locals[-size:]]
            del self._verify_locals[-size:]
        for k in chunk:
            token = self._store.token(k)
            if token is not None:
                self._decode_stored(k, token, remember=False)
        self._drain_lazy_poison()

    def _settle(self) -> None:
        """Finish verifying every stored value, so what is held follows the rule exactly
        (for digests, entry listings and key listings; the first call after a replay
        decodes what the background verifier has not reached yet)."""
        with self._apply_lock:
            self._settle_locked()

    def _settle_locked(self) -> None:
        if self.state is not CacheState.READY:
            return
        self._drain_lazy_poison()
        while self._unverified_left():
            self._verify_some(force=True)

    # -- reads -------------------------------------------------------------------------
    def _decode_stored(self, k: bytes, token: bytes, *, remember: bool = True) -> Policies | None:
        verdict = judge(self.codec, k, self._store.unpack(k, token))
        if verdict.effect is Effect.POISON:
            self._lazy_poison.append((k, token, verdict.detail))
            return None
        if remember:
            self._remember(k, token, verdict.policies)
        return verdict.policies

    def _remember(self, k: bytes, token: bytes, policies: Policies | None) -> None:
        """Keep the decoded policies of ``k`` while its packed value is ``token``."""
        with self._decoded_lock:
            self._decoded[k] = (token, policies)
            self._decoded.move_to_end(k)
            while len(self._decoded) > self.config.decoded_cache_entries:
                self._decoded.popitem(last=False)

    def get(self, key: str) -> Policies | None:
        """The policies stored under a record key, or None."""
        self._check_ready()
        k = key.encode("utf-8")
        token = self._store.token(k)
        if token is None:
            return None
        with self._decoded_lock:
            hit = self._decoded.get(k)
        if hit is not None and hit[0] is token:
            return hit[1]
        return self._decode_stored(k, token)

    def get_target(self, target: PolicyTarget) -> Policies | None:
        """The policies of one target at its own level (no inheritance)."""
        return self.get(target.key)

    def effective(self, topic: TopicName, defaults: Mapping[str, Any] | None = None) -> Policies:
        """Applied policies of a topic: local > global > namespace > defaults, per field."""
        local = PolicyTarget.for_topic(topic)
        return effective_policies(
            self.get(local.key),
            self.get(PolicyTarget.for_topic(topic, is_global=True).key),
            self.get(local.namespace_key),
            defaults,
        )

    def keys(self) -> list[str]:
        """Every record key currently held (local, global and namespace)."""
        self._check_ready()
        self._settle()
        return [k.decode("utf-8", "replace") for k in self._store.keys()]

    def __len__(self) -> int:
        return len(self._store)

    def digest(self) -> str:
        """sha256 over (key, value) of every entry in key order: equal digests, equal caches."""
        h = hashlib.sha256()
        with self._apply_lock:
            self._settle_locked()
            state = self._store.packed_state()
        frozen = PolicyStore.restore(self._store.header, state)
        for k in sorted(frozen.keys()):
            v = frozen.get(k)
            assert v is not None  # noqa: S101 - a frozen copy
            h.update(len(k).to_bytes(4, "big"))
            h.update(k)
            h.update(len(v).to_bytes(4, "big"))
            h.update(v)
        return h.hexdigest()

    def raw_items(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of every entry, byte for byte as written to Kafka (for audits)."""
        self._settle()
        return self._store.items()

    # -- read-your-writes (positions, wait_for, sync_written, lag: TableReader) ----------
    def sync(self, timeout_s: float = 30.0) -> None:
        """Wait until everything committed to the topic right now has been applied."""
        self._check_ready()
        self.wait_for(self.end_offsets(), timeout_s)

    def _listener_failed(self) -> None:
        self._counters.listener_errors += 1

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(key, policies_or_None)`` after each change; returns a remover."""
        return self._dispatcher.add(listener)

    def stats(self) -> CacheStats:
        c = self._counters
        return CacheStats(
            state=self.state,
            size=len(self._store),
            applied_records=c.applied,
            bootstrap_records=c.bootstrap_records,
            bootstrap_seconds=self.bootstrap_seconds,
            snapshot=self._snapshot_note,
            poison=self._quarantine.total,
            poison_by_reason=self._quarantine.counts,
            ignored=c.ignored,
            conflicting_inserts=c.conflicting_inserts,
            listener_errors=c.listener_errors,
            positions=self.positions(),
            unverified=len(self._unverified)
            + len(self._verify_locals)
            + sum(self._store.size_under(p) for p in list(self._verify_prefixes)),
            stalls=self.stalls,
        )
