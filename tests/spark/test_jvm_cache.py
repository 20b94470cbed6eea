"""The JVM connector's read-only stores, shared per executor
(rust/jni/src/cache.rs): the planning and every task of a read take one
open of the store, the next read takes it again after following the
writer, a store made again at the same path is opened afresh, and an
unused store is closed after the idle time. Measured by counting the
engine's opens (``NativeLib.cacheStats``), not by timing.

Marked ``spark``; skipped when the connector's jar is not built
(``scripts/build-jar.sh``). In the session (``local[2]``) the driver and
the executor are one JVM: planning and tasks share the stores too.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from helpers.arrow_util import GEOMETRY
from helpers.ha_util import wait_until
from rocketstore import MessageStore, StoreConfig
from rocketstore.spark._jvm import missing

pytestmark = pytest.mark.spark

OPTS = {k: str(v) for k, v in GEOMETRY.items()}
#: NativeLib.cacheStats(): [opens, reuses, reopened, closed idle, cached].
OPENS, REUSES, REOPENED, CLOSED_IDLE, CACHED = range(5)
DEFAULT_IDLE_MS = 60_000
#: A partition per 20 messages of each queue (a topic: queue partitions).
PER_QUEUE = {"topic": "orders", "maxRecordsPerPartition": "20"}


@pytest.fixture
def native(spark: Any) -> Iterator[Any]:
    """NativeLib of the session's JVM, its cache back to the default after
    the test."""
    why = missing()
    if why is not None:
        pytest.skip(f"no JVM connector: {why}")
    n = spark._jvm.org.rocketstore.spark.NativeLib
    yield n
    n.cacheConfigure(DEFAULT_IDLE_MS)


def _fill(path: Path, n: int, prefix: str = "m") -> None:
    with MessageStore(StoreConfig(store_path=str(path), **GEOMETRY)) as s:
        for i in range(n):
            s.put("orders", f"{prefix}{i}".encode(), queue_id=i % 4)


def _stats(native: Any) -> list[int]:
    return list(native.cacheStats())


def _read(spark: Any, path: Path, **opts: str) -> list[bytes]:
    r = spark.read.format("rocketstore").option("path", str(path))
    for k, v in {**OPTS, **opts}.items():
        r = r.option(k, v)
    return sorted(bytes(x.body) for x in r.load().select("body").collect())


def _partitions(spark: Any, path: Path) -> int:
    r = spark.read.format("rocketstore").option("path", str(path))
    for k, v in {**OPTS, **PER_QUEUE}.items():
        r = r.option(k, v)
    return int(r.load().rdd.getNumPartitions())


def test_a_read_opens_its_store_once_for_planning_and_every_task(
        spark: Any, native: Any, tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 200)
    parts = _partitions(spark, path)
    assert parts == 12  # 4 queues of 50 messages, 20 a partition
    # Without the cache (idle time 0): every task and the planning (it may
    # open the store more than once) open it.
    native.cacheConfigure(0)
    a = _stats(native)
    assert len(_read(spark, path, **PER_QUEUE)) == 200
    b = _stats(native)
    uncached = b[OPENS] - a[OPENS]
    assert uncached > parts
    # With it: one open, then the rest of the read (and the next) takes it.
    native.cacheConfigure(DEFAULT_IDLE_MS)
    assert len(_read(spark, path, **PER_QUEUE)) == 200
    c = _stats(native)
    assert c[OPENS] - b[OPENS] == 1
    assert c[REUSES] - b[REUSES] == uncached - 1
    assert len(_read(spark, path, **PER_QUEUE)) == 200
    d = _stats(native)
    assert d[OPENS] == c[OPENS]
    assert d[REUSES] - c[REUSES] == uncached
    # Other read fields are another open of the store.
    assert len(_read(spark, path, check_crc_on_recover="false")) == 200
    assert _stats(native)[OPENS] == d[OPENS] + 1


def test_the_next_read_follows_the_writer_and_a_new_store_is_opened_afresh(
        spark: Any, native: Any, tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 40)
    assert len(_read(spark, path)) == 40
    a = _stats(native)
    # Appended since: the shared store follows the writer.
    with MessageStore(StoreConfig(store_path=str(path), **GEOMETRY)) as s:
        for i in range(10):
            s.put("orders", f"late{i}".encode())
    got = _read(spark, path)
    assert len(got) == 50 and b"late9" in got
    b = _stats(native)
    assert b[OPENS] == a[OPENS] and b[REOPENED] == a[REOPENED]
    # Another store at the same path: its rows, from a new open.
    shutil.rmtree(path)
    _fill(path, 7, prefix="new")
    assert _read(spark, path) == sorted(f"new{i}".encode() for i in range(7))
    c = _stats(native)
    assert c[REOPENED] == b[REOPENED] + 1
    assert c[OPENS] == b[OPENS] + 1


def test_an_unused_store_is_closed_after_the_idle_time(
        spark: Any, native: Any, tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 30)
    native.cacheConfigure(300)
    a = _stats(native)
    assert len(_read(spark, path)) == 30
    assert _stats(native)[OPENS] == a[OPENS] + 1
    wait_until(lambda: _stats(native)[CLOSED_IDLE] > a[CLOSED_IDLE], timeout=10,
               what="the idle store closed")
    wait_until(lambda: _stats(native)[CACHED] == 0, timeout=10, what="an empty cache")
    # The next read opens it again.
    assert len(_read(spark, path)) == 30
    assert _stats(native)[OPENS] == a[OPENS] + 2
