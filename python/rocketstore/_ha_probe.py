"""Where a stopped store's log forks from a master's (docs/format.md §21.8),
for ``rocketstore rejoin``.

A probe connects to the master's HA port as a slave does, reports one
offset ``x`` (the start of one of this store's records) and compares what
the master sends from there with this store's bytes, writing nothing and
reporting nothing more. It ends at the first byte that differs, at this
store's end (every byte equal), at the master's end (an empty frame: the
master has nothing more), or when the master closes the connection (it
refuses an offset past its end or below its first file, sending first an
empty frame at its end or its first file).

Records are the same record when their bytes at the same offset are equal
(a record holds its own offset and store time). So when a probe from ``x``
finds equal bytes up to the record at ``c > x``, the logs fork at ``c``;
when the record at ``x`` itself differs, the fork lies below ``x`` and the
next probe asks from further back: the start of the last record first,
then the start of each file, newest first (the first file at offset 0 also
from its second record: a report of 0 asks for no offset).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from rocketstore._ha_files import LogFiles

__all__ = ["ForkNotFound", "Probe", "find_fork", "probe"]

#: Bytes of a frame header: the start offset (8) and the size (4), big-endian.
_FRAME_HEADER: Final = 12
#: Largest frame body a slave takes (the engine's rule, docs/format.md §21.3).
_MAX_BODY: Final = 4 << 20


class Records(Protocol):
    """Where records start (a read-only ``NativeStore`` of the store)."""

    def ha_last_record_start(self) -> int: ...
    def ha_record_start(self, offset: int) -> int: ...


class ForkNotFound(Exception):
    """The master refused every offset asked, or broke the protocol."""


@dataclass(frozen=True)
class Probe:
    """How one probe ended, and at which offset."""

    kind: Literal["differs", "equal", "master_end", "closed"]
    offset: int
    #: Where the master's bytes started (the offset asked, unless it was 0).
    start: int


def _address(master: str) -> tuple[str, int]:
    host, sep, port = master.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"the master's address {master!r} is not host:port")
    return host.strip("[]"), int(port)


def probe(master: str, x: int, files: LogFiles, end: int, timeout: float) -> Probe:
    """Asks ``master`` for its log from ``x`` and compares it with ``files``
    below ``end`` (see the module header)."""
    deadline = time.monotonic() + timeout
    with socket.create_connection(_address(master), timeout=timeout) as s:
        s.sendall(x.to_bytes(8, "big"))
        expected, start = x, -1
        buf = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the master {master} sent nothing for {timeout:g} s")
            s.settimeout(min(left, 1.0))
            try:
                chunk = s.recv(1 << 16)
            except TimeoutError:
                continue
            if not chunk:
                return Probe("closed", expected, start)
            buf += chunk
            while len(buf) >= _FRAME_HEADER:
                at = int.from_bytes(buf[:8], "big", signed=True)
                size = int.from_bytes(buf[8:_FRAME_HEADER], "big", signed=True)
                if size < 0 or size > _MAX_BODY or at < 0:
                    raise ForkNotFound(f"the master {master} broke the protocol (a frame of "
                                       f"{size} bytes at {at})")
                if len(buf) < _FRAME_HEADER + size:
                    break
                body = bytes(buf[_FRAME_HEADER:_FRAME_HEADER + size])
                del buf[:_FRAME_HEADER + size]
                if start < 0 and x == 0:
                    expected = at  # a report of 0: the master chose where to start
                    if at >= end:
                        return Probe("closed", at, x)  # past this store's end: nothing compared
                if start < 0 and size == 0 and at != expected:
                    # Its end (x past it) or its first file (x below it),
                    # sent before it closes the connection (§21.3).
                    return Probe("closed", at, x)
                if at != expected:
                    raise ForkNotFound(f"the master {master} sent offset {at}, not {expected}")
                start = expected if start < 0 else start
                if size == 0:
                    return Probe("master_end", expected, start)
                n = max(0, min(size, end - at))
                mine = files.read(at, at + n)
                if mine != body[:n]:
                    i = next((k for k, (a, b) in enumerate(zip(mine, body, strict=False))
                              if a != b), len(mine))
                    return Probe("differs", at + i, start)
                expected += size
                if expected >= end:
                    return Probe("equal", end, start)


def _second_record(files: LogFiles) -> int:
    """Where the record after the one at offset 0 starts (0 when the first
    record's size is not that of a record in the first file)."""
    size = int.from_bytes(files.read(0, 4), "big", signed=True) if files.size >= 4 else 0
    return size if 0 < size < files.size else 0


def find_fork(master: str, files: LogFiles, records: Records, end: int,
              timeout: float) -> tuple[int, Probe]:
    """The offset where this store's log ``[.., end)`` stops being the
    master's (``end`` when nothing past it differs), and the probe that
    found it."""
    asked: list[int] = []
    starts = [f for f, _ in reversed(files.files)]
    if starts and starts[-1] == 0:
        # A report of 0 asks for no offset (a new slave: the master chooses
        # where it starts, §21.2), so the first file is probed from its
        # second record.
        starts.insert(-1, _second_record(files))
    for x in [records.ha_last_record_start(), *starts]:
        if x >= end or x in asked:
            continue
        asked.append(x)
        p = probe(master, x, files, end, timeout)
        if p.kind == "equal":
            return end, p
        if p.kind == "closed":
            continue
        c = records.ha_record_start(p.offset)
        if c > p.start or p.start == files.min_offset:
            return c, p
    if not asked:
        return end, Probe("equal", end, end)  # nothing to compare
    raise ForkNotFound(
        f"the master {master} refused every offset asked ({', '.join(map(str, asked))}): this "
        "store's end is past the master's, or below its first file (then reseed it: "
        "`rocketstore reseed PATH`), or ha_allowed_slaves refuses this host")
