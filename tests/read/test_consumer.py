"""Tests for rocketstore.consumers.consumer.Consumer.

Most tests run against ``FakeStore`` (an in-memory model of the store contract
the consumer relies on, answering ``get_message`` per docs/format.md §18.3) and, once
``MessageStore`` implements that contract, against a real store too (the
``store`` fixture). Tests that inspect calls or fake retention use ``fake``.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from helpers.read_util import Iteration, hang_guard
from rocketstore import GetStatus, MessageStore, ReadOnlyStoreError, StoreClosedError
from rocketstore.consumers.consumer import Consumer

# -- the fake store -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FakeMsg:
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tags: str | None


@dataclasses.dataclass(frozen=True)
class FakeResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[FakeMsg]
    damaged: int = 0
    skipped: int = 0


class FakeStore:
    """In-memory store implementing the consumer contract (``ConsumerStore``)."""

    def __init__(self, *, read_only: bool = False, scan_units: int = 800) -> None:
        self.read_only = read_only
        self.scan_units = scan_units  # CQ units one get_message scans (16000 / 20)
        self.queues: dict[tuple[str, int], list[FakeMsg]] = {}
        self.mins: dict[tuple[str, int], int] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.get_calls: list[tuple[Any, ...]] = []
        self.commit_calls: list[tuple[str, str, int, int]] = []
        self.persist_calls = 0
        self.wait_calls: list[float | None] = []
        self._seq = 0
        self._cond = threading.Condition()
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError("store is shut down")

    # writer side
    def put(self, topic: str, body: bytes, queue_id: int = 0, tags: str | None = None) -> int:
        with self._cond:
            self._check()
            q = self.queues.setdefault((topic, queue_id), [])
            q.append(FakeMsg(topic, queue_id, len(q), body, tags))
            self._seq += 1
            self._cond.notify_all()
            return len(q) - 1

    def expire(self, topic: str, queue_id: int, new_min: int) -> None:
        with self._cond:
            self.mins[(topic, queue_id)] = new_min

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # the contract
    @property
    def dispatch_seq(self) -> int:
        self._check()
        return self._seq

    def wait_for_dispatch(self, seq: int, timeout: float | None) -> int:
        self.wait_calls.append(timeout)
        with self._cond:
            self._cond.wait_for(lambda: self._seq != seq or self._closed, timeout)
            self._check()
            return self._seq

    def queue_ids(self, topic: str) -> list[int]:
        self._check()
        with self._cond:
            return sorted(q for (t, q) in self.queues if t == topic)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        self._check()
        return self.mins.get((topic, queue_id), 0)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        self._check()
        return len(self.queues.get((topic, queue_id), []))

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        tags: list[str] | None = None,
    ) -> FakeResult:
        self._check()
        self.get_calls.append((group, topic, queue_id, offset, max_msg_nums, tags))
        with self._cond:
            msgs = list(self.queues.get((topic, queue_id), []))
        lo, hi = self.get_min_offset_in_queue(topic, queue_id), len(msgs)

        def result(status: GetStatus, nxt: int, found: list[FakeMsg] | None = None) -> FakeResult:
            return FakeResult(status, nxt, lo, hi, found or [])

        if hi == 0:
            return result(GetStatus.NO_MESSAGE_IN_QUEUE, 0)
        if offset < lo:
            return dataclasses.replace(result(GetStatus.OFFSET_TOO_SMALL, lo), skipped=lo - offset)
        if offset == hi:
            return result(GetStatus.OFFSET_OVERFLOW_ONE, offset)
        if offset > hi:
            return result(GetStatus.OFFSET_OVERFLOW_BADLY, hi)
        found: list[FakeMsg] = []
        i = offset
        while i < hi and i - offset < max(self.scan_units, max_msg_nums):
            if len(found) >= max_msg_nums:
                break
            m = msgs[i]
            if tags is None or "*" in tags or m.tags in tags:
                found.append(m)
            i += 1
        status = GetStatus.FOUND if found else GetStatus.NO_MATCHED_MESSAGE
        return result(status, i, found)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._check()
        if self.read_only:
            raise ReadOnlyStoreError("read-only")
        self.commit_calls.append((group, topic, queue_id, offset))
        self.offsets[(group, topic, queue_id)] = offset

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        for q in sorted(offsets):
            self.commit_offset(group, topic, q, offsets[q])

    def persist_offsets(self) -> None:
        self._check()
        self.persist_calls += 1

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        self._check()
        return self.offsets.get((group, topic, queue_id), -1)


# -- fixtures and helpers ------------------------------------------------------

@pytest.fixture(params=["fake", "real"])
def store(request: pytest.FixtureRequest) -> Any:
    """A started store: the fake, and the real one."""
    if request.param == "fake":
        return FakeStore()
    open_store: Callable[..., MessageStore] = request.getfixturevalue("open_store")
    # small segments: the default 1 GiB CommitLog file is reserved on disk
    return open_store(mapped_file_size_commit_log=1 << 20,
                      mapped_file_size_consume_queue=1000 * 20)


@pytest.fixture
def fake() -> FakeStore:
    return FakeStore()


def consumer(store: Any, group: str = "g", topic: str = "T", **kw: Any) -> Consumer:
    """Through ``store.consumer`` where the store has it (and takes ``kw``), else the class."""
    factory = getattr(store, "consumer", None)
    if factory is not None and set(kw) <= set(inspect.signature(factory).parameters):
        c: Consumer = factory(group, topic, **kw)
        return c
    return Consumer(store, group, topic, **kw)


def settle(store: Any, topic: str, counts: dict[int, int], timeout: float = 5.0) -> None:
    """Wait until every queue in ``counts`` has that many messages visible."""
    deadline = time.monotonic() + timeout
    while True:
        ids = set(store.queue_ids(topic))
        if all(q in ids and store.get_max_offset_in_queue(topic, q) >= n
               for q, n in counts.items()):
            return
        assert time.monotonic() < deadline, f"messages not dispatched: {counts}"
        time.sleep(0.005)


def drain(c: Consumer, n: int, timeout: float = 5.0, **kw: Any) -> list[Any]:
    """Poll until ``n`` messages were returned (fails after ``timeout``)."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"got {len(out)} of {n} messages"
        out.extend(c.poll(timeout=0.2, **kw))
    return out


