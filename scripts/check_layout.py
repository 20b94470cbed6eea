"""Checks the source layout: file and function sizes, and no module circles.

    python scripts/check_layout.py [--root DIR] [--allow FILE]

Fails (exit 1), naming each offender, when

- a file under ``rust/src`` or ``python/`` has more than 800 lines (Rust:
  every line except ``#[cfg(test)] mod name { ... }`` blocks);
- a function (Rust ``fn``, Python ``def``) has more than 120 lines, from
  its ``fn``/``def`` line to its last line;
- Rust modules import each other in a circle;
- a Rust module uses a module of a higher layer (``LAYERS``: the crate's
  other top-level modules < ``log`` < ``queue``, ``index`` < ``services`` <
  ``recovery`` < ``verify`` < ``store`` < ``columnar`` < ``python``; the
  files of ``BASE_FILES`` belong to the lowest layer wherever they sit).

The module graph is drawn between files (``lib.rs``, ``a.rs``, ``a/mod.rs``
and ``a/b.rs`` are modules). An edge is a path that names an item of another
module: ``use crate::...``, ``crate::...`` in code, ``super::``/``self::``
paths, and ``use child::...`` in a module declaring ``mod child``. A
``pub use`` by which a folder's ``mod.rs`` re-exports an item of one of its
own files is a name, not a dependency: it adds no edge, and a path through
it counts as naming the file that defines the item. Test modules
(``#[cfg(test)] mod``) are left out of the graph.

The allow list (default ``scripts/layout_allow.txt``: one path per line,
``#`` comments) names files whose size offences (the file's, or its
functions') are reported but do not fail the check. An entry that no longer
offends fails it, so the list only shrinks.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_LINES = 800
MAX_FN_LINES = 120

#: The engine's layers, lowest first, by top-level module under ``rust/src``.
#: A module may use its own layer and the layers below it. Top-level modules
#: not named here (``error``, ``lock``, ``clock``, ``paths``, the crate
#: root, ...) are the layer below all of them.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("log", frozenset({"log"})),
    ("queue/index", frozenset({"queue", "index"})),
    ("services", frozenset({"services", "ha"})),
    ("recovery", frozenset({"recovery"})),
    ("verify", frozenset({"verify"})),
    ("store", frozenset({"store"})),
    ("columnar", frozenset({"columnar"})),
    ("python", frozenset({"python"})),
)
BASE_LAYER = "primitives"
#: Modules in the base layer although their folder is higher: the
#: service-thread shape lives with the services it shapes, and every layer
#: that runs a thread (the allocator in ``log``, the index flush, the clock)
#: uses it. It may use only the base layer itself.
BASE_FILES: frozenset[tuple[str, ...]] = frozenset({("services", "service_thread")})


# -- Rust lexing ---------------------------------------------------------------


@dataclass
class Token:
    """A Rust token that matters here: an identifier, `::`, or punctuation."""

    text: str
    line: int


_RAW_STR = re.compile(r'b?r(#*)"')
_CHAR = re.compile(r"b?'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rust_tokens(src: str) -> list[Token]:
    """Identifiers, `::` and single punctuation characters, with line numbers.

    Comments, string, char and byte literals are skipped; lifetimes are
    identifiers prefixed by `'`.
    """
    out: list[Token] = []
    i, line, n = 0, 1, len(src)
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            line += src.count("\n", i, j)
            i = j
        elif (m := _RAW_STR.match(src, i)) and (i == 0 or not _is_ident_char(src[i - 1])):
            end = src.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            line += src.count("\n", i, j)
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            line += src.count("\n", i, j + 1)
            i = j + 1
        elif (c == "'" or src.startswith("b'", i)) and (m := _CHAR.match(src, i)):
            i = m.end()
        elif c == "'":
            m2 = _IDENT.match(src, i + 1)
            i = m2.end() if m2 else i + 1
        elif m3 := _IDENT.match(src, i):
            out.append(Token(m3.group(), line))
            i = m3.end()
        elif src.startswith("::", i):
            out.append(Token("::", line))
            i += 2
        else:
            if not c.isdigit():
                out.append(Token(c, line))
            i += 1
    return out


def _is_ident_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _matching(toks: list[Token], i: int) -> int:
    """Index of the bracket closing the one at `i`."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    open_, close = toks[i].text, pairs[toks[i].text]
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == open_:
            depth += 1
        elif toks[j].text == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def _is_cfg_test(toks: list[Token], i: int) -> bool:
    """True when `#[cfg(test)]` starts at token `i`."""
    return [t.text for t in toks[i : i + 7]] == ["#", "[", "cfg", "(", "test", ")", "]"]


