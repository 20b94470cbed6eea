"""Spark reads with nothing to read return no rows: an empty store, a topic
the store does not hold, a key nothing carries, a pushed-down filter that
excludes everything; batch and streaming. (PySpark hands the reader a plain
``InputPartition(None)`` when ``partitions()`` plans none.)

Marked ``spark`` (run with ``python -m pytest -m spark``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from helpers.arrow_util import GEOMETRY
from rocketstore import MessageStore, StoreConfig

pytestmark = pytest.mark.spark

FMT = "rocketstore_python"
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store that was opened and closed without a message."""
    path = str(tmp_path_factory.mktemp("empty") / "s")
    MessageStore(StoreConfig(store_path=path, **GEOMETRY)).start().shutdown()
    return path


@pytest.fixture(scope="module")
def some(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store holding 20 messages of topic ``orders`` (keys ``k0``..``k19``)."""
    path = str(tmp_path_factory.mktemp("some") / "s")
    with MessageStore(StoreConfig(store_path=path, **GEOMETRY)) as s:
        for i in range(20):
            s.put("orders", f"m{i}".encode(), queue_id=i % 2, keys=[f"k{i}"], tags="t")
    return path


@pytest.fixture(params=["false", "true"], ids=["pushdown-off", "pushdown-on"])
def pushdown(spark: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    before = spark.conf.get(PUSHDOWN, "false")
    spark.conf.set(PUSHDOWN, request.param)
    yield request.param
    spark.conf.set(PUSHDOWN, before)


def _read(spark: Any, path: str, **opts: str) -> Any:
    r = spark.read.format(FMT).option("path", path)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


@pytest.mark.parametrize("opts", [
    {},
    {"topic": "orders"},
    {"topic": "orders", "startingOffsets": "latest"},
    {"key": "k1"},
], ids=["scan", "topic", "topic-latest", "key"])
def test_an_empty_store_reads_no_rows(spark: Any, empty: str, pushdown: str,
                                      opts: dict[str, str]) -> None:
    df = _read(spark, empty, **opts)
    assert df.collect() == []
    assert df.where("queue_id = 0").count() == 0


@pytest.mark.parametrize("opts", [
    {"topic": "nosuch"},
    {"topic": "nosuch", "key": "k1"},
    {"key": "no-such-key"},
    {"topic": "orders", "key": "no-such-key"},
    {"topic": "orders", "queues": "7"},
    {"topic": "orders", "startingOffsets": "latest"},
], ids=["topic", "topic-and-key", "key", "topic-key", "queue", "latest"])
def test_a_read_that_matches_nothing_reads_no_rows(spark: Any, some: str, pushdown: str,
                                                   opts: dict[str, str]) -> None:
    df = _read(spark, some, **opts)
    assert df.collect() == []
    assert df.count() == 0


@pytest.mark.parametrize("where", [
    "topic = 'nosuch'",
    "queue_id = 9",
    "tags = 'other'",
    "queue_offset > 1000",
    "commit_log_offset < 0",
    "msg_id = '00000000000000000000000000000000'",
    "topic = 'orders' AND queue_id IN (5, 6)",
])
def test_a_filter_that_excludes_everything_reads_no_rows(spark: Any, some: str,
                                                         pushdown: str, where: str) -> None:
    for opts in ({}, {"topic": "orders"}):
        df = _read(spark, some, **opts).where(where)
        assert df.collect() == [], (where, opts)
    # The same read without the filter does see the rows.
    assert _read(spark, some).count() == 20


def _stream_rows(spark: Any, path: str, out: Path, **opts: str) -> list[Any]:
    r = spark.readStream.format(FMT).option("path", path)
    for k, v in opts.items():
        r = r.option(k, v)
    name = f"empty_{abs(hash((str(out), tuple(opts.items()))))}"
    q = (r.load().writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(out / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    rows: list[Any] = spark.sql(f"SELECT * FROM {name}").collect()
    return rows


@pytest.mark.parametrize("opts", [
    {},
    {"topic": "orders"},
    {"startingOffsets": "earliest"},
    {"topic": "orders", "startingOffsets": "earliest"},
], ids=["default", "topic", "earliest", "topic-earliest"])
def test_a_streaming_read_of_an_empty_store_reads_no_rows(spark: Any, empty: str,
                                                          tmp_path: Path,
                                                          opts: dict[str, str]) -> None:
    assert _stream_rows(spark, empty, tmp_path, **opts) == []


@pytest.mark.parametrize("opts", [
    {"topic": "nosuch", "startingOffsets": "earliest"},
    {"topic": "orders", "queues": "7", "startingOffsets": "earliest"},
    {"topic": "orders"},
], ids=["topic", "queue", "latest"])
def test_a_streaming_read_that_matches_nothing_reads_no_rows(spark: Any, some: str,
                                                             tmp_path: Path,
                                                             opts: dict[str, str]) -> None:
    assert _stream_rows(spark, some, tmp_path, **opts) == []
    # The same query from the earliest offsets does see the rows.
    if opts == {"topic": "orders"}:
        rows = _stream_rows(spark, some, tmp_path / "all", topic="orders",
                            startingOffsets="earliest")
        assert len(rows) == 20


def test_a_streaming_read_logs_where_it_starts(some: str, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """``initialOffset`` (the driver's, for a query without a checkpoint)
    logs the offsets it chose and why: latest unless told otherwise."""
    from rocketstore.spark._options import ReadOptions
    from rocketstore.spark._source import _StreamReader

    def start(**opts: str) -> tuple[dict[str, int], str]:
        r = _StreamReader(ReadOptions.parse({"path": some, **opts}, streaming=True), None, None)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="rocketstore"):
            try:
                got = r.initialOffset()
            finally:
                r.stop()
        lines = [m.getMessage() for m in caplog.records if "streaming read" in m.getMessage()]
        assert len(lines) == 1, lines
        return got, lines[0]

    got, line = start(topic="orders")
    assert got == {"orders/0": 10, "orders/1": 10}
    assert '{"orders/0": 10, "orders/1": 10}' in line
    assert "the latest offsets, the default" in line and "startingOffsets=earliest" in line
    got, line = start(topic="orders", startingOffsets="earliest")
    assert got == {"orders/0": 0, "orders/1": 0}
    assert line.endswith("(startingOffsets=earliest)")
    got, line = start(topic="orders", startingOffsets='{"orders/0": 3}')
    assert got == {"orders/0": 3, "orders/1": 0}  # a queue left out starts at its first
    assert 'startingOffsets={"orders/0": 3}' in line
