"""Filter pushdown through a real local SparkSession: each query gives the
same rows with ``spark.sql.python.filterPushdown.enabled`` off and on, and
with it on the engine decodes fewer records (the ``metricsFile`` counters).

Marked ``spark`` (run with ``python -m pytest -m spark``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from helpers.pushdown_util import OPTIONS, fill

pytestmark = pytest.mark.spark

CONF = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    path = str(tmp_path_factory.mktemp("pushdown-spark") / "s")
    return path, fill(path)


@pytest.fixture
def pushdown_conf(spark: Any) -> Iterator[None]:
    before = spark.conf.get(CONF, "false")
    yield
    spark.conf.set(CONF, before)


def _query(spark: Any, path: str, where: str, metrics: Path, **opts: str) -> list[tuple[Any, ...]]:
    r = (spark.read.format("rocketstore_python").option("path", path)
         .option("metricsFile", str(metrics)))
    for k, v in {**OPTIONS, **opts}.items():
        r = r.option(k, v)
    df = r.load()
    if where:
        df = df.where(where)
    rows = df.select("topic", "queue_id", "queue_offset", "msg_id", "tags", "body").collect()
    return sorted(tuple(x) for x in rows)


def _decoded(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    return sum(json.loads(line)["decoded"] for line in metrics.read_text().splitlines())


def both_ways(spark: Any, path: str, where: str, tmp: Path, **opts: str
              ) -> tuple[list[tuple[Any, ...]], int, int]:
    """Rows with pushdown off and on (asserted equal) and the records each decoded."""
    tmp.mkdir(parents=True, exist_ok=True)
    n = len(list(tmp.iterdir()))
    off_m, on_m = tmp / f"off{n}", tmp / f"on{n}"
    spark.conf.set(CONF, "false")
    off = _query(spark, path, where, off_m, **opts)
    spark.conf.set(CONF, "true")
    on = _query(spark, path, where, on_m, **opts)
    assert on == off, where
    return on, _decoded(off_m), _decoded(on_m)


@pytest.mark.usefixtures("pushdown_conf")
def test_each_pushdown_gives_the_rows_of_the_plain_read(
        spark: Any, store: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, info = store
    spark.conf.set(CONF, "false")
    times = sorted(spark.read.format("rocketstore_python").option("path", path).options(**OPTIONS)
                   .load().select("store_timestamp").toArrow().column(0).to_pylist())
    total = len(times)
    t0, t1 = times[total // 3], times[total // 3 + 30]
    def lit(t: dt.datetime) -> str:  # the session's time zone is UTC
        return f"timestamp'{t.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S.%f}'"

    some_ids = [r[0] for r in spark.read.format("rocketstore_python").option("path", path)
                .options(**OPTIONS).option("topic", "events").load().select("msg_id")
                .limit(3).collect()]
    selective = {
        "topic = 'orders' AND queue_id IN (1, 3)": None,
        "queue_offset >= 40 AND queue_offset < 60": 7 * 20,
        f"store_timestamp >= {lit(t0)} AND store_timestamp < {lit(t1)} AND topic = 'orders'":
            total // 4,
        "tags = 'Aa'": total * 2 // 3,
        "tags IN ('BB', 't3') AND topic = 'events'": None,
        "msg_id IN ({})".format(", ".join(f"'{i}'" for i in some_ids)): 3,
    }
    for where, most in selective.items():
        rows, off, on = both_ways(spark, path, where, tmp_path)
        assert rows, where
        assert on < off, where   # pushed down: fewer records decoded
        if most is not None:
            assert on <= most, (where, on)
    lo = info["min_phy"] + 2000
    rows, _, _ = both_ways(spark, path, f"commit_log_offset BETWEEN {lo} AND {lo + 9000}",
                           tmp_path)
    assert rows
    # Not pushed (returned to Spark), still right.
    rows, _, _ = both_ways(spark, path, "topic LIKE 'ev%' OR tags IS NULL", tmp_path)
    assert rows
    # The queue whose store times decrease, at its outlier's time.
    qo, t = info["outlier"]
    at = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=t)
    rows, _, _ = both_ways(spark, path, f"topic = 'audit' AND store_timestamp = {lit(at)}",
                           tmp_path)
    assert qo in [r[2] for r in rows]


@pytest.mark.usefixtures("pushdown_conf")
def test_key_option_with_and_without_pushdown(
        spark: Any, store: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = store
    rows, off, on = both_ways(spark, path, "", tmp_path, key="k401,g3")
    assert rows and off == on  # the option is answered by the index either way
    assert on < 3 * len(rows)
    spark.conf.set(CONF, "true")
    all_rows = (spark.read.format("rocketstore_python").option("path", path).options(**OPTIONS)
                .load())
    want = sorted(tuple(x) for x in all_rows.where(
        "array_contains(keys, 'k401') OR array_contains(keys, 'g3')").select(
        "topic", "queue_id", "queue_offset", "msg_id", "tags", "body").collect())
    assert rows == want
    rows, _, _ = both_ways(spark, path, "topic = 'audit'", tmp_path, key="g3")
    assert rows and {r[0] for r in rows} == {"audit"}