def ids(msgs: list[Any]) -> list[tuple[int, int]]:
    return [(m.queue_id, m.queue_offset) for m in msgs]


def fill(store: Any, topic: str, queues: dict[int, int], tags: str | None = None) -> None:
    for q, n in queues.items():
        for i in range(n):
            store.put(topic, f"{q}-{i}".encode(), q, tags=tags)
    settle(store, topic, queues)


# -- tests ------------------------------------------------------------------------


def test_poll_returns_every_message_in_queue_order(store: Any) -> None:
    fill(store, "T", {0: 5, 1: 3, 2: 4})
    c = consumer(store)
    assert c.assignment() == [0, 1, 2]
    got = drain(c, 12)
    for q in range(3):
        assert [o for (qq, o) in ids(got) if qq == q] == list(range({0: 5, 1: 3, 2: 4}[q]))
    assert c.positions() == {0: 5, 1: 3, 2: 4}
    assert c.poll(timeout=0) == []


def test_poll_is_round_robin_across_queues(store: Any) -> None:
    fill(store, "T", {0: 10, 1: 10, 2: 10})
    c = consumer(store)
    # each poll shares max_messages between the queues and starts one queue further
    assert ids(c.poll(timeout=1, max_messages=3)) == [(0, 0), (1, 0), (2, 0)]
    assert ids(c.poll(timeout=1, max_messages=3)) == [(1, 1), (2, 1), (0, 1)]
    assert ids(c.poll(timeout=1, max_messages=1)) == [(2, 2)]
    assert ids(c.poll(timeout=1, max_messages=1)) == [(0, 2)]
    big = c.poll(timeout=1, max_messages=9)
    assert sorted(q for q, _ in ids(big)) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # the share of a caught-up queue goes to the others
    rest = c.poll(timeout=1, max_messages=100)  # 3 + 3 + 1 + 1 + 9 = 17 read, 13 left
    assert len(rest) == 13 and c.positions() == {0: 10, 1: 10, 2: 10}


def test_per_queue_turn_is_capped_so_no_queue_starves(fake: FakeStore) -> None:
    fill(fake, "T", {0: 100, 1: 1})
    got = Consumer(fake, "g", "T").poll(timeout=0, max_messages=100)
    assert (1, 0) in ids(got)
    assert len(got) == 100
    assert max(call[4] for call in fake.get_calls) == 32


