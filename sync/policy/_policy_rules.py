"""Rules between policy fields, and policies this cluster cannot apply (checked on write).

:class:`~sync.policy._policies.FieldCatalog` checks each field on its own (types, ranges); the
rules here look at the whole record a write would store, and refuse it with Pulsar's
reason (HTTP 412 on the REST API) before anything is written:

* a backlog quota at or above the retention (Pulsar's ``checkBacklogQuota``);
* persistence quorums out of order (``Ensemble >= WriteQuorum >= AckQuorum``);
* policies with no Kafka mapping on this cluster: ``replicationClusters`` naming more
  than one cluster (one Kafka cluster, no replicator; the REST API has checked that a
  single entry is the local cluster) and ``shadowTopics`` (no shadow topics). Removing
  them (``null``) or setting their "off" value is accepted.
  ``schemaCompatibilityStrategy``, ``schemaValidationEnforced`` and the namespace-level
  ``isAllowAutoUpdateSchema`` are applied by the schema registry
  (:mod:`sync.cluster._schema_admin`).
  ``compactionThreshold`` is accepted and applied by :mod:`sync.messaging._compaction`
  (a companion compacted topic per topic).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sync._errors import InvalidPolicyError

__all__ = ["check_policy_rules", "unsupported_reason"]

_MB = 1024 * 1024
BACKLOG_OVER_RETENTION = (
    "Backlog Quota exceeds configured retention quota for topic. "
    "Please increase retention quota and retry"
)
RETENTION_UNDER_BACKLOG = (
    "Retention Quota must exceed configured backlog quota for topic. "
    "Please increase retention quota and retry"
)


def unsupported_reason(name: str, value: Any) -> str | None:
    """Why ``name: value`` cannot be applied on this cluster (None: it can)."""
    if value is None:
        return None
    if name == "shadowTopics" and len(value) > 0:
        return "shadowTopics: shadow topics are not supported on this cluster"
    return None


def check_policy_rules(record: Mapping[str, Any], changed: Mapping[str, Any]) -> None:
    """Refuse a record a write would store, for the fields in ``changed``.

    Raises:
        InvalidPolicyError: with Pulsar's reason where Pulsar has one.
    """
    for name, value in changed.items():
        reason = unsupported_reason(name, value)
        if reason is not None:
            raise InvalidPolicyError(reason)
    persistence = changed.get("persistence")
    if persistence:
        ensemble = int(persistence.get("bookkeeperEnsemble") or 0)
        write = int(persistence.get("bookkeeperWriteQuorum") or 0)
        ack = int(persistence.get("bookkeeperAckQuorum") or 0)
        if not (ensemble >= write >= ack):
            raise InvalidPolicyError(
                f"Bookkeeper Ensemble ({ensemble}) >= WriteQuorum ({write}) >= AckQuorum ({ack})"
            )
    if "backLogQuotaMap" in changed or "retentionPolicies" in changed:
        if not _backlog_within_retention(record):
            raise InvalidPolicyError(
                BACKLOG_OVER_RETENTION if "backLogQuotaMap" in changed else RETENTION_UNDER_BACKLOG
            )


def _backlog_within_retention(record: Mapping[str, Any]) -> bool:
    # Pulsar's checkBacklogQuota: with a positive retention, a quota must stay below it.
    retention = record.get("retentionPolicies")
    quotas = record.get("backLogQuotaMap")
    if not retention or not quotas:
        return True
    size_mb = int(retention.get("retentionSizeInMB") or 0)
    minutes = int(retention.get("retentionTimeInMinutes") or 0)
    for quota in quotas.values():
        limit_size = int(quota.get("limitSize") or 0)
        limit_time = int(quota.get("limitTime") or 0)
        if size_mb > 0 and limit_size >= size_mb * _MB:
            return False
        if minutes > 0 and limit_time >= minutes * 60:
            return False
    return True
