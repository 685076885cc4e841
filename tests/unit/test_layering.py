"""The layering rule, as a lint: the library never depends on the process shell, and
nothing outside ``sync/`` imports a private ``sync`` module.

``broker_shim`` (the process shell), ``examples`` (the demo) and ``bench`` use only the
public names each ``sync`` package exports; tests may reach into internals on purpose.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = ("broker_shim", "examples", "bench", "chaos")


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def _sources(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


@pytest.mark.parametrize("path", _sources(*OUTSIDE), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_sync_module_outside_the_library(path: Path) -> None:
    for lineno, name in _imports(path):
        parts = name.split(".")
        if parts[0] == "sync":
            private = [p for p in parts[1:] if p.startswith("_") and not p.startswith("__")]
            assert not private, f"{path.relative_to(ROOT)}:{lineno} imports private {name}"


@pytest.mark.parametrize("path", _sources("sync"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_library_never_imports_the_shell(path: Path) -> None:
    for lineno, name in _imports(path):
        top = name.split(".")[0]
        assert top not in OUTSIDE, f"{path.relative_to(ROOT)}:{lineno} imports {name}"
