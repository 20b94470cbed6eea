r"""Committed consumer offsets shared by processes: ``<store>/config/consumerOffset.json``.

The file is RocketMQ's ``ConsumerOffsetManager`` dump (``docs/format.md``,
§13): an :class:`~rocketstore.consumers.offset_table.OffsetTable`, which owns its
key, names and document.

Several processes may commit to it: the writer's and any number of read-only
ones (``docs/format.md``, §13.1). Every write runs under one lock,
``config/consumerOffset.lock`` (the engine's open-file-description lock,
:class:`rocketstore._native.FileLock`, waited for at most
``OFFSETS_LOCK_TIMEOUT``): the writing process catches up with the files,
drops its pending entries of keys reset or deleted since they were
committed (a key's generation) and those their fence refuses, and appends
the others to the journal beside the file (``consumerOffset.journal``,
:mod:`~rocketstore.consumers.offset_journal`, §13.3); the file itself is
rewritten from both now and then. Entries it did not commit stay as the
files hold them, so no process overwrites another's commits, and a reset
or delete is never undone by commits made before it.

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
from rocketstore.config.files import StrPath
from rocketstore.consumers.offset_journal import OffsetLog, Op
from rocketstore.consumers.offset_table import OffsetKey, OffsetTable, checked_offsets
from rocketstore.errors import ConsumerGroupBusyError, CorruptedError

__all__ = ["OFFSETS_LOCK_TIMEOUT", "ConsumerGroupLock", "ConsumerOffsets", "Fence"]

log = logging.getLogger("rocketstore")

_R = TypeVar("_R")

#: A commit's fence: called with the queue ids about to be written (under
#: the offsets lock); raises to refuse them.
Fence = Callable[[list[int]], None]

#: Seconds a write of the offsets waits for ``config/consumerOffset.lock``
#: before it fails with a ``TimeoutError`` naming the holder's pid (a
#: process stopped while it held the lock, ``docs/format.md``, §13.1).
OFFSETS_LOCK_TIMEOUT = 10.0

# How long taking a group lock retries: a reset or delete holds it for the
# moment of its write; a consumer holds it for as long as it is open.
_GROUP_LOCK_PATIENCE = 1.0


@contextlib.contextmanager
def _locked(path: str, timeout: float) -> Iterator[None]:
    """Hold the lock on ``path`` (created if missing), waiting at most ``timeout`` s.

    Raises:
        TimeoutError: another process held it all that time (named by pid).
    """
    lock = _native.FileLock.acquire(path, True, timeout)
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
    """Committed consumer offsets: ``<store>/config/consumerOffset.json``
    and its journal (``docs/format.md``, §13.3).

    The json is written with :meth:`~rocketstore.consumers.offset_table.OffsetTable.to_json`
    (unquoted queue ids), read with quoted or unquoted queue ids; other
    top-level keys (5.x ``dataVersion``) are ignored on read and not written.
    All methods are thread-safe; writes are safe across processes (see the
    module).

    The table this object shows is the files as last read, with this
    object's own commits not yet written (*pending*) set over it.
    :meth:`persist` appends the pending entries to the journal (durable, a
    cost that does not grow with the table) and, with ``fold``, rewrites
    the json; :meth:`refresh` catches up with what other processes wrote.

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
    >>> offsets.persist(fold=True), os.path.exists(path)
    (True, True)
    >>> tmp.cleanup()
    """

    FILE_NAME = _native.CONSUMER_OFFSET_FILE

    def __init__(self, path: StrPath, table: OffsetTable | None = None) -> None:
        """An offset table bound to ``path`` (nothing is read; see :meth:`load`)."""
        self._path = os.fspath(path)
        self._lock_path = os.path.join(os.path.dirname(self._path) or ".",
                                       _native.CONSUMER_OFFSET_LOCK_FILE)
        self._log = OffsetLog(self._path)
        if table is not None:
            self._log.table = table.copy()
        self._pending = OffsetTable()
        self._pending_gen: dict[OffsetKey, int] = {}
        self._fences: dict[tuple[OffsetKey, int], Fence] = {}
        self._lock = threading.Lock()  # the pending entries
        self._io = threading.RLock()  # the view of the files, and the files
        #: Seconds a write waits for ``consumerOffset.lock`` (None: the
        #: module's ``OFFSETS_LOCK_TIMEOUT``).
        self.lock_timeout: float | None = None

    @classmethod
    def load(cls, path: StrPath) -> ConsumerOffsets:
        """Read ``path`` (or its ``.bak``) and the journal; empty when none exists.

        Raises:
            CorruptedError: the file and its backup both have content and
                neither is a valid offset table.
            OSError: a file is not a regular file, or cannot be read.
        """
        offsets = cls(path)
        offsets._log.refresh(force=True)
        return offsets

    @property
    def path(self) -> str:
        return self._path

    @property
    def journal_path(self) -> str:
        """``consumerOffset.journal`` (``docs/format.md``, §13.3)."""
        return self._log.journal_path

    @property
    def lock_path(self) -> str:
        """The lock held while the files are written (``consumerOffset.lock``)."""
        return self._lock_path

    @property
    def dirty(self) -> bool:
        """True when commits were made here since the last :meth:`persist`."""
        with self._lock:
            return bool(self._pending)

    def _hold(self) -> contextlib.AbstractContextManager[None]:
        timeout = OFFSETS_LOCK_TIMEOUT if self.lock_timeout is None else self.lock_timeout
        return _locked(self._lock_path, timeout)

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
        :meth:`persist` writes all of them or none). They belong to the
        key's generation seen now (``docs/format.md``, §13.1): a reset or
        delete of the key before they are written drops them.

        ``fence(queue_ids)``, if given, is called under
        ``consumerOffset.lock`` by the write that would write these
        entries, with the queue ids of this key it writes, before it writes
        them; if it raises, those entries are dropped, not written (with a
        warning, or the error itself for a ``strict`` write).

        Raises:
            TypeError / ValueError: as :meth:`commit`.
        """
        key = OffsetKey.of(group, topic)
        todo = checked_offsets(offsets)
        self.catch_up()
        seen = self._log.gens.get(key, 0)
        with self._lock:
            gen = max(seen, self._pending_gen.get(key, seen))
            if self._pending_gen.get(key, gen) != gen:
                # Pending from before a reset or delete of the key: never written.
                self._warn_stale(self._take_key(key))
            self._pending_gen[key] = gen
            for queue_id, offset in todo:
                if fence is None:
                    self._fences.pop((key, queue_id), None)
                else:
                    self._fences[(key, queue_id)] = fence
                if fence is not None or self._query(key, queue_id) != offset:
                    self._pending.set(key, queue_id, offset)

    def catch_up(self) -> None:
        """:meth:`refresh`, unless a write is under way in this process (it
        catches up itself): never waits for another thread's disk work, and
        keeps the last view when the files cannot be read now."""
        if self._io.acquire(blocking=False):
            try:
                self._try_refresh()
            finally:
                self._io.release()

    def _try_refresh(self) -> None:
        try:
            self._log.refresh()
        except (CorruptedError, OSError) as e:
            log.debug("cannot re-read %s (the last view is used): %s", self._path, e)

    def _query(self, key: OffsetKey, queue_id: int) -> int:
        found = self._pending.query(key, queue_id)
        return found if found >= 0 else self._log.table.query(key, queue_id)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, or ``-1`` when the group never committed one.

        Raises:
            TypeError / ValueError: a name :meth:`OffsetKey.of
                <rocketstore.consumers.offset_table.OffsetKey.of>` refuses.
        """
        key = OffsetKey.of(group, topic)
        with self._lock:
            return self._query(key, queue_id)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        """Every committed ``queue_id -> next offset`` of the group on the topic."""
        key = OffsetKey.of(group, topic)
        with self._lock:
            out = self._log.table.offsets(key)
            out.update(self._pending.offsets(key))
            return out

    def table(self) -> OffsetTable:
        """A copy of the whole table."""
        with self._io, self._lock:
            return self._log.table.overlay(self._pending)

    def to_json(self) -> str:
        """The file content of the table shown now."""
        return self.table().to_json()

    def refresh(self, *, force: bool = False) -> bool:
        """Catch up with what other processes wrote: the records appended to
        the journal since the last read, or both files again when they were
        replaced (a rewrite of the json, detected by its inode, mtime or
        size), or always with ``force``; True if it read. Pending commits
        stay on top. Needs no lock.

        Raises:
            CorruptedError: as :meth:`load`.
        """
        with self._io:
            return self._log.refresh(force=force)

    def current(self) -> OffsetTable:
        """:meth:`table` after a :meth:`refresh`; when the files cannot be read
        now (damaged, or an OS error), the last view, with a warning."""
        try:
            self.refresh()
        except (CorruptedError, OSError) as e:
            log.warning("cannot re-read %s (the last view is used): %s", self._path, e)
        return self.table()

    def _take_key(self, key: OffsetKey) -> OffsetTable:
        """Remove ``key``'s pending entries (``_lock`` held); returns them."""
        gone = OffsetTable()
        for qid, off in self._pending.offsets(key).items():
            gone.set(key, qid, off)
            self._fences.pop((key, qid), None)
        self._pending.pop(key)
        self._pending_gen.pop(key, None)
        return gone

    def _settle(self, *done: OffsetTable) -> None:
        """Forget the pending entries written or dropped (those not committed again)."""
        with self._lock:
            for table in done:
                self._pending.discard_same(table)
            self._fences = {e: f for e, f in self._fences.items() if e[0] in self._pending
                            and self._pending.query(e[0], e[1]) >= 0}
            self._pending_gen = {k: g for k, g in self._pending_gen.items()
                                 if k in self._pending}

    def persist(self, before_write: Callable[[OffsetTable], None] | None = None, *,
                strict: OffsetKey | None = None, fold: bool = False) -> bool:
        """Write this object's pending commits; True if it wrote.

        Under ``consumerOffset.lock``: catch up with the journal, drop the
        pending entries of keys reset or deleted since they were committed
        (their generation changed, ``docs/format.md``, §13.1) and those
        their fence refuses, then append the others (those that change the
        table) to the journal as one record and sync it. ``fold`` then
        rewrites ``consumerOffset.json`` from the whole table (see
        :func:`~rocketstore.config.files.atomic_write`) and empties the
        journal. Commits made while a write is under way go in the next.
        ``before_write`` gets exactly the entries about to be appended,
        before they are (the writer's store makes the messages below those
        offsets durable); if it raises, nothing is written.

        Dropped entries are logged as warnings; a fence's refusal of the key
        ``strict`` (a sync commit's) is raised once the others are written.

        Raises:
            TimeoutError: ``consumerOffset.lock`` stayed held by another
                process past the lock timeout (the message names its pid).
        """
        with self._io:
            if fold and not self.dirty:
                self._try_refresh()
                fold = self._log.fold_needed()
            with self._lock:
                if not self._pending and not fold:
                    return False
                taken = self._pending.copy()
                gens = dict(self._pending_gen)
                fences = dict(self._fences)
            with self._hold():
                self._log.refresh(locked=True)
                stale = OffsetTable()
                for key in taken:
                    if gens.get(key, 0) != self._log.gens.get(key, 0):
                        stale.replace(key, taken.offsets(key))
                taken.remove(stale)
                refused, errors = _apply_fences(taken, fences)
                ops = self._changes(taken, gens)
                if ops and before_write is not None:
                    before_write(OffsetTable({k: o for _kind, k, _g, o in ops if o}))
                self._log.append(ops)
                wrote = bool(ops)
                if fold:
                    wrote = self._log.fold() or wrote
            self._settle(taken, stale, refused)
        self._warn_stale(stale)
        _report_fenced(errors, strict)
        return wrote

    def _changes(self, taken: OffsetTable, gens: Mapping[OffsetKey, int]) -> list[Op]:
        """The set ops of the entries of ``taken`` that change the table."""
        ops: list[Op] = []
        for key in taken:
            changed = {q: o for q, o in taken.offsets(key).items()
                       if self._log.table.query(key, q) != o}
            if changed:
                ops.append(("s", key, gens.get(key, 0), changed))
        return ops

    def _warn_stale(self, stale: OffsetTable) -> None:
        for key in stale:
            log.warning("offsets committed to group %r on topic %r before a reset or delete "
                        "of it were dropped, not written: %s", key.group, key.topic,
                        stale.offsets(key))

    def fold_if_due(self, interval: float) -> bool:
        """Rewrite ``consumerOffset.json`` from the json and the journal when
        the journal holds records and the json is ``interval`` seconds old or
        more (or missing); True if it did. Pending entries stay pending."""
        with self._io:
            self._try_refresh()
            if self._log.records == 0:
                return False
            try:
                age = time.time() - os.stat(self._path).st_mtime
            except FileNotFoundError:
                age = interval
            if age < interval:
                return False
            with self._hold():
                self._log.refresh(locked=True)
                return self._log.fold()

    def update(self, change: Callable[[OffsetTable], _R], *,
               drop: Iterable[OffsetKey] = ()) -> _R:
        """Change the table in place: ``change(table)`` edits the current
        table (read under the lock) and its result is returned; what changed
        is appended to the journal and the json is rewritten (keys left
        without queues are removed). The keys in ``drop`` (a reset or delete
        of those groups) get a new generation (``docs/format.md``, §13.1):
        entries pending from before, in any process, are dropped instead of
        written, here at once. Other pending commits are not written (they
        stay pending, on top).
        """
        drop = list(drop)
        with self._io:
            with self._lock:
                for key in drop:
                    self._take_key(key)
            with self._hold():
                self._log.refresh(locked=True)
                current = self._log.table
                table = current.copy()
                result = change(table)
                table.drop_empty()
                ops: list[Op] = []
                for key in sorted(set(current) | set(table) | set(drop)):
                    bump = key in drop
                    after = table.offsets(key)
                    if after == current.offsets(key) and key in table and not bump:
                        continue
                    gen = self._log.gens.get(key, 0) + bump
                    ops.append(("r", key, gen, after) if key in table else ("d", key, gen, None))
                self._log.append(ops)
                if ops:
                    self._log.fold()
            return result

    def clamp(self, end_of: Callable[[str, int], int]) -> list[tuple[OffsetKey, int, int, int]]:
        """Lower every offset above its queue's end to that end, in the files
        (under their lock) and in the pending commits.

        ``end_of(topic, queue_id)`` is the queue's max offset after recovery
        (or a huge number to leave the offset alone). An offset above it would
        make the group skip the messages written at those offsets after a
        restart. Returns ``(key, queue_id, old, new)`` for each offset
        lowered in the files.
        """
        with self._lock:
            self._pending.lower(end_of)
        if not self.table().lower(end_of):
            return []  # nothing to lower: the lock is not even taken
        return self.update(lambda table: table.lower(end_of))

    def __repr__(self) -> str:
        with self._io:
            n = len(self._log.table)
        return f"ConsumerOffsets({self._path!r}, {n} topic@group entries)"