def test_module_spans(toks: list[Token]) -> list[tuple[int, int]]:
    """Token index ranges `[start, end]` of `#[cfg(test)] mod name { ... }`."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(toks):
        if _is_cfg_test(toks, i):
            j = i + 7
            while j < len(toks) and toks[j].text == "#":  # further attributes
                j = _matching(toks, j + 1) + 1
            if j < len(toks) and toks[j].text == "pub":
                j += 1
            if j + 2 < len(toks) and toks[j].text == "mod" and toks[j + 2].text == "{":
                end = _matching(toks, j + 2)
                spans.append((i, end))
                i = end + 1
                continue
        i += 1
    return spans


# -- sizes -------------------------------------------------------------------------


@dataclass
class Offence:
    """One rule broken by one file or function."""

    path: str
    what: str


def rust_counted_lines(src: str, toks: list[Token]) -> int:
    """Lines of `src` outside `#[cfg(test)] mod` blocks."""
    total = src.count("\n") + (0 if src.endswith("\n") or not src else 1)
    for a, b in test_module_spans(toks):
        total -= toks[b].line - toks[a].line + 1
    return total


def rust_functions(toks: list[Token]) -> Iterator[tuple[str, int, int]]:
    """`(name, first line, last line)` of every `fn` with a body."""
    for i, t in enumerate(toks):
        if t.text != "fn" or i + 1 >= len(toks) or not _IDENT.fullmatch(toks[i + 1].text):
            continue
        j, depth = i + 2, 0
        while j < len(toks):
            x = toks[j].text
            if x in ("(", "[", "<"):
                depth += 1
            elif x == ">" and toks[j - 1].text == "-":
                pass  # the `->` of a return type
            elif x in (")", "]", ">"):
                depth -= 1
            elif depth <= 0 and x == ";":
                break  # a declaration without a body
            elif depth <= 0 and x == "{":
                end = _matching(toks, j)
                yield toks[i + 1].text, t.line, toks[end].line
                break
            j += 1


def python_functions(src: str, path: str) -> Iterator[tuple[str, int, int]]:
    """`(qualified name, first line, last line)` of every `def`."""
    tree = ast.parse(src, filename=path)

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                yield name, child.lineno, child.end_lineno or child.lineno
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def size_offences(root: Path, rust: dict[str, str]) -> list[Offence]:
    """File and function size offences of `rust/src` and `python/`."""
    found: list[Offence] = []
    for rel, src in sorted(rust.items()):
        toks = rust_tokens(src)
        n = rust_counted_lines(src, toks)
        if n > MAX_FILE_LINES:
            found.append(Offence(rel, f"{n} lines (not counting test modules) > {MAX_FILE_LINES}"))
        for name, a, b in rust_functions(toks):
            if b - a + 1 > MAX_FN_LINES:
                found.append(
                    Offence(rel, f"fn {name} (line {a}) has {b - a + 1} lines > {MAX_FN_LINES}")
                )
    for p in sorted((root / "python").rglob("*.py")) if (root / "python").is_dir() else []:
        rel = p.relative_to(root).as_posix()
        src = p.read_text(encoding="utf-8")
        n = len(src.splitlines())
        if n > MAX_FILE_LINES:
            found.append(Offence(rel, f"{n} lines > {MAX_FILE_LINES}"))
        for name, a, b in python_functions(src, rel):
            if b - a + 1 > MAX_FN_LINES:
                found.append(
                    Offence(rel, f"def {name} (line {a}) has {b - a + 1} lines > {MAX_FN_LINES}")
                )
    return found


# -- the module graph ----------------------------------------------------------------


Mod = tuple[str, ...]


@dataclass
class Module:
    """One Rust source file as a module."""

    path: Mod
    rel: str
    children: set[str] = field(default_factory=set)
    uses: list[tuple[list[str], bool]] = field(default_factory=list)  # (path, is `pub use`)
    paths: list[list[str]] = field(default_factory=list)  # paths in code


def module_path(rel_to_src: Path) -> Mod:
    """`lib.rs` -> (), `a.rs`/`a/mod.rs` -> ("a",), `a/b.rs` -> ("a", "b")."""
    parts = list(rel_to_src.with_suffix("").parts)
    if parts[-1] == "mod" or parts == ["lib"]:
        parts = parts[:-1]
    return tuple(parts)


def _use_trees(toks: list[Token], i: int, prefix: list[str]) -> tuple[list[list[str]], int]:
    """Expands the use tree starting at token `i` into full paths."""
    paths: list[list[str]] = []
    cur = list(prefix)
    while i < len(toks):
        x = toks[i].text
        if x == "{":
            end = _matching(toks, i)
            j = i + 1
            while j < end:
                sub, j = _use_trees(toks, j, cur)
                paths.extend(sub)
                if j < end and toks[j].text == ",":
                    j += 1
            return paths, end + 1
        if x in (",", ";", "}"):
            paths.append(cur)
            return paths, i
        if x == "as":
            i += 2
            continue
        if x != "::":
            cur = [*cur, x]
        i += 1
    paths.append(cur)
    return paths, i


def parse_module(mod: Module, src: str) -> None:
    """Fills `children`, `uses` and `paths` from the file's tokens (test modules skipped)."""
    toks = rust_tokens(src)
    skip = test_module_spans(toks)
    keep = [t for k, t in enumerate(toks) if not any(a <= k <= b for a, b in skip)]
    i = 0
    while i < len(keep):
        x = keep[i].text
        if x == "mod" and i + 2 < len(keep) and keep[i + 2].text == ";":
            mod.children.add(keep[i + 1].text)
            i += 3
            continue
        if x == "use" and (i == 0 or keep[i - 1].text not in ("::",)):
            is_pub = _preceded_by_pub(keep, i)
            trees, j = _use_trees(keep, i + 1, [])
            mod.uses.extend((p, is_pub) for p in trees)
            i = j + 1
            continue
        if x in ("crate", "super", "self") and i + 1 < len(keep) and keep[i + 1].text == "::":
            if i == 0 or keep[i - 1].text != "::":
                path = [x]
                j = i + 1
                while (
                    j + 1 < len(keep)
                    and keep[j].text == "::"
                    and _IDENT.fullmatch(keep[j + 1].text)
                ):
                    path.append(keep[j + 1].text)
                    j += 2
                mod.paths.append(path)
                i = j
                continue
        i += 1


