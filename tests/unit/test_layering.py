"""The layering rule, as a lint: the library never depends on the process shell, nothing
outside ``sync/`` imports a private ``sync`` module, and the shell's modules import each
other without a cycle.

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


def _module_graph(top: str) -> dict[str, set[str]]:
    """Which modules of package ``top`` each of its modules imports: at run time, inside
    functions and under ``TYPE_CHECKING`` alike (a cycle for typing is a cycle)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for path in _sources(top):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""])
                else:
                    base = node.module or ""
                base = base.rstrip(".")
                for alias in node.names:  # ``from . import x``: x may be a module
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_the_shells_modules() -> None:
    # Types shared by two modules live in a small third one (or a Protocol), so that a
    # reader never has to untangle which of two modules is loaded first.
    cycles = _cycles(_module_graph("broker_shim"))
    assert not cycles, f"import cycles (run time or typing) among broker_shim modules: {cycles}"


def test_the_cycle_finder_reports_each_cycle_once() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
