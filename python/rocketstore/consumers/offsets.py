r"""Committed consumer offsets shared by processes: ``<store>/config/consumerOffset.json``.

The file is RocketMQ's ``ConsumerOffsetManager`` dump (``docs/format.md``,
§13)::

    {"offsetTable":{"<topic>@<group>":{<queue id>:<next offset to consume>}}}

Several processes may commit to it: the writer's and any number of read-only
ones (``docs/format.md``, §13.1). Every write is a read-modify-write under
one lock, ``config/consumerOffset.lock`` (the engine's open-file-description
lock, :class:`rocketstore._native.FileLock`): the writing process
reads the file, sets the entries *it* committed since its last write (its
pending entries), and replaces the file atomically. Entries it did not
commit are taken from the file as they are, so no process overwrites
another's commits, and a group deleted or reset on disk stays so unless the
process commits that entry again.

One consumer per group and topic at a time, across processes: a consumer
holds ``config/consumerLocks/<topic>@<group>.lock`` (the same kind of lock,
released by the kernel when the process dies) while it is open; a second one is refused
with :class:`~rocketstore.ConsumerGroupBusyError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

from rocketstore import _native
from rocketstore.config.files import (
    MAX_QUEUE_ID,
    StrPath,
    _check_int,
    _check_name,
    _int_map,
    _load_parsed,
    atomic_write,
)
from rocketstore.errors import ConsumerGroupBusyError, CorruptedError
from rocketstore.formats.fastjson import dumps_fastjson, loads_fastjson

__all__ = ["ConsumerGroupLock", "ConsumerOffsets", "Table"]

#: ``{"topic@group": {queue_id: next offset}}``
Table = dict[str, dict[int, int]]

log = logging.getLogger("rocketstore")

_R = TypeVar("_R")

#: The lock every writer of consumerOffset.json holds while it reads and writes it.
LOCK_FILE = "consumerOffset.lock"
#: Folder (under ``config/``) of the per group and topic consumer locks.
GROUP_LOCK_DIR = "consumerLocks"
# How long taking a group lock retries: a reset or delete holds it for the
# moment of its write; a consumer holds it for as long as it is open.
_GROUP_LOCK_PATIENCE = 1.0


def _parse_offset_table(text: str) -> Table:
    doc = loads_fastjson(text)
    if not isinstance(doc, dict):
        raise ValueError("consumer offsets: the document is not a JSON object")
    raw = doc.get("offsetTable")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("consumer offsets: offsetTable is not an object")
    table: Table = {}
    for key, queues in raw.items():
        if not isinstance(key, str) or "@" not in key:
            raise ValueError(f"consumer offsets: key {key!r} is not 'topic@group'")
        if not isinstance(queues, dict):
            raise ValueError(f"consumer offsets: {key!r} is not an object")
        table[key] = _int_map(queues, f"consumer offsets: {key!r}", "queue id")
    return table


def _copy(table: Mapping[str, Mapping[int, int]]) -> Table:
    return {k: dict(v) for k, v in table.items()}


def _overlay(base: Mapping[str, Mapping[int, int]], top: Mapping[str, Mapping[int, int]]) -> Table:
    """``base`` with every entry of ``top`` set over it."""
    out = _copy(base)
    for key, queues in top.items():
        out.setdefault(key, {}).update(queues)
    return out


def _identity(path: str) -> tuple[int, int, int] | None:
    """What changes whenever the file is replaced (inode, mtime, size); None if missing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """Hold the lock on ``path`` (created if missing), waiting for it."""
    lock = _native.FileLock.acquire(path, True)
    assert lock is not None  # a waiting acquire returns the lock
    try:
        yield
    finally:
        lock.release()


def group_lock_path(config_dir: StrPath, group: str, topic: str) -> str:
    """The lock file a consumer of ``group`` on ``topic`` holds while open."""
    name = urllib.parse.quote(f"{topic}@{group}", safe="@")
    if len(name) > 200:  # file names hold 255 bytes
        name = hashlib.sha256(f"{topic}@{group}".encode()).hexdigest()
    return os.path.join(os.fspath(config_dir), GROUP_LOCK_DIR, name + ".lock")


