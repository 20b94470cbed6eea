"""The JVM connector against the Python source: the same rows, counts and
pushdown results over every store the Spark tests use (a rich store, one
with damaged records and a deleted segment, RocketMQ 4.9.8's files, V2
records, system topics, several stores), and the JNI guards.

Marked ``spark``; skipped when the connector's jar is not built
(``scripts/build-jar.sh``). The session (tests/conftest.py) has the jar on
its class path: ``rocketstore`` is the JVM connector there and
``rocketstore_python`` the Python source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from helpers.arrow_util import (
    FIXTURE_GEOMETRY,
    GEOMETRY,
    copy_fixture,
    damaged_rich_store,
    fill_rich_store,
)
from helpers.jvm_util import JVM, PY, load, metrics, native, same
from helpers.pushdown_util import fill
from helpers.records import encode_record
from rocketstore import MessageStore, StoreConfig
from rocketstore.spark import jar_path

pytestmark = pytest.mark.spark

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
OPTS = {k: str(v) for k, v in GEOMETRY.items()}


@pytest.fixture(scope="module")
def jvm(jvm: Any) -> Any:
    """The JVM connector's session (tests/spark/conftest.py), with the
    Python source's filter pushdown on."""
    jvm.conf.set(PUSHDOWN, "true")
    return jvm


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("conf") / "rich")
    fill_rich_store(path).shutdown()
    return path


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> str:
    path, _, _ = damaged_rich_store(tmp_path_factory.mktemp("conf") / "damaged")
    return str(path)


@pytest.fixture(scope="module")
def pushdown_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    path = str(tmp_path_factory.mktemp("conf") / "pd")
    return path, fill(path)


