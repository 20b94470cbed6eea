"""What reads in the writer's process see, and when; commits that last.

* Read-your-writes: once a put returned PUT_OK, every read API in the
  process finds the message — ASYNC_FLUSH, SYNC_FLUSH and the transient
  store pool (whose read commits the write buffer it needs).
* SYNC_FLUSH: no read serves a record before it is on disk, and consumers
  never run ahead of durable data (a stalled disk is simulated with the
  ``flush_hold`` fail point; a power loss by zeroing what was not flushed
  after a SIGKILL).
* Persisting committed offsets first makes the messages below them durable,
  in every flush mode; ``Consumer.commit()`` and the auto-commit of
  ``close()`` survive a SIGKILL right after them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.fault_fixtures import has_fail_points
from helpers.killed_child import run_then_kill
from helpers.paths import HELPERS
from helpers.presets import FAILPOINTS_MISSING, SMALL
from rocketstore import (
    FlushDiskType,
    GetStatus,
    Message,
    MessageExt,
    MessageStore,
    PutResult,
    PutStatus,
    StoreConfig,
)
from rocketstore.consumers.offsets import ConsumerOffsets

CHILD = HELPERS / "visibility_child.py"

MODES: dict[str, dict[str, Any]] = {
    "async": {},
    "sync": {"flush_disk_type": FlushDiskType.SYNC_FLUSH},
    # The commit service would take a minute: only reads commit.
    "transient": {
        "transient_store_pool_enable": True,
        "transient_store_pool_size": 2,
        "commit_interval_commit_log": 60_000,
        "commit_commit_log_thorough_interval": 60_000,
    },
}


def require_fail_points() -> None:
    """Fails (never skips) a test that needs the engine's fault-injection points."""
    if not has_fail_points():
        pytest.fail(FAILPOINTS_MISSING, pytrace=False)


def _end(r: PutResult) -> int:
    return r.wrote_offset + r.wrote_bytes


# -- read-your-writes --------------------------------------------------------------


def _read_apis(store: MessageStore, consumer: Any) -> dict[str, Callable[[PutResult, int], None]]:
    """Each check reads the message just put (``r``, key ``k-<i>``) one way."""

    def by_key(r: PutResult, i: int) -> None:
        [m] = store.query_message("orders", f"k-{i}")
        assert m.commit_log_offset == r.wrote_offset

    def by_offset(r: PutResult, i: int) -> None:
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == b"order %d" % i

    def by_id(r: PutResult, i: int) -> None:
        m = store.look_message_by_id(r.msg_id)
        assert m is not None and m.queue_offset == r.queue_offset

    def pull(r: PutResult, i: int) -> None:
        g = store.get_message("g", "orders", i % 2, r.queue_offset, 1)
        assert g.status is GetStatus.FOUND, g
        assert g.messages[0].body == b"order %d" % i

    def queue_end(r: PutResult, i: int) -> None:
        assert store.get_max_offset_in_queue("orders", i % 2) == r.queue_offset + 1

    def queue_unit(r: PutResult, i: int) -> None:
        q = i % 2
        assert store.get_commit_log_offset_in_queue("orders", q, r.queue_offset) == r.wrote_offset

    def store_time(r: PutResult, i: int) -> None:
        ts = store.get_message_store_timestamp("orders", i % 2, r.queue_offset)
        assert ts == r.store_timestamp

    def poll(r: PutResult, i: int) -> None:
        got = consumer.poll(timeout=0)
        assert [m.commit_log_offset for m in got] == [r.wrote_offset]

    return {f.__name__: f for f in (by_key, by_offset, by_id, pull, queue_end, queue_unit,
                                     store_time, poll)}


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_read_api_sees_a_put_as_soon_as_it_returns(
    mode: str, open_store: Callable[..., MessageStore]
) -> None:
    store = open_store(**SMALL, **MODES[mode])
    consumer = store.consumer("g", "orders", auto_commit=False)
    apis = _read_apis(store, consumer)
    names = sorted(apis)
    rounds = 8 if mode == "sync" else 30  # SYNC_FLUSH: one fsync per put
    for i in range(rounds * len(names)):
        r = store.put("orders", b"order %d" % i, queue_id=i % 2, keys=[f"k-{i}"])
        assert r.status is PutStatus.PUT_OK
        # Each API in turn is the first read after the put (the one that waits).
        first = names[i % len(names)]
        apis[first](r, i)
        for name in names:
            if name != first:
                apis[name](r, i)


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_consumer_sees_a_new_queue_as_soon_as_the_put_returns(
    mode: str, open_store: Callable[..., MessageStore]
) -> None:
    store = open_store(**SMALL, **MODES[mode])
    c = store.consumer("g", "fresh", auto_commit=False)
    for q in range(24):  # every put opens a queue the consumer does not know yet
        r = store.put("fresh", b"q%d" % q, queue_id=q)
        assert r.ok
        got = c.poll(timeout=0)
        assert [(m.queue_id, m.body) for m in got] == [(q, b"q%d" % q)]
        assert c.assignment() == list(range(q + 1))


