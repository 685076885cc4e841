"""Inactive topics (``inactiveTopicPolicies``): deleting topics nobody uses.

Every ``inactive_topic_check_s`` the sidecar looks at every mapped Kafka topic whose
bundle it owns and whose effective policies have ``deleteWhileInactive: true``. Such a
topic is deleted — its Kafka topic, its subscriptions' Kafka groups and its
deduplication snapshot group — when, for at least ``maxInactiveDurationSeconds``:

* no producer or consumer was connected to it here (activity is tracked by the engine
  that serves it; after a sidecar start a topic counts as active at the start, so a
  restart never deletes a topic early), and no message was published (the newest Kafka
  record is older than the duration), and
* ``delete_when_no_subscriptions``: it has no subscription (Kafka group) at all;
  ``delete_when_subscriptions_caught_up``: every subscription has acknowledged
  everything (its committed offset is the end of every partition).

Its topic policies are left in place (a topic re-created later finds them), as Pulsar
keeps namespace policies; the Pulsar broker deletes topic-level policies with the topic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sync.transport import Admin

from ._compaction import delete_companion
from ._dedup import dedup_group

logger = logging.getLogger(__name__)

__all__ = ["InactivePolicy", "inactive_verdict"]


@dataclass(frozen=True, slots=True)
class InactivePolicy:
    """``InactiveTopicPolicies`` as effective for one topic."""

    delete: bool
    caught_up_mode: bool
    max_inactive_s: int

    @classmethod
    def from_policy(cls, value: Mapping[str, Any] | None) -> InactivePolicy | None:
        """None when inactive topics are not deleted."""
        if not value or not value.get("deleteWhileInactive"):
            return None
        mode = str(value.get("inactiveTopicDeleteMode") or "delete_when_no_subscriptions")
        return cls(
            delete=True,
            caught_up_mode=mode == "delete_when_subscriptions_caught_up",
            max_inactive_s=max(0, int(value.get("maxInactiveDurationSeconds") or 0)),
        )


def inactive_verdict(
    admin: Admin,
    kafka_topic: str,
    partitions: int,
    policy: InactivePolicy,
    idle_since: float,
    group_prefix: str,
) -> tuple[bool, list[str]]:
    """Blocking: whether ``kafka_topic`` may be deleted now, and its subscription groups.

    ``idle_since`` is the wall-clock time (s) since when no client was connected here.
    """
    now = time.time()
    if now - idle_since < policy.max_inactive_s:
        return False, []
    parts = list(range(partitions))
    end = admin.list_offsets(kafka_topic, parts, "latest")
    recent = admin.list_offsets(kafka_topic, parts, int((now - policy.max_inactive_s) * 1000))
    if any(recent.get(p, 0) < end.get(p, 0) for p in parts):
        return False, []  # a message newer than the duration
    groups = admin.list_groups(group_prefix)
    if groups and not policy.caught_up_mode:
        return False, groups
    for group in groups:
        committed = admin.group_offsets(group, kafka_topic)
        if any(committed.get(p, 0) < end.get(p, 0) for p in parts if end.get(p, 0) > 0):
            return False, groups
    return True, groups


def delete_topic(admin: Admin, kafka_topic: str, groups: list[str]) -> None:
    """Blocking: delete the Kafka topic and every group that belongs to it."""
    admin.delete_topic(kafka_topic)
    delete_companion(admin, kafka_topic)
    for group in [*groups, dedup_group(kafka_topic)]:
        admin.delete_group(group)
    logger.info("%s deleted as inactive (with %d subscription group(s))", kafka_topic, len(groups))