@pytest.fixture(scope="module")
def v2(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store whose last record is a V2 record with a 200-byte topic."""
    path = tmp_path_factory.mktemp("conf") / "v2"
    with MessageStore(StoreConfig(store_path=str(path), **GEOMETRY)) as s:
        for i in range(20):
            s.put("small", f"m{i}".encode(), queue_id=i % 2)
        end = s.max_phy_offset
    rec = encode_record(b"T" * 200, b"v2 body", phy=end, queue_id=3, queue_offset=0,
                        properties=b"KEYS\x01k-v2\x02TAGS\x01x", v2=True)
    with open(path / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(end)
        f.write(rec)
    with MessageStore(StoreConfig(store_path=str(path), **GEOMETRY)) as s:
        assert s.get_max_offset_in_queue("T" * 200, 3) == 1
    return str(path)


def test_the_short_name_is_the_jvm_connector(jvm: Any, rich: str) -> None:
    plan = load(jvm, JVM, rich, **OPTS)._jdf.queryExecution().executedPlan().toString()
    assert "rocketstore (JVM)" in plan, plan
    assert "rocketstore (JVM)" not in load(jvm, PY, rich, **OPTS)._jdf.queryExecution() \
        .executedPlan().toString()


def test_schema_is_the_python_sources(jvm: Any, rich: str, tmp_path: Path) -> None:
    other = str(tmp_path / "o")
    with MessageStore(StoreConfig(store_path=other, **GEOMETRY)) as s:
        s.put("orders", b"x")
    assert load(jvm, JVM, rich).schema == load(jvm, PY, rich).schema
    assert load(jvm, JVM, f"{rich},{other}").schema == load(jvm, PY, f"{rich},{other}").schema


@pytest.mark.parametrize("opts", [
    {},
    {"maxBytesPerPartition": 5000, "batchSize": 7},
    {"topic": "orders,events", "maxRecordsPerPartition": 7, "batchSize": 3},
    {"topic": "orders", "queues": "1,2"},
    {"topic": "orders", "queues": "1", "startingOffsets": '{"orders/1": 3}',
     "endingOffsets": '{"orders/1": 9}'},
    {"includeSystemTopics": "true"},
    {"includeUncommitted": "true"},
    {"topic": "SCHEDULE_TOPIC_XXXX"},
], ids=["scan", "small-partitions", "queues", "two-queues", "offsets", "system", "uncommitted",
        "schedule-topic"])
def test_rich_store(jvm: Any, rich: str, tmp_path: Path, opts: dict[str, Any]) -> None:
    assert same(jvm, rich, tmp_path, **OPTS, **opts)


def test_starting_timestamp(jvm: Any, rich: str, tmp_path: Path) -> None:
    ts = sorted(r["store_timestamp"] for r in same(jvm, rich, tmp_path, **OPTS))
    mid = ts[len(ts) // 2]
    for opts in ({}, {"topic": "orders"}):
        got = same(jvm, rich, tmp_path, **OPTS, startingTimestamp=mid, **opts)
        assert got and all(r["store_timestamp"] >= mid for r in got)


def test_damaged_store_with_a_deleted_segment(jvm: Any, damaged: str, tmp_path: Path) -> None:
    for opts in ({}, {"topic": "orders"}, {"topic": "orders", "maxRecordsPerPartition": 5}):
        m = tmp_path / "m.jsonl"
        m.unlink(missing_ok=True)
        got = same(jvm, damaged, tmp_path, **OPTS, **opts)
        assert got
    # The counts are really there (not two zeros).
    m = tmp_path / "jvm.jsonl"
    load(jvm, JVM, damaged, metricsFile=m, topic="orders", **OPTS).collect()
    assert metrics(m)["damaged"] == 2  # the two damaged records, counted (not two zeros)


def test_metrics_lines_say_where_a_tasks_time_went(jvm: Any, rich: str, tmp_path: Path) -> None:
    """The JVM connector's metricsFile lines time each task's parts
    (docs/spark.md): nanoseconds that add up inside the reader's life."""
    m = tmp_path / "timed.jsonl"
    load(jvm, JVM, rich, metricsFile=m, batchSize="7", **OPTS).write.format("noop").mode(
        "overwrite").save()
    lines = [json.loads(x) for x in m.read_text().splitlines()]
    assert lines and sum(x["rows"] for x in lines) > 7
    for x in lines:
        assert 0 < x["decodeNs"] and 0 < x["exportNs"], x
        assert x["decodeNs"] + x["exportNs"] <= x["nextNs"], x
        assert 0 < x["openNs"] and 0 < x["wrapNs"], x
        assert x["openNs"] + x["nextNs"] + x["wrapNs"] <= x["taskNs"], x


def test_rocketmq_4_9_8_files(jvm: Any, tmp_path: Path) -> None:
    path = str(copy_fixture(tmp_path))
    opts = {k: str(v) for k, v in FIXTURE_GEOMETRY.items()}
    assert same(jvm, path, tmp_path, **opts)
    assert same(jvm, path, tmp_path, includeSystemTopics="true", **opts)


def test_v2_records(jvm: Any, v2: str, tmp_path: Path) -> None:
    got = same(jvm, v2, tmp_path, **OPTS)
    assert [r["body"] for r in got if r["topic"] == "T" * 200] == [b"v2 body"]
    assert same(jvm, v2, tmp_path, topic="T" * 200, **OPTS)


def test_several_stores(jvm: Any, rich: str, damaged: str, tmp_path: Path) -> None:
    got = same(jvm, f"{rich},{damaged}", tmp_path, topic="orders", **OPTS)
    assert {r["store"] for r in got} == {rich, damaged}


@pytest.mark.parametrize("select", [
    "body,topic", "queue_offset", "tags,keys,properties", "store_timestamp,msg_id"])
def test_pruned_columns(jvm: Any, damaged: str, tmp_path: Path, select: str) -> None:
    assert same(jvm, damaged, tmp_path, select=select, **OPTS)


def test_user_schema(jvm: Any, rich: str) -> None:
    ddl = "body binary, topic string, queue_offset bigint"
    a = jvm.read.format(JVM).schema(ddl).option("path", rich).load()
    b = jvm.read.format(PY).schema(ddl).option("path", rich).load()
    assert sorted(a.collect()) == sorted(b.collect())
    with pytest.raises(Exception, match="no such column"):
        jvm.read.format(JVM).schema("nope string").option("path", rich).load().collect()


def test_pushdown_gives_the_python_sources_rows(
        jvm: Any, pushdown_store: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, info = pushdown_store
    times = sorted(r["store_timestamp"] for r in same(jvm, path, tmp_path, **OPTS))
    t0, t1 = times[len(times) // 3], times[len(times) // 3 + 30]
    ids = [r["msg_id"] for r in load(jvm, PY, path, topic="events", **OPTS)
           .select("msg_id").limit(3).toArrow().to_pylist()]
    lo = info["min_phy"] + 2000

    def lit(ms: int) -> str:
        return f"timestamp_millis({ms})"

    qo, t = info["outlier"]
    for where in [
        "topic = 'orders' AND queue_id IN (1, 3)",
        "queue_offset >= 40 AND queue_offset < 60",
        f"store_timestamp >= {lit(t0)} AND store_timestamp < {lit(t1)} AND topic = 'orders'",
        f"store_timestamp > {lit(t0)}",
        "tags = 'Aa'",
        "tags IN ('BB', 't3') AND topic = 'events'",
        "msg_id IN ({})".format(", ".join(f"'{i}'" for i in ids)),
        f"commit_log_offset BETWEEN {lo} AND {lo + 9000}",
        f"commit_log_offset >= {lo} AND topic = 'audit'",
        "queue_offset IN (3, 5, 70)",
        "topic LIKE 'ev%' OR tags IS NULL",
        f"topic = 'audit' AND store_timestamp = {lit(t)}",
        "topic = 'nothing'",
        "queue_offset > 5 AND queue_offset < 3",
    ]:
        got = same(jvm, path, tmp_path, where=where, **OPTS)
        if "nothing" not in where and "< 3" not in where:
            assert got, where
        if "audit' AND store_timestamp" in where:
            assert qo in [r["queue_offset"] for r in got]


def test_pushdown_reads_less(jvm: Any, pushdown_store: tuple[str, dict[str, Any]],
                             tmp_path: Path) -> None:
    path, _ = pushdown_store

    def decoded(where: str) -> int:
        m = tmp_path / f"d{abs(hash(where))}.jsonl"
        load(jvm, JVM, path, metricsFile=m, **OPTS).where(where).collect()
        return sum(json.loads(x)["decoded"] for x in m.read_text().splitlines())

    everything = decoded("queue_id >= 0 OR queue_id < 0")  # not pushed
    assert decoded("topic = 'audit'") < everything
    assert decoded("queue_offset >= 40 AND queue_offset < 60") < everything // 3
    assert decoded("tags = 'Aa'") < everything


def test_key_option(jvm: Any, pushdown_store: tuple[str, dict[str, Any]], tmp_path: Path
                    ) -> None:
    path, _ = pushdown_store
    got = same(jvm, path, tmp_path, key="k401,g3", **OPTS)
    assert got and all({"k401", "g3"} & set(r["keys"]) for r in got)
    got = same(jvm, path, tmp_path, where="topic = 'audit'", key="g3", **OPTS)
    assert got and {r["topic"] for r in got} == {"audit"}


def test_unknown_options_and_bad_values_are_refused(jvm: Any, rich: str) -> None:
    for opts, match in [({"maxOffsetsPerTrigger": "5"}, "unknown option"),
                        ({"startingOffsets": "{bad"}, "startingOffsets"),
                        ({"batchSize": "-1"}, "batchSize must be > 0"),
                        ({"max_hash_slot_num": "many"}, "max_hash_slot_num")]:
        for fmt in (JVM, PY):
            with pytest.raises(Exception, match=match):
                load(jvm, fmt, rich, **opts).collect()
    with pytest.raises(Exception, match="needs option path"):
        jvm.read.format(JVM).load().collect()
    with pytest.raises(Exception, match=r"not a store|does not exist"):
        load(jvm, JVM, str(Path(rich).parent / "missing")).collect()


# -- native memory and the JNI guards -----------------------------------------------------


def test_native_memory_is_freed_when_tasks_end_or_fail(jvm: Any, rich: str) -> None:
    from pyspark.sql import functions as F

    n = native(jvm)
    before = n.openHandles()
    load(jvm, JVM, rich, batchSize=5).collect()
    load(jvm, JVM, rich, batchSize=5).limit(3).collect()  # tasks stop early
    assert n.openHandles() == before

    @F.udf("int")
    def boom(x: int) -> int:
        raise ValueError("a task fails mid-read")

    with pytest.raises(Exception, match="a task fails mid-read"):
        load(jvm, JVM, rich, batchSize=5).select(boom("queue_id")).collect()
    assert n.openHandles() == before


def test_jni_guards_turn_bad_input_into_java_exceptions(jvm: Any, rich: str) -> None:
    from py4j.protocol import Py4JJavaError

    n = native(jvm)
    gw = jvm.sparkContext._gateway

    def fails(cls: str, f: Any, *args: Any) -> None:
        with pytest.raises(Exception) as e:
            f(*args)
        # PySpark turns some Java exceptions into its own (the Java one kept
        # as _origin), the rest stay Py4JJavaError.
        java = (e.value.java_exception if isinstance(e.value, Py4JJavaError)
                else getattr(e.value, "_origin", None))
        assert java is not None, repr(e.value)
        assert java.getClass().getName() == cls, str(e.value)

    ise, iae = "java.lang.IllegalStateException", "java.lang.IllegalArgumentException"
    fails(ise, n.selfTest, 1)                      # a panic in the library
    fails(ise, n.topics, 12345)                    # a made-up handle
    fails(ise, n.nextBatch, 0)
    fails("org.rocketstore.spark.StoreException", n.open, str(Path(rich) / "nope"), None, None)
    fails(iae, n.open, None, None, None)
    keys = gw.new_array(gw.jvm.java.lang.String, 1)
    keys[0] = "max_index_num"
    fails(iae, n.open, rich, keys, None)           # names and values differ
    s = n.open(rich, None, None)
    try:
        fails(ise, n.nextBatch, s)                 # a store is not a reader
        fails(iae, n.queueAt, s, "orders", 0, 99, 0)
        qt = gw.new_array(gw.jvm.java.lang.String, 1)
        qt[0] = "orders"
        fails(iae, n.openReader, s, qt, None, None, None, None, 0, 0, 0, None, 10, None, None)
        fails(iae, n.openReader, s, None, None, None, None, None, 0, 0, 0, None, 0, None, None)
        cols = gw.new_array(gw.jvm.java.lang.String, 1)
        cols[0] = "bodyy"
        fails(iae, n.openReader, s, None, None, None, None, None, 0, 0, 0, None, 10, None, cols)
        r = n.openReader(s, None, None, None, None, None, 0, -(1 << 63), (1 << 63) - 1, None,
                         10, None, None)
        n.close(r)
        fails(ise, n.nextBatch, r)                 # closed
        fails(ise, n.readStats, r)
    finally:
        n.close(s)
        n.close(s)                                 # twice: nothing happens
    assert jvm.range(3).count() == 3               # the JVM lives on


def test_a_second_class_loader_does_not_load_the_library_again(jvm: Any) -> None:
    gw = jvm.sparkContext._gateway
    lib = native(jvm)
    lib.ensureLoaded()
    loaded = gw.jvm.java.lang.System.getProperty("rocketstore.native.loaded")
    assert loaded and "librocketstore_jni-" in loaded
    urls = gw.new_array(gw.jvm.java.net.URL, 1)
    urls[0] = gw.jvm.java.io.File(str(jar_path())).toURI().toURL()
    other = gw.jvm.java.net.URLClassLoader(urls, gw.jvm.java.lang.ClassLoader
                                           .getPlatformClassLoader())
    with pytest.raises(Exception, match="already loaded in this JVM by another class loader"):
        gw.jvm.java.lang.Class.forName("org.rocketstore.spark.NativeLib", True, other)
    assert lib.openHandles() >= 0  # the first loader's library still answers


def test_configure_warns_when_a_jvm_already_runs(jvm: Any) -> None:
    from pyspark.sql import SparkSession

    from rocketstore.spark import configure

    with pytest.warns(RuntimeWarning, match="already running"):
        b = configure(SparkSession.builder.config("spark.jars", "/x/other.jar"))
    assert b._options["spark.jars"] == f"/x/other.jar,{jar_path()}"
