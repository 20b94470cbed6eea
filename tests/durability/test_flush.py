"""Flush services (docs/format.md §20): group commit, WAIT=false, async flush, the
transient store pool and the checkpoint.

* SYNC_FLUSH acknowledges a put only once it is on disk, and concurrent
  producers share fsyncs (group commit).
* A message with ``WAIT=false`` is acknowledged without waiting for the disk.
* ASYNC_FLUSH flushes in the background within the configured intervals.
* With the transient store pool, appends go to off-heap buffers and are
  committed into the mapping every 200 ms, or at once when a read in the
  writer's process needs them (read-your-writes); two buffers serve any
  number of segments; a low RLIMIT_MEMLOCK is not fatal; SYNC_FLUSH ignores
  the pool.
* The checkpoint records the store time of the last flushed message.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.fault_fixtures import wait_dispatched, wait_for
from helpers.presets import FAST_FLUSH, SEG
from rocketstore import (
    FlushDiskType,
    GetStatus,
    Message,
    MessageStore,
    PutResult,
    PutStatus,
)


def end_of(r: PutResult) -> int:
    return r.wrote_offset + r.wrote_bytes


def body_of(i: int, size: int = 100) -> bytes:
    return (b"m%06d-" % i).ljust(size, b"x")


# -- SYNC_FLUSH: group commit ----------------------------------------------------------


def _sync_round(store: MessageStore, threads: int, per_thread: int) -> list[str]:
    """``threads`` producers of ``per_thread`` SYNC puts; returns the problems found."""
    problems: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)

    def producer(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            r = store.put("group", body_of(k * 1000 + i), queue_id=k % 4)
            flushed = store.flushed_offset
            if r.status is not PutStatus.PUT_OK or flushed < end_of(r):
                with lock:
                    problems.append(f"{k}/{i}: {r.status}, flushed {flushed} < end {end_of(r)}")

    ts = [threading.Thread(target=producer, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    for t in ts:
        t.join(60)
    return problems


def _group_stats(store: MessageStore) -> tuple[int, int]:
    """(group-commit flushes, producer requests they covered) so far."""
    native = store._native
    assert native is not None
    stats = native.group_commit_stats
    return stats.flushes, stats.requests


def test_sync_flush_group_commit_shares_fsyncs(opened: Callable[..., MessageStore]) -> None:
    """Concurrent SYNC producers share fsyncs: the engine counts the
    producer requests each group-commit flush covered."""
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    threads, per_thread = 8, 50
    # One producer: every put waits for its own flush (one request each).
    f0, r0 = _group_stats(store)
    for i in range(30):
        r = store.put("single", body_of(i))
        assert r.status is PutStatus.PUT_OK
        assert store.flushed_offset >= end_of(r)
    f1, r1 = _group_stats(store)
    assert r1 - r0 == 30, "every SYNC put asks the group commit once"
    assert f1 - f0 >= 30, "a lone producer's puts cannot share a flush"

    problems = _sync_round(store, threads, per_thread)
    assert problems == [], problems[:5]
    f2, r2 = _group_stats(store)
    requests, flushes = r2 - r1, f2 - f1
    assert requests == threads * per_thread
    # Each flush covered two producers or more on average (one each would
    # take as many flushes as puts).
    assert flushes * 2 <= requests, (
        f"{threads} producers' {requests} SYNC puts took {flushes} flushes: fsyncs not shared"
    )
    # Every acknowledged message is there, in order per queue.
    wait_dispatched(store)
    for q in range(4):
        assert store.get_max_offset_in_queue("group", q) == per_thread * 2


def test_sync_flush_ack_means_flushed(opened: Callable[..., MessageStore]) -> None:
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    for i in range(40):  # crosses segments: the group commit flushes across files
        r = store.put("t", body_of(i, 3000))
        assert r.status is PutStatus.PUT_OK
        assert store.flushed_offset >= end_of(r)
    rs = store.put_messages([Message("t", body_of(100 + i, 3000)) for i in range(30)])
    assert {r.status for r in rs} == {PutStatus.PUT_OK}
    assert store.flushed_offset >= max(end_of(r) for r in rs)
    assert len(os.listdir(Path(store.config.store_path) / "commitlog")) >= 3


# -- WAIT=false ------------------------------------------------------------------------


def test_wait_false_is_acknowledged_without_waiting(
    fail_points: Callable[[str, int], None], opened: Callable[..., MessageStore]
) -> None:
    """A disk that fails every flush: only messages that wait notice."""
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert store.put("t", b"first").status is PutStatus.PUT_OK
    fail_points("msync", errno.EIO)
    r = store.put("t", b"nowait", properties={"WAIT": "false"})
    assert r.status is PutStatus.PUT_OK, r.status
    # A waiting put learns that the disk failed.
    r2 = store.put("t", b"waits", check=False)
    assert r2.status in (PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.SERVICE_NOT_AVAILABLE), r2.status
    # Under SYNC_FLUSH reads in the writer's process see only flushed data:
    # the message never reached the disk, so no read serves it (and the read
    # does not wait for a flush that failed).
    assert store.look_message_by_offset(r.wrote_offset) is None
    assert store.get_max_offset_in_queue("t", 0) == 1
    # It is in the CommitLog all the same (with its WAIT property), as a
    # reader in another process sees.
    with MessageStore(store.config, read_only=True) as ro:
        m = ro.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == b"nowait"
        assert m.properties.get("WAIT") == "false"


def test_wait_false_batch_is_acknowledged_without_waiting(
    fail_points: Callable[[str, int], None], opened: Callable[..., MessageStore]
) -> None:
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    fail_points("msync", errno.EIO)
    rs = store.put_messages(
        [Message("t", b"a%d" % i, properties={"WAIT": "false"}) for i in range(5)]
    )
    assert [r.status for r in rs] == [PutStatus.PUT_OK] * 5


def test_wait_false_put_batch_is_acknowledged_without_waiting(
    fail_points: Callable[[str, int], None], opened: Callable[..., MessageStore]
) -> None:
    """A batch waits for the disk unless every message says WAIT=false."""
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    fail_points("msync", errno.EIO)
    b = store.put_batch("t", [b"a", b"b"], properties=[{"WAIT": "false"}] * 2)
    assert b.status is PutStatus.PUT_OK, b.reason
    mixed = store.put_batch("t", [b"a", b"b"], properties=[{"WAIT": "false"}, None],
                            check=False)
    assert mixed.status in (PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.SERVICE_NOT_AVAILABLE)


def test_wait_false_does_not_join_the_group_commit(opened: Callable[..., MessageStore]) -> None:
    """WAIT=false puts never ask the group commit for a flush; waiting puts do."""
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    _, r0 = _group_stats(store)
    for i in range(100):
        assert store.put("t", body_of(i), properties={"WAIT": "false"}).ok
    _, r1 = _group_stats(store)
    assert r1 == r0, f"{r1 - r0} WAIT=false puts waited for the disk"
    for i in range(100):
        assert store.put("t", body_of(i)).ok
    _, r2 = _group_stats(store)
    assert r2 - r1 == 100


@pytest.mark.parametrize("value", ["no", "0"])
def test_wait_other_than_true_does_not_wait(
    fail_points: Callable[[str, int], None], opened: Callable[..., MessageStore], value: str
) -> None:
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    fail_points("msync", errno.EIO)
    r = store.put("t", b"x", properties={"WAIT": value})
    assert r.status is PutStatus.PUT_OK, r.status


# -- ASYNC_FLUSH -------------------------------------------------------------------------


def test_async_flush_catches_up_within_the_intervals(opened: Callable[..., MessageStore]) -> None:
    store = opened(**FAST_FLUSH)
    group_flushes, _ = _group_stats(store)
    for round_ in range(3):
        rs = [store.put("t", body_of(round_ * 100 + i, 500)) for i in range(60)]
        assert all(r.ok for r in rs)
        target = store.max_phy_offset
        assert target == end_of(rs[-1])
        # Nothing here calls flush(): only the flush service can move the
        # flushed offset. The wait's bound only catches a service that never
        # runs (a stopped loop), however busy the machine.
        wait_for(lambda t=target: store.flushed_offset >= t, 120.0, "async flush reached the end")
    # ASYNC_FLUSH puts never flushed through group commit.
    assert _group_stats(store)[0] == group_flushes
    # Several segments were flushed, one file per flush call.
    assert len(os.listdir(Path(store.config.store_path) / "commitlog")) >= 2


def test_async_flush_is_not_on_the_put_path(opened: Callable[..., MessageStore]) -> None:
    """Long intervals: a small put stays unflushed until the flush service runs."""
    store = opened(
        flush_interval_commit_log=10_000,
        flush_commit_log_thorough_interval=20_000,
    )
    r = store.put("t", b"x" * 100)
    assert r.ok
    time.sleep(0.2)
    assert store.flushed_offset < end_of(r)
    assert store.flush() >= end_of(r)
    assert store.flushed_offset >= end_of(r)


def test_async_flush_least_pages(opened: Callable[..., MessageStore]) -> None:
    """Between thorough flushes, only 4 or more dirty pages are flushed (docs/format.md §20)."""
    store = opened(
        flush_interval_commit_log=20,
        flush_commit_log_thorough_interval=60_000,
        flush_commit_log_least_pages=4,
    )
    # Wait for the first thorough flush of the empty store to pass.
    time.sleep(0.1)
    r = store.put("t", b"x" * 2000)  # one page
    time.sleep(0.3)
    assert store.flushed_offset < end_of(r), "flushed below flush_commit_log_least_pages"
    rs = [store.put("t", b"y" * 2000) for _ in range(12)]  # > 6 pages
    wait_for(lambda: store.flushed_offset >= 4 * 4096, 5.0, "flush once 4 pages are dirty")
    assert store.flushed_offset <= end_of(rs[-1])


# -- transient store pool ------------------------------------------------------------------


POOL: dict[str, Any] = {
    "transient_store_pool_enable": True,
    "transient_store_pool_size": 2,
    "commit_interval_commit_log": 50,
    "commit_commit_log_thorough_interval": 100,
    **FAST_FLUSH,
}
#: The pool, with commits so rare that only shutdown commits what it holds.
POOL_COMMIT_AT_SHUTDOWN: dict[str, Any] = {
    **POOL,
    "commit_interval_commit_log": 60_000,
    "commit_commit_log_thorough_interval": 60_000,
}


def test_transient_pool_puts_commit_and_survive_restart(
    opened: Callable[..., MessageStore], store_path: str
) -> None:
    store = opened(**POOL)
    assert store.config.effective_transient_store_pool_enable
    acked: list[PutResult] = []
    for i in range(400):  # ~7 segments with a pool of 2 buffers
        r = store.put("t", body_of(i, 1000), queue_id=i % 2, keys=[f"k{i}"])
        assert r.status is PutStatus.PUT_OK, r.status
        acked.append(r)
        if i % 50 == 49:
            time.sleep(0.06)  # let the commit service return buffers now and then
    assert acked[-1].wrote_offset >= 5 * SEG

    wait_for(
        lambda: all(store.look_message_by_offset(r.wrote_offset) is not None for r in acked),
        10.0,
        "every message committed",
    )
    wait_for(lambda: store.max_phy_offset == end_of(acked[-1]), 5.0, "max offset")
    wait_dispatched(store)
    wait_for(lambda: store.flushed_offset >= end_of(acked[-1]), 5.0, "flushed")
    for q in (0, 1):
        assert store.get_max_offset_in_queue("t", q) == 200
        g = store.get_message("g", "t", q, 190, 32)
        assert g.status is GetStatus.FOUND
        assert [m.body for m in g.messages] == [body_of(2 * j + q, 1000) for j in range(190, 200)]
    store.shutdown()

    again = opened(**POOL)
    assert again.recovery_report is not None and again.recovery_report.mode == "normal"
    for i, r in enumerate(acked):
        m = again.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == body_of(i, 1000), i
    assert [m.body for m in again.query_message("t", "k399")] == [body_of(399, 1000)]
    assert again.put("t", b"more").ok


def test_transient_pool_buffers_are_reused_across_segments(
    opened: Callable[..., MessageStore],
) -> None:
    """Appends stay in a pool buffer until committed; two buffers serve six segments.

    The commit service is made too slow to run during the test, so only
    ``flush()`` commits (no read is made before it: a read would commit). If
    a fully committed file did not give its buffer back, the third segment
    would be written straight into the mapping and the CommitLog's readable
    end would cover its messages before any commit.
    """
    store = opened(
        **{
            **POOL,
            "commit_interval_commit_log": 60_000,
            "commit_commit_log_thorough_interval": 60_000,
        }
    )
    acked: list[PutResult] = []
    for seg in range(1, 7):
        while True:
            i = len(acked)
            r = store.put("t", body_of(i, 1000), queue_id=0)
            assert r.status is PutStatus.PUT_OK
            acked.append(r)
            if r.wrote_offset >= seg * SEG:
                break
        # Written into a pool buffer, not committed: not in the mapping yet.
        assert store.max_phy_offset < end_of(r), (
            f"segment {seg} was written directly: the pool's buffers were not reused"
        )
        store.flush()  # commits (and returns the full segment's buffer)
        assert store.max_phy_offset == end_of(r)
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == body_of(i, 1000)
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("t", 0) == len(acked)
    off = 0
    while off < len(acked):
        g = store.get_message("g", "t", 0, off, 32)
        assert g.status is GetStatus.FOUND
        for m in g.messages:
            assert m.body == body_of(m.queue_offset, 1000)
        off = g.next_begin_offset


def test_transient_pool_a_read_commits_what_it_needs(
    opened: Callable[..., MessageStore],
) -> None:
    """An acknowledged put still in the write buffer is committed by the
    first read that needs it (read-your-writes), not by the commit service."""
    store = opened(
        **{
            **POOL,
            "commit_interval_commit_log": 60_000,
            "commit_commit_log_thorough_interval": 60_000,
        }
    )
    r = store.put("t", b"pending")
    assert r.status is PutStatus.PUT_OK
    assert store.max_phy_offset < end_of(r)  # in the write buffer only
    commits_before = store._n._visibility_stats.commits
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.body == b"pending"
    assert store._n._visibility_stats.commits == commits_before + 1
    assert store.max_phy_offset == end_of(r)
    g = store.get_message("g", "t", 0, 0)
    assert g.status is GetStatus.FOUND and g.messages[0].body == b"pending"


def test_transient_pool_is_not_used_with_sync_flush(opened: Callable[..., MessageStore]) -> None:
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH, **POOL)
    assert store.config.transient_store_pool_enable is True
    assert store.config.effective_transient_store_pool_enable is False
    for i in range(80):
        r = store.put("t", body_of(i, 1000))
        assert r.status is PutStatus.PUT_OK
        assert store.flushed_offset >= end_of(r)
        # Straight into the mapping: visible at once.
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == body_of(i, 1000)


MEMLOCK_CHILD = textwrap.dedent(
    """
    import ctypes, ctypes.util, resource, sys, time
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    buf = ctypes.create_string_buffer(65536)
    print("MLOCK_FAILS", libc.mlock(buf, 65536) != 0)
    from rocketstore import MessageStore, StoreConfig, PutStatus
    cfg = StoreConfig(store_path=sys.argv[1], mapped_file_size_commit_log=65536,
                      mapped_file_size_consume_queue=10000, max_hash_slot_num=100,
                      max_index_num=2000, transient_store_pool_enable=True,
                      transient_store_pool_size=2, commit_interval_commit_log=50,
                      commit_commit_log_thorough_interval=100)
    offs = []
    with MessageStore(cfg) as s:
        for i in range(200):
            r = s.put("t", b"%06d" % i * 100)
            assert r.status is PutStatus.PUT_OK, r.status
            offs.append(r.wrote_offset)
        s.flush()
        for i, o in enumerate(offs):
            assert s.look_message_by_offset(o).body == b"%06d" % i * 100
    with MessageStore(cfg) as s:
        assert s.recovery_report.mode == "normal"
        for i, o in enumerate(offs):
            assert s.look_message_by_offset(o).body == b"%06d" % i * 100
    print("OK")
    """
)


def test_transient_pool_with_no_memlock_allowance(tmp_path: Path) -> None:
    """RLIMIT_MEMLOCK 0: buffers cannot be locked; the store works anyway."""
    cmd = [sys.executable, "-c", MEMLOCK_CHILD, str(tmp_path / "store")]
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        # root ignores RLIMIT_MEMLOCK (CAP_IPC_LOCK): drop the capability.
        probe = subprocess.run(
            [setpriv, "--bounding-set", "-ipc_lock", "true"], capture_output=True
        )
        if probe.returncode == 0:
            cmd = [setpriv, "--bounding-set", "-ipc_lock", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK" in proc.stdout, proc.stdout
    if os.geteuid() != 0 or cmd[0] != sys.executable:
        # The limit really applied, so the store ran with unlocked buffers.
        assert "MLOCK_FAILS True" in proc.stdout, proc.stdout


# -- checkpoint ------------------------------------------------------------------------------


def read_checkpoint_file(store_path: str) -> tuple[int, int, int]:
    data = (Path(store_path) / "checkpoint").read_bytes()
    assert len(data) == 4096
    return struct.unpack(">qqq", data[:24])


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_checkpoint_after_flush(
    opened: Callable[..., MessageStore], store_path: str, flush: FlushDiskType
) -> None:
    store = opened(flush_disk_type=flush)
    assert (Path(store_path) / "checkpoint").stat().st_size == 4096
    rs = [store.put("t", body_of(i, 2000), keys=[f"k{i}"]) for i in range(70)]  # 3 segments
    assert all(r.ok for r in rs)
    last_ts = max(r.store_timestamp for r in rs)
    store.flush()
    native = store._native
    assert native is not None
    times = native.checkpoint()
    physic, logics = times.physic_msg_timestamp, times.logics_msg_timestamp
    assert physic >= last_ts
    assert logics >= last_ts  # dispatched before the flush
    assert (Path(store_path) / "checkpoint").stat().st_size == 4096
    on_disk = read_checkpoint_file(store_path)
    assert on_disk[0] == physic
    assert on_disk[1] >= last_ts
    store.shutdown()
    assert (Path(store_path) / "checkpoint").stat().st_size == 4096
    assert read_checkpoint_file(store_path)[0] >= last_ts

    again = opened(flush_disk_type=flush)
    assert again._native is not None
    assert again._native.checkpoint().physic_msg_timestamp >= last_ts


def test_checkpoint_follows_sync_puts(opened: Callable[..., MessageStore]) -> None:
    """Group commit records the physic timestamp after each flush (docs/format.md §20)."""
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    native = store._native
    assert native is not None
    for i in range(5):
        r = store.put("t", body_of(i))
        assert r.ok
        wait_for(lambda r=r: native.checkpoint().physic_msg_timestamp >= r.store_timestamp,
                 2.0, "checkpoint")


def test_checkpoint_follows_async_flush(opened: Callable[..., MessageStore]) -> None:
    store = opened(**FAST_FLUSH)
    native = store._native
    assert native is not None
    r = store.put("t", b"x")
    wait_for(lambda: native.checkpoint().physic_msg_timestamp >= r.store_timestamp, 5.0,
             "checkpoint (thorough)")


# -- shutdown: the final commit, dispatch and config ------------------------------------------


def test_transient_pool_clean_shutdown_is_clean(
    opened: Callable[..., MessageStore], store_path: str
) -> None:
    cfg = POOL_COMMIT_AT_SHUTDOWN
    store = opened(**cfg)
    rs = [store.put("t", body_of(i)) for i in range(5)]
    assert all(r.ok for r in rs)
    store.shutdown()  # commits what the pool still holds
    assert not (Path(store_path) / "abort").exists(), "a clean shutdown left the abort file"
    again = opened(**cfg)
    assert again.recovery_report is not None
    assert again.recovery_report.mode == "normal"
    assert again.get_max_offset_in_queue("t", 0) == 5


def test_transient_pool_messages_survive_shutdown(
    opened: Callable[..., MessageStore], store_path: str
) -> None:
    """Whatever the recovery mode, nothing committed at shutdown is lost."""
    cfg = POOL_COMMIT_AT_SHUTDOWN
    store = opened(**cfg)
    rs = [store.put("t", body_of(i), queue_id=i % 2) for i in range(6)]
    store.shutdown()
    again = opened(**cfg)
    for i, r in enumerate(rs):
        m = again.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == body_of(i)
    assert again.get_max_offset_in_queue("t", 0) == 3
    assert again.get_max_offset_in_queue("t", 1) == 3


def test_shutdown_persists_topics_dispatched_at_shutdown(
    opened: Callable[..., MessageStore], store_path: str
) -> None:
    store = opened()
    assert store.put("early", b"x").ok
    wait_dispatched(store)
    native = store._native
    assert native is not None
    native.stop_dispatch()  # a dispatcher lagging behind the producer
    assert store.put("late", b"y", queue_id=3).ok
    store.shutdown()
    assert not (Path(store_path) / "abort").exists()
    text = (Path(store_path) / "config" / "topics.json").read_text()
    assert '"early"' in text
    assert '"late"' in text, text
