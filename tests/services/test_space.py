"""Disk space: blocks reserved ahead of the writer (files keep their full
logical size), the next CommitLog file made in the background, warm-up, and a
really full disk (a small tmpfs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.presets import FAILPOINTS_MISSING, SMALL
from helpers.read_util import wait_dispatched
from rocketstore import MessageStore, StoreConfig

GIB = 1 << 30
DEFAULT_INDEX_FILE = 40 + 5_000_000 * 4 + 20_000_000 * 20
DEFAULT_CQ_FILE = 300_000 * 20


def _du(path: str | os.PathLike[str]) -> int:
    """Bytes of disk blocks the files under ``path`` use (``du``: st_blocks)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def _segments(store_path: str) -> list[str]:
    d = Path(store_path) / "commitlog"
    return sorted(p.name for p in d.iterdir() if len(p.name) == 20 and p.name.isdigit())


def _wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


# -- lean reservation ------------------------------------------------------------------


def test_default_geometry_store_with_one_message_uses_little_disk(store_path: str) -> None:
    """1 GiB CommitLog segments and a 420 MB index file keep their logical
    size (a RocketMQ broker opens them), but only a chunk of each is on disk."""
    cfg = StoreConfig(store_path=store_path)
    with MessageStore(cfg) as store:
        r = store.put("T", b"hello", keys=["k1"])
        assert r.ok
        store.flush()
        used_open = _du(store_path)
    used_closed = _du(store_path)
    assert os.path.getsize(Path(store_path) / "commitlog" / ("0" * 20)) == GIB
    index = list((Path(store_path) / "index").iterdir())
    assert [os.path.getsize(p) for p in index] == [DEFAULT_INDEX_FILE]
    cq = Path(store_path) / "consumequeue" / "T" / "0" / ("0" * 20)
    assert os.path.getsize(cq) == DEFAULT_CQ_FILE
    assert used_open <= 200_000_000, used_open
    assert used_closed <= 200_000_000, used_closed
    with MessageStore(cfg) as store:
        # A reserved, never written chunk is not mistaken for a torn tail.
        assert store.recovery_report is not None
        assert store.recovery_report.bytes_truncated == 0
        g = store.get_message("g", "T", 0, 0, 32)
        assert [m.body for m in g.messages] == [b"hello"]
        assert [m.body for m in store.query_message("T", "k1")] == [b"hello"]


def _data_files(store_path: str) -> dict[str, tuple[int, int, int, bytes]]:
    """Size, mtime, blocks and the first MiB of every CommitLog, queue and
    index file."""
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for root, _dirs, files in os.walk(Path(store_path) / sub):
            for name in files:
                p = os.path.join(root, name)
                st = os.stat(p)
                with open(p, "rb") as f:
                    head = f.read(1 << 20)
                out[p] = (st.st_size, st.st_mtime_ns, st.st_blocks, head)
    return out


def test_clean_reopen_of_a_one_message_default_store_writes_nothing(store_path: str) -> None:
    """After a clean stop the reserved, never written part of a 1 GiB
    segment is neither zeroed again nor reported as truncated: reopening
    changes no CommitLog, queue or index file (size, mtime, blocks, bytes)."""
    cfg = StoreConfig(store_path=store_path)
    with MessageStore(cfg) as store:
        assert store.put("T", b"hello", keys=["k1"]).ok
    before = _data_files(store_path)
    assert any(size == GIB for size, *_ in before.values())
    time.sleep(0.05)  # a rewrite would show as a later mtime
    for _ in range(2):
        with MessageStore(cfg) as store:
            rep = store.recovery_report
            assert rep is not None and rep.mode == "normal", rep
            assert rep.bytes_truncated == 0, rep
            assert rep.redispatched_records == 0, rep
            # Background threads (the prefaulter, the allocator) run meanwhile:
            # none may reserve or touch the reopened file before a put does.
            time.sleep(0.5)
            assert _data_files(store_path) == before
            g = store.get_message("g", "T", 0, 0, 32)
            assert [m.body for m in g.messages] == [b"hello"]
        assert _data_files(store_path) == before


