"""Fault injection: what the store does when the disk misbehaves.

* A failed msync/fsync poisons the store (docs/format.md §14,
  §15): puts answer SERVICE_NOT_AVAILABLE, ``running_flags`` says why,
  reads keep working, ``flush`` raises, shutdown does not hang and leaves the
  abort file, and the next open recovers abnormally with every acknowledged
  message intact.
* A failed segment creation (full disk) fails the put with
  CREATE_MAPPED_FILE_FAILED, leaves no file behind and does not poison.
* A failed ConsumeQueue append stops dispatch and makes the store not
  writeable; reopening rebuilds the queues.
* Damaged files: a short file in the middle of the CommitLog is refused with
  an error naming it (never SIGBUS); garbage in an old segment never crashes a
  read, and garbage in a scanned segment (durable data) is refused, or
  skipped with ``on_corruption="skip"``.

Fault points (``rocketstore._native._set_fail_point``) are process-global:
the ``fail_points`` fixture disarms them whatever happens.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
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
from helpers.presets import FAST_FLUSH, SEG, SMALL, body_of
from helpers.store_util import diff_snapshots, snapshot
from rocketstore import (
    CorruptedError,
    FlushDiskType,
    GetStatus,
    Message,
    MessageRefusedError,
    MessageStore,
    PoisonedError,
    PutResult,
    PutStatus,
    StoreConfig,
    StoredNotFlushedError,
)

SIGBUS_RC = -7


def shutdown_bounded(store: MessageStore, timeout: float = 15.0) -> BaseException | None:
    """Shuts ``store`` down in a thread; fails if it hangs. Returns what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            store.shutdown()
        except BaseException as e:
            raised.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"shutdown hung for more than {timeout} s"
    return raised[0] if raised else None


def put_ok(store: MessageStore, n: int, start: int = 0, **kw: Any) -> list[PutResult]:
    out = []
    for i in range(start, start + n):
        r = store.put("topic", body_of(i), queue_id=i % 2, keys=[f"key{i}"], **kw)
        assert r.status is PutStatus.PUT_OK, r.status
        out.append(r)
    return out


def assert_all_present(
    store: MessageStore, acked: list[PutResult], start: int = 0, size: int = 100
) -> None:
    """Every acknowledged message: by offset, by queue offset and by key."""
    wait_dispatched(store)
    for i, r in enumerate(acked, start):
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None, f"message {i} at {r.wrote_offset} lost"
        assert m.body == body_of(i, size)
        assert m.queue_offset == r.queue_offset
        g = store.get_message("check", "topic", i % 2, r.queue_offset, 1)
        assert g.status is GetStatus.FOUND, (i, g.status)
        assert g.messages[0].body == body_of(i, size)
    for i in (start, start + len(acked) - 1):
        got = store.query_message("topic", f"key{i}")
        assert [m.body for m in got] == [body_of(i, size)]


def reopened(
    opened: Callable[..., MessageStore], store_path: str, mode: str, **cfg: Any
) -> MessageStore:
    """The store opened again after its shutdown: the abort file was left
    exactly when the stop was not clean, and recovery ran in ``mode``
    (``"normal"`` or ``"abnormal"``)."""
    assert (Path(store_path) / "abort").exists() == (mode == "abnormal")
    again = opened(**cfg)
    assert again.recovery_report is not None and again.recovery_report.mode == mode
    return again


def flags_text(store: MessageStore) -> str:
    return " | ".join(store.running_flags)


# -- failed fsync -----------------------------------------------------------------


