"""The high-level consumer (``store.consumer``) against a real store."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import pytest

from helpers.read_util import SMALL, Iteration, hang_guard, record_waits, wait_dispatched
from helpers.store_util import offset_table
from rocketstore import MessageStore

OpenStore = Callable[..., MessageStore]

QUEUES = 4


def _fill(store: MessageStore, per_queue: int, topic: str = "T", start: int = 0) -> None:
    for i in range(start, start + per_queue):
        for q in range(QUEUES):
            assert store.put(topic, f"{q}:{i}".encode(), q).ok
    wait_dispatched(store)


def _drain(consumer, want: int, timeout: float = 5.0, max_messages: int = 100) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        out += consumer.poll(timeout=0.5, max_messages=max_messages)
    return out


def _check_order(msgs: list, expect: dict[int, range]) -> None:
    per_q: dict[int, list[int]] = {}
    for m in msgs:
        assert m.body == f"{m.queue_id}:{m.queue_offset}".encode()
        per_q.setdefault(m.queue_id, []).append(m.queue_offset)
    assert {q: list(r) for q, r in expect.items() if len(r)} == per_q


def test_poll_reads_all_queues(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, 10)
    c = store.consumer("g", "T")
    assert c.assignment() == [0, 1, 2, 3]
    first = c.poll(timeout=1.0, max_messages=8)
    assert len(first) == 8
    assert {m.queue_id for m in first} == {0, 1, 2, 3}  # every queue gets a share
    rest = _drain(c, 32)
    _check_order(first + rest, {q: range(10) for q in range(QUEUES)})
    assert c.poll(timeout=0) == []
    assert c.positions() == {q: 10 for q in range(QUEUES)}


def test_commit_reopen_resume(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL)
    _fill(store, 10)
    c = store.consumer("g", "T")
    got = c.poll(timeout=1.0, max_messages=22)
    assert len(got) == 22
    pos = c.positions()
    assert sum(pos.values()) == 22
    c.commit()
    for q, off in pos.items():
        assert store.query_offset("g", "T", q) == off
        assert c.committed(q) == off
    c.close()
    store.shutdown()

    store = open_store(**SMALL)
    c2 = store.consumer("g", "T")
    assert c2.positions() == pos
    rest = _drain(c2, 18)
    assert len(rest) == 18
    _check_order(got + rest, {q: range(10) for q in range(QUEUES)})
    _check_order(rest, {q: range(pos[q], 10) for q in range(QUEUES)})
    # another group starts from the beginning
    other = store.consumer("other", "T")
    assert other.positions() == {q: 0 for q in range(QUEUES)}


def test_close_commits_durably_unless_auto_commit_is_off(
    open_store: OpenStore, store_path: str
) -> None:
    store = open_store(**SMALL)
    _fill(store, 3)
    with store.consumer("g1", "T", auto_commit=False) as c:
        assert len(_drain(c, 12)) == 12
    assert store.query_offset("g1", "T", 0) == -1
    with store.consumer("g2", "T") as c:  # auto-commit is on by default
        assert len(_drain(c, 12)) == 12
    assert [store.query_offset("g2", "T", q) for q in range(QUEUES)] == [3] * QUEUES
    # Durable on close: on disk (the journal, docs/format.md §13.3) before
    # any flush or shutdown.
    table = offset_table(store_path)
    assert table["T@g2"] == {q: 3 for q in range(QUEUES)}
    assert "T@g1" not in table


def test_seek_and_position(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, 10)
    c = store.consumer("g", "T")
    assert c.position(2) == 0
    _drain(c, 40)
    assert c.position(2) == 10
    c.seek(2, 4)
    assert c.position(2) == 4
    again = c.poll(timeout=1.0)
    assert [(m.queue_id, m.queue_offset) for m in again] == [(2, i) for i in range(4, 10)]
    # beyond the end: corrected to the end by the next poll, nothing delivered
    c.seek(1, 500)
    assert c.poll(timeout=0.1) == []
    assert c.position(1) == 10
    c.seek_to_beginning([3])
    assert c.position(3) == 0
    got = c.poll(timeout=1.0)
    assert [(m.queue_id, m.queue_offset) for m in got] == [(3, i) for i in range(10)]
    c.seek_to_beginning()
    assert c.positions() == {q: 0 for q in range(QUEUES)}
    c.seek_to_end()
    assert c.positions() == {q: 10 for q in range(QUEUES)}
    with pytest.raises(ValueError):
        c.position(9)
    with pytest.raises(ValueError):
        c.seek(9, 0)
    with pytest.raises(ValueError):
        c.seek(0, -1)


def test_start_latest(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, 5)
    c = store.consumer("g", "T", start="latest")
    assert c.positions() == {q: 5 for q in range(QUEUES)}
    assert c.poll(timeout=0.05) == []
    assert store.put("T", b"1:5", 1).ok
    # a queue that appears after the consumer was made starts at its min offset
    assert store.put("T", b"6:0", 6).ok
    assert store.put("T", b"6:1", 6).ok
    got = _drain(c, 3)
    assert sorted((m.queue_id, m.queue_offset) for m in got) == [(1, 5), (6, 0), (6, 1)]
    assert c.assignment() == [0, 1, 2, 3, 6]


def test_iteration(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, 5)
    c = store.consumer("g", "T")
    seen = []
    for m in itertools.islice(c, 7):
        seen.append(m)
        c.commit()  # commits exactly what the loop has seen
        committed = sum(store.query_offset("g", "T", q) for q in range(QUEUES))
        assert committed == len(seen)
    rest = list(itertools.islice(c, 13))
    _check_order(seen + rest, {q: range(5) for q in range(QUEUES)})


def test_iteration_ends_when_store_shuts_down(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, 1)
    it = Iteration(store.consumer("g", "T"))
    it.wait_for(QUEUES, time.monotonic() + 5)
    assert len(it.seen) == QUEUES
    store.shutdown()
    assert it.done.wait(5), "iteration did not stop after shutdown"
    it.thread.join(5)


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
def test_poll_timeout_on_empty_topic(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(**SMALL)
    _fill(store, 1, topic="Other")
    waits = record_waits(store, monkeypatch)
    c = store.consumer("g", "Empty")
    assert c.assignment() == []
    t0 = time.monotonic()
    assert c.poll(timeout=0.2) == []
    assert time.monotonic() - t0 >= 0.18  # it waited out its timeout
    assert waits and all(w is not None and 0 < w <= 0.2 for w in waits), waits
    waits.clear()
    assert c.poll(timeout=0) == []
    assert waits == []  # timeout 0 never waits
    # also on a topic whose queues are all consumed
    c2 = store.consumer("g", "Other")
    assert len(_drain(c2, QUEUES)) == QUEUES
    waits.clear()
    t0 = time.monotonic()
    assert c2.poll(timeout=0.2) == []
    assert time.monotonic() - t0 >= 0.18
    assert waits and all(w is not None and 0 < w <= 0.2 for w in waits), waits


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
@pytest.mark.parametrize("topic_exists", [True, False])
def test_poll_wakes_on_put_from_another_thread(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch, topic_exists: bool
) -> None:
    """A consumer waiting without a timeout is woken by a put: the poll
    returns at all only because the put woke it."""
    store = open_store(**SMALL)
    if topic_exists:
        _fill(store, 1)
    # exclusive: a shared member wakes every heartbeat interval to apply
    # membership changes; this one waits for the put alone.
    c = store.consumer("g", "T", start="latest", exclusive=True)
    assert c.poll(timeout=0) == []
    waits = record_waits(store, monkeypatch)

    def writer() -> None:
        while not waits:  # the consumer is about to wait (or waits)
            time.sleep(0.01)
        assert store.put("T", b"late", 2).ok

    t = threading.Thread(target=writer)
    t.start()
    with hang_guard(store):
        got = c.poll(timeout=None)
    t.join()
    assert [m.body for m in got] == [b"late"]
    assert waits and all(w is None for w in waits), waits