def test_thousand_queue_ids_with_one_message_each_stay_small_and_visible(
    store_path: str,
) -> None:
    cfg = StoreConfig(store_path=store_path)
    n = 1000
    with MessageStore(cfg) as store:
        for q in range(n):
            assert store.put("T", b"m%d" % q, q).ok
        # How soon they are visible is measured by a benchmark; here: all are.
        wait_dispatched(store, timeout=60)
        for q in range(n):
            g = store.get_message("g", "T", q, 0, 32)
            assert [m.body for m in g.messages] == [b"m%d" % q], q
        used = _du(store_path)
    assert used <= 1_000_000_000, used
    assert _du(store_path) <= 1_000_000_000
    with MessageStore(cfg) as store:
        for q in range(0, n, 97):
            g = store.get_message("g", "T", q, 0, 32)
            assert [m.body for m in g.messages] == [b"m%d" % q], q


TEN_THOUSAND_QUEUES = """
import resource, sys, time
from rocketstore import MessageStore, StoreConfig

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
path, n = sys.argv[1], int(sys.argv[2])
# Small consume-queue files (1,000 entries): the descriptors are the point,
# not 10,000 default files of 6 MB each (60 GB reserved, minutes of disk work).
cfg = StoreConfig(store_path=path, mapped_file_size_consume_queue=20 * 1000)
with MessageStore(cfg) as store:
    for q in range(n):
        r = store.put("T", b"m%d" % q, q)
        assert r.ok, (q, r)
    deadline = time.time() + 300
    while store.dispatch_behind_bytes() > 0 and time.time() < deadline:
        time.sleep(0.01)
    for q in range(n):
        g = store.get_message("g", "T", q, 0, 4)
        assert [m.body for m in g.messages] == [b"m%d" % q], (q, g)
with MessageStore(cfg) as store:
    for q in range(n):
        g = store.get_message("g", "T", q, 0, 4)
        assert [m.body for m in g.messages] == [b"m%d" % q], (q, g)
    assert store.put("T", b"after", n - 1).ok
print("ok", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


# 10,000 queue files made, mapped, recovered: tens of seconds on a busy
# machine, so the per-test timeout is the subprocess's own.
@pytest.mark.timeout(960)
def test_ten_thousand_queue_ids_work_under_a_1024_open_files_limit(store_path: str) -> None:
    """A mapped file keeps no descriptor open: 10,000 queues (each with a
    mapped file) fit under a soft limit of 1,024 open files."""
    p = subprocess.run(
        [sys.executable, "-c", TEN_THOUSAND_QUEUES, store_path, "10000"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    assert p.stdout.split() == ["ok", "1024"]


# -- preallocation ---------------------------------------------------------------------


def test_next_commitlog_file_is_made_ahead_and_an_unused_one_removed_on_close(
    store_path: str,
) -> None:
    seg = SMALL["mapped_file_size_commit_log"]
    # Files are made ahead with warm-up (see python/rocketstore/store.py).
    cfg = StoreConfig(store_path=store_path, warm_mapped_file_enable=True, **SMALL)
    store = MessageStore(cfg).start()
    try:
        assert store.put("T", b"first").ok
        # The file after the current one appears without any put asking.
        assert _wait_for(lambda: len(_segments(store_path)) == 2), _segments(store_path)
        assert _segments(store_path)[1] == f"{seg:020d}"
        assert os.path.getsize(Path(store_path) / "commitlog" / f"{seg:020d}") == seg
        # Rolling into it: the one after is made next.
        while store.max_phy_offset < seg:
            assert store.put("T", b"x" * 1000).ok
        assert _wait_for(lambda: len(_segments(store_path)) == 3), _segments(store_path)
        written_end = store.max_phy_offset
    finally:
        store.shutdown()
    # The unused third file is gone; the written ones stay.
    assert _segments(store_path) == [f"{0:020d}", f"{seg:020d}"]
    with MessageStore(cfg) as store:
        assert store.max_phy_offset == written_end
        assert store.get_message("g", "T", 0, 0, 1).messages[0].body == b"first"


KILLED_WITH_A_PREALLOCATED_FILE = """
import json, os, signal, sys, time
from rocketstore import MessageStore, StoreConfig

path, seg = sys.argv[1], int(sys.argv[2])
cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=seg,
                  mapped_file_size_consume_queue=20 * 500, max_hash_slot_num=100,
                  max_index_num=2000, warm_mapped_file_enable=True)
