"""The one rule for what a record of a compacted change-events topic does to its key.

Every reader applies it: the policy cache live and in replay, the fast replay path (which
may postpone the decode, never change the outcome) and ``policy-audit reconcile``. So a
live cache, a fresh replay and the audit always agree, whatever the log holds.

The rule (in log order, per key)::

    no key                           poison (no_key); nothing changes
    tombstone (value null)           the key becomes absent
    a value that cannot be decoded   poison: the key becomes ABSENT, and the record is
      (bad magic, too short,         quarantined (counted by reason, copied once to the
       unknown fingerprint, a body   dead-letter topic). After compaction an unreadable
       that does not decode, a body  record may be the key's only record, and a fresh
       naming another key)           replay would hold nothing either.
    policy event UPDATE              the key holds this value
    policy event INSERT              the key holds this value if it is ABSENT (absent
                                     includes "its last record was poison"); otherwise
                                     it is a conflicting insert and nothing changes
    policy event DELETE              the key becomes absent
    anything else that decodes       ignored (action NONE, an event type readers do not
                                     know): nothing changes

"Cannot be decoded" is judged on the whole record, never on its first bytes alone: a
body whose first two bytes classify as an ignored event but which does not decode is
poison, exactly as it is when read live.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sync._constants import (
    GLOBAL_KEY_PREFIX,
    NAMESPACE_KEY_PREFIX,
    SINGLE_OBJECT_HEADER_LEN,
    SINGLE_OBJECT_MAGIC,
)
from sync._errors import CodecError
from sync.policy._codec import Codec
from sync.policy._policies import Policies

__all__ = [
    "POLICY_EVENTS",
    "Effect",
    "PoisonKind",
    "Verdict",
    "header_problem",
    "judge",
    "policies_of",
]

POLICY_EVENTS = frozenset({"TOPIC_POLICY", "NAMESPACE_POLICY"})


class Effect(enum.IntEnum):
    """What a record does to its key (see the module docstring)."""

    IGNORE = 0
    INSERT = 1
    UPDATE = 2
    DELETE = 3
    POISON = 4


class PoisonKind(enum.StrEnum):
    """Why a record is quarantined (the ``poison_by_reason`` counter names)."""

    NO_KEY = "no_key"
    BAD_MAGIC = "bad_magic"
    TRUNCATED = "truncated"
    UNKNOWN_FINGERPRINT = "unknown_fingerprint"
    UNDECODABLE = "undecodable"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of :func:`judge` for one record."""

    effect: Effect
    #: for POISON: why (a :class:`PoisonKind` value) and a human-readable detail
    kind: str | None = None
    detail: str = ""
    #: for INSERT/UPDATE: the decoded policies
    policies: Policies | None = None


_ACTIONS = {"INSERT": Effect.INSERT, "UPDATE": Effect.UPDATE, "DELETE": Effect.DELETE}


def header_problem(codec: Codec, value: bytes) -> tuple[str, str] | None:
    """(kind, detail) if the value's single-object header is unusable, else None."""
    reason = codec.check_header(value)
    if reason is None:
        return None
    if value[:2] != SINGLE_OBJECT_MAGIC:
        return PoisonKind.BAD_MAGIC.value, reason
    if len(value) < SINGLE_OBJECT_HEADER_LEN + 2:
        return PoisonKind.TRUNCATED.value, reason
    return PoisonKind.UNKNOWN_FINGERPRINT.value, reason


def policies_of(key: bytes, event: Mapping[str, Any]) -> Policies:
    """The policies a decoded event carries, after checking that its body names ``key``.

    Raises:
        CodecError: no ``topicPoliciesEvent``, or a policy event whose body names another
            key than the record's.
    """
    body = event.get("topicPoliciesEvent")
    if body is None:
        raise CodecError("event has no topicPoliciesEvent")
    text = key.decode("utf-8", "replace")
    if event["eventType"] == "NAMESPACE_POLICY":
        expected = f"{NAMESPACE_KEY_PREFIX}{body['tenant']}/{body['namespace']}"
    else:
        prefix = GLOBAL_KEY_PREFIX if text.startswith(GLOBAL_KEY_PREFIX) else ""
        expected = (
            f"{prefix}{body['domain']}://{body['tenant']}/{body['namespace']}/{body['topic']}"
        )
    if text != expected and event["eventType"] in POLICY_EVENTS:
        raise CodecError(f"record key {text!r} does not match its event body ({expected!r})")
    return Policies.from_avro(body.get("policies"))


def judge(codec: Codec, key: bytes | None, value: bytes | None) -> Verdict:
    """What one record does to its key: the rule of this module, decoding the whole value."""
    if key is None:
        return Verdict(Effect.POISON, PoisonKind.NO_KEY.value, "record has no key")
    if value is None:
        return Verdict(Effect.DELETE)
    problem = header_problem(codec, value)
    if problem is not None:
        return Verdict(Effect.POISON, *problem)
    try:
        event = codec.decode(value)
        policies = policies_of(key, event)
    except CodecError as exc:
        return Verdict(Effect.POISON, PoisonKind.UNDECODABLE.value, exc.reason)
    except Exception as exc:  # noqa: BLE001 - whatever a record holds, it never stops a reader
        return Verdict(Effect.POISON, PoisonKind.UNDECODABLE.value, f"{type(exc).__name__}: {exc}")
    effect = Effect.IGNORE
    if event["eventType"] in POLICY_EVENTS:
        effect = _ACTIONS.get(event["actionType"], Effect.IGNORE)
    return Verdict(effect, policies=policies if effect in (Effect.INSERT, Effect.UPDATE) else None)
