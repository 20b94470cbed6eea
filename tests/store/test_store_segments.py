"""Many messages across small CommitLog segments: reopen, geometry from disk,
END_OF_FILE blanks, torn tails (docs/format.md §4, §14: file sizes on open, truncation zeroes)."""

from __future__ import annotations

import itertools
import random
import struct
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

import rocketstore
from helpers.store_util import (
    BLANK_MAGIC,
    age_files,
    commitlog_files,
    diff_snapshots,
    record_len,
    segment_path,
    snapshot,
)
from rocketstore import Message, MessageStore, PutResult, PutStatus, StoreConfig

OpenStore = Callable[..., MessageStore]
SEG = 4096
TOPICS = ["alpha", "beta", "gamma_topic"]
QUEUES = 4


def _next_record_offset(end: int, size: int) -> int:
    """Where a record of ``size`` bytes put when the CommitLog ends at ``end`` starts:
    at ``end`` if it leaves at least 8 bytes of its segment (for the end-of-file
    blank, as RocketMQ does), else at the start of the next segment."""
    room = SEG - end % SEG
    return end if size + 8 <= room else end + room


def write_many(store: MessageStore, n: int = 600, seed: int = 7) -> list[tuple[PutResult, Message]]:
    """``n`` messages of 0..300-byte bodies over 3 topics x 4 queues, by all three put paths."""
    rng = random.Random(seed)
    msgs = []
    for i in range(n):
        body = rng.randbytes(rng.randint(0, 300))
        tags = None if i % 5 == 0 else f"tag{i % 7}"
        keys = [f"key-{i}"] if i % 3 == 0 else None
        msgs.append(
            Message(
                TOPICS[i % 3],
                body,
                queue_id=rng.randrange(QUEUES),
                tags=tags,
                keys=keys,
                properties={"i": str(i)},
            )
        )
    out: list[tuple[PutResult, Message]] = []
    i = 0
    while i < n:
        m = msgs[i]
        if i % 3 == 0:
            r = store.put(
                m.topic,
                m.body,
                m.queue_id,
                tags=m.tags,
                keys=m.keys or None,
                properties={"i": m.properties["i"]},
            )
            out.append((r, m))
            i += 1
        elif i % 3 == 1:
            out.append((store.put_message(m), m))
            i += 1
        else:
            chunk = msgs[i : i + 4]
            out += zip(store.put_messages(chunk), chunk, strict=True)
            i += len(chunk)
    assert all(r.status is PutStatus.PUT_OK for r, _ in out)
    return out


def check_all(store: MessageStore, written: list[tuple[PutResult, Message]]) -> None:
    for r, m in written:
        for got in (
            store.look_message_by_offset(r.wrote_offset),
            store.look_message_by_id(r.msg_id or ""),
        ):
            assert got is not None, r
            assert got.topic == m.topic
            assert got.queue_id == m.queue_id
            assert got.queue_offset == r.queue_offset
            assert got.commit_log_offset == r.wrote_offset
            assert got.store_size == r.wrote_bytes
            assert got.body == m.body
            assert got.tags == m.tags
            assert got.keys == m.keys
            assert got.properties["i"] == m.properties["i"]
            assert got.msg_id == r.msg_id


