r"""The broker's JSON config files (``<store>/config/*.json``), RocketMQ-compatible.

RocketMQ persists its managers with fastjson 1.x ``JSON.toJSONString(obj,
prettyFormat=true)`` (see ``docs/format.md``, §13). That output is *almost* JSON: maps with
integer keys are written with **unquoted** keys (``{0:12,1:5}``). This module
writes the same shape and reads both that and standard JSON:

* :func:`dumps_fastjson` / :func:`loads_fastjson`: the writer and the tolerant
  reader.
* :func:`atomic_write` / :func:`load_with_backup`: RocketMQ's ``.tmp`` /
  ``.bak`` protocol (``MixAll.string2File``), made crash-safe with
  ``os.replace`` and fsyncs.
* :class:`DelayOffsets` (``delayOffset.json``) and :class:`TopicConfigs`
  (``topics.json``); consumer offsets (``consumerOffset.json``), which
  several processes write, are :mod:`rocketstore.consumers.offsets`.

The fastjson codec (:func:`dumps_fastjson`, :func:`loads_fastjson`) lives in
:mod:`rocketstore.formats.fastjson`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rocketstore import _native
from rocketstore._checks import I32_MAX, I64_MAX
from rocketstore.errors import CorruptedError
from rocketstore.formats.fastjson import _is_int, dumps_fastjson, loads_fastjson

__all__ = [
    "MAX_CONFIG_FILE",
    "DelayOffsets",
    "NotRegularFileError",
    "TopicConfigs",
    "atomic_write",
    "dumps_fastjson",
    "load_with_backup",
    "loads_fastjson",
    "read_regular",
]

log = logging.getLogger("rocketstore")

_T = TypeVar("_T")

StrPath = str | os.PathLike[str]


# ---------------------------------------------------------------------------
# Files: .tmp / .bak protocol
# ---------------------------------------------------------------------------


#: Largest config file read, in bytes: a longer one is not a file rocketstore
#: or a broker writes (``/dev/zero`` behind a symlink, a runaway file).
MAX_CONFIG_FILE = 1 << 30


class NotRegularFileError(OSError):
    """A config file's place holds something else than a regular file of a
    sane size (a FIFO, a device, a symlink to one, a runaway file)."""


def read_regular(path: StrPath, limit: int = MAX_CONFIG_FILE) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of at most ``limit``
    bytes; None when it is missing.

    Opened ``O_NONBLOCK`` and checked with ``fstat`` before any read, so a
    FIFO or a device in its place (or a symlink to one) cannot block or
    read without end.

    Raises:
        OSError: not a regular file, larger than ``limit``, or unreadable.
    """
    target = os.fspath(path)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"{target} is not a regular file; remove or replace it")
        if st.st_size > limit:
            raise NotRegularFileError(f"{target} holds {st.st_size} bytes, more than the {limit} "
                          "a config file may")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise NotRegularFileError(f"{target} grows past the {limit} bytes a config file may")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_synced(path: str, data: bytes) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # whatever a crash or a stranger left (a FIFO would block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: StrPath, text: str) -> None:
    """Replace the file at ``path`` with ``text`` (UTF-8), crash-safely.

    RocketMQ's protocol (``MixAll.string2File``), made atomic:

    1. write ``path.tmp`` and fsync it;
    2. copy the current content of ``path`` (if it exists and is non-empty)
       to ``path.bak``, fsynced — an empty file is never copied, so it cannot
       overwrite a good backup;
    3. ``os.replace(path.tmp, path)`` (atomic) and fsync the directory.

    After a crash at any point ``path`` holds either the old or the new text,
    and ``path.bak`` the content before the last completed write. The parent
    directory is created if missing. Not safe for concurrent writers of the
    same ``path`` (they share ``path.tmp``); the classes here serialize their
    own writes.
    """
    target = os.fspath(path)
    directory = os.path.dirname(target) or "."
    os.makedirs(directory, exist_ok=True)
    tmp, bak = target + _native.TEMP_SUFFIX, target + _native.BACKUP_SUFFIX
    _write_synced(tmp, text.encode("utf-8"))
    try:
        old = read_regular(target) or b""
    except NotRegularFileError as e:  # nothing to back up
        log.warning("%s is replaced without a backup: %s", target, e)
        old = b""
    if old:
        _write_synced(bak, old)
    os.replace(tmp, target)
    _fsync_dir(directory)


