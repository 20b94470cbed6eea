"""Filter pushdown without a SparkSession: Spark's filter objects turned into
a plan (``translate``), and the planned reads compared with the same read
unfiltered and then filtered row by row (the answer without pushdown).

The store (``helpers.pushdown_util``) has several topics, queues, tags with
a hash collision, keys, deleted old segments, a damaged record and a queue
whose store times decrease once.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import datasource as ds
from pyspark.sql.types import StructType

from helpers.pushdown_util import OPTIONS, fill, holds
from rocketstore.spark import _pushdown
from rocketstore.spark._options import ReadOptions
from rocketstore.spark._pushdown import Pushed, translate
from rocketstore.spark._source import _BatchReader, _PushdownReader

#: They need PySpark (the spark extra), so they are in the spark set, which
#: .ci/run runs: the default set is the same with or without it.
pytestmark = pytest.mark.spark

UTC = dt.UTC


def ts(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms)


def ms_of(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(milliseconds=1)


# -- translation ----------------------------------------------------------------------


def test_sets_intersect_and_null_checks_on_never_null_columns_are_handled() -> None:
    fs = [ds.EqualTo(("topic",), "a"), ds.In(("topic",), ["a", "b", None]),
          ds.IsNotNull(("topic",)), ds.In(("queue_id",), [1, 2]), ds.EqualTo(("queue_id",), 2),
          ds.In(("tags",), ["x", "y"]), ds.EqualTo(("msg_id",), "M")]
    pushed, left = translate(fs)
    assert pushed.topics == {"a"} and pushed.queue_ids == {2}
    assert pushed.tags == {"x", "y"} and pushed.msg_ids == {"M"}
    assert left == []


def test_ranges_become_inclusive_bounds() -> None:
    fs = [ds.GreaterThan(("queue_offset",), 10), ds.LessThanOrEqual(("queue_offset",), 20),
          ds.LessThan(("queue_offset",), 15), ds.GreaterThanOrEqual(("commit_log_offset",), 5),
          ds.EqualTo(("commit_log_offset",), 7)]
    pushed, left = translate(fs)
    assert pushed.queue_offset == (11, 14)
    assert pushed.commit_log_offset == (7, 7)
    assert left == []


def test_timestamp_bounds_round_to_whole_milliseconds() -> None:
    t = dt.datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    base = ms_of(t.replace(microsecond=123000))
    pushed, _ = translate([ds.GreaterThanOrEqual(("store_timestamp",), t)])
    assert pushed.store_time == (base + 1, None)   # 123 ms < 123.456 ms
    pushed, _ = translate([ds.GreaterThan(("store_timestamp",), t)])
    assert pushed.store_time == (base + 1, None)
    pushed, _ = translate([ds.LessThan(("store_timestamp",), t)])
    assert pushed.store_time == (None, base)
    pushed, _ = translate([ds.LessThanOrEqual(("store_timestamp",), t)])
    assert pushed.store_time == (None, base)
    pushed, _ = translate([ds.EqualTo(("store_timestamp",), t)])
    assert pushed.empty  # no whole millisecond equals it
    whole = t.replace(microsecond=123000)
    pushed, _ = translate([ds.LessThan(("store_timestamp",), whole)])
    assert pushed.store_time == (None, base - 1)
    # A naive literal is read as UTC.
    pushed, _ = translate([ds.GreaterThanOrEqual(("store_timestamp",),
                                                 whole.replace(tzinfo=None))])
    assert pushed.store_time == (base, None)


def test_what_is_not_handled_goes_back_to_spark_by_reference() -> None:
    fs = [ds.Not(ds.EqualTo(("topic",), "a")), ds.EqualTo(("body",), b"x"),
          ds.StringStartsWith(("topic",), "or"), ds.EqualTo(("topic",), 3),
          ds.EqualNullSafe(("tags",), None), ds.IsNotNull(("tags",)), ds.IsNull(("topic",)),
          ds.In(("queue_offset",), [3, 9]), ds.EqualTo(("a", "b"), 1),
          ds.GreaterThan(("store_timestamp",), "2024-01-01")]
    pushed, left = translate(fs)
    assert all(any(x is f for x in left) for f in fs)  # every one returned, as is
    assert pushed.queue_offset == (3, 9)  # narrowed all the same
    assert pushed.topics is None and pushed.tags is None


def test_contradictions_are_empty_and_keys_come_from_the_option() -> None:
    assert translate([ds.EqualTo(("topic",), "a"), ds.EqualTo(("topic",), "b")])[0].empty
    assert translate([ds.GreaterThan(("queue_offset",), 5),
                      ds.LessThan(("queue_offset",), 5)])[0].empty
    assert translate([ds.In(("tags",), [None])])[0].empty
    pushed, _ = translate([], ["k1", "k2", "k1"])
    assert pushed.keys == ("k1", "k2") and pushed.narrows
    assert not translate([])[0].narrows


def test_the_pushdown_reader_is_used_only_inside_sparks_pushdown_step() -> None:
    # Outside Spark's pushdown worker the plain reader is made (PySpark
    # refuses a reader with pushFilters while pushdown is disabled).
    assert not _pushdown.pushdown_requested()


# -- planned reads equal the unfiltered read filtered afterwards -----------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    path = str(tmp_path_factory.mktemp("pushdown") / "s")
    return path, fill(path)


def _read(reader: _BatchReader) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in reader.partitions():
        for b in reader.read(p):
            out.extend(b.to_pylist())
    return out


def _key(r: dict[str, Any]) -> tuple[str, int, int]:
    return r["topic"], r["queue_id"], r["queue_offset"]


def _opts(path: str, **o: str) -> ReadOptions:
    return ReadOptions.parse({"path": path, **OPTIONS, **o})


def compare(path: str, filters: list[Any], metrics: Path | None = None,
            **o: str) -> tuple[list[dict[str, Any]], Pushed]:
    """The pushed read (with Spark's part done here) equals the plain read
    filtered row by row; returns its rows."""
    extra = {"metricsFile": str(metrics)} if metrics else {}
    r = _PushdownReader(_opts(path, **o, **extra), StructType([]), None)
    left = list(r.pushFilters(filters))
    got = sorted((x for x in _read(r) if all(holds(f, x) for f in left)), key=_key)
    plain = _BatchReader(_opts(path, **o), StructType([]), None)
    want = sorted((x for x in _read(plain) if all(holds(f, x) for f in filters)), key=_key)
    assert got == want
    return got, r.pushed


def decoded(metrics: Path) -> int:
    return sum(json.loads(line)["decoded"] for line in metrics.read_text().splitlines())


def test_topic_and_queue_filters(store: tuple[str, dict[str, Any]]) -> None:
    path, _ = store
    got, _ = compare(path, [ds.EqualTo(("topic",), "orders")])
    assert got and {r["topic"] for r in got} == {"orders"}
    got, _ = compare(path, [ds.In(("topic",), ["orders", "audit"]),
                            ds.In(("queue_id",), [0, 3])])
    assert {(r["topic"], r["queue_id"]) for r in got} == {("orders", 0), ("orders", 3),
                                                          ("audit", 0)}
    got, pushed = compare(path, [ds.EqualTo(("topic",), "nope")])
    assert got == [] and pushed.topics == {"nope"}


def test_offset_ranges(store: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, info = store
    got, _ = compare(path, [ds.GreaterThanOrEqual(("queue_offset",), 50),
                            ds.LessThan(("queue_offset",), 70)], tmp_path / "m1")
    assert got and all(50 <= r["queue_offset"] < 70 for r in got)
    assert decoded(tmp_path / "m1") <= 20 * 7  # 7 queues, 20 offsets each
    lo, hi = info["min_phy"] + 3000, info["min_phy"] + 20000
    got, _ = compare(path, [ds.GreaterThanOrEqual(("commit_log_offset",), lo),
                            ds.LessThanOrEqual(("commit_log_offset",), hi)])
    assert got and all(lo <= r["commit_log_offset"] <= hi for r in got)
    got, _ = compare(path, [ds.GreaterThan(("commit_log_offset",), lo),
                            ds.EqualTo(("topic",), "events")])
    assert got and all(r["commit_log_offset"] > lo for r in got)
    # With the read's own offset options.
    compare(path, [ds.GreaterThanOrEqual(("queue_offset",), 20)], topic="orders,events",
            queues="0,1", startingOffsets=json.dumps({"orders/0": 30}))


def test_store_time_ranges(store: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = store
    rows = sorted(_read(_BatchReader(_opts(path), StructType([]), None)),
                  key=lambda r: r["store_timestamp"])
    t0, t1 = rows[len(rows) // 3]["store_timestamp"], rows[len(rows) // 3 + 40]["store_timestamp"]
    m = tmp_path / "m"
    got, _ = compare(path, [ds.EqualTo(("topic",), "orders"),
                            ds.GreaterThanOrEqual(("store_timestamp",), t0),
                            ds.LessThan(("store_timestamp",), t1)], m)
    assert got
    # The orders queues are monotone: their time ranges are found by search,
    # so far fewer records are decoded than the topic holds.
    assert decoded(m) < len([r for r in rows if r["topic"] == "orders"]) // 2
    compare(path, [ds.GreaterThan(("store_timestamp",), t0)])
    compare(path, [ds.LessThanOrEqual(("store_timestamp",), t0)], topic="orders,events")
    compare(path, [ds.GreaterThanOrEqual(("store_timestamp",), t0)],
            startingTimestamp=str(ms_of(t1)))


def test_a_queue_whose_times_decrease_is_read_whole(
        store: tuple[str, dict[str, Any]], caplog: pytest.LogCaptureFixture) -> None:
    path, info = store
    qo, t = info["outlier"]
    with caplog.at_level(logging.WARNING, "rocketstore"):
        got, _ = compare(path, [ds.EqualTo(("topic",), "audit"),
                                ds.GreaterThanOrEqual(("store_timestamp",), ts(t)),
                                ds.LessThanOrEqual(("store_timestamp",), ts(t))])
    # The outlier (early in the queue) is found, though a time search misses it.
    assert qo in [r["queue_offset"] for r in got]
    assert "audit/0: store times decrease" in caplog.text


def test_tags_with_a_hash_collision(store: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = store
    m = tmp_path / "m"
    got, _ = compare(path, [ds.EqualTo(("tags",), "Aa")], m)
    assert got and {r["tags"] for r in got} == {"Aa"}  # "BB" shares the hash code
    total = len(_read(_BatchReader(_opts(path), StructType([]), None)))
    assert decoded(m) < total * 2 // 3  # units of other codes never reach the CommitLog
    got, _ = compare(path, [ds.In(("tags",), ["BB", "t3"]), ds.EqualTo(("topic",), "events")])
    assert {r["tags"] for r in got} == {"BB", "t3"}


def test_msg_ids(store: tuple[str, dict[str, Any]]) -> None:
    path, _ = store
    rows = _read(_BatchReader(_opts(path, topic="orders"), StructType([]), None))
    ids = [rows[5]["msg_id"], rows[77]["msg_id"]]
    got, _ = compare(path, [ds.In(("msg_id",), ids)])
    assert sorted(r["msg_id"] for r in got) == sorted(ids)
    got, _ = compare(path, [ds.EqualTo(("msg_id",), "nonsense")])
    assert got == []
    got, _ = compare(path, [ds.EqualTo(("msg_id",), ids[0]), ds.EqualTo(("topic",), "events")])
    assert got == []


def test_damaged_record_is_skipped_on_every_path(store: tuple[str, dict[str, Any]]) -> None:
    path, info = store
    # The damaged body's message (i = 600: orders, queue 0) is in neither read.
    got, _ = compare(path, [ds.EqualTo(("topic",), "orders"), ds.EqualTo(("queue_id",), 0)])
    assert not any(r["body"].startswith(info["damaged_body"][:-2]) for r in got)
    compare(path, [ds.EqualTo(("tags",), "Aa"), ds.EqualTo(("queue_id",), 0)])


def test_key_option_by_the_index(store: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = store
    m = tmp_path / "m"
    got, pushed = compare(path, [], m, key="k401,g3")
    assert pushed.keys == ("k401", "g3")
    assert got and all({"k401", "g3"} & set(r["keys"]) for r in got)
    # The hits, and the few records past the index's last entry.
    assert decoded(m) < 3 * len(got)
    got, _ = compare(path, [ds.EqualTo(("topic",), "audit")], key="g3")
    assert got and {r["topic"] for r in got} == {"audit"}
    compare(path, [], key="nothing-has-this")


def test_key_option_without_an_index_scans_and_says_so(
        store: tuple[str, dict[str, Any]], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    src, _ = store
    path = str(tmp_path / "noindex")
    shutil.copytree(src, path)
    shutil.rmtree(Path(path) / "index")
    with caplog.at_level(logging.WARNING, "rocketstore"):
        got, _ = compare(path, [], key="g3,k401")
    assert got and "no usable index: keys are found by a CommitLog scan" in caplog.text
    # The plain reader (pushdown disabled) answers the option the same way.
    plain = _BatchReader(_opts(path, key="g3,k401"), StructType([]), None)
    assert sorted(_read(plain), key=_key) == got


def test_include_uncommitted_scan_pushes_nothing(store: tuple[str, dict[str, Any]]) -> None:
    path, _ = store
    r = _PushdownReader(_opts(path, includeUncommitted="true"), StructType([]), None)
    fs = [ds.EqualTo(("topic",), "orders")]
    assert list(r.pushFilters(fs)) == fs
    compare(path, [], includeUncommitted="true", key="g2")


def test_pushed_filters_on_columns_the_schema_leaves_out(
        store: tuple[str, dict[str, Any]]) -> None:
    # The filters read msg_id, keys, commit_log_offset (and topic, queue_id,
    # queue_offset for scanned ranges) though the schema asks only for body.
    path, info = store
    rows = _read(_BatchReader(_opts(path, topic="events"), StructType([]), None))
    ids = [rows[3]["msg_id"], rows[40]["msg_id"]]
    lo = info["min_phy"] + 5000
    for filters, o in (([ds.In(("msg_id",), ids)], {}),
                       ([ds.GreaterThan(("commit_log_offset",), lo)], {}),
                       ([], {"key": "g3,k401"})):
        full, _ = compare(path, filters, **o)
        r = _PushdownReader(_opts(path, **o), StructType([]), ("body",))
        assert list(r.pushFilters(filters)) == []
        got = _read(r)
        assert all(list(x) == ["body"] for x in got)
        assert sorted(x["body"] for x in got) == sorted(x["body"] for x in full)
