r"""Committed consumer offsets shared by processes: ``<store>/config/consumerOffset.json``.

The file is RocketMQ's ``ConsumerOffsetManager`` dump (``docs/format.md``,
§13): an :class:`~rocketstore.consumers.offset_table.OffsetTable`, which owns its
key, names and document.

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
from rocketstore.config.files import StrPath, _load_parsed, atomic_write
from rocketstore.consumers.offset_table import OffsetKey, OffsetTable, checked_offsets
from rocketstore.errors import ConsumerGroupBusyError, CorruptedError

__all__ = ["ConsumerGroupLock", "ConsumerOffsets"]

log = logging.getLogger("rocketstore")

_R = TypeVar("_R")

#: A commit's fence: called with the queue ids about to be written (under
#: the offsets lock); raises to refuse them.
Fence = Callable[[list[int]], None]

# How long taking a group lock retries: a reset or delete holds it for the
# moment of its write; a consumer holds it for as long as it is open.
_GROUP_LOCK_PATIENCE = 1.0


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


def group_lock_path(config_dir: StrPath, key: OffsetKey) -> str:
    """The lock file a consumer of ``key``'s group on its topic holds while open."""
    name = urllib.parse.quote(key.text, safe=_native.TOPIC_GROUP_SEPARATOR)
    if len(name) > 200:  # file names hold 255 bytes
        name = hashlib.sha256(key.text.encode()).hexdigest()
    return os.path.join(os.fspath(config_dir), _native.CONSUMER_LOCK_DIR,
                        name + _native.LOCK_SUFFIX)


class ConsumerGroupLock:
    """Held by an open consumer of ``group`` on ``topic``, in any process.

    The engine's exclusive lock on :func:`group_lock_path`; the kernel drops
    it when the process ends (``kill -9`` included), so a crash leaves no
    stale lock.
    A tool that resets or deletes the group's offsets takes the same lock for
    the moment of its write and refuses while a consumer holds it.
    """

    def __init__(self, config_dir: StrPath, group: str, topic: str) -> None:
        """The lock of ``group`` on ``topic`` (not taken yet). The names are
        the caller's to check: a reset or delete reaches every key of the
        file, as spelled there."""
        self.group, self.topic = group, topic
        self.path = group_lock_path(config_dir, OffsetKey(topic, group))
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
        consumer), so it never disturbs a consumer that is opening. Names
        are not checked: a file may hold any.
        """
        return _native.FileLock.is_held(group_lock_path(config_dir, OffsetKey(topic, group)))

    def __enter__(self) -> ConsumerGroupLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def _apply_fences(taken: OffsetTable, fences: Mapping[tuple[OffsetKey, int], Fence]
                  ) -> tuple[OffsetTable, list[tuple[OffsetKey, list[int], Exception]]]:
    """Show each fence the entries of ``taken`` committed with it; remove
    those refused from ``taken``. Returns them and the errors."""
    groups: dict[tuple[OffsetKey, int], list[int]] = {}
    by_id: dict[int, Fence] = {}
    for (key, qid), fence in fences.items():
        if taken.query(key, qid) >= 0:
            groups.setdefault((key, id(fence)), []).append(qid)
            by_id[id(fence)] = fence
    refused = OffsetTable()
    errors: list[tuple[OffsetKey, list[int], Exception]] = []
    for (key, fid), qids in groups.items():
        qids.sort()
        try:
            by_id[fid](qids)
        except Exception as e:  # the fence's refusal, whatever its type
            errors.append((key, qids, e))
            for qid in qids:
                refused.set(key, qid, taken.query(key, qid))
    if errors:
        taken.remove(refused)
    return refused, errors


def _report_fenced(errors: list[tuple[OffsetKey, list[int], Exception]],
                   strict: OffsetKey | None) -> None:
    """Warn of entries dropped by their fence; raise the first error of ``strict``'s key."""
    first: Exception | None = None
    for key, qids, e in errors:
        if key == strict and first is None:
            first = e
            continue
        log.warning("committed offsets of group %r on topic %r, queues %s, dropped unwritten: %s",
                    key.group, key.topic, qids, e)
    if first is not None:
        raise first


