"""Durability-path throughput: group commit, batch puts, flush modes.

Run: ``python -m pytest benches/python/test_bench_durability.py --benchmark-enable``.
These stores live on the real disk (the temp dir, or ROCKETSTORE_DISK_BENCH_DIR):
an fsync on tmpfs costs nothing and would measure nothing.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rocketstore import FlushDiskType, Message, MessageStore, PutStatus, StoreConfig

BODY = b"x" * 100


def _disk_dir() -> str | None:
    return os.environ.get("ROCKETSTORE_DISK_BENCH_DIR")


def _cfg(d: str, **kw: Any) -> StoreConfig:
    return StoreConfig(
        store_path=d,
        mapped_file_size_commit_log=64 << 20,
        mapped_file_size_consume_queue=20 * 100_000,
        max_hash_slot_num=10_000,
        max_index_num=40_000,
        **kw,
    )


@pytest.fixture
def sync_store() -> Iterator[MessageStore]:
    with tempfile.TemporaryDirectory(dir=_disk_dir()) as d:
        with MessageStore(_cfg(d, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as s:
            s.put("bench", BODY)
            yield s


def _producers(store: MessageStore, threads: int, per_thread: int) -> None:
    errors: list[object] = []

    def work() -> None:
        put = store.put
        for _ in range(per_thread):
            r = put("bench", BODY)
            if r.status is not PutStatus.PUT_OK:
                errors.append(r.status)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]


@pytest.mark.parametrize("threads", [1, 4, 8])
def test_sync_flush_producers(benchmark: Any, sync_store: MessageStore, threads: int) -> None:
    """One message in flight per producer thread; 1 thread = one fsync per message."""
    per_thread = 400 // threads
    benchmark.pedantic(_producers, args=(sync_store, threads, per_thread), rounds=5)
    n = per_thread * threads
    benchmark.extra_info["msg_per_s_median"] = round(n / benchmark.stats.stats.median)


def test_sync_flush_put_messages_100(benchmark: Any, sync_store: MessageStore) -> None:
    """put_messages of 100 under SYNC_FLUSH: one group commit per batch."""
    rounds = 20

    def run() -> None:
        for _ in range(rounds):
            rs = sync_store.put_messages([Message("bench", BODY) for _ in range(100)])
            assert rs[-1].status is PutStatus.PUT_OK

    benchmark.pedantic(run, rounds=5)
    benchmark.extra_info["msg_per_s_median"] = round(rounds * 100 / benchmark.stats.stats.median)


@pytest.mark.parametrize("mode", ["async", "sync", "transient_pool"])
def test_put_by_flush_mode(benchmark: Any, mode: str) -> None:
    """Single-threaded put throughput by flush mode (SYNC waits for every put)."""
    kw: dict[str, Any] = {}
    n = 10_000
    if mode == "sync":
        kw["flush_disk_type"] = FlushDiskType.SYNC_FLUSH
        n = 400
    elif mode == "transient_pool":
        kw["transient_store_pool_enable"] = True
        kw["transient_store_pool_size"] = 2
    with tempfile.TemporaryDirectory(dir=_disk_dir()) as d:
        with MessageStore(_cfg(d, **kw)) as s:
            put = s.put
            put("bench", BODY)

            def run() -> None:
                for _ in range(n):
                    put("bench", BODY)

            benchmark.pedantic(run, rounds=5)
    benchmark.extra_info["msg_per_s_median"] = round(n / benchmark.stats.stats.median)


def test_sync_flush_visibility_latency(benchmark: Any, sync_store: MessageStore) -> None:
    """SYNC_FLUSH: put (acknowledged once on disk), then pull it. Reads see
    only flushed records, so dispatch follows the flush."""
    import time

    from rocketstore import GetStatus

    store = sync_store
    lat: list[float] = []

    def one() -> None:
        seq = store.dispatch_seq
        t0 = time.perf_counter()
        r = store.put("vis", BODY)
        while True:
            g = store.get_message("g", "vis", 0, r.queue_offset, 1)
            if g.status is GetStatus.FOUND:
                break
            seq = store.wait_for_dispatch(seq, 1.0)
        lat.append(time.perf_counter() - t0)

    benchmark.pedantic(one, rounds=500, iterations=1)
    lat.sort()
    benchmark.extra_info["p50_ms"] = round(lat[len(lat) // 2] * 1e3, 3)
    benchmark.extra_info["p99_ms"] = round(lat[int(len(lat) * 0.99)] * 1e3, 3)