def _load_parsed(path: StrPath, parse: Callable[[str], _T]) -> tuple[str, _T] | None:
    """The first of ``path``, ``path.bak`` that exists, is non-empty and parses."""
    target = os.fspath(path)
    problems: list[str] = []
    for candidate in (target, target + _native.BACKUP_SUFFIX):
        try:
            data = read_regular(candidate)
        except NotRegularFileError as e:
            problems.append(f"{candidate}: {e}")
            log.warning("cannot load %s: %s", candidate, e)
            continue
        if data is None:
            continue
        if not data.strip():
            # A write never leaves an empty file: damage, not "nothing yet".
            log.warning("%s is empty; reading it as missing", candidate)
            continue
        try:
            text = data.decode("utf-8")
            parsed = parse(text)
        except ValueError as e:  # includes JSONDecodeError and UnicodeDecodeError
            problems.append(f"{candidate}: {e}")
            log.warning("cannot load %s: %s", candidate, e)
            continue
        if problems:
            log.warning("loaded the backup %s instead of %s", candidate, target)
        return text, parsed
    if problems:
        raise CorruptedError("no usable config file: " + "; ".join(problems))
    return None


def load_with_backup(
    path: StrPath, parse: Callable[[str], object] = loads_fastjson
) -> str | None:
    """Text of ``path``, or of ``path.bak`` if ``path`` is missing, empty or unparseable.

    ``parse`` decides what "parseable" means (it raises ``ValueError`` on bad
    text); by default :func:`loads_fastjson`. Returns ``None`` when neither
    file exists (or both are empty): a fresh store.

    Raises:
        CorruptedError: a file has content but neither file parses (RocketMQ
            refuses to start the broker then; we name both files and why).
    """
    found = _load_parsed(path, parse)
    return None if found is None else found[0]


#: Largest queue id (a Java int) and offset (a Java long) the files hold.
MAX_QUEUE_ID = I32_MAX
MAX_OFFSET = I64_MAX


def _check_int(
    name: str, value: object, *, minimum: int | None = 0, maximum: int = MAX_OFFSET
) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    assert isinstance(value, int)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > maximum:
        raise ValueError(f"{name} is out of range: {value} is over {maximum}")
    return value


