"""The ``rocketstore`` Spark format with a real local SparkSession.

Marked ``spark``: deselected by the default run, run by ``.ci/run`` with
``python -m pytest -m spark``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from helpers.arrow_util import (  # noqa: E402
    FIXTURE_GEOMETRY,
    GEOMETRY,
    all_api_rows,
    api_rows,
    copy_fixture,
    damaged_rich_store,
    fill_rich_store,
    fixture_expected,
    key,
    normalize,
)
from helpers.killed_child import killed_at_exit, start_early  # noqa: E402
from helpers.read_util import wait_dispatched  # noqa: E402
from rocketstore import MessageStore, StoreConfig  # noqa: E402

pytestmark = pytest.mark.spark

FMT = "rocketstore_python"


def rows_of(df: Any) -> list[dict[str, Any]]:
    return [normalize(r) for r in df.toArrow().to_pylist()]


def write(df: Any, path: str, mode: str = "append") -> None:
    w = df.write.format(FMT).option("path", path).mode(mode)
    for k, v in GEOMETRY.items():
        w = w.option(k, str(v))
    w.save()


def read(spark: Any, path: str | Path, **opts: Any) -> Any:
    r = spark.read.format(FMT).option("path", str(path))
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A closed store with several topics, queues and segments."""
    path = str(tmp_path_factory.mktemp("spark") / "rich")
    fill_rich_store(path).shutdown()
    return path


def test_batch_read_equals_python_api(spark: Any, rich: str) -> None:
    with MessageStore(StoreConfig(store_path=rich), read_only=True) as store:
        want = sorted(all_api_rows(store, ["events", "orders"]), key=key)
    # No topic: partitions by CommitLog segment, system/uncommitted left out.
    df = read(spark, rich, maxBytesPerPartition=5000)
    assert df.schema.simpleString().startswith("struct<topic:string,queue_id:int,")
    assert sorted(rows_of(df), key=key) == want
    # Topic given: partitions by (topic, queue, offset range).
    df = read(spark, rich, topic="orders,events", maxRecordsPerPartition=7, batchSize=3)
    got = sorted(rows_of(df), key=key)
    assert got == want
    assert any(r["body"] == b"" for r in got)
    assert any(r["tags"] == "標籤-ü" for r in got)
    assert any(r["born_host"].startswith("[2001:db8::7]") for r in got)
    assert df.count() == len(want)


def test_filter_topic_queues_and_offsets(spark: Any, rich: str) -> None:
    with MessageStore(StoreConfig(store_path=rich), read_only=True) as store:
        q1 = api_rows(store, "orders", 1)
        q2 = api_rows(store, "orders", 2)
        ev = all_api_rows(store, ["events"])
        ts = q1[10]["store_timestamp"]
    assert sorted(rows_of(read(spark, rich, topic="events")), key=key) == sorted(ev, key=key)
    got = rows_of(read(spark, rich, topic="orders", queues="1,2"))
    assert sorted(got, key=key) == sorted(q1 + q2, key=key)
    df = read(spark, rich, topic="orders", queues="1",
              startingOffsets=json.dumps({"orders/1": 3}),
              endingOffsets=json.dumps({"orders/1": 9}))
    assert sorted(rows_of(df), key=key) == q1[3:9]
    df = read(spark, rich, topic="orders", queues="1", startingTimestamp=ts)
    first = next(i for i, r in enumerate(q1) if r["store_timestamp"] >= ts)
    assert sorted(rows_of(df), key=key) == q1[first:]
    from pyspark.sql import functions as F

    n = read(spark, rich).where(F.col("topic") == "events").count()
    assert n == len(ev)


def test_store_config_options_and_bad_options(spark: Any, rich: str) -> None:
    assert read(spark, rich, topic="events", max_hash_slot_num=100).count() > 0
    with pytest.raises(Exception, match="max_hash_slot_num"):
        read(spark, rich, max_hash_slot_num="many").count()
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, rich, startingOffsets="{bad").count()
    with pytest.raises(Exception, match="needs option path"):
        spark.read.format(FMT).load().count()