def test_many_messages_reopen_with_size_from_disk(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    written = write_many(store)

    # Queue offsets are dense per (topic, queue), in put order.
    per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r, m in written:
        per_queue[(m.topic, m.queue_id)].append(r.queue_offset)
    assert len(per_queue) == len(TOPICS) * QUEUES
    for offsets in per_queue.values():
        assert offsets == list(range(len(offsets)))
    counts = {k: len(v) for k, v in per_queue.items()}
    assert store.queue_offset_table() == counts

    # Records are contiguous except where a segment end forced a blank.
    for (a, _), (b, _) in itertools.pairwise(written):
        end = a.wrote_offset + a.wrote_bytes
        assert b.wrote_offset == _next_record_offset(end, b.wrote_bytes)
        assert b.wrote_offset // SEG == (b.wrote_offset + b.wrote_bytes - 1) // SEG
    max_before = store.max_phy_offset
    assert max_before == written[-1][0].wrote_offset + written[-1][0].wrote_bytes
    files = commitlog_files(store_path)
    assert len(files) == max_before // SEG + 1 >= 10
    assert files == [f"{i * SEG:020d}" for i in range(len(files))]
    check_all(store, written)
    store.shutdown()

    for name in files:  # every segment file has exactly the configured size
        assert (Path(store_path) / "commitlog" / name).stat().st_size == SEG

    # Reopen without giving the segment size: it comes from the files.
    store = open_store(path=store_path)
    assert store.config.mapped_file_size_commit_log == SEG
    assert store.max_phy_offset == max_before
    assert store.min_phy_offset == 0
    rep = store.recovery_report
    assert rep is not None
    assert rep.mode == "normal"
    # Normal recovery scans the last three segment files (RocketMQ's rule).
    assert 0 < rep.records <= len(written)
    assert rep.end_offset == max_before
    assert rep.files_scanned == min(3, len(files))
    assert rep.bytes_scanned <= sum(r.wrote_bytes for r, _ in written)
    assert rep.stop_reason is None
    assert store.queue_offset_table() == counts
    check_all(store, written)

    # New puts continue densely per queue.
    more = []
    for t in TOPICS:
        for q in range(QUEUES):
            r = store.put(t, b"after-reopen", q)
            assert r.status is PutStatus.PUT_OK
            assert r.queue_offset == counts[(t, q)]
            more.append(r)
    assert more[0].wrote_offset == _next_record_offset(max_before, more[0].wrote_bytes)
    assert store.queue_offset_table() == {k: v + 1 for k, v in counts.items()}
    assert store.look_message_by_offset(more[-1].wrote_offset).body == b"after-reopen"


def test_clean_reopen_truncates_nothing(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    for i in range(30):
        store.put("T", b"x" * i)
    store.shutdown()
    rep = open_store(path=store_path).recovery_report
    assert rep is not None
    assert rep.stop_reason is None
    assert rep.bytes_truncated == 0


def test_reopen_with_other_segment_size_is_refused(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    for i in range(60):
        store.put("T", b"y" * (i * 3), i % 2)
    store.shutdown()
    age_files(store_path)  # so an mtime update would be visible
    before = snapshot(store_path)

    with pytest.raises(rocketstore.ConfigMismatchError) as ei:
        MessageStore(StoreConfig(store_path=store_path, mapped_file_size_commit_log=8192)).start()
    assert isinstance(ei.value, ValueError)
    assert "4096" in str(ei.value) and "8192" in str(ei.value)

    after = snapshot(store_path)
    # No file content changed, nothing created or removed.
    assert diff_snapshots(snapshot_without_mtime(before), snapshot_without_mtime(after)) == []
    # No data file was touched (the lock file is checked separately below).
    assert [k for k in diff_snapshots(before, after) if k != "lock"] == []

    # The store still opens with the right size.
    assert open_store(path=store_path).config.mapped_file_size_commit_log == SEG


def test_refused_open_does_not_touch_lock_file(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    while store.max_phy_offset < 2 * SEG:  # several files: a real size mismatch
        store.put("T", b"x" * 500)
    store.shutdown()
    age_files(store_path)
    lock = Path(store_path) / "lock"
    before = lock.stat().st_mtime_ns
    with pytest.raises(rocketstore.ConfigMismatchError):
        MessageStore(StoreConfig(store_path=store_path, mapped_file_size_commit_log=8192)).start()
    assert lock.stat().st_mtime_ns == before


def snapshot_without_mtime(s: dict[str, tuple[object, ...]]) -> dict[str, tuple[object, ...]]:
    return {k: v[:2] for k, v in s.items()}


# -- END_OF_FILE ---------------------------------------------------------------

EOF_SEG = 1024
FIRST_BODY = b"a" * 100  # record 91 + 100 + 1 ("T") + 20 (property CRC) = 212 bytes


@pytest.mark.parametrize("tagged", [False, True])
def test_record_leaving_exactly_8_bytes_stays_in_file(
    open_store: OpenStore, store_path: str, tagged: bool
) -> None:
    store = open_store(mapped_file_size_commit_log=EOF_SEG)
    r1 = store.put("T", FIRST_BODY)
    assert r1.wrote_bytes == record_len("T", FIRST_BODY) == 212
    tags = "tg" if tagged else None
    props = {"TAGS": "tg"} if tagged else {}
    body_len = EOF_SEG - r1.wrote_bytes - 8 - record_len("T", b"", props)
    r2 = store.put("T", b"b" * body_len, tags=tags)
    assert r2.status is PutStatus.PUT_OK
    assert r2.wrote_offset == r1.wrote_bytes
    assert r2.wrote_offset + r2.wrote_bytes == EOF_SEG - 8
    assert store.max_phy_offset == EOF_SEG - 8
    assert commitlog_files(store_path) == [f"{0:020d}"]

    # The next message does not fit: an 8-byte blank closes the file.
    r3 = store.put("T", b"c")
    assert r3.wrote_offset == EOF_SEG
    assert r3.queue_offset == 2
    store.flush()
    tail = segment_path(store_path, 0).read_bytes()[EOF_SEG - 8 :]
    assert tail == struct.pack(">iI", 8, BLANK_MAGIC)
    for r, body in [(r1, FIRST_BODY), (r2, b"b" * body_len), (r3, b"c")]:
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == body


@pytest.mark.parametrize("tagged", [False, True])
def test_record_leaving_7_bytes_goes_to_next_file(
    open_store: OpenStore, store_path: str, tagged: bool
) -> None:
    store = open_store(mapped_file_size_commit_log=EOF_SEG)
    r1 = store.put("T", FIRST_BODY)
    tags = "tg" if tagged else None
    props = {"TAGS": "tg"} if tagged else {}
    body_len = EOF_SEG - r1.wrote_bytes - 7 - record_len("T", b"", props)
    body = b"b" * body_len
    r2 = store.put("T", body, tags=tags)
    assert r2.status is PutStatus.PUT_OK
    assert r2.wrote_bytes == EOF_SEG - r1.wrote_bytes - 7
    assert r2.wrote_offset == EOF_SEG  # the next segment's start
    assert r2.queue_offset == 1  # the blank takes no queue offset
    assert store.max_phy_offset == EOF_SEG + r2.wrote_bytes
    assert commitlog_files(store_path) == [f"{0:020d}", f"{EOF_SEG:020d}"]
    assert r2.msg_id is not None
    m = store.look_message_by_id(r2.msg_id)
    assert m is not None and m.body == body and m.commit_log_offset == EOF_SEG

    store.flush()
    seg0 = segment_path(store_path, 0).read_bytes()
    remaining = EOF_SEG - r1.wrote_bytes
    assert seg0[r1.wrote_bytes : r1.wrote_bytes + 8] == struct.pack(">iI", remaining, BLANK_MAGIC)
    assert seg0[r1.wrote_bytes + 8 :] == bytes(remaining - 8)
    assert store.look_message_by_offset(r1.wrote_bytes) is None  # a blank is no message

    # Reopen: recovery steps over the blank; the next put follows r2.
    store.shutdown()
    store = open_store(path=store_path)
    assert store.max_phy_offset == EOF_SEG + r2.wrote_bytes
    rep = store.recovery_report
    assert rep is not None and rep.records == 2 and rep.stop_reason is None
    r3 = store.put("T", b"z")
    assert r3.wrote_offset == EOF_SEG + r2.wrote_bytes
    assert r3.queue_offset == 2
    got = store.look_message_by_offset(r1.wrote_offset)
    assert got is not None and got.body == FIRST_BODY


def test_record_exactly_filling_a_fresh_file(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=EOF_SEG)
    fits = EOF_SEG - 8 - record_len("T", b"")
    too_big = fits + 1
    assert store.put("T", b"x" * too_big, check=False).status is PutStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0
    r = store.put("T", b"x" * fits)
    assert r.status is PutStatus.PUT_OK
    assert (r.wrote_offset, r.wrote_bytes) == (0, EOF_SEG - 8)
    r2 = store.put("T", b"x" * fits)  # needs a whole new file
    assert r2.wrote_offset == EOF_SEG


# -- torn tail -----------------------------------------------------------------


def _write_then_damage(
    open_store: OpenStore, store_path: str, garbage: bytes | None
) -> tuple[list[PutResult], int, Path, int]:
    store = open_store(mapped_file_size_commit_log=SEG)
    rs = [store.put("T", b"m%03d" % i * (i % 40), i % 3, tags="t") for i in range(80)]
    assert all(r.ok for r in rs)
    max_off = store.max_phy_offset
    last = rs[-1]
    store.shutdown()
    path = segment_path(store_path, max_off - max_off % SEG)
    pos = max_off % SEG
    if garbage is None:
        # A torn copy of the last record: valid header, body CRC broken.
        rec = bytearray(
            segment_path(store_path, last.wrote_offset - last.wrote_offset % SEG).read_bytes()[
                last.wrote_offset % SEG :
            ][: last.wrote_bytes]
        )
        struct.pack_into(">q", rec, 28, max_off)  # its own physical offset
        rec[84 + 4] ^= 0xFF  # first body byte
        garbage = bytes(rec)
    assert pos + len(garbage) <= SEG
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(garbage)
    return rs, max_off, path, len(garbage)


@pytest.mark.parametrize("kind", ["garbage", "torn_record"])
def test_garbage_after_last_record_is_cut(
    open_store: OpenStore, store_path: str, kind: str
) -> None:
    garbage = bytes(range(1, 64)) if kind == "garbage" else None
    rs, max_off, path, glen = _write_then_damage(open_store, store_path, garbage)
    assert path.read_bytes()[max_off % SEG : max_off % SEG + glen] != bytes(glen)

    store = open_store(path=store_path)
    rep = store.recovery_report
    assert rep is not None
    # Everything from the end of the last good record to the end of its file.
    assert rep.bytes_truncated == SEG - max_off % SEG
    why = "no record magic" if kind == "garbage" else "body CRC mismatch"
    assert rep.stop_reason == f"{why} at offset {max_off}"
    assert rep.end_offset == max_off
    assert 0 < rep.records <= len(rs)
    assert store.max_phy_offset == max_off
    # The cut bytes are zeroed on disk.
    assert path.read_bytes()[max_off % SEG : max_off % SEG + glen] == bytes(glen)
    for r in rs:
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.queue_offset == r.queue_offset
    r = store.put("T", b"next", 0)
    assert r.wrote_offset == max_off
    assert r.queue_offset == sum(1 for i in range(80) if i % 3 == 0)
    got = store.look_message_by_offset(max_off)
    assert got is not None and got.body == b"next"
