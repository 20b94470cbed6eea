"""Store states: the writer lock (in-process and across processes), closed and
not-started stores, read-only opens, SYNC_FLUSH acknowledgements, pickling."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rocketstore
from helpers.store_util import age_files, diff_snapshots, segment_path, snapshot
from rocketstore import (
    FlushDiskType,
    Message,
    MessageStore,
    PutStatus,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreConfig,
    StoreLockedError,
)

OpenStore = Callable[..., MessageStore]
SEG = 4096

TRY_OPEN = """
import sys
from rocketstore import MessageStore, StoreConfig, StoreLockedError
try:
    store = MessageStore(StoreConfig(store_path=sys.argv[1])).start()
except StoreLockedError as e:
    print("LOCKED:", e, file=sys.stderr)
    sys.exit(3)
r = store.put("from_child", b"child body", 2)
print(r.wrote_offset, r.msg_id)
store.shutdown()
"""


def run_child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False
    )


def fill(store: MessageStore, n: int = 50) -> list[Any]:
    rs = [store.put("T", b"body-%d" % i * (i % 30), i % 4, tags="t") for i in range(n)]
    assert all(r.ok for r in rs)
    return rs


# -- the writer lock ---------------------------------------------------------------------


def test_second_writer_in_same_process_is_refused(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    rs = fill(store, 10)
    second = MessageStore(StoreConfig(store_path=store_path))
    with pytest.raises(StoreLockedError) as ei:
        second.start()
    assert isinstance(ei.value, rocketstore.StoreError)
    assert store_path in str(ei.value)
    with pytest.raises(StoreClosedError):  # the refused handle is not open
        second.put("T", b"x")
    with pytest.raises(StoreLockedError):  # and the refusal repeats
        MessageStore(store_path).start()
    # The first writer is unaffected.
    r = store.put("T", b"still mine")
    assert r.ok and r.wrote_offset == rs[-1].wrote_offset + rs[-1].wrote_bytes


def test_writer_in_other_process_is_refused(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    fill(store)
    store.flush()
    before = snapshot(store_path, mtimes=False)
    lock_mtime = (Path(store_path) / "lock").stat().st_mtime_ns

    child = run_child(TRY_OPEN, store_path)
    assert child.returncode == 3, child.stderr
    assert "LOCKED" in child.stderr
    assert diff_snapshots(before, snapshot(store_path, mtimes=False)) == []
    assert (Path(store_path) / "lock").stat().st_mtime_ns == lock_mtime
    max_before = store.max_phy_offset

    # After shutdown another process can open the store and write to it.
    store.shutdown()
    child = run_child(TRY_OPEN, store_path)
    assert child.returncode == 0, child.stderr
    offset, msg_id = child.stdout.split()
    assert int(offset) == max_before
    store = open_store(path=store_path)
    m = store.look_message_by_id(msg_id)
    assert m is not None
    assert (m.topic, m.queue_id, m.body) == ("from_child", 2, b"child body")


KILLED_WRITER = """
import json, os, signal, sys
from rocketstore import MessageStore, StoreConfig
store = MessageStore(StoreConfig(store_path=sys.argv[1], mapped_file_size_commit_log=4096)).start()
acked = []
for i in range(200):
    r = store.put("K", b"k%d" % i * (i % 17), i % 3)
    acked.append([r.wrote_offset, r.queue_offset, r.msg_id])
