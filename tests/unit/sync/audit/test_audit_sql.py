"""Quoting of the names and literals the audit puts into Spark SQL text."""

from __future__ import annotations

from sync.audit._sql import ident, string


def test_ident_quotes_and_doubles_backticks() -> None:
    assert ident("maxMessageSize") == "`maxMessageSize`"
    assert ident("odd`name") == "`odd``name`"


def test_string_escapes_quotes_and_backslashes() -> None:
    assert string("UPDATE") == "'UPDATE'"
    assert string("it's") == "'it\\'s'"
    assert string("a\\b") == "'a\\\\b'"