store = MessageStore(cfg).start()
acked = []
i = 0
while store.max_phy_offset < seg + seg // 2:
    r = store.put("T", b"body %d" % i * 20)
    assert r.ok
    acked.append([r.queue_offset, i])
    i += 1
store.flush()
nxt = os.path.join(path, "commitlog", "%020d" % (2 * seg))
deadline = time.time() + 30
while not os.path.exists(nxt) or os.path.getsize(nxt) != seg:
    assert time.time() < deadline, "no file was made ahead"
    time.sleep(0.01)
with open(os.path.join(path, "acked.json"), "w") as f:
    json.dump({"acked": acked, "end": store.max_phy_offset}, f)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("newest", ["as_made", "short"])
def test_recovery_after_sigkill_ignores_a_preallocated_never_written_file(
    store_path: str, newest: str
) -> None:
    seg = SMALL["mapped_file_size_commit_log"]
    p = subprocess.run(
        [sys.executable, "-c", KILLED_WITH_A_PREALLOCATED_FILE, store_path, str(seg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
    state = json.loads((Path(store_path) / "acked.json").read_text())
    made_ahead = Path(store_path) / "commitlog" / f"{2 * seg:020d}"
    assert made_ahead.exists()
    if newest == "short":
        # A crash while the allocator was making it.
        os.truncate(made_ahead, 0)
    cfg = StoreConfig(
        store_path=store_path,
        mapped_file_size_commit_log=seg,
        mapped_file_size_consume_queue=20 * 500,
        max_hash_slot_num=100,
        max_index_num=2000,
        warm_mapped_file_enable=True,
    )
    with MessageStore(cfg) as store:
        assert store.recovery_report is not None
        assert store.recovery_report.mode == "abnormal"
        assert store.max_phy_offset == state["end"]
        for qoff, i in state["acked"]:
            g = store.get_message("g", "T", 0, qoff, 1)
            assert [m.body for m in g.messages] == [b"body %d" % i * 20], qoff
        # New messages follow the old ones, not the never-written file.
        r = store.put("T", b"after")
        assert r.ok and r.wrote_offset == state["end"]
        assert r.queue_offset == len(state["acked"])
    # A clean stop leaves no file past the last one written.
    assert _segments(store_path) == [f"{0:020d}", f"{seg:020d}"]


# -- warm-up ---------------------------------------------------------------------------


def test_warm_up_writes_and_reserves_whole_files(store_path: str) -> None:
    seg = SMALL["mapped_file_size_commit_log"]
    cfg = StoreConfig(store_path=store_path, warm_mapped_file_enable=True, **SMALL)
    with MessageStore(cfg) as store:
        bodies = []
        while store.max_phy_offset < 3 * seg:
            bodies.append(b"w%d" % len(bodies) * 50)
            assert store.put("T", bodies[-1]).ok
        assert _wait_for(lambda: len(_segments(store_path)) == 5)

        def blocks(name: str) -> int:
            return os.stat(Path(store_path) / "commitlog" / name).st_blocks * 512

        # The file made ahead appears before the allocator has warmed it:
        # wait for the warm-up, then every file holds its whole size.
        assert _wait_for(lambda: all(blocks(n) >= seg for n in _segments(store_path))), {
            n: blocks(n) for n in _segments(store_path)
        }
        g = store.get_message("g", "T", 0, 0, len(bodies))
        got = [m.body for m in g.messages]
        assert got == bodies[: len(got)] and got


MLOCK_FAILS = """
import errno, logging, sys
from rocketstore import MessageStore, StoreConfig, _native

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="LOG %(levelname)s %(message)s")
assert _native._set_fail_point("mlock", errno.EAGAIN)
seg = 64 * 1024
cfg = StoreConfig(store_path=sys.argv[1], warm_mapped_file_enable=True,
                  mapped_file_size_commit_log=seg, mapped_file_size_consume_queue=20 * 500,
                  max_hash_slot_num=100, max_index_num=2000)
with MessageStore(cfg) as store:
    while store.max_phy_offset < 4 * seg:
        assert store.put("T", b"x" * 500).ok
    g = store.get_message("g", "T", 0, 0, 4)
    assert [m.body for m in g.messages] == [b"x" * 500] * 4
print("ok")
"""


def test_a_failed_mlock_is_logged_once_and_is_not_fatal(store_path: str) -> None:
    p = subprocess.run(
        [sys.executable, "-c", MLOCK_FAILS, store_path],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "_set_fail_point" in p.stderr and "AttributeError" in p.stderr:
        pytest.fail(FAILPOINTS_MISSING)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [line for line in p.stderr.splitlines() if "in memory for warm-up" in line]
    # Five files were warmed; one line says so.
    assert len(lines) == 1, p.stderr[-3000:]
    assert "RLIMIT_MEMLOCK" in lines[0]


# -- a really full disk ----------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs mounted for the test (skipped where mounting is not allowed)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        pytest.skip(
            "a real full disk needs a small tmpfs, and mounting one is not permitted "
            f"here: {p.stderr.strip() or p.returncode}"
        )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


FILL_THE_DISK = """
import json, logging, os, sys
from rocketstore import MessageStore, StoreConfig, PutStatus

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="LOG %(levelname)s %(message)s")
path, ballast, out = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=64 * 1024,
                  mapped_file_size_consume_queue=20 * 500, max_hash_slot_num=100,
                  max_index_num=2000)
store = MessageStore(cfg).start()
acked = {}
failed = 0
statuses = set()
i = 0
# Fill the disk: put until 2,000 puts in a row failed.
while failed < 2000:
    body = (b"%06d:" % i) * 150
    r = store.put("T", body, i % 3, check=False)
    if r.ok:
        acked[i] = [i % 3, r.queue_offset, r.wrote_offset]
        failed = 0
    else:
        statuses.add(r.status.name)
        failed += 1
    i += 1
    assert i < 1_000_000, "the disk never filled"
# Every message acknowledged so far reads back intact from the CommitLog.
for k, (qid, qoff, phy) in acked.items():
    m = store.look_message_by_offset(phy)
    assert m is not None and m.body == (b"%06d:" % int(k)) * 150, k
# Free space: puts resume.
os.remove(ballast)
resumed = 0
for j in range(200):
    body = (b"%06d:" % i) * 150
    r = store.put("T", body, i % 3, check=False)
    if r.ok:
        acked[i] = [i % 3, r.queue_offset, r.wrote_offset]
        resumed += 1
    i += 1
assert resumed > 0, "puts did not resume once space was freed"
store.shutdown()
with open(out, "w") as f:
    json.dump({"acked": acked, "statuses": sorted(statuses), "resumed": resumed}, f)
print("done")
"""


def test_full_disk_fails_puts_with_a_status_and_recovers_when_space_is_freed(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    store_path = small_tmpfs / "store"
    ballast = small_tmpfs / "ballast"
    # Space a later delete frees; the store fills the rest.
    with open(ballast, "wb") as f:
        f.write(b"\xff" * (1 << 20))
    out = tmp_path / "filled.json"
    p = subprocess.run(
        [sys.executable, "-c", FILL_THE_DISK, str(store_path), str(ballast), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    # Not killed by a signal (SIGBUS): the process ran to its end.
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["statuses"] and "PUT_OK" not in result["statuses"], result["statuses"]
    assert set(result["statuses"]) <= {"CREATE_MAPPED_FILE_FAILED", "SERVICE_NOT_AVAILABLE"}
    assert result["resumed"] > 0
    # A handful of log lines for thousands of failed puts.
    log_lines = [line for line in p.stderr.splitlines() if line.startswith("LOG ")]
    noisy = [line for line in log_lines if "WARNING" in line or "ERROR" in line]
    assert len(noisy) <= 20, noisy[:30]
    # The store reopens cleanly and holds every acknowledged message.
    cfg = StoreConfig(
        store_path=str(store_path),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 500,
        max_hash_slot_num=100,
        max_index_num=2000,
    )
    with MessageStore(cfg) as store:
        assert store.recovery_report is not None
        assert store.recovery_report.mode == "normal"
        for k, (qid, qoff, _phy) in result["acked"].items():
            g = store.get_message("g", "T", qid, qoff, 1)
            assert [m.body for m in g.messages] == [(b"%06d:" % int(k)) * 150], k