class ConsumerGroupLock:
    """Held by an open consumer of ``group`` on ``topic``, in any process.

    The engine's exclusive lock on :func:`group_lock_path`; the kernel drops
    it when the process ends (``kill -9`` included), so a crash leaves no
    stale lock.
    A tool that resets or deletes the group's offsets takes the same lock for
    the moment of its write and refuses while a consumer holds it.
    """

    def __init__(self, config_dir: StrPath, group: str, topic: str) -> None:
        self.group, self.topic = group, topic
        self.path = group_lock_path(config_dir, group, topic)
        self._lock: _native.FileLock | None = None

    def acquire(self, patience: float = _GROUP_LOCK_PATIENCE) -> ConsumerGroupLock:
        """Take the lock, retrying for ``patience`` seconds (a reset holds it briefly).

        Raises:
            ConsumerGroupBusyError: another consumer (in this or another
                process) holds it.
        """
        if self._lock is not None:
            return self
        deadline = time.monotonic() + patience
        while True:
            lock = _native.FileLock.acquire(self.path, False)
            if lock is not None:
                break
            if time.monotonic() >= deadline:
                raise ConsumerGroupBusyError(
                    f"consumer group {self.group!r} on topic {self.topic!r} is held by "
                    f"another open consumer (lock {self.path}); close it first")
            time.sleep(0.005)
        self._lock = lock
        return self

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._lock is not None

    @staticmethod
    def in_use(config_dir: StrPath, group: str, topic: str) -> bool:
        """True when an open consumer of ``group`` on ``topic`` holds the lock.

        Takes nothing and creates nothing (a missing lock file means no
        consumer), so it never disturbs a consumer that is opening.
        """
        return _native.FileLock.is_held(group_lock_path(config_dir, group, topic))

    def __enter__(self) -> ConsumerGroupLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


