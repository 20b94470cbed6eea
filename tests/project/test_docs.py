"""The documentation stands alone: code and docs cite sections of
``docs/format.md`` that exist, and nothing in the repository points at a
document outside it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from helpers.paths import REPO

FORMAT = (REPO / "docs" / "format.md").read_text(encoding="utf-8")
#: Where code, tests and docs live (fixtures and build output excluded).
_ROOTS = ("rust", "python", "tests/helpers", "tests/rust", "benches", "docs", "scripts")
_SUFFIXES = {".rs", ".py", ".pyi", ".md", ".toml", ".sh"}
_SINGLE_FILES = ("README.md", "Cargo.toml", "pyproject.toml", ".ci/run")


def _sources() -> Iterator[Path]:
    for root in _ROOTS:
        for path in sorted((REPO / root).rglob("*")):
            if path.is_file() and path.suffix in _SUFFIXES:
                yield path
    yield from sorted((REPO / "tests").glob("*/test_*.py"))
    yield from (REPO / "tests" / "conftest.py", *(REPO / f for f in _SINGLE_FILES))


def _sections() -> set[str]:
    """The numbers of docs/format.md's headings: ``3``, ``3.1``, ..."""
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", FORMAT, re.MULTILINE))


def test_format_md_numbers_its_sections() -> None:
    sections = _sections()
    assert {str(n) for n in range(1, 21)} <= sections
    assert {"3.3", "15.1", "15.2", "15.3", "15.4", "17.1", "18.3", "20.2"} <= sections
    # Every heading below the title carries a number code can cite.
    unnumbered = re.findall(r"^#{2,3} (?!\d).*$", FORMAT, re.MULTILINE)
    assert unnumbered == []


def test_cited_format_md_sections_exist() -> None:
    sections = _sections()
    # "docs/format.md §3.1, §5-§8" and, inside format.md itself, "§14".
    cite = re.compile(r"format\.md`{0,2},? (§\d+(?:\.\d+)?(?:(?:, ?|-|\u2013)§\d+(?:\.\d+)?)*)")
    checked = 0
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        found = [m.group(1) for m in cite.finditer(text)]
        if path.name == "format.md" and path.parent.name == "docs":
            found = re.findall(r"§\d+(?:\.\d+)?", text)
        for group in found:
            for number in re.findall(r"§(\d+(?:\.\d+)?)", group):
                checked += 1
                assert number in sections, (
                    f"{path.relative_to(REPO)} cites docs/format.md §{number}, which has no "
                    f"such section"
                )
    assert checked > 30


def test_nothing_points_outside_the_repository() -> None:
    # Built from pieces so that this file does not match itself.
    outside = [
        "SPEC" + " §", "SPEC" + ".md", "SPEC" + ' "', "STYLE" + " §", "STYLE" + ".md",
        "API" + ".md", "/work" + "/", "shared" + "/fixtures",
    ]
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        for word in outside:
            assert word not in text, f"{path.relative_to(REPO)} mentions {word!r}"
