"""Reading a store with both Spark connectors and comparing: the JVM
connector (``rocketstore`` when its jar is on the class path) and the
Python source (``rocketstore_python``); shared by the JVM connector's
conformance and safety tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .arrow_util import key, normalize

JVM, PY = "rocketstore", "rocketstore_python"


def native(spark: Any) -> Any:
    """The connector's JNI class (``org.rocketstore.spark.NativeLib``)."""
    return spark._jvm.org.rocketstore.spark.NativeLib


def load(spark: Any, fmt: str, path: str, **opts: Any) -> Any:
    r = spark.read.format(fmt).option("path", path)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def rows(df: Any) -> list[dict[str, Any]]:
    """The rows in a canonical order (both connectors' rows are the same
    Arrow types; full rows in the shape of the Python API's)."""
    out = [normalize(r) if "properties" in r and "body" in r else r
           for r in df.toArrow().to_pylist()]
    return sorted(out, key=lambda r: ((r.get("store") or "", *key(r)) if "queue_offset" in r
                                      and "topic" in r else ("", "", 0, 0), repr(r)))


def metrics(path: Path) -> dict[str, int]:
    """The counts a read's ``metricsFile`` holds, summed over its partitions."""
    out = {"rows": 0, "damaged": 0, "lost": 0}
    if path.exists():
        for line in path.read_text().splitlines():
            d = json.loads(line)
            for k in out:
                out[k] += d[k]
    return out


def same(spark: Any, path: str, tmp: Path, where: str | None = None, select: str | None = None,
         **opts: Any) -> list[dict[str, Any]]:
    """Reads with both connectors; asserts the same rows, count and damage
    and retention counts; returns the rows."""
    got = {}
    for fmt in (JVM, PY):
        m = tmp / f"metrics-{fmt}-{abs(hash((path, where, select, str(opts))))}.jsonl"
        m.unlink(missing_ok=True)
        df = load(spark, fmt, path, metricsFile=m, **opts)
        if where:
            df = df.where(where)
        if select:
            df = df.selectExpr(*select.split(","))
        got[fmt] = (rows(df), df.count(), metrics(m))
    assert got[JVM][0] == got[PY][0], (where, opts)
    assert got[JVM][1] == got[PY][1] == len(got[JVM][0])
    # Damage and retention counts as the Python source reports them (a
    # count() reads again: both sides counted both reads).
    assert got[JVM][2]["damaged"] == got[PY][2]["damaged"], (where, opts)
    assert got[JVM][2]["lost"] == got[PY][2]["lost"], (where, opts)
    return got[JVM][0]