print(json.dumps(acked), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killed_writer_releases_lock_and_keeps_acked_messages(
    open_store: OpenStore, store_path: str
) -> None:
    child = run_child(KILLED_WRITER, store_path)
    assert child.returncode == -9, child.stderr
    acked = json.loads(child.stdout)
    assert len(acked) == 200
    store = open_store(path=store_path)  # the lock died with the process
    assert store.config.mapped_file_size_commit_log == SEG
    for i, (offset, queue_offset, msg_id) in enumerate(acked):
        m = store.look_message_by_id(msg_id)
        assert m is not None
        assert (m.commit_log_offset, m.queue_offset) == (offset, queue_offset)
        assert m.body == b"k%d" % i * (i % 17)
    assert store.queue_offset_table() == {("K", 0): 67, ("K", 1): 67, ("K", 2): 66}


# -- closed and not-started stores ------------------------------------------------------

VALID_ID = "7F00000100002A9F0000000000000000"

CALLS: dict[str, Callable[[MessageStore], object]] = {
    "put": lambda s: s.put("T", b"x"),
    "put_illegal_topic": lambda s: s.put("bad/topic", b"x"),
    "put_illegal_props": lambda s: s.put("T", b"x", properties={"k": "\x01"}),
    "put_message": lambda s: s.put_message(Message("T", b"x")),
    "put_message_illegal": lambda s: s.put_message(Message("T", b"x", properties={"": "v"})),
    "put_messages": lambda s: s.put_messages([Message("T", b"x")]),
    "put_messages_empty": lambda s: s.put_messages([]),
    "flush": lambda s: s.flush(),
    "look_message_by_offset": lambda s: s.look_message_by_offset(0),
    "look_message_by_id": lambda s: s.look_message_by_id(VALID_ID),
    "max_phy_offset": lambda s: s.max_phy_offset,
    "min_phy_offset": lambda s: s.min_phy_offset,
    "flushed_offset": lambda s: s.flushed_offset,
    "queue_offset_table": lambda s: s.queue_offset_table(),
    "put_batch": lambda s: s.put_batch("T", [b"x"]),
    "get_message": lambda s: s.get_message("g", "T", 0, 0, 32, None),
    "get_max_offset_in_queue": lambda s: s.get_max_offset_in_queue("T", 0),
    "get_min_offset_in_queue": lambda s: s.get_min_offset_in_queue("T", 0),
    "get_commit_log_offset_in_queue": lambda s: s.get_commit_log_offset_in_queue("T", 0, 0),
    "get_offset_in_queue_by_time": lambda s: s.get_offset_in_queue_by_time("T", 0, 0),
    "get_earliest_message_time": lambda s: s.get_earliest_message_time("T", 0),
    "get_message_store_timestamp": lambda s: s.get_message_store_timestamp("T", 0, 0),
    "query_message": lambda s: s.query_message("T", "k"),
    # Closed comes first: a wrong argument does not change the error.
    "query_message_bad_key": lambda s: s.query_message("T", 5),  # type: ignore[arg-type]
    "queue_ids": lambda s: s.queue_ids("T"),
    "topics": lambda s: s.topics(),
    "dispatch_behind_bytes": lambda s: s.dispatch_behind_bytes(),
    "dispatch_seq": lambda s: s.dispatch_seq,
    "wait_for_dispatch": lambda s: s.wait_for_dispatch(0, 0.0),
    "refresh": lambda s: s.refresh(),
    "commit_offset": lambda s: s.commit_offset("g", "T", 0, 1),
    "query_offset": lambda s: s.query_offset("g", "T", 0),
    "persist_offsets": lambda s: s.persist_offsets(),
    "consumer": lambda s: s.consumer("g", "T"),
    "delete_expired_files": lambda s: s.delete_expired_files(),
    "read_arrow": lambda s: s.read_arrow("T"),
}

CLOSED_STORE_BUGS: dict[str, str] = {}


def _call_params(bugs: dict[str, str]) -> list[Any]:
    params = [
        pytest.param(
            name,
            fn,
            id=name,
            marks=[pytest.mark.xfail(reason=bugs[name], strict=True)] if name in bugs else [],
        )
        for name, fn in CALLS.items()
    ]
    return params


@pytest.mark.parametrize(("name", "call"), _call_params(CLOSED_STORE_BUGS))
def test_closed_store_refuses_every_call(
    open_store: OpenStore, name: str, call: Callable[[MessageStore], object]
) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    fill(store, 5)
    store.shutdown()
    store.shutdown()  # idempotent
    assert not store.is_writeable
    assert "CLOSED" in store.running_flags
    with pytest.raises(StoreClosedError):
        call(store)


@pytest.mark.parametrize(("name", "call"), _call_params({}))
def test_not_started_store_refuses_every_call(
    store_path: str, name: str, call: Callable[[MessageStore], object]
) -> None:
    store = MessageStore(StoreConfig(store_path=store_path, mapped_file_size_commit_log=SEG))
    with pytest.raises(StoreClosedError):
        call(store)
    assert not store.is_writeable
    assert not Path(store_path).exists()  # nothing touches the disk before start()


def test_forked_child_refuses_every_call(open_store: OpenStore) -> None:
    """A forked child's copy of a started store refuses every call with
    StoreClosedError saying why; the parent's store keeps working."""
    store = open_store(mapped_file_size_commit_log=SEG)
    fill(store, 5)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            os.close(r)
            wrong: dict[str, str] = {}
            for name, call in CALLS.items():
                try:
                    out = call(store)
                except StoreClosedError as e:
                    if "fork" not in str(e):
                        wrong[name] = f"reason: {e}"
                except Exception as e:
                    wrong[name] = f"raised {type(e).__name__}: {e}"
                else:
                    wrong[name] = f"returned {out!r}"
            os.write(w, json.dumps(wrong).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        report = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert json.loads(report) == {}
    assert store.put("T", b"after the fork").ok
    assert store.get_max_offset_in_queue("T", 0) == 3  # two from fill(), then this one


def test_context_manager_and_reopen(store_path: str) -> None:
    cfg = StoreConfig(store_path=store_path, mapped_file_size_commit_log=SEG)
    with MessageStore(cfg) as store:
        r = store.put("T", b"ctx")
        assert store.is_writeable and store.running_flags == []
    with pytest.raises(StoreClosedError):
        store.put("T", b"x")
    with MessageStore(cfg) as again:  # the lock was released by __exit__
        m = again.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == b"ctx"


# -- read-only -----------------------------------------------------------------------------


def test_read_only_store(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    rs = fill(store, 80)
    max_off = store.max_phy_offset
    table = store.queue_offset_table()
    store.shutdown()
    age_files(store_path)
    before = snapshot(store_path)

    ro = open_store(path=store_path, read_only=True)
    assert ro.read_only
    assert ro.config.mapped_file_size_commit_log == SEG
    assert ro.max_phy_offset == max_off
    assert not ro.is_writeable and "READ_ONLY" in ro.running_flags
    for r in rs:
        m = ro.look_message_by_id(r.msg_id)
        assert m is not None and m.commit_log_offset == r.wrote_offset
        assert ro.look_message_by_offset(r.wrote_offset) is not None
    assert ro.queue_offset_table() == table
    rep = ro.recovery_report
    assert rep is not None and rep.bytes_truncated == 0
    # Normal recovery scans the last three segment files (RocketMQ's rule).
    assert 0 < rep.records <= len(rs) and rep.end_offset == rs[-1].wrote_offset + rs[-1].wrote_bytes

    with pytest.raises(ReadOnlyStoreError):
        ro.put("T", b"x")
    with pytest.raises(ReadOnlyStoreError):
        ro.put("bad/topic", b"x")
    with pytest.raises(ReadOnlyStoreError):
        ro.put_message(Message("T", b"x"))
    with pytest.raises(ReadOnlyStoreError):
        ro.put_message(Message("T", b"x", properties={"": "v"}))
    with pytest.raises(ReadOnlyStoreError):
        ro.put_messages([Message("T", b"x")])
    ro.flush()  # nothing to write
    assert diff_snapshots(before, snapshot(store_path)) == []

    # No lock is held: a writer can open concurrently and append.
    writer = open_store(path=store_path)
    r = writer.put("T", b"writer")
    assert r.ok and r.wrote_offset == max_off
    writer.shutdown()
    ro.shutdown()
    with pytest.raises(StoreClosedError):
        ro.look_message_by_offset(0)


def test_read_only_never_repairs(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    rs = fill(store, 30)
    max_off = store.max_phy_offset
    store.shutdown()
    seg = segment_path(store_path, max_off - max_off % SEG)
    with open(seg, "r+b") as f:
        f.seek(max_off % SEG)
        f.write(b"\x01\x02\x03\x04garbage")
    age_files(store_path)
    before = snapshot(store_path)
    ro = open_store(path=store_path, read_only=True)
    assert ro.max_phy_offset == max_off
    assert all(ro.look_message_by_offset(r.wrote_offset) is not None for r in rs)
    ro.shutdown()
    assert diff_snapshots(before, snapshot(store_path)) == []  # garbage left in place


def test_read_only_open_of_missing_dir(store_path: str) -> None:
    with pytest.raises(FileNotFoundError):
        MessageStore(StoreConfig(store_path=store_path), read_only=True).start()
    assert not Path(store_path).exists()


# -- SYNC_FLUSH ----------------------------------------------------------------------------


def test_sync_flush_acknowledges_only_flushed_messages(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    for i in range(120):
        if i % 2:
            r = store.put("S", b"s" * (i * 3 % 250), i % 3)
        else:
            r = store.put_message(Message("S", b"m" * (i % 200), i % 3, tags="t"))
        assert r.status is PutStatus.PUT_OK
        assert store.flushed_offset >= r.wrote_offset + r.wrote_bytes
    assert store.max_phy_offset > 3 * SEG  # crossed several files
    rs = store.put_messages([Message("S", b"b" * 300, q) for q in range(12)])
    assert all(r.status is PutStatus.PUT_OK for r in rs)
    assert store.flushed_offset >= max(r.wrote_offset + r.wrote_bytes for r in rs)

    # WAIT=false: acknowledged without waiting for the disk.
    r = store.put("S", b"no wait", properties={"WAIT": "false"})
    assert r.status is PutStatus.PUT_OK
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.properties == {"WAIT": "false"}
    r = store.put_message(Message("S", b"no wait", properties={"WAIT": "false"}))
    assert r.status is PutStatus.PUT_OK


def test_async_flush_then_explicit_flush(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    assert store.config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    fill(store, 100)
    assert store.flush() == store.max_phy_offset
    assert store.flushed_offset == store.max_phy_offset


# -- pickling ------------------------------------------------------------------------------


@pytest.mark.parametrize("read_only", [False, True])
def test_pickle_gives_unstarted_store_with_same_config(
    open_store: OpenStore, store_path: str, read_only: bool
) -> None:
    writer = open_store(mapped_file_size_commit_log=SEG)
    r = writer.put("T", b"pickled")
    if read_only:
        writer.shutdown()
        store = open_store(path=store_path, read_only=True)  # size from disk
    else:
        store = writer
    copy = pickle.loads(pickle.dumps(store))
    assert isinstance(copy, MessageStore)
    assert copy.config == store.config
    assert copy.config.mapped_file_size_commit_log == SEG
    assert copy.read_only is read_only
    assert copy.recovery_report is None
    with pytest.raises(StoreClosedError):
        copy.look_message_by_offset(0)
    with pytest.raises(StoreClosedError):
        copy.put("T", b"x")
    # The original is untouched by pickling.
    assert store.look_message_by_offset(r.wrote_offset) is not None
    store.shutdown()
    with copy:
        m = copy.look_message_by_id(r.msg_id)
        assert m is not None and m.body == b"pickled"
