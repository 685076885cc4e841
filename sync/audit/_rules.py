"""The audit's rules as plain data and pure functions (no Spark here).

The Spark job compiles these tables into column expressions, and the tests check
them directly, so the rule an auditor reads here is the rule that runs.

Actions
    Every record of the change log gets one action: ``INSERT``/``UPDATE``/``DELETE``
    (a tombstone is a ``DELETE``), ``NONE`` for decodable events that change no
    policy (``actionType`` NONE, or an event type readers ignore), ``POISON`` for
    records no reader can apply.

Anomalies (``kind``, ``severity``)
    * ``poison`` (error): no key, bad magic, a value too short for a header, an unknown
      schema fingerprint, or an Avro body that does not decode.
    * ``update_before_insert``: an UPDATE while the key holds no policy. *error* after a
      DELETE of the key; *warning* when it is the first record of the key in the audited
      history, because compaction removes the INSERT of every key that was updated since
      (the archive, which keeps every version, tells the two apart).
    * ``delete_of_unknown_key``: a DELETE while the key holds no policy; error / warning
      as above (compaction also keeps tombstones after it dropped what they delete).
    * ``insert_of_existing_key`` (error): an INSERT while the key holds a policy; caches
      ignore it, so the policy in the event never takes effect.
    * ``duplicate_event_id`` (error): an event id (``metadata.eventId``, a UUID) seen on an
      earlier record; reported on every occurrence after the first.
    * ``out_of_order`` (warning): an event whose ``metadata.timestampMillis`` is more than
      ``out_of_order_tolerance_ms`` before the event time of the previous record of the
      same key: the log order (what every cache applies) disagrees with when the writer
      says it decided the change.
    * ``burst`` (warning): more than ``burst_threshold`` changes (INSERT/UPDATE/DELETE
      records) to the policies of one namespace (its namespace-level, topic-local and
      topic-global keys together) inside one tumbling, UTC-aligned window of
      ``burst_window_s`` seconds, by Kafka record timestamp. Default: more than 100 in
      one minute. People do not make a hundred policy changes a minute; scripts and
      run-away reconcilers do, and they are what an auditor wants to look at.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sync._errors import ConfigurationError

__all__ = [
    "CHANGE_ACTIONS",
    "TRANSITION_RULES",
    "Action",
    "AnomalyKind",
    "AnomalyRules",
    "PoisonReason",
    "Severity",
    "Transition",
    "changed_fields",
    "choose_bucket_seconds",
    "find_bursts",
    "transition_anomaly",
]


class Action(StrEnum):
    """What a record of the change log does to its key."""

    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    NONE = "NONE"
    POISON = "POISON"


#: Actions that change (or claim to change) a key's policy: the records that form the
#: per-key chain that diffs and transition rules look at.
CHANGE_ACTIONS: tuple[Action, ...] = (Action.INSERT, Action.UPDATE, Action.DELETE)


class AnomalyKind(StrEnum):
    POISON = "poison"
    UPDATE_BEFORE_INSERT = "update_before_insert"
    DELETE_OF_UNKNOWN_KEY = "delete_of_unknown_key"
    INSERT_OF_EXISTING_KEY = "insert_of_existing_key"
    DUPLICATE_EVENT_ID = "duplicate_event_id"
    OUT_OF_ORDER = "out_of_order"
    BURST = "burst"


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class PoisonReason(StrEnum):
    """Why a record is poison; the same names the policy cache counts."""

    NO_KEY = "no_key"
    BAD_MAGIC = "bad_magic"
    TRUNCATED = "truncated"
    UNKNOWN_FINGERPRINT = "unknown_fingerprint"
    UNDECODABLE = "undecodable"


@dataclass(frozen=True, slots=True)
class Transition:
    """An anomaly fired by a change record given the key's previous change record."""

    kind: AnomalyKind
    severity: Severity
    detail: str


_FIRST_SEEN = (
    " as the first record of this key in the audited history (compaction may have removed "
    "the earlier records; an archive-based audit tells)"
)