def test_commit_and_resume(store: Any) -> None:
    fill(store, "T", {0: 6, 1: 2})
    c = consumer(store)
    drain(c, 8)
    c.seek(0, 4)
    c.commit()
    assert store.query_offset("g", "T", 0) == 4
    assert store.query_offset("g", "T", 1) == 2
    assert c.committed(0) == 4
    c.close()
    resumed = consumer(store)
    assert resumed.positions() == {0: 4, 1: 2}
    assert ids(drain(resumed, 2)) == [(0, 4), (0, 5)]
    other = consumer(store, group="other")
    assert other.positions() == {0: 0, 1: 0}
    assert other.committed(0) == -1


def test_commit_explicit_offsets(store: Any) -> None:
    fill(store, "T", {0: 3})
    c = consumer(store)
    c.commit({0: 2})
    assert store.query_offset("g", "T", 0) == 2
    assert c.position(0) == 0
    with pytest.raises(ValueError):
        c.commit({0: -1})


def test_seek_and_position(store: Any) -> None:
    fill(store, "T", {0: 10, 1: 2})
    c = consumer(store)
    assert c.position(0) == 0
    c.seek(0, 7)
    assert c.position(0) == 7
    assert ids(drain(c, 5)) == [(0, 7), (0, 8), (0, 9), (1, 0), (1, 1)]
    assert c.position(0) == 10
    c.seek_to_beginning([0])
    assert c.position(0) == 0
    c.seek_to_end()
    assert c.positions() == {0: 10, 1: 2}
    with pytest.raises(ValueError, match="queue 5"):
        c.seek(5, 0)
    with pytest.raises(ValueError, match="queue 5"):
        c.position(5)
    with pytest.raises(ValueError):
        c.seek(0, -1)


def test_seek_beyond_the_end_is_corrected_to_max(store: Any) -> None:
    fill(store, "T", {0: 3})
    c = consumer(store)
    c.seek(0, 100)
    assert c.poll(timeout=0) == []
    assert c.position(0) == 3  # OFFSET_OVERFLOW_BADLY -> next_begin_offset = max
    store.put("T", b"new", 0)
    assert ids(drain(c, 1)) == [(0, 3)]


def test_latest_start(store: Any) -> None:
    fill(store, "T", {0: 4})
    c = consumer(store, start="latest")
    assert c.positions() == {0: 4}
    assert c.poll(timeout=0) == []
    store.put("T", b"after", 0)
    store.put("T", b"new queue", 3)  # a queue that appears later starts at its min
    got = drain(c, 2)
    assert sorted(ids(got)) == [(0, 4), (3, 0)]
    assert sorted(m.body for m in got) == [b"after", b"new queue"]


def test_latest_start_does_not_override_committed_offsets(store: Any) -> None:
    fill(store, "T", {0: 4})
    store.commit_offset("g", "T", 0, 1)
    assert consumer(store, start="latest").position(0) == 1


def test_new_queue_is_picked_up_by_the_next_poll(store: Any) -> None:
    fill(store, "T", {0: 1})
    c = consumer(store)
    assert ids(drain(c, 1)) == [(0, 0)]
    store.put("T", b"q2", 2)
    store.put("other", b"x", 5)  # another topic's queue is not ours
    got = drain(c, 1)
    assert ids(got) == [(2, 0)]
    assert c.assignment() == [0, 2]


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
def test_empty_topic_then_data(store: Any) -> None:
    c = consumer(store)
    assert c.assignment() == []
    assert c.poll(timeout=0) == []
    store.put("T", b"x", 1)
    assert ids(drain(c, 1)) == [(1, 0)]


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
def test_poll_wakes_up_when_a_message_arrives(store: Any) -> None:
    """A poll without a timeout returns at all only because the put woke it."""
    c = consumer(store)
    timer = threading.Timer(0.1, lambda: store.put("T", b"late", 0))
    timer.start()
    with hang_guard(store):
        got = c.poll(timeout=None)
    timer.join()
    assert [m.body for m in got] == [b"late"]


