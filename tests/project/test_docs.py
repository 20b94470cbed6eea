"""The documentation stands alone: code and docs cite sections of
``docs/format.md`` that exist, and nothing in the repository points at a
document outside it."""

from __future__ import annotations

import ast
import re
import shutil
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



# -- file lists: each folder's header and docs/architecture.md against the files --------
#
# Each engine folder's header (its `mod.rs`, or `name.rs` beside a folder
# `name/`) has a `# Files` section naming every file and subfolder in it
# (`name.rs` in backticks, `name/` at the start of an item; `mod.rs` may be
# left out); a Python
# package's `__init__` docstring may have a `Files:` section (to its end),
# checked the same way (``name.py``, ``name/``). docs/architecture.md §1.1
# is a tree of every source file of the engine and the package, and every
# file or folder the page names anywhere exists. A file renamed, moved,
# added or deleted fails here until the lists say so.

_SOURCE = {".rs", ".py", ".pyi"}
#: A list's entries: a file (`name.rs`, ``name.py``) anywhere in it, a
#: subfolder (`name/`) at the start of an item; a folder named inside an
#: item is an on-disk name (`consumequeue/`), not an entry.
_LIST_ENTRY = re.compile(
    r"`{1,2}([A-Za-z0-9_]+\.(?:rs|pyi?))`{1,2}|^[-*] `{1,2}([A-Za-z0-9_]+/)`{1,2}", re.M)


def _named(section: str) -> set[str]:
    return {a or b for a, b in _LIST_ENTRY.findall(section)}


def _entries(folder: Path) -> set[str]:
    """A folder's source files and the subfolders that hold some (``name/``)."""
    out = set()
    for p in folder.iterdir():
        if p.is_file() and p.suffix in _SOURCE:
            out.add(p.name)
        elif p.is_dir() and any(f.suffix in _SOURCE for f in p.rglob("*")):
            out.add(p.name + "/")
    return out


def _compare(root: Path, header: Path, folder: Path, named: set[str], optional: str) -> list[str]:
    """``header``'s list of ``folder`` against the files there, both ways."""
    there = _entries(folder)
    where, rel = header.relative_to(root).as_posix(), folder.relative_to(root).as_posix()
    return ([f"{where} lists {n}, which is not in {rel}/" for n in sorted(named - there)]
            + [f"{where} does not list {rel}/{n}" for n in sorted(there - named - {optional})])


def _rust_files_section(header: str) -> str | None:
    """The ``# Files`` section of a leading ``//!`` comment."""
    lines = []
    for line in header.splitlines():
        if not line.startswith("//!"):
            break
        lines.append(line[3:].strip())
    if "# Files" not in lines:
        return None
    section = lines[lines.index("# Files") + 1:]
    end = next((i for i, line in enumerate(section) if line.startswith("# ")), len(section))
    return "\n".join(section[:end])


def folder_list_problems(root: Path) -> list[str]:
    """Every engine folder's ``# Files`` list and every Python package's
    ``Files:`` list against the folder's files, both ways."""
    problems: list[str] = []
    for folder in sorted(p for p in (root / "rust" / "src").rglob("*") if p.is_dir()):
        header = folder / "mod.rs"
        if not header.is_file():
            header = folder.with_suffix(".rs")
        if not header.is_file():
            problems.append(f"{folder.relative_to(root).as_posix()}/ has no mod.rs")
            continue
        section = _rust_files_section(header.read_text(encoding="utf-8"))
        if section is None:
            problems.append(f"{header.relative_to(root).as_posix()} has no `# Files` section")
            continue
        problems += _compare(root, header, folder, _named(section), "mod.rs")
    for init in sorted((root / "python").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        lines = doc.splitlines()
        if "Files:" in lines:
            section = "\n".join(lines[lines.index("Files:") + 1:])
            problems += _compare(root, init, init.parent, _named(section),
                                 "__init__.py")
    return problems


#: The heading of docs/architecture.md's file tree.
LAYOUT_HEADING = "### 1.1 Files"
#: A path the page names: a file (`a/b.rs`, `store.py`) or a folder path
#: (`log/mapped_file/`; a bare `index/` may be a store's folder on disk),
#: not a part of a longer word or path.
_MENTION = re.compile(
    r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:rs|pyi?|md|toml|sh)|(?:[\w-]+/){2,})(?![\w./-])")


def _layout(text: str) -> tuple[list[str], list[str]]:
    """The paths of §1.1's tree, and its top entries: one entry a line, two
    spaces of indent a level, a folder ending in "/", the top entries
    relative to the root."""
    after = text.split("\n" + LAYOUT_HEADING + "\n", 1)
    assert len(after) == 2, f"docs/architecture.md has no heading {LAYOUT_HEADING!r}"
    block = re.search(r"```text\n(.*?)```", after[1], re.S)
    assert block is not None, f"no text block under {LAYOUT_HEADING!r}"
    paths: list[str] = []
    tops: list[str] = []
    stack: list[str] = []
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        level, odd = divmod(indent, 2)
        assert not odd and level <= len(stack), f"bad indent in the file tree: {line!r}"
        del stack[level:]
        name = line.split()[0]
        path = "".join(stack) + name
        paths.append(path)
        if not level:
            tops.append(path)
        if name.endswith("/"):
            stack.append(name)
    return paths, tops


def _mentioned(path: str, root: Path, known: list[str]) -> bool:
    """Whether ``path`` (relative to the root, to docs/, or the tail of a
    path, as the page writes them) names a file or folder that exists."""
    if (root / path).exists() or (root / "docs" / path).exists():
        return True
    return any(k.endswith("/" + path) for k in known)