def _preceded_by_pub(toks: list[Token], i: int) -> bool:
    j = i - 1
    if j >= 0 and toks[j].text == ")":  # pub(crate), pub(super)
        while j >= 0 and toks[j].text != "(":
            j -= 1
        j -= 1
    return j >= 0 and toks[j].text == "pub"


class Graph:
    """Resolves paths to modules and draws the edges between files."""

    def __init__(self, mods: dict[Mod, Module]):
        self.mods = mods
        # (module, name) -> the module a `pub use` of a descendant's item points to
        self.aliases: dict[tuple[Mod, str], Mod] = {}
        for m in mods.values():
            for p, is_pub in m.uses:
                if not is_pub or not p or p[-1] in ("self", "*"):
                    continue
                target = self.absolute(m.path, p, m)
                if target is None:
                    continue
                owner = self.owner(target[:-1])
                if owner is not None and owner[: len(m.path)] == m.path and owner != m.path:
                    self.aliases[(m.path, target[-1])] = owner

    def absolute(self, here: Mod, path: list[str], mod: Module | None = None) -> list[str] | None:
        """The path from the crate root, or None for paths outside the crate."""
        if not path:
            return None
        head, rest = path[0], path[1:]
        if head == "crate":
            return rest
        if head == "self":
            return [*here, *rest]
        if head == "super":
            base = list(here)
            while path and path[0] == "super":
                if not base:
                    return None
                base.pop()
                path = path[1:]
            if path and path[0] == "self":
                path = path[1:]
            return [*base, *path]
        if mod is not None and head in mod.children:
            return [*here, *path]
        return None

    def owner(self, segs: list[str] | tuple[str, ...]) -> Mod | None:
        """The longest prefix of `segs` that is a module."""
        for k in range(len(segs), -1, -1):
            if tuple(segs[:k]) in self.mods:
                return tuple(segs[:k])
        return None

    def resolve(self, segs: list[str]) -> Mod | None:
        """The file whose item `segs` names (following re-exports)."""
        seen = 0
        owner = self.owner(segs)
        while owner is not None and seen < 16:
            k = len(owner)
            if k < len(segs) and (owner, segs[k]) in self.aliases:
                target = self.aliases[(owner, segs[k])]
                if target == owner:
                    break
                owner, seen = target, seen + 1
                continue
            break
        return owner

    def edges(self) -> dict[Mod, dict[Mod, str]]:
        """`from -> to -> an example path` for every dependency between files."""
        out: dict[Mod, dict[Mod, str]] = {m: {} for m in self.mods}
        for m in self.mods.values():
            refs: list[list[str]] = []
            for p, is_pub in m.uses:
                a = self.absolute(m.path, p, m)
                if a is None:
                    continue
                if is_pub and p[-1] not in ("*",):
                    owner = self.owner(a[:-1]) if p[-1] != "self" else self.owner(a)
                    if owner is not None and owner[: len(m.path)] == m.path:
                        continue  # a facade's re-export of its own file
                refs.append(a)
            for p in m.paths:
                a = self.absolute(m.path, p, m)
                if a is not None:
                    refs.append(a)
            for a in refs:
                if a and a[-1] in ("self", "*"):
                    a = a[:-1]
                to = self.resolve(a)
                if to is None or to == m.path:
                    continue
                out[m.path].setdefault(to, "::".join(["crate", *a]))
        return out


