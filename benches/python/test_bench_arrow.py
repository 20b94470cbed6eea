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

from collections.abc import Iterator
from typing import Any

import pytest
from bench_store import BODIES, QUEUES, TABLE_GEOMETRY, TAGS, TOPIC, record_rate, temp_store

from rocketstore import GetStatus, MessageStore

pytest.importorskip("pyarrow")

#: Messages in the store the rows read.
READ_N = 200_000


@pytest.fixture(scope="module")
def arrow_store() -> Iterator[MessageStore]:
    with temp_store("disk", TABLE_GEOMETRY) as s:
        for b in range(0, READ_N, 1000):
            q = (b // 1000) % QUEUES
            r = s.put_batch(TOPIC, [BODIES[i & 1023] for i in range(b, b + 1000)], q,
                            keys=[f"K{i}" for i in range(b, b + 1000)],
                            tags=[TAGS[i & 3] for i in range(b, b + 1000)])
            assert r.ok
        s.flush()
        yield s


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
    record_rate(benchmark, READ_N)


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
    record_rate(benchmark, READ_N)
