"""Time-based reads: ``get_offset_in_queue_by_time`` (docs/format.md §18.5) and friends.

Store timestamps cannot be chosen, so messages are put in three groups with
sleeps in between and the ``PutResult.store_timestamp`` of each is recorded.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from helpers.read_util import SMALL, cq_dir, wait_dispatched
from rocketstore import MessageStore, PutResult

OpenStore = Callable[..., MessageStore]

GROUPS = 3
PER_GROUP = 5


def _put_groups(store: MessageStore, topic: str = "T", queue_id: int = 0) -> list[PutResult]:
    """3 groups of 5 messages, 3 ms apart inside a group, 30 ms between groups.

    Every message gets a distinct store timestamp (puts are repeated after a
    short sleep until the timestamp moved on, so a coarse clock cannot break it).
    """
    results: list[PutResult] = []
    for g in range(GROUPS):
        for i in range(PER_GROUP):
            time.sleep(0.003)
            while results and time.time_ns() // 1_000_000 <= results[-1].store_timestamp:
                time.sleep(0.001)
            r = store.put(topic, f"g{g}m{i}".encode(), queue_id)
            assert r.ok
            results.append(r)
        time.sleep(0.03)
    wait_dispatched(store)
    ts = [r.store_timestamp for r in results]
    assert ts == sorted(ts) and len(set(ts)) == len(ts), ts
    return results


def test_exact_timestamps_return_their_message(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    results = _put_groups(store)
    for r in results:
        assert store.get_offset_in_queue_by_time("T", 0, r.store_timestamp) == r.queue_offset


def test_between_groups_returns_nearest_neighbour(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    results = _put_groups(store)
    for g in range(GROUPS - 1):
        last = results[g * PER_GROUP + PER_GROUP - 1]
        first_next = results[(g + 1) * PER_GROUP]
        assert first_next.store_timestamp - last.store_timestamp >= 20
        assert (
            store.get_offset_in_queue_by_time("T", 0, last.store_timestamp + 2) == last.queue_offset
        )
        assert (
            store.get_offset_in_queue_by_time("T", 0, first_next.store_timestamp - 2)
            == first_next.queue_offset
        )


def test_tie_goes_left(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    results = _put_groups(store)
    pairs = [
        (a, b)
        for a, b in itertools.pairwise(results)
        if (b.store_timestamp - a.store_timestamp) % 2 == 0
    ]
    # between groups the gap is >= 30 ms; inside, ~3 ms: an even gap is all but certain
    while not pairs:
        time.sleep(0.002)
        r = store.put("T", b"extra", 0)
        wait_dispatched(store)
        if (r.store_timestamp - results[-1].store_timestamp) % 2 == 0 and (
            r.store_timestamp > results[-1].store_timestamp
        ):
            pairs.append((results[-1], r))
        results.append(r)
    for a, b in pairs:
        mid = (a.store_timestamp + b.store_timestamp) // 2
        assert store.get_offset_in_queue_by_time("T", 0, mid) == a.queue_offset, (a, b)
        assert store.get_offset_in_queue_by_time("T", 0, mid + 1) == b.queue_offset


def test_far_past_and_far_future(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    results = _put_groups(store)
    first, last = results[0], results[-1]
    for ts in (0, 1, first.store_timestamp - 3_600_000, first.store_timestamp - 1):
        assert store.get_offset_in_queue_by_time("T", 0, ts) == first.queue_offset, ts
    for ts in (last.store_timestamp + 1, last.store_timestamp + 86_400_000, 2**62):
        assert store.get_offset_in_queue_by_time("T", 0, ts) == last.queue_offset, ts


def test_by_time_on_other_queue_and_unknown_queue(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    a = _put_groups(store, "T", 0)
    b = _put_groups(store, "T", 1)
    # queue 1's messages are all newer than queue 0's
    assert store.get_offset_in_queue_by_time("T", 1, a[-1].store_timestamp) == 0
    assert store.get_offset_in_queue_by_time("T", 0, b[0].store_timestamp) == len(a) - 1
    assert store.get_offset_in_queue_by_time("T", 7, b[0].store_timestamp) == 0
    assert store.get_offset_in_queue_by_time("Nope", 0, b[0].store_timestamp) == 0


def test_earliest_time_store_timestamp_and_commit_log_offset(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    results = _put_groups(store)
    assert store.get_earliest_message_time("T", 0) == results[0].store_timestamp
    for r in results:
        assert store.get_message_store_timestamp("T", 0, r.queue_offset) == r.store_timestamp
        assert store.get_commit_log_offset_in_queue("T", 0, r.queue_offset) == r.wrote_offset
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.store_timestamp == r.store_timestamp
    n = len(results)
    # beyond the queue / unknown queue
    assert store.get_message_store_timestamp("T", 0, n) == -1
    assert store.get_message_store_timestamp("T", 0, n + 100) == -1
    assert store.get_message_store_timestamp("T", 3, 0) == -1
    assert store.get_commit_log_offset_in_queue("T", 0, n + 100) == 0
    assert store.get_commit_log_offset_in_queue("Nope", 0, 0) == 0
    assert store.get_earliest_message_time("T", 3) == -1
    assert store.get_earliest_message_time("Nope", 0) == -1


def test_time_reads_survive_restart_and_read_only(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    results = _put_groups(store)
    store.shutdown()
    for read_only in (False, True):
        s = open_store(read_only=read_only, **SMALL)
        assert s.get_earliest_message_time("T", 0) == results[0].store_timestamp
        for r in results[::4]:
            assert s.get_offset_in_queue_by_time("T", 0, r.store_timestamp) == r.queue_offset
            assert s.get_commit_log_offset_in_queue("T", 0, r.queue_offset) == r.wrote_offset
        s.shutdown()


def test_by_time_across_cq_files(open_store: OpenStore) -> None:
    """A queue spanning three CQ files (200 units each): exact timestamps still hit."""
    store = open_store(**SMALL)
    results: list[PutResult] = []
    for i in range(450):
        while results and time.time_ns() // 1_000_000 <= results[-1].store_timestamp:
            time.sleep(0.0002)
        r = store.put("T", b"%d" % i, 0)
        assert r.ok
        results.append(r)
    wait_dispatched(store)
    assert len(list(cq_dir(store.config.store_path, "T", 0).iterdir())) == 3
    wrong = {
        r.queue_offset: got
        for r in [*results[::7], results[199], results[200], results[399]]
        if (got := store.get_offset_in_queue_by_time("T", 0, r.store_timestamp)) != r.queue_offset
    }
    assert wrong == {}
