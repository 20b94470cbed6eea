"""``put_batch``: many bodies to one queue in one call, all or nothing."""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.killed_child import run_then_kill
from helpers.paths import HELPERS
from helpers.presets import SEG, SMALL
from rocketstore import (
    BatchPutResult,
    FlushDiskType,
    InvalidMessageError,
    Message,
    MessageRefusedError,
    MessageStore,
    PutStatus,
    ReadOnlyStoreError,
    StoreClosedError,
)

Opener = Callable[..., MessageStore]
WRITER = HELPERS / "batch_crash_writer.py"
# Queues and index big enough for a few thousand messages.
CFG: dict[str, Any] = {**SMALL, "mapped_file_size_consume_queue": 20 * 4000,
                       "max_index_num": 50_000, "max_hash_slot_num": 1000}


def _read_queue(store: MessageStore, topic: str, queue_id: int, start: int = 0) -> list[Any]:
    out: list[Any] = []
    off = start
    end = store.get_max_offset_in_queue(topic, queue_id)
    while off < end:
        r = store.get_message("g", topic, queue_id, off, 32)
        assert r.messages, (off, end, r.status)
        out.extend(r.messages)
        off = r.next_begin_offset
    return out


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_batch_across_segments_reads_back_like_put_messages(open_store: Opener,
                                                            flush: str) -> None:
    fdt = FlushDiskType.SYNC_FLUSH if flush == "sync" else FlushDiskType.ASYNC_FLUSH
    store = open_store(flush_disk_type=fdt, **CFG)
    store.put("orders", b"before", 2)
    n = 1500  # ~ 4.6 segments of 64 KiB
    bodies = [f"body-{i}".encode() * (1 + i % 20) for i in range(n)]
    keys = [f"key-{i}" if i % 3 else [f"a-{i}", f"b-{i}"] for i in range(n)]
    tags = [f"t{i % 4}" if i % 5 else None for i in range(n)]
    props = [{"p": str(i)} if i % 7 == 0 else None for i in range(n)]
    r = store.put_batch("orders", bodies, 2, keys=keys, tags=tags, properties=props,
                        return_offsets=True)
    assert isinstance(r, BatchPutResult)
    assert r.status is PutStatus.PUT_OK and r.ok and r.reason is None
    assert (r.count, len(r), r.queue_offset) == (n, n, 1)
    assert r.wrote_offset > 0 and r.store_timestamp > 0
    offsets = r.offsets
    assert isinstance(offsets, array) and offsets.typecode == "q" and len(offsets) == n
    assert offsets[0] == r.wrote_offset
    assert offsets[-1] // SEG > offsets[0] // SEG + 3  # the batch spans segments
    assert r.wrote_bytes == sum(store.look_message_by_offset(o).store_size  # type: ignore[union-attr]
                                for o in offsets)
    # The same messages through put_messages, for comparison.
    ref = store.put_messages([
        Message("ref", bodies[i], 2, tags=tags[i], keys=keys[i], properties=props[i])
        for i in range(n)])
    assert all(x.ok for x in ref)
    assert store.put("orders", b"after", 2).queue_offset == n + 1
    store.flush()
    got = _read_queue(store, "orders", 2)
    want = _read_queue(store, "ref", 2)
    assert [m.body for m in got] == [b"before", *bodies, b"after"]
    assert [m.queue_offset for m in got] == list(range(n + 2))
    assert [m.commit_log_offset for m in got[1:-1]] == list(offsets)
    for g, w in zip(got[1:-1], want, strict=True):
        assert (g.body, g.tags, g.keys, g.properties) == (w.body, w.tags, w.keys, w.properties)
        assert g.tags_code == w.tags_code
    ids = r.msg_ids()
    for i in (0, 1, n // 2, n - 1):
        m = store.look_message_by_id(ids[i])
        assert m is not None and m.body == bodies[i]
        key = keys[i] if isinstance(keys[i], str) else keys[i][1]
        [q] = store.query_message("orders", key)
        assert q.commit_log_offset == offsets[i] and q.queue_offset == i + 1
    # Store timestamps never decrease along the log.
    ts = [m.store_timestamp for m in got]
    assert ts == sorted(ts)


def test_bytes_like_bodies(open_store: Opener) -> None:
    store = open_store(**CFG)
    bodies: list[Any] = [b"a", bytearray(b"bb"), memoryview(b"xccx")[1:3], b""]
    r = store.put_batch("t", bodies)
    assert r.ok and r.count == 4
    store.flush()
    assert [m.body for m in _read_queue(store, "t", 0)] == [b"a", b"bb", b"cc", b""]


def test_one_refused_message_refuses_the_batch(open_store: Opener) -> None:
    store = open_store(max_message_size=1000, **CFG)
    store.put("t", b"x")
    before = (store.max_phy_offset, store.queue_offset_table())
    cases: list[tuple[dict[str, Any], str]] = [
        ({"bodies": [b"ok", b"y" * 1001, b"ok"]}, "message 1: body is 1001 bytes"),
        ({"bodies": [b"ok"] * 3, "keys": ["a", "b", "c d"]}, "message 2: key"),
        ({"bodies": [b"ok"] * 2, "properties": [None, {"DELAY": "3"}]},
         "message 1: delayed messages"),
        ({"bodies": [b"ok"] * 2, "properties": [{"k": "v\x01"}, None]}, "message 0:"),
        ({"bodies": [b"ok"] * 2, "tags": ["", None]}, "message 0:"),
    ]
    for kwargs, reason in cases:
        bodies = kwargs.pop("bodies")
        with pytest.raises(InvalidMessageError) as raised:
            store.put_batch("t", bodies, **kwargs)
        e = raised.value
        assert isinstance(e, ValueError)
        assert e.status is PutStatus.MESSAGE_ILLEGAL, (kwargs, e)
        assert e.reason is not None and reason in e.reason, (kwargs, e.reason)
        assert isinstance(e.result, BatchPutResult)
        assert (e.result.count, e.result.wrote_offset, e.result.queue_offset) == (0, -1, -1)
        assert (store.max_phy_offset, store.queue_offset_table()) == before
        r = store.put_batch("t", bodies, **kwargs, check=False)
        assert r.status is PutStatus.MESSAGE_ILLEGAL, (kwargs, r)
        assert r.reason is not None and reason in r.reason, (kwargs, r.reason)
        assert (r.count, r.wrote_offset, r.queue_offset) == (0, -1, -1)
        assert (store.max_phy_offset, store.queue_offset_table()) == before
    r = store.put_batch("bad topic", [b"x"], check=False)
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "topic" in (r.reason or "")
    with pytest.raises(InvalidMessageError, match="topic"):
        store.put_batch("bad topic", [b"x"])
    assert (store.max_phy_offset, store.queue_offset_table()) == before


@pytest.mark.parametrize("point", ["allocate_file", "reserve"])
def test_batch_that_cannot_make_a_file_mid_way_stores_nothing(
    open_store: Opener, store_path: str, fail_points: Callable[[str, int], None], point: str
) -> None:
    """All or nothing also when the disk is full mid-batch: a batch spanning
    several CommitLog files whose next file cannot be made (or its blocks
    reserved) writes no message, takes no queue offset and leaves no file;
    once the disk has room the same batch goes in whole."""
    store = open_store(**CFG)
    first = store.put("t", b"first", 1)
    store.flush()
    commitlog = Path(store_path) / "commitlog"
    # No file is made ahead: CFG has no warm-up (docs/format.md §15,
    # "Preallocation"), so the batch's first roll already needs a new file.
    assert len(os.listdir(commitlog)) == 1, sorted(os.listdir(commitlog))
    before = (store.max_phy_offset, store.queue_offset_table())
    files_before = sorted(os.listdir(commitlog))
    bodies = [b"%05d" % i * 20 for i in range(2000)]  # ~6 files of 64 KiB
    fail_points(point, errno.ENOSPC)
    with pytest.raises(MessageRefusedError) as raised:
        store.put_batch("t", bodies, 1)
    e = raised.value
    assert not isinstance(e, ValueError)  # the disk's fault, not the caller's
    assert e.status is PutStatus.CREATE_MAPPED_FILE_FAILED, e
    assert isinstance(e.result, BatchPutResult)
    assert (e.result.count, e.result.wrote_offset, e.result.queue_offset) == (0, -1, -1), e.result
    assert "No space left" in (e.reason or ""), e.reason
    r = store.put_batch("t", bodies, 1, check=False)
    assert r.status is PutStatus.CREATE_MAPPED_FILE_FAILED and r.count == 0, r
    assert (store.max_phy_offset, store.queue_offset_table()) == before
    assert sorted(os.listdir(commitlog)) == files_before
    assert [m.body for m in _read_queue(store, "t", 1)] == [b"first"]
    fail_points(point, 0)
    r = store.put_batch("t", bodies, 1, return_offsets=True)
    assert (r.count, r.queue_offset, r.wrote_offset) == (2000, 1, before[0]), r
    assert r.offsets is not None and r.offsets[-1] // SEG >= before[0] // SEG + 4
    store.shutdown()
    store = open_store(**CFG)
    got = _read_queue(store, "t", 1)
    assert [m.body for m in got] == [b"first", *bodies]
    assert got[0].commit_log_offset == first.wrote_offset


def test_argument_errors_write_nothing(open_store: Opener) -> None:
    store = open_store(**CFG)
    before = store.max_phy_offset
    with pytest.raises(TypeError, match="sequence of bodies"):
        store.put_batch("t", b"abc")
    with pytest.raises(TypeError, match="body 1 must be bytes-like"):
        store.put_batch("t", [b"a", "str", b"c"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="keys has 1 items for 2 bodies"):
        store.put_batch("t", [b"a", b"b"], keys=["k"])
    with pytest.raises(TypeError, match=r"tags\[1\]"):
        store.put_batch("t", [b"a", b"b"], tags=["x", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="queue_id"):
        store.put_batch("t", [b"a"], -1)
    assert store.max_phy_offset == before
    r = store.put_batch("t", [])
    assert r.ok and r.count == 0 and r.wrote_offset == -1
    with pytest.raises(ValueError, match="return_offsets"):
        store.put_batch("t", [b"a"]).msg_ids()


def test_closed_and_read_only(open_store: Opener, store_path: str) -> None:
    store = open_store(**CFG)
    store.put("t", b"x")
    store.shutdown()
    with pytest.raises(StoreClosedError):
        store.put_batch("t", [b"a"])
    ro = open_store(read_only=True, **CFG)
    with pytest.raises(ReadOnlyStoreError):
        ro.put_batch("t", [b"a"])


def test_other_writers_wait_for_a_batch_spanning_files(open_store: Opener) -> None:
    """A batch spanning files holds the put lock until it ends (the files it
    needs are made before it writes, so it is all or nothing): writers of
    every queue get in between batches, never inside one, and queue offsets
    follow CommitLog order."""
    store = open_store(**CFG)
    stop = threading.Event()
    others: dict[int, list[int]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def writer(q: int) -> None:
        try:
            while not stop.is_set():
                r = store.put("t", b"w" * 50, q)
                assert r.ok
                others[q].append(r.wrote_offset)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(q,)) for q in (0, 1)]
    for t in threads:
        t.start()
    def writers_moved(seen: list[int]) -> None:
        # Both writers put again before the next batch: they are running
        # beside it (on a loaded machine the batches could otherwise run
        # back to back before a writer thread gets the interpreter).
        deadline = time.monotonic() + 30
        while any(len(others[q]) <= seen[q] for q in (0, 1)) and not errors:
            assert time.monotonic() < deadline, "the writer threads made no progress"
            time.sleep(0.001)

    results = []
    try:
        for _ in range(3):
            writers_moved([len(others[0]), len(others[1])])
            results.append(store.put_batch("t", [b"b" * 100] * 2000, 1))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert all(r.ok for r in results)
    store.flush()
    for q in (0, 1):
        msgs = _read_queue(store, "t", q)
        assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
        phys = [m.commit_log_offset for m in msgs]
        assert phys == sorted(phys)
    q1 = _read_queue(store, "t", 1)
    assert len(q1) == len(others[1]) + 6000
    batch_msgs = [m for m in q1 if m.body == b"b" * 100]
    for k, r in enumerate(results):
        mine = batch_msgs[k * 2000:(k + 1) * 2000]
        assert [m.queue_offset for m in mine] == list(range(r.queue_offset, r.queue_offset + 2000))
        assert mine[0].commit_log_offset == r.wrote_offset
    # Each batch is one run of the CommitLog; other writers got in between.
    other = others[0] + others[1]
    for k, r in enumerate(results):
        last = batch_msgs[(k + 1) * 2000 - 1].commit_log_offset
        assert last // SEG > r.wrote_offset // SEG  # the batch spans files
        assert not [o for o in other if r.wrote_offset < o < last], k
    first, last = results[0].wrote_offset, batch_msgs[-1].commit_log_offset
    assert any(first < o < last for o in other)


def _run_writer(path: Path, seed: int, kill_after: float) -> tuple[int, list[list[int]], str]:
    run = run_then_kill(
        [WRITER, path, str(seed)],
        stderr_path=path.parent / f"writer-{seed}.err",
        marker=b"READY",
        marker_timeout=60,
        run_for=kill_after,
    )
    assert run.marked, run.stderr
    done = run.complete
    assert not [ln for ln in done if ln.startswith("ERR")], (done[-3:], run.stderr)
    start = int(done[0].split()[1])
    acks = [[int(x) for x in ln.split()[1:]] for ln in done if ln.startswith("ACK")]
    return start, acks, run.stderr


@pytest.mark.parametrize("seed", [1, 2])
def test_kill9_mid_batch_sync_flush(tmp_path: Path, seed: int) -> None:
    """SIGKILL while batches are written under SYNC_FLUSH: every acknowledged
    batch is wholly there after reopening; what follows is a prefix of the
    next batch, without holes or foreign bytes."""
    sys.path.insert(0, str(WRITER.parent))
    from batch_crash_writer import QUEUE, TOPIC, body_for, config

    path = tmp_path / "store"
    acked = 0
    for round_ in range(2):
        start, acks, stderr = _run_writer(path, seed * 10 + round_, 0.4 + 0.3 * seed)
        assert start >= acked, "acknowledged messages were lost by a reopen"
        assert acks, f"no batch acknowledged before the kill\n{stderr}"
        for first, _n, qoff, flushed, last in acks:
            assert qoff == first
            assert flushed > last, "acknowledged under SYNC_FLUSH before it was flushed"
        acked = acks[-1][0] + acks[-1][1]
        with MessageStore(config(str(path))) as store:
            total = store.get_max_offset_in_queue(TOPIC, QUEUE)
            assert total >= acked, (total, acked)
            msgs = _read_queue(store, TOPIC, QUEUE)
            assert len(msgs) == total
            for i, m in enumerate(msgs):
                assert m.queue_offset == i
                assert m.body == body_for(i), (i, m.body[:20])
                assert m.keys == [f"k{i}"]
            for probe in (0, acked - 1, total - 1):
                [q] = store.query_message(TOPIC, f"k{probe}")
                assert q.queue_offset == probe
        acked = total


def test_store_timestamps_never_trail_the_wall_clock(open_store: Opener) -> None:
    """Store timestamps come from a cached clock, which must still give the
    current millisecond: a put made after the wall clock reached a
    millisecond is stamped with that millisecond or later."""
    store = open_store(**CFG)
    prev = 0
    for i in range(300):
        before = time.time_ns() // 1_000_000
        r = store.put("t", b"x") if i % 2 else store.put_batch("t", [b"x", b"y"])
        after = time.time_ns() // 1_000_000
        assert before <= r.store_timestamp <= after, (before, r.store_timestamp, after)
        assert r.store_timestamp >= prev
        prev = r.store_timestamp
        time.sleep(0.0003)


def test_a_batch_is_visible_to_reads_as_soon_as_it_is_acknowledged(open_store: Opener) -> None:
    store = open_store(**CFG)
    for round_ in range(5):
        r = store.put_batch("vis", [b"m%d" % i for i in range(300)], 0)
        assert r.ok
        # No flush, no wait: a read right after the put sees the whole batch.
        got = store.get_message("g", "vis", 0, r.queue_offset, 32)
        assert [m.queue_offset for m in got.messages] == list(
            range(r.queue_offset, r.queue_offset + 32)), round_
        assert store.get_max_offset_in_queue("vis", 0) == r.queue_offset + 300