class ConsumerOffsets:
    """Committed consumer offsets: ``<store>/config/consumerOffset.json``.

    Written with :meth:`~rocketstore.consumers.offset_table.OffsetTable.to_json`
    (unquoted queue ids), read with quoted or unquoted queue ids; other
    top-level keys (5.x ``dataVersion``) are ignored on read and not written.
    All methods are thread-safe; writes are safe across processes (see the
    module).

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

    def __init__(self, path: StrPath, table: OffsetTable | None = None) -> None:
        """An offset table bound to ``path`` (nothing is read; see :meth:`load`)."""
        self._path = os.fspath(path)
        self._lock_path = os.path.join(os.path.dirname(self._path) or ".",
                                       _native.CONSUMER_OFFSET_LOCK_FILE)
        self._table = OffsetTable() if table is None else table.copy()
        self._pending = OffsetTable()
        self._fences: dict[tuple[OffsetKey, int], Fence] = {}
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

    def _read_file(self) -> OffsetTable:
        found = _load_parsed(self._path, OffsetTable.from_json)
        return OffsetTable() if found is None else found[1]

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

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` (the next offset to consume) for the group's queue.

        Raises:
            TypeError / ValueError: a name :meth:`OffsetKey.of
                <rocketstore.consumers.offset_table.OffsetKey.of>` refuses (empty, a
                topic containing ``@``), a queue id outside ``[0, 2**31 - 1]``
                (a Java int) or an offset outside ``[0, 2**63 - 1]`` (a Java
                long).
        """
        self.commit_many(group, topic, {queue_id: offset})

    def commit_many(self, group: str, topic: str, offsets: Mapping[int, int], *,
                    fence: Fence | None = None) -> None:
        """Record several queues' next offsets of the group at once.

        Every entry is checked before any is recorded: a bad one changes
        nothing. The entries become visible together (a concurrent
        :meth:`persist` writes all of them or none).

        ``fence(queue_ids)`` (``docs/format.md``, §13.1), if given, is
        called under ``consumerOffset.lock`` by the write that would write
        these entries, with the queue ids of this key it writes, before it
        writes them; if it raises, those entries are dropped, not written
        (with a warning, or the error itself for a ``strict`` write).

        Raises:
            TypeError / ValueError: as :meth:`commit`.
        """
        key = OffsetKey.of(group, topic)
        todo = checked_offsets(offsets)
        with self._lock:
            for queue_id, offset in todo:
                if fence is None:
                    self._fences.pop((key, queue_id), None)
                else:
                    self._fences[(key, queue_id)] = fence
                if self._table.set(key, queue_id, offset) or fence is not None:
                    self._pending.set(key, queue_id, offset)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, or ``-1`` when the group never committed one.

        Raises:
            TypeError / ValueError: a name :meth:`OffsetKey.of
                <rocketstore.consumers.offset_table.OffsetKey.of>` refuses.
        """
        key = OffsetKey.of(group, topic)
        with self._lock:
            return self._table.query(key, queue_id)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        """Every committed ``queue_id -> next offset`` of the group on the topic."""
        key = OffsetKey.of(group, topic)
        with self._lock:
            return self._table.offsets(key)

    def table(self) -> OffsetTable:
        """A copy of the whole table."""
        with self._lock:
            return self._table.copy()

    def to_json(self) -> str:
        """The file content of the table shown now."""
        with self._lock:
            return self._table.to_json()

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
            self._table = table.overlay(self._pending)
            self._file_id = ident
        return True

    def current(self) -> OffsetTable:
        """:meth:`table` after a :meth:`refresh`; when the file cannot be read
        now (damaged, or an OS error), the last view, with a warning."""
        try:
            self.refresh()
        except (CorruptedError, OSError) as e:
            log.warning("cannot re-read %s (the last view is used): %s", self._path, e)
        return self.table()

    def _settle(self, written: OffsetTable, taken: OffsetTable,
                ident: tuple[int, int, int] | None, refused: OffsetTable) -> None:
        """After a write of ``written`` holding the pending entries ``taken``
        (``refused``: pending entries their fence refused, dropped)."""
        with self._lock:
            self._pending.discard_same(taken)  # those not committed again meanwhile
            self._pending.discard_same(refused)
            self._fences = {e: f for e, f in self._fences.items()
                            if self._pending.query(e[0], e[1]) >= 0}
            self._table = written.overlay(self._pending)
            self._file_id = ident

    def persist(self, before_write: Callable[[OffsetTable], None] | None = None, *,
                strict: OffsetKey | None = None) -> bool:
        """Write this object's pending commits into the file; True if it wrote.

        Under ``consumerOffset.lock``: read the file, set the pending
        entries over it, write it (see
        :func:`~rocketstore.config.files.atomic_write`). Entries other
        processes wrote meanwhile are kept. Commits made while a write is
        under way go in the next. ``before_write`` gets a copy of exactly
        the table about to be written, before it is written (the writer's
        store makes the messages below those offsets durable); if it
        raises, nothing is written.

        Entries committed with a fence (:meth:`commit_many`) are shown to
        it first; those it refuses are dropped with a warning, or, for the
        key ``strict`` (a sync commit's), its error is raised once the
        others are written.
        """
        with self._persist_lock:
            with self._lock:
                if not self._pending:
                    return False
                taken = self._pending.copy()
                fences = dict(self._fences)
            with _locked(self._lock_path):
                current = self._read_file()
                refused, errors = _apply_fences(taken, fences)
                merged = current.overlay(taken)
                if before_write is not None:
                    before_write(merged.copy())
                wrote = merged != current or _identity(self._path) is None
                if wrote:
                    atomic_write(self._path, merged.to_json())
                ident = _identity(self._path)
            self._settle(merged, taken, ident, refused)
        _report_fenced(errors, strict)
        return wrote

    def update(self, change: Callable[[OffsetTable], _R], *,
               drop: Iterable[OffsetKey] = ()) -> _R:
        """Change the file in place: ``change(table)`` edits the file's
        current table (read under the lock) and its result is returned; the
        file is rewritten if the table changed (keys left without queues are
        removed). This object's pending commits are not written (they stay
        pending, on top), except those of the keys in ``drop``, which are
        discarded (a reset or delete of those groups made here).
        """
        with self._persist_lock, _locked(self._lock_path):
            with self._lock:
                for key in drop:
                    self._pending.pop(key)
            current = self._read_file()
            table = current.copy()
            result = change(table)
            table.drop_empty()
            if table != current:
                atomic_write(self._path, table.to_json())
            ident = _identity(self._path)
            with self._lock:
                self._table = table.overlay(self._pending)
                self._file_id = ident
            return result

    def clamp(self, end_of: Callable[[str, int], int]) -> list[tuple[OffsetKey, int, int, int]]:
        """Lower every offset above its queue's end to that end, in the file
        (under its lock) and in the pending commits.

        ``end_of(topic, queue_id)`` is the queue's max offset after recovery
        (or a huge number to leave the offset alone). An offset above it would
        make the group skip the messages written at those offsets after a
        restart. Returns ``(key, queue_id, old, new)`` for each offset
        lowered in the file.
        """
        with self._lock:
            self._pending.lower(end_of)
        return self.update(lambda table: table.lower(end_of))

    def __repr__(self) -> str:
        with self._lock:
            n = len(self._table)
        return f"ConsumerOffsets({self._path!r}, {n} topic@group entries)"
