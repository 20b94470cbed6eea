"""The Spark format's schema and its pushdown's column facts come from the
engine's column registry (``rocketstore._native.READ_COLUMNS``), without a
SparkSession: each column's Spark type is the one Spark derives from the
Arrow type the engine returns, and every column the registry marks for
pushdown is pushed down, as it says."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.sql import datasource as ds  # noqa: E402
from pyspark.sql.pandas.types import from_arrow_type  # noqa: E402

from helpers.arrow_util import fill_rich_store  # noqa: E402
from rocketstore._native import READ_COLUMNS  # noqa: E402
from rocketstore.spark import _pushdown  # noqa: E402
from rocketstore.spark._pushdown import Pushed, translate  # noqa: E402
from rocketstore.spark._source import COLUMN_TYPES, SCHEMA_DDL  # noqa: E402

#: They need PySpark (the spark extra), so they are in the spark set, which
#: .ci/run runs: the default set is the same with or without it.
pytestmark = pytest.mark.spark

#: A value of each Arrow type a pushed column has.
VALUES: dict[str, Any] = {"string": "x", "int32": 3, "int64": 7,
                          "timestamp[us, tz=UTC]": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}


def test_the_spark_schema_is_the_one_spark_derives_from_the_engines(tmp_path: Path) -> None:
    store = fill_rich_store(str(tmp_path / "s"), n=20)
    try:
        stream = store._arrow_stream("orders", store_name="s")
        schema = pa.RecordBatchReader.from_stream(stream).schema
    finally:
        store.shutdown()
    assert list(COLUMN_TYPES) == schema.names == [c.name for c in READ_COLUMNS]
    for f in schema:
        assert COLUMN_TYPES[f.name] == from_arrow_type(f.type).simpleString(), f
    assert SCHEMA_DDL == ", ".join(f"{f.name} {COLUMN_TYPES[f.name]}" for f in schema
                                   if f.name != "store")


def test_every_column_marked_for_pushdown_is_pushed_down() -> None:
    pushed_columns = {c.name for c in READ_COLUMNS if c.pushdown is not None}
    assert pushed_columns == set(_pushdown._PUSHED_AS)
    for c in READ_COLUMNS:
        if c.pushdown is None:
            pushed, left = translate([ds.EqualTo((c.name,), "x")])
            assert pushed == Pushed() and len(left) == 1, c
            continue
        v = VALUES[c.arrow_type]
        filters: list[Any] = [ds.EqualTo((c.name,), v)]
        if c.pushdown == "values":
            filters.append(ds.In((c.name,), [v, None]))
        else:
            filters += [ds.GreaterThanOrEqual((c.name,), v), ds.LessThan((c.name,), v)]
        for f in filters:
            pushed, left = translate([f])
            assert pushed.narrows and left == [], (c, f)


def test_is_not_null_is_dropped_exactly_on_never_null_columns() -> None:
    for c in READ_COLUMNS:
        f = ds.IsNotNull((c.name,))
        _, left = translate([f])
        assert (left == []) == c.never_null, c