def test_readme_first_example_works_every_time(tmp_path: Path) -> None:
    for n in range(20):
        cfg = StoreConfig(store_path=str(tmp_path / f"s{n}"), **SMALL)
        with MessageStore(cfg) as store:
            r = store.put("orders", b"order #42", queue_id=0, tags="paid", keys=["order-42"])
            assert r.status is PutStatus.PUT_OK
            store.put_messages([Message("orders", b"a"), Message("audit", b"b", queue_id=3)])
            g = store.get_message("group-a", "orders", 0, 0, 32, tags=["paid"])
            assert g.status is GetStatus.FOUND and len(g.messages) == 1
            [m] = store.query_message("orders", "order-42")
            assert m.body == b"order #42"
            assert store.look_message_by_id(r.msg_id) is not None


def test_reads_of_other_threads_see_acknowledged_puts(
    open_store: Callable[..., MessageStore],
) -> None:
    """A put acknowledged in one thread is visible to a read that another
    thread starts after it (the horizon is the process's, not the thread's)."""
    store = open_store(**SMALL)
    acked: list[PutResult] = []
    failures: list[int] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            n = len(acked)  # acknowledged before this read starts
            if n and store.look_message_by_offset(acked[n - 1].wrote_offset) is None:
                failures.append(n - 1)
            if n and not store.query_message("orders", f"k-{n - 1}"):
                failures.append(n - 1)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(3000):
            acked.append(store.put("orders", b"x", keys=[f"k-{i}"]))
    finally:
        done.set()
        t.join()
    assert failures == []


