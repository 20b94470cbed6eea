"""The checkpoint's property-CRC ranges count only as far as the bytes
still show them (docs/format.md §11, "Ranges another writer wrote over").

A range lists CommitLog bytes rocketstore wrote with ``__CRC32#``. When
the bytes at a range's boundaries are not what such a range has there (the
property's 20 bytes just before its end, a record with the property at its
start), or the durable mark is stale (a broker rewrote
``physicMsgTimestamp``), another writer wrote over part of it: the range
counts only up to the first record without the property. Records past that
point are read with the checks of records written without the property;
records before it are still checked for it.

The stores here are made by hand: records with the property, then records
without it (a writer with ``enabled_append_prop_crc=False``, as a RocketMQ
4.9 broker or master writes them), then a checkpoint whose range claims
some of the latter.
"""

from __future__ import annotations

import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.presets import SEG, SMALL, body_of
from rocketstore import CorruptedError, MessageStore, PutResult, StoreConfig
from rocketstore.cli import main as cli_main

TOPIC = "topic"


def cfg(path: Path, **kw: Any) -> StoreConfig:
    return StoreConfig(store_path=str(path), **{**SMALL, **kw})


def crc_ranges(path: Path) -> list[tuple[int, int]]:
    """The property-CRC ranges block of the checkpoint."""
    block = (path / "checkpoint").read_bytes()[3072:]
    assert block[:8] == b"RSPCRC01"
    n = struct.unpack_from(">i", block, 8)[0]
    assert struct.unpack_from(">I", block, 12)[0] == zlib.crc32(block[:12] + block[16:16 + 16 * n])
    return [struct.unpack_from(">qq", block, 16 + 16 * i) for i in range(n)]


def claim_ranges(path: Path, ranges: list[tuple[int, int]]) -> None:
    """Writes a valid ranges block claiming ``ranges`` (byte 0, and so the
    durable mark, untouched)."""
    body = b"".join(struct.pack(">qq", s, e) for s, e in ranges)
    head = b"RSPCRC01" + struct.pack(">i", len(ranges))
    block = head + struct.pack(">I", zlib.crc32(head + body)) + body
    with open(path / "checkpoint", "r+b") as f:
        f.seek(3072)
        f.write(block)


def stale_mark(path: Path) -> None:
    """What a broker does to the checkpoint: a new physicMsgTimestamp."""
    with open(path / "checkpoint", "r+b") as f:
        ts = struct.unpack(">q", f.read(8))[0]
        f.seek(0)
        f.write(struct.pack(">q", ts + 1))


def flip_first_property_name(path: Path, r: PutResult) -> None:
    """Damage the property CRC catches and the body CRC does not: the case of
    the first letter of the record's first property name (``KEYS``)."""
    seg = path / "commitlog" / f"{r.wrote_offset // SEG * SEG:020d}"
    with open(seg, "r+b") as f:
        f.seek(r.wrote_offset % SEG)
        rec = f.read(r.wrote_bytes)
        body_len = struct.unpack_from(">i", rec, 84)[0]
        p = 88 + body_len
        p += 1 + rec[p] + 2
        assert rec[p:p + 4] == b"KEYS"
        f.seek(r.wrote_offset % SEG + p)
        f.write(b"k")


def build(path: Path, k: int, m: int, size: int) -> tuple[list[PutResult], list[PutResult]]:
    """``k`` records with the property, then ``m`` without."""
    def write(first: int, n: int, **kw: Any) -> list[PutResult]:
        with MessageStore(cfg(path, **kw)) as s:
            out = [s.put(TOPIC, body_of(i, size + i % 7), queue_id=i % 2, keys=[f"key{i}"])
                   for i in range(first, first + n)]
        assert all(r.ok for r in out)
        return out

    crc = write(0, k)
    plain = write(k, m, enabled_append_prop_crc=False)
    assert crc_ranges(path) == [(0, plain[0].wrote_offset)]
    return crc, plain


def pull_all(store: MessageStore) -> tuple[list[bytes], int]:
    bodies, damaged = [], 0
    for q in range(2):
        off = 0
        while off < store.get_max_offset_in_queue(TOPIC, q):
            r = store.get_message("g", TOPIC, q, off, 32)
            bodies += [x.body for x in r.messages]
            damaged += r.damaged
            off = r.next_begin_offset
    return sorted(bodies), damaged


@settings(max_examples=12, deadline=None)
@given(
    k=st.integers(1, 30),
    m=st.integers(1, 30),
    size=st.integers(50, 2500),
    pick=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    start_inside=st.booleans(),
    stale=st.booleans(),
    flip=st.booleans(),
)
def test_a_range_that_no_longer_matches_the_bytes_is_cut(
    k: int, m: int, size: int, pick: tuple[float, float], start_inside: bool, stale: bool,
    flip: bool,
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s"
        crc, plain = build(path, k, m, size)
        bodies = sorted(body_of(i, size + i % 7) for i in range(k + m))
        cut = plain[0].wrote_offset
        # The claim ends at the end of a record written without the
        # property, and starts at 0 or at one of those records.
        j = min(m - 1, int(pick[0] * m))
        end = plain[j].wrote_offset + plain[j].wrote_bytes
        start = plain[min(j, int(pick[1] * m))].wrote_offset if start_inside else 0
        claim_ranges(path, [(start, end)])
        if stale:
            stale_mark(path)
        victim = crc[len(crc) // 2]
        if flip and not start_inside:
            flip_first_property_name(path, victim)
        flipped = flip and not start_inside
        with MessageStore(cfg(path), read_only=True) as ro:
            got, damaged = pull_all(ro)
            # Every record served, none taken for damage ...
            assert damaged == int(flipped)
            assert got == [b for b in bodies if not flipped or b != body_of(len(crc) // 2,
                                                                          size + len(crc) // 2 % 7)]
            # ... and below the cut, the property is still checked.
            if flipped:
                with pytest.raises(CorruptedError, match=f"offset {victim.wrote_offset}"):
                    ro.look_message_by_offset(victim.wrote_offset)
        if flipped:
            return
        # A writer opens it (no damage), and writes the ranges that hold.
        with MessageStore(cfg(path)) as w:
            assert pull_all(w) == (bodies, 0)
            assert w.recovery_report.damaged == ()
        assert crc_ranges(path) == ([] if start_inside else [(0, cut)])
        res = CliRunner().invoke(cli_main, ["verify", str(path)])
        assert res.exit_code == 0, res.output


def test_ranges_that_still_match_are_kept_whole(tmp_path: Path) -> None:
    """The same construction with a claim that is true: nothing is cut, and
    the flipped name below the claim's end is still damage."""
    path = tmp_path / "s"
    crc, plain = build(path, 20, 10, 300)
    cut = plain[0].wrote_offset
    stale_mark(path)  # even with a stale mark: every record in it has the property
    flip_first_property_name(path, crc[10])
    with MessageStore(cfg(path), read_only=True) as ro:
        with pytest.raises(CorruptedError, match=f"offset {crc[10].wrote_offset}"):
            ro.look_message_by_offset(crc[10].wrote_offset)
        assert pull_all(ro)[1] == 1
    assert crc_ranges(path) == [(0, cut)]
