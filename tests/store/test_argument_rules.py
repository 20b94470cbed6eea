"""One rule per kind of argument on every public read, put and query call.

A ``bool`` is no int (``True`` is not queue 1, offset 1 or one message): it
is a ``TypeError`` naming the argument, in the same words everywhere. An
empty topic is a ``ValueError`` saying so, on reads and puts alike. A
negative queue id or count, and an int too large for its field, is a
``ValueError`` naming the argument, worded the same on every call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rocketstore import Message, MessageStore

OpenStore = Callable[..., MessageStore]
Call = Callable[[MessageStore, Any], object]

#: (argument name, kind, call taking the value in that argument's place).
#: Kinds: "queue_id" (0..2**31-1), "count" (above 0), "long" (a Java long).
INT_ARGS: list[tuple[str, str, str, Call]] = [
    ("put queue_id", "queue_id", "queue_id", lambda s, v: s.put("T", b"x", queue_id=v)),
    ("put delay_level", "delay_level", "int", lambda s, v: s.put("T", b"x", delay_level=v)),
    ("put flag", "flag", "int", lambda s, v: s.put("T", b"x", flag=v)),
    ("put born_timestamp", "born_timestamp", "long",
     lambda s, v: s.put("T", b"x", born_timestamp=v)),
    ("Message queue_id", "queue_id", "queue_id",
     lambda s, v: s.put_message(Message("T", b"x", queue_id=v))),
    ("put_batch queue_id", "queue_id", "queue_id", lambda s, v: s.put_batch("T", [b"x"], v)),
    ("get_message queue_id", "queue_id", "queue_id", lambda s, v: s.get_message("g", "T", v, 0)),
    ("get_message offset", "offset", "long", lambda s, v: s.get_message("g", "T", 0, v)),
    ("get_message max_msg_nums", "max_msg_nums", "count",
     lambda s, v: s.get_message("g", "T", 0, 0, v)),
    ("get_arrow queue_id", "queue_id", "queue_id", lambda s, v: s.get_arrow("T", v, 0)),
    ("get_arrow offset", "offset", "long", lambda s, v: s.get_arrow("T", 0, v)),
    ("get_arrow max_messages", "max_messages", "count", lambda s, v: s.get_arrow("T", 0, 0, v)),
    ("read_arrow queue_id", "queue_id", "queue_id", lambda s, v: s.read_arrow("T", v)),
    ("read_arrow batch_size", "batch_size", "count",
     lambda s, v: s.read_arrow("T", batch_size=v)),
    ("max offset queue_id", "queue_id", "queue_id", lambda s, v: s.get_max_offset_in_queue("T", v)),
    ("min offset queue_id", "queue_id", "queue_id", lambda s, v: s.get_min_offset_in_queue("T", v)),
    ("earliest time queue_id", "queue_id", "queue_id",
     lambda s, v: s.get_earliest_message_time("T", v)),
    ("commit log offset queue_id", "queue_id", "queue_id",
     lambda s, v: s.get_commit_log_offset_in_queue("T", v, 0)),
    ("commit log offset cq_offset", "cq_offset", "long",
     lambda s, v: s.get_commit_log_offset_in_queue("T", 0, v)),
    ("store timestamp queue_id", "queue_id", "queue_id",
     lambda s, v: s.get_message_store_timestamp("T", v, 0)),
    ("store timestamp cq_offset", "cq_offset", "long",
     lambda s, v: s.get_message_store_timestamp("T", 0, v)),
    ("offset by time queue_id", "queue_id", "queue_id",
     lambda s, v: s.get_offset_in_queue_by_time("T", v, 0)),
    ("offset by time timestamp", "timestamp", "long",
     lambda s, v: s.get_offset_in_queue_by_time("T", 0, v)),
    ("query max_num", "max_num", "count", lambda s, v: s.query_message("T", "k", v)),
    ("query begin_timestamp", "begin_timestamp", "long",
     lambda s, v: s.query_message("T", "k", 32, v)),
    ("query end_timestamp", "end_timestamp", "long",
     lambda s, v: s.query_message("T", "k", 32, 0, v)),
    ("look by offset", "offset", "long", lambda s, v: s.look_message_by_offset(v)),
    ("wait_for_dispatch seq", "seq", "long", lambda s, v: s.wait_for_dispatch(v, 0)),
    ("commit_offset queue_id", "queue_id", "queue_id",
     lambda s, v: s.commit_offset("g", "T", v, 0)),
]

IDS = [a[0] for a in INT_ARGS]


def _store(open_store: OpenStore) -> MessageStore:
    store = open_store(mapped_file_size_commit_log=4096, max_hash_slot_num=100,
                       max_index_num=400)
    store.put("T", b"first", keys="k")
    return store


@pytest.mark.parametrize(("what", "name", "kind", "call"), INT_ARGS, ids=IDS)
def test_a_bool_is_no_int_on_any_call(
    open_store: OpenStore, what: str, name: str, kind: str, call: Call
) -> None:
    if "arrow" in what:
        pytest.importorskip("pyarrow")
    store = _store(open_store)
    end = store.max_phy_offset
    for value in (True, False):
        with pytest.raises(TypeError) as info:
            call(store, value)
        assert type(info.value) is TypeError
        assert str(info.value) == f"{name} must be int, not bool"
    assert store.max_phy_offset == end  # a refused put wrote nothing


@pytest.mark.parametrize(("what", "name", "kind", "call"),
                         [a for a in INT_ARGS if a[2] in ("queue_id", "count")],
                         ids=[a[0] for a in INT_ARGS if a[2] in ("queue_id", "count")])
def test_a_negative_queue_id_or_count_is_refused_in_the_same_words(
    open_store: OpenStore, what: str, name: str, kind: str, call: Call
) -> None:
    if "arrow" in what:
        pytest.importorskip("pyarrow")
    store = _store(open_store)
    with pytest.raises(ValueError) as info:
        call(store, -1)
    assert type(info.value) is ValueError
    if kind == "queue_id":
        assert str(info.value) == "queue_id must be >= 0, got -1"
    else:
        assert str(info.value) == f"{name} must be > 0, got -1"
    if kind == "queue_id":
        with pytest.raises(ValueError) as info:
            call(store, 2**31)
        assert str(info.value) == "queue_id is out of range: 2147483648 is over 2147483647"
    else:
        with pytest.raises(ValueError) as info:
            call(store, 0)
        assert str(info.value) == f"{name} must be > 0, got 0"


@pytest.mark.parametrize(("what", "name", "kind", "call"),
                         [a for a in INT_ARGS if a[1] != "batch_size"],
                         ids=[a[0] for a in INT_ARGS if a[1] != "batch_size"])
def test_an_int_too_large_for_its_field_is_a_value_error_naming_it(
    open_store: OpenStore, what: str, name: str, kind: str, call: Call
) -> None:
    if "arrow" in what:
        pytest.importorskip("pyarrow")
    store = _store(open_store)
    end = store.max_phy_offset
    with pytest.raises(ValueError) as info:
        call(store, 2**64)
    assert type(info.value) is ValueError, repr(info.value)
    assert str(info.value).startswith(f"{name} is out of range"), str(info.value)
    assert store.max_phy_offset == end


#: Every call taking a topic, given an empty one.
EMPTY_TOPIC: list[tuple[str, Callable[[MessageStore], object]]] = [
    ("put", lambda s: s.put("", b"x")),
    ("put_message", lambda s: s.put_message(Message("", b"x"))),
    ("put_messages", lambda s: s.put_messages([Message("", b"x")])),
    ("put_batch", lambda s: s.put_batch("", [b"x"])),
    ("get_message", lambda s: s.get_message("g", "", 0, 0)),
    ("get_arrow", lambda s: s.get_arrow("", 0, 0)),
    ("read_arrow", lambda s: s.read_arrow("")),
    ("max offset", lambda s: s.get_max_offset_in_queue("", 0)),
    ("min offset", lambda s: s.get_min_offset_in_queue("", 0)),
    ("earliest time", lambda s: s.get_earliest_message_time("", 0)),
    ("commit log offset", lambda s: s.get_commit_log_offset_in_queue("", 0, 0)),
    ("store timestamp", lambda s: s.get_message_store_timestamp("", 0, 0)),
    ("offset by time", lambda s: s.get_offset_in_queue_by_time("", 0, 0)),
    ("query_message", lambda s: s.query_message("", "k")),
    ("queue_ids", lambda s: s.queue_ids("")),
    ("consumer", lambda s: s.consumer("g", "")),
    ("commit_offset", lambda s: s.commit_offset("g", "", 0, 0)),
]


@pytest.mark.parametrize(("what", "call"), EMPTY_TOPIC, ids=[c[0] for c in EMPTY_TOPIC])
def test_an_empty_topic_is_refused_on_every_call(
    open_store: OpenStore, what: str, call: Callable[[MessageStore], object]
) -> None:
    if "arrow" in what:
        pytest.importorskip("pyarrow")
    store = _store(open_store)
    end = store.max_phy_offset
    with pytest.raises(ValueError, match="topic must not be empty"):
        call(store)
    assert store.max_phy_offset == end


#: Every call taking a topic, given one that is not a str.
TOPIC_TYPE: list[tuple[str, Callable[[MessageStore], object]]] = [
    ("put", lambda s: s.put(1, b"x")),
    ("put_batch", lambda s: s.put_batch(1, [b"x"])),
    ("get_message", lambda s: s.get_message("g", 1, 0, 0)),
    ("get_arrow", lambda s: s.get_arrow(1, 0, 0)),
    ("max offset", lambda s: s.get_max_offset_in_queue(1, 0)),
    ("query_message", lambda s: s.query_message(1, "k")),
    ("queue_ids", lambda s: s.queue_ids(1)),
]


@pytest.mark.parametrize(("what", "call"), TOPIC_TYPE, ids=[c[0] for c in TOPIC_TYPE])
def test_a_topic_that_is_not_a_str_is_refused_in_the_same_words(
    open_store: OpenStore, what: str, call: Callable[[MessageStore], object]
) -> None:
    if "arrow" in what:
        pytest.importorskip("pyarrow")
    store = _store(open_store)
    with pytest.raises(TypeError) as info:
        call(store)
    assert str(info.value) == "topic must be str, not int"


def test_a_bool_is_no_number_of_seconds(open_store: OpenStore) -> None:
    store = _store(open_store)
    with pytest.raises(TypeError) as info:
        store.wait_for_dispatch(0, True)
    assert str(info.value) == "timeout must be a number of seconds or None, not bool"
    assert store.wait_for_dispatch(store.dispatch_seq, 0) == store.dispatch_seq
    assert store.wait_for_dispatch(store.dispatch_seq, 0.0) == store.dispatch_seq


def test_an_int_subclass_counts_as_its_value(open_store: OpenStore) -> None:
    """Exact ints take a shorter path than other ints: an int subclass (an
    ``IntEnum`` member) is still its value, on puts and reads alike."""
    import enum

    class Q(enum.IntEnum):
        THREE = 3

    store = _store(open_store)
    r = store.put("T", b"x", Q.THREE, born_timestamp=Q.THREE)
    b = store.put_batch("T", [b"y"], Q.THREE)
    assert (r.queue_offset, b.queue_offset) == (0, 1)
    got = store.get_message("g", "T", Q.THREE, 0, 2)
    assert [(m.queue_id, m.body) for m in got.messages] == [(3, b"x"), (3, b"y")]
    assert got.messages[0].born_timestamp == 3