def test_the_fast_path_does_not_wait(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    store.put("t", b"x")
    store.get_message("g", "t", 0, 0)
    waits = store._n._visibility_stats.waits
    for _ in range(100):
        assert store.get_message("g", "t", 0, 0).status is GetStatus.FOUND
        assert store.look_message_by_offset(0) is not None
    assert store._n._visibility_stats.waits == waits  # nothing was pending: no wait


def test_reads_do_not_wait_once_dispatch_failed(
    opened: Callable[..., MessageStore], fail_points: Callable[[str, int], None]
) -> None:
    """A put acknowledged after dispatch broke can never become visible: the
    read serves what is visible at once instead of waiting (here a minute)."""
    import errno

    store = opened(sync_flush_timeout=60_000)
    assert store.put("t", b"visible").ok
    assert store.get_max_offset_in_queue("t", 0) == 1
    fail_points("cq_put", errno.EIO)
    r = store.put("t", b"stuck")
    assert r.ok
    g = store.get_message("g", "t", 0, 0, 32)
    assert [m.body for m in g.messages] == [b"visible"]
    stats = store._n._visibility_stats
    waits, timeouts, failed = stats.waits, stats.timeouts, stats.failed
    assert waits >= 1 and failed >= 1 and timeouts == 0
    assert not store.is_writeable  # dispatch failure poisons the store
    # The record itself is in the CommitLog (ASYNC_FLUSH: lookups by offset
    # are not bounded by dispatch).
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.body == b"stuck"
    fail_points("cq_put", 0)


def test_auto_commit_in_poll_on_a_real_store(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    for i in range(10):
        store.put("t", b"m%d" % i)
    c = store.consumer("g", "t", auto_commit_interval=0)
    assert len(c.poll(timeout=5.0, max_messages=4)) == 4
    assert store.query_offset("g", "t", 0) == 0  # nothing returned before the first poll
    assert len(c.poll(timeout=5.0, max_messages=4)) == 4
    assert store.query_offset("g", "t", 0) == 4  # what the first poll returned
    c.close()
    assert store.query_offset("g", "t", 0) == 8


# -- SYNC_FLUSH: only what is on disk ------------------------------------------------


@pytest.fixture
def hold() -> Iterator[Callable[[bool], None]]:
    """``hold(True)`` stalls the flush services (nothing reaches the disk).

    Request it after ``open_store``, so it is released before stores shut down.
    """
    from rocketstore import _native

    require_fail_points()

    def arm(on: bool) -> None:
        assert _native._set_fail_point("flush_hold", 1 if on else 0), "no flush_hold fail point"

    try:
        yield arm
    finally:
        _native._set_fail_point("flush_hold", 0)


def test_sync_flush_reads_never_serve_unflushed_records(
    open_store: Callable[..., MessageStore], store_path: str, hold: Callable[[bool], None]
) -> None:
    store = open_store(**SMALL, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200)
    for i in range(3):
        assert store.put("t", b"durable %d" % i, keys=[f"k-{i}"]).ok
    c = store.consumer("g", "t", auto_commit=False)
    assert len(c.poll(timeout=5.0)) == 3
    c.commit()
    hold(True)
    flushed = store.flushed_offset
    r = store.put("t", b"not on disk", keys=["k-late"], properties={"WAIT": "false"})
    assert r.status is PutStatus.PUT_OK and store.flushed_offset == flushed < _end(r)
    # No read API serves it: it is not on disk.
    assert c.poll(timeout=0.3) == []
    assert store.look_message_by_offset(r.wrote_offset) is None
    assert store.look_message_by_id(r.msg_id) is None
    assert store.query_message("t", "k-late") == []
    assert store.get_max_offset_in_queue("t", 0) == 3
    g = store.get_message("g", "t", 0, 3)
    assert g.status is GetStatus.OFFSET_OVERFLOW_ONE and g.messages == []
    # The read gave up waiting for the stalled disk (it does not fail).
    assert store._n._visibility_stats.timeouts >= 1
    # The persisted offset stays at durable data.
    c.commit()
    offsets = ConsumerOffsets.load(Path(store_path) / "config" / "consumerOffset.json")
    assert offsets.query("g", "t", 0) == 3
    # Once the disk takes it, every read sees it.
    hold(False)
    got = c.poll(timeout=5.0)
    assert [m.body for m in got] == [b"not on disk"]
    assert store.flushed_offset >= _end(r)
    [m] = store.query_message("t", "k-late")
    assert m.commit_log_offset == r.wrote_offset


def test_dispatch_follows_the_flush_under_sync_flush(
    open_store: Callable[..., MessageStore], hold: Callable[[bool], None]
) -> None:
    """The queues themselves (not only what reads return) hold no unit of an
    unflushed record: nothing can persist or hand out an offset past it."""
    store = open_store(**SMALL, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200)
    assert store.put("t", b"a").ok
    assert store.get_max_offset_in_queue("t", 0) == 1  # flushed and dispatched
    hold(True)
    late = [store.put("t", b"b%d" % i, properties={"WAIT": "false"}) for i in range(5)]
    assert all(r.ok for r in late)
    assert store.dispatch_behind_bytes() == sum(r.wrote_bytes for r in late)
    assert store.queue_offset_table()[("t", 0)] == 6  # the put path counts them
    assert store.get_max_offset_in_queue("t", 0) == 1  # readers do not
    hold(False)
    g = store.get_message("g", "t", 0, 1, 32)
    assert [m.body for m in g.messages] == [b"b%d" % i for i in range(5)]


_EXIT_CHILD = """
import atexit, sys, threading, time
def release_the_disk():  # runs after rocketstore's exit hook: the store then shuts down
    _native._set_fail_point("flush_hold", 0)
atexit.register(release_the_disk)
from rocketstore import FlushDiskType, MessageStore, StoreConfig, _native
store = MessageStore(StoreConfig(store_path=sys.argv[1], flush_disk_type=FlushDiskType.SYNC_FLUSH,
                                 sync_flush_timeout=600_000, mapped_file_size_commit_log=65536,
                                 mapped_file_size_consume_queue=10000, max_hash_slot_num=100,
                                 max_index_num=2000)).start()
assert store.put("t", b"a").ok
assert _native._set_fail_point("flush_hold", 1)
assert store.put("t", b"b", properties={"WAIT": "false"}).ok
threading.Thread(target=lambda: store.get_message("g", "t", 0, 0), daemon=True).start()
while store._n._visibility_stats.waits == 0:  # until the reader waits for the stalled disk
    time.sleep(0.01)
print("WAITING", flush=True)
"""


def test_interpreter_exit_with_a_reader_waiting_for_visibility(store_path: str) -> None:
    """A daemon thread waiting (up to ten minutes) for an acknowledged put
    to become visible neither crashes nor holds up interpreter exit."""
    require_fail_points()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _EXIT_CHILD, store_path], env=env,
                         capture_output=True, timeout=300)
    assert out.stdout.decode().split() == ["WAITING"], out.stderr.decode()
    assert out.returncode == 0, out.stderr.decode()
    assert b"FATAL" not in out.stderr, out.stderr.decode()


