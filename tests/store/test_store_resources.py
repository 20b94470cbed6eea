"""What a store holds of the process: files a failed creation made, descriptors
and mappings after shutdown, the writer lock and the store in forked children,
and engine calls running when the interpreter exits."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.presets import SMALL
from rocketstore import FlushDiskType, MessageStore, PutStatus, StoreConfig


def _held(path: str) -> tuple[int, int]:
    """(open descriptors, mapped regions) of this process on files under ``path``."""
    root = os.path.realpath(path)
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(root + os.sep):
                fds += 1
        except OSError:  # closed meanwhile (e.g. the listing's own descriptor)
            pass
    with open("/proc/self/maps") as f:
        maps = sum(1 for line in f if root + os.sep in line)
    return fds, maps


def _cfg(path: str, **kw: Any) -> StoreConfig:
    return StoreConfig(store_path=path, **{**SMALL, **kw})


def _body(i: int) -> bytes:
    return b"message %d;" % i * (1 + i % 7)


def _check_all(path: str, topic: str, acked: dict[tuple[int, int], bytes], **kw: Any) -> None:
    """Reopens the store and checks every acknowledged ``(queue, offset) -> body``."""
    with MessageStore(_cfg(path, **kw)) as store:
        for (qid, qoff), body in acked.items():
            r = store.get_message("check", topic, qid, qoff, 1)
            assert [m.body for m in r.messages] == [body], (qid, qoff, r)


# -- files a failed creation made --------------------------------------------------------

ROLL_UNDER_RLIMIT_AS = """
import json, os, resource, sys
from rocketstore import FlushDiskType, MessageStore, StoreConfig

path, seg = sys.argv[1], int(sys.argv[2])
cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=seg,
                  mapped_file_size_consume_queue=20 * 500, max_hash_slot_num=100,
                  max_index_num=2000, flush_disk_type=FlushDiskType.SYNC_FLUSH)
store = MessageStore(cfg).start()
acked, statuses = [], []
i = 0

def put():
    global i
    body = b"%08d" % i * 5000
    r = store.put("R", body, check=False)
    statuses.append(r.status.name)
    if r.ok:
        acked.append([r.queue_offset, i])
    i += 1
    return r

# Fill the first segment up to the last record that fits.
while store.max_phy_offset + 2 * 40200 < seg:
    assert put().ok

def vm_size():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))

soft, hard = resource.getrlimit(resource.RLIMIT_AS)
# Room for small allocations, not for mapping another segment.
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + seg // 4, hard))
limited_from = len(statuses)
for _ in range(4):
    put()
left_behind = sorted(os.listdir(os.path.join(path, "commitlog")))
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
lifted_from = len(statuses)
for _ in range(5):
    put()
store.shutdown()
print(json.dumps({"statuses": statuses, "limited_from": limited_from,
                  "lifted_from": lifted_from, "files": left_behind, "acked": acked}))
