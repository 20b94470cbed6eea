"""Every refused put says why (``PutResult.reason``), the sys_flag rules, and
reads of topics that could never have been written.

The put rules are RocketMQ's (dotted topics and empty tags stay refused); the
reason is a short sentence naming the field and the rule, for ``put``,
``put_message`` and per message in ``put_messages``. A refused put raises
``InvalidMessageError`` (a ``MessageRefusedError`` and a ``ValueError``)
carrying the status, the reason and the result; ``check=False`` returns the
result instead.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.read_util import SMALL, listing, wait_dispatched
from helpers.store_util import commitlog_files
from rocketstore import (
    GetStatus,
    InvalidMessageError,
    Message,
    MessageRefusedError,
    MessageStore,
    PutStatus,
)

OpenStore = Callable[..., MessageStore]
SEG = 4096

# (put arguments, status, words the reason must contain)
REFUSALS: list[tuple[dict[str, Any], PutStatus, tuple[str, ...]]] = [
    ({"topic": "orders.v1"}, PutStatus.MESSAGE_ILLEGAL, ("topic", "'.'")),
    ({"topic": ""}, PutStatus.MESSAGE_ILLEGAL, ("topic", "empty")),
    ({"topic": "a" * 128}, PutStatus.MESSAGE_ILLEGAL, ("topic", "128 bytes", "127")),
    ({"topic": "a b"}, PutStatus.MESSAGE_ILLEGAL, ("topic", "' '")),
    ({"tags": ""}, PutStatus.MESSAGE_ILLEGAL, ("tags", "empty")),
    ({"tags": "a\x01b"}, PutStatus.MESSAGE_ILLEGAL, ("tags", "0x01")),
    ({"keys": ["has space"]}, PutStatus.MESSAGE_ILLEGAL, ("key", "has space", "space")),
    ({"keys": "a b"}, PutStatus.MESSAGE_ILLEGAL, ("key", "space")),
    ({"properties": {"k": "a\x02b"}}, PutStatus.MESSAGE_ILLEGAL, ("property", "'k'", "0x02")),
    ({"properties": {"": "v"}}, PutStatus.MESSAGE_ILLEGAL, ("property", "name", "empty")),
    ({"properties": {"k": ""}}, PutStatus.MESSAGE_ILLEGAL, ("property", "'k'", "empty value")),
    ({"properties": {"DELAY": "soon"}}, PutStatus.MESSAGE_ILLEGAL, ("DELAY", "soon")),
    ({"body": b"x" * 1025}, PutStatus.MESSAGE_ILLEGAL, ("body", "1025", "max_message_size")),
    ({"body": b"x" * 5000}, PutStatus.MESSAGE_ILLEGAL, ("body", "max_message_size")),
    (
        {"properties": {"k": "v" * 40000}},
        PutStatus.MESSAGE_ILLEGAL,
        ("properties", "32767"),
    ),
    (
        {"properties": {"k": "é" * 20000}},
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
        ("properties", "40002 bytes", "32767"),
    ),
    ({"sys_flag": 0x10}, PutStatus.MESSAGE_ILLEGAL, ("sys_flag", "0x10", "born_host")),
    ({"sys_flag": 0x20}, PutStatus.MESSAGE_ILLEGAL, ("sys_flag", "0x20", "store_host")),
    ({"sys_flag": 0x40}, PutStatus.MESSAGE_ILLEGAL, ("sys_flag", "0x40")),
    ({"sys_flag": 0x300 | 1}, PutStatus.MESSAGE_ILLEGAL, ("sys_flag", "0x100")),
    ({"sys_flag": 1 << 20}, PutStatus.MESSAGE_ILLEGAL, ("sys_flag", "0x100000")),
    ({"sys_flag": 1, "body": b"plain text"}, PutStatus.MESSAGE_ILLEGAL, ("0x1", "inflate")),
]


def _quote(s: str) -> str:
    return s.replace("'", '"')


def _check_reason(reason: str | None, words: tuple[str, ...]) -> None:
    assert reason is not None
    assert "\n" not in reason and len(reason) < 300, reason
    for w in words:
        assert w in reason or _quote(w) in reason, (w, reason)


@pytest.mark.parametrize(("kwargs", "status", "words"), REFUSALS, ids=lambda v: repr(v)[:40])
def test_every_refusal_says_why(
    open_store: OpenStore,
    store_path: str,
    kwargs: dict[str, Any],
    status: PutStatus,
    words: tuple[str, ...],
) -> None:
    store = open_store(mapped_file_size_commit_log=SEG, max_message_size=1024)
    kw = dict(kwargs)
    topic = kw.pop("topic", "T")
    body = kw.pop("body", b"x")
    with pytest.raises(InvalidMessageError) as raised:
        store.put(topic, body, **kw)
    e = raised.value
    assert isinstance(e, ValueError) and isinstance(e, MessageRefusedError)
    assert e.status is status and e.result.status is status
    _check_reason(e.reason, words)
    assert e.reason in str(e) and status.name in str(e)
    assert store.max_phy_offset == 0
    r = store.put(topic, body, **kw, check=False)
    assert r.status is status and not r.ok
    _check_reason(r.reason, words)
    with pytest.raises(InvalidMessageError) as raised:
        store.put_message(Message(topic, body, **kw))
    assert raised.value.status is status
    _check_reason(raised.value.reason, words)
    r = store.put_message(Message(topic, body, **kw), check=False)
    assert r.status is status
    _check_reason(r.reason, words)
    assert store.max_phy_offset == 0
    msgs = [Message("T", b"ok"), Message(topic, body, **kw), Message("T", b"ok")]
    with pytest.raises(InvalidMessageError) as many:
        store.put_messages(msgs)
    rs = many.value.result
    assert isinstance(rs, list)
    assert [x.status for x in rs] == [PutStatus.PUT_OK, status, PutStatus.PUT_OK]
    assert list(many.value.refused) == [1] and many.value.refused[1] is rs[1]
    assert "message 1" in str(many.value) and "1 of 3" in str(many.value)
    assert rs[0].reason is None and rs[2].reason is None
    _check_reason(rs[1].reason, words)
    # Only the two good messages were written.
    assert store.max_phy_offset == rs[0].wrote_bytes + rs[2].wrote_bytes
    rs = store.put_messages(msgs, check=False)
    assert [x.status for x in rs] == [PutStatus.PUT_OK, status, PutStatus.PUT_OK]


def test_accepted_puts_have_no_reason(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    assert store.put("T", b"x", tags="a", keys=["k"]).reason is None
    assert store.put_message(Message("T", b"x")).reason is None
    assert [r.reason for r in store.put_messages([Message("T", b"x")] * 3)] == [None] * 3


def test_record_larger_than_a_segment_names_the_segment_size(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=1024)
    with pytest.raises(InvalidMessageError) as raised:
        store.put("T", b"x" * 2000)
    assert raised.value.status is PutStatus.MESSAGE_ILLEGAL
    _check_reason(raised.value.reason, ("1024", "mapped_file_size_commit_log"))


def test_refusal_without_a_file_on_disk_full(
    open_store: OpenStore, fail_points: Callable[[str, int], None]
) -> None:
    import errno

    store = open_store(mapped_file_size_commit_log=SEG)
    fail_points("create_file", errno.ENOSPC)
    with pytest.raises(MessageRefusedError) as raised:
        store.put("T", b"x")
    # The store's state refused it, not the message: not a ValueError.
    assert not isinstance(raised.value, ValueError)
    assert raised.value.status is PutStatus.CREATE_MAPPED_FILE_FAILED
    _check_reason(raised.value.reason, ("CommitLog file", "No space left"))
    r = store.put("T", b"x", check=False)
    assert r.status is PutStatus.CREATE_MAPPED_FILE_FAILED
    _check_reason(r.reason, ("CommitLog file", "No space left"))


# -- sys_flag ---------------------------------------------------------------------------


def test_compressed_body_that_inflates_is_stored_and_read_inflated(
    open_store: OpenStore,
) -> None:
    store = open_store(**SMALL)
    plain = b"hello " * 100
    r = store.put("T", zlib.compress(plain), sys_flag=1)
    assert r.status is PutStatus.PUT_OK, r.reason
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.body == plain and m.sys_flag == 1


@pytest.mark.parametrize(
    "body",
    [b"plain text", zlib.compress(b"x" * 100)[:-3], zlib.compress(b"x") + b"trailing", b""],
    ids=["plain", "truncated", "trailing", "empty"],
)
def test_compressed_bit_with_a_body_that_does_not_inflate_is_refused(
    open_store: OpenStore, store_path: str, body: bytes
) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    for r in (
        store.put("T", body, sys_flag=1, check=False),
        store.put_message(Message("T", body, sys_flag=1), check=False),
        *store.put_messages([Message("T", body, sys_flag=1 | 2)], check=False),
    ):
        assert r.status is PutStatus.MESSAGE_ILLEGAL
        _check_reason(r.reason, ("sys_flag", "0x1", "zlib"))
    assert commitlog_files(store_path) == []


def test_multi_tags_bit_is_accepted(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    r = store.put("T", b"x", tags="a", sys_flag=2)
    assert r.status is PutStatus.PUT_OK, r.reason
    wait_dispatched(store)
    g = store.get_message("g", "T", 0, 0)
    assert [m.sys_flag for m in g.messages] == [2]


def test_transaction_types_prepared_and_rolled_back_are_not_dispatched(
    open_store: OpenStore, store_path: str
) -> None:
    """As in RocketMQ: PREPARED (0x4) and ROLLBACK (0xC) records are stored but
    go to no consume queue and take no queue offset; COMMIT (0x8) and plain
    records do. The index holds PREPARED records (as RocketMQ's does), not
    ROLLBACK ones."""
    store = open_store(**SMALL, max_hash_slot_num=100, max_index_num=400)
    put = {
        flag: store.put("T", f"tx-{flag}".encode(), keys=[f"k{flag}"], sys_flag=flag)
        for flag in (0x0, 0x4, 0x8, 0xC)
    }
    for flag, r in put.items():
        assert r.status is PutStatus.PUT_OK, (flag, r.reason)
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.sys_flag == flag
    assert put[0x0].queue_offset == 0 and put[0x8].queue_offset == 1
    wait_dispatched(store)
    g = store.get_message("g", "T", 0, 0)
    assert g.status is GetStatus.FOUND
    assert [m.body for m in g.messages] == [b"tx-0", b"tx-8"]
    assert store.get_max_offset_in_queue("T", 0) == 2
    assert [m.body for m in store.query_message("T", "k4")] == [b"tx-4"]
    assert store.query_message("T", "k12") == []
    # The next plain message continues the queue after the committed one.
    assert store.put("T", b"next").queue_offset == 2
    # The same after a restart (the queue-offset table is rebuilt from disk).
    store.shutdown()
    store = open_store(**SMALL, max_hash_slot_num=100, max_index_num=400)
    assert store.put("T", b"after restart").queue_offset == 3


# -- reads of topics that cannot exist -------------------------------------------------


@pytest.mark.parametrize("topic", ["orders.v1", "x y", "a" * 128, "../x", ""])
def test_consumer_on_a_topic_that_can_never_be_written_is_a_value_error(
    open_store: OpenStore, store_path: str, topic: str
) -> None:
    store = open_store(**SMALL)
    store.put("T", b"x")
    wait_dispatched(store)
    before = listing(store_path)
    with pytest.raises(ValueError, match="topic"):
        store.consumer("g", topic)
    with pytest.raises(ValueError, match="holds no such topic"):
        store.get_message("g", topic, 0, 0)
    assert listing(store_path) == before


def test_a_topic_held_by_the_store_is_readable_even_if_puts_refuse_it(
    open_store: OpenStore, store_path: str
) -> None:
    """A topic longer than 127 bytes cannot be put here, but RocketMQ 5 writes
    such topics (V2 records); a store that holds one reads it without error."""
    long_topic = "t" * 200
    store = open_store(**SMALL)
    with pytest.raises(InvalidMessageError, match="127"):
        store.put(long_topic, b"x")
    store.put("T", b"x")
    store.shutdown()
    os.makedirs(Path(store_path) / "consumequeue" / long_topic / "0")
    store = open_store(**SMALL)
    assert store.queue_ids(long_topic) == [0]
    g = store.get_message("g", long_topic, 0, 0)
    assert g.status is GetStatus.NO_MESSAGE_IN_QUEUE
    with store.consumer("g", long_topic) as consumer:
        assert consumer.poll(timeout=0.05) == []


def test_refusal_errors_pickle_for_other_processes(open_store: OpenStore) -> None:
    """A refusal raised in a worker process (multiprocessing, concurrent.futures)
    reaches the parent with its class, status and reason; the engine's result
    objects stay behind."""
    import pickle

    store = open_store(mapped_file_size_commit_log=SEG)
    with pytest.raises(InvalidMessageError) as raised:
        store.put("a.b", b"x")
    copy = pickle.loads(pickle.dumps(raised.value))
    assert type(copy) is InvalidMessageError and isinstance(copy, ValueError)
    assert (copy.status, copy.reason, str(copy)) == (
        raised.value.status, raised.value.reason, str(raised.value))
