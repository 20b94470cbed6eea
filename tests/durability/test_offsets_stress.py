"""Consumer offsets under attack from several processes (``docs/format.md``, §13.1).

Processes commit to ``config/consumerOffset.json`` in tight loops, each
commit written before the process says so; some are killed with SIGKILL in
the middle of a write. The file must stay a valid offset table holding
every commit any process reported, its own and the others'.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.offsets_child import CFG
from helpers.paths import HELPERS
from helpers.store_util import offset_table
from rocketstore import MessageStore, StoreClosedError, StoreConfig

CHILD = HELPERS / "offsets_loop_child.py"


def _spawn(store_path: str, role: str, group: str, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(CHILD), store_path, role, group, str(count)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"child did not start: {line!r} {err}")
    return proc


def _go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def _last_commit(proc: subprocess.Popen[str], stop_after: int | None = None) -> int:
    """The last ``c <i>`` the child printed (reading until ``done``, EOF or ``stop_after``)."""
    assert proc.stdout is not None
    last = 0
    for line in proc.stdout:
        if line.startswith("c "):
            last = int(line.split()[1])
            if stop_after is not None and last >= stop_after:
                break
        elif line.startswith("done"):
            break
    return last


def _finish(proc: subprocess.Popen[str], kill: bool) -> None:
    if kill and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()
    err = proc.stderr.read() if proc.stderr else ""
    code = proc.wait(timeout=60)
    if proc.stderr is not None:
        proc.stderr.close()
    if not kill:
        assert code == 0, err


def _put(store_path: str, per_queue: int) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as store:
        for i in range(per_queue * 4):
            assert store.put("T", b"m%d" % i, i % 4).ok


def test_reader_killed_mid_commit_loop_keeps_every_reported_commit(store_path: str) -> None:
    _put(store_path, 400)
    rng = random.Random(7)
    with MessageStore(StoreConfig(store_path=store_path, **CFG), read_only=True) as other:
        other.commit_offsets("other", "T", {2: 5, 3: 6})
        other.persist_offsets()
    for _ in range(4):
        proc = _spawn(store_path, "reader", "loop", 0)
        _go(proc)
        last = _last_commit(proc, stop_after=rng.randrange(5, 60))
        _finish(proc, kill=True)
        table = offset_table(store_path)  # parses: never a torn file
        assert table["T@loop"][0] >= last and table["T@loop"][1] >= last
        assert table["T@other"] == {2: 5, 3: 6}


def test_two_readers_and_the_writer_committing_at_once_lose_no_entry(store_path: str) -> None:
    _put(store_path, 300)
    count = 150
    writer = _spawn(store_path, "writer", "w", count)
    readers = [_spawn(store_path, "reader", g, count) for g in ("a", "b")]
    procs = [writer, *readers]
    for proc in procs:
        _go(proc)
    lasts = [_last_commit(proc) for proc in procs]
    assert lasts == [count] * 3
    for proc in procs:
        _finish(proc, kill=False)
    table = offset_table(store_path)
    for group in ("w", "a", "b"):
        assert table[f"T@{group}"] == {0: count, 1: count}, (group, table)


READ_ONLY_MOUNT = r"""
import errno, json, sys, warnings
from rocketstore import MessageStore, ReadOnlyStoreError, StoreClosedError, StoreConfig
cfg = StoreConfig(store_path=sys.argv[1], **json.loads(sys.argv[2]))
out = {}
with MessageStore(cfg, read_only=True) as ro:
    out["groups"] = [g.group for g in ro.consumer_groups()]
    try:
        ro.consumer("g", "T")
    except OSError as e:
        out["open"] = e.errno
    ro.commit_offset("h", "T", 0, 1)
    try:
        ro.persist_offsets()
    except OSError as e:
        out["persist"] = e.errno
    try:
        ro.shutdown()  # still pending: the close raises the same error, and closes
    except OSError as e:
        out["shutdown"] = e.errno
    try:
        ro.get_max_offset_in_queue("T", 0)
    except StoreClosedError:
        out["closed"] = True
with MessageStore(cfg, read_only=True, no_write=True) as nw:
    c = nw.consumer("a", "T", exclusive=True)  # resumes at the committed offsets
    out["polled"] = len(c.poll(timeout=1, max_messages=100))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c.commit()
    c.close()
    try:
        nw.reset_consumer_group("g", "latest")
    except ReadOnlyStoreError:
        out["reset"] = "refused"
print(json.dumps(out))
"""


def test_read_only_mount_gives_an_os_error_and_no_write_consumes(
        store_path: str, tmp_path: Path) -> None:
    """On a read-only mount (a bind mount in a user namespace) a reader's
    consumer open and offset write fail with the ``OSError`` (EROFS);
    ``no_write=True`` consumes there."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespaces (unshare -rm) to make a read-only mount")
    _put(store_path, 10)
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as w, w.consumer("a", "T") as c:
        assert len(c.poll(timeout=1, max_messages=3)) == 3
    script = tmp_path / "ro_mount.py"
    script.write_text(READ_ONLY_MOUNT)
    cmd = (f"mount --bind {store_path} {store_path} && "
           f"mount -o remount,bind,ro {store_path} && "
           f"exec {sys.executable} -W ignore::UserWarning {script} {store_path} "
           f"'{json.dumps(CFG)}'")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", cmd],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0 and "mount" in r.stderr and "Traceback" not in r.stderr:
        pytest.skip(f"cannot make a read-only bind mount: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out == {"groups": ["a"], "open": errno.EROFS, "persist": errno.EROFS,
                   "shutdown": errno.EROFS, "closed": True, "polled": 37, "reset": "refused"}


