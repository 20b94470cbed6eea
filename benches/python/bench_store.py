"""Benchmark stores and what more than one benchmark measures on them.

The geometries the benchmarks use (file sizes and index capacity), the
side-by-side table's messages (``benches/RESULTS.md``), a store
in a temporary directory on a medium (see ``media.py``), and the shared
measurements: the message rate at the median round and the time until a put
is visible to a pull. Shared by the pytest-benchmark suites and
``benches/guard.py``.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

from media import bench_base

from rocketstore import GetStatus, MessageStore, StoreConfig

#: The side-by-side table's geometry (``benches/RESULTS.md``): 256 MiB
#: CommitLog files, 300,000 units a queue file, an index for 2 M keys.
TABLE_GEOMETRY: Mapping[str, int] = {
    "mapped_file_size_commit_log": 256 << 20,
    "mapped_file_size_consume_queue": 20 * 300_000,
    "max_hash_slot_num": 500_000,
    "max_index_num": 2_000_000,
}
#: The table's messages: one topic, 4 queues, one of 4 tags each, 100-byte
#: bodies (1,024 distinct, each starting with its number).
TOPIC = "BenchTopic"
QUEUES = 4
TAGS = ["TagA", "TagB", "TagC", "TagD"]
_TEMPLATE = bytes(ord("a") + i % 26 for i in range(100))
BODIES = [i.to_bytes(4, "little") + _TEMPLATE[4:] for i in range(1024)]
#: A small store: 64 MiB CommitLog files, 100,000 units a queue file, an
#: index for 40,000 keys.
SMALL_GEOMETRY: Mapping[str, int] = {
    "mapped_file_size_commit_log": 64 << 20,
    "mapped_file_size_consume_queue": 20 * 100_000,
    "max_hash_slot_num": 10_000,
    "max_index_num": 40_000,
}


def bench_config(path: str, geometry: Mapping[str, int], **kw: Any) -> StoreConfig:
    """A store at ``path`` with ``geometry``; ``kw`` adds settings or overrides it."""
    return StoreConfig(store_path=path, **{**geometry, **kw})


@contextlib.contextmanager
def temp_store(medium: str, geometry: Mapping[str, int], **kw: Any) -> Iterator[MessageStore]:
    """An open store in a new temporary directory on ``medium`` (removed afterwards)."""
    with tempfile.TemporaryDirectory(dir=bench_base(medium)) as d:
        with MessageStore(bench_config(d, geometry, **kw)) as s:
            yield s


def record_rate(benchmark: Any, n: int) -> None:
    """``msg_per_s_median``: ``n`` messages a round, at the median round."""
    if benchmark.stats is not None:  # None under --benchmark-disable (one plain run)
        benchmark.extra_info["msg_per_s_median"] = round(n / benchmark.stats.stats.median)


def record_latency(benchmark: Any, lat: list[float]) -> None:
    """``p50_ms`` and ``p99_ms`` of latencies in seconds."""
    lat.sort()
    benchmark.extra_info["p50_ms"] = round(lat[len(lat) // 2] * 1e3, 3)
    benchmark.extra_info["p99_ms"] = round(lat[int(len(lat) * 0.99)] * 1e3, 3)


def visibility_latency(benchmark: Any, store: MessageStore, body: bytes, rounds: int) -> None:
    """Puts ``body`` to topic ``vis``, then waits on dispatch until
    ``get_message`` returns it, ``rounds`` times; records the latencies' p50
    and p99."""
    lat: list[float] = []

    def one() -> None:
        seq = store.dispatch_seq
        t0 = time.perf_counter()
        r = store.put("vis", body)
        while True:
            g = store.get_message("g", "vis", 0, r.queue_offset, 1)
            if g.status is GetStatus.FOUND:
                break
            seq = store.wait_for_dispatch(seq, 1.0)
        lat.append(time.perf_counter() - t0)

    benchmark.pedantic(one, rounds=rounds, iterations=1)
    record_latency(benchmark, lat)
