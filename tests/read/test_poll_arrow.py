"""``Consumer.poll_arrow``: ``poll`` with Arrow batches.

The same fetch code serves both, so positions, commits, auto-commit, the tag
filter and the retention/damage accounting must agree: two groups read the
same store, one with ``poll`` and one with ``poll_arrow``, and must see the
same messages and end at the same positions with the same counts.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from helpers.presets import SEG, SMALL
from helpers.store_util import BODY_AT, flip_commitlog_bits
from rocketstore import MessageStore, StoreConfig

pa = pytest.importorskip("pyarrow")

TOPIC = "P"
QUEUES = 4
CFG: dict[str, Any] = {**SMALL, "delete_commit_log_files_interval": 0,
                       "delete_consume_queue_files_interval": 0,
                       "clean_resource_interval": 3_600_000}


def body(i: int) -> bytes:
    return b"%05d:" % i + b"z" * (i % 50)


def fill(store: MessageStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        assert store.put(TOPIC, body(i), queue_id=i % QUEUES, tags=("a", "b")[i % 2]).ok


def drain_poll(c: Any, max_messages: int) -> dict[int, list[tuple[int, bytes]]]:
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    while msgs := c.poll(timeout=0, max_messages=max_messages):
        for m in msgs:
            got[m.queue_id].append((m.queue_offset, m.body))
    return dict(got)


def drain_arrow(c: Any, max_messages: int, **kw: Any) -> dict[int, list[tuple[int, bytes]]]:
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    while (b := c.poll_arrow(timeout=0, max_messages=max_messages, **kw)).num_rows:
        assert b.num_rows <= max_messages
        for q, o, bd in zip(b.column("queue_id").to_pylist(), b.column("queue_offset").to_pylist(),
                            b.column("body").to_pylist(), strict=True):
            got[q].append((o, bd))
    return dict(got)


@pytest.mark.parametrize("tags", [None, ["b"]])
@pytest.mark.parametrize("zero_copy", [False, True])
def test_poll_arrow_reads_what_poll_reads(open_store: Any, tags: list[str] | None,
                                          zero_copy: bool) -> None:
    store = open_store(**CFG)
    fill(store, 3000)
    with store.consumer("rows", TOPIC, tags=tags) as a, \
            store.consumer("cols", TOPIC, tags=tags) as b:
        by_poll = drain_poll(a, 100)
        by_arrow = drain_arrow(b, 1000, zero_copy=zero_copy)
        assert by_poll == by_arrow
        assert sum(map(len, by_arrow.values())) == (3000 if tags is None else 1500)
        assert a.positions() == b.positions() == {q: 750 for q in range(QUEUES)}
        # New messages: both move on from their positions.
        fill(store, 400, start=3000)
        assert drain_poll(a, 7) == drain_arrow(b, 300, zero_copy=zero_copy)
        assert a.positions() == b.positions() == {q: 850 for q in range(QUEUES)}


def test_positions_commit_and_resume(open_store: Any) -> None:
    store = open_store(**CFG)
    fill(store, 2000)
    seen: set[tuple[int, int]] = set()
    with store.consumer("g", TOPIC, auto_commit=False) as c:
        batch = c.poll_arrow(timeout=0, max_messages=1024)
        assert batch.num_rows == 1024
        last: dict[int, int] = {}
        for q, o in zip(batch.column("queue_id").to_pylist(),
                        batch.column("queue_offset").to_pylist(), strict=True):
            assert last.get(q, o - 1) == o - 1  # offset order within a queue
            last[q] = o
            seen.add((q, o))
        assert c.positions() == {q: o + 1 for q, o in last.items()}
        c.commit()
        assert {q: c.committed(q) for q in range(QUEUES)} == c.positions()
    # The group resumes after the committed rows: nothing lost, nothing twice.
    with store.consumer("g", TOPIC, auto_commit=False) as c:
        rest = c.poll_arrow(timeout=0, max_messages=5000)
        again = set(zip(rest.column("queue_id").to_pylist(),
                        rest.column("queue_offset").to_pylist(), strict=True))
        assert not again & seen and len(again | seen) == 2000


def test_auto_commit_commits_what_earlier_polls_returned(open_store: Any) -> None:
    store = open_store(**CFG)
    fill(store, 800)
    c = store.consumer("auto", TOPIC, auto_commit_interval=0)
    first = c.poll_arrow(timeout=0, max_messages=100)
    after_first = c.positions()
    # The first poll committed the positions before it (the start), not its rows.
    assert first.num_rows == 100 and all(c.committed(q) == 0 for q in range(QUEUES))
    c.poll_arrow(timeout=0, max_messages=100)  # commits the first poll's positions
    assert {q: c.committed(q) for q in range(QUEUES)} == after_first
    c.close()  # commits durably
    assert {q: store.query_offset("auto", TOPIC, q) for q in range(QUEUES)} == c._positions


def test_timeout_gives_an_empty_batch_with_the_columns(open_store: Any) -> None:
    store = open_store(**CFG)
    fill(store, 4)
    with store.consumer("g", TOPIC) as c:
        assert c.poll_arrow(timeout=0).num_rows == 4
        empty = c.poll_arrow(timeout=0.05)
        assert empty.num_rows == 0
        assert empty.schema.names == store.get_arrow(TOPIC, 0, 0, 1).batch.schema.names
        assert c.poll_arrow(timeout=0, zero_copy=True).schema.field("body").type == \
            pa.binary_view()
        with pytest.raises(ValueError, match="max_messages"):
            c.poll_arrow(max_messages=0)


def test_iteration_then_poll_arrow_loses_and_repeats_nothing(open_store: Any) -> None:
    store = open_store(**CFG)
    fill(store, 400)
    with store.consumer("g", TOPIC, auto_commit=False) as c:
        it = iter(c)
        first = [next(it) for _ in range(3)]  # buffers up to 100 behind these
        got = drain_arrow(c, 1000)
        seen = {(m.queue_id, m.queue_offset) for m in first}
        for q, rows in got.items():
            seen |= {(q, o) for o, _ in rows}
        assert sum(map(len, got.values())) + 3 == 400 and len(seen) == 400


def test_retention_and_damage_accounting_as_poll(store_path: str) -> None:
    cfg = StoreConfig(store_path=store_path, **CFG)
    with MessageStore(cfg) as s:
        acked = [s.put(TOPIC, body(i) * 20, queue_id=0) for i in range(1200)]
    # One damaged body in a segment that stays after retention (which deletes
    # 10 files at most) and lies outside the recovery scan (the last 3).
    n_files = len(list((Path(store_path) / "commitlog").iterdir()))
    assert n_files == 14
    victim = [r for r in acked if r.wrote_offset // SEG == n_files - 4][5]
    flip_commitlog_bits(store_path, victim.wrote_offset + BODY_AT + 10, SEG, 1)
    with MessageStore(cfg) as s:
        a = s.consumer("rows", TOPIC, auto_commit=False)
        b_ = s.consumer("cols", TOPIC, auto_commit=False)
        assert s.delete_expired_files(force=True) > 0
        assert s.get_min_offset_in_queue(TOPIC, 0) < victim.queue_offset
        by_poll = drain_poll(a, 100)
        by_arrow = drain_arrow(b_, 1000)
        assert by_poll == by_arrow
        assert a.skipped == b_.skipped > 0
        assert a.damaged == b_.damaged == 1
        assert a.positions() == b_.positions() == {0: 1200}
        assert len(by_arrow[0]) + b_.skipped + b_.damaged == 1200
