"""Read-side throughput and latency from Python.

Run: ``python -m pytest benches/python/test_bench_read.py --benchmark-enable``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from bench_store import TABLE_GEOMETRY, record_latency, temp_store, visibility_latency

from rocketstore import MessageStore

N = 64_000
BODY = b"x" * 100


@pytest.fixture(scope="module", params=["tmpfs", "disk"])
def filled_store(request: pytest.FixtureRequest) -> Iterator[MessageStore]:
    with temp_store(request.param, TABLE_GEOMETRY) as store:
        for i in range(N):
            store.put("bench", BODY, 0, None, [f"key-{i}"])
        store.flush()
        yield store


def test_get_message_batch32_touch_body(benchmark: Any, filled_store: MessageStore) -> None:
    get = filled_store.get_message

    def run() -> int:
        off = 0
        seen = 0
        while off < N:
            r = get("g", "bench", 0, off, 32)
            for m in r.messages:
                seen += len(m.body)
            off = r.next_begin_offset
        return seen

    seen = benchmark(run)
    assert seen == N * len(BODY)
    benchmark.extra_info["msg_per_s_median"] = round(N / benchmark.stats.stats.median)


def test_query_message_latency(benchmark: Any, filled_store: MessageStore) -> None:
    q = filled_store.query_message
    keys = [f"key-{i}" for i in range(0, N, 997)]
    i = 0

    def one() -> int:
        nonlocal i
        i += 1
        return len(q("bench", keys[i % len(keys)], 32))

    assert benchmark(one) == 1
    benchmark.extra_info["p50_us"] = round(benchmark.stats.stats.median * 1e6, 2)


def test_visibility_latency(benchmark: Any, filled_store: MessageStore) -> None:
    """Put one message, then wait on dispatch until get_message returns it."""
    visibility_latency(benchmark, filled_store, BODY, rounds=2000)


def test_put_then_query_latency(benchmark: Any, filled_store: MessageStore) -> None:
    """Put one message with a key, then find it by key (the README's first
    example). Stores without read-your-writes need the wait loop; with it,
    the first query finds the message."""
    store = filled_store
    lat: list[float] = []
    first_try = 0
    n = 0

    def one() -> None:
        nonlocal first_try, n
        n += 1
        key = f"vis-{n}"
        seq = store.dispatch_seq
        t0 = time.perf_counter()
        store.put("visq", BODY, 0, None, [key])
        tries = 0
        while True:
            tries += 1
            if store.query_message("visq", key):
                break
            seq = store.wait_for_dispatch(seq, 1.0)
        lat.append(time.perf_counter() - t0)
        first_try += tries == 1

    benchmark.pedantic(one, rounds=2000, iterations=1)
    record_latency(benchmark, lat)
    benchmark.extra_info["found_first_try"] = f"{first_try}/{n}"
