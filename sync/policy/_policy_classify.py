"""What the policy cache's fast path reads from a record's first bytes.

A change event is Avro single-object encoded: a 10-byte header (magic and schema
fingerprint), then the event type's and the action's enum indexes, one byte each. For
every schema version the codec knows, :func:`header_tables` maps those two bytes to what
the record does (:class:`sync.table.Effect`: a policy INSERT, UPDATE or DELETE, or
ignored), and gives the 12 first bytes of a current-schema UPDATE and INSERT, which replay
stores without decoding. Pure functions of the codec: the rule itself
(:func:`sync.table.judge`) still judges every record these tables do not settle.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.table import POLICY_EVENTS, Effect, PoisonKind, header_problem

from ._codec import Codec

__all__ = ["HeaderTables", "header_tables", "header_problem_of"]

_ACTIONS = {"INSERT": Effect.INSERT, "UPDATE": Effect.UPDATE, "DELETE": Effect.DELETE}


@dataclass(frozen=True, slots=True)
class HeaderTables:
    """The classification of records by their first bytes, for one codec."""

    #: schema fingerprint -> (event type, action) enum-index bytes -> effect
    actions: dict[bytes, dict[bytes, Effect]]
    #: the 12 first bytes of current-schema policy UPDATE values
    updates: frozenset[bytes]
    #: the 12 first bytes of current-schema policy INSERT values
    inserts: frozenset[bytes]


def header_tables(codec: Codec) -> HeaderTables:
    """The tables of every schema version ``codec`` reads."""
    actions = {
        fp: {
            bytes(pair): (
                _ACTIONS.get(act, Effect.IGNORE) if ev in POLICY_EVENTS else Effect.IGNORE
            )
            for pair, (ev, act) in ver.classes.items()
        }
        for fp, ver in codec.versions.items()
    }
    table = actions[codec.current.fingerprint]
    header = codec.header
    return HeaderTables(
        actions,
        updates=frozenset(header + pair for pair, a in table.items() if a == Effect.UPDATE),
        inserts=frozenset(header + pair for pair, a in table.items() if a == Effect.INSERT),
    )


def header_problem_of(codec: Codec, value: bytes) -> tuple[str, str]:
    """(poison kind, reason) of a value whose first bytes do not classify."""
    return header_problem(codec, value) or (
        PoisonKind.UNDECODABLE.value,
        "header does not classify",
    )