"""


def test_failed_mapping_of_a_new_segment_leaves_nothing_behind(store_path: str) -> None:
    """Under an address-space limit the roll to a new CommitLog segment fails;
    the file it made is removed, so once the limit is lifted puts roll and
    succeed again, and every acknowledged message survives a reopen."""
    seg = 32 << 20
    child = subprocess.run(
        [sys.executable, "-c", ROLL_UNDER_RLIMIT_AS, store_path, str(seg)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout)
    limited = out["statuses"][out["limited_from"]:out["lifted_from"]]
    # The record that still fitted was put; every roll attempt failed cleanly.
    assert "CREATE_MAPPED_FILE_FAILED" in limited, limited
    assert limited[limited.index("CREATE_MAPPED_FILE_FAILED"):] == [
        "CREATE_MAPPED_FILE_FAILED"
    ] * (len(limited) - limited.index("CREATE_MAPPED_FILE_FAILED"))
    assert "Cannot allocate memory" in child.stderr  # the mmap, not the disk, failed
    assert out["files"] == [f"{0:020d}"], "the failed roll left its file behind"
    assert out["statuses"][out["lifted_from"]:] == ["PUT_OK"] * 5
    assert sorted(os.listdir(Path(store_path) / "commitlog")) == [f"{0:020d}", f"{seg:020d}"]
    acked = {(0, qoff): b"%08d" % i * 5000 for qoff, i in out["acked"]}
    assert len(acked) == len(out["acked"])
    _check_all(store_path, "R", acked, mapped_file_size_commit_log=seg)


def test_failed_mapping_of_a_new_segment_in_process(
    fail_points: Callable[[str, int], None], store_path: str
) -> None:
    """The same with the mapping failed on purpose: the put is refused with
    CREATE_MAPPED_FILE_FAILED, no file stays, and the next put rolls."""
    store = MessageStore(_cfg(store_path)).start()
    try:
        acked: dict[tuple[int, int], bytes] = {}
        i = 0
        while store.max_phy_offset < SMALL["mapped_file_size_commit_log"] - 2000:
            r = store.put("S", _body(i))
            assert r.ok
            acked[(0, r.queue_offset)] = _body(i)
            i += 1
        store.flush()  # the queue and index files exist: only the roll creates a file
        fail_points("map_new_file", errno.ENOMEM)
        statuses = []
        for _ in range(20):  # some still fit, then the roll fails
            r = store.put("S", _body(i) * 20, check=False)
            statuses.append(r.status)
            if r.ok:
                acked[(0, r.queue_offset)] = _body(i) * 20
            i += 1
        assert statuses[-1] is PutStatus.CREATE_MAPPED_FILE_FAILED
        assert len(os.listdir(Path(store_path) / "commitlog")) == 1
        fail_points("map_new_file", 0)
        r = store.put("S", _body(i))
        assert r.ok and r.wrote_offset == SMALL["mapped_file_size_commit_log"]
        acked[(0, r.queue_offset)] = _body(i)
    finally:
        store.shutdown()
    _check_all(store_path, "S", acked)


@pytest.mark.parametrize("kind", ["consume_queue", "index"])
def test_failed_mapping_of_a_queue_or_index_file_leaves_nothing_behind(
    fail_points: Callable[[str, int], None], store_path: str, kind: str
) -> None:
    """A consume queue or index file whose mapping fails is removed again.
    Dispatch then waits (RESOURCE_WAIT) and retries instead of failing: the
    store takes puts, and once the mapping works again dispatch goes on by
    itself; reopened, the store has every message."""
    cfg = _cfg(store_path, mapped_file_size_consume_queue=20 * 10, max_index_num=10)
    store = MessageStore(cfg).start()
    acked: dict[tuple[int, int], bytes] = {}
    # Fill the first queue file (10 units) or the first index file (9 keys).
    for i in range(10 if kind == "consume_queue" else 9):
        r = store.put("F", _body(i), keys=f"k{i}" if kind == "index" else None)
        acked[(0, r.queue_offset)] = _body(i)
    store.flush()
    sub = Path(store_path) / ("consumequeue/F/0" if kind == "consume_queue" else "index")
    before = sorted(os.listdir(sub))
    assert len(before) == 1
    fail_points("map_new_file", errno.ENOMEM)
    r = store.put("F", b"the one that rolls", keys="k-roll")
    assert r.ok
    acked[(0, r.queue_offset)] = b"the one that rolls"
    deadline = time.monotonic() + 10
    while not store.running_flags and time.monotonic() < deadline:
        time.sleep(0.01)
    [wait] = store.running_flags
    assert wait.startswith("RESOURCE_WAIT: dispatch: ") and "mmap" in wait, wait
    assert store.is_writeable
    time.sleep(0.2)  # retries meanwhile
    assert sorted(os.listdir(sub)) == before, "the failed creation left its file behind"
    r = store.put("F", b"while it waits", keys="k-wait")
    assert r.ok
    acked[(0, r.queue_offset)] = b"while it waits"
    fail_points("map_new_file", 0)
    deadline = time.monotonic() + 10
    while (store.running_flags or store.dispatch_behind_bytes()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.running_flags == [] and store.dispatch_behind_bytes() == 0
    assert [m.body for m in store.query_message("F", "k-wait")] == [b"while it waits"]
    store.shutdown()
    _check_all(store_path, "F", acked, mapped_file_size_consume_queue=20 * 10, max_index_num=10)
    with MessageStore(_cfg(store_path, mapped_file_size_consume_queue=20 * 10,
                           max_index_num=10)) as again:
        assert [m.body for m in again.query_message("F", "k-roll")] == [b"the one that rolls"]
        assert again.put("F", b"after").ok


# -- descriptors and mappings after shutdown ---------------------------------------------


def _fill_many_files(store: MessageStore) -> None:
    for i in range(400):
        assert store.put(f"T{i % 5}", _body(i), i % 4, keys=f"key{i}").ok
    store.flush()


@pytest.mark.parametrize("how", ["writer", "read_only", "simulated_crash"])
def test_shutdown_releases_every_descriptor_and_mapping(store_path: str, how: str) -> None:
    """After shutdown() no descriptor and no mapping of the store's files is
    left, while the store object is still referenced (not collected)."""
    cfg = _cfg(store_path, mapped_file_size_consume_queue=20 * 50, max_index_num=100)
    writer = MessageStore(cfg).start()
    _fill_many_files(writer)
    if how == "read_only":
        writer.shutdown()
        store = MessageStore(cfg, read_only=True).start()
    else:
        store = writer
    fds, maps = _held(store_path)
    # Segments, queues and index files are mapped; a mapping keeps no
    # descriptor open (only the lock and the checkpoint may hold one).
    assert fds <= 3 and maps > 20, (fds, maps)
    if how == "simulated_crash":
        native = store._native
        assert native is not None
        native._simulate_crash()
    store.shutdown()
    assert _held(store_path) == (0, 0)
    assert store._native is not None  # the handle itself is still alive
    # And the store opens again, as a writer, in this very process.
    with MessageStore(cfg) as again:
        assert again.get_max_offset_in_queue("T0", 0) == 20


# -- fork ------------------------------------------------------------------------------

LOCK_PROBE = """
import sys
from rocketstore import MessageStore, StoreConfig, StoreLockedError
try:
    MessageStore(StoreConfig(store_path=sys.argv[1])).start().shutdown()
