"""Compacted tables: the one rule for what a record does to its key, and one quarantine.

* :mod:`sync.table._rules` — :func:`judge`: every record of a change-events topic gets
  one :class:`Effect`; an unreadable record makes its key absent (see the rule there).
* :mod:`sync.table._quarantine` — :class:`Quarantine`: count by reason, copy once to
  ``<topic>.dlq``.
"""

from ._quarantine import Quarantine
from ._rules import POLICY_EVENTS, Effect, PoisonKind, Verdict, header_problem, judge, policies_of

__all__ = [
    "POLICY_EVENTS",
    "Effect",
    "PoisonKind",
    "Quarantine",
    "Verdict",
    "header_problem",
    "judge",
    "policies_of",
]
