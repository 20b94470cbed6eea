"""``MessageStore.get_arrow``: one pull of a queue as one Arrow batch.

The pull is ``get_message``'s: the same statuses, next offsets, tag filter,
damaged and skipped counts; only its rows come as columns, and a batch is not
capped at RocketMQ's 32 messages per pull. Copied batches outlive the store;
zero-copy batches point into the mapped CommitLog and keep it mapped (see
``test_zero_copy.py`` for deletion and close under held batches).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers.presets import SEG, SMALL
from helpers.store_util import BODY_AT, flip_commitlog_bits
from rocketstore import GetStatus, MessageStore, StoreConfig, UnknownTopicWarning

pa = pytest.importorskip("pyarrow")

TOPIC = "arrow"


def body_of(i: int) -> bytes:
    # Short bodies (inlined in a binary view) and long ones.
    return b"b%d-" % i + b"x" * (i % 40)


def tags_of(i: int) -> str:
    return ("red", "green", "blue")[i % 3]


def fill(store: MessageStore, n: int, queues: int = 2) -> None:
    for i in range(n):
        r = store.put(TOPIC, body_of(i), queue_id=i % queues, tags=tags_of(i), keys=[f"k{i}"])
        assert r.ok


def rows_of(batch: Any) -> list[tuple[int, bytes, str]]:
    return list(zip(batch.column("queue_offset").to_pylist(),
                    batch.column("body").to_pylist(),
                    batch.column("tags").to_pylist(), strict=True))


def same_as_get_message(store: MessageStore, queue_id: int, offset: int, n: int,
                        tags: list[str] | None, zero_copy: bool) -> None:
    """get_arrow returns what get_message pulls, in columns (n <= 32: one pull each)."""
    g = store.get_message("g", TOPIC, queue_id, offset, n, tags)
    a = store.get_arrow(TOPIC, queue_id, offset, n, zero_copy=zero_copy, tags=tags)
    assert a.status is g.status
    assert (a.next_begin_offset, a.min_offset, a.max_offset, a.damaged, a.skipped) == (
        g.next_begin_offset, g.min_offset, g.max_offset, g.damaged, g.skipped)
    assert rows_of(a.batch) == [(m.queue_offset, m.body, m.tags) for m in g.messages]
    assert a.batch.column("msg_id").to_pylist() == [m.msg_id for m in g.messages]
    assert a.batch.column("commit_log_offset").to_pylist() == [
        m.commit_log_offset for m in g.messages]
    assert len(a) == len(g.messages)


@pytest.mark.parametrize("zero_copy", [False, True])
def test_a_pull_as_columns_is_get_messages_pull(open_store: Any, zero_copy: bool) -> None:
    store = open_store(**SMALL)
    fill(store, 300)
    for q in (0, 1):
        for offset in (0, 1, 77, 149, 150, 151, 10_000):
            for tags in (None, ["red"], ["blue", "green"], ["none"]):
                same_as_get_message(store, q, offset, 32, tags, zero_copy)
    # Unknown queue and unknown topic read as empty queues, with a warning.
    with pytest.warns(UnknownTopicWarning):
        same_as_get_message(store, 7, 0, 32, None, zero_copy)
    with pytest.warns(UnknownTopicWarning):
        r = store.get_arrow("nothing-here", 0, 0)
    assert r.status is GetStatus.NO_MESSAGE_IN_QUEUE and r.batch.num_rows == 0
    assert "body" in r.batch.schema.names


@pytest.mark.parametrize("zero_copy", [False, True])
def test_one_batch_holds_thousands_and_every_offset_once(open_store: Any,
                                                         zero_copy: bool) -> None:
    # ~40 CommitLog segments of 64 KiB: batches span files. A pull stops at
    # the end of a ConsumeQueue file (as get_message's): one holds them all.
    store = open_store(**{**SMALL, "mapped_file_size_consume_queue": 20 * 6000})
    n = 5000
    fill(store, n, queues=1)
    seen: list[int] = []
    offset = 0
    while True:
        r = store.get_arrow(TOPIC, 0, offset, 2048, zero_copy=zero_copy)
        if r.status is not GetStatus.FOUND:
            assert r.status is GetStatus.OFFSET_OVERFLOW_ONE
            break
        assert r.batch.num_rows == min(2048, n - offset)  # not RocketMQ's 32
        assert r.next_begin_offset == offset + r.batch.num_rows
        seen += r.batch.column("queue_offset").to_pylist()
        assert r.batch.column("body").to_pylist() == [body_of(i) for i in
                                                      range(offset, r.next_begin_offset)]
        offset = r.next_begin_offset
    assert seen == list(range(n))
    assert len(list((Path(store.config.store_path) / "commitlog").iterdir())) > 10


def test_body_types_copy_and_zero_copy(open_store: Any) -> None:
    store = open_store(**SMALL)
    fill(store, 50)
    copied = store.get_arrow(TOPIC, 0, 0, 100).batch
    viewed = store.get_arrow(TOPIC, 0, 0, 100, zero_copy=True).batch
    assert copied.schema.field("body").type == pa.binary()
    assert viewed.schema.field("body").type == pa.binary_view()
    assert copied.schema.names == viewed.schema.names
    assert copied.column("body").to_pylist() == viewed.column("body").to_pylist()
    # Everything but the body column is the same.
    for name in copied.schema.names:
        if name != "body":
            assert copied.column(name).equals(viewed.column(name)), name


def test_compressed_bodies_are_inflated_in_both_modes(open_store: Any) -> None:
    import zlib

    store = open_store(**SMALL)
    raw = b"compress me " * 50
    # sys_flag bit 0: the body is stored zlib-compressed (RocketMQ's producer does this).
    assert store.put(TOPIC, zlib.compress(raw), queue_id=0, tags="z", sys_flag=1).ok
    assert store.put(TOPIC, b"plain body, long enough", queue_id=0).ok
    for zc in (False, True):
        bodies = store.get_arrow(TOPIC, 0, 0, 10, zero_copy=zc).batch.column("body").to_pylist()
        assert bodies == [raw, b"plain body, long enough"], zc


@pytest.mark.parametrize("zero_copy", [False, True])
def test_batches_stay_valid_after_the_store_closes(store_path: str, zero_copy: bool) -> None:
    store = MessageStore(StoreConfig(store_path=store_path, **SMALL)).start()
    fill(store, 400, queues=1)
    batch = store.get_arrow(TOPIC, 0, 0, 1000, zero_copy=zero_copy).batch
    store.shutdown()
    del store
    import gc

    gc.collect()
    assert batch.column("body").to_pylist() == [body_of(i) for i in range(400)]
    assert batch.column("queue_offset").to_pylist() == list(range(400))


def test_damaged_records_are_skipped_and_counted_as_get_message(store_path: str) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as s:
        acked = [s.put(TOPIC, b"%04d" % i + b"y" * 1000, queue_id=0) for i in range(300)]
    victims = (5, 6, 40)
    n_files = len(list((Path(store_path) / "commitlog").iterdir()))
    for i in victims:
        r = acked[i]
        assert r.wrote_offset // SEG < n_files - 3  # outside the recovery scan
        flip_commitlog_bits(store_path, r.wrote_offset + BODY_AT + 500, SEG, 0x10)
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as s:
        for zc in (False, True):
            r = s.get_arrow(TOPIC, 0, 0, 1000, zero_copy=zc)
            assert r.damaged == len(victims) and r.next_begin_offset == 300
            got = r.batch.column("queue_offset").to_pylist()
            assert got == [i for i in range(300) if i not in victims]
            g = s.get_message("g", TOPIC, 0, 0, 32)
            assert g.damaged == 2  # the same accounting, in get_message's pull of 32


def test_retention_skips_are_counted(open_store: Any) -> None:
    store = open_store(**SMALL, delete_commit_log_files_interval=0,
                       delete_consume_queue_files_interval=0)
    fill(store, 2000, queues=1)
    store.flush()
    assert store.delete_expired_files(force=True) > 0
    lo = store.get_min_offset_in_queue(TOPIC, 0)
    assert lo > 0
    r = store.get_arrow(TOPIC, 0, 0, 100)
    g = store.get_message("g", TOPIC, 0, 0, 32)
    assert r.status is g.status is GetStatus.OFFSET_TOO_SMALL
    assert r.skipped == g.skipped == lo and r.next_begin_offset == lo
    r = store.get_arrow(TOPIC, 0, lo, 100)
    assert r.batch.column("queue_offset").to_pylist()[0] == lo


def test_bad_arguments(open_store: Any) -> None:
    store = open_store(**SMALL)
    fill(store, 3)
    with pytest.raises(ValueError, match="max_messages"):
        store.get_arrow(TOPIC, 0, 0, 0)
    with pytest.raises(ValueError):
        store.get_arrow(TOPIC, -1, 0, 10)
    with pytest.raises(TypeError):
        store.get_arrow(TOPIC, 0, "0", 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="zero_copy"):
        store.get_arrow(TOPIC, 0, 0, 10, zero_copy=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.get_arrow("bad topic!", 0, 0, 10)


@pytest.mark.parametrize("zero_copy", [False, True])
@pytest.mark.parametrize("columns", [["body"], ["queue_offset"], ["body", "queue_offset"],
                                     ["tags", "keys", "store_timestamp", "body", "msg_id"]])
def test_columns_asked_for_in_their_order(open_store: Any, columns: list[str],
                                          zero_copy: bool) -> None:
    store = open_store(**SMALL)
    fill(store, 200)
    full = store.get_arrow(TOPIC, 1, 3, 64).batch
    r = store.get_arrow(TOPIC, 1, 3, 64, columns=columns, zero_copy=zero_copy)
    assert r.batch.schema.names == columns and r.batch.num_rows == full.num_rows == 64
    assert r.next_begin_offset == 67
    for c in columns:
        assert r.batch.column(c).to_pylist() == full.column(c).to_pylist(), c
    body_type = pa.binary_view() if zero_copy else pa.binary()
    if "body" in columns:
        assert r.batch.schema.field("body").type == body_type


def test_columns_do_not_change_the_checks(store_path: str) -> None:
    """A damaged body is skipped and counted even when the body is not asked for."""
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as s:
        acked = [s.put(TOPIC, b"%04d" % i + b"y" * 1000, queue_id=0) for i in range(300)]
    r = acked[7]
    flip_commitlog_bits(store_path, r.wrote_offset + BODY_AT + 300, SEG, 0x40)
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as s:
        for zc in (False, True):
            got = s.get_arrow(TOPIC, 0, 0, 100, columns=["queue_offset"], zero_copy=zc)
            assert got.damaged == 1
            assert 7 not in got.batch.column("queue_offset").to_pylist()


def test_bad_columns(open_store: Any) -> None:
    store = open_store(**SMALL)
    fill(store, 3)
    for bad in (["nope"], ["body", "body"], [], ["store"]):
        with pytest.raises(ValueError):
            store.get_arrow(TOPIC, 0, 0, 10, columns=bad)
    with pytest.raises(TypeError):
        store.get_arrow(TOPIC, 0, 0, 10, columns="body")
    with store.consumer("g", TOPIC) as c:
        with pytest.raises(ValueError):
            c.poll_arrow(timeout=0, columns=["nope"])
        assert c.poll_arrow(timeout=0, columns=["body"]).schema.names == ["body"]
        assert c.poll_arrow(timeout=0, columns=["body"], zero_copy=True).schema.names == ["body"]
