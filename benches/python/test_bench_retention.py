"""A retention round deleting 10 CommitLog files: its time, and put latency meanwhile.

Run: ``python -m pytest benches/python/test_bench_retention.py --benchmark-enable -s``.
The store lives on the real disk (the temp dir, or ROCKETSTORE_DISK_BENCH_DIR):
unlinking a file whose blocks are on tmpfs frees memory, not disk extents.
Files are 64 MiB by default (ROCKETSTORE_RETENTION_BENCH_FILE_MB=1024 for RocketMQ's
1 GiB; creating 11 GiB takes a while and needs the disk space).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from bench_store import SMALL_GEOMETRY, bench_config

from rocketstore import MessageStore, PutStatus, StoreConfig

FILE_MB = int(os.environ.get("ROCKETSTORE_RETENTION_BENCH_FILE_MB", "64"))
FILE_SIZE = FILE_MB << 20
BIG = b"b" * (1 << 20)  # fills files fast: 1 MiB records
SMALL = b"x" * 100
FILES = 10


def _cfg(d: str, interval_ms: int) -> StoreConfig:
    return bench_config(
        d,
        SMALL_GEOMETRY,
        mapped_file_size_commit_log=FILE_SIZE,
        delete_commit_log_files_interval=interval_ms,
        clean_resource_interval=3_600_000,
    )


def _fill(store: MessageStore, files: int) -> None:
    """Write until ``files`` more CommitLog files are full."""
    target = store.max_phy_offset + files * FILE_SIZE
    while store.max_phy_offset < target:
        assert store.put("fill", BIG).status is PutStatus.PUT_OK
    store.flush()


def _pct(sorted_ns: list[int], q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1000


def _put_latencies(store: MessageStore, stop: threading.Event, out: list[int]) -> None:
    put, clock = store.put, time.perf_counter_ns
    while not stop.is_set():
        t0 = clock()
        r = put("bench", SMALL)
        out.append(clock() - t0)
        if r.status is not PutStatus.PUT_OK:
            raise AssertionError(r.status)


def _summary(ns: list[int]) -> dict[str, float]:
    s = sorted(ns)
    return {
        "puts": len(s),
        "p50_us": _pct(s, 0.50),
        "p99_us": _pct(s, 0.99),
        "p999_us": _pct(s, 0.999),
        "max_us": s[-1] / 1000,
    }


@pytest.fixture(params=[100, 0], ids=["interval100ms", "interval0"])
def filled(request: Any) -> Iterator[MessageStore]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("ROCKETSTORE_DISK_BENCH_DIR")) as d:
        with MessageStore(_cfg(d, request.param)) as s:
            yield s


def test_retention_round_10_files(benchmark: Any, filled: MessageStore) -> None:
    store = filled
    results: list[dict[str, Any]] = []

    def setup() -> None:
        _fill(store, FILES + 1)

    def one_round() -> None:
        lat: list[int] = []
        stop = threading.Event()
        producer = threading.Thread(target=_put_latencies, args=(store, stop, lat))
        producer.start()
        time.sleep(0.2)  # the producer is running before the round starts
        mark = len(lat)
        t0 = time.perf_counter()
        deleted = store.delete_expired_files(force=True)
        took = time.perf_counter() - t0
        during = lat[mark:]
        stop.set()
        producer.join()
        assert deleted == FILES
        results.append(
            {"round_s": took, "during": _summary(during), "before": _summary(lat[:mark])}
        )

    rounds_n = int(os.environ.get("ROCKETSTORE_RETENTION_BENCH_ROUNDS", "3"))
    benchmark.pedantic(one_round, setup=setup, rounds=rounds_n, iterations=1)
    rounds = [r["round_s"] for r in results]
    benchmark.extra_info["file_mb"] = FILE_MB
    benchmark.extra_info["round_s_median"] = statistics.median(rounds)
    benchmark.extra_info["rounds"] = results
    print(f"\nretention round, {FILES} x {FILE_MB} MiB files, "
          f"interval {store.config.delete_commit_log_files_interval} ms:")
    for r in results:
        print(f"  round {r['round_s'] * 1000:.1f} ms; puts before {r['before']}; "
              f"during {r['during']}")
