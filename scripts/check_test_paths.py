#!/usr/bin/env python3
"""Tests and benchmarks name no file outside the repository.

A test that reads a fixture beside the repository (``../shared/...``) or at
an absolute path of one machine passes there and fails in a fresh clone.
This check reads every Python and Rust file under ``tests/`` and
``benches/`` and reports each path built or opened there that leaves the
repository root:

* a walk up from the file itself (``Path(__file__).parents[n]``,
  ``.parent`` chains, ``os.path.dirname(__file__)`` nesting, ``".."``
  joined to them), also through names assigned from such paths, imported
  ones included (``from helpers.paths import REPO``);
* a literal path with a ``..`` segment, or an absolute literal path, given
  where a path is built or opened (``Path(...)``, ``open(...)``,
  ``os.path.join(...)``, ``p / "..."``; in Rust ``Path::new``,
  ``PathBuf::from``, ``include_bytes!``, ``include_str!``, ``File::open``,
  ``fs::*``, and absolute ones given to ``.join``). Relative literals are
  taken from the repository root (where tests run; ``include_*!`` from the
  file's folder); one joined to a base the check cannot follow is skipped.

Absolute paths under the system's folders (``/dev``, ``/proc``, ``/sys``,
``/etc``, ``/usr``, ``/lib*``) are allowed, unless the repository itself is
there: the rule and the list are the run-time guard's
(``tests/helpers/outside_guard.py``, installed by ``tests/conftest.py``),
read from this script's own repository. ``/tmp`` and ``/var/tmp`` are not:
a test makes its temporary files under pytest's ``tmp_path`` at run time
and names none. A string that is not used as a path (a bad topic name such
as ``"../x"``) is not one.

Usage: ``python3 scripts/check_test_paths.py [ROOT]``; exit status 1 lists
``file:line: path``.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType


def _guard() -> ModuleType:
    """``tests/helpers/outside_guard.py`` of this script's repository: the one
    definition of what lies outside (only its pure functions are used)."""
    file = Path(__file__).resolve().parents[1] / "tests" / "helpers" / "outside_guard.py"
    spec = importlib.util.spec_from_file_location("outside_guard_rules", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_GUARD = _guard()
#: Folders an absolute path written in a test may name (never /tmp).
ALLOWED_ABSOLUTE: tuple[str, ...] = _GUARD.SYSTEM_FOLDERS
SCANNED = ("tests", "benches")

#: Calls whose arguments are paths (the callee's dotted name, as written).
PATH_CALLS = {
    "Path", "PurePath", "PosixPath", "pathlib.Path", "pathlib.PurePath", "open", "io.open",
    "os.open", "os.listdir", "os.scandir", "os.walk", "os.stat", "os.path.join",
    "os.path.abspath", "os.path.normpath", "os.path.realpath", "os.path.exists",
    "os.path.isfile", "os.path.isdir", "glob.glob", "shutil.copy", "shutil.copy2",
    "shutil.copyfile", "shutil.copytree", "shutil.rmtree", "shutil.move",
}
#: Path methods whose result is the same path.
SAME_PATH_METHODS = {"resolve", "absolute", "expanduser"}


def _allowed(path: str, root: str) -> bool:
    # A folder holding the repository itself is not allowed: beside the
    # repository is what this check is about.
    return bool(_GUARD.allowed(path, root, ALLOWED_ABSOLUTE))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


class _Module:
    """Statically known paths of one Python file, and the paths it leaves the root with."""

    def __init__(self, file: Path, root: str, imported: dict[str, str]) -> None:
        self.file = os.path.normpath(os.path.abspath(file))
        self.root = root
        self.env: dict[str, str] = dict(imported)
        self.problems: list[tuple[int, str]] = []

    # -- evaluation: an absolute normalized path, or None when unknown -------------

    def _join(self, base: str | None, part: ast.expr) -> str | None:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            value: str | None = part.value  # relative to `base` (or absolute)
        else:
            value = self.value(part)
        if base is None or value is None:
            return None
        return os.path.normpath(os.path.join(base, value))

    def value(self, node: ast.expr, literal: bool = False) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if not literal:
                return None
            # Relative literals are taken from the root, where tests run.
            return os.path.normpath(os.path.join(self.root, node.value))
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return self.file
            return self.env.get(node.id)
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            base = self.value(node.value)
            return None if base is None else os.path.dirname(base)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "parents" and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, int):
            base = self.value(node.value.value)
            if base is None:
                return None
            for _ in range(node.slice.value + 1):
                base = os.path.dirname(base)
            return base
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._join(self.value(node.left), node.right)
        if isinstance(node, ast.Call):
            return self._call(node)
        return None

    def _call(self, node: ast.Call) -> str | None:
        name = _dotted(node.func)
        args = node.args
        if name in {"Path", "PurePath", "PosixPath", "pathlib.Path", "pathlib.PurePath"}:
            if not args:
                return None
            out = self.value(args[0], literal=True)
            for a in args[1:]:
                out = self._join(out, a)
            return out
        if name in {"os.path.dirname"} and len(args) == 1:
            base = self.value(args[0])
            return None if base is None else os.path.dirname(base)
        if name in {"os.path.abspath", "os.path.normpath", "os.path.realpath", "str",
                    "os.fspath"} and len(args) == 1:
            return self.value(args[0], literal=name != "str")
        if name == "os.path.join" and args:
            out = self.value(args[0], literal=True)
            for a in args[1:]:
                out = self._join(out, a)
            return out
        if isinstance(node.func, ast.Attribute):
            method = node.func.attr
            if method in SAME_PATH_METHODS:
                return self.value(node.func.value)
            if method == "joinpath":
                out = self.value(node.func.value)
                for a in args:
                    out = self._join(out, a)
                return out
            if method == "with_name" and len(args) == 1:
                base = self.value(node.func.value)
                return None if base is None else self._join(os.path.dirname(base), args[0])
        return None

    # -- checking ------------------------------------------------------------------

    def _check(self, node: ast.expr, path: str | None) -> None:
        if path is not None and not _allowed(path, self.root):
            self.problems.append((getattr(node, "lineno", 0), path))

    def run(self, tree: ast.Module) -> None:
        assigns = sorted(
            (n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for a in assigns:
            targets = a.targets if isinstance(a, ast.Assign) else [a.target]
            if a.value is None or len(targets) != 1 or not isinstance(targets[0], ast.Name):
                continue
            v = self.value(a.value)
            if v is not None:
                self.env[targets[0].id] = v
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                if name in PATH_CALLS:
                    for arg in node.args:
                        self._check(arg, self.value(arg, literal=True))
                self._check(node, self._call(node))
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                self._check(node, self.value(node))
            elif isinstance(node, ast.Attribute | ast.Subscript):
                self._check(node, self.value(node))


def _module_file(name: str, importer: Path, root: Path) -> Path | None:
    """The file of a module imported by a test: ``helpers.x`` from tests/, or a
    module beside the importer."""
    rel = Path(*name.split("."))
    for base in (root / "tests", importer.parent):
        candidate = (base / rel).with_suffix(".py")
        if candidate.is_file():
            return candidate
    return None


def _check_python(file: Path, root: Path, cache: dict[Path, _Module]) -> _Module:
    if file in cache:
        return cache[file]
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    imported: dict[str, str] = {}
    cache[file] = _Module(file, str(root), {})  # guards against import cycles
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            source = _module_file(node.module, file, root)
            if source is None:
                continue
            env = _check_python(source, root, cache).env
            for alias in node.names:
                if alias.name in env:
                    imported[alias.asname or alias.name] = env[alias.name]
    module = _Module(file, str(root), imported)
    module.run(tree)
    cache[file] = module
    return module


#: A Rust call or macro that takes a path, and its literal argument.
_RUST_PATH = re.compile(
    r'(include_bytes!|include_str!|Path::new|PathBuf::from|\.join|File::open|File::create'
    r'|fs::\w+)\(\s*"((?:[^"\\]|\\.)*)"'
)


def _check_rust(file: Path, root: Path) -> list[tuple[int, str]]:
    problems = []
    text = file.read_text(encoding="utf-8")
    for m in _RUST_PATH.finditer(text):
        how, literal = m.group(1), m.group(2)
        if not literal.startswith("/") and (".." not in literal.split("/") or how == ".join"):
            # A relative `.join` goes from a base this check does not know.
            continue
        base = file.parent if how.startswith("include_") else root
        path = os.path.normpath(os.path.join(base, literal))
        if not _allowed(path, str(root)):
            problems.append((text.count("\n", 0, m.start()) + 1, path))
    return problems


def check(root: Path) -> list[str]:
    """``file:line: path`` for every path under ``tests/`` and ``benches/`` of
    ``root`` that leaves it."""
    root = Path(os.path.normpath(os.path.abspath(root)))
    cache: dict[Path, _Module] = {}
    out: list[str] = []
    for folder in SCANNED:
        for file in sorted((root / folder).rglob("*")):
            problems: list[tuple[int, str]] = []
            if file.suffix == ".py":
                problems = _check_python(file, root, cache).problems
            elif file.suffix == ".rs":
                problems = _check_rust(file, root)
            rel = file.relative_to(root)
            # One report per line: the longest path built there.
            per_line: dict[int, str] = {}
            for line, path in problems:
                if len(path) > len(per_line.get(line, "")):
                    per_line[line] = path
            out.extend(f"{rel}:{line}: {path} is outside the repository"
                       for line, path in sorted(per_line.items()))
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} path(s) in tests/ or benches/ leave the repository; keep "
              "fixtures under tests/fixtures and name them through tests/helpers/paths.py")
        return 1
    print("test paths ok: nothing under " + " or ".join(f"{f}/" for f in SCANNED)
          + " names a file outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
