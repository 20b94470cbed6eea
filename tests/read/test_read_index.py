"""Key queries through the IndexFile (docs/format.md §10): ``query_message``.

The index geometry is tiny (100 slots, 400 entries = 399 keys per file), so
~4700 keys roll a dozen index files.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.read_util import SMALL_INDEX, wait_dispatched
from helpers.store_util import diff_snapshots, java_string_hash, snapshot
from rocketstore import (
    ConfigMismatchError,
    GetStatus,
    MessageStore,
    PutResult,
    UnknownTopicWarning,
)

OpenStore = Callable[..., MessageStore]

N = 1500
INDEX_FILE_SIZE = 40 + 100 * 4 + 400 * 20
UNIQ = "0A000001000018B4AAC208A4E9F40000"


def _keys(i: int) -> list[str]:
    keys = [f"k{i % 50}", f"u{i}"]
    if i % 10 == 0:
        keys.append("all")
    return keys


class Built:
    def __init__(self) -> None:
        self.by_i: list[PutResult] = []
        self.aa: list[PutResult] = []
        self.bb: list[PutResult] = []
        self.uniq: PutResult | None = None


def _build(store: MessageStore) -> Built:
    b = Built()
    for i in range(N):
        r = store.put("T", b"m%d" % i, i % 4, keys=_keys(i))
        assert r.ok
        b.by_i.append(r)
    for i in range(20):
        ra = store.put("T", b"Aa%d" % i, 0, keys=["Aa"])
        rb = store.put("T", b"BB%d" % i, 1, keys="BB")
        assert ra.ok and rb.ok
        b.aa.append(ra)
        b.bb.append(rb)
    b.uniq = store.put("T", b"uniq", 2, properties={"UNIQ_KEY": UNIQ})
    assert b.uniq.ok
    # same key, other topic
    assert store.put("Other", b"other-k7", 0, keys=["k7"]).ok
    wait_dispatched(store)
    return b


def _offsets(msgs: list) -> list[int]:
    return [m.commit_log_offset for m in msgs]


def _expected(b: Built, key: str) -> list[int]:
    return [r.wrote_offset for i, r in enumerate(b.by_i) if key in _keys(i)]


@pytest.fixture
def built(open_store: OpenStore) -> tuple[MessageStore, Built]:
    store = open_store(**SMALL_INDEX)
    return store, _build(store)


def test_index_files_roll(built: tuple[MessageStore, Built], store_path: str) -> None:
    files = sorted(p for p in (Path(store_path) / "index").iterdir())
    assert len(files) >= 3
    for p in files:
        assert re.fullmatch(r"\d{17}", p.name), p.name
        assert p.stat().st_size == INDEX_FILE_SIZE
    assert len({p.name for p in files}) == len(files)


def test_query_returns_only_messages_carrying_the_key(built: tuple[MessageStore, Built]) -> None:
    store, b = built
    for key in ("k7", "k0", "k49"):
        msgs = store.query_message("T", key, 64)
        assert _offsets(msgs) == _expected(b, key)  # all 30, ascending
        for m in msgs:
            assert key in m.keys
            assert m.topic == "T"
            assert m.properties["KEYS"].split(" ") == m.keys


def test_query_capped_by_max_num_newest_first(built: tuple[MessageStore, Built]) -> None:
    store, b = built
    want = _expected(b, "k7")
    for max_num in (1, 10, 29):
        msgs = store.query_message("T", "k7", max_num)
        assert len(msgs) == max_num
        got = _offsets(msgs)
        assert got == sorted(got)
        # the index is walked newest to oldest (docs/format.md §19.3): the newest max_num
        assert got == want[-max_num:]
    # default max_num is 32 (more than the 30 carrying k7)
    assert _offsets(store.query_message("T", "k7")) == want


def test_every_argument_form_finds_the_same(built: tuple[MessageStore, Built]) -> None:
    """The usual call (positional, int bounds: the native fast path) and
    every other form (keywords, ``datetime`` bounds, an int subclass: the
    Python definition) find the same messages."""
    store, b = built
    want = _expected(b, "k7")
    end = b.by_i[-1].store_timestamp + 1000
    since = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
    until = datetime.datetime.fromtimestamp(end / 1000, tz=datetime.UTC)

    class Num(int):
        pass

    calls = [
        lambda: store.query_message("T", "k7"),
        lambda: store.query_message("T", "k7", 64),
        lambda: store.query_message("T", "k7", 64, 0),
        lambda: store.query_message("T", "k7", 64, 0, None),
        lambda: store.query_message("T", "k7", 64, 0, end),
        lambda: store.query_message("T", key="k7"),
        lambda: store.query_message(topic="T", key="k7", max_num=64),
        lambda: store.query_message("T", "k7", 64, since),
        lambda: store.query_message("T", "k7", 64, 0, until),
        lambda: store.query_message("T", "k7", Num(64), Num(0)),
        lambda: MessageStore.query_message(store, "T", "k7", 64),
    ]
    for call in calls:
        assert _offsets(call()) == want
    with pytest.raises(TypeError):
        store.query_message("T")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        store.query_message("T", "k7", 64, 0, None, 1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        MessageStore.query_message(object(), "T", "k7")  # type: ignore[arg-type]


def test_query_capped_by_max_msgs_num_batch(built: tuple[MessageStore, Built]) -> None:
    store, b = built
    want = _expected(b, "all")
    assert len(want) == 150
    for max_num in (64, 65, 100, 1000):
        got = _offsets(store.query_message("T", "all", max_num))
        assert len(got) == 64
        assert got == sorted(got)
        assert set(got) <= set(want)
    assert len(store.query_message("T", "all")) == 32


def test_unique_keys(built: tuple[MessageStore, Built]) -> None:
    store, b = built
    for i in (0, 1, 2, 399, 400, 777, 1200, N - 1):
        msgs = store.query_message("T", f"u{i}", 32)
        assert [(m.commit_log_offset, m.body) for m in msgs] == [
            (b.by_i[i].wrote_offset, b"m%d" % i)
        ]
        assert msgs[0].queue_id == i % 4
        assert msgs[0].queue_offset == b.by_i[i].queue_offset


def test_colliding_keys_are_filtered(built: tuple[MessageStore, Built]) -> None:
    store, b = built
    assert java_string_hash("T#Aa") == java_string_hash("T#BB")
    aa = store.query_message("T", "Aa", 64)
    assert _offsets(aa) == [r.wrote_offset for r in b.aa]
    assert {m.body[:2] for m in aa} == {b"Aa"}
    assert all(m.keys == ["Aa"] for m in aa)
    bb = store.query_message("T", "BB", 64)
    assert _offsets(bb) == [r.wrote_offset for r in b.bb]
    assert all(m.keys == ["BB"] for m in bb)
    # a smaller max_num never lets a collider through either
    small = store.query_message("T", "Aa", 5)
    assert 0 < len(small) <= 5
    assert all(m.keys == ["Aa"] for m in small)


def test_uniq_key_property_is_indexed(built: tuple[MessageStore, Built]) -> None:
    store, b = built
    assert b.uniq is not None
    msgs = store.query_message("T", UNIQ)
    assert [(m.commit_log_offset, m.body) for m in msgs] == [(b.uniq.wrote_offset, b"uniq")]
    assert msgs[0].properties["UNIQ_KEY"] == UNIQ
    assert msgs[0].keys == []


def test_topic_mismatch_and_unknown_key(built: tuple[MessageStore, Built]) -> None:
    store, _ = built
    with pytest.warns(UnknownTopicWarning, match="'Nope' does not exist"):
        assert store.query_message("Nope", "k7") == []
    assert store.query_message("T", "no-such-key") == []
    assert store.query_message("Other", "u5") == []
    other = store.query_message("Other", "k7")
    assert [m.body for m in other] == [b"other-k7"]
    assert store.query_message("Other", UNIQ) == []


def test_timestamp_window_limits(built: tuple[MessageStore, Built]) -> None:
    store, b = built
    first = b.by_i[0].store_timestamp
    last = b.by_i[-1].store_timestamp
    future = int(time.time() * 1000) + 3_600_000
    assert store.query_message("T", "k7", 64, future, future + 1000) == []
    assert store.query_message("T", "k7", 64, 0, first - 5_000) == []
    assert _offsets(store.query_message("T", "k7", 64, first - 5_000, last + 5_000)) == (
        _expected(b, "k7")
    )


def test_timestamp_window_selects_batches(open_store: OpenStore) -> None:
    """Two batches 1.2 s apart: index times have 1 s resolution (timeDiff in seconds)."""
    store = open_store(**SMALL_INDEX)
    one = [store.put("T", b"one%d" % i, 0, keys=["w"]) for i in range(5)]
    time.sleep(1.2)
    two = [store.put("T", b"two%d" % i, 0, keys=["w"]) for i in range(5)]
    wait_dispatched(store)
    end_one = one[-1].store_timestamp
    assert two[0].store_timestamp - end_one >= 1100
    assert _offsets(store.query_message("T", "w", 64, 0, end_one)) == [r.wrote_offset for r in one]
    assert _offsets(store.query_message("T", "w", 64, end_one + 1)) == [r.wrote_offset for r in two]
    assert len(store.query_message("T", "w", 64)) == 10


def test_queries_survive_restart(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL_INDEX)
    b = _build(store)
    before = {k: _offsets(store.query_message("T", k, 64)) for k in ("k7", "Aa", "u1234", UNIQ)}
    store.shutdown()
    for read_only in (False, True):
        s = open_store(read_only=read_only, **SMALL_INDEX)
        for key, offs in before.items():
            assert _offsets(s.query_message("T", key, 64)) == offs, key
        assert _offsets(s.query_message("T", "k3", 64)) == _expected(b, "k3")
        s.shutdown()
    # a writer that reopened keeps indexing into the existing files
    s = open_store(**SMALL_INDEX)
    r = s.put("T", b"late", 0, keys=["k7", "late"])
    wait_dispatched(s)
    assert _offsets(s.query_message("T", "late")) == [r.wrote_offset]
    assert _offsets(s.query_message("T", "k7", 64)) == before["k7"] + [r.wrote_offset]


def test_read_only_with_other_geometry_refuses_queries_only(
    open_store: OpenStore, store_path: str
) -> None:
    store = open_store(**SMALL_INDEX)
    b = _build(store)
    store.shutdown()
    other = {**SMALL_INDEX, "max_hash_slot_num": 200}
    ro = open_store(read_only=True, **other)
    with pytest.raises(ConfigMismatchError):
        ro.query_message("T", "k7")
    # everything else still reads
    r = ro.get_message("g", "T", 0, 0, 4)
    assert r.status is GetStatus.FOUND and len(r.messages) == 4
    m = ro.look_message_by_offset(b.by_i[5].wrote_offset)
    assert m is not None and m.body == b"m5"
    ro.shutdown()
    ro = open_store(read_only=True, **{**SMALL_INDEX, "max_index_num": 800})
    with pytest.raises(ConfigMismatchError):
        ro.query_message("T", "u3")
    ro.shutdown()


def test_writer_with_other_geometry_is_refused(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL_INDEX)
    _build(store)
    want = _offsets(store.query_message("T", "k7", 64))
    store.shutdown()
    before = snapshot(store_path)
    for other in ({"max_hash_slot_num": 200}, {"max_index_num": 800}):
        with pytest.raises(ConfigMismatchError):
            open_store(**{**SMALL_INDEX, **other})
    # the refused writer touched no byte (not even an mtime)
    assert diff_snapshots(before, snapshot(store_path)) == []
    s = open_store(**SMALL_INDEX)
    assert _offsets(s.query_message("T", "k7", 64)) == want


def _index_entries(store_path: str) -> list[tuple[int, int]]:
    """``(keyHash, phyOffset)`` of every used entry of every index file (docs/format.md §10)."""
    out = []
    for p in sorted((Path(store_path) / "index").iterdir()):
        data = p.read_bytes()
        count = int.from_bytes(data[36:40], "big", signed=True)
        base = 40 + 100 * 4
        for i in range(1, count):
            e = data[base + i * 20 : base + i * 20 + 20]
            out.append((int.from_bytes(e[0:4], "big", signed=True), int.from_bytes(e[4:12], "big")))
    return out


def test_non_ascii_and_multiple_keys(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL_INDEX)
    keys = ["中文", "ключ", "😀", "a😀b", "x" * 200]
    puts = {k: store.put("T", k.encode(), 0, keys=[k]) for k in keys}
    multi = store.put("T", b"multi", 1, keys=["m1", "m2", "m3"])
    wait_dispatched(store)
    for k, r in puts.items():
        msgs = store.query_message("T", k)
        assert [(m.commit_log_offset, m.body) for m in msgs] == [(r.wrote_offset, k.encode())]
        assert msgs[0].keys == [k]
    for k in ("m1", "m2", "m3"):
        msgs = store.query_message("T", k)
        assert [m.commit_log_offset for m in msgs] == [multi.wrote_offset]
        assert msgs[0].keys == ["m1", "m2", "m3"]
        assert msgs[0].properties["KEYS"] == "m1 m2 m3"
    store.flush()
    # the index holds Java's hash of "topic#key" over UTF-16 code units
    entries = set(_index_entries(store_path))
    for k, r in puts.items():
        h = abs(java_string_hash(f"T#{k}"))
        assert (h, r.wrote_offset) in entries, k
