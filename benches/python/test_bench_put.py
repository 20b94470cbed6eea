"""Put throughput from Python (ASYNC flush).

Run: ``python -m pytest benches/python/test_bench_put.py --benchmark-enable``.
Each round puts ``N`` messages; msg/s = N / median round time. Building the
arguments (and Message objects) is inside the timed region.
"""

from __future__ import annotations

from typing import Any

from rocketstore import Message, MessageStore, PutStatus

N = 10_000
BATCH = 1_000
ROUNDS = 40
BODY = b"x" * 100


def _report(benchmark: Any, n: int) -> None:
    median = benchmark.stats.stats.median
    benchmark.extra_info["msgs_per_round"] = n
    benchmark.extra_info["msg_per_s_median"] = round(n / median)


def test_put_fast_path(benchmark: Any, async_store: MessageStore) -> None:
    put = async_store.put

    def run() -> None:
        for _ in range(N):
            put("bench", BODY)

    benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=2)
    _report(benchmark, N)
    assert async_store.put("bench", BODY).status is PutStatus.PUT_OK


def test_put_message(benchmark: Any, async_store: MessageStore) -> None:
    put_message = async_store.put_message

    def run() -> None:
        for _ in range(N):
            put_message(Message("bench", BODY))

    benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=2)
    _report(benchmark, N)


def test_put_batch_10000(benchmark: Any, async_store: MessageStore) -> None:
    """``put_batch`` of 10,000 bodies (one list reused, as a producer would
    hand over its buffered bodies)."""
    put_batch = async_store.put_batch
    bodies = [BODY] * N

    def run() -> None:
        r = put_batch("bench", bodies)
        assert r.count == N

    benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=2)
    _report(benchmark, N)


def test_put_batch_with_keys(benchmark: Any, async_store: MessageStore) -> None:
    """``put_batch`` of 1,000 bodies with one key each (keys built per call)."""
    put_batch = async_store.put_batch
    bodies = [BODY] * BATCH
    rounds = 10

    def run() -> None:
        for r in range(rounds):
            put_batch("bench", bodies, keys=[f"k{r}-{i}" for i in range(BATCH)])

    benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=2)
    _report(benchmark, rounds * BATCH)


def test_put_messages_batch_1000(benchmark: Any, async_store: MessageStore) -> None:
    put_messages = async_store.put_messages
    rounds = 10

    def run() -> None:
        for _ in range(rounds):
            put_messages([Message("bench", BODY) for _ in range(BATCH)])

    benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=2)
    _report(benchmark, rounds * BATCH)
