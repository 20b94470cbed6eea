"""A stopped store's CommitLog read as files, and replication's side files
(docs/format.md §21.8), for ``rocketstore promote``, ``rejoin`` and
``reseed``. Bytes are copied, never decoded: where records start is the
engine's (``NativeStore.ha_last_record_start``, ``ha_record_start``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Final

from rocketstore import _native

__all__ = ["LogFiles", "move_aside_for_reseed", "side_file", "write_side_file"]

#: What a reseed moves aside: the data files (the config files stay).
_DATA_ENTRIES: Final = (_native.COMMIT_LOG_DIR, _native.CONSUME_QUEUE_DIR, _native.INDEX_DIR,
                        _native.CHECKPOINT_FILE, _native.ABORT_FILE)


def side_file(root: Path, prefix: str, offset: int) -> Path:
    """``<root>/ha/<prefix><20-digit offset>``."""
    return root / _native.HA_DIR / f"{prefix}{offset:0{_native.SEGMENT_NAME_DIGITS}d}"


def write_side_file(path: Path, data: bytes) -> None:
    """Writes ``data`` to a new file, synced with its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def move_aside_for_reseed(root: Path) -> Path:
    """Moves the data files into ``ha/reseed-<ms>/`` and removes the
    promotion marker; the folder they went to."""
    dest = root / _native.HA_DIR / f"{_native.RESEED_PREFIX}{time.time_ns() // 1_000_000}"
    dest.mkdir(parents=True)
    for name in _DATA_ENTRIES:
        if (root / name).exists():
            os.replace(root / name, dest / name)
    (root / _native.HA_DIR / _native.PROMOTED_FILE).unlink(missing_ok=True)
    for d in (dest, root):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return dest


class LogFiles:
    """The CommitLog files of a stopped store (``<root>/commitlog``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        folder = root / _native.COMMIT_LOG_DIR
        digits = _native.SEGMENT_NAME_DIGITS
        names = [p for p in folder.iterdir() if p.name.isdigit() and len(p.name) == digits] \
            if folder.is_dir() else []
        self.files: list[tuple[int, Path]] = sorted((int(p.name), p) for p in names)
        self.size = self.files[0][1].stat().st_size if self.files else 0

    @property
    def min_offset(self) -> int:
        """Start of the first file (0 when there is none)."""
        return self.files[0][0] if self.files else 0

    def _file_of(self, offset: int) -> tuple[int, Path] | None:
        for start, path in reversed(self.files):
            if start <= offset < start + self.size:
                return start, path
        return None

    def read(self, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` (short where no file holds them)."""
        out = bytearray()
        off = start
        while off < end:
            f = self._file_of(off)
            if f is None:
                break
            with open(f[1], "rb") as fh:
                fh.seek(off - f[0])
                chunk = fh.read(min(end, f[0] + self.size) - off)
            if not chunk:
                break
            out += chunk
            off += len(chunk)
        return bytes(out)

    def written_end(self, cut: int) -> int:
        """End of the non-zero bytes after ``cut`` in its file (the partial
        record a killed or stopped slave left after its last complete one)."""
        f = self._file_of(cut)
        if f is None:
            return cut
        with open(f[1], "rb") as fh:
            fh.seek(cut - f[0])
            rest = fh.read(f[0] + self.size - cut)
        return cut + len(rest.rstrip(b"\0"))
