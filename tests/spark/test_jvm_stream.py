"""Micro-batch streaming reads of the JVM connector against the Python
source's: the same rows and the same offsets, character for character, in
the checkpoint (startingOffsets, startingTimestamp, maxOffsetsPerTrigger,
Trigger.AvailableNow, a queue that appears later, several stores), a
checkpoint written by either connector resumed by the other, and retention's
losses.

Marked ``spark``; skipped when the connector's jar is not built
(``scripts/build-jar.sh``). In the session (tests/conftest.py)
``rocketstore`` is the JVM connector and ``rocketstore_python`` the Python
source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from helpers.arrow_util import GEOMETRY, all_api_rows, api_rows, key, normalize
from helpers.read_util import wait_dispatched
from rocketstore import MessageStore, StoreConfig

pytestmark = pytest.mark.spark

JVM, PY = "rocketstore", "rocketstore_python"
OPTS = {k: str(v) for k, v in GEOMETRY.items()}


def stream(spark: Any, fmt: str, src: str, out: Path, ckpt: Path, schema: str | None = None,
           **opts: Any) -> Any:
    """One Trigger.AvailableNow run of a streaming read of ``src`` (of the
    columns of ``schema``, a DDL string) into Parquet at ``out``; returns
    the finished query."""
    r = spark.readStream.format(fmt).option("path", src)
    if schema is not None:
        r = r.schema(schema)
    for k, v in {**OPTS, **opts}.items():
        r = r.option(k, str(v))
    q = (r.load().writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination(120)
    return q


def offsets_log(ckpt: Path) -> list[str]:
    """The source offsets of every micro-batch, as the checkpoint holds them."""
    files = sorted((ckpt / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return [f.read_text().splitlines()[-1] for f in files]


def parquet_rows(spark: Any, out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    rows = [r if "properties" not in r else normalize(r)
            for r in spark.read.parquet(str(out)).toArrow().to_pylist()]
    return sorted(rows, key=lambda r: (r.get("store") or "", *key(r)) if "queue_offset" in r
                  else ("", "", 0, 0, repr(r)))


def both(spark: Any, src: str, tmp: Path, name: str, **opts: Any) -> tuple[list[str], list[Any]]:
    """Runs (or resumes) the same stream with each connector, each into its
    own checkpoint; asserts the same offsets log and rows; returns them."""
    got = {}
    for fmt in (JVM, PY):
        d = tmp / f"{name}-{fmt}"
        q = stream(spark, fmt, src, d / "out", d / "ckpt", **opts)
        assert q.exception() is None
        got[fmt] = (offsets_log(d / "ckpt"), parquet_rows(spark, d / "out"))
    assert got[JVM][0] == got[PY][0]
    assert got[JVM][1] == got[PY][1]
    return got[JVM]


def batch_sizes(log: list[str]) -> list[int]:
    ends = [json.loads(line) for line in log]
    return [sum(e.values()) - sum(p.values()) for p, e in zip([{}, *ends[:-1]], ends,
                                                               strict=True)]


def test_a_stream_gives_the_python_sources_offsets_and_rows(jvm: Any, tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    n = jvm._jvm.org.rocketstore.spark.NativeLib
    handles = n.openHandles()
    store = MessageStore(StoreConfig(store_path=src, **GEOMETRY)).start()
    try:
        for i in range(60):
            store.put("orders", f"a{i}".encode(), queue_id=i % 2, keys=[f"k{i}"])
        for i in range(20):
            store.put("events", f"e{i}".encode(), tags="t")
        wait_dispatched(store)
        log, rows = both(jvm, src, tmp_path, "s", startingOffsets="earliest",
                         maxOffsetsPerTrigger=25)
        assert rows == sorted(all_api_rows(store), key=key)
        assert log[-1] == '{"events/0": 20, "orders/0": 30, "orders/1": 30}'
        assert max(batch_sizes(log)) == 25 and sum(batch_sizes(log)) == 80
        # The writer goes on; a queue appears after the query started.
        for i in range(40):
            store.put("orders", f"b{i}".encode(), queue_id=i % 3)
        wait_dispatched(store)
        log, rows = both(jvm, src, tmp_path, "s", startingOffsets="earliest",
                         maxOffsetsPerTrigger=25)
        assert rows == sorted(all_api_rows(store), key=key)
        assert len({key(r) for r in rows}) == len(rows) == 120
        assert json.loads(log[-1]) == {"events/0": 20, "orders/0": 44, "orders/1": 43,
                                       "orders/2": 13}
        assert max(batch_sizes(log)) <= 25 and sum(batch_sizes(log)) == 120
    finally:
        store.shutdown()
    # The driver's stores are closed when the query stops.
    assert n.openHandles() == handles


def test_a_running_stream_follows_the_writer(jvm: Any, tmp_path: Path) -> None:
    """A query with a processing-time trigger: the driver's stores, kept
    open between triggers, pick up what the writer puts (new records, a new
    queue, a new topic)."""
    import time

    src = str(tmp_path / "src")
    n = jvm._jvm.org.rocketstore.spark.NativeLib
    handles = n.openHandles()
    store = MessageStore(StoreConfig(store_path=src, **GEOMETRY)).start()
    q = None
    try:
        store.put("orders", b"first")
        wait_dispatched(store)
        r = jvm.readStream.format(JVM).option("path", src).option("startingOffsets", "earliest")
        for k, v in OPTS.items():
            r = r.option(k, v)
        q = (r.load().selectExpr("topic", "queue_id", "queue_offset", "body")
             .writeStream.format("memory").queryName("jvm_follow")
             .trigger(processingTime="200 milliseconds").start())

        def seen(want: int) -> list[Any]:
            deadline = time.monotonic() + 60
            while True:
                got = jvm.sql("SELECT * FROM jvm_follow").collect()
                if len(got) >= want or time.monotonic() > deadline:
                    return got
                time.sleep(0.2)

        assert len(seen(1)) == 1
        for i in range(30):
            store.put("orders", f"m{i}".encode(), queue_id=i % 3)  # queues 1, 2 are new
        store.put("events", b"new topic")
        wait_dispatched(store)
        got = seen(32)
        assert q.exception() is None
        assert sorted((r.topic, r.queue_id, r.queue_offset) for r in got) == sorted(
            [("orders", 0, 0), ("events", 0, 0)]
            + [("orders", i % 3, (i // 3) + (1 if i % 3 == 0 else 0)) for i in range(30)])
    finally:
        if q is not None:
            q.stop()
        store.shutdown()
    assert n.openHandles() == handles


def test_where_a_stream_starts(jvm: Any, tmp_path: Path) -> None:
    src, other = str(tmp_path / "a"), str(tmp_path / "b")
    with MessageStore(StoreConfig(store_path=src, **GEOMETRY)) as s:
        for i in range(30):
            s.put("orders", f"a{i}".encode(), queue_id=i % 3)
            s.put("events", f"e{i}".encode())
        times = sorted(r["store_timestamp"] for r in all_api_rows(s))
    with MessageStore(StoreConfig(store_path=other, **GEOMETRY)) as s:
        for i in range(10):
            s.put("orders", f"o{i}".encode())
    # The default is latest: nothing the store holds is read.
    log, rows = both(jvm, src, tmp_path, "latest")
    assert rows == [] and json.loads(log[-1])["orders/2"] == 10
    for i, opts in enumerate([
        {"startingOffsets": '{"orders/1": 3, "events/0": -1, "orders/2": -2}'},
        {"startingTimestamp": times[len(times) // 2], "topic": "orders"},
        {"topic": "orders", "queues": "0,2", "startingOffsets": "earliest",
         "maxOffsetsPerTrigger": 7, "maxRecordsPerPartition": 3, "batchSize": 2},
    ]):
        log, rows = both(jvm, src, tmp_path, f"opts{i}", **opts)
        assert rows
    assert {r["queue_id"] for r in rows} == {0, 2} and max(batch_sizes(log)) == 7
    # Several stores: queues keyed "<path>|topic/queue", rows with a store column.
    log, rows = both(jvm, f"{src},{other}", tmp_path, "several", startingOffsets="earliest",
                     topic="orders")
    assert json.loads(log[-1]) == {f"{src}|orders/0": 10, f"{src}|orders/1": 10,
                                   f"{src}|orders/2": 10, f"{other}|orders/0": 10}
    assert {r["store"] for r in rows} == {src, other} and len(rows) == 40
    # A schema's columns, in its order (the engine decodes only those).
    ddl = "body binary, queue_id int, store string"
    _, rows = both(jvm, src, tmp_path, "schema", schema=ddl, startingOffsets="earliest",
                   topic="orders")
    assert len(rows) == 30 and list(rows[0]) == ["body", "queue_id", "store"]
    assert {r["store"] for r in rows} == {src}


def test_the_refresh_entry_is_guarded(jvm: Any, tmp_path: Path) -> None:
    n = jvm._jvm.org.rocketstore.spark.NativeLib
    with pytest.raises(Exception, match="no store with handle"):
        n.refresh(12345)
    src = str(tmp_path / "s")
    with MessageStore(StoreConfig(store_path=src, **GEOMETRY)) as s:
        s.put("orders", b"x")
        h = n.open(src, None, None)
        try:
            n.refresh(h)
            assert n.refresh(h) is False  # nothing new since the last refresh
            s.put("orders", b"y")
            wait_dispatched(s)
            assert n.refresh(h) is True
        finally:
            n.close(h)
    with pytest.raises(Exception, match="no store with handle"):
        n.refresh(h)  # closed


def test_a_checkpoint_resumes_with_the_other_connector(jvm: Any, tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    store = MessageStore(StoreConfig(store_path=src, **GEOMETRY)).start()
    try:
        n = 0
        for fmt in (PY, JVM, PY, JVM):
            for i in range(n, n + 25):
                store.put("orders", f"m{i}".encode(), queue_id=i % 2)
            n += 25
            wait_dispatched(store)
            q = stream(jvm, fmt, src, out, ckpt, topic="orders", startingOffsets="earliest",
                       maxOffsetsPerTrigger=10)
            assert q.exception() is None, fmt
            rows = parquet_rows(jvm, out)
            # Each run read on from where the other stopped: no row twice, none missed.
            assert rows == sorted(all_api_rows(store, ["orders"]), key=key), fmt
            assert len(rows) == n
        assert offsets_log(ckpt)[-1] == '{"orders/0": 50, "orders/1": 50}'
    finally:
        store.shutdown()


def test_offsets_deleted_by_retention(jvm: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    with MessageStore(StoreConfig(store_path=str(src), **GEOMETRY)) as s:
        for _ in range(400):
            s.put("orders", b"x" * 100, queue_id=0)
    start = json.dumps({"orders/0": 0})
    # What retention does: the oldest CommitLog segment goes (the task
    # finds queue units pointing into it), then its queue file (the driver
    # finds the queue's first offset moved past the checkpoint's).
    (src / "commitlog" / f"{0:020d}").unlink()
    for i, (where, lost) in enumerate([
        ("task", r"orders/0: \d+ messages in offsets \[0, 400\) were deleted"),
        ("driver", r"orders/0: offsets \[0, \d+\) of .* were deleted"),
    ]):
        if where == "driver":
            (src / "consumequeue" / "orders" / "0" / f"{0:020d}").unlink()
        with pytest.raises(Exception, match=lost + r" by retention .*failOnDataLoss=false"):
            stream(jvm, JVM, str(src), tmp_path / f"o{i}", tmp_path / f"c{i}", topic="orders",
                   startingOffsets=start)
        _, rows = both(jvm, str(src), tmp_path, f"loss{i}", topic="orders",
                       startingOffsets=start, failOnDataLoss="false")
        with MessageStore(StoreConfig(store_path=str(src), **GEOMETRY), read_only=True) as s:
            assert rows == api_rows(s, "orders", 0) != []


def test_streaming_read_options_are_checked(jvm: Any, tmp_path: Path) -> None:
    src = str(tmp_path / "s")
    with MessageStore(StoreConfig(store_path=src, **GEOMETRY)) as s:
        s.put("orders", b"x")
    for i, (opts, match) in enumerate([
        ({"endingOffsets": "latest"}, r"unknown option for a rocketstore streaming read: "
                                      r"endingOffsets \(an option of a batch read\)"),
        ({"key": "k"}, r"key \(an option of a batch read\)"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be > 0"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss='maybe': expected true or false"),
        ({"startingOffsets": '{"orders": 1}'}, "expected \"topic/queue_id\""),
    ]):
        for fmt in (JVM, PY):
            with pytest.raises(Exception, match=match):
                stream(jvm, fmt, src, tmp_path / "o", tmp_path / f"c-{fmt}-{i}", **opts)
    # An option no read takes fails at load(), as the Python source's does.
    for fmt in (JVM, PY):
        for r in (jvm.read, jvm.readStream):
            with pytest.raises(Exception, match=r"unknown option .*read: topc"):
                r.format(fmt).option("path", src).option("topc", "orders").load()


def test_progress_reports_the_latest_offsets(jvm: Any, tmp_path: Path) -> None:
    """Every micro-batch's progress names, as the source's ``latestOffset``,
    the ends the stores hold (the offsets' JSON), beside the end
    ``maxOffsetsPerTrigger`` held the micro-batch to."""
    src = str(tmp_path / "src")
    with MessageStore(StoreConfig(store_path=src, **GEOMETRY)) as store:
        for i in range(60):
            store.put("orders", f"a{i}".encode(), queue_id=i % 2)
        wait_dispatched(store)
    q = stream(jvm, JVM, src, tmp_path / "out", tmp_path / "ckpt", startingOffsets="earliest",
               maxOffsetsPerTrigger=25)
    assert q.exception() is None
    progress = [json.loads(p.json)["sources"][0] for p in q.recentProgress]
    ran = [p for p in progress if p["numInputRows"] > 0]
    assert len(ran) == 3
    assert ran[0]["endOffset"] == {"orders/0": 13, "orders/1": 12}
    assert ran[-1]["endOffset"] == {"orders/0": 30, "orders/1": 30}
    assert all(p["latestOffset"] == {"orders/0": 30, "orders/1": 30} for p in ran), progress
