r"""The committed offsets on disk: ``consumerOffset.json`` and its journal.

``config/consumerOffset.json`` keeps RocketMQ's shape (``docs/format.md``,
§13); ``config/consumerOffset.journal`` beside it holds what was committed
since the json was last rewritten (*folded*), so a durable commit appends
one record and syncs it instead of rewriting the whole table
(``docs/format.md``, §13.3). :class:`OffsetLog` is one process's view of the
two files: the table they make together, each key's generation (bumped by a
reset or delete, §13.1), and how far into the journal it has read. Its
writing methods must run under ``config/consumerOffset.lock``; reading needs
no lock (files are replaced by rename; a record still being appended is
read as not there yet).

A record is one line: the payload's 16-hex-digit BLAKE2b digest, a space,
the payload (compact JSON, no raw newline) and ``\n``. The first line's
payload is the header (a JSON object: ``id`` — random, new for every
journal, so its line's digest tells it from a later journal that took the
same inode number — ``base`` — the digest and size of the json it continues
— and ``gens``), every later one a list of ops::

    ["s", "<topic>@<group>", gen, {"<queue id>": offset, ...}]   set entries
    ["r", "<topic>@<group>", gen, {"<queue id>": offset, ...}]   replace the key (reset)
    ["d", "<topic>@<group>", gen]                                delete the key

``r`` and ``d`` set the key's generation to ``gen``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from rocketstore import _native
from rocketstore.config.files import (
    MAX_CONFIG_FILE,
    NotRegularFileError,
    _fsync_dir,
    _int_map,
    _load_parsed,
    atomic_write,
)
from rocketstore.consumers.offset_table import OffsetKey, OffsetTable

__all__ = ["JOURNAL_SUFFIX", "MAX_RECORD", "OffsetLog", "Op"]

log = logging.getLogger("rocketstore")

#: The journal's name: ``consumerOffset.json`` -> ``consumerOffset.journal``.
JOURNAL_SUFFIX = ".journal"
#: Largest record a reader accepts (a longer line is damage).
MAX_RECORD = 64 << 20
_DIGEST = 16  # hex digits of a record's digest

#: One op: (kind "s" | "r" | "d", key, generation, offsets or None).
Op = tuple[str, OffsetKey, int, dict[int, int] | None]


def digest(data: bytes) -> str:
    """The 16-hex-digit BLAKE2b digest the journal checks records (and the
    json it continues) by."""
    return hashlib.blake2b(data, digest_size=_DIGEST // 2).hexdigest()


def frame(payload: bytes) -> bytes:
    """``payload`` as a journal line: digest, space, payload, newline."""
    return digest(payload).encode() + b" " + payload + b"\n"


def frames(data: bytes, pos: int) -> tuple[list[bytes], int]:
    """The payloads of the whole, intact lines of ``data`` from ``pos``; and
    where they end (the first line without its newline, or whose digest
    does not match, or the end)."""
    out = []
    while True:
        end = data.find(b"\n", pos, pos + _DIGEST + 1 + MAX_RECORD + 1)
        if end < 0:
            break
        line = data[pos:end]
        payload = line[_DIGEST + 1:]
        if line[_DIGEST:_DIGEST + 1] != b" " or line[:_DIGEST] != digest(payload).encode():
            break
        out.append(payload)
        pos = end + 1
    return out, pos


def encode_ops(ops: Iterable[Op]) -> bytes:
    rows: list[list[object]] = []
    for kind, key, gen, offsets in ops:
        row: list[object] = [kind, key.text, gen]
        if offsets is not None:
            row.append({str(q): o for q, o in offsets.items()})
        rows.append(row)
    return json.dumps(rows, separators=(",", ":"), ensure_ascii=False).encode()


def decode_ops(payload: bytes) -> list[Op]:
    """The ops of a record. Raises ValueError when it is not a list of ops."""
    rows = json.loads(payload.decode())
    if not isinstance(rows, list):
        raise ValueError("a journal record is not a list of ops")
    ops: list[Op] = []
    for row in rows:
        if not (isinstance(row, list) and len(row) in (3, 4) and row[0] in ("s", "r", "d")
                and isinstance(row[2], int)):
            raise ValueError(f"a journal op is malformed: {row!r}")
        key = OffsetKey.parse(row[1])
        offsets = None
        if row[0] != "d":
            if len(row) != 4 or not isinstance(row[3], dict):
                raise ValueError(f"a journal op has no offsets: {row!r}")
            offsets = _int_map(row[3], f"journal op on {row[1]!r}", "queue id")
        ops.append((row[0], key, row[2], offsets))
    return ops


def apply_ops(table: OffsetTable, gens: dict[OffsetKey, int], ops: Iterable[Op], *,
              entries: bool = True) -> None:
    """Apply ``ops`` (in order) to ``table`` (unless not ``entries``) and ``gens``."""
    for kind, key, gen, offsets in ops:
        if kind != "s":
            gens[key] = max(gen, gens.get(key, 0))
        if not entries:
            continue
        if kind == "d":
            table.pop(key)
        elif kind == "r":
            assert offsets is not None
            table.replace(key, offsets)
        else:
            assert offsets is not None
            for q, o in offsets.items():
                table.set(key, q, o)


@dataclass
class _Header:
    hash: str
    size: int
    gens: dict[OffsetKey, int]
    #: Random, new for every journal: two journals never share a header, so
    #: the first line's digest tells a journal apart from a later one that
    #: took the same inode number (file systems reuse freed inodes at once).
    nonce: str = ""

    def encode(self) -> bytes:
        doc = {"id": self.nonce, "base": {"hash": self.hash, "size": self.size},
               "gens": {k.text: g for k, g in sorted(self.gens.items()) if g}}
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, payload: bytes) -> _Header:
        doc = json.loads(payload.decode())
        base = doc["base"]
        gens = {OffsetKey.parse(k): int(g) for k, g in doc.get("gens", {}).items()}
        return cls(str(base["hash"]), int(base["size"]), gens, str(doc.get("id", "")))


def _open_regular(path: str, flags: int) -> int | None:
    """A descriptor of ``path`` if it is a regular file (None if missing);
    ``O_NONBLOCK`` so a FIFO cannot block the open.

    Raises:
        OSError: anything but a regular file is there.
    """
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularFileError(f"{path} is not a regular file; remove it (the committed "
                                  "offsets are in consumerOffset.json and its journal)")
    return fd


class OffsetLog:
    """One process's view of ``consumerOffset.json`` and its journal.

    Not thread-safe: its owner (:class:`~rocketstore.consumers.offsets.ConsumerOffsets`)
    guards it. Methods that write must run under the offsets lock.
    """

    def __init__(self, json_path: str) -> None:
        self.json_path = json_path
        self.journal_path = os.path.splitext(json_path)[0] + JOURNAL_SUFFIX
        self.table = OffsetTable()
        self.gens: dict[OffsetKey, int] = {}
        self._json_id: tuple[int, int, int] | None = None
        self._base = (digest(b""), 0)  # digest and size of the json bytes read
        self._journal_ino: int | None = None
        self._head: bytes | None = None  # the journal's first bytes (its header's digest)
        self._pos = 0  # bytes of the journal applied
        self._valid = False  # the journal continues this json (its records apply)
        self.records = 0  # records applied since the journal's header

    # -- reading -------------------------------------------------------------

    def refresh(self, *, force: bool = False, locked: bool = False) -> bool:
        """Catch up with the files; True if anything was read. With
        ``locked`` (the offsets lock held) a torn journal tail is cut off.

        Raises:
            CorruptedError: the json and its backup both have content and
                neither parses.
            OSError: a file cannot be read, or is not a regular file.
        """
        for _ in range(10):
            json_id = _file_id(self.json_path)
            jst = _stat(self.journal_path)
            if (not force and json_id == self._json_id
                    and (None if jst is None else jst.st_ino) == self._journal_ino):
                if jst is None:
                    return False
                tail = self._read_tail(locked)
                if tail is not None:
                    return tail
            elif self._load(locked) or locked:
                return True
            force = True  # a fold replaced the files meanwhile: read them again
        raise OSError(f"{self.json_path} keeps being replaced; cannot read a stable view")

    def _read_tail(self, locked: bool) -> bool | None:
        """Apply the records appended since the last read; None when the
        journal is not the one read before (its first line differs: a new
        journal that took the old one's inode number), so it must be read whole."""
        fd = _open_regular(self.journal_path, os.O_RDONLY)
        if fd is None:
            return None
        try:
            if os.pread(fd, _DIGEST, 0) != self._head:
                return None
            size = os.fstat(fd).st_size
            if size <= self._pos:
                return False
            if size > MAX_CONFIG_FILE:
                raise NotRegularFileError(f"{self.journal_path} holds {size} bytes, more than "
                                          f"{MAX_CONFIG_FILE}: not a journal rocketstore writes")
            data = os.pread(fd, size - self._pos, self._pos)
        finally:
            os.close(fd)
        payloads, end = frames(data, 0)
        self._apply(payloads)
        self._pos += end
        if locked and end < len(data):
            self._cut(self._pos)
        return bool(payloads)

    def _apply(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            try:
                ops = decode_ops(payload)
            except ValueError as e:  # intact frame, foreign content: skip it
                log.warning("%s: a record is not understood (skipped): %s", self.journal_path, e)
                continue
            apply_ops(self.table, self.gens, ops, entries=self._valid)
            self.records += 1

    def _load(self, locked: bool) -> bool:
        """Read both files whole; False if one was replaced while reading."""
        json_id = _file_id(self.json_path)
        journal = self._read_journal()
        raw, table = _load_json(self.json_path)
        if not locked and _file_id(self.json_path) != json_id:
            return False
        ino, data = journal if journal is not None else (None, b"")
        payloads, end = frames(data, 0)
        header = None
        if payloads:
            try:
                header = _Header.decode(payloads[0])
            except (ValueError, KeyError, TypeError) as e:
                log.warning("%s: its header is not understood (ignored): %s",
                            self.journal_path, e)
        self.table, self._json_id = table, json_id
        self._base = (digest(raw), len(raw))
        self._journal_ino, self._pos, self.records = ino, end, 0
        self._head = data[:_DIGEST] if journal is not None else None
        self.gens = {} if header is None else dict(header.gens)
        self._valid = header is not None and self._continues(header)
        self._apply(payloads[1:])
        if locked and end < len(data):
            self._cut(end)
        return True

    def _continues(self, header: _Header) -> bool:
        """Whether the journal's records apply to the json just read: its
        header names that json's digest and size. When not, the json was
        rewritten after the journal's records were made: by a rewrite from
        this journal cut short before the journal went (the json holds all
        of them then), or by another tool (its json wins). Either way only
        the generations are taken."""
        if (header.hash, header.size) == self._base:
            return True
        log.warning("%s does not continue %s (a rewrite cut short, or the json was written "
                    "by another tool): its entries are not replayed, its generations are kept",
                    self.journal_path, self.json_path)
        return False

    def _read_journal(self) -> tuple[int, bytes] | None:
        fd = _open_regular(self.journal_path, os.O_RDONLY)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if st.st_size > MAX_CONFIG_FILE:
                raise OSError(f"{self.journal_path} holds {st.st_size} bytes, more than "
                              f"{MAX_CONFIG_FILE}: not a journal rocketstore writes")
            data = os.pread(fd, st.st_size, 0)
        finally:
            os.close(fd)
        return st.st_ino, data

    # -- writing (under the offsets lock) --------------------------------------

    def _cut(self, pos: int) -> None:
        """Cut a torn tail (a record a crash left half written)."""
        log.warning("%s: cutting a torn record at byte %d", self.journal_path, pos)
        fd = _open_regular(self.journal_path, os.O_WRONLY)
        if fd is not None:
            try:
                os.ftruncate(fd, pos)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _start_journal(self) -> None:
        """A new journal continuing the json as read (its header only)."""
        header = _Header(self._base[0], self._base[1], dict(self.gens), os.urandom(8).hex())
        data = frame(header.encode())
        tmp = self.journal_path + _native.TEMP_SUFFIX
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
            ino = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        os.replace(tmp, self.journal_path)
        _fsync_dir(os.path.dirname(self.journal_path) or ".")
        self._journal_ino, self._pos, self._valid, self.records = ino, len(data), True, 0
        self._head = data[:_DIGEST]

    def append(self, ops: list[Op]) -> None:
        """Append one record of ``ops`` and sync it (durable when it returns)."""
        if not ops:
            return
        if not self._valid or self._journal_ino is None:
            self._start_journal()
        data = frame(encode_ops(ops))
        fd = _open_regular(self.journal_path, os.O_WRONLY)
        if fd is None:  # removed under the lock: by hand
            self._start_journal()
            fd = _open_regular(self.journal_path, os.O_WRONLY)
            assert fd is not None
        try:
            view = memoryview(data)
            at = self._pos
            while view:
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self._pos += len(data)
        apply_ops(self.table, self.gens, ops)
        self.records += 1

    def fold_needed(self) -> bool:
        """Whether :meth:`fold` would write (as far as this view knows)."""
        return self.records > 0 or (self._json_id is None and bool(len(self.table)))

    def fold(self) -> bool:
        """Rewrite the json from the table and start an empty journal; True
        if the json was written (it is when the journal held records)."""
        if not self.fold_needed():
            return False
        text = self.table.to_json()
        atomic_write(self.json_path, text)
        raw = text.encode()
        self._base = (digest(raw), len(raw))
        self._json_id = _file_id(self.json_path)
        if any(self.gens.values()):
            self._start_journal()  # the generations live on in its header
        else:
            self._drop_journal()
        return True

    def _drop_journal(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.journal_path)
            _fsync_dir(os.path.dirname(self.journal_path) or ".")
        self._journal_ino, self._pos, self._valid, self.records = None, 0, False, 0
        self._head = None


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _file_id(path: str) -> tuple[int, int, int] | None:
    """What changes whenever the file is replaced (inode, mtime, size); None if missing."""
    st = _stat(path)
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)


def _load_json(path: str) -> tuple[bytes, OffsetTable]:
    """The bytes and table of ``path`` (or its ``.bak``, §13); empty if neither.

    Raises:
        CorruptedError: both have content and neither parses.
    """
    found = _load_parsed(path, OffsetTable.from_json)
    if found is None:
        return b"", OffsetTable()
    # Strict UTF-8 decoded it, so encoding gives back the very bytes read.
    return found[0].encode("utf-8"), found[1]