def circles(edges: dict[Mod, dict[Mod, str]]) -> list[list[Mod]]:
    """One circle through each strongly connected group of modules (Tarjan)."""
    index: dict[Mod, int] = {}
    low: dict[Mod, int] = {}
    stack: list[Mod] = []
    on: set[Mod] = set()
    groups: list[list[Mod]] = []
    counter = [0]

    def strong(v: Mod) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            g: list[Mod] = []
            while True:
                w = stack.pop()
                on.discard(w)
                g.append(w)
                if w == v:
                    break
            if len(g) > 1:
                groups.append(g)

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return [_one_circle(sorted(g), edges) for g in groups]


def _one_circle(group: list[Mod], edges: dict[Mod, dict[Mod, str]]) -> list[Mod]:
    """A shortest circle from the group's first module back to it."""
    members = set(group)
    start = group[0]
    prev: dict[Mod, Mod] = {}
    frontier = [start]
    while frontier:
        nxt: list[Mod] = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [*group, start]


def module_graph(rust: dict[str, str]) -> tuple[dict[Mod, Module], dict[Mod, dict[Mod, str]]]:
    """The modules of `rust` (path -> source) and the edges between them."""
    mods: dict[Mod, Module] = {}
    for rel, src in rust.items():
        path = module_path(Path(rel).relative_to("rust/src"))
        m = Module(path, rel)
        parse_module(m, src)
        mods[path] = m
    return mods, Graph(mods).edges()


def layer_of(mod: Mod) -> tuple[int, str]:
    """`(rank, name)` of the layer a module belongs to (0: the base layer)."""
    if mod in BASE_FILES:
        return 0, BASE_LAYER
    top = mod[0] if mod else ""
    for rank, (name, members) in enumerate(LAYERS, 1):
        if top in members:
            return rank, name
    return 0, BASE_LAYER


def layer_offences(mods: dict[Mod, Module], edges: dict[Mod, dict[Mod, str]]) -> list[Offence]:
    """One offence per use of a module in a higher layer."""
    found: list[Offence] = []
    for a in sorted(edges):
        rank_a, name_a = layer_of(a)
        for b, example in sorted(edges[a].items()):
            rank_b, name_b = layer_of(b)
            if rank_b > rank_a:
                found.append(
                    Offence(
                        mods[a].rel,
                        f"layer {name_a} uses the higher layer {name_b}: "
                        f"{mods[b].rel} ({example})",
                    )
                )
    return found


def circle_offences(
    mods: dict[Mod, Module], edges: dict[Mod, dict[Mod, str]]
) -> list[Offence]:
    """One offence per circle of Rust modules."""
    found: list[Offence] = []
    for c in circles(edges):
        steps = [
            f"{mods[a].rel} -> {mods[b].rel} ({edges[a][b]})" for a, b in itertools.pairwise(c)
        ]
        found.append(Offence(mods[c[0]].rel, "module circle: " + "; ".join(steps)))
    return found


# -- main ----------------------------------------------------------------------------


def read_allow(path: Path) -> set[str]:
    """Allow-listed paths (relative to the root)."""
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--allow", type=Path, default=None, help="allow list (see the module doc)")
    args = ap.parse_args(argv)
    root: Path = args.root
    allow_file: Path = args.allow or root / "scripts" / "layout_allow.txt"
    allow = read_allow(allow_file)

    rust: dict[str, str] = {}
    src_dir = root / "rust" / "src"
    for p in sorted(src_dir.rglob("*.rs")) if src_dir.is_dir() else []:
        rust[p.relative_to(root).as_posix()] = p.read_text(encoding="utf-8")

    sizes = size_offences(root, rust)
    failed = False
    offending = set()
    for o in sizes:
        offending.add(o.path)
        if o.path in allow:
            print(f"{o.path}: {o.what} (allow-listed)")
        else:
            print(f"{o.path}: {o.what}")
            failed = True
    mods, edges = module_graph(rust)
    for o in [*circle_offences(mods, edges), *layer_offences(mods, edges)]:
        print(f"{o.path}: {o.what}")
        failed = True
    for stale in sorted(allow - offending):
        print(f"{allow_file}: {stale} is allow-listed but within the limits: remove it")
        failed = True
    if failed:
        print("layout check failed", file=sys.stderr)
        return 1
    print(
        f"layout ok: files <= {MAX_FILE_LINES} lines, functions <= {MAX_FN_LINES} lines, "
        "no module circles, no use of a higher layer"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