def architecture_problems(root: Path) -> list[str]:
    """docs/architecture.md against the files: §1.1 lists every source file
    of ``rust/src/`` and ``python/rocketstore/`` and nothing else, and each
    file or folder the page names exists."""
    text = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    problems: list[str] = []
    listed, tops = _layout(text)
    for p in listed:
        if not (root / p).exists():
            problems.append(f"docs/architecture.md §1.1 lists {p}, which does not exist")
    for top in tops:
        for f in sorted((root / top).rglob("*")):
            rel = f.relative_to(root).as_posix()
            if f.is_file() and f.suffix in _SOURCE and rel not in listed:
                problems.append(f"docs/architecture.md §1.1 does not list {rel}")
    known = [p.relative_to(root).as_posix() + ("/" if p.is_dir() else "")
             for p in root.rglob("*") if ".git" not in p.parts and "target" not in p.parts]
    for m in sorted(set(_MENTION.findall(text))):
        if not _mentioned(m, root, known):
            problems.append(f"docs/architecture.md names {m}, which does not exist")
    return problems


def test_every_folder_lists_its_files() -> None:
    assert folder_list_problems(REPO) == []


def test_architecture_md_lists_every_file() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert _layout(text)[1] == ["python/rocketstore/", "rust/src/"]
    assert architecture_problems(REPO) == []


def _copy(tmp: Path) -> Path:
    """The parts of the repository the file-list checks read, in ``tmp``."""
    root = tmp / "repo"
    ignore = shutil.ignore_patterns("*.so", "__pycache__", "*.pyc")
    for part in ("rust/src", "rust/jni", "java", "python/rocketstore", "docs", "scripts"):
        shutil.copytree(REPO / part, root / part, ignore=ignore)
    shutil.copy(REPO / "Cargo.toml", root / "Cargo.toml")
    shutil.copytree(REPO / "tests" / "project", root / "tests" / "project", ignore=ignore)
    for folder in (REPO / "tests").iterdir():
        if folder.is_dir():
            (root / "tests" / folder.name).mkdir(parents=True, exist_ok=True)
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_stale_or_missing_entry_fails(tmp_path: Path) -> None:
    """On a copy of the repository: the checks pass as they do here, and each
    made-up drift is reported, exactly."""
    root = _copy(tmp_path)
    assert folder_list_problems(root) == [] and architecture_problems(root) == []
    verify = root / "rust" / "src" / "verify"
    # A stale entry in a folder's list, and a file its list leaves out.
    files = "\n//! # Files\n//!\n"
    _edit(verify / "mod.rs", files, files + "//! - `gone.rs`: renamed.\n")
    (verify / "extra.rs").write_text("//! A new file.\n")
    assert folder_list_problems(root) == [
        "rust/src/verify/mod.rs lists gone.rs, which is not in rust/src/verify/",
        "rust/src/verify/mod.rs does not list rust/src/verify/extra.rs",
    ]
    # A folder whose header has no list, or that has no header.
    (root / "rust" / "src" / "newer").mkdir()
    (root / "rust" / "src" / "newer" / "mod.rs").write_text("//! Without a list.\n")
    (root / "rust" / "src" / "bare").mkdir()
    (root / "rust" / "src" / "bare" / "a.rs").write_text("")
    # A package that lists its files, one of them stale.
    package = root / "python" / "rocketstore" / "made_up"
    package.mkdir()
    (package / "__init__.py").write_text(
        '"""A package.\n\nFiles:\n\n- ``a.py``\n- ``gone.py``\n"""\n')
    (package / "a.py").write_text("")
    (package / "b.py").write_text("")
    assert sorted(folder_list_problems(root)) == [
        "python/rocketstore/made_up/__init__.py does not list python/rocketstore/made_up/b.py",
        "python/rocketstore/made_up/__init__.py lists gone.py, which is not in "
        "python/rocketstore/made_up/",
        "rust/src/bare/ has no mod.rs",
        "rust/src/newer/mod.rs has no `# Files` section",
        "rust/src/verify/mod.rs does not list rust/src/verify/extra.rs",
        "rust/src/verify/mod.rs lists gone.rs, which is not in rust/src/verify/",
    ]
    # docs/architecture.md: its tree lacks every new file; a stale entry in
    # the tree and a stale name in its text are found.
    arch = root / "docs" / "architecture.md"
    _edit(arch, "\n  lib.rs ", "\n  gone.rs\n  lib.rs ")
    _edit(arch, "\n## 2. Threads\n",
          "\nSee `log/gone.rs`, `queue/gone/` and `gone/`.\n\n## 2. Threads\n")
    problems = architecture_problems(root)
    assert problems == [
        "docs/architecture.md §1.1 lists rust/src/gone.rs, which does not exist",
        "docs/architecture.md §1.1 does not list python/rocketstore/made_up/__init__.py",
        "docs/architecture.md §1.1 does not list python/rocketstore/made_up/a.py",
        "docs/architecture.md §1.1 does not list python/rocketstore/made_up/b.py",
        "docs/architecture.md §1.1 does not list rust/src/bare/a.rs",
        "docs/architecture.md §1.1 does not list rust/src/newer/mod.rs",
        "docs/architecture.md §1.1 does not list rust/src/verify/extra.rs",
        "docs/architecture.md names gone.rs, which does not exist",  # the tree's line
        "docs/architecture.md names log/gone.rs, which does not exist",
        "docs/architecture.md names queue/gone/, which does not exist",
    ], problems