@pytest.mark.parametrize("first_call", ["put", "put_message", "put_messages"])
def test_failed_fsync_poisons_sync_store(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
    first_call: str,
) -> None:
    # A sync_flush_timeout no test run sits out: the failed fsync itself
    # must complete the waiting producer (else the put below never returns).
    store = opened(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=3_600_000)
    acked = put_ok(store, 20)
    assert store.flushed_offset >= acked[-1].wrote_offset + acked[-1].wrote_bytes
    wait_dispatched(store)

    fail_points("msync", errno.EIO)
    with pytest.raises(StoredNotFlushedError) as raised:
        if first_call == "put":
            store.put("topic", b"doomed")
        elif first_call == "put_message":
            store.put_message(Message("topic", b"doomed"))
        else:
            store.put_messages([Message("topic", b"d")] * 3)
    # The waiting producers learn that their messages were written but not
    # flushed (as in RocketMQ): not a refusal, so nobody puts them again;
    # later puts are refused (below).
    e = raised.value
    assert not isinstance(e, (MessageRefusedError, ValueError))
    assert e.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert "do not put" in str(e) and "stored" in str(e), str(e)
    results = e.result if isinstance(e.result, list) else [e.result]
    assert len(results) == (3 if first_call == "put_messages" else 1)
    statuses = [r.status for r in results]
    assert statuses == [PutStatus.FLUSH_DISK_TIMEOUT] * len(statuses), statuses
    # The result carries where each message was written.
    for r in results:
        assert isinstance(r, PutResult)
        assert r.wrote_offset >= acked[-1].wrote_offset + acked[-1].wrote_bytes
        assert r.wrote_offset + r.wrote_bytes <= store.max_phy_offset

    # Poisoned: every later put is refused, whatever its shape.
    for _ in range(3):
        with pytest.raises(MessageRefusedError) as refused:
            store.put("topic", b"later")
        assert refused.value.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.put_message(Message("topic", b"later"), check=False).status is (
        PutStatus.SERVICE_NOT_AVAILABLE
    )
    with pytest.raises(MessageRefusedError) as refused:
        store.put_messages([Message("topic", b"l")] * 2)
    assert sorted(refused.value.refused) == [0, 1]
    assert [r.status for r in store.put_messages([Message("topic", b"l")] * 2, check=False)] == [
        PutStatus.SERVICE_NOT_AVAILABLE
    ] * 2
    # Refusal writes nothing, not even when the fault is cleared meanwhile.
    end = store.max_phy_offset
    fail_points("msync", 0)
    with pytest.raises(MessageRefusedError, match="SERVICE_NOT_AVAILABLE"):
        store.put("topic", b"still refused")
    assert store.max_phy_offset == end
    fail_points("msync", errno.EIO)

    assert store.is_writeable is False
    why = flags_text(store)
    assert why, "running_flags must say why puts are refused"
    assert "FLUSH_FAILED: CommitLog flush failed: msync " in why, why
    assert why.endswith("Input/output error (os error 5)"), why

    # Reads still work.
    for i, r in enumerate(acked):
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == body_of(i)
    g = store.get_message("g", "topic", 0, 0, 32)
    assert g.status is GetStatus.FOUND
    # (A FLUSH_DISK_TIMEOUT message is written, as in RocketMQ: it may follow.)
    assert [m.body for m in g.messages][:10] == [body_of(i) for i in range(0, 20, 2)]
    assert [m.body for m in store.query_message("topic", "key7")] == [body_of(7)]
    assert store.get_max_offset_in_queue("topic", 1) >= 10

    # flush() raises a clear error naming the cause.
    with pytest.raises(PoisonedError, match="CommitLog flush failed: msync "):
        store.flush()

    fail_points("msync", 0)
    # The flush service's failure is reported by shutdown too.
    err = shutdown_bounded(store)
    assert isinstance(err, PoisonedError), repr(err)
    assert "CommitLog flush failed: msync " in str(err), str(err)
    # Not a clean stop: the abort file stays, so the next open recovers.
    again = reopened(opened, store_path, "abnormal", flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert again.is_writeable, again.running_flags
    assert again.running_flags == []
    assert_all_present(again, acked)
    more = put_ok(again, 5, start=20)
    assert again.flushed_offset >= more[-1].wrote_offset + more[-1].wrote_bytes
    assert_all_present(again, acked + more)


def test_failed_background_flush_poisons_async_store(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
) -> None:
    # The ConsumeQueue flush waits: the CommitLog flush is the one that fails.
    store = opened(**{**FAST_FLUSH, "flush_interval_consume_queue": 60_000,
                      "flush_consume_queue_thorough_interval": 60_000})
    acked = put_ok(store, 20)
    store.flush()

    fail_points("msync", errno.EIO)
    # ASYNC puts are acknowledged before the disk sees them...
    late = put_ok(store, 5, start=20)
    # ...and the background flush that fails poisons the store.
    wait_for(lambda: not store.is_writeable, 5.0, "store poisoned by a failed flush")
    why = flags_text(store)
    assert "FLUSH_FAILED: CommitLog flush failed: msync " in why, why
    assert why.endswith("Input/output error (os error 5)"), why
    assert store.put("topic", b"refused", check=False).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert [r.status for r in store.put_messages([Message("topic", b"r")], check=False)] == [
        PutStatus.SERVICE_NOT_AVAILABLE
    ]
    with pytest.raises(PoisonedError):
        store.flush()
    # Reads work.
    assert_all_present(store, acked + late)

    fail_points("msync", 0)
    err = shutdown_bounded(store)
    assert isinstance(err, PoisonedError), repr(err)
    again = reopened(opened, store_path, "abnormal", **FAST_FLUSH)
    assert again.is_writeable, again.running_flags
    assert_all_present(again, acked + late)
    assert put_ok(again, 1, start=25)[0].queue_offset == 12


def test_failed_index_flush_poisons_the_store(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
) -> None:
    """A full index file whose background flush fails poisons the store: a
    later flush could report success over index pages the kernel dropped."""
    # Small index files (8 entries: 4 messages each), and no periodic
    # ConsumeQueue/index flush: the background flush of a full file fails.
    geometry = {"max_hash_slot_num": 16, "max_index_num": 8}
    slow_cq = {"flush_interval_consume_queue": 60_000,
               "flush_consume_queue_thorough_interval": 60_000}
    store = opened(**{**FAST_FLUSH, **slow_cq, **geometry})
    acked = put_ok(store, 2)
    store.flush()

    fail_points("index_msync", errno.EIO)
    # Enough keys to fill the newest index file and roll to the next ones.
    late = put_ok(store, 12, start=2)
    wait_for(lambda: not store.is_writeable, 10.0, "store poisoned by a failed index flush")
    why = flags_text(store)
    assert "FLUSH_FAILED: index flush failed: " in why, why
    assert "/index/" in why and why.endswith("Input/output error (os error 5)"), why
    assert store.put("topic", b"refused", check=False).status is PutStatus.SERVICE_NOT_AVAILABLE
    # The failure sticks: flush() refuses instead of flushing the file again.
    fail_points("index_msync", 0)
    with pytest.raises(PoisonedError, match="index flush failed"):
        store.flush()
    assert_all_present(store, acked + late)
    err = shutdown_bounded(store)
    assert isinstance(err, PoisonedError), repr(err)
    # The next open recovers abnormally and rebuilds the index.
    again = reopened(opened, store_path, "abnormal", **{**FAST_FLUSH, **geometry})
    assert again.is_writeable, again.running_flags
    assert_all_present(again, acked + late)
    for i in range(len(acked + late)):
        assert [m.body for m in again.query_message("topic", f"key{i}")] == [body_of(i)]


# -- full disk when a segment is created ------------------------------------------


def fill_first_segment(store: MessageStore, size: int = 1000) -> list[PutResult]:
    """Puts until the next record of ``size`` bytes cannot fit in the first segment."""
    out: list[PutResult] = []
    while True:
        i = len(out)
        r = store.put("topic", body_of(i, size), queue_id=i % 2, keys=[f"key{i}"])
        assert r.status is PutStatus.PUT_OK
        out.append(r)
        if r.wrote_offset + 2 * r.wrote_bytes + 8 > SEG:
            return out


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_enospc_on_segment_creation_fails_the_put_cleanly(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
    flush: FlushDiskType,
) -> None:
    store = opened(flush_disk_type=flush)
    acked = fill_first_segment(store)
    wait_dispatched(store)  # queues and index files exist before the disk "fills"
    files_before = sorted(os.listdir(Path(store_path) / "commitlog"))
    assert files_before == [f"{0:020d}"]

    fail_points("create_file", errno.ENOSPC)
    for _ in range(3):
        with pytest.raises(MessageRefusedError) as refused:
            store.put("topic", body_of(999, 1000), queue_id=0, keys=["key99999"])
        assert refused.value.status is PutStatus.CREATE_MAPPED_FILE_FAILED, refused.value
    rs = store.put_messages([Message("topic", body_of(998, 1000), keys=["key99998"])],
                            check=False)
    assert [r.status for r in rs] == [PutStatus.CREATE_MAPPED_FILE_FAILED]
    # No partial file left behind, and no poisoning: a full disk is transient.
    assert sorted(os.listdir(Path(store_path) / "commitlog")) == files_before
    time.sleep(0.3)
    assert store.is_writeable, store.running_flags
    # Only the wait is shown, naming what waits and why.
    [wait] = store.running_flags
    assert wait.startswith("RESOURCE_WAIT: commitlog: ") and "No space left" in wait, wait
    # Reads are unaffected.
    g = store.get_message("g", "topic", 0, 0, 32)
    assert g.status is GetStatus.FOUND

    fail_points("create_file", 0)
    n = len(acked)
    r = store.put("topic", body_of(n, 1000), queue_id=n % 2, keys=[f"key{n}"])
    assert r.status is PutStatus.PUT_OK, r.status
    # The new record starts the next segment; the failed puts consumed no
    # queue offset.
    assert r.wrote_offset == SEG
    assert r.queue_offset == sum(1 for i in range(n) if i % 2 == n % 2)
    acked.append(r)
    assert store.running_flags == []
    assert sorted(os.listdir(Path(store_path) / "commitlog")) == [f"{0:020d}", f"{SEG:020d}"]
    assert_all_present(store, acked, size=1000)
    store.flush()

    err = shutdown_bounded(store)
    assert err is None, repr(err)
    again = reopened(opened, store_path, "normal", flush_disk_type=flush)
    assert_all_present(again, acked, size=1000)


def test_enospc_on_first_segment_of_a_new_store(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
) -> None:
    store = opened()
    fail_points("create_file", errno.ENOSPC)
    assert store.put("topic", b"x", check=False).status is PutStatus.CREATE_MAPPED_FILE_FAILED
    cl = Path(store_path) / "commitlog"
    assert not cl.exists() or os.listdir(cl) == []
    assert store.is_writeable
    fail_points("create_file", 0)
    acked = put_ok(store, 3)
    assert acked[0].wrote_offset == 0 and acked[0].queue_offset == 0
    assert_all_present(store, acked)


# -- failed ConsumeQueue append -----------------------------------------------------


def test_failed_cq_append_stops_writes_and_reopen_rebuilds(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
) -> None:
    store = opened()
    acked = put_ok(store, 10)
    wait_dispatched(store)

    fail_points("cq_put", errno.EIO)
    # One batch, under one lock hold: the CommitLog appends succeed before the
    # dispatcher meets the failing queue append and poisons the store.
    late = store.put_messages(
        [Message("topic", body_of(i), queue_id=i % 2, keys=[f"key{i}"]) for i in range(10, 14)]
    )
    assert [r.status for r in late] == [PutStatus.PUT_OK] * 4
    wait_for(lambda: not store.is_writeable, 5.0, "store not writeable after a CQ write error")
    why = flags_text(store)
    assert why.startswith("WRITE_LOGICS_QUEUE_ERROR: dispatch failed: "), why
    assert store.put("topic", b"refused", check=False).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.dispatch_behind_bytes() > 0

    # Already-dispatched messages are readable; the rest are in the CommitLog.
    for q in (0, 1):
        g = store.get_message("g", "topic", q, 0, 32)
        assert g.status is GetStatus.FOUND
        assert [m.body for m in g.messages] == [body_of(i) for i in range(q, 10, 2)]
    for i, r in enumerate(acked + late):
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == body_of(i)
    with pytest.raises(PoisonedError, match="WRITE_LOGICS_QUEUE_ERROR"):
        store.flush()

    fail_points("cq_put", 0)
    # No flush failed: shutdown flushes what was written and reports nothing
    # (the abort file stays: the next open recovers).
    err = shutdown_bounded(store)
    assert err is None, repr(err)
    again = reopened(opened, store_path, "abnormal")
    assert again.is_writeable, again.running_flags
    assert again.get_max_offset_in_queue("topic", 0) == 7
    assert again.get_max_offset_in_queue("topic", 1) == 7
    assert_all_present(again, acked + late)
    more = put_ok(again, 2, start=14)
    assert [r.queue_offset for r in more] == [7, 7]


def test_enospc_creating_a_cq_file_stalls_dispatch_until_space_is_back(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
) -> None:
    """The first message of a new queue needs a new ConsumeQueue file. A full
    disk stalls dispatch (it retries) instead of poisoning the store: the
    message becomes visible once space is back."""
    store = opened()
    acked = put_ok(store, 4)
    wait_dispatched(store)
    fail_points("create_file", errno.ENOSPC)
    r = store.put("fresh", b"first of its queue", queue_id=5)
    assert r.status is PutStatus.PUT_OK  # the CommitLog segment exists already
    time.sleep(0.3)
    assert store.is_writeable, store.running_flags
    assert store.get_message("g", "fresh", 5, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    # Reads of what was dispatched work (dispatch itself is stuck behind "fresh").
    assert store.dispatch_behind_bytes() > 0
    for i, a in enumerate(acked):
        m = store.look_message_by_offset(a.wrote_offset)
        assert m is not None and m.body == body_of(i)
        g = store.get_message("g", "topic", i % 2, a.queue_offset, 1)
        assert g.status is GetStatus.FOUND and g.messages[0].body == body_of(i)
    assert [m.body for m in store.query_message("topic", "key3")] == [body_of(3)]

    fail_points("create_file", 0)
    wait_dispatched(store)
    g = store.get_message("g", "fresh", 5, 0)
    assert [m.body for m in g.messages] == [b"first of its queue"]
    err = shutdown_bounded(store)
    assert err is None, repr(err)
    again = opened()
    assert again.recovery_report is not None
    assert again.is_writeable
    wait_dispatched(again)
    g = again.get_message("g", "fresh", 5, 0)
    assert g.status is GetStatus.FOUND
    assert [m.body for m in g.messages] == [b"first of its queue"]
    assert_all_present(again, acked)


def test_flush_with_a_failing_disk_raises_then_poisons(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
) -> None:
    """``flush()`` itself meets the failed msync: an OSError with errno, then poisoned."""
    store = opened(flush_interval_commit_log=60_000, flush_commit_log_thorough_interval=60_000)
    acked = put_ok(store, 5)
    wait_dispatched(store)
    fail_points("msync", errno.EIO)
    with pytest.raises(OSError) as ei:
        store.flush()
    assert ei.value.errno == errno.EIO
    assert "msync " in str(ei.value) and "/commitlog/" in str(ei.value), str(ei.value)
    assert not store.is_writeable
    assert store.running_flags
    with pytest.raises(PoisonedError, match=r"Input/output error|os error 5"):
        store.flush()
    assert store.put("topic", b"refused", check=False).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert_all_present(store, acked)

    fail_points("msync", 0)
    # The failure was reported to the flush() that met it; the final flush
    # succeeds.
    err = shutdown_bounded(store)
    assert err is None, repr(err)
    again = reopened(opened, store_path, "abnormal")
    assert_all_present(again, acked)
    assert put_ok(again, 1, start=5)[0].queue_offset == 2  # i=5 goes to queue 1


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_shutdown_with_a_failing_disk_does_not_hang(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    store_path: str,
    flush: FlushDiskType,
) -> None:
    store = opened(flush_disk_type=flush)
    acked = put_ok(store, 5)
    fail_points("msync", errno.EIO)
    if flush is FlushDiskType.ASYNC_FLUSH:
        acked += put_ok(store, 3, start=5)  # dirty pages for the final flush
    err = shutdown_bounded(store)
    assert isinstance(err, (OSError, PoisonedError)), repr(err)
    fail_points("msync", 0)
    # Not a clean stop, but the lock is released.
    again = reopened(opened, store_path, "abnormal", flush_disk_type=flush)
    assert again.is_writeable
    assert_all_present(again, acked)


def test_failed_cq_append_is_reported_as_dispatch_failure(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
) -> None:
    store = opened()
    put_ok(store, 2)
    wait_dispatched(store)
    fail_points("cq_put", errno.EIO)
    put_ok(store, 1, start=2)
    wait_for(lambda: not store.is_writeable, 5.0, "store not writeable")
    native = store._native
    assert native is not None
    assert native.dispatch_failure is not None


# -- damaged files ------------------------------------------------------------------


def make_store(path: str, n: int, size: int = 1000) -> list[PutResult]:
    """A cleanly stopped store with ``n`` messages (about 60 per segment)."""
    with MessageStore(StoreConfig(store_path=path, **SMALL)) as s:
        return put_ok_sized(s, n, size)


def put_ok_sized(store: MessageStore, n: int, size: int) -> list[PutResult]:
    out = []
    for i in range(n):
        r = store.put("topic", body_of(i, size), queue_id=i % 2, keys=[f"key{i}"])
        assert r.status is PutStatus.PUT_OK
        out.append(r)
    return out


OPEN_IN_CHILD = textwrap.dedent(
    """
    import sys
    from rocketstore import MessageStore, StoreConfig
    cfg = dict(store_path=sys.argv[1], max_hash_slot_num=100, max_index_num=2000)
    if sys.argv[2] == "sized":
        cfg.update(mapped_file_size_commit_log=65536, mapped_file_size_consume_queue=10000)
    store = MessageStore(StoreConfig(**cfg), read_only=sys.argv[3] == "ro").start()
    # Touch every message, as a reader would.
    for off in range(0, store.max_phy_offset, 997):
        store.look_message_by_offset(off)
    store.shutdown()
    print("OPENED")
    """
)


@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("sized", [True, False])
def test_short_file_in_the_middle_is_refused_naming_it(
    store_path: str, read_only: bool, sized: bool
) -> None:
    make_store(store_path, 250)  # 4+ segments
    files = sorted((Path(store_path) / "commitlog").iterdir())
    assert len(files) >= 4
    victim = files[1]
    os.truncate(victim, SEG // 2)
    before = Path(store_path, "abort").exists()

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            OPEN_IN_CHILD,
            store_path,
            "sized" if sized else "unsized",
            "ro" if read_only else "rw",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != SIGBUS_RC, "opening a short middle file died of SIGBUS"
    assert proc.returncode != 0 and "OPENED" not in proc.stdout, (
        "a short file in the middle of the CommitLog must be refused"
    )
    assert victim.name in proc.stderr, proc.stderr[-2000:]
    assert "CorruptedError" in proc.stderr, proc.stderr[-2000:]
    # Refused before anything was touched.
    assert victim.stat().st_size == SEG // 2
    assert Path(store_path, "abort").exists() == before


def test_short_file_in_the_middle_raises_in_process(store_path: str) -> None:
    make_store(store_path, 250)
    victim = sorted((Path(store_path) / "commitlog").iterdir())[2]
    os.truncate(victim, 4096)
    for _ in range(2):  # the refused open released the lock: same answer again
        store = MessageStore(StoreConfig(store_path=store_path, **SMALL))
        with pytest.raises(CorruptedError) as ei:
            store.start()
        assert victim.name in str(ei.value)
    assert victim.stat().st_size == 4096


def pull_all(store: MessageStore, queue_id: int, limit: int = 10_000) -> list[Any]:
    """Pulls a whole queue; returns the messages; never loops forever."""
    out: list[Any] = []
    offset = 0
    for _ in range(limit):
        g = store.get_message("g", "topic", queue_id, offset, 32)
        assert g.status in (
            GetStatus.FOUND,
            GetStatus.MESSAGE_WAS_REMOVING,
            GetStatus.OFFSET_OVERFLOW_ONE,
        ), g.status
        out.extend(g.messages)
        if g.status is GetStatus.OFFSET_OVERFLOW_ONE:
            return out
        assert g.next_begin_offset > offset
        offset = g.next_begin_offset
    raise AssertionError("pull did not reach the end of the queue")


def test_garbage_in_an_old_segment_never_crashes_a_read(store_path: str) -> None:
    """Garbage outside the recovery scan: no read crashes or serves an altered
    body. A record partly overwritten is damaged: ``look_message_*`` and
    ``query_message`` raise CorruptedError naming file and offset; pulls and
    consumers skip it and count it, and queue offsets stay dense."""
    acked = make_store(store_path, 300)  # 5 segments
    files = sorted((Path(store_path) / "commitlog").iterdir())
    assert len(files) >= 5
    lo, hi = SEG + 1000, SEG + 6000  # inside segment 1: normal recovery never scans it
    with open(files[1], "r+b") as f:
        f.seek(lo - SEG)
        f.write(random.Random(11).randbytes(hi - lo))  # the same garbage every run
    damaged = {
        i
        for i, r in enumerate(acked)
        if r.wrote_offset < hi and r.wrote_offset + r.wrote_bytes > lo
    }
    assert damaged
    # The record the garbage starts in keeps its header: it is reported as
    # damaged. Records that start inside the garbage are gone: no record
    # starts there any more.
    reported = {i for i in damaged if acked[i].wrote_offset < lo}
    assert len(reported) == 1

    def look(off: int) -> Any:
        try:
            return store.look_message_by_offset(off)
        except CorruptedError as e:
            assert files[1].name in str(e) and f"offset {off}" in str(e), str(e)
            return e

    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as store:
        assert store.recovery_report is not None
        assert store.recovery_report.mode == "normal"
        assert store.is_writeable
        # Any offset inside the garbage: None, a genuine record, or an error
        # naming the file and offset -- never a crash, never an altered body.
        by_offset = {r.wrote_offset: i for i, r in enumerate(acked)}
        for off in range(lo - 200, hi + 200):
            m = look(off)
            if m is not None and not isinstance(m, CorruptedError):
                assert off in by_offset, f"a message was read at {off}, where no record starts"
                i = by_offset[off]
                assert i not in damaged and m.body == body_of(i, 1000)
        for i, r in enumerate(acked):
            m = look(r.wrote_offset)
            if i in reported:
                assert isinstance(m, CorruptedError), (i, m)
            elif i in damaged:
                assert m is None, (i, m)
            else:
                assert m is not None and not isinstance(m, CorruptedError)
                assert m.body == body_of(i, 1000)
        # Pulls skip the damaged records and count them; every queue offset
        # is either served intact or counted.
        skipped = 0
        for q in (0, 1):
            offset, n = 0, store.get_max_offset_in_queue("topic", q)
            served = []
            while offset < n:
                g = store.get_message("g", "topic", q, offset, 32)
                assert g.next_begin_offset == offset + len(g.messages) + g.damaged, g
                for m in g.messages:
                    i = int(m.body[1:6])
                    assert i not in damaged and m.body == body_of(i, 1000)
                    assert m.commit_log_offset == acked[i].wrote_offset
                    served.append(m.queue_offset)
                skipped += g.damaged
                offset = g.next_begin_offset
            assert served == [
                acked[i].queue_offset for i in range(q, 300, 2) if i not in damaged
            ]
        assert skipped == len(damaged)
        with store.consumer("c", "topic") as consumer:
            got = []
            while batch := consumer.poll(timeout=0.5, max_messages=500):
                got += batch
            assert sorted(int(m.body[1:6]) for m in got) == sorted(set(range(300)) - damaged)
            assert all(m.body == body_of(int(m.body[1:6]), 1000) for m in got)
            assert consumer.damaged == len(damaged)
        # Key queries: an error naming the damaged record whose header is
        # intact, nothing for records that are gone, intact messages.
        for i in [*sorted(damaged), 0, 299]:
            if i in reported:
                with pytest.raises(CorruptedError, match=files[1].name):
                    store.query_message("topic", f"key{i}")
                continue
            got = store.query_message("topic", f"key{i}")
            assert [m.body for m in got] == ([] if i in damaged else [body_of(i, 1000)])
        r = store.put("topic", b"after", queue_id=0)
        assert r.status is PutStatus.PUT_OK


def test_garbage_in_a_scanned_segment_is_refused_or_skipped(store_path: str) -> None:
    """Garbage in durable data is damage, not a torn tail (docs/format.md §15.1).

    The old rule cut the log at the garbage and zeroed every later record;
    now the read-write open refuses with CorruptedError and changes nothing,
    and ``on_corruption="skip"`` keeps every intact record.
    """
    acked = make_store(store_path, 200)  # 4 segments: recovery scans 1..3
    files = sorted((Path(store_path) / "commitlog").iterdir())
    assert len(files) == 4
    # Destroy the magic of the first record at or after SEG*2 + 5000.
    victim_i = next(i for i, r in enumerate(acked) if r.wrote_offset >= 2 * SEG + 5000)
    victim = acked[victim_i]
    with open(files[2], "r+b") as f:
        f.seek(victim.wrote_offset - 2 * SEG)
        f.write(os.urandom(300))
    before = snapshot(store_path, mtimes=False)

    with pytest.raises(CorruptedError) as ei:
        MessageStore(StoreConfig(store_path=store_path, **SMALL)).start()
    assert files[2].name in str(ei.value)
    assert str(victim.wrote_offset - 2 * SEG) in str(ei.value)
    assert diff_snapshots(before, snapshot(store_path, mtimes=False)) == []

    cfg = StoreConfig(store_path=store_path, on_corruption="skip", **SMALL)
    with MessageStore(cfg) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "normal"
        assert [d[0] for d in rep.damaged] == [victim.wrote_offset], rep
        assert rep.damaged[0][1] == acked[victim_i + 1].wrote_offset
        assert rep.bytes_truncated == 0
        assert_all_present(store, acked[:victim_i], size=1000)
        assert_all_present(store, acked[victim_i + 1 :], start=victim_i + 1, size=1000)
        q = victim_i % 2
        n = sum(1 for i in range(len(acked)) if i % 2 == q)
        assert store.get_max_offset_in_queue("topic", q) == n
        g = store.get_message("g", "topic", q, victim.queue_offset, 1)
        # The damaged record is skipped and counted; the pull goes on.
        assert g.damaged == 1, g
        assert [m.queue_offset for m in g.messages] == [victim.queue_offset + 1]
        assert g.messages[0].body == body_of(victim_i + 2, 1000)
        assert len(pull_all(store, q)) == n - 1
        r = store.put("topic", body_of(999, 1000), queue_id=q)
        assert r.status is PutStatus.PUT_OK and r.queue_offset == n
    # The skipped range is remembered: a default open accepts it.
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as store:
        assert store.recovery_report is not None
        assert [d[0] for d in store.recovery_report.damaged] == [victim.wrote_offset]
        assert store.max_phy_offset == r.wrote_offset + r.wrote_bytes
        assert store.get_message("g", "topic", q, victim.queue_offset, 1).damaged == 1


@pytest.mark.slow
def test_garbage_anywhere_never_crashes(tmp_path: Path) -> None:
    """Garbage at many places of a copy of one store: open, read, never a signal."""
    base = str(tmp_path / "base")
    make_store(base, 250)
    script = textwrap.dedent(
        """
        import sys
        from rocketstore import MessageStore, StoreConfig, StoreError
        cfg = StoreConfig(store_path=sys.argv[1], mapped_file_size_commit_log=65536,
                          mapped_file_size_consume_queue=10000, max_hash_slot_num=100,
                          max_index_num=2000)
        try:
            with MessageStore(cfg) as s:
                for off in range(0, s.max_phy_offset, 101):
                    s.look_message_by_offset(off)
                for q in (0, 1):
                    off = 0
                    for _ in range(1000):
                        g = s.get_message("g", "topic", q, off, 32)
                        if g.next_begin_offset <= off:
                            break
                        off = g.next_begin_offset
        except (StoreError, OSError) as e:
            print("REFUSED", type(e).__name__, e)
        print("DONE")
        """
    )
    import random

    rnd = random.Random(1234)
    for k in range(12):
        work = str(tmp_path / f"w{k}")
        shutil.copytree(base, work)
        files = sorted((Path(work) / "commitlog").iterdir())
        f = rnd.choice(files)
        at = rnd.randrange(0, SEG - 512)
        with open(f, "r+b") as fh:
            fh.seek(at)
            fh.write(os.urandom(rnd.choice([4, 64, 512])))
        proc = subprocess.run(
            [sys.executable, "-c", script, work], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, (f.name, at, proc.returncode, proc.stderr[-2000:])
        assert "DONE" in proc.stdout
        shutil.rmtree(work)
