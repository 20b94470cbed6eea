"""The rows of the side-by-side table against RocketMQ's own store
(``benches/RESULTS.md``), from Python, stores on the real disk.

Run: ``python -m pytest benches/python/test_bench_rows.py --benchmark-enable``.
Same geometry as the table: one topic, 4 queues, 100-byte bodies, one key
and one tag per message. Each row reports ``msg_per_s_median`` (messages per
second at the median round) in its extra info. Puts are timed to their
return (the acknowledgement); the put rows add ``dispatched_msg_per_s``, the
rate until the consume queues and the index hold every message too.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from bench_store import BODIES, QUEUES, TABLE_GEOMETRY, TAGS, TOPIC, record_rate, temp_store

from rocketstore import FlushDiskType, GetStatus, MessageStore, PutStatus

#: Messages per timed put round.
ROUND = 20_000
#: Messages in the store the read rows pull from.
READ_N = 200_000
PUT_OK = PutStatus.PUT_OK


@pytest.fixture
def disk_store() -> Iterator[MessageStore]:
    with temp_store("disk", TABLE_GEOMETRY) as s:
        yield s


@pytest.fixture
def sync_disk_store() -> Iterator[MessageStore]:
    with temp_store("disk", TABLE_GEOMETRY, flush_disk_type=FlushDiskType.SYNC_FLUSH) as s:
        yield s


@pytest.fixture(scope="module")
def read_store() -> Iterator[MessageStore]:
    with temp_store("disk", TABLE_GEOMETRY) as s:
        put = s.put
        for i in range(READ_N):
            put(TOPIC, BODIES[i & 1023], i & 3, tags=TAGS[i & 3], keys=[f"K{i}"])
        s.flush()
        yield s


def _producers(store: MessageStore, threads: int, keys: list[str]) -> None:
    """``threads`` producers, thread t writing queue t % 4, one message per key."""
    per = len(keys) // threads
    errors: list[object] = []

    def work(t: int) -> None:
        put = store.put
        q = t % QUEUES
        for i in range(t * per, (t + 1) * per):
            r = put(TOPIC, BODIES[i & 1023], q, tags=TAGS[i & 3], keys=[keys[i]])
            if r.status is not PUT_OK:
                errors.append(r.status)

    if threads == 1:
        work(0)
    else:
        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
    assert not errors, errors[:3]


def _key_rounds(store: MessageStore, threads: int, n: int) -> Any:
    """A pedantic ``setup`` for :func:`_producers`: each call hands out the
    next ``n`` unique keys (built outside the timed region)."""
    rounds = iter(range(10**9))

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        base = next(rounds) * n
        return (store, threads, [f"K{i}" for i in range(base, base + n)]), {}

    return setup


def _wait_dispatched(store: MessageStore) -> None:
    while store.dispatch_behind_bytes() > 0:
        time.sleep(0.0005)


@pytest.mark.parametrize("threads", [1, 4])
def test_row_put_key_tag(benchmark: Any, disk_store: MessageStore, threads: int) -> None:
    """``put()`` with a key and a tag from 1 or 4 Python threads (one queue each)."""
    setup = _key_rounds(disk_store, threads, ROUND)
    benchmark.pedantic(_producers, setup=setup, rounds=8, warmup_rounds=1)
    record_rate(benchmark, ROUND)
    dispatched = []
    for _ in range(3):
        args, _kw = setup()
        _wait_dispatched(disk_store)
        t0 = time.perf_counter()
        _producers(*args)
        _wait_dispatched(disk_store)
        dispatched.append(time.perf_counter() - t0)
    benchmark.extra_info["dispatched_msg_per_s"] = round(ROUND / sorted(dispatched)[1])


def test_row_put_batch_1000_key_tag(benchmark: Any, disk_store: MessageStore) -> None:
    """``put_batch`` of 1,000 bodies with per-message keys and tags, queues rotating."""
    tags = [TAGS[i & 3] for i in range(1000)]
    bodies = [BODIES[i & 1023] for i in range(1000)]
    rounds = iter(range(10**6))

    def run() -> None:
        base = next(rounds) * ROUND
        batches = [[f"K{i}" for i in range(b, b + 1000)] for b in range(base, base + ROUND, 1000)]
        for j, keys in enumerate(batches):
            r = disk_store.put_batch(TOPIC, bodies, j & 3, keys=keys, tags=tags)
            assert r.ok

    benchmark.pedantic(run, rounds=8, warmup_rounds=1)
    record_rate(benchmark, ROUND)


def test_row_get_batch32_touch_body(benchmark: Any, read_store: MessageStore) -> None:
    """``get_message`` over every queue in pulls of 32, one byte of each body read."""
    get = read_store.get_message

    def run() -> int:
        count = 0
        total = 0
        for q in range(QUEUES):
            off = 0
            while True:
                g = get("g", TOPIC, q, off, 32)
                if g.status is not GetStatus.FOUND:
                    break
                for m in g.messages:
                    total += m.body[0]
                    count += 1
                off = g.next_begin_offset
        assert count == READ_N
        return total

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    record_rate(benchmark, READ_N)


def test_row_query_by_key(benchmark: Any, read_store: MessageStore) -> None:
    """``query_message`` of 10,000 random keys (each carried by one message)."""
    rnd = random.Random(1000)
    keys = [f"K{rnd.randrange(READ_N)}" for _ in range(10_000)]
    q = read_store.query_message

    def run() -> int:
        hits = 0
        for k in keys:
            hits += len(q(TOPIC, k, 32, 0))
        assert hits == len(keys)
        return hits

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    record_rate(benchmark, len(keys))


@pytest.mark.parametrize("threads", [1, 8])
def test_row_sync_flush_key_tag(
    benchmark: Any, sync_disk_store: MessageStore, threads: int
) -> None:
    """SYNC_FLUSH: each ``put()`` returns once its record is on disk (group commit)."""
    n = 50 * threads
    setup = _key_rounds(sync_disk_store, threads, n)
    benchmark.pedantic(_producers, setup=setup, rounds=5, warmup_rounds=1)
    record_rate(benchmark, n)
