"""Visibility when every message opens a new queue id (a new ConsumeQueue file
each), on the real disk: ``cd benches/python && python -m pytest
test_bench_space.py --benchmark-enable``. The store lives in the temp dir
(``ROCKETSTORE_DISK_BENCH_DIR`` to choose): creating files costs nothing on
tmpfs. The load average is recorded with the numbers."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from rocketstore import GetStatus, MessageStore, StoreConfig


def _du(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def test_visibility_of_1000_new_queue_ids(benchmark: Any) -> None:
    """Default geometry; 1,000 queue ids, one message each: put, then wait
    until ``get_message`` returns it (its queue file is created by dispatch)."""
    base = os.environ.get("ROCKETSTORE_DISK_BENCH_DIR")
    lat: list[float] = []
    with tempfile.TemporaryDirectory(dir=base) as d:
        with MessageStore(StoreConfig(store_path=d)) as store:
            q = iter(range(1_000_000))

            def one() -> None:
                qid = next(q)
                seq = store.dispatch_seq
                t0 = time.perf_counter()
                r = store.put("T", b"m", qid)
                assert r.ok
                while True:
                    g = store.get_message("g", "T", qid, 0, 1)
                    if g.status is GetStatus.FOUND:
                        break
                    seq = store.wait_for_dispatch(seq, 1.0)
                lat.append(time.perf_counter() - t0)

            benchmark.pedantic(one, rounds=1000, iterations=1)
            used = _du(d)
    lat.sort()
    benchmark.extra_info["p50_ms"] = round(lat[len(lat) // 2] * 1e3, 3)
    benchmark.extra_info["p99_ms"] = round(lat[int(len(lat) * 0.99)] * 1e3, 3)
    benchmark.extra_info["max_ms"] = round(lat[-1] * 1e3, 3)
    benchmark.extra_info["du_mb"] = round(used / 1e6, 1)
    benchmark.extra_info["loadavg"] = open("/proc/loadavg").read().split()[:3]
