"""``MessageStore.stats()``: counts, rates, lags, disk and queue ends, in
the writer's process and from a read-only store in another process."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rocketstore import (
    Message,
    MessageStore,
    QueueStats,
    StoreClosedError,
    StoreConfig,
    StoreError,
    StoreStats,
)

SMALL = {"mapped_file_size_commit_log": 64 * 1024, "max_hash_slot_num": 64,
         "max_index_num": 256}

#: Fields only the writer's process has: None from a read-only store.
WRITER_ONLY = ("put_messages_total", "put_bytes_total", "flushed_offset", "flush_behind_bytes")


def _wait(pred: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def test_counts_after_known_puts_and_gets(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    before = store.stats()
    assert (before.put_messages_total, before.put_bytes_total) == (0, 0)
    assert (before.get_calls_total, before.get_misses_total, before.get_messages_total) == (0, 0, 0)
    wrote = [store.put("a", b"x" * i, queue_id=i % 2).wrote_bytes for i in range(1, 8)]
    wrote.append(store.put_message(Message("a", b"m", tags="t")).wrote_bytes)
    wrote += [r.wrote_bytes for r in store.put_messages([Message("b", b"1"), Message("b", b"22")])]
    batch = store.put_batch("c", [b"p", b"qq", b"rrr"], queue_id=1)
    assert batch.count == 3
    wrote.append(batch.wrote_bytes)
    try:  # refused: nothing stored, nothing counted (a status or an exception)
        refused = store.put("bad topic!", b"x")
        assert not refused.ok
    except (ValueError, StoreError):
        pass
    got = store.get_message("g", "a", 0, 0)           # 4 messages in queue 0
    store.get_message("g", "a", 0, 4)                 # at the end: none
    store.get_message("g", "c", 1, 1, max_msg_nums=1)  # one
    s = store.stats()
    assert isinstance(s, StoreStats)
    assert s.put_messages_total == 7 + 1 + 2 + 3
    assert s.put_bytes_total == sum(wrote) == s.max_phy_offset
    assert s.get_calls_total == 3
    assert s.get_misses_total == 1
    assert s.get_messages_total == len(got.messages) + 1 == 5
    assert s.queues == (QueueStats("a", 0, 0, 4), QueueStats("a", 1, 0, 4),
                        QueueStats("b", 0, 0, 2), QueueStats("c", 1, 0, 3))
    assert s.queue_messages_total == 13 == s.queue_end_total
    assert not s.read_only and s.writer_running is True and s.writeable
    assert s.dispatch_running and s.running_flags == ()
    assert s.min_phy_offset == 0


def test_arrow_pulls_are_counted(open_store: Callable[..., MessageStore]) -> None:
    pytest.importorskip("pyarrow")
    store = open_store(**SMALL)
    store.put_batch("t", [b"a", b"b", b"c"])
    r = store.get_arrow("t", 0, 0, 2)
    assert r.batch.num_rows == 2
    store.get_arrow("t", 0, 3, 2)  # at the end: none
    s = store.stats()
    assert (s.get_calls_total, s.get_misses_total, s.get_messages_total) == (2, 1, 2)


def test_counts_hold_with_concurrent_writers(open_store: Callable[..., MessageStore]) -> None:
    # The counters are added to under the put lock: threads putting at once
    # (single puts, the non-blocking path and the locked one, and batches
    # across CommitLog files) lose no count.
    import threading

    store = open_store(**SMALL)
    wrote: list[int] = []

    def single(k: int) -> None:
        n = sum(store.put(f"c{k}", b"s" * (i % 90), queue_id=i % 2).wrote_bytes
                for i in range(1500))
        wrote.append(n)

    def batches(k: int) -> None:
        wrote.append(sum(store.put_batch(f"b{k}", [b"b" * 500] * 20).wrote_bytes
                         for _ in range(30)))

    threads = [threading.Thread(target=single, args=(k,)) for k in range(3)]
    threads += [threading.Thread(target=batches, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = store.stats()
    assert s.put_messages_total == 3 * 1500 + 2 * 30 * 20
    assert s.put_bytes_total == sum(wrote)
    # The log holds those bytes and the blanks that end full files (64 KiB
    # files: several rolled).
    assert s.max_phy_offset > sum(wrote) > s.max_phy_offset - 64 * 1024 // 2
    store.get_message("g", "c0", 0, 0)  # waits until every put is dispatched
    s = store.stats()
    assert s.queue_end_total == s.put_messages_total


def test_rates_between_two_samples(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    first = store.stats()
    rs = [store.put("t", b"y" * 50) for _ in range(40)]
    time.sleep(0.05)
    second = store.stats()
    assert second.interval_s == pytest.approx(second.monotonic_s - first.monotonic_s)
    assert second.interval_s is not None and second.interval_s >= 0.05
    assert second.put_messages_per_s == pytest.approx(40 / second.interval_s)
    assert second.put_bytes_per_s == pytest.approx(
        sum(r.wrote_bytes for r in rs) / second.interval_s)
    assert second.get_messages_per_s == 0.0
    store.get_message("g", "t", 0, 0, max_msg_nums=10)
    time.sleep(0.01)
    # The default baseline is the previous call; ``since`` picks another.
    third = store.stats()
    assert third.put_messages_per_s == 0.0
    assert third.get_messages_per_s is not None and third.get_messages_per_s > 0
    assert third.interval_s is not None
    assert third.get_calls_per_s == pytest.approx(1 / third.interval_s)
    again = store.stats(since=first)
    assert again.interval_s == pytest.approx(again.monotonic_s - first.monotonic_s)
    assert again.put_messages_per_s == pytest.approx(40 / again.interval_s)
    # The first call measures against the moment the store was opened.
    fresh = open_store(path=str(Path(store.config.store_path).parent / "other"), **SMALL)
    fresh.put("t", b"z")
    assert fresh.stats().put_messages_per_s is not None


def test_sample_time_and_frozen(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    t0 = time.time_ns() // 1_000_000
    s = store.stats()
    assert t0 <= s.sample_time_ms <= time.time_ns() // 1_000_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.put_messages_total = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="StoreStats"):
        store.stats(since=3)  # type: ignore[arg-type]


def test_flush_behind(open_store: Callable[..., MessageStore]) -> None:
    # Small puts stay below the 4 dirty pages the async flush waits for, and
    # the thorough flush is hours away: they stay unflushed until flush().
    store = open_store(flush_commit_log_thorough_interval=3_600_000, **SMALL)
    store.flush()
    for i in range(10):
        store.put("t", b"z" * 100, queue_id=i % 3)
    s = store.stats()
    assert s.flushed_offset is not None and s.flush_behind_bytes is not None
    assert s.flush_behind_bytes == s.max_phy_offset - s.flushed_offset
    assert s.flush_behind_bytes > 0
    store.flush()
    after = store.stats()
    assert after.flush_behind_bytes == 0
    assert after.flushed_offset == after.max_phy_offset


def test_dispatch_behind_in_writer_and_reader(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    store.put("t", b"first")
    _wait(lambda: store.dispatch_behind_bytes() == 0, "dispatch")
    native = store._native
    assert native is not None
    native.stop_dispatch()  # a dispatcher lagging behind the producer
    lagging = [store.put("t", b"x" * 300, queue_id=1) for _ in range(3)]
    behind = sum(r.wrote_bytes for r in lagging)
    assert store.stats().dispatch_behind_bytes == behind
    reader = open_store(read_only=True, **SMALL)
    # The reader measures the files: the CommitLog's end against the queues.
    seen = reader.stats()
    assert seen.dispatch_behind_bytes == behind
    assert [(q.topic, q.queue_id, q.max_offset) for q in seen.queues] == [("t", 0, 1)]
    native.start_dispatch()
    _wait(lambda: store.dispatch_behind_bytes() == 0, "dispatch")
    assert store.stats().dispatch_behind_bytes == 0
    caught_up = reader.stats()
    assert caught_up.dispatch_behind_bytes == 0
    assert [(q.topic, q.queue_id, q.max_offset) for q in caught_up.queues] == [
        ("t", 0, 1), ("t", 1, 3)]


def test_disk_fields(open_store: Callable[..., MessageStore], store_path: str) -> None:
    store = open_store(**SMALL)
    store.put("t", b"d" * 1000)
    store.flush()
    s = store.stats()
    assert s.disk_used_ratio is not None and 0 < s.disk_used_ratio <= 1
    assert s.disk_total_bytes is not None and s.disk_available_bytes is not None
    assert 0 < s.disk_available_bytes <= s.disk_total_bytes
    files = [p for p in Path(store_path).rglob("*") if p.is_file()]
    assert s.store_size_bytes == sum(p.stat().st_size for p in files)
    # The 64 KiB CommitLog file alone is in there, in full.
    assert s.store_size_bytes >= 64 * 1024
    assert 0 < s.store_allocated_bytes


def test_closed_store_refuses(store_path: str) -> None:
    store = MessageStore(StoreConfig(store_path=store_path, **SMALL))
    with pytest.raises(StoreClosedError):
        store.stats()
    store.start()
    store.shutdown()
    with pytest.raises(StoreClosedError):
        store.stats()


WRITER = r"""
import json, sys, time
from rocketstore import MessageStore, StoreConfig

