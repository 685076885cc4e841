"""Pin the exported names of ``sync.table``: changing its public surface must be deliberate."""

from __future__ import annotations

import sync.table


def test_table_exports() -> None:
    assert sorted(sync.table.__all__) == sorted(
        [
            "POLICY_EVENTS", "Effect", "PoisonKind", "Quarantine", "TABLE_MOVES",
            "TableReader", "TableState", "Verdict", "header_problem", "judge", "policies_of",
        ]
    )  # fmt: skip