except StoreLockedError:
    sys.exit(3)
"""


def _writer_can_open(path: str) -> bool:
    """Whether another process can take the writer lock (it releases it at once)."""
    child = subprocess.run(
        [sys.executable, "-c", LOCK_PROBE, path],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert child.returncode in (0, 3), child.stderr
    return child.returncode == 0


def _wait_child(pid: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung (joining threads it does not have?)")


def _put_some(store: MessageStore, acked: dict[tuple[int, int], bytes], n: int) -> None:
    for _ in range(n):
        body = _body(len(acked))
        r = store.put("K", body, len(acked) % 2)
        assert r.ok
        acked[(len(acked) % 2, r.queue_offset)] = body


def _child_shuts_down(store: MessageStore) -> None:
    store.shutdown()


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
@pytest.mark.parametrize("what", ["drop", "native_shutdown", "native_crash"])
def test_forked_child_leaves_the_parents_store_alone(
    store_path: str, flush: FlushDiskType, what: str
) -> None:
    """os.fork(): the child drops its copy of the store (or shuts down or
    'crashes' the engine store it inherited) and exits. The parent's abort file
    is still there, its lock still holds, its writes keep working, and
    everything is intact after a reopen."""
    cfg = _cfg(store_path, flush_disk_type=flush)
    store = MessageStore(cfg).start()
    acked: dict[tuple[int, int], bytes] = {}
    _put_some(store, acked, 50)
    native = store._native
    assert native is not None
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            if what == "native_shutdown":
                native.shutdown()
            elif what == "native_crash":
                native._simulate_crash()
            # The fork hook let go of the child's copy: this is the last
            # reference, so the engine store is dropped here. (No gc.collect:
            # it could run the parent's finalizers in the child.)
            last = sys.getrefcount(native) == 2  # the name and the argument
            del native
            code = 0 if last else 2
        finally:
            os._exit(code)
    del native
    assert _wait_child(pid) == 0
    assert (Path(store_path) / "abort").exists(), "the child removed the parent's abort file"
    assert not _writer_can_open(store_path), "the child dropped the parent's lock"
    _put_some(store, acked, 50)
    store.flush()
    assert store.is_writeable
    store.shutdown()
    assert not (Path(store_path) / "abort").exists()
    _check_all(store_path, "K", acked)


def test_writer_reopens_while_a_forked_child_lives(store_path: str) -> None:
    """The child's copy of the lock descriptor is closed at fork: after the
    parent's shutdown another writer opens the store although the child (which
    never touched the store) is still alive."""
    cfg = _cfg(store_path)
    store = MessageStore(cfg).start()
    acked: dict[tuple[int, int], bytes] = {}
    _put_some(store, acked, 20)
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child waits, holding whatever it inherited
        try:
            os.read(go_r, 1)
        finally:
            os._exit(0)
    try:
        assert not _writer_can_open(store_path)
        store.shutdown()
        assert _writer_can_open(store_path), "the living child keeps the lock"
        with MessageStore(cfg) as again:  # and in this process too
            _put_some(again, acked, 20)
    finally:
        os.write(go_w, b"x")
        assert _wait_child(pid) == 0
    _check_all(store_path, "K", acked)


def test_multiprocessing_fork_child_shutting_down_changes_nothing(store_path: str) -> None:
    """multiprocessing's fork start method: a child that calls shutdown() on
    the store it inherited, and lets it go, touches none of the parent's files."""
    cfg = _cfg(store_path)
    store = MessageStore(cfg).start()
    acked: dict[tuple[int, int], bytes] = {}
    _put_some(store, acked, 30)
    store.flush()
    config_files = sorted(p.name for p in (Path(store_path) / "config").iterdir())
    checkpoint = (Path(store_path) / "checkpoint").read_bytes()
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_child_shuts_down, args=(store,))
    p.start()
    p.join(30)
    if p.is_alive():
        p.kill()
        pytest.fail("the multiprocessing child hung")
    assert p.exitcode == 0
    assert (Path(store_path) / "abort").exists()
    assert (Path(store_path) / "checkpoint").read_bytes() == checkpoint
    assert sorted(p.name for p in (Path(store_path) / "config").iterdir()) == config_files
    assert not _writer_can_open(store_path)
    _put_some(store, acked, 30)
    store.shutdown()
    assert _writer_can_open(store_path)
    _check_all(store_path, "K", acked)


