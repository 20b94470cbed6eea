"""Committed offsets: a durable commit's cost against the size of the table.

Run: ``python -m pytest benches/python/test_bench_offsets.py --benchmark-enable``.
The stores live on the real disk (the temp dir, or ROCKETSTORE_DISK_BENCH_DIR):
a durable commit is an append and an fdatasync of the offsets journal
(``docs/format.md``, §13.3), which tmpfs would not measure.

``test_durable_commit`` measures ``consumer.commit()`` with 10 and with
100,000 entries in ``consumerOffset.json``; ``test_commit_cost_is_flat``
measures both in one run, interleaved, and asserts the 100,000-entry median
is within 1.5x the 10-entry one. ``test_groups_listing`` times
``consumer_groups()`` over 100,000 entries.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from bench_store import SMALL_GEOMETRY, bench_config
from media import bench_base

from rocketstore import MessageStore
from rocketstore.config.files import atomic_write
from rocketstore.consumers.consumer import Consumer
from rocketstore.consumers.offset_table import OffsetKey, OffsetTable

SIZES = (10, 100_000)


@contextmanager
def _store_with(entries: int) -> Iterator[tuple[MessageStore, Consumer]]:
    """A store on disk whose consumerOffset.json holds ``entries`` entries
    (8 queues a topic), and an open consumer of another group."""
    with tempfile.TemporaryDirectory(dir=bench_base("disk")) as d:
        table = OffsetTable()
        for i in range(entries):
            table.set(OffsetKey(f"T{i // 8}", "others"), i % 8, i)
        atomic_write(os.path.join(d, "config", "consumerOffset.json"), table.to_json())
        with MessageStore(bench_config(d, SMALL_GEOMETRY)) as store:
            for _ in range(10):
                assert store.put("bench", b"x", 0).ok
            consumer = store.consumer("g", "bench", auto_commit=False)
            assert len(consumer.poll(timeout=5.0)) == 10
            yield store, consumer
            consumer.close()


def _commit_once(consumer: Consumer, i: int) -> None:
    consumer.seek(0, i % 10)
    consumer.commit()


@pytest.mark.parametrize("entries", SIZES)
def test_durable_commit(benchmark: Any, entries: int) -> None:
    with _store_with(entries) as (_store, consumer):
        counter = iter(range(1 << 30))
        benchmark.pedantic(lambda: _commit_once(consumer, next(counter)), rounds=300,
                           warmup_rounds=20)


def test_commit_cost_is_flat() -> None:
    """Medians of 300 durable commits each, with 10 and with 100,000
    entries, in rounds of 20 alternating between the two stores."""
    times: dict[int, list[float]] = {n: [] for n in SIZES}
    with _store_with(SIZES[0]) as (_a, small), _store_with(SIZES[1]) as (_b, big):
        consumers = {SIZES[0]: small, SIZES[1]: big}
        for r in range(30):
            for n, consumer in consumers.items():
                for i in range(20 if r else 5):  # the first round warms up
                    start = time.perf_counter()
                    _commit_once(consumer, i)
                    if r:
                        times[n].append(time.perf_counter() - start)
    medians = {n: statistics.median(t) for n, t in times.items()}
    ratio = medians[SIZES[1]] / medians[SIZES[0]]
    print(f"median durable commit: {medians[SIZES[0]] * 1e3:.3f} ms with {SIZES[0]} entries, "
          f"{medians[SIZES[1]] * 1e3:.3f} ms with {SIZES[1]:,} (x{ratio:.2f})")
    assert ratio <= 1.5, medians


def test_groups_listing(benchmark: Any) -> None:
    with _store_with(SIZES[1]) as (store, _consumer):
        groups = benchmark.pedantic(store.consumer_groups, rounds=3)
        # "others" holds the 100,000 entries; "g" is the open consumer's
        # group, listed for its member although it committed nothing.
        assert [g.group for g in groups] == ["g", "others"]
        assert len(groups[1].queues) == SIZES[1]