def test_two_stores_in_one_read(spark: Any, rich: str, tmp_path: Path) -> None:
    other = str(tmp_path / "other")
    with MessageStore(StoreConfig(store_path=other, **GEOMETRY)) as s:
        for i in range(30):
            s.put("orders", f"other-{i}".encode(), queue_id=i % 2)
    df = spark.read.format(FMT).option("paths", f"{rich},{other}").option("topic", "orders").load()
    assert df.columns[-1] == "store"
    rows = df.toArrow().to_pylist()
    by_store: dict[str, int] = {}
    for r in rows:
        by_store[r["store"]] = by_store.get(r["store"], 0) + 1
    with MessageStore(StoreConfig(store_path=rich), read_only=True) as store:
        n_rich = len(all_api_rows(store, ["orders"]))
    assert by_store == {rich: n_rich, other: 30}
    # A comma list in path means the same.
    assert read(spark, f"{rich},{other}", topic="orders").count() == n_rich + 30
    # So does load() of a list (Spark hands it as a JSON array in paths).
    df = spark.read.format(FMT).option("topic", "orders").load([rich, other])
    assert df.columns[-1] == "store" and df.count() == n_rich + 30


def test_rocketmq_4_9_8_store(spark: Any, tmp_path: Path) -> None:
    path = copy_fixture(tmp_path)
    exp = fixture_expected()
    want = sorted(e["phy"] for e in exp["records"]
                  if e["tran_type"] in (0, 8) and e["topic"] != "SCHEDULE_TOPIC_XXXX")
    df = read(spark, path, **FIXTURE_GEOMETRY)
    rows = rows_of(df)
    assert sorted(r["commit_log_offset"] for r in rows) == want
    by_phy = {e["phy"]: e for e in exp["records"]}
    for r in rows:
        e = by_phy[r["commit_log_offset"]]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["msg_id"], r["keys"], r["tags"],
                r["properties"], r["body"]) == (
            e["topic"], e["queue_id"], e["queue_offset"], e["msg_id"], e["keys"], e["tags"],
            e["properties"], bytes.fromhex(e["body_hex"]))
    # With just the path (index geometry aside), through the consume queues too.
    cfg = StoreConfig(store_path=str(path), **FIXTURE_GEOMETRY)
    with MessageStore(cfg, read_only=True) as store:
        t1 = all_api_rows(store, ["RmqT1"])
    assert sorted(rows_of(read(spark, path, topic="RmqT1")), key=key) == sorted(t1, key=key)


