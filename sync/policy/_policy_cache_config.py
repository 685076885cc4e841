"""The policy cache's settings (:class:`CacheConfig`) and what it reports
(:class:`CacheStats`, :data:`CacheState`): plain values, apart from the reader that
uses them (:mod:`sync.policy._policy_cache`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sync._constants import (
    CHANGE_EVENTS_CREATE_CONFIG,
    CHANGE_EVENTS_PARTITIONS,
    CHANGE_EVENTS_REQUIRED_CONFIG,
    CHANGE_EVENTS_TOPIC,
)
from sync.table import TableState
from sync.transport import TopicSpec

__all__ = ["CacheConfig", "CacheState", "CacheStats"]

#: Where a cache is in its life: the one lifecycle of every compacted table.
CacheState = TableState


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Settings of one cache."""

    topic: str = CHANGE_EVENTS_TOPIC
    partitions: int = CHANGE_EVENTS_PARTITIONS
    replication_factor: int = -1
    create_topic: bool = True
    bootstrap_timeout_s: float = 120.0
    batch_size: int = 10_000
    snapshot_path: Path | None = None
    snapshot_interval_s: float = 60.0
    dead_letter: bool = True
    decoded_cache_entries: int = 100_000
    #: Decode replayed values in the background after READY (finds poison bodies early).
    #: Short-lived readers such as policyctl turn it off: reads still decode on demand.
    verify: bool = True
    verify_chunk: int = 2_000
    tail_poll_s: float = 0.05
    #: How long the broker may hold an empty fetch. A committed record ends the wait at
    #: once (no latency cost); a longer wait means fewer requests from an idle cache.
    fetch_wait_max_ms: int = 100
    #: How often the tail's stall watchdog compares the positions with the end offsets and
    #: recreates a consumer that stopped fetching (None: never; see sync.table._stall).
    stall_check_s: float | None = 30.0

    def topic_spec(self) -> TopicSpec:
        return TopicSpec(
            self.topic,
            self.partitions,
            config=CHANGE_EVENTS_CREATE_CONFIG,
            required_config=CHANGE_EVENTS_REQUIRED_CONFIG,
            replication_factor=self.replication_factor,
        )


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A consistent-enough view of the cache's counters, for metrics and tests."""

    state: CacheState
    size: int
    applied_records: int
    bootstrap_records: int
    bootstrap_seconds: float | None
    snapshot: str
    poison: int
    poison_by_reason: Mapping[str, int]
    ignored: int
    conflicting_inserts: int
    listener_errors: int
    positions: Mapping[int, int]
    unverified: int
    #: Times the stall watchdog recreated the consumer (it had stopped fetching).
    stalls: int
