"""Every relative link in README.md and docs/*.md names a file that exists and, with a
``#fragment``, a heading of that file (GitHub's anchors). Web links are not followed."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, …


def _prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    lines: list[str] = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file (repeats get -1, -2, … as on GitHub)."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for line in _prose_lines(path):
        match = _HEADING.match(line)
        if match is None:
            continue
        slug = _slug(match.group(2))
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def links(path: Path) -> list[str]:
    """The link targets of a markdown file, outside code blocks and code spans."""
    targets: list[str] = []
    for line in _prose_lines(path):
        targets.extend(_LINK.findall(_CODE_SPAN.sub("", line)))
    return targets


def broken_links(path: Path) -> list[str]:
    """The relative links of ``path`` whose file or heading does not exist."""
    broken: list[str] = []
    for target in links(path):
        if _EXTERNAL.match(target):
            continue
        name, _, fragment = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{fragment} in {linked.name}")
    return broken


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_the_checker_sees_what_it_checks(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text(
        "# Title\n## Wire format (`schemas/`, `sync/_codec.py`)\n## Title\n", encoding="utf-8"
    )
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md) [ok](other.md#wire-format-schemas-sync_codecpy) [ok](other.md#title-1)\n"
        "[ok](#local) [web](https://example.com/x) `[span](missing.md)`\n"
        "```\n[fenced](missing.md)\n```\n"
        "## Local\n"
        "[bad](missing.md) [bad](other.md#nowhere) [bad](#nowhere)\n",
        encoding="utf-8",
    )
    assert broken_links(doc) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading with anchor #nowhere in other.md",
        "#nowhere: no heading with anchor #nowhere in doc.md",
    ]


def test_the_documents_are_found() -> None:
    assert ROOT / "README.md" in DOCUMENTS
    assert ROOT / "docs" / "design.md" in DOCUMENTS