FORKING_PARENT = """
import os, sys, threading, time
from rocketstore import MessageStore, StoreConfig

root, mode, forks = sys.argv[1], sys.argv[2], int(sys.argv[3])
SMALL = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 500,
             max_hash_slot_num=100, max_index_num=2000)

def threads():
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            names.append(open(f"/proc/self/task/{t}/comm").read().strip())
        except OSError:
            pass
    return names

# Three stores whose flush services wait 1 ms a round: many timed waits in flight.
FAST = dict(flush_interval_commit_log=1, flush_interval_consume_queue=1)
parents = [MessageStore(StoreConfig(store_path=f"{root}/parent{j}", **SMALL, **FAST)).start()
           for j in range(3)]
parent = parents[0]
stop = threading.Event()
if mode == "closed":
    for p in parents:
        p.shutdown()
    left = [n for n in threads() if n.startswith("rocketstore-")]
    assert not left, f"engine threads left after the close: {left}"
else:
    def busy():
        while not stop.is_set():
            for i in range(50):
                parent.put("T", b"p" * 100, i % 4)
            parent.get_message("G", "T", 0, 0, 32)
    for _ in range(2):
        threading.Thread(target=busy, daemon=True).start()
for i in range(forks):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with MessageStore(StoreConfig(store_path=f"{root}/child{i}", **SMALL)) as s:
                for k in range(20):
                    s.put("T", b"x%d" % k, 0)
                code = 0 if len(s.get_message("G", "T", 0, 0, 32).messages) == 20 else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            sys.exit(f"child {i} of {forks} hung opening its own store")
        time.sleep(0.005)
stop.set()
print("children", forks)
"""