def test_timeout_returns_empty_without_busy_spinning(fake: FakeStore) -> None:
    fill(fake, "T", {0: 2})
    c = Consumer(fake, "g", "T")
    drain(c, 2)
    fake.get_calls.clear()
    fake.wait_calls.clear()
    t0 = time.monotonic()
    assert c.poll(timeout=0.3) == []
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.29  # it waited out its timeout
    assert len(fake.wait_calls) == 1  # one wait for the whole timeout
    assert fake.wait_calls[0] is not None and 0.2 < fake.wait_calls[0] <= 0.3
    assert len(fake.get_calls) == 1  # one look at the one queue, then sleep
    fake.wait_calls.clear()
    assert c.poll(timeout=0) == []
    assert fake.wait_calls == []  # timeout 0 never waits


def test_tags_are_passed_through_and_filter(fake: FakeStore) -> None:
    fake.scan_units = 3  # one scan covers max(3, max_msg_nums) = 32 units
    for i in range(100):
        fake.put("T", f"b{i}".encode(), 0, tags="B")
    fake.put("T", b"a", 0, tags="A")
    c = Consumer(fake, "g", "T", tags=["A"])
    assert c.tags == ["A"]
    got = c.poll(timeout=0)
    assert [m.body for m in got] == [b"a"]
    assert len(fake.get_calls) == 5  # 3 x NO_MATCHED_MESSAGE over 32 units, FOUND, end
    assert all(call[5] == ["A"] for call in fake.get_calls)
    assert c.position(0) == 101


def test_tags_filter_positions_move_past_skipped_entries(store: Any) -> None:
    for tag in ("x", "y", "x", "y"):
        store.put("T", tag.encode(), 0, tags=tag)
    settle(store, "T", {0: 4})
    c = consumer(store, tags=["y"])
    got = drain(c, 2)
    assert [m.body for m in got] == [b"y", b"y"]
    assert c.position(0) == 4


def test_tags_must_be_a_list(fake: FakeStore) -> None:
    with pytest.raises(TypeError):
        Consumer(fake, "g", "T", tags="A")


def test_expired_offsets_move_to_min(fake: FakeStore) -> None:
    fill(fake, "T", {0: 10})
    c = Consumer(fake, "g", "T")
    assert c.position(0) == 0
    fake.expire("T", 0, 6)  # OFFSET_TOO_SMALL -> next_begin_offset = min
    assert ids(c.poll(timeout=0)) == [(0, 6), (0, 7), (0, 8), (0, 9)]


def test_read_only_store_keeps_commits_in_memory(fake: FakeStore) -> None:
    fill(fake, "T", {0: 3})
    fake.offsets[("g", "T", 0)] = 1
    fake.read_only = True
    c = Consumer(fake, "g", "T")
    assert c.position(0) == 1
    assert c.committed(0) == 1
    drain(c, 2)
    with pytest.warns(RuntimeWarning, match="nothing is persisted"):
        c.commit()
    assert fake.commit_calls == []
    assert fake.persist_calls == 0
    assert fake.offsets[("g", "T", 0)] == 1
    assert c.committed(0) == 3
    # The warning comes once per consumer; commits keep working.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c.commit({0: 2})
        c.close()  # the auto-commit of close does not warn either
    assert c._commits.committed == {0: 3}


def test_commit_survives_a_store_that_raises_read_only(fake: FakeStore) -> None:
    fill(fake, "T", {0: 1})
    c = Consumer(fake, "g", "T")

    def refuse(*args: Any) -> None:
        raise ReadOnlyStoreError("read-only")

    fake.commit_offsets = refuse  # type: ignore[method-assign]
    with pytest.warns(RuntimeWarning, match="nothing is persisted"):
        c.commit()
    assert c.committed(0) == -1  # the store has nothing ...
    assert c._commits.committed == {0: 0}  # ... the consumer remembers


