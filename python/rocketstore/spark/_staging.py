"""The write path's staging directory: who owns what, and cleaning it up.

Layout of ``stagingDir`` (default ``<path>.spark-staging``)::

    job-<uuid>/owner.json, part-*.arrow      a batch write (made on the driver)
    stream-<sink>-<batch id>/owner.json, ...  one micro-batch of a streaming sink
    .new-*/                                   a directory being made (renamed into place)
    .trash-*/                                 a directory being deleted

Every job or micro-batch directory is made whole (``owner.json`` inside) under
a temporary name and renamed into place, and is deleted by first renaming it
to ``.trash-*``. A task never makes a batch write's directory (the driver
does, at planning), so a task still running when its job is aborted cannot
recreate what the abort deleted: its file open fails, or its file is inside
the renamed directory, which nobody else can add to.

``owner.json`` names the driver: host, boot id, and the process id and start
time of the driver's JVM (the nearest ``java`` ancestor of the process that
planned the write). A directory whose driver is known dead (same host, and a
new boot, or no process with that id and start time) is removed by the next
write's planning, whatever its age; one from another host is left alone, as
its driver cannot be checked from here. A directory with no readable
``owner.json`` is removed once it is an hour old.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
import uuid
from typing import Any
from urllib.parse import quote

__all__ = ["batch_dir_of_stream", "make_job_dir", "owner_record", "reclaim", "remove_dir",
           "remove_stream_batches", "stream_batch_dir"]

OWNER_FILE = "owner.json"
#: Age after which a directory without a readable owner is taken as abandoned.
UNOWNED_GRACE_S = 3600.0


def _proc_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of process ``pid``, or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _driver_pid() -> int:
    """The driver's JVM: the nearest ``java`` ancestor, else this process."""
    pid: int | None = os.getpid()
    while pid is not None and pid > 1:
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("java"):
                return pid
        except OSError:
            break
        pid = _parent(pid)
    return os.getpid()


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def owner_record() -> dict[str, Any]:
    """This driver's identity, for ``owner.json``."""
    pid = _driver_pid()
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid,
            "start": _proc_start(pid)}


def _owner_dead(owner: dict[str, Any]) -> bool:
    """True only when the owner is known dead (never for another host)."""
    if owner.get("host") != socket.gethostname():
        return False
    if owner.get("boot") != _boot_id():
        return True
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return False
    if os.path.isdir("/proc/self"):
        return _proc_start(pid) != owner.get("start")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _read_owner(d: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(d, OWNER_FILE), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _make_whole(root: str, final: str, owner: dict[str, Any]) -> bool:
    """Make directory ``final`` in ``root`` holding ``owner.json``, atomically.
    False if it already exists."""
    for _ in range(5):  # the root may vanish under us (a job removing it when empty)
        os.makedirs(root, exist_ok=True)
        try:
            tmp = tempfile.mkdtemp(prefix=".new-", dir=root)
            break
        except FileNotFoundError:
            continue
    else:  # pragma: no cover - the root kept vanishing
        raise OSError(f"cannot make a directory in {root}")
    try:
        with open(os.path.join(tmp, OWNER_FILE), "w", encoding="utf-8") as f:
            json.dump(owner, f)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.rename(tmp, final)
        except OSError:
            if os.path.isdir(final):
                return False
            raise
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_dir(root: str, d: str) -> None:
    """Delete a staging directory: rename it out of the way first (nothing can
    be added to it after that), then delete it, and the root if now empty."""
    trash = os.path.join(root, f".trash-{uuid.uuid4().hex}")
    try:
        os.rename(d, trash)
    except FileNotFoundError:
        trash = ""
    except OSError:
        trash = d  # e.g. another file system: delete in place
    if trash:
        shutil.rmtree(trash, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(root)


def make_job_dir(root: str) -> str:
    """A new batch write's directory (on the driver, at planning)."""
    reclaim(root)
    d = os.path.join(root, f"job-{uuid.uuid4().hex}")
    _make_whole(root, d, owner_record())
    return d


def _sink_prefix(sink_name: str) -> str:
    return f"stream-{quote(sink_name, safe='')}-"


def stream_batch_dir(root: str, sink_name: str, batch_id: int | str) -> str:
    return os.path.join(root, f"{_sink_prefix(sink_name)}{batch_id}")


def batch_dir_of_stream(root: str, sink_name: str, batch_id: int | str,
                        owner: dict[str, Any]) -> str:
    """A micro-batch's directory, made by its first task."""
    d = stream_batch_dir(root, sink_name, batch_id)
    if not os.path.isdir(d):
        _make_whole(root, d, owner)
    return d


def remove_stream_batches(root: str, sink_name: str, upto: int) -> None:
    """Delete the sink's micro-batch directories of batch ids <= ``upto``
    (Spark commits micro-batches in order: older ones are done or replayed)."""
    prefix = _sink_prefix(sink_name)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for n in names:
        if n.startswith(prefix) and n[len(prefix):].isdigit() and int(n[len(prefix):]) <= upto:
            remove_dir(root, os.path.join(root, n))
    with contextlib.suppress(OSError):
        os.rmdir(root)


def reclaim(root: str) -> list[str]:
    """Remove what crashed writers left: directories whose driver is known
    dead, unowned ones older than an hour, and unfinished deletions.
    Returns the names removed."""
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    now = time.time()
    for n in names:
        d = os.path.join(root, n)
        if not os.path.isdir(d):
            continue
        if n.startswith(".trash-"):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(n)
            continue
        owner = _read_owner(d)
        if owner is None:
            try:
                old = now - os.stat(d).st_mtime > UNOWNED_GRACE_S
            except OSError:
                continue
            if not old:
                continue
        elif not _owner_dead(owner):
            continue
        remove_dir(root, d)
        removed.append(n)
    with contextlib.suppress(OSError):
        os.rmdir(root)
    return removed