cfg = StoreConfig(store_path=sys.argv[1], **json.loads(sys.argv[2]))
store = MessageStore(cfg).start()
for i in range(30):
    store.put("w", b"a" * 40, queue_id=i % 3)
def settled():
    while store.dispatch_behind_bytes():
        time.sleep(0.002)
settled()
print("ready", flush=True)
sys.stdin.readline()
for i in range(25):
    store.put("w", b"b" * 40, queue_id=i % 3)
settled()
print("more", flush=True)
sys.stdin.readline()
store.shutdown()
"""


def test_reader_in_another_process(store_path: str) -> None:
    import json

    with subprocess.Popen([sys.executable, "-c", WRITER, store_path, json.dumps(SMALL)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            _read_while_written(proc, store_path)
        finally:
            if proc.poll() is None:
                proc.kill()


def _read_while_written(proc: subprocess.Popen[str], store_path: str) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    with MessageStore(StoreConfig(store_path=store_path, **SMALL), read_only=True) as ro:
        first = ro.stats()
        for name in WRITER_ONLY:
            assert getattr(first, name) is None, name
        assert first.read_only and first.writer_running is True
        assert not first.writeable and "READ_ONLY" in first.running_flags
        assert not first.dispatch_running
        assert first.queue_end_total == 30
        assert first.dispatch_behind_bytes == 0
        assert first.disk_used_ratio is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "more"
        second = ro.stats()
        for name in WRITER_ONLY:
            assert getattr(second, name) is None, name
        assert second.queue_end_total == 55
        assert second.interval_s is not None
        # Rates measured on the files: queue ends and the CommitLog's end.
        assert second.put_messages_per_s == pytest.approx(25 / second.interval_s)
        assert second.put_bytes_per_s == pytest.approx(
            (second.max_phy_offset - first.max_phy_offset) / second.interval_s)
        assert second.max_phy_offset > first.max_phy_offset
        # The reader counts its own pulls.
        got = ro.get_message("g", "w", 0, 0)
        assert ro.stats().get_messages_total == len(got.messages) > 0
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
        assert ro.stats().writer_running is False