def test_iteration_yields_forever_and_stops_when_the_store_closes(store: Any) -> None:
    fill(store, "T", {0: 3, 1: 2})
    it = Iteration(consumer(store))
    deadline = time.monotonic() + 5
    it.wait_for(5, deadline)
    store.put("T", b"more", 1)
    it.wait_for(6, deadline)
    assert not it.done.is_set()  # still blocked waiting for more
    store.shutdown()
    assert it.done.wait(5), "iteration did not stop after shutdown"
    assert sorted(ids(it.seen)) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_iteration_moves_positions_one_message_at_a_time(store: Any) -> None:
    fill(store, "T", {0: 10})
    c = consumer(store)
    it = iter(c)
    for _ in range(3):
        next(it)
    assert c.position(0) == 3
    c.commit()
    assert store.query_offset("g", "T", 0) == 3
    assert [m.queue_offset for m in c.poll(timeout=0, max_messages=2)] == [3, 4]
    c.seek(0, 8)  # drops what iteration had buffered
    assert [m.queue_offset for m in c.poll(timeout=0)] == [8, 9]


def test_close_commits_unless_auto_commit_is_off(store: Any) -> None:
    # Auto-commit is on by default, as in the Kafka clients: close commits.
    fill(store, "T", {0: 2})
    with consumer(store, group="manual", auto_commit=False) as c:
        drain(c, 2)
    assert c.closed
    assert store.query_offset("manual", "T", 0) == -1
    with consumer(store) as c2:
        drain(c2, 2)
    assert store.query_offset("g", "T", 0) == 2
    c2.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        c2.poll()
    assert list(c2) == []


def test_sync_commit_persists_and_sync_false_does_not(fake: FakeStore) -> None:
    fill(fake, "T", {0: 3})
    c = Consumer(fake, "g", "T", auto_commit=False)
    drain(c, 3)
    c.commit(sync=False)
    assert fake.offsets[("g", "T", 0)] == 3 and fake.persist_calls == 0
    c.commit()
    assert fake.persist_calls == 1


def test_auto_commit_in_poll_commits_what_earlier_polls_returned(fake: FakeStore) -> None:
    fill(fake, "T", {0: 10})
    c = Consumer(fake, "g", "T", auto_commit_interval=0)
    assert ids(c.poll(timeout=0, max_messages=4)) == [(0, i) for i in range(4)]
    # The first poll had nothing to commit yet (position 0).
    assert fake.offsets[("g", "T", 0)] == 0
    assert ids(c.poll(timeout=0, max_messages=4)) == [(0, i) for i in range(4, 8)]
    # Committed before fetching: what the first poll returned, not this one.
    assert fake.offsets[("g", "T", 0)] == 4
    assert fake.persist_calls == 0  # sync=False inside poll
    c.close()
    assert fake.offsets[("g", "T", 0)] == 8
    assert fake.persist_calls == 1  # close commits durably


def test_auto_commit_waits_for_its_interval(fake: FakeStore) -> None:
    fill(fake, "T", {0: 10})
    c = Consumer(fake, "g", "T", auto_commit_interval=3600)
    c.poll(timeout=0, max_messages=4)
    c.poll(timeout=0, max_messages=4)
    assert fake.commit_calls == []
    c._commits.last_auto_commit -= 3600  # the interval passed
    c.poll(timeout=0, max_messages=1)
    assert fake.commit_calls == [("g", "T", 0, 8)]


def test_auto_commit_off_never_commits(fake: FakeStore) -> None:
    fill(fake, "T", {0: 10})
    c = Consumer(fake, "g", "T", auto_commit=False, auto_commit_interval=0)
    c.poll(timeout=0, max_messages=4)
    c.poll(timeout=0, max_messages=4)
    c.close()
    assert fake.commit_calls == [] and fake.persist_calls == 0


def test_close_after_store_shutdown_does_not_raise(fake: FakeStore) -> None:
    fill(fake, "T", {0: 2})
    c = Consumer(fake, "g", "T")
    drain(c, 2)
    fake.shutdown()
    c.close()
    assert c.closed


def test_argument_validation(fake: FakeStore) -> None:
    with pytest.raises(ValueError):
        Consumer(fake, "g", "T", start="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Consumer(fake, "", "T")
    with pytest.raises(TypeError):
        Consumer(fake, "g", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Consumer(fake, "g", "T").poll(max_messages=0)


def test_closed_store(fake: FakeStore) -> None:
    c = Consumer(fake, "g", "T")
    fake.shutdown()
    with pytest.raises(StoreClosedError):
        c.poll(timeout=0)


def test_repr(fake: FakeStore) -> None:
    fill(fake, "T", {0: 1})
    assert repr(Consumer(fake, "g", "T")) == "Consumer(group='g', topic='T', queues [0])"
