"""query_message's time window is exact to the millisecond (the index keeps
seconds: the search is widened, the records' store times decide), and every
millisecond bound also takes a datetime."""

from __future__ import annotations

import datetime
from collections.abc import Callable

from helpers.presets import SMALL
from rocketstore import MessageStore

UTC = datetime.UTC


def _ms(ts: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts / 1000, tz=UTC)


def test_a_message_is_found_in_a_window_of_two_milliseconds_around_it(
        open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    puts = [store.put("orders", b"m%d" % i, keys=["k"]) for i in range(5)]
    store.flush()
    for r in puts:
        t = r.store_timestamp
        found = store.query_message("orders", "k", 32, t - 1, t + 1)
        assert r.wrote_offset in [m.commit_log_offset for m in found]
        assert all(t - 1 <= m.store_timestamp <= t + 1 for m in found)
        # Exact: a window ending just before the message leaves it out.
        before = store.query_message("orders", "k", 32, t - 1000, t - 1)
        assert r.wrote_offset not in [m.commit_log_offset for m in before]
        assert all(m.store_timestamp <= t - 1 for m in before)
        after = store.query_message("orders", "k", 32, t + 1, t + 1000)
        assert r.wrote_offset not in [m.commit_log_offset for m in after]


def test_query_message_takes_datetimes(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    r = store.put("orders", b"x", keys=["k"])
    store.flush()
    t = r.store_timestamp
    found = store.query_message("orders", "k", 32, _ms(t), _ms(t))
    assert [m.commit_log_offset for m in found] == [r.wrote_offset]
    naive = datetime.datetime.fromtimestamp(t / 1000)  # local time
    assert [m.body for m in store.query_message("orders", "k", 32, naive, naive)] == [b"x"]
    assert store.query_message("orders", "k", 32, _ms(t + 1), None) == []


def test_offset_by_time_takes_datetimes(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    rs = [store.put("orders", b"m%d" % i) for i in range(3)]
    store.flush()
    for r in rs:
        t = r.store_timestamp
        assert (store.get_offset_in_queue_by_time("orders", 0, _ms(t))
                == store.get_offset_in_queue_by_time("orders", 0, t))