#: (previous change action of the key or None, this change action) -> anomaly.
#: Pairs not listed are normal. Conflicting INSERTs are ignored by caches; UPDATE on an
#: absent key is applied by caches but no policy-sync writer ever writes one.
TRANSITION_RULES: Mapping[tuple[Action | None, Action], Transition] = {
    (None, Action.UPDATE): Transition(
        AnomalyKind.UPDATE_BEFORE_INSERT, Severity.WARNING, "UPDATE" + _FIRST_SEEN
    ),
    (Action.DELETE, Action.UPDATE): Transition(
        AnomalyKind.UPDATE_BEFORE_INSERT,
        Severity.ERROR,
        "UPDATE of a key whose policy was deleted (a writer must INSERT after a DELETE)",
    ),
    (None, Action.DELETE): Transition(
        AnomalyKind.DELETE_OF_UNKNOWN_KEY, Severity.WARNING, "DELETE" + _FIRST_SEEN
    ),
    (Action.DELETE, Action.DELETE): Transition(
        AnomalyKind.DELETE_OF_UNKNOWN_KEY,
        Severity.ERROR,
        "DELETE of a key whose policy was already deleted",
    ),
    (Action.INSERT, Action.INSERT): Transition(
        AnomalyKind.INSERT_OF_EXISTING_KEY,
        Severity.ERROR,
        "INSERT of a key that already holds a policy: caches ignore it",
    ),
    (Action.UPDATE, Action.INSERT): Transition(
        AnomalyKind.INSERT_OF_EXISTING_KEY,
        Severity.ERROR,
        "INSERT of a key that already holds a policy: caches ignore it",
    ),
}


def transition_anomaly(previous: Action | None, action: Action) -> Transition | None:
    """The anomaly (if any) of a change record, given the key's previous change record."""
    if action not in CHANGE_ACTIONS:
        raise ValueError(f"{action} is not a change action")
    if previous is not None and previous not in CHANGE_ACTIONS:
        raise ValueError(f"{previous} is not a change action")
    return TRANSITION_RULES.get((previous, action))


@dataclass(frozen=True, slots=True)
class AnomalyRules:
    """Thresholds of the anomaly rules (see the module docstring)."""

    burst_threshold: int = 100
    burst_window_s: int = 60
    out_of_order_tolerance_ms: int = 0

    def __post_init__(self) -> None:
        if self.burst_threshold < 1:
            raise ConfigurationError(
                f"burst_threshold must be >= 1 change per window, got {self.burst_threshold}"
            )
        if self.burst_window_s < 1:
            raise ConfigurationError(
                f"burst_window_s must be >= 1 second, got {self.burst_window_s}"
            )
        if self.out_of_order_tolerance_ms < 0:
            raise ConfigurationError(
                f"out_of_order_tolerance_ms must be >= 0, got {self.out_of_order_tolerance_ms}"
            )


def _canonical(value: Any) -> str:
    # Maps compare by content, not by the order a writer happened to put their keys in.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def changed_fields(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    field_order: Sequence[str],
) -> list[str]:
    """Fields whose value differs between two policy documents, in ``field_order``.

    ``None`` stands for "no policy" (before the first record, after a delete): every
    field set on the other side then counts as changed. A field that is absent or null
    is "not set". This is the reference the Spark job's column expressions implement.
    """
    old = {k: v for k, v in (before or {}).items() if v is not None}
    new = {k: v for k, v in (after or {}).items() if v is not None}
    unknown = (old.keys() | new.keys()) - set(field_order)
    if unknown:
        raise ValueError(f"fields outside the schema: {sorted(unknown)}")
    return [
        name
        for name in field_order
        if (name in old) != (name in new)
        or (name in old and _canonical(old[name]) != _canonical(new[name]))
    ]


def find_bursts(
    changes: Iterable[tuple[str, int]], rules: AnomalyRules
) -> list[tuple[str, int, int]]:
    """(namespace, window start ms, count) of every window with more changes than allowed.

    ``changes`` are (namespace, Kafka timestamp in ms) of change records. Windows are
    tumbling and aligned to the epoch, like Spark's ``window()``.
    """
    width = rules.burst_window_s * 1000
    counts = Counter((ns, ts - ts % width) for ns, ts in changes)
    return sorted((ns, start, n) for (ns, start), n in counts.items() if n > rules.burst_threshold)


_BUCKETS_S = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 6 * 3600, 86400, 7 * 86400)


def choose_bucket_seconds(span_s: float, max_buckets: int = 120) -> int:
    """The finest chart bucket (from a human ladder: 1 s … 1 week) giving <= max_buckets."""
    if max_buckets < 1:
        raise ValueError("max_buckets must be >= 1")
    for width in _BUCKETS_S:
        if span_s / width <= max_buckets:
            return width
    return _BUCKETS_S[-1]
