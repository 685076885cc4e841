"""Backlog quotas: measuring a topic's backlog on Kafka and deciding what a quota does.

The backlog of a partition is what its slowest durable subscription has not acknowledged:
the partition's end offset minus the smallest offset committed by a subscription's Kafka
group (a group without a commit on the partition counts from the log start). A topic
without subscriptions has no backlog, as in Pulsar.

* ``limitSize`` (``destination_storage``): Kafka does not report the bytes between two
  offsets, so the size is *estimated* as backlog messages × the average size of the
  messages this sidecar has published on the topic (or read from it);
* ``limitTime`` (``destination_storage`` or ``message_age``), seconds: exact — the quota is
  exceeded when a subscription's position is below the first offset Kafka reports for
  ``now - limitTime`` (``ListOffsets`` by timestamp), i.e. an older message is unacked.

What an exceeded quota does (``policy``), as Pulsar:

* ``producer_request_hold``: new producers are refused (``Cannot create producer on topic
  with backlog quota exceeded``); sends of connected producers wait until the backlog is
  back under the quota, up to ``backlog_hold_timeout_s``, then fail;
* ``producer_exception``: new producers are refused with the same text and connected ones
  are closed with it;
* ``consumer_backlog_eviction``: the slowest subscriptions' positions are moved forward
  until the quota holds (a subscription served here moves its cursor; others have their
  Kafka group offsets altered).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sync.transport import Admin

__all__ = [
    "BACKLOG_EXCEEDED",
    "BacklogAction",
    "BacklogMeasure",
    "BacklogQuotas",
    "measure_backlog",
]

#: Pulsar's refusal of a producer on a topic over its backlog quota.
BACKLOG_EXCEEDED = "Cannot create producer on topic with backlog quota exceeded"


class BacklogAction(enum.Enum):
    """``BacklogQuota.policy``."""

    producer_request_hold = "producer_request_hold"
    producer_exception = "producer_exception"
    consumer_backlog_eviction = "consumer_backlog_eviction"


@dataclass(frozen=True, slots=True)
class BacklogQuotas:
    """The backlog quotas of a topic (``0``/``-1`` limits: none)."""

    limit_bytes: int = 0
    size_action: BacklogAction = BacklogAction.producer_request_hold
    limit_time_s: int = 0
    time_action: BacklogAction = BacklogAction.producer_request_hold

    @property
    def active(self) -> bool:
        """Whether any quota is set."""
        return self.limit_bytes > 0 or self.limit_time_s > 0

    @classmethod
    def from_policy(cls, value: Mapping[str, Any] | None) -> BacklogQuotas:
        """From a ``backLogQuotaMap`` (absent: no quota)."""
        if not value:
            return cls()
        storage = value.get("destination_storage") or {}
        age = value.get("message_age") or {}
        limit_bytes = int(storage.get("limitSize") or 0)
        size_action = BacklogAction(storage.get("policy") or "producer_request_hold")
        limit_time_s, time_action = 0, size_action
        if int(age.get("limitTime") or 0) > 0:
            limit_time_s = int(age["limitTime"])
            time_action = BacklogAction(age.get("policy") or "producer_request_hold")
        elif int(storage.get("limitTime") or 0) > 0:
            limit_time_s = int(storage["limitTime"])
        return cls(max(0, limit_bytes), size_action, max(0, limit_time_s), time_action)


@dataclass(frozen=True, slots=True)
class BacklogMeasure:
    """One measurement of a topic's backlog (per Kafka partition)."""

    end: dict[int, int]
    #: Per partition: the committed offset of every durable subscription (group id).
    positions: dict[int, dict[str, int]]
    #: Per partition: the first offset recent enough for ``limitTime`` (empty: no limit).
    time_floor: dict[int, int] = field(default_factory=dict)
    avg_bytes: float = 0.0

    def messages(self) -> int:
        """Messages not acknowledged by the slowest durable subscription, all partitions."""
        total = 0
        for p, end in self.end.items():
            subs = self.positions.get(p)
            if subs:
                total += max(0, end - min(subs.values()))
        return total

    def size_bytes(self) -> int:
        """The backlog's estimated size."""
        return int(self.messages() * self.avg_bytes)

    def over_size(self, quotas: BacklogQuotas) -> bool:
        return quotas.limit_bytes > 0 and self.size_bytes() > quotas.limit_bytes

    def over_time(self, quotas: BacklogQuotas) -> bool:
        if quotas.limit_time_s <= 0:
            return False
        for p, floor in self.time_floor.items():
            subs = self.positions.get(p) or {}
            if any(pos < min(floor, self.end.get(p, floor)) for pos in subs.values()):
                return True
        return False

    def eviction_targets(self, quotas: BacklogQuotas) -> dict[str, dict[int, int]]:
        """Per group, the partitions to move forward (and where) for the quotas to hold."""
        floors: dict[int, int] = {}
        if self.over_time(quotas) and quotas.time_action is BacklogAction.consumer_backlog_eviction:
            floors = {p: min(f, self.end.get(p, f)) for p, f in self.time_floor.items()}
        if (
            self.over_size(quotas)
            and quotas.size_action is BacklogAction.consumer_backlog_eviction
            and self.avg_bytes > 0
        ):
            # Keep at most limit/avg messages, spread over the partitions as they are now.
            keep_total = int(quotas.limit_bytes / self.avg_bytes)
            total = max(1, self.messages())
            for p, end in self.end.items():
                subs = self.positions.get(p)
                if not subs:
                    continue
                backlog = max(0, end - min(subs.values()))
                keep = backlog * keep_total // total
                floors[p] = max(floors.get(p, 0), end - keep)
        out: dict[str, dict[int, int]] = {}
        for p, floor in floors.items():
            for group, pos in (self.positions.get(p) or {}).items():
                if pos < floor:
                    out.setdefault(group, {})[p] = floor
        return out


def measure_backlog(
    admin: Admin,
    kafka_topic: str,
    partitions: int,
    groups: list[str],
    quotas: BacklogQuotas,
    avg_bytes: float,
) -> BacklogMeasure:
    """Measure (blocking: run it in a thread) the backlog of ``kafka_topic``."""
    parts = list(range(partitions))
    end = admin.list_offsets(kafka_topic, parts, "latest")
    start = admin.list_offsets(kafka_topic, parts, "earliest") if groups else {}
    positions: dict[int, dict[str, int]] = {p: {} for p in parts}
    for group in groups:
        committed = admin.group_offsets(group, kafka_topic)
        for p in parts:
            positions[p][group] = max(committed.get(p, start.get(p, 0)), start.get(p, 0))
    floor: dict[int, int] = {}
    if quotas.limit_time_s > 0 and groups:
        cutoff_ms = int(time.time() * 1000) - quotas.limit_time_s * 1000
        floor = admin.list_offsets(kafka_topic, parts, cutoff_ms)
    return BacklogMeasure(end, positions, floor, avg_bytes)
