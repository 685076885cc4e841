"""Compacted tables: the one rule for what a record does to its key, and one quarantine.

* :mod:`sync.table._rules` — :func:`judge`: every record of a change-events topic gets
  one :class:`Effect`; an unreadable record makes its key absent (see the rule there).
* :mod:`sync.table._quarantine` — :class:`Quarantine`: count by reason, copy once to
  ``<topic>.dlq``.
* :mod:`sync.table._reader` — :class:`TableReader`: the one compacted-table reader
  (replay to the end offsets captured at start, READY, tail, positions, lifecycle), used
  by the policy cache and every ``TableView`` (registry, metadata, ownership).
* :mod:`sync.table._stall` — :class:`~sync.table._stall.StallWatch`: the tail's stall
  watchdog (a partition with records waiting that has not moved since the previous check:
  its reader recreates its consumer).
* :mod:`sync.table._fenced_writer` — :class:`~sync.table._fenced_writer.FencedWriter`: the
  one fenced writer (decide under a Kafka fence, append in group commits, confirm).
* :mod:`sync.table._fence_holder` — :class:`~sync.table._fence_holder.FenceHolder`: one
  fence holder at a time, elected by a Kafka consumer group; the others forward to it.
"""

from ._quarantine import Quarantine
from ._reader import TABLE_MOVES, TableReader, TableState
from ._rules import POLICY_EVENTS, Effect, PoisonKind, Verdict, header_problem, judge, policies_of

__all__ = [
    "POLICY_EVENTS",
    "Effect",
    "PoisonKind",
    "Quarantine",
    "TABLE_MOVES",
    "TableReader",
    "TableState",
    "Verdict",
    "header_problem",
    "judge",
    "policies_of",
]