# -- persisting offsets flushes first (every flush mode) -------------------------------


NO_BACKGROUND_FLUSH = {
    "flush_interval_commit_log": 60_000,
    "flush_commit_log_thorough_interval": 60_000,
}


def test_commit_flushes_the_commitlog_up_to_the_committed_messages(
    open_store: Callable[..., MessageStore], store_path: str
) -> None:
    store = open_store(**SMALL, **NO_BACKGROUND_FLUSH)
    acked = [store.put("t", b"m%d" % i) for i in range(5)]
    c = store.consumer("g", "t", auto_commit=False)
    assert len(c.poll(timeout=5.0)) == 5
    assert store.flushed_offset < _end(acked[-1])  # in the page cache only
    c.commit()
    assert store.flushed_offset >= _end(acked[-1])
    offsets = ConsumerOffsets.load(Path(store_path) / "config" / "consumerOffset.json")
    assert offsets.query("g", "t", 0) == 5


def test_offsets_above_unflushed_data_are_not_persisted(
    open_store: Callable[..., MessageStore], store_path: str, hold: Callable[[bool], None]
) -> None:
    """ASYNC_FLUSH with a stalled disk: the commit fails, the file keeps the
    last durable offsets."""
    store = open_store(**SMALL, **NO_BACKGROUND_FLUSH)
    path = Path(store_path) / "config" / "consumerOffset.json"
    store.put("t", b"first")
    c = store.consumer("g", "t", auto_commit=False)
    assert len(c.poll(timeout=5.0)) == 1
    c.commit()
    assert ConsumerOffsets.load(path).query("g", "t", 0) == 1
    hold(True)
    store.put("t", b"second")
    assert len(c.poll(timeout=5.0)) == 1
    with pytest.raises(OSError, match="flush"):
        c.commit()
    with pytest.raises(OSError, match="flush"):
        store.persist_offsets()
    assert ConsumerOffsets.load(path).query("g", "t", 0) == 1
    hold(False)
    c.commit()
    assert ConsumerOffsets.load(path).query("g", "t", 0) == 2


