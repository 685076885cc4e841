"""Quoting for the expressions the audit writes as Spark SQL text.

Wide expressions (one term per policy field) are built as SQL text and parsed by Spark in
one JVM call; built from ``Column`` objects they cost a Py4J round trip per node.
"""

from __future__ import annotations

__all__ = ["ident", "string"]


def ident(name: str) -> str:
    """A column or field name, quoted."""
    return "`" + name.replace("`", "``") + "`"


def string(value: str) -> str:
    """A string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