class ConsumerOffsets:
    """Committed consumer offsets: ``<store>/config/consumerOffset.json``.

    Written with :func:`~rocketstore.config.files.dumps_fastjson` (unquoted
    queue ids), read with quoted or unquoted queue ids; other top-level keys
    (5.x ``dataVersion``) are ignored on read and not written. All methods
    are thread-safe; writes are safe across processes (see the module).

    The table this object shows is the file as last read, with this
    object's own commits not yet written (*pending*) set over it.
    :meth:`persist` writes the pending entries into the current file;
    :meth:`refresh` re-reads the file when another process replaced it.

    >>> import os, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, "config", "consumerOffset.json")
    >>> offsets = ConsumerOffsets.load(path)          # no file yet: empty
    >>> offsets.query("groupA", "TopicTest", 0)
    -1
    >>> offsets.commit("groupA", "TopicTest", 0, 12)
    >>> offsets.persist(), offsets.persist()          # writes only when changed
    (True, False)
    >>> ConsumerOffsets.load(path).query("groupA", "TopicTest", 0)
    12
    >>> tmp.cleanup()
    """

    FILE_NAME = _native.CONSUMER_OFFSET_FILE

    def __init__(
        self, path: StrPath, table: Mapping[str, Mapping[int, int]] | None = None
    ) -> None:
        """An offset table bound to ``path`` (nothing is read; see :meth:`load`)."""
        self._path = os.fspath(path)
        self._lock_path = os.path.join(os.path.dirname(self._path) or ".", LOCK_FILE)
        self._table: Table = _copy(table or {})
        self._pending: Table = {}
        self._file_id: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()

    @classmethod
    def load(cls, path: StrPath) -> ConsumerOffsets:
        """Read ``path`` (or its ``.bak``); empty when neither exists.

        Raises:
            CorruptedError: the file and its backup both have content and
                neither is a valid offset table.
        """
        offsets = cls(path)
        offsets._file_id = _identity(offsets._path)
        offsets._table = offsets._read_file()
        return offsets

    def _read_file(self) -> Table:
        found = _load_parsed(self._path, _parse_offset_table)
        return {} if found is None else found[1]

    @property
    def path(self) -> str:
        return self._path

    @property
    def lock_path(self) -> str:
        """The lock held while the file is read and rewritten (``consumerOffset.lock``)."""
        return self._lock_path

    @property
    def dirty(self) -> bool:
        """True when commits were made here since the last :meth:`persist`."""
        with self._lock:
            return bool(self._pending)

    @staticmethod
    def key(group: str, topic: str) -> str:
        """RocketMQ's table key: ``topic + "@" + group``."""
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` (the next offset to consume) for the group's queue.

        Raises:
            TypeError / ValueError: empty names, a topic containing ``@``,
                a queue id outside ``[0, 2**31 - 1]`` (a Java int) or an
                offset outside ``[0, 2**63 - 1]`` (a Java long).
        """
        self.commit_many(group, topic, {queue_id: offset})

    def commit_many(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Record several queues' next offsets of the group at once.

        Every entry is checked before any is recorded: a bad one changes
        nothing. The entries become visible together (a concurrent
        :meth:`persist` writes all of them or none).

        Raises:
            TypeError / ValueError: as :meth:`commit`.
        """
        _check_name("group", group)
        _check_name("topic", topic)
        if "@" in topic:
            raise ValueError(f"topic must not contain '@': {topic!r}")
        if not isinstance(offsets, Mapping):
            raise TypeError("offsets must be a mapping {queue_id: offset}, "
                            f"not {type(offsets).__name__}")
        todo = [(_check_int("queue_id", q, maximum=MAX_QUEUE_ID), _check_int("offset", off))
                for q, off in offsets.items()]
        key = self.key(group, topic)
        with self._lock:
            queues = self._table.setdefault(key, {})
            for queue_id, offset in todo:
                if queues.get(queue_id) != offset:
                    queues[queue_id] = offset
                    self._pending.setdefault(key, {})[queue_id] = offset

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, or ``-1`` when the group never committed one."""
        with self._lock:
            queues = self._table.get(self.key(group, topic))
            if queues is None:
                return -1
            return queues.get(queue_id, -1)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        """Every committed ``queue_id -> next offset`` of the group on the topic."""
        with self._lock:
            return dict(self._table.get(self.key(group, topic), {}))

    def table(self) -> Table:
        """A copy of the whole table, ``{"topic@group": {queue_id: offset}}``."""
        with self._lock:
            return _copy(self._table)

    def to_json(self) -> str:
        """The file content of the table shown now."""
        with self._lock:
            return dumps_fastjson({"offsetTable": self._table})

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the file if another process replaced it since this object
        last read or wrote it (its inode, mtime or size changed), or always
        with ``force`` (two replacements within one tick of the file-system
        clock, of the same size, reusing the inode number, look alike); True
        if it read. Pending commits stay on top. Needs no lock: the file is
        replaced by rename, so it is read whole.

        Raises:
            CorruptedError: as :meth:`load`.
        """
        ident = _identity(self._path)
        with self._lock:
            if ident == self._file_id and not force:
                return False
        table = self._read_file()
        with self._lock:
            self._table = _overlay(table, self._pending)
            self._file_id = ident
        return True

    def current(self) -> Table:
        """:meth:`table` after a :meth:`refresh`; when the file cannot be read
        now (damaged, or an OS error), the last view, with a warning."""
        try:
            self.refresh()
        except (CorruptedError, OSError) as e:
            log.warning("cannot re-read %s (the last view is used): %s", self._path, e)
        return self.table()

    def _settle(self, written: Table, taken: Table, ident: tuple[int, int, int] | None) -> None:
        """After a write of ``written`` holding the pending entries ``taken``."""
        with self._lock:
            for key, queues in taken.items():
                mine = self._pending.get(key)
                if mine is None:
                    continue
                for qid, off in queues.items():
                    if mine.get(qid) == off:  # not committed again meanwhile
                        del mine[qid]
                if not mine:
                    del self._pending[key]
            self._table = _overlay(written, self._pending)
            self._file_id = ident

    def persist(self, before_write: Callable[[Table], None] | None = None) -> bool:
        """Write this object's pending commits into the file; True if it wrote.

        Under ``consumerOffset.lock``: read the file, set the pending
        entries over it, write it (see
        :func:`~rocketstore.config.files.atomic_write`). Entries other
        processes wrote meanwhile are kept. Commits made while a write is
        under way go in the next. ``before_write`` gets a copy of exactly
        the table about to be written, before it is written (the writer's
        store makes the messages below those offsets durable); if it
        raises, nothing is written.
        """
        with self._persist_lock:
            with self._lock:
                if not self._pending:
                    return False
                taken = _copy(self._pending)
            with _locked(self._lock_path):
                current = self._read_file()
                merged = _overlay(current, taken)
                if before_write is not None:
                    before_write(_copy(merged))
                wrote = merged != current or _identity(self._path) is None
                if wrote:
                    atomic_write(self._path, dumps_fastjson({"offsetTable": merged}))
                ident = _identity(self._path)
            self._settle(merged, taken, ident)
            return wrote

    def update(self, change: Callable[[Table], _R], *, drop: Iterable[str] = ()) -> _R:
        """Change the file in place: ``change(table)`` edits the file's
        current table (read under the lock) and its result is returned; the
        file is rewritten if the table changed. This object's pending
        commits are not written (they stay pending, on top), except those of
        the ``topic@group`` keys in ``drop``, which are discarded (a reset or
        delete of those groups made here).
        """
        with self._persist_lock, _locked(self._lock_path):
            with self._lock:
                for key in drop:
                    self._pending.pop(key, None)
            current = self._read_file()
            table = _copy(current)
            result = change(table)
            table = {k: v for k, v in table.items() if v}
            if table != current:
                atomic_write(self._path, dumps_fastjson({"offsetTable": table}))
            ident = _identity(self._path)
            with self._lock:
                self._table = _overlay(table, self._pending)
                self._file_id = ident
            return result

    def clamp(self, end_of: Callable[[str, int], int]) -> list[tuple[str, int, int, int]]:
        """Lower every offset above its queue's end to that end, in the file
        (under its lock) and in the pending commits.

        ``end_of(topic, queue_id)`` is the queue's max offset after recovery
        (or a huge number to leave the offset alone). An offset above it would
        make the group skip the messages written at those offsets after a
        restart. Returns ``(topic@group, queue_id, old, new)`` for each
        offset lowered in the file.
        """

        def lower(table: Table) -> list[tuple[str, int, int, int]]:
            lowered = []
            for key, queues in table.items():
                topic = key.split("@", 1)[0]
                for qid, off in queues.items():
                    end = end_of(topic, qid)
                    if off > end:
                        queues[qid] = end
                        lowered.append((key, qid, off, end))
            return lowered

        with self._lock:
            lower(self._pending)
        return self.update(lower)

    def __repr__(self) -> str:
        with self._lock:
            n = len(self._table)
        return f"ConsumerOffsets({self._path!r}, {n} topic@group entries)"
