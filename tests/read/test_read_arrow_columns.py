"""``read_arrow(columns=...)``: the engine decodes only the columns asked for.

A pruned read returns exactly the same columns of a full read, row for row,
in the order asked for, on a store with a damaged record and a deleted
segment; damaged records are found the same way whatever the columns (the
body and property CRCs are checked even when neither column is returned);
and the property bytes are parsed only when ``properties``, ``tags`` or
``keys`` is returned (the stream's ``properties_parsed`` counter).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")

from helpers.arrow_util import GEOMETRY, damaged_rich_store, fill_rich_store  # noqa: E402
from rocketstore import MessageStore, StoreConfig  # noqa: E402

SUBSETS = [
    ["topic", "queue_id", "queue_offset", "body"],
    ["body", "queue_offset", "topic"],
    ["reconsume_times", "store_host", "msg_id", "commit_log_offset"],
    ["keys"],
    ["tags", "store_timestamp"],
    ["properties", "born_host", "born_timestamp", "flag", "sys_flag", "body_crc"],
    ["queue_offset"],
]


def table_of(stream: object) -> pa.Table:
    return pa.RecordBatchReader.from_stream(stream).read_all()


def rows(t: pa.Table) -> list[dict[str, object]]:
    return list(t.to_pylist())


def test_pruned_reads_equal_the_same_columns_of_a_full_read(tmp_path: Path) -> None:
    path, body_victim, prop_victim = damaged_rich_store(tmp_path / "s")
    with MessageStore(StoreConfig(store_path=str(path), **GEOMETRY), read_only=True) as ro:
        reads = [
            ("orders", None, {}),            # queue reads, across the deleted segment
            (["orders", "events"], None, {"start": 3}),
            (None, None, {}),                # a CommitLog scan
        ]
        for topic, qid, extra in reads:
            for threads in (1, 2):
                full_s = ro._arrow_stream(topic, qid, batch_size=7, threads=threads, **extra)
                full = table_of(full_s)
                assert full.num_rows > 50
                # The damage is there and skipped; the deleted segment counts as lost.
                assert full_s.skipped_corrupt == 2, (topic, threads)
                offsets = set(full.column("commit_log_offset").to_pylist())
                assert body_victim["commit_log_offset"] not in offsets
                assert prop_victim["commit_log_offset"] not in offsets
                for cols in SUBSETS:
                    s = ro._arrow_stream(topic, qid, batch_size=7, threads=threads,
                                         columns=cols, **extra)
                    got = table_of(s)
                    assert got.column_names == cols
                    assert got.schema == pa.schema([full.schema.field(c) for c in cols])
                    assert rows(got) == rows(full.select(cols)), (topic, threads, cols)
                    # Damage is found by the CRCs whatever the columns.
                    assert (s.skipped_corrupt, s.lost, s.filtered, s.rows) == (
                        full_s.skipped_corrupt, full_s.lost, full_s.filtered, full_s.rows)
        q = ro._arrow_stream("orders", 2, start=0)
        table_of(q)
        assert q.lost > 0


def test_properties_are_parsed_only_when_asked_for(tmp_path: Path) -> None:
    store = fill_rich_store(str(tmp_path / "s"))
    try:
        full = table_of(store._arrow_stream())
        # Every record this store writes carries properties (at least its
        # property CRC), so a read that needs them parses each one.
        with_props = full.num_rows
        for cols, parsed in (
            (["topic", "queue_id", "queue_offset", "body"], 0),
            (["msg_id", "store_timestamp", "born_host", "body_crc"], 0),
            (["tags"], with_props),
            (["keys"], with_props),
            (["properties"], with_props),
            (None, with_props),
        ):
            for threads in (1, 3):
                s = store._arrow_stream(columns=cols, threads=threads, batch_size=11)
                t = table_of(s)
                assert t.num_rows == full.num_rows
                assert s.properties_parsed == parsed, (cols, threads)
    finally:
        store.shutdown()


def test_public_read_arrow_columns(tmp_path: Path) -> None:
    store = fill_rich_store(str(tmp_path / "s"))
    try:
        t = store.read_arrow("events", columns=("body", "topic")).read_all()
        assert t.column_names == ["body", "topic"]
        assert set(t.column("topic").to_pylist()) == {"events"}
        want = store.read_arrow("events").read_all().select(["body", "topic"])
        assert t.equals(want)
        for bad, err, msg in (
            (["topic", "bodyy"], ValueError, r'no column named "bodyy"; the columns: topic, '),
            (["topic", "topic"], ValueError, "named twice"),
            ([], ValueError, "no columns"),
            ("topic", TypeError, "list of column names"),
            ([1], TypeError, "list of str"),
            (["store"], ValueError, "several stores"),
        ):
            with pytest.raises(err, match=msg):
                store.read_arrow(columns=bad)
        s = store._arrow_stream("events", columns=["store", "queue_offset"], store_name="here")
        t = table_of(s)
        assert t.column_names == ["store", "queue_offset"]
        assert set(t.column("store").to_pylist()) == {"here"}
        with pytest.raises(ValueError, match="store column needs a store name"):
            store._arrow_stream("events", columns=["store"])
    finally:
        store.shutdown()
