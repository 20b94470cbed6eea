"""Columnar pulls from Python: ``get_arrow`` and ``Consumer.poll_arrow``,
stores on the real disk.

Run: ``python -m pytest benches/python/test_bench_arrow.py --benchmark-enable``.
Same geometry as the side-by-side table (``benches/RESULTS.md``): one
topic, 4 queues, 100-byte bodies, one key and one tag per message. Each
round reads every queue to its end in batches of ``batch`` messages, timed
until each batch is held in Python (a ``pyarrow.RecordBatch``); nothing is
made per message. ``msg_per_s_median`` in the extra info is messages per
second at the median round. Rows: bodies copied (default) or zero-copy
(``binary_view`` over the mapped CommitLog), every column or only
``queue_offset`` and ``body``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from media import bench_base

from rocketstore import GetStatus, MessageStore, StoreConfig

pytest.importorskip("pyarrow")

TOPIC = "BenchTopic"
QUEUES = 4
TAGS = ["TagA", "TagB", "TagC", "TagD"]
TEMPLATE = bytes(ord("a") + i % 26 for i in range(100))
BODIES = [i.to_bytes(4, "little") + TEMPLATE[4:] for i in range(1024)]
#: Messages in the store the rows read.
READ_N = 200_000


@pytest.fixture(scope="module")
def arrow_store() -> Iterator[MessageStore]:
    with tempfile.TemporaryDirectory(dir=bench_base("disk")) as d:
        cfg = StoreConfig(store_path=d, mapped_file_size_commit_log=256 << 20,
                          mapped_file_size_consume_queue=20 * 300_000,
                          max_hash_slot_num=500_000, max_index_num=2_000_000)
        with MessageStore(cfg) as s:
            for b in range(0, READ_N, 1000):
                q = (b // 1000) % QUEUES
                r = s.put_batch(TOPIC, [BODIES[i & 1023] for i in range(b, b + 1000)], q,
                                keys=[f"K{i}" for i in range(b, b + 1000)],
                                tags=[TAGS[i & 3] for i in range(b, b + 1000)])
                assert r.ok
            s.flush()
            yield s


def _rate(benchmark: Any, n: int) -> None:
    if benchmark.stats is not None:  # None under --benchmark-disable (one plain run)
        benchmark.extra_info["msg_per_s_median"] = round(n / benchmark.stats.stats.median)


ROWS = [
    pytest.param(1024, False, None, id="copy-1024"),
    pytest.param(4096, False, None, id="copy-4096"),
    pytest.param(1024, True, None, id="zero_copy-1024"),
    pytest.param(4096, True, None, id="zero_copy-4096"),
    pytest.param(1024, False, ["queue_offset", "body"], id="copy-1024-offset_body"),
    pytest.param(1024, True, ["queue_offset", "body"], id="zero_copy-1024-offset_body"),
]


@pytest.mark.parametrize(("batch", "zero_copy", "columns"), ROWS)
def test_get_arrow(benchmark: Any, arrow_store: MessageStore, batch: int, zero_copy: bool,
                   columns: list[str] | None) -> None:
    """``get_arrow`` over every queue, each batch held until the next."""
    get = arrow_store.get_arrow

    def run() -> int:
        count = 0
        for q in range(QUEUES):
            off = 0
            while True:
                r = get(TOPIC, q, off, batch, columns, zero_copy)
                if r.status is not GetStatus.FOUND:
                    break
                count += r.batch.num_rows
                off = r.next_begin_offset
        assert count == READ_N
        return count

    benchmark.pedantic(run, rounds=7, warmup_rounds=1)
    _rate(benchmark, READ_N)


@pytest.mark.parametrize("zero_copy", [False, True], ids=["copy", "zero_copy"])
def test_poll_arrow(benchmark: Any, arrow_store: MessageStore, zero_copy: bool) -> None:
    """A consumer's ``poll_arrow(max_messages=4096)`` until the topic is read."""
    rounds = iter(range(10**9))

    def run() -> int:
        count = 0
        with arrow_store.consumer(f"g{next(rounds)}", TOPIC, auto_commit=False) as c:
            while (n := c.poll_arrow(timeout=0, max_messages=4096,
                                     zero_copy=zero_copy).num_rows):
                count += n
        assert count == READ_N
        return count

    benchmark.pedantic(run, rounds=7, warmup_rounds=1)
    _rate(benchmark, READ_N)
