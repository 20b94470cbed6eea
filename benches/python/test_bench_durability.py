"""Durability-path throughput: group commit, batch puts, flush modes.

Run: ``python -m pytest benches/python/test_bench_durability.py --benchmark-enable``.
These stores live on the real disk (the temp dir, or ROCKETSTORE_DISK_BENCH_DIR):
an fsync on tmpfs costs nothing and would measure nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from bench_store import SMALL_GEOMETRY, record_rate, temp_store, visibility_latency

from rocketstore import FlushDiskType, Message, MessageStore, PutStatus

BODY = b"x" * 100


@pytest.fixture
def sync_store() -> Iterator[MessageStore]:
    with temp_store("disk", SMALL_GEOMETRY, flush_disk_type=FlushDiskType.SYNC_FLUSH) as s:
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
    record_rate(benchmark, per_thread * threads)


def test_sync_flush_put_messages_100(benchmark: Any, sync_store: MessageStore) -> None:
    """put_messages of 100 under SYNC_FLUSH: one group commit per batch."""
    rounds = 20

    def run() -> None:
        for _ in range(rounds):
            rs = sync_store.put_messages([Message("bench", BODY) for _ in range(100)])
            assert rs[-1].status is PutStatus.PUT_OK

    benchmark.pedantic(run, rounds=5)
    record_rate(benchmark, rounds * 100)


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
    with temp_store("disk", SMALL_GEOMETRY, **kw) as s:
        put = s.put
        put("bench", BODY)

        def run() -> None:
            for _ in range(n):
                put("bench", BODY)

        benchmark.pedantic(run, rounds=5)
    record_rate(benchmark, n)


def test_sync_flush_visibility_latency(benchmark: Any, sync_store: MessageStore) -> None:
    """SYNC_FLUSH: put (acknowledged once on disk), then pull it. Reads see
    only flushed records, so dispatch follows the flush."""
    visibility_latency(benchmark, sync_store, BODY, rounds=500)
