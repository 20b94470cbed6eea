"""A run-time guard: a test that opens or lists a file outside the
repository fails.

``install(root)`` adds an audit hook (``sys.addaudithook``) that watches the
``open``, ``os.listdir`` and ``os.scandir`` events of this process and
refuses (``PermissionError``) a path outside ``root`` unless it lies in the
interpreter's folders (``sys.prefix``, the ``sys.path`` entries), the
temporary folder or the system's (``/dev``, ``/proc``, ``/sys``, ``/etc``,
``/usr``, ``/lib*``, ``/var/tmp``) or the user's settings (``~/.*``),
none of which may hold the repository itself: a file *beside* the
repository is always refused. Refused paths are
also kept, so a test that swallowed the error still fails (``take()``, see
``tests/conftest.py``). The engine's own file access (Rust) is not watched:
stores live in temporary folders. The static counterpart is
``scripts/check_test_paths.py``.

The hook costs one set lookup per audit event and a string comparison per
open.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

_WATCHED = frozenset({"open", "os.listdir", "os.scandir"})
_SYSTEM = ("/dev", "/proc", "/sys", "/etc", "/usr", "/lib", "/lib64", "/var/tmp", "/tmp")

_root = ""
_allowed: tuple[str, ...] = ()
_refused: list[str] = []


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder if folder.endswith("/") else folder + "/")


def allowed_folders(root: str) -> tuple[str, ...]:
    """Folders outside ``root`` a test may read: none of them holds ``root``."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
               tempfile.gettempdir(), *_SYSTEM}
    folders.update(p for p in sys.path if p and os.path.isabs(p))
    normal = {os.path.normpath(f) for f in folders}
    return tuple(sorted(f for f in normal if not _under(root, f)))


_HOME = os.path.expanduser("~").rstrip("/") + "/"


def _user_setting(path: str) -> bool:
    """``~/.name`` or below it (``~/.pdbrc``, which doctest's debugger reads,
    ``~/.config/...``): the user's settings, not fixtures (unless the
    repository is in there)."""
    if not path.startswith(_HOME):
        return False
    top = path[len(_HOME):].split("/", 1)[0]
    return top.startswith(".") and not _under(_root, _HOME + top)


def outside(path: str) -> bool:
    """True if a test may not open ``path`` (relative: from the current folder)."""
    p = os.path.abspath(path)
    if _under(p, _root) or any(_under(p, f) for f in _allowed):
        return False
    return not _user_setting(p)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in _WATCHED or not args:
        return
    path = args[0]
    if path is None or isinstance(path, int):
        return
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not _root:
        return
    if outside(path):
        _refused.append(os.path.abspath(path))
        raise PermissionError(
            f"a test opened {os.path.abspath(path)}, outside the repository {_root}: keep "
            "fixtures under tests/fixtures (tests/helpers/paths.py names them)")


def install(root: str) -> None:
    """Guard this process: from now on nothing outside ``root`` (but the
    allowed folders) can be opened. Installing again changes the root."""
    global _root, _allowed
    first = not _root
    _root = os.path.normpath(os.path.abspath(root))
    _allowed = allowed_folders(_root)
    if first:
        sys.addaudithook(_hook)


def installed_root() -> str:
    """The repository root the guard keeps tests in ("" before ``install``)."""
    return _root


def take() -> list[str]:
    """The paths refused since the last call."""
    out = list(_refused)
    _refused.clear()
    return out