def test_shutdown_releases_the_group_lock_of_a_consumer_left_open(store_path: str) -> None:
    """A consumer still open when its store shuts down holds its group no
    more: a new store (this process or another) gets the group, and the old
    consumer, even on the same store object started again, raises
    ``StoreClosedError`` and writes nothing."""
    _put(store_path, 5)
    cfg = StoreConfig(store_path=store_path, **CFG)
    store = MessageStore(cfg).start()
    old = store.consumer("g", "T", exclusive=True)  # auto_commit: its close would commit
    assert len(old.poll(timeout=1, max_messages=3)) == 3
    store.shutdown()
    with MessageStore(cfg, read_only=True) as other:
        (g,) = [g for g in other.consumer_groups() if g.group == "g"] or [None]
        assert g is None or not g.active
        with other.consumer("g", "T", auto_commit=False, exclusive=True) as c:
            c.seek(0, 4)
            c.commit()
    store.start()  # the same object again
    try:
        with pytest.raises(StoreClosedError):
            old.poll(timeout=0)
        with pytest.raises(StoreClosedError):
            old.commit()
        old.close()  # no error, and nothing committed
        assert old.closed
        assert offset_table(store_path)["T@g"] == {0: 4, 1: 0, 2: 0, 3: 0}  # the other's commit
        with store.consumer("g", "T", exclusive=True) as c:  # the group is free
            assert c.position(0) == 4
    finally:
        store.shutdown()


FORK_AFTER_CONSUMER = r"""
import json, os, sys, warnings
warnings.simplefilter("ignore")
from rocketstore import ConsumerGroupBusyError, MessageStore, StoreClosedError, StoreConfig
cfg = StoreConfig(store_path=sys.argv[1], **json.loads(sys.argv[2]))
store = MessageStore(cfg, read_only=True).start()
c = store.consumer("g", "T", auto_commit=True, exclusive=True)
assert len(c.poll(timeout=1, max_messages=2)) == 2
c.commit()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    out = []
    for name, step in (("poll", lambda: c.poll(timeout=0)), ("commit", lambda: c.commit({0: 9}))):
        try:
            step()
            out.append(name + " worked")
        except StoreClosedError:
            out.append(name + " closed")
    c.close()  # writes nothing in the child
    other = MessageStore(cfg, read_only=True).start()
    try:
        other.consumer("g", "T", exclusive=True)
        out.append("group taken")
    except ConsumerGroupBusyError:
        out.append("group busy")
    other.shutdown()
    os.write(w, json.dumps(out).encode())
    os.close(w)
    sys.stdin.read()  # lives until the test closes stdin
    os._exit(0)
os.close(w)
with os.fdopen(r) as f:
    print(f.read(), flush=True)
c.close()  # the child still lives
store.shutdown()
print(pid, flush=True)
sys.stdin.read()
os.waitpid(pid, 0)
"""


def test_fork_after_opening_a_consumer_neither_steals_nor_keeps_the_group(
        store_path: str, tmp_path: Path) -> None:
    """A child forked while a reader's consumer is open cannot use it (its
    polls and commits raise, its close writes nothing), cannot take the
    group while the parent holds it, and does not keep the group held once
    the parent closes the consumer."""
    _put(store_path, 5)
    script = tmp_path / "fork.py"
    script.write_text(FORK_AFTER_CONSUMER)
    proc = subprocess.Popen([sys.executable, str(script), store_path, json.dumps(CFG)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        child_saw = proc.stdout.readline()
        assert json.loads(child_saw) == ["poll closed", "commit closed", "group busy"]
        child_pid = int(proc.stdout.readline())
        os.kill(child_pid, 0)  # the child is alive
        with MessageStore(StoreConfig(store_path=store_path, **CFG), read_only=True) as ro:
            with ro.consumer("g", "T", auto_commit=False, exclusive=True) as c:  # free again
                assert sum(c.positions().values()) == 2  # the parent's, not the child's 9
    finally:
        _finish(proc, kill=False)


def test_writer_killed_mid_commit_loop_while_a_reader_commits(store_path: str) -> None:
    """SIGKILL of the writer's process in its commit loop, a reader
    committing all along: the file parses and holds both processes' last
    reported commits, also after the writer's next recovery."""
    _put(store_path, 300)
    rng = random.Random(3)
    for _ in range(3):
        writer = _spawn(store_path, "writer", "w", 0)
        reader = _spawn(store_path, "reader", "r", 0)
        _go(writer)
        _go(reader)
        w_last = _last_commit(writer, stop_after=rng.randrange(5, 100))
        _finish(writer, kill=True)
        r_last = _last_commit(reader, stop_after=rng.randrange(110, 200))
        _finish(reader, kill=True)
        table = offset_table(store_path)
        assert min(table["T@w"].values()) >= w_last and min(table["T@r"].values()) >= r_last
        with MessageStore(StoreConfig(store_path=store_path, **CFG)) as store:  # recovery
            assert store.query_offset("w", "T", 0) >= w_last
            assert store.query_offset("r", "T", 0) >= r_last
        table = offset_table(store_path)
        assert min(table["T@w"].values()) >= w_last and min(table["T@r"].values()) >= r_last