def _stream_to_parquet(spark: Any, src: str, out: Path, ckpt: Path, **opts: Any) -> None:
    r = spark.readStream.format(FMT).option("path", src)
    for k, v in opts.items():
        r = r.option(k, str(v))
    q = (r.load().writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None


def _parquet_rows(spark: Any, out: Path) -> list[dict[str, Any]]:
    return sorted(rows_of(spark.read.parquet(str(out))), key=key)


def test_streaming_two_available_now_runs_with_writer_in_between(
    spark: Any, tmp_path: Path
) -> None:
    src = str(tmp_path / "src")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    store = MessageStore(StoreConfig(store_path=src, **GEOMETRY)).start()
    try:
        for i in range(50):
            store.put("orders", f"a{i}".encode(), queue_id=i % 2)
        wait_dispatched(store)
        _stream_to_parquet(spark, src, out, ckpt, topic="orders",
                           startingOffsets="earliest", maxOffsetsPerTrigger=20)
        assert _parquet_rows(spark, out) == sorted(all_api_rows(store, ["orders"]), key=key)
        # The writer keeps writing; a queue appears after the query started.
        for i in range(40):
            store.put("orders", f"b{i}".encode(), queue_id=i % 3)
        wait_dispatched(store)
        _stream_to_parquet(spark, src, out, ckpt, topic="orders",
                           startingOffsets="earliest", maxOffsetsPerTrigger=20)
        rows = _parquet_rows(spark, out)
        assert rows == sorted(all_api_rows(store, ["orders"]), key=key)
        assert len({key(r) for r in rows}) == len(rows) == 90  # no duplicates, no gaps
        offsets = json.loads(sorted((ckpt / "offsets").glob("[0-9]*"),
                                    key=lambda p: int(p.name))[-1].read_text().splitlines()[-1])
        assert list(offsets) == ["orders/0", "orders/1", "orders/2"]
        assert offsets == {"orders/0": 39, "orders/1": 38, "orders/2": 13}
        # Admission control: no micro-batch read more than 20 rows.
        files = sorted((ckpt / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
        ends = [json.loads(f.read_text().splitlines()[-1]) for f in files]
        starts = [{}, *ends[:-1]]
        sizes = [sum(e.values()) - sum(p.values()) for p, e in zip(starts, ends, strict=True)]
        assert sum(sizes) == 90 and max(sizes) <= 20 and len(sizes) >= 90 // 20
    finally:
        store.shutdown()


def test_streaming_data_loss(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    with MessageStore(StoreConfig(store_path=str(src), **GEOMETRY)) as s:
        for _ in range(400):
            s.put("orders", b"x" * 100, queue_id=0)
    # What retention does: the oldest CommitLog segment and queue file go.
    (src / "commitlog" / f"{0:020d}").unlink()
    (src / "consumequeue" / "orders" / "0" / f"{0:020d}").unlink()
    with MessageStore(StoreConfig(store_path=str(src), **GEOMETRY), read_only=True) as s:
        assert s.get_min_offset_in_queue("orders", 0) > 0
    start = json.dumps({"orders/0": 0})
    r = (spark.readStream.format(FMT).option("path", str(src)).option("topic", "orders")
         .option("startingOffsets", start).load())
    q = (r.writeStream.format("parquet").option("path", str(tmp_path / "o1"))
         .option("checkpointLocation", str(tmp_path / "c1")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match=r"orders/0: .*deleted by retention"):
        q.awaitTermination(120)
    _stream_to_parquet(spark, str(src), tmp_path / "o2", tmp_path / "c2", topic="orders",
                       startingOffsets=start, failOnDataLoss="false")
    with MessageStore(StoreConfig(store_path=str(src), **GEOMETRY), read_only=True) as s:
        assert _parquet_rows(spark, tmp_path / "o2") == api_rows(s, "orders", 0)


def test_write_then_read_round_trip(spark: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "written")
    data = [
        ("orders", b"one", 0, "paid", ["k1", "k2"], {"a": "1"}),
        ("orders", b"", 1, None, None, None),
        ("events", "ünï".encode(), 2, "標籤", ["ключ"], {"ü": "😀"}),
    ] * 20
    df = spark.createDataFrame(
        data, "topic string, body binary, queue_id int, tags string, keys array<string>, "
              "properties map<string,string>").repartition(2)
    write(df, out)
    write(df.select("topic", "body"), out)
    assert not os.path.exists(out + ".spark-staging")
    got = rows_of(read(spark, out))
    assert len(got) == 120
    with MessageStore(StoreConfig(store_path=out), read_only=True) as s:
        assert sorted(got, key=key) == sorted(all_api_rows(s), key=key)
    first = next(r for r in got if r["topic"] == "events" and r["queue_id"] == 2)
    assert first["tags"] == "標籤" and first["keys"] == ["ключ"]
    assert first["properties"]["ü"] == "😀" and first["body"] == "ünï".encode()
    with pytest.raises(Exception, match="append"):
        write(df, out, "overwrite")
    with pytest.raises(Exception, match="topic and body"):
        write(df.select("topic"), out)


def test_write_abort_leaves_store_unchanged(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    out = str(tmp_path / "w")
    with MessageStore(StoreConfig(store_path=out, **GEOMETRY)) as s:
        s.put("orders", b"before")
        before = s.max_phy_offset

    @F.udf("binary")
    def boom(i: int) -> bytes:
        if i == 37:
            raise ValueError("task failure on purpose")
        return b"x"

    df = spark.range(100).repartition(2).select(F.lit("orders").alias("topic"),
                                                boom("id").alias("body"))
    with pytest.raises(Exception, match="on purpose"):
        write(df, out)
    with MessageStore(StoreConfig(store_path=out), read_only=True) as s:
        assert s.max_phy_offset == before
    assert not os.path.exists(out + ".spark-staging")


def test_write_to_locked_store_fails_with_lock_error(spark: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "locked")
    df = spark.createDataFrame([("orders", b"x")], "topic string, body binary")
    with MessageStore(StoreConfig(store_path=out, **GEOMETRY)) as s:
        s.put("orders", b"held")
        with pytest.raises(Exception, match="locked by another writer"):
            write(df, out)
        assert s.get_max_offset_in_queue("orders", 0) == 1
    assert not os.path.exists(out + ".spark-staging")


def test_streaming_sink_appends_each_batch_once(spark: Any, tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    dst = str(tmp_path / "dst")
    ckpt = tmp_path / "ckpt"
    with MessageStore(StoreConfig(store_path=src, **GEOMETRY)) as s:
        for i in range(30):
            s.put("orders", f"m{i}".encode(), queue_id=i % 2)

    def run() -> None:
        q = (spark.readStream.format(FMT).option("path", src).option("topic", "orders")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10").load()
             .select("topic", "body", "queue_id")
             .writeStream.format(FMT).option("path", dst)
             .option("mapped_file_size_commit_log", str(GEOMETRY["mapped_file_size_commit_log"]))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    # Forget that the last batch was committed (a crash between the append
    # and the commit record): Spark replays it, the sink must not append it twice.
    commits = sorted((ckpt / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert len(commits) >= 3
    commits[-1].unlink()
    crc = commits[-1].with_name(f".{commits[-1].name}.crc")
    if crc.exists():
        crc.unlink()
    run()
    with MessageStore(StoreConfig(store_path=dst), read_only=True) as s:
        rows = all_api_rows(s)
    assert sorted(r["body"] for r in rows) == sorted(f"m{i}".encode() for i in range(30))
    tags = {r["properties"]["SPARK_SINK_BATCH"] for r in rows}
    assert tags == {f"default:{i}" for i in range(len(commits))}


def test_a_refused_row_fails_the_commit_before_any_append(spark: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "prefix")
    rows = [("orders", f"r{i}".encode()) for i in range(60)]
    rows[50] = ("bad topic!", b"refused")
    df = spark.createDataFrame(rows, "topic string, body binary").coalesce(1)
    with pytest.raises(Exception, match=r"row 50 of 60 \(in partition order\) breaks a put "
                                        r"rule \(MESSAGE_ILLEGAL: topic .*nothing was appended"):
        write(df, out)
    with MessageStore(StoreConfig(store_path=out), read_only=True) as s:
        assert api_rows(s, "orders", 0) == []
    assert not os.path.exists(out + ".spark-staging")


def test_ipv6_store_host(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "v6")
    fill_rich_store(path, ipv6_store=True, n=60).shutdown()
    with MessageStore(StoreConfig(store_path=path), read_only=True) as store:
        want = sorted(all_api_rows(store, ["events", "orders"]), key=key)
    got = sorted(rows_of(read(spark, path)), key=key)
    assert got == want
    assert all(len(r["msg_id"]) == 56 and r["store_host"] == "[::1]:10911" for r in got)


def test_unknown_read_options_are_refused_with_the_valid_ones(spark: Any, rich: str) -> None:
    with pytest.raises(Exception, match=r"unknown option for a rocketstore .*read: topc "
                                        r"\(did you mean topic\?\)\. Valid options") as e:
        read(spark, rich, topc="orders").count()
    assert "startingOffsets" in str(e.value) and "snake_case" in str(e.value)
    # With a user schema Spark skips schema(): the reader refuses it.
    with pytest.raises(Exception, match=r"unknown option .*: topc"):
        (spark.read.format(FMT).schema("topic string, body binary").option("path", rich)
         .option("topc", "orders").load().count())
    # Any case is the same option; StoreConfig fields and Spark's own pass.
    n = read(spark, rich, TOPIC="events", BatchSize=7, max_hash_slot_num=100).count()
    assert n == read(spark, rich, topic="events").count() > 0
    assert spark.read.format(FMT).load(rich).count() == read(spark, rich).count()
    with pytest.raises(Exception, match=r"maxOffsetsPerTrigger \(an option of a streaming read"):
        read(spark, rich, maxOffsetsPerTrigger=5).count()
    with pytest.raises(Exception, match=r"store_path \(did you mean"):
        read(spark, rich, store_path=rich).count()


def test_unknown_streaming_read_options_are_refused(spark: Any, rich: str, tmp_path: Path) -> None:
    def start(**opts: Any) -> Any:
        r = spark.readStream.format(FMT).option("path", rich)
        for k, v in opts.items():
            r = r.option(k, str(v))
        q = (r.load().writeStream.format("parquet").option("path", str(tmp_path / "o"))
             .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True)
             .start())
        q.awaitTermination(120)
        return q

    with pytest.raises(Exception, match=r"unknown option .*: maxoffsetpertrigger \(did you mean "
                                        r"maxOffsetsPerTrigger\?\)"):
        start(maxOffsetPerTrigger=10)
    with pytest.raises(Exception, match=r"endingOffsets \(an option of a batch read\)"):
        start(endingOffsets="latest")
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").glob("*.parquet"))
    q = start(TOPIC="orders", startingOffsets="earliest", FailOnDataLoss="true")
    assert q.exception() is None
    assert spark.read.parquet(str(tmp_path / "o")).count() == read(
        spark, rich, topic="orders").count()


def test_unknown_write_options_are_refused(spark: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "w")
    df = spark.createDataFrame([("orders", b"x")], "topic string, body binary")
    with pytest.raises(Exception, match=r"unknown option for a rocketstore batch write: "
                                        r"stagingdir2 \(did you mean stagingDir\?\)"):
        df.write.format(FMT).option("stagingDir2", "/tmp/x").mode("append").save(out)
    with pytest.raises(Exception, match=r"sinkName \(an option of a streaming write\)"):
        df.write.format(FMT).option("sinkName", "s").mode("append").save(out)
    with pytest.raises(Exception, match=r"topic \(an option of a batch read or streaming read\)"):
        df.write.format(FMT).option("topic", "orders").mode("append").save(out)
    assert not os.path.exists(out)
    df.write.format(FMT).option("STAGINGDIR", str(tmp_path / "st")).option(
        "mapped_file_size_commit_log", str(GEOMETRY["mapped_file_size_commit_log"])).mode(
        "append").save(out)
    with MessageStore(StoreConfig(store_path=out), read_only=True) as s:
        assert [r["body"] for r in api_rows(s, "orders", 0)] == [b"x"]


def test_unknown_streaming_write_options_are_refused(
    spark: Any, rich: str, tmp_path: Path
) -> None:
    dst = str(tmp_path / "dst")

    def start(**opts: Any) -> Any:
        w = (spark.readStream.format(FMT).option("path", rich).option("topic", "events")
             .option("startingOffsets", "earliest").load().select("topic", "body")
             .writeStream.format(FMT).option("checkpointLocation", str(tmp_path / "c"))
             .queryName("sink_options"))
        for k, v in opts.items():
            w = w.option(k, str(v))
        q = w.trigger(availableNow=True).start(dst)
        q.awaitTermination(120)
        return q

    with pytest.raises(Exception, match=r"unknown option for a rocketstore streaming write: "
                                        r"sink_name \(did you mean sinkName\?\)"):
        start(sink_name="s")
    assert not os.path.exists(dst)
    q = start(SinkName="s")
    assert q.exception() is None
    with MessageStore(StoreConfig(store_path=dst), read_only=True) as s:
        rows = all_api_rows(s)
    assert rows and {r["properties"]["SPARK_SINK_BATCH"] for r in rows} == {"s:0"}


def _staged(root: str) -> list[str]:
    """Every file under a staging root, relative to it."""
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def test_streaming_micro_batches_leave_no_staging(spark: Any, rich: str, tmp_path: Path) -> None:
    dst = str(tmp_path / "dst")
    q = (spark.readStream.format(FMT).option("path", rich).option("topic", "orders")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "25").load()
         .select("topic", "body", "queue_id").repartition(2)
         .writeStream.format(FMT).option("checkpointLocation", str(tmp_path / "c"))
         .trigger(availableNow=True).start(dst))
    q.awaitTermination(180)
    assert q.exception() is None
    with MessageStore(StoreConfig(store_path=dst), read_only=True) as s:
        rows = all_api_rows(s)
    n = read(spark, rich, topic="orders").count()
    assert len(rows) == n and len({r["properties"]["SPARK_SINK_BATCH"] for r in rows}) >= 3
    assert _staged(dst + ".spark-staging") == []
    assert not os.path.exists(dst + ".spark-staging")


def test_a_task_cannot_stage_into_an_aborted_job(tmp_path: Path) -> None:
    # What made the abort test flaky: a task still running when the job is
    # aborted used to make the staging directory again after the abort
    # deleted it. Tasks no longer make it; the driver does, at planning.
    from rocketstore.spark import _commit, _staging

    root = str(tmp_path / "w.spark-staging")
    job = _staging.make_job_dir(root)
    batch = pa.record_batch([pa.array(["t"]), pa.array([b"x"])], names=["topic", "body"])
    first = _commit.stage_batches([batch], job, 0)
    assert first.rows == 1 and os.path.exists(first.path)
    _staging.remove_dir(root, job)  # the abort
    with pytest.raises(RuntimeError, match="the write was aborted"):
        _commit.stage_batches([batch], job, 1)
    assert not os.path.exists(root)


KILLED_DRIVER_TEST = "test_killed_driver_staging_is_removed_by_the_next_write_not_a_live_jobs"


@pytest.fixture(scope="module")
def killed_driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """The driver ``KILLED_DRIVER_TEST`` kills, writing to a store of its
    own (tests/helpers/spark_write_child.py: it stages its two partitions
    and holds the second for ever); ``(process, store path)``. Killed at
    teardown if the test did not get to it."""
    out = str(tmp_path_factory.mktemp("killed-driver") / "store")
    child = Path(__file__).parent.parent / "helpers" / "spark_write_child.py"
    proc = subprocess.Popen([sys.executable, str(child), out], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with killed_at_exit(proc):
        yield proc, out


@pytest.fixture(scope="module", autouse=True)
def _boot_the_killed_driver_early(request: pytest.FixtureRequest) -> None:
    """Starts ``killed_driver`` with the module's first test when its test
    is selected: its JVM boots while the tests before it run, instead of
    in that test."""
    start_early(request, KILLED_DRIVER_TEST, "killed_driver")


def test_killed_driver_staging_is_removed_by_the_next_write_not_a_live_jobs(
    spark: Any, tmp_path: Path, killed_driver: tuple[Any, str]
) -> None:
    import threading
    import time

    from pyspark.sql import functions as F

    proc, out = killed_driver
    root = out + ".spark-staging"
    try:
        deadline = time.monotonic() + 240
        while len([f for f in _staged(root) if "/part-" in f]) < 2:
            assert proc.poll() is None, "the child driver exited before it was killed"
            assert time.monotonic() < deadline, "the child never staged its two partitions"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = sorted(n for n in os.listdir(root) if n.startswith("job-"))
    assert len(killed) == 1 and any(f.startswith(killed[0] + "/part-") for f in _staged(root))
    # Wait until the child's JVM is gone too (the process group was killed).
    with open(os.path.join(root, killed[0], "owner.json")) as f:
        jvm = json.load(f)["pid"]
    while os.path.exists(f"/proc/{jvm}"):
        time.sleep(0.1)

    # A live job of this driver is staging at the same time (held in its task).
    release = tmp_path / "release"

    @F.udf("binary")
    def held(i: int) -> bytes:
        while not os.path.exists(str(release)):
            time.sleep(0.05)
        return f"live{i}".encode()

    live_df = spark.range(0, 10, numPartitions=1).select(F.lit("live").alias("topic"),
                                                         held("id").alias("body"))
    errors: list[BaseException] = []

    def live_write() -> None:
        try:
            # The format is looked up in the thread's active session.
            spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
            write(live_df, out)
        except BaseException as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=live_write)
    t.start()
    try:
        deadline = time.monotonic() + 120
        while True:
            live = [f for f in _staged(root) if "/part-" in f
                    and not f.startswith(killed[0] + "/")]
            if live:
                break
            assert time.monotonic() < deadline and t.is_alive(), [str(e)[:3000] for e in errors]
            time.sleep(0.1)
        live_job = live[0].split("/")[0]
        # The next write: the dead driver's staging goes, the live job's stays.
        next_df = spark.createDataFrame([("next", b"n")], "topic string, body binary")
        write(next_df.coalesce(1), out)
        assert not os.path.exists(os.path.join(root, killed[0]))
        assert os.path.exists(os.path.join(root, live[0]))
        assert [f for f in _staged(root) if not f.startswith(live_job + "/")] == []
    finally:
        release.touch()
        t.join(180)
    assert not errors and not t.is_alive()
    assert not os.path.exists(root)
    with MessageStore(StoreConfig(store_path=out), read_only=True) as s:
        assert s.topics() == ["live", "next"] or sorted(s.topics()) == ["live", "next"]
        assert [r["body"] for r in api_rows(s, "live", 0)] == [f"live{i}".encode()
                                                               for i in range(10)]
        assert [r["body"] for r in api_rows(s, "next", 0)] == [b"n"]


def test_a_user_schema_reads_those_columns_in_its_order(spark: Any, rich: str) -> None:
    with MessageStore(StoreConfig(store_path=rich), read_only=True) as store:
        want = sorted(all_api_rows(store, ["events", "orders"]), key=key)
    for opts in ({}, {"topic": "orders,events"}):
        r = spark.read.format(FMT).schema("body binary, store string, topic string, "
                                          "queue_offset long").option("path", rich)
        for k, v in opts.items():
            r = r.option(k, v)
        df = r.load()
        assert df.columns == ["body", "store", "topic", "queue_offset"]
        got = sorted((r["topic"], r["queue_offset"], r["body"], r["store"])
                     for r in df.toArrow().to_pylist())
        assert got == sorted((w["topic"], w["queue_offset"], w["body"], rich) for w in want)
    df = spark.read.format(FMT).schema("topic string, body binary").load(rich)
    assert df.count() == len(want) and len(df.toArrow().schema) == 2


def test_a_user_schema_with_an_unknown_column_or_type_is_refused(spark: Any, rich: str) -> None:
    for ddl, why in (("topic string, bodyy binary", r"bodyy \(no such column\)"),
                     ("topic string, queue_id string", r"queue_id string \(the column is int\)")):
        with pytest.raises(Exception, match=why + r"\. Its columns .*topic string, "
                                                  r"queue_id int"):
            spark.read.format(FMT).schema(ddl).load(rich).count()


def test_a_user_schema_in_a_streaming_read(spark: Any, rich: str, tmp_path: Path) -> None:
    q = (spark.readStream.format(FMT).schema("queue_id int, topic string")
         .option("path", rich).option("topic", "events").option("startingOffsets", "earliest")
         .load().writeStream.format("parquet").option("path", str(tmp_path / "o"))
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    out = spark.read.parquet(str(tmp_path / "o"))
    assert out.columns == ["queue_id", "topic"]
    assert out.count() == read(spark, rich, topic="events").count() > 0
    for i, (ddl, why) in enumerate((("nope int", r"nope \(no such column\)"),
                                    ("topic string, queue_id string",
                                     r"queue_id string \(the column is int\)"))):
        with pytest.raises(Exception, match=why + r"\. Its columns .*topic string, "):
            q = (spark.readStream.format(FMT).schema(ddl).option("path", rich).load()
                 .writeStream.format("parquet").option("path", str(tmp_path / f"o{i}"))
                 .option("checkpointLocation", str(tmp_path / f"c{i}"))
                 .trigger(availableNow=True).start())
            q.awaitTermination(120)


def test_a_user_schema_equals_those_columns_of_a_full_read_damaged_store(
        spark: Any, tmp_path: Path) -> None:
    """Batch and streaming reads of a schema's columns (the engine decodes
    only those) return the same rows as the same columns of a full read, on
    a store with damaged records and a deleted segment."""
    from rocketstore.spark._source import COLUMN_TYPES

    path, body_victim, prop_victim = damaged_rich_store(tmp_path / "d")
    store = str(path)
    cols = ["keys", "body", "commit_log_offset", "store", "topic", "properties", "queue_id"]
    ddl = ", ".join(f"{c} {COLUMN_TYPES[c]}" for c in cols)

    def as_rows(df: Any) -> list[tuple[Any, ...]]:
        return sorted((tuple(r[c] for c in cols) for r in df.toArrow().to_pylist()),
                      key=lambda t: (t[4], t[2]))

    def full_rows(**opts: Any) -> list[tuple[Any, ...]]:
        got = read(spark, store, **opts).toArrow().to_pylist()
        return sorted((tuple(store if c == "store" else r[c] for c in cols) for r in got),
                      key=lambda t: (t[4], t[2]))

    for opts in ({}, {"topic": "orders,events", "maxRecordsPerPartition": 9}):
        want = full_rows(**opts)
        assert len(want) > 100
        offsets = {t[2] for t in want}
        assert body_victim["commit_log_offset"] not in offsets
        assert prop_victim["commit_log_offset"] not in offsets
        r = spark.read.format(FMT).schema(ddl).option("path", store)
        for k, v in opts.items():
            r = r.option(k, str(v))
        df = r.load()
        assert df.columns == cols
        assert as_rows(df) == want, opts
    q = (spark.readStream.format(FMT).schema(ddl).option("path", store)
         .option("topic", "orders,events").option("startingOffsets", "earliest")
         .option("failOnDataLoss", "false").option("maxOffsetsPerTrigger", "70").load()
         .writeStream.format("memory").queryName("pruned_damaged")
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    out = spark.sql("select * from pruned_damaged")
    assert out.columns == cols
    assert as_rows(out) == full_rows(topic="orders,events")
