"""A run-time guard: a test that opens or lists a file outside the
repository fails.

``install(root, temp)`` adds an audit hook (``sys.addaudithook``) that
watches the ``open``, ``os.listdir`` and ``os.scandir`` events of this
process and refuses (``PermissionError``) a path outside ``root`` unless
``allowed`` lets it through. Outside the repository a test may open only

* ``temp``, pytest's base temporary folder of the run (``tests/conftest.py``
  points ``TMPDIR``, ``tempfile.tempdir`` and Spark's ``spark.local.dir``
  into it, so every temporary file of the run lands there);
* the interpreter's folders (``sys.prefix`` and the other prefixes, the
  absolute ``sys.path`` entries), wherever they lie;
* the system's folders, ``SYSTEM_FOLDERS``, and the user's settings
  (``~/.*``).

``/tmp`` and ``/var/tmp`` are not among them: a clone may live there, and
its neighbours are not fixtures. None of these folders counts if it holds
the repository (a clone under ``/tmp`` or under ``~/.cache`` does not
open its parent to the tests): a file *beside* the repository is always
refused. Refused paths are also kept, so a test that swallowed the error
still fails (``take()``, see ``tests/conftest.py``). The engine's own file
access (Rust) is not watched: its stores live in the base temporary folder.

The static counterpart, ``scripts/check_test_paths.py``, uses the same
``SYSTEM_FOLDERS`` and ``allowed`` for absolute paths written in tests and
benchmarks (a literal path cannot name the run's temporary folder or the
interpreter's, so there only the system folders count).

The hook costs one set lookup per audit event and a string comparison per
open.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

_WATCHED = frozenset({"open", "os.listdir", "os.scandir"})

#: The system's folders a test may read (devices, process and kernel
#: facts, settings, shared libraries and data). Never ``/tmp`` or
#: ``/var/tmp``.
SYSTEM_FOLDERS = ("/dev", "/proc", "/sys", "/etc", "/usr", "/lib", "/lib32", "/lib64", "/libx32")

_root = ""
_home = "/"
_allowed: tuple[str, ...] = ()
_refused: list[str] = []


def under(path: str, folder: str) -> bool:
    """True if ``path`` is ``folder`` or lies below it (both normalized)."""
    return path == folder or path.startswith(folder if folder.endswith("/") else folder + "/")


def allowed(path: str, root: str, folders: Iterable[str]) -> bool:
    """True if ``path`` lies in ``root`` or in one of ``folders`` that does not
    hold ``root`` (all absolute and normalized): the one rule of the guard
    and of ``scripts/check_test_paths.py``."""
    return under(path, root) or any(under(path, f) and not under(root, f) for f in folders)


def allowed_folders(root: str, temp: str | None) -> tuple[str, ...]:
    """The folders outside ``root`` a test may open: ``temp`` (the run's base
    temporary folder), the interpreter's and the system's; none holds ``root``."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
               *SYSTEM_FOLDERS}
    if temp:
        folders.add(temp)
    folders.update(p for p in sys.path if p and os.path.isabs(p))
    normal = {os.path.normpath(f) for f in folders}
    return tuple(sorted(f for f in normal if not under(root, f)))


def _user_setting(path: str) -> bool:
    """``~/.name`` or below it (``~/.pdbrc``, which doctest's debugger reads,
    ``~/.config/...``): the user's settings, not fixtures (unless the
    repository is in there)."""
    home = _home
    if home == "/" or not path.startswith(home):
        return False
    top = path[len(home):].split("/", 1)[0]
    return top.startswith(".") and not under(_root, home + top)


def outside(path: str) -> bool:
    """True if a test may not open ``path`` (relative: from the current folder)."""
    p = os.path.abspath(path)
    if allowed(p, _root, _allowed):
        return False
    return not _user_setting(p)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in _WATCHED or not args or not _root:
        return
    path = args[0]
    if path is None or isinstance(path, int):
        return
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return
    if outside(path):
        _refused.append(os.path.abspath(path))
        raise PermissionError(
            f"a test opened {os.path.abspath(path)}, outside the repository {_root} and the "
            "run's temporary folder: keep fixtures under tests/fixtures (tests/helpers/paths.py "
            "names them) and temporary files under tmp_path")


_hooked = False


def install(root: str, temp: str | None) -> None:
    """Guard this process: from now on nothing outside ``root`` (but ``temp``,
    pytest's base temporary folder of the run, and the interpreter's and
    system's folders) can be opened. Installing again changes the rules."""
    global _root, _home, _allowed, _hooked
    _root = os.path.normpath(os.path.abspath(root))
    _home = os.path.expanduser("~").rstrip("/") + "/"
    _allowed = allowed_folders(_root, os.path.normpath(os.path.abspath(temp)) if temp else None)
    if not _hooked:
        sys.addaudithook(_hook)
        _hooked = True


def uninstall() -> None:
    """Stop guarding (an audit hook cannot be removed: it lets everything
    through from now on). For the end of a run, after the last test."""
    global _root, _allowed
    _root = ""
    _allowed = ()


def installed_root() -> str:
    """The repository root the guard keeps tests in ("" when not guarding)."""
    return _root


def allowed_now() -> tuple[str, ...]:
    """The folders outside the root the guard lets through now."""
    return _allowed


def take() -> list[str]:
    """The paths refused since the last call."""
    out = list(_refused)
    _refused.clear()
    return out
