"""``MessageStore.read_arrow``: columnar reads decoded in the engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")

from helpers.arrow_util import (  # noqa: E402
    FIXTURE_GEOMETRY,
    GEOMETRY,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
    all_api_rows,
    api_rows,
    copy_fixture,
    fill_rich_store,
    fixture_expected,
    key,
    normalize,
    row_of,
)
from rocketstore import MessageStore, StoreClosedError, StoreConfig  # noqa: E402


def arrow_rows(reader: pa.RecordBatchReader) -> list[dict[str, object]]:
    return [normalize(r) for r in reader.read_all().to_pylist()]


@pytest.mark.parametrize("ipv6_store", [False, True])
def test_queue_reads_equal_get_message_for_every_row(tmp_path: Path, ipv6_store: bool) -> None:
    store = fill_rich_store(str(tmp_path / "s"), ipv6_store=ipv6_store)
    try:
        assert len(list((tmp_path / "s" / "commitlog").iterdir())) >= 3
        for topic in ("orders", "events"):
            for q in store.queue_ids(topic):
                got = arrow_rows(store.read_arrow(topic, q, batch_size=7))
                want = api_rows(store, topic, q)
                assert len(want) > 10
                assert got == want
        whole = arrow_rows(store.read_arrow(["orders", "events"]))
        assert sorted(whole, key=key) == sorted(all_api_rows(store, ["orders", "events"]), key=key)
        if ipv6_store:
            assert all(len(r["msg_id"]) == 56 for r in whole)
        assert any(r["body"] == b"" for r in whole)
        assert any(r["tags"] == "標籤-ü" and "ключ" in r["keys"] for r in whole)
        assert any(r["born_host"].startswith("[2001:db8::7]:") for r in whole)
    finally:
        store.shutdown()


def test_parallel_decode_keeps_rows_and_order(tmp_path: Path) -> None:
    store = fill_rich_store(str(tmp_path / "s"))
    try:
        for args in ((), ("orders",)):
            one = store.read_arrow(*args, threads=1, batch_size=9).read_all()
            for threads in (2, 3, 8):
                many = store.read_arrow(*args, threads=threads, batch_size=9).read_all()
                assert many.to_pylist() == one.to_pylist()
    finally:
        store.shutdown()


def test_schema_and_batches(tmp_path: Path) -> None:
    store = fill_rich_store(str(tmp_path / "s"), n=60)
    try:
        reader = store.read_arrow("orders", batch_size=8)
        # The columns of the rows the Python API gives, in that order.
        assert reader.schema.names == list(all_api_rows(store, ["orders"])[0])
        assert str(reader.schema.field("born_timestamp").type) == "timestamp[us, tz=UTC]"
        assert str(reader.schema.field("keys").type) == "list<element: string>"
        assert str(reader.schema.field("properties").type) == "map<string, string>"
        sizes = [b.num_rows for b in reader]
        assert sizes and max(sizes) <= 8 and sum(sizes) == len(all_api_rows(store, ["orders"]))
    finally:
        store.shutdown()


def test_commitlog_scan_is_store_order_and_excludes_system_and_uncommitted(
    tmp_path: Path,
) -> None:
    store = fill_rich_store(str(tmp_path / "s"))
    try:
        rows = arrow_rows(store.read_arrow(batch_size=50))
        offsets = [r["commit_log_offset"] for r in rows]
        assert offsets == sorted(offsets)
        for r in rows:
            m = store.look_message_by_offset(r["commit_log_offset"])
            assert m is not None and row_of(m) == r
        topics = {r["topic"] for r in rows}
        assert topics == {"orders", "events"}
        assert not any(r["sys_flag"] & 0xC in (TRANSACTION_PREPARED, TRANSACTION_ROLLBACK)
                       for r in rows)
        # Everything in the queues is in the scan, and nothing else.
        assert sorted(rows, key=key) == sorted(all_api_rows(store, ["orders", "events"]), key=key)

        everything = arrow_rows(store.read_arrow(include_system=True, include_uncommitted=True))
        extra = {bytes(r["body"]) for r in everything} - {bytes(r["body"]) for r in rows}
        assert extra == {b"prepared", b"rolled back", b"delayed"}
        assert any(r["topic"] == "SCHEDULE_TOPIC_XXXX" for r in everything)
        # A physical range starting mid-segment starts at the first record at or after it.
        mid = offsets[len(offsets) // 2]
        part = arrow_rows(store.read_arrow(start=mid - 1, end=offsets[-1]))
        want = [o for o in offsets if mid <= o < offsets[-1]]
        assert [r["commit_log_offset"] for r in part] == want
    finally:
        store.shutdown()


def test_damaged_body_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = fill_rich_store(str(path), n=30)
    victim = api_rows(store, "orders", 1)[2]
    assert victim["body"]
    store.shutdown()
    seg = GEOMETRY["mapped_file_size_commit_log"]
    phy = victim["commit_log_offset"]
    with MessageStore(StoreConfig(store_path=str(path), **GEOMETRY), read_only=True) as ro:
        m = ro.look_message_by_offset(phy)
        assert m is not None
        at = phy % seg + m.record_bytes().index(m.stored_body)
    f = path / "commitlog" / f"{phy // seg * seg:020d}"
    data = bytearray(f.read_bytes())
    data[at] ^= 0xFF
    f.write_bytes(bytes(data))
    with MessageStore(StoreConfig(store_path=str(path), **GEOMETRY), read_only=True) as ro:
        stream = ro._arrow_stream("orders", 1)
        rows = arrow_rows(pa.RecordBatchReader.from_stream(stream))
        assert victim["queue_offset"] not in [r["queue_offset"] for r in rows]
        intact = [r for r in api_rows(ro, "orders", 1)
                  if r["queue_offset"] != victim["queue_offset"]]
        assert rows == intact
        assert stream.skipped_corrupt == 1
    # A scan reads up to the end the store found; without the CRC check at
    # open, that end lies past the damaged record, which the scan skips.
    cfg = StoreConfig(store_path=str(path), check_crc_on_recover=False, **GEOMETRY)
    with MessageStore(cfg, read_only=True) as ro:
        scan = ro._arrow_stream()
        scanned = arrow_rows(pa.RecordBatchReader.from_stream(scan))
        assert victim["commit_log_offset"] not in [r["commit_log_offset"] for r in scanned]
        assert scan.skipped_corrupt == 1
        assert max(r["commit_log_offset"] for r in scanned) > victim["commit_log_offset"]


def test_arrays_outlive_the_store_and_deleted_files(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = fill_rich_store(str(path))
    want = arrow_rows(store.read_arrow())
    table = store.read_arrow().read_all()
    reader = store.read_arrow("orders", batch_size=5, threads=1)
    first = reader.read_next_batch()
    parallel = store.read_arrow(batch_size=5, threads=2)
    parallel.read_next_batch()
    store.shutdown()
    for p in (path / "commitlog").iterdir():
        p.unlink()
    assert [normalize(r) for r in table.to_pylist()] == want
    assert first.num_rows == 5 and first.column("body").to_pylist()[0] is not None
    # The rest of the stream fails cleanly (the store is closed), never crashes.
    with pytest.raises(Exception, match="closed"):
        reader.read_next_batch()
    # Decode threads may have decoded a batch or two ahead; then the stream
    # fails the same way.
    with pytest.raises(Exception, match="closed"):
        for _ in parallel:
            pass
    with pytest.raises(StoreClosedError):
        store.read_arrow()


def test_retention_gap_is_counted_not_returned(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = fill_rich_store(str(path))
    before = api_rows(store, "orders", 1)
    store.shutdown()
    # What retention does to the oldest segment, done while the store is closed.
    (path / "commitlog" / f"{0:020d}").unlink()
    with MessageStore(StoreConfig(store_path=str(path), **GEOMETRY), read_only=True) as ro:
        stream = ro._arrow_stream("orders", 1, start=0)
        rows = arrow_rows(pa.RecordBatchReader.from_stream(stream))
        assert rows == api_rows(ro, "orders", 1)
        assert 0 < len(rows) < len(before)
        assert stream.lost == len(before) - len(rows)


def test_rocketmq_4_9_8_store_reads_with_just_its_path(tmp_path: Path) -> None:
    path = copy_fixture(tmp_path)
    exp = fixture_expected()
    by_phy = {r["phy"]: r for r in exp["records"]}
    cfg = StoreConfig(store_path=str(path), **FIXTURE_GEOMETRY)
    with MessageStore(cfg, read_only=True) as store:
        rows = arrow_rows(store.read_arrow(include_system=True, include_uncommitted=True))
        assert [r["commit_log_offset"] for r in rows] == sorted(by_phy)
        for r in rows:
            e = by_phy[r["commit_log_offset"]]
            assert (r["topic"], r["queue_id"], r["queue_offset"], r["msg_id"]) == (
                e["topic"], e["queue_id"], e["queue_offset"], e["msg_id"])
            assert r["keys"] == e["keys"] and r["tags"] == e["tags"]
            assert r["properties"] == e["properties"]
            assert r["sys_flag"] == e["sys_flag"] and r["body_crc"] == e["body_crc"]
            assert r["store_timestamp"] == e["store_timestamp"]
            assert r["born_timestamp"] == e["born_timestamp"]
            assert r["body"] == bytes.fromhex(e["body_hex"])
        default = arrow_rows(store.read_arrow())
        want = [e for e in exp["records"]
                if e["tran_type"] in (0, 8) and e["topic"] != "SCHEDULE_TOPIC_XXXX"
                and not e["topic"].startswith("RMQ_SYS_")]
        assert [r["commit_log_offset"] for r in default] == [e["phy"] for e in want]
        # Through the consume queues: every queue equals get_message.
        for t in store.topics(include_system=True):
            for q in store.queue_ids(t):
                assert arrow_rows(store.read_arrow(t, q)) == api_rows(store, t, q)


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
def test_bad_arguments(tmp_path: Path) -> None:
    store = fill_rich_store(str(tmp_path / "s"), n=5)
    try:
        with pytest.raises(ValueError, match="batch_size"):
            store.read_arrow("orders", batch_size=0)
        with pytest.raises(ValueError, match="queue_id needs a topic"):
            store.read_arrow(queue_id=1)
        with pytest.raises(ValueError, match="a topic may use only"):
            store.read_arrow("a/b")
        assert store.read_arrow("nothing-here").read_all().num_rows == 0
    finally:
        store.shutdown()


def test_import_without_pyarrow_or_pyspark() -> None:
    code = (
        "import sys; sys.modules['pyarrow'] = None; sys.modules['pyspark'] = None\n"
        "import rocketstore, rocketstore.spark\n"
        "try:\n"
        "    rocketstore.spark.RocketStoreDataSource\n"
        "except ImportError as e:\n"
        "    print('needs', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, check=True)
    assert "needs" in out.stdout and "rocketstore[spark]" in out.stdout


def test_reads_see_every_acknowledged_put(tmp_path: Path) -> None:
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        cfg = StoreConfig(store_path=str(tmp_path / flush), flush_disk_type=flush, **GEOMETRY)
        with MessageStore(cfg) as store:
            for i in range(50):
                store.put("orders", f"m{i}".encode(), queue_id=i % 2)
                # Through the queues right after the put (no wait for dispatch).
                got = store.read_arrow("orders", threads=1).read_all()
                assert got.num_rows == i + 1
            assert store.read_arrow().read_all().num_rows == 50