def _check_name(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    return value


# ---------------------------------------------------------------------------
# Offset maps
# ---------------------------------------------------------------------------


def _int_map(
    raw: dict[Any, Any], where: str, key_name: str, *, key_min: int = 0
) -> dict[int, int]:
    """``{int: int}`` from a fastjson object (keys quoted or not), or ValueError.

    Keys are Java ints in ``[key_min, MAX_QUEUE_ID]`` and values offsets in
    ``[0, MAX_OFFSET]`` (``docs/format.md``, §13).
    """
    out: dict[int, int] = {}
    for key, value in raw.items():
        if isinstance(key, str):
            try:
                key = int(key)
            except ValueError:
                raise ValueError(f"{where}: {key!r} is not a {key_name} (an integer)") from None
        if not key_min <= key <= MAX_QUEUE_ID:
            raise ValueError(f"{where}: {key_name} {key} is outside [{key_min}, {MAX_QUEUE_ID}]")
        if not _is_int(value):
            raise ValueError(f"{where}: {key_name} {key} = {value!r} is not an int")
        if not 0 <= value <= MAX_OFFSET:
            raise ValueError(f"{where}: {key_name} {key} = {value} is outside [0, {MAX_OFFSET}]")
        out[key] = value
    return out


# ---------------------------------------------------------------------------
# delayOffset.json
# ---------------------------------------------------------------------------


def _parse_delay_offsets(text: str) -> dict[int, int]:
    doc = loads_fastjson(text)
    if not isinstance(doc, dict):
        raise ValueError("delay offsets: the document is not a JSON object")
    raw = doc.get("offsetTable")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("delay offsets: offsetTable is not an object")
    return _int_map(raw, "delay offsets", "delay level", key_min=1)


class DelayOffsets:
    """Delayed-delivery progress: ``<store>/config/delayOffset.json``.

    RocketMQ's ``ScheduleMessageService`` dump: delay level (1-based) → the
    next offset to deliver in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``::

        {"offsetTable":{1:6,2:17}}

    written with :func:`dumps_fastjson` (unquoted levels), read with quoted or
    unquoted levels; other top-level keys (5.x ``dataVersion``) are ignored.
    Not thread-safe: the schedule service is its only user.

    >>> import os, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, "config", "delayOffset.json")
    >>> offsets = DelayOffsets.load(path)
    >>> offsets.get(1)
    0
    >>> offsets.set(1, 6)
    >>> offsets.persist(), offsets.persist()          # writes only when changed
    (True, False)
    >>> DelayOffsets.load(path).table()
    {1: 6}
    >>> tmp.cleanup()
    """

    FILE_NAME = _native.DELAY_OFFSET_FILE

    def __init__(self, path: StrPath, table: Mapping[int, int] | None = None) -> None:
        """A progress table bound to ``path`` (nothing is read; see :meth:`load`)."""
        self._path = os.fspath(path)
        self._table: dict[int, int] = dict(table or {})
        self._dirty = False

    @classmethod
    def load(cls, path: StrPath) -> DelayOffsets:
        """Read ``path`` (or its ``.bak``); empty when neither exists.

        Raises:
            CorruptedError: the file and its backup both have content and
                neither is a valid table.
        """
        found = _load_parsed(path, _parse_delay_offsets)
        return cls(path, None if found is None else found[1])

    @property
    def path(self) -> str:
        return self._path

    @property
    def dirty(self) -> bool:
        """True when the table changed since the last :meth:`persist`."""
        return self._dirty

    def get(self, level: int) -> int:
        """The next offset to deliver of ``level`` (0 when never recorded)."""
        return self._table.get(level, 0)

    def has(self, level: int) -> bool:
        """True when the table holds ``level``."""
        return level in self._table

    def set(self, level: int, offset: int) -> None:
        """Record ``offset`` as the next offset to deliver of ``level``."""
        _check_int("level", level, minimum=1)
        _check_int("offset", offset)
        if self._table.get(level) != offset:
            self._table[level] = offset
            self._dirty = True

    def table(self) -> dict[int, int]:
        """A copy of the table, ``{level: next offset}``."""
        return dict(self._table)

    def to_json(self) -> str:
        """The file content :meth:`persist` would write now."""
        return dumps_fastjson({"offsetTable": self._table})

    def persist(self, before_write: Callable[[], object] | None = None) -> bool:
        """Write the file (see :func:`atomic_write`) if anything changed.

        ``before_write`` runs after the table is taken and before the file is
        written (the schedule service flushes the CommitLog there, so saved
        progress never runs ahead of durable copies); if it raises, nothing
        is written. Returns True if it wrote.
        """
        if not self._dirty:
            return False
        text = self.to_json()
        if before_write is not None:
            before_write()
        atomic_write(self._path, text)
        self._dirty = False
        return True

    def __repr__(self) -> str:
        return f"DelayOffsets({self._path!r}, {self._table!r})"


# ---------------------------------------------------------------------------
# topics.json
# ---------------------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_JAVA_INT = I32_MAX + 1
_JAVA_LONG = I64_MAX + 1


def _is_java_int(value: object, bound: int) -> bool:
    """True for an int in ``[-bound, bound - 1]``."""
    return _is_int(value) and -bound <= value < bound  # type: ignore[operator]


def _parse_topics(text: str) -> dict[str, Any]:
    doc = loads_fastjson(text)
    if not isinstance(doc, dict):
        raise ValueError("topic configs: the document is not a JSON object")
    table = doc.get("topicConfigTable")
    if table is None:
        table = doc["topicConfigTable"] = {}
    if not isinstance(table, dict):
        raise ValueError("topic configs: topicConfigTable is not an object")
    for name, cfg in table.items():
        if not isinstance(name, str) or not isinstance(cfg, dict):
            raise ValueError(f"topic configs: entry {name!r} is not a topic config object")
        for field in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"):
            if field in cfg and not _is_java_int(cfg[field], _JAVA_INT):
                raise ValueError(f"topic configs: {name}.{field} = {cfg[field]!r} "
                                 "is not a Java int")
    dv = doc.get("dataVersion")
    if dv is not None:
        if not isinstance(dv, dict):
            raise ValueError("topic configs: dataVersion is not an object")
        for field in ("counter", "timestamp", "stateVersion"):
            if field in dv and not _is_java_int(dv[field], _JAVA_LONG):
                raise ValueError(f"topic configs: dataVersion.{field} is not a Java long")
    return doc


class TopicConfigs:
    """Topics known to the store: ``<store>/config/topics.json``.

    The file is RocketMQ's ``TopicConfigManager`` dump (``docs/format.md``, §13)::

        {"dataVersion":{"counter":N,"timestamp":ms},
         "topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":16,
            "topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,
            "writeQueueNums":16}}}

    A file written by a broker round-trips: unknown top-level keys and unknown
    per-topic fields (5.x ``attributes``, ``stateVersion``, ...) are kept.
    All methods are thread-safe. ``clock`` returns epoch milliseconds (for
    ``dataVersion.timestamp``; injectable for tests).

    >>> import os, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, "topics.json")
    >>> topics = TopicConfigs.load(path, clock=lambda: 1700000000000)
    >>> topics.ensure("TopicTest", 3), topics.ensure("TopicTest", 3)
    (True, False)
    >>> topics.topics()["TopicTest"]["writeQueueNums"], topics.data_version
    (16, {'counter': 1, 'timestamp': 1700000000000})
    >>> tmp.cleanup()
    """

    FILE_NAME = _native.TOPICS_FILE
    DEFAULT_QUEUE_NUMS = 16
    DEFAULT_PERM = 6  # PERM_READ | PERM_WRITE

    def __init__(
        self,
        path: StrPath,
        document: Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """Topic configs bound to ``path`` (nothing is read; see :meth:`load`).

        ``document`` is a parsed file (as :meth:`load` reads it); ``None``
        starts empty with ``dataVersion`` counter 0 stamped now, as RocketMQ's
        ``DataVersion`` constructor does.
        """
        self._path = os.fspath(path)
        self._clock = clock or _now_ms
        doc: dict[str, Any] = copy.deepcopy(dict(document)) if document is not None else {}
        dv = doc.get("dataVersion")
        if not isinstance(dv, dict):
            dv = doc["dataVersion"] = {}
        dv.setdefault("counter", 0)
        dv.setdefault("timestamp", self._clock())
        if not isinstance(doc.get("topicConfigTable"), dict):
            doc["topicConfigTable"] = {}
        self._doc = doc
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._version = 0
        self._persisted_version = 0

    @classmethod
    def load(cls, path: StrPath, *, clock: Callable[[], int] | None = None) -> TopicConfigs:
        """Read ``path`` (or its ``.bak``); empty when neither exists.

        Raises:
            CorruptedError: the file and its backup both have content and
                neither is a valid topic config document.
        """
        found = _load_parsed(path, _parse_topics)
        return cls(path, None if found is None else found[1], clock=clock)

    @property
    def path(self) -> str:
        return self._path

    @property
    def dirty(self) -> bool:
        """True when :meth:`ensure` changed something since the last :meth:`persist`."""
        with self._lock:
            return self._version != self._persisted_version

    @property
    def data_version(self) -> dict[str, int]:
        """A copy of ``dataVersion`` (``counter``, ``timestamp``, 5.x ``stateVersion``)."""
        with self._lock:
            return dict(self._doc["dataVersion"])

    def ensure(self, topic: str, queue_id: int) -> bool:
        """Register that the store holds ``topic`` queue ``queue_id``.

        A new topic gets RocketMQ's defaults with ``readQueueNums`` /
        ``writeQueueNums`` = ``max(16, queue_id + 1)``; a known topic whose
        queue counts are too small for ``queue_id`` has them raised to
        ``queue_id + 1``. Any change bumps ``dataVersion`` (counter + 1,
        timestamp = now). Returns True if something changed.
        """
        _check_name("topic", topic)
        _check_int("queue_id", queue_id, maximum=MAX_QUEUE_ID)
        need = queue_id + 1
        with self._lock:
            table: dict[str, Any] = self._doc["topicConfigTable"]
            cfg = table.get(topic)
            if cfg is None:
                nums = max(self.DEFAULT_QUEUE_NUMS, need)
                table[topic] = {
                    "order": False,
                    "perm": self.DEFAULT_PERM,
                    "readQueueNums": nums,
                    "topicFilterType": "SINGLE_TAG",
                    "topicName": topic,
                    "topicSysFlag": 0,
                    "writeQueueNums": nums,
                }
            else:
                changed = False
                for field in ("readQueueNums", "writeQueueNums"):
                    if cfg.get(field, 0) < need:
                        cfg[field] = need
                        changed = True
                if not changed:
                    return False
            dv = self._doc["dataVersion"]
            dv["counter"] = dv.get("counter", 0) + 1
            dv["timestamp"] = self._clock()
            self._version += 1
            return True

    def topics(self) -> dict[str, dict[str, Any]]:
        """A deep copy of ``topicConfigTable``: ``{topic: {field: value}}``."""
        with self._lock:
            return copy.deepcopy(self._doc["topicConfigTable"])

    def to_json(self) -> str:
        """The file content :meth:`persist` would write now."""
        with self._lock:
            return dumps_fastjson(self._doc)

    def persist(self) -> bool:
        """Write the file (see :func:`atomic_write`) if anything changed; True if it wrote."""
        with self._persist_lock:
            with self._lock:
                if self._version == self._persisted_version:
                    return False
                version = self._version
                text = dumps_fastjson(self._doc)
            atomic_write(self._path, text)
            with self._lock:
                self._persisted_version = version
            return True

    def __repr__(self) -> str:
        with self._lock:
            n = len(self._doc["topicConfigTable"])
        return f"TopicConfigs({self._path!r}, {n} topics)"