def test_concurrent_commits_share_writes(
    open_store: Callable[..., MessageStore], store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight consumers commit at once while a write (an append to the
    offsets journal, docs/format.md §13.3) is under way: the commits made
    meanwhile share the next write (at most two, not eight)."""
    import rocketstore.consumers.store_commits as commits_module
    from rocketstore.consumers.offset_journal import OffsetLog

    monkeypatch.setattr(commits_module, "OFFSETS_PERSIST_INTERVAL", 3600.0)
    store = open_store(**SMALL)
    for q in range(2):
        store.put("t", b"x", queue_id=q)
    consumers = [store.consumer(f"g{k}", "t", auto_commit=False) for k in range(8)]
    for c in consumers:
        assert len(c.poll(timeout=5.0, max_messages=2)) == 2
    all_in_memory = threading.Event()
    commits = 0
    writes = 0
    lock = threading.Lock()
    real_commit = ConsumerOffsets.commit_many
    real_write = OffsetLog.append

    def counting_commit(self: ConsumerOffsets, *args: Any, **kw: Any) -> None:
        nonlocal commits
        real_commit(self, *args, **kw)
        with lock:
            commits += 1
            if commits == len(consumers):  # one call per consumer, both queues
                all_in_memory.set()

    def slow_first_write(self: OffsetLog, ops: Any) -> None:
        nonlocal writes
        if not ops:
            return
        with lock:
            writes += 1
            first = writes == 1
        if first:  # everyone else commits while this write is under way
            assert all_in_memory.wait(30)
        real_write(self, ops)

    monkeypatch.setattr(ConsumerOffsets, "commit_many", counting_commit)
    monkeypatch.setattr(OffsetLog, "append", slow_first_write)
    threads = [threading.Thread(target=c.commit) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= writes <= 2  # not one per commit
    offsets = ConsumerOffsets.load(Path(store_path) / "config" / "consumerOffset.json")
    assert all(offsets.query(f"g{k}", "t", q) == 1 for k in range(8) for q in range(2))


# -- SIGKILL --------------------------------------------------------------------------


def _run_child(store_path: str, mode: str, tmp_path: Path) -> str:
    """Runs the child until it prints DONE, then SIGKILLs it; returns the DONE line."""
    err_path = tmp_path / f"child-{mode}.err"
    run = run_then_kill(
        [CHILD, store_path, mode],
        stderr_path=err_path,
        marker=b"DONE",
        marker_timeout=600,  # bounded by the test's timeout
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    line = run.first_line
    assert line.startswith("DONE"), f"child failed:\n{run.stderr}"
    assert run.returncode == -signal.SIGKILL
    return line


@pytest.mark.parametrize("mode", ["commit", "close"])
def test_a_crash_right_after_commit_redelivers_nothing(
    mode: str, store_path: str, tmp_path: Path
) -> None:
    """``commit()`` — or ``close()`` with auto-commit — then SIGKILL."""
    _run_child(store_path, mode, tmp_path)
    cfg = StoreConfig(store_path=store_path, **SMALL)
    with MessageStore(cfg) as store:
        assert store.recovery_report is not None
        assert store.recovery_report.mode == "abnormal"
        assert [store.query_offset("g", "V", q) for q in range(4)] == [25] * 4
        c = store.consumer("g", "V")
        assert c.poll(timeout=0.2) == []


def _zero_commitlog_from(store_path: str, offset: int) -> None:
    """A power-loss image: nothing past ``offset`` reached the disk."""
    seg = SMALL["mapped_file_size_commit_log"]
    for f in sorted((Path(store_path) / "commitlog").iterdir()):
        start = int(f.name)
        cut = max(offset - start, 0)
        if cut < seg:
            with open(f, "r+b") as fh:
                fh.seek(cut)
                fh.write(b"\0" * (seg - cut))
                fh.flush()
                os.fsync(fh.fileno())


def _queue(store: MessageStore, q: int, start: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    off = start
    while True:
        g = store.get_message("check", "V", q, off, 32)
        out += g.messages
        if g.next_begin_offset == off:
            return out
        off = g.next_begin_offset


def test_sync_flush_consumers_never_run_ahead_of_durable_data(
    store_path: str, tmp_path: Path
) -> None:
    """SYNC_FLUSH writer with a consumer in its process, SIGKILLed, then a
    power loss: the consumer never received an unflushed message, and no
    persisted offset points past the recovered queue ends, so messages
    written after the restart all reach the group."""
    require_fail_points()  # the child stalls the disk with one
    line = _run_child(store_path, "sync", tmp_path)
    report = json.loads(line[len("DONE "):])
    assert report["phase1_received"] == 2000
    assert report["violation_count"] == 0, report["violations"]
    assert report["late_acked"] == 20
    assert report["late_received"] == 0, "a consumer received messages that were not on disk"

    _zero_commitlog_from(store_path, report["flushed"])
    cfg = StoreConfig(store_path=store_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, **SMALL)
    with MessageStore(cfg) as store:
        ends = [store.get_max_offset_in_queue("V", q) for q in range(4)]
        assert ends == [500] * 4  # the 20 late messages were lost with the power
        committed = [store.query_offset("g", "V", q) for q in range(4)]
        assert all(0 <= c <= e for c, e in zip(committed, ends, strict=True)), (committed, ends)
        assert committed == ends  # everything durable had been consumed and committed
        for i in range(40):
            assert store.put("V", b"after %d" % i, i % 4).ok
        c = store.consumer("g", "V", auto_commit=False)
        got: list[MessageExt] = []
        while len(got) < 40:
            batch = c.poll(timeout=5.0)
            assert batch, f"the group received {len(got)} of 40 new messages"
            got += batch
        assert sorted(m.body for m in got) == sorted(b"after %d" % i for i in range(40))
        for q in range(4):
            assert len(_queue(store, q, 0)) == 510