@pytest.mark.parametrize("mode", ["closed", "busy"])
def test_children_forked_beside_a_store_open_their_own(tmp_path: Path, mode: str) -> None:
    """Worker processes forked from a process whose store was just closed
    (``closed``: no engine thread is left, the clock's included) or is busy
    with puts and reads on two threads and flushes every millisecond
    (``busy``) each open a store of their own, put and read. No engine lock
    or wait keeps state in a process-wide table a parent thread could hold
    at the fork (docs/format.md §14, "Fork"); with such a table, one of the
    first ten children hung."""
    child = subprocess.run(
        [sys.executable, "-c", FORKING_PARENT, str(tmp_path), mode, "30"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert child.returncode == 0, child.stdout + child.stderr
    assert "children 30" in child.stdout


# -- interpreter exit ------------------------------------------------------------------

EXIT_MID_PUT = """
import json, sys, threading, time
from rocketstore import FlushDiskType, MessageStore, StoreConfig

cfg = StoreConfig(store_path=sys.argv[1], flush_disk_type=FlushDiskType.SYNC_FLUSH,
                  mapped_file_size_commit_log=256 * 1024, mapped_file_size_consume_queue=20 * 500,
                  max_hash_slot_num=100, max_index_num=2000)
store = MessageStore(cfg).start()
acked = []

def produce(t):
    i = 0
    while True:
        r = store.put("X", b"%d-%d;" % (t, i) * 20, t)
        if r.ok:
            acked.append((t, r.queue_offset, i))
        i += 1

def follow():
    seq, offset = 0, 0
    while True:
        seq = store.wait_for_dispatch(seq, 0.5)
        offset = store.get_message("g", "X", 0, offset, 8).next_begin_offset

for t in range(4):
    threading.Thread(target=produce, args=(t,), daemon=True).start()
threading.Thread(target=follow, daemon=True).start()
time.sleep(float(sys.argv[2]))
print(json.dumps(list(acked)), flush=True)
# The interpreter exits now, with the producers inside SYNC_FLUSH puts and
# the follower inside a wait or a pull.
"""


def test_interpreter_exit_during_engine_calls_never_aborts(tmp_path: Path) -> None:
    """Daemon threads inside GIL-released SYNC_FLUSH puts (and waits) while the
    interpreter exits: no run dies by a signal, and every acknowledged message
    is intact."""
    runs, parallel = 40, 8
    results: list[tuple[str, subprocess.CompletedProcess[str]]] = []
    for start in range(0, runs, parallel):
        batch = []
        for n in range(start, start + parallel):
            path = str(tmp_path / f"s{n}")
            proc = subprocess.Popen(
                [sys.executable, "-c", EXIT_MID_PUT, path, str(0.1 + 0.02 * (n % 5))],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            batch.append((path, proc))
        for path, proc in batch:
            out, err = proc.communicate(timeout=120)
            results.append(
                (path, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
            )
    died = [(p, r.returncode, r.stderr[-300:]) for p, r in results if r.returncode != 0]
    assert died == [], f"{len(died)} of {runs} runs did not exit cleanly: {died[:3]}"
    total = 0
    for path, r in results:
        acked = json.loads(r.stdout)
        total += len(acked)
        with MessageStore(StoreConfig(store_path=path, mapped_file_size_commit_log=256 * 1024,
                                      mapped_file_size_consume_queue=20 * 500,
                                      max_hash_slot_num=100, max_index_num=2000)) as store:
            for t, qoff, i in acked:
                got = store.get_message("check", "X", t, qoff, 1)
                assert [m.body for m in got.messages] == [b"%d-%d;" % (t, i) * 20], (path, t, qoff)
    assert total > runs  # the runs did put messages before they exited
