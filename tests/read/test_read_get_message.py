"""``MessageStore.get_message``: the statuses of docs/format.md §18.3 and the transfer limits.

Every store uses small segments (64 KiB CommitLog, 200-unit consume queues).
"""

from __future__ import annotations

import os
import struct
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.read_util import CQ_UNITS_PER_FILE, SMALL, cq_dir, listing, wait_dispatched
from rocketstore import GetStatus, MessageStore, PutStatus, StoreClosedError, UnknownTopicWarning

OpenStore = Callable[..., MessageStore]


def _fill(store: MessageStore, topic: str, queue_id: int, n: int, **kw: object) -> list:
    results = [
        store.put(topic, f"{topic}-{queue_id}-{i}".encode(), queue_id, **kw) for i in range(n)
    ]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    wait_dispatched(store)
    return results


def test_every_argument_form_pulls_the_same(open_store: OpenStore) -> None:
    """The usual call (positional, no tags or a list: the native fast path)
    and every other form (keywords, a tag expression, a str subclass as the
    group: the Python definition) pull the same; the group rule holds in
    both."""
    store = open_store(**SMALL)
    _fill(store, "T", 0, 5, tags="a")
    _fill(store, "T", 0, 5, tags="b")

    class Group(str):
        pass

    def seen(r: object) -> tuple:
        return (r.status, r.next_begin_offset, r.min_offset, r.max_offset,  # type: ignore[attr-defined]
                [m.body for m in r.messages])  # type: ignore[attr-defined]

    every = seen(store.get_message("g", "T", 0, 0))
    assert len(every[4]) == 10
    for r in (store.get_message("g", "T", 0, 0, 32), store.get_message("g", "T", 0, 0, 32, None),
              store.get_message("g", topic="T", queue_id=0, offset=0),
              store.get_message(Group("g"), "T", 0, 0),
              MessageStore.get_message(store, "g", "T", 0, 0)):
        assert seen(r) == every
    only_a = seen(store.get_message("g", "T", 0, 0, 32, ["a"]))
    assert len(only_a[4]) == 5
    for tags in ("a", ("a",), ["a", "c"], "a || c"):
        assert seen(store.get_message("g", "T", 0, 0, 32, tags)) == only_a
    assert seen(store.get_message("g", "T", 0, 0, 3))[4] == every[4][:3]
    with pytest.raises(ValueError):
        store.get_message("", "T", 0, 0)
    with pytest.raises(TypeError):
        store.get_message(5, "T", 0, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.get_message("g", "T", 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        store.get_message("g", "T", 0, 0, 32, None, 1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        MessageStore.get_message(object(), "g", "T", 0, 0)  # type: ignore[arg-type]


# -- NO_MESSAGE_IN_QUEUE ------------------------------------------------------------


def test_unknown_queue_is_empty_and_creates_nothing(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL)
    _fill(store, "T", 0, 3)
    before = listing(store_path)

    for topic, qid, offset in [("T", 3, 0), ("T", 3, 7), ("Nope", 0, 0), ("Nope", 5, 2)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = store.get_message("g", topic, qid, offset, 32, None)
        # Said once per topic and queue (offset 7 of queue T/3 was warned about at 0).
        assert [w.category for w in caught] == (
            [] if (topic, qid, offset) == ("T", 3, 7) else [UnknownTopicWarning])
        assert r.status is GetStatus.NO_MESSAGE_IN_QUEUE, (topic, qid, offset)
        assert r.next_begin_offset == 0
        assert r.messages == []
        assert len(r) == 0
        assert (r.min_offset, r.max_offset) == (0, 0)
        # the other per-queue reads of an unknown queue create nothing either
        assert store.get_max_offset_in_queue(topic, qid) == 0
        assert store.get_min_offset_in_queue(topic, qid) == 0

    assert not cq_dir(store_path, "T", 3).exists()
    assert not cq_dir(store_path, "Nope").exists()
    assert listing(store_path) == before
    assert store.queue_ids("T") == [0]
    assert "Nope" not in store.topics()


def test_unknown_queue_in_read_only_store_creates_nothing(
    open_store: OpenStore, store_path: str
) -> None:
    w = open_store(**SMALL)
    _fill(w, "T", 0, 2)
    w.shutdown()
    before = listing(store_path)
    ro = open_store(read_only=True, **SMALL)
    with pytest.warns(UnknownTopicWarning, match="queue 9 of topic 'T'"):
        r = ro.get_message("g", "T", 9, 0)
    assert r.status is GetStatus.NO_MESSAGE_IN_QUEUE and r.next_begin_offset == 0
    with pytest.warns(UnknownTopicWarning, match="topic 'Other' does not exist"):
        r = ro.get_message("g", "Other", 0, 0)
    assert r.status is GetStatus.NO_MESSAGE_IN_QUEUE and r.next_begin_offset == 0
    ro.shutdown()
    assert listing(store_path) == before


# -- OFFSET_TOO_SMALL -----------------------------------------------------------------


def test_offset_too_small_after_first_cq_file_lost(open_store: OpenStore, store_path: str) -> None:
    """OFFSET_TOO_SMALL needs a queue whose min offset is > 0.

    The queue's first CQ file is gone while the CommitLog still holds its
    messages (retention would have deleted them first: the next test). A
    read-only open repairs nothing: the queue's min offset is the first unit
    of its first remaining file (200), and reads below it are corrected to
    it. A writer's open then rebuilds the lost file from the CommitLog
    (docs/format.md §15.3, "A missing first file"): the min offset is 0 again.
    """
    store = open_store(**SMALL)
    _fill(store, "T", 0, 450)
    store.shutdown()
    first = cq_dir(store_path, "T", 0) / f"{0:020d}"
    assert first.exists()
    os.remove(first)

    s = open_store(read_only=True, **SMALL)
    assert s.get_min_offset_in_queue("T", 0) == CQ_UNITS_PER_FILE
    assert s.get_max_offset_in_queue("T", 0) == 450
    for offset in (0, 5, CQ_UNITS_PER_FILE - 1):
        r = s.get_message("g", "T", 0, offset)
        assert r.status is GetStatus.OFFSET_TOO_SMALL, offset
        assert r.next_begin_offset == CQ_UNITS_PER_FILE
        assert r.messages == []
        assert (r.min_offset, r.max_offset) == (CQ_UNITS_PER_FILE, 450)
    r = s.get_message("g", "T", 0, CQ_UNITS_PER_FILE, 3)
    assert r.status is GetStatus.FOUND
    assert [m.queue_offset for m in r.messages] == [200, 201, 202]
    assert [m.body for m in r.messages] == [f"T-0-{i}".encode() for i in (200, 201, 202)]
    s.shutdown()

    s = open_store(**SMALL)
    assert first.exists()
    assert s.get_min_offset_in_queue("T", 0) == 0
    assert s.get_max_offset_in_queue("T", 0) == 450
    r = s.get_message("g", "T", 0, 0, 3)
    assert r.status is GetStatus.FOUND
    assert [m.body for m in r.messages] == [f"T-0-{i}".encode() for i in (0, 1, 2)]
    s.shutdown()


PRE_BLANK_UNIT = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)


def test_offset_too_small_on_pre_blank_queue(open_store: OpenStore, store_path: str) -> None:
    """A queue whose first units are pre-blank (docs/format.md §9, §14).

    RocketMQ fills units ``0..N-1`` with ``(0, 0x7FFFFFFF, 0)`` when a queue's
    first CQ file is created at logical offset N. The public API cannot create
    such a queue, so the first 5 units of a written queue are overwritten with
    pre-blank units (the records behind units 5.. carry queue offsets 5..).
    Pre-blank units are not messages: min offset 5, reads below it are
    OFFSET_TOO_SMALL, also after restarts and in a read-only store.
    """
    store = open_store(**SMALL)
    results = _fill(store, "T", 0, 15)
    store.shutdown()
    with open(cq_dir(store_path, "T", 0) / f"{0:020d}", "r+b") as f:
        f.write(PRE_BLANK_UNIT * 5)

    for read_only in (False, True, False):
        s = open_store(read_only=read_only, **SMALL)
        n = s.get_max_offset_in_queue("T", 0)
        assert s.get_min_offset_in_queue("T", 0) == 5
        for offset in (0, 4):
            r = s.get_message("g", "T", 0, offset)
            assert r.status is GetStatus.OFFSET_TOO_SMALL
            assert r.next_begin_offset == 5
            assert r.messages == []
        r = s.get_message("g", "T", 0, 5, 3)
        assert r.status is GetStatus.FOUND
        assert [m.body for m in r.messages] == [b"T-0-5", b"T-0-6", b"T-0-7"]
        assert r.next_begin_offset == 8
        assert s.get_earliest_message_time("T", 0) == results[5].store_timestamp
        assert s.get_message_store_timestamp("T", 0, 2) == -1
        assert s.get_offset_in_queue_by_time("T", 0, 0) == 5
        c = s.consumer("g", "T", auto_commit=False)  # each round starts afresh
        assert c.position(0) == 5
        got = c.poll(timeout=1.0)
        assert [m.queue_offset for m in got] == list(range(5, n))
        c.close()
        if not read_only:
            assert s.put("T", b"more", 0).queue_offset == n
        s.shutdown()


def _expire_first_commit_log_file(
    open_store: OpenStore, store_path: str, n: int, body: bytes
) -> tuple[list, int]:
    """Write ``n`` messages to T/0, shut down, delete CommitLog file 0.

    That is the state RocketMQ's CleanCommitLogService leaves until the CQ
    cleaner runs (docs/format.md §16), or a store whose old segments were removed.
    Returns the put results and the queue offset of the first surviving message.
    """
    store = open_store(**SMALL)
    results = [store.put("T", body, 0) for _ in range(n)]
    assert all(r.ok for r in results)
    store.shutdown()
    os.remove(Path(store_path) / "commitlog" / f"{0:020d}")
    size = SMALL["mapped_file_size_commit_log"]
    first = next(r.queue_offset for r in results if r.wrote_offset >= size)
    return results, first


def test_offset_too_small_after_first_commit_log_file_expired(
    open_store: OpenStore, store_path: str
) -> None:
    """Opening corrects each queue's min offset to the CommitLog min (docs/format.md §18.2).

    Large bodies: the queue's first CQ file reaches past the expired CommitLog
    file, so ``correctMinOffset`` (which scans the first CQ file) finds the
    first surviving unit.
    """
    results, first = _expire_first_commit_log_file(open_store, store_path, 300, b"x" * 400)
    assert 0 < first < CQ_UNITS_PER_FILE
    for read_only in (True, False):
        s = open_store(read_only=read_only, **SMALL)
        assert s.min_phy_offset == SMALL["mapped_file_size_commit_log"]
        assert s.get_min_offset_in_queue("T", 0) == first
        assert s.get_earliest_message_time("T", 0) == results[first].store_timestamp
        r = s.get_message("g", "T", 0, 0, 5)
        assert r.status is GetStatus.OFFSET_TOO_SMALL
        assert r.next_begin_offset == first
        r = s.get_message("g", "T", 0, first, 2)
        assert r.status is GetStatus.FOUND
        assert [m.commit_log_offset for m in r.messages] == [
            results[first].wrote_offset,
            results[first + 1].wrote_offset,
        ]
        s.shutdown()


def test_consumer_skips_units_whose_commit_log_file_is_gone(
    open_store: OpenStore, store_path: str
) -> None:
    """Small bodies: whole CQ files point into the expired CommitLog file.

    ``correctMinOffset`` only scans the first CQ file, so the min offset may
    stay below the surviving data; a consumer still gets exactly the surviving
    messages, in order.
    """
    _, first = _expire_first_commit_log_file(open_store, store_path, 1000, b"m")
    assert first > CQ_UNITS_PER_FILE
    s = open_store(read_only=True, **SMALL)
    c = s.consumer("g", "T")
    got: list[int] = []
    deadline = time.monotonic() + 10
    while len(got) < 1000 - first and time.monotonic() < deadline:
        got += [m.queue_offset for m in c.poll(timeout=0.2, max_messages=100)]
    assert got == list(range(first, 1000))
    assert c.poll(timeout=0.05) == []
    assert c.position(0) == 1000


def test_removed_units_do_not_count_toward_max_msg_nums(
    open_store: OpenStore, store_path: str
) -> None:
    _, first = _expire_first_commit_log_file(open_store, store_path, 1000, b"m")
    s = open_store(read_only=True, **SMALL)
    r = s.get_message("g", "T", 0, 0, 5)
    assert r.status is GetStatus.MESSAGE_WAS_REMOVING
    assert r.messages == []
    assert r.next_begin_offset == CQ_UNITS_PER_FILE  # the whole CQ file's units scanned
    r = s.get_message("g", "T", 0, first - 3, 5)
    assert r.status is GetStatus.FOUND
    assert [m.queue_offset for m in r.messages] == list(range(first, first + 5))
    assert r.next_begin_offset == first + 5


def test_offset_too_small_after_delete_expired_files(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    results = _fill(store, "T", 0, 1200)  # ~ 120 KiB: 2+ CommitLog files
    assert store.delete_expired_files(force=True) >= 1
    cl_min = store.min_phy_offset
    assert cl_min > 0
    new_min = store.get_min_offset_in_queue("T", 0)
    # the first unit whose message is still held
    assert new_min == next(r.queue_offset for r in results if r.wrote_offset >= cl_min)
    r = store.get_message("g", "T", 0, 0)
    assert r.status is GetStatus.OFFSET_TOO_SMALL
    assert r.next_begin_offset == new_min
    r = store.get_message("g", "T", 0, new_min, 1)
    assert r.status is GetStatus.FOUND and r.messages[0].queue_offset == new_min


# -- OFFSET_OVERFLOW_ONE / OFFSET_OVERFLOW_BADLY --------------------------------------


def test_offset_overflow(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, "T", 1, 5)
    r = store.get_message("g", "T", 1, 5)
    assert r.status is GetStatus.OFFSET_OVERFLOW_ONE
    assert r.next_begin_offset == 5
    assert r.messages == []
    assert (r.min_offset, r.max_offset) == (0, 5)
    for offset in (6, 7, 1000, 2**40):
        r = store.get_message("g", "T", 1, offset)
        assert r.status is GetStatus.OFFSET_OVERFLOW_BADLY, offset
        assert r.next_begin_offset == 5  # max (5.x / "Our choices")
        assert r.messages == []


# -- FOUND ------------------------------------------------------------------------------


def test_found_next_begin_offset_is_offset_plus_scanned(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    results = _fill(store, "T", 2, 50)
    r = store.get_message("g", "T", 2, 10, 7)
    assert r.status is GetStatus.FOUND
    assert r.next_begin_offset == 17
    assert [m.queue_offset for m in r.messages] == list(range(10, 17))
    for m in r.messages:
        put = results[m.queue_offset]
        assert m.topic == "T" and m.queue_id == 2
        assert m.body == f"T-2-{m.queue_offset}".encode()
        assert m.commit_log_offset == put.wrote_offset
        assert m.store_size == put.wrote_bytes
        assert m.store_timestamp == put.store_timestamp
        assert m.msg_id == put.msg_id
    assert (r.min_offset, r.max_offset) == (0, 50)

    r = store.get_message("g", "T", 2, 45, 32)
    assert r.status is GetStatus.FOUND
    assert [m.queue_offset for m in r.messages] == [45, 46, 47, 48, 49]
    assert r.next_begin_offset == 50


def test_found_stops_at_cq_file_end(open_store: OpenStore) -> None:
    """A pull reads one CQ file's units only (``getIndexBuffer`` never crosses files)."""
    store = open_store(**SMALL)
    _fill(store, "T", 0, 250)
    r = store.get_message("g", "T", 0, 190, 32)
    assert r.status is GetStatus.FOUND
    assert [m.queue_offset for m in r.messages] == list(range(190, 200))
    assert r.next_begin_offset == 200
    r = store.get_message("g", "T", 0, 200, 32)
    assert [m.queue_offset for m in r.messages] == list(range(200, 232))
    assert r.next_begin_offset == 232


def test_max_msg_nums_respected(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, "T", 0, 40)
    for n in (1, 3, 10, 31):
        r = store.get_message("g", "T", 0, 0, n)
        assert r.status is GetStatus.FOUND
        assert len(r.messages) == n
        assert r.next_begin_offset == n
    # the default in-memory count limit (32) caps a larger request
    r = store.get_message("g", "T", 0, 0, 100)
    assert len(r.messages) == 32
    assert r.next_begin_offset == 32


# -- NO_MATCHED_MESSAGE ----------------------------------------------------------------


def test_no_matched_message_advances_past_scanned_units(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, "T", 0, 150, tags="A")
    r = store.get_message("g", "T", 0, 0, 32, ["Z"])
    assert r.status is GetStatus.NO_MATCHED_MESSAGE
    assert r.messages == []
    assert r.next_begin_offset == 150
    r = store.get_message("g", "T", 0, 40, 32, ["Z"])
    assert r.status is GetStatus.NO_MATCHED_MESSAGE
    assert r.next_begin_offset == 150

    # a longer queue: one pull scans at most to the end of the CQ file
    _fill(store, "T", 1, 300, tags="A")
    r = store.get_message("g", "T", 1, 0, 32, ["Z"])
    assert r.status is GetStatus.NO_MATCHED_MESSAGE
    assert r.next_begin_offset == CQ_UNITS_PER_FILE
    r = store.get_message("g", "T", 1, CQ_UNITS_PER_FILE, 32, ["Z"])
    assert r.status is GetStatus.NO_MATCHED_MESSAGE
    assert r.next_begin_offset == 300


def test_filtered_units_do_not_count_toward_max_msg_nums(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    for i in range(30):
        assert store.put("T", str(i).encode(), 0, tags="A" if i % 3 == 0 else "B").ok
    wait_dispatched(store)
    r = store.get_message("g", "T", 0, 0, 4, ["A"])
    assert r.status is GetStatus.FOUND
    assert [m.queue_offset for m in r.messages] == [0, 3, 6, 9]
    # the batch is full once 4 are taken: the scan stops at the next unit
    # (isTheBatchFull is checked before the tag filter), so units 10.. are
    # left for the next pull
    assert r.next_begin_offset == 10
    r = store.get_message("g", "T", 0, 10, 4, ["A"])
    assert [m.queue_offset for m in r.messages] == [12, 15, 18, 21]
    assert r.next_begin_offset == 22


# -- transfer limits (docs/format.md §18.4 isTheBatchFull) -----------------------------------


def _expected_fit(sizes: list[int], limit: int) -> int:
    """Messages admitted: the first always; then while ``total + size <= limit``."""
    total, n = sizes[0], 1
    while n < len(sizes) and total + sizes[n] <= limit:
        total += sizes[n]
        n += 1
    return n


@pytest.mark.parametrize("body_len", [100, 10])
def test_transfer_byte_limit(open_store: OpenStore, body_len: int) -> None:
    limit = 300
    store = open_store(max_transfer_bytes_on_message_in_memory=limit, **SMALL)
    results = [store.put("T", bytes([65 + i]) * body_len, 0) for i in range(10)]
    wait_dispatched(store)
    sizes = [r.wrote_bytes for r in results]
    want = _expected_fit(sizes, limit)
    if body_len == 100:
        assert want == 1  # 192-byte records: only one fits under 300
    else:
        assert want == 2  # 102-byte records: 204 fits, 306 does not
    r = store.get_message("g", "T", 0, 0, 32)
    assert r.status is GetStatus.FOUND
    assert len(r.messages) == want
    assert sum(m.store_size for m in r.messages) <= limit
    assert r.next_begin_offset == want
    assert [m.body for m in r.messages] == [bytes([65 + i]) * body_len for i in range(want)]
    # walking the queue pull by pull yields every message exactly once
    seen: list[int] = []
    offset = 0
    while offset < 10:
        r = store.get_message("g", "T", 0, offset, 32)
        assert r.status is GetStatus.FOUND
        seen += [m.queue_offset for m in r.messages]
        offset = r.next_begin_offset
    assert seen == list(range(10))


def test_first_message_always_admitted_even_if_larger_than_limit(open_store: OpenStore) -> None:
    limit = 300
    store = open_store(max_transfer_bytes_on_message_in_memory=limit, **SMALL)
    small = store.put("T", b"s" * 10, 0)
    big = store.put("T", b"B" * 1000, 0)
    after = store.put("T", b"a" * 10, 0)
    assert big.wrote_bytes > limit
    wait_dispatched(store)
    # the big message stops a batch that already holds something
    r = store.get_message("g", "T", 0, 0, 32)
    assert [m.queue_offset for m in r.messages] == [small.queue_offset]
    assert r.next_begin_offset == 1
    # but it is delivered alone when it comes first
    r = store.get_message("g", "T", 0, 1, 32)
    assert r.status is GetStatus.FOUND
    assert len(r.messages) == 1
    assert r.messages[0].body == b"B" * 1000
    assert r.messages[0].store_size == big.wrote_bytes
    assert r.next_begin_offset == 2
    r = store.get_message("g", "T", 0, 2, 32)
    assert [m.queue_offset for m in r.messages] == [after.queue_offset]


def test_transfer_count_limit(open_store: OpenStore) -> None:
    """``count > maxTransferCount - 1`` is full: a limit of 5 admits exactly 5."""
    store = open_store(max_transfer_count_on_message_in_memory=5, **SMALL)
    _fill(store, "T", 0, 20)
    r = store.get_message("g", "T", 0, 0, 32)
    assert r.status is GetStatus.FOUND
    assert [m.queue_offset for m in r.messages] == [0, 1, 2, 3, 4]
    assert r.next_begin_offset == 5
    r = store.get_message("g", "T", 0, 5, 3)  # max_msg_nums below the limit wins
    assert [m.queue_offset for m in r.messages] == [5, 6, 7]
    r = store.get_message("g", "T", 0, 17, 32)
    assert [m.queue_offset for m in r.messages] == [17, 18, 19]


# -- argument validation ------------------------------------------------------------


@pytest.mark.parametrize("topic", ["../x", "a/b", "", "x y", "..", "t\x00", "orders.v1"])
def test_invalid_topic_name_is_value_error(
    open_store: OpenStore, store_path: str, topic: str
) -> None:
    """A name that fails the put rule and that the store does not hold is a
    mistake: ValueError at once, nothing created. (A topic the store holds is
    readable whatever its name: see test_put_reasons.)"""
    store = open_store(**SMALL)
    _fill(store, "T", 0, 1)
    before = listing(store_path)
    with pytest.raises(ValueError, match="holds no such topic"):
        store.get_message("g", topic, 0, 0)
    assert listing(store_path) == before


def test_negative_queue_id_is_value_error(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, "T", 0, 1)
    with pytest.raises(ValueError):
        store.get_message("g", "T", -1, 0)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get_max_offset_in_queue("../x", 0),
        lambda s: s.get_min_offset_in_queue("../x", 0),
        lambda s: s.get_offset_in_queue_by_time("../x", 0, 0),
        lambda s: s.get_commit_log_offset_in_queue("../x", 0, 0),
        lambda s: s.get_message_store_timestamp("../x", 0, 0),
        lambda s: s.get_earliest_message_time("../x", 0),
        lambda s: s.query_message("../x", "k"),
        lambda s: s.get_max_offset_in_queue("T", -1),
        lambda s: s.get_offset_in_queue_by_time("T", -1, 0),
        lambda s: s.get_message("g", "T", 0, 0, 0),
        lambda s: s.get_message("g", "T", 0, 0, -3),
    ],
)
def test_other_reads_reject_bad_arguments(
    open_store: OpenStore, store_path: str, call: Callable[[MessageStore], object]
) -> None:
    store = open_store(**SMALL)
    _fill(store, "T", 0, 1)
    before = listing(store_path)
    with pytest.raises(ValueError):
        call(store)
    assert listing(store_path) == before


def test_negative_offset_is_below_min(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, "T", 0, 3)
    r = store.get_message("g", "T", 0, -1)
    assert r.status is GetStatus.OFFSET_TOO_SMALL
    assert r.next_begin_offset == 0


def test_reads_on_a_closed_store_raise(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    _fill(store, "T", 0, 1)
    store.shutdown()
    with pytest.raises(StoreClosedError):
        store.get_message("g", "T", 0, 0)
    with pytest.raises(StoreClosedError):
        store.query_message("T", "k")
    with pytest.raises(StoreClosedError):
        store.get_offset_in_queue_by_time("T", 0, 0)


# -- messages outlive their pull ----------------------------------------------------


@pytest.mark.parametrize("body_len", [100, 20_000])
def test_a_kept_message_keeps_its_bytes_after_later_pulls_and_close(
    open_store: OpenStore, body_len: int
) -> None:
    """The messages of one pull may share one buffer (small pulls) or hold
    their own copies (pulls of many bytes): either way a message kept after
    its pull and its list are gone, through later pulls and after the store
    closed, still reads the bytes that were put."""
    store = open_store(mapped_file_size_commit_log=1 << 20)
    bodies = [bytes([i % 251]) * body_len for i in range(12)]
    for i, b in enumerate(bodies):
        assert store.put("K", b, 0, tags=f"t{i}", keys=[f"k{i}"]).status is PutStatus.PUT_OK
    wait_dispatched(store)
    kept = []
    off = 0
    while off < len(bodies):
        r = store.get_message("g", "K", 0, off, 4)
        assert r.status is GetStatus.FOUND
        kept.append(r.messages[-1])
        off = r.next_begin_offset
        del r
    records = [(m.queue_offset, m.body, m.record_bytes()) for m in kept]
    store.shutdown()
    for m, (qo, body, rec) in zip(kept, records, strict=True):
        assert m.queue_offset == qo
        assert m.body == bodies[qo] == body
        assert m.tags == f"t{qo}" and m.keys == [f"k{qo}"]
        assert m.record_bytes() == rec and len(rec) == m.store_size
