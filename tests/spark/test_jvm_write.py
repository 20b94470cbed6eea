"""Batch writes through the JVM connector against the Python sink: the same
DataFrame gives the same records, a row breaking a put rule refuses the
whole job with nothing appended, and a job is appended once per job tag
(recorded in config/sparkJobs.json, shared by both connectors).

Marked ``spark``; skipped when the connector's jar is not built
(``scripts/build-jar.sh``). In the session (tests/conftest.py)
``rocketstore`` is the JVM connector and ``rocketstore_python`` the Python
sink.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from rocketstore import MessageStore, StoreConfig

pytestmark = pytest.mark.spark

JVM, PY = "rocketstore", "rocketstore_python"
SEGMENT = 256 * 1024
JOB = "SPARK_WRITE_JOB"


def _save(df: Any, fmt: str, path: str, **opts: str) -> None:
    w = df.write.format(fmt).option("path", path).option(
        "mapped_file_size_commit_log", str(SEGMENT))
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()


def _records(path: str) -> list[dict[str, Any]]:
    """Every message, in CommitLog order, as the write columns."""
    cols = ["topic", "queue_id", "body", "tags", "keys", "properties"]
    with MessageStore(StoreConfig(store_path=path), read_only=True) as s:
        out = s.read_arrow(columns=cols).read_all().to_pylist()
    for r in out:
        r["properties"] = sorted(r["properties"] or [])
    return out


def _df(spark: Any, n: int = 600) -> Any:
    rows = [(f"t{i % 3}", f"body-{i}".encode(), i % 4,
             None if i % 5 == 0 else f"tag{i % 2}",
             None if i % 7 == 0 else [f"k{i}", f"q{i % 10}"],
             None if i % 6 == 0 else {"a": str(i), "b": "x"})
            for i in range(n)]
    return spark.createDataFrame(
        rows, "topic string, body binary, queue_id int, tags string, keys array<string>, "
              "properties map<string,string>").repartition(3)


def test_the_same_dataframe_gives_the_same_records(jvm: Any, tmp_path: Path) -> None:
    df = _df(jvm).cache()
    a, b = str(tmp_path / "jvm"), str(tmp_path / "py")
    _save(df, JVM, a, jobTag="job-1")
    _save(df, PY, b, jobTag="job-1")
    got, want = _records(a), _records(b)
    assert len(got) == 600
    assert got == want
    assert all((JOB, "job-1") in r["properties"] for r in got)


def test_fewer_columns_and_a_string_body(jvm: Any, tmp_path: Path) -> None:
    df = jvm.createDataFrame([("orders", f"r{i}") for i in range(50)], "topic string, body string")
    a, b = str(tmp_path / "jvm"), str(tmp_path / "py")
    _save(df, JVM, a, jobTag="j")
    _save(df, PY, b, jobTag="j")
    got = _records(a)
    assert sorted(r["body"] for r in got) == sorted(f"r{i}".encode() for i in range(50))
    assert {r["queue_id"] for r in got} == {0}
    assert got == _records(b)


def test_the_default_tag_is_a_digest_of_the_rows(jvm: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    df = _df(jvm, 90).cache()
    _save(df, JVM, path)
    jobs = json.loads((Path(path) / "config" / "sparkJobs.json").read_text())
    (tag,) = jobs
    assert tag.startswith("rows-") and jobs[tag]["done"] and jobs[tag]["rows"] == 90
    assert {dict(r["properties"])[JOB] for r in _records(path)} == {tag}
    # A finished digest: the same rows written again on purpose.
    _save(df, JVM, path)
    assert len(_records(path)) == 180


def test_a_bad_row_refuses_the_whole_job(jvm: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with MessageStore(StoreConfig(store_path=path, mapped_file_size_commit_log=SEGMENT)) as s:
        s.put("orders", b"before")
    rows = [("orders", f"r{i}".encode()) for i in range(1000)]
    rows[500] = ("bad topic!", b"refused")
    df = jvm.createDataFrame(rows, "topic string, body binary").repartition(4)
    with pytest.raises(Exception, match=r"row \d+ of 1000 .*breaks a put rule \(MESSAGE_ILLEGAL"
                                        r".*nothing was appended"):
        _save(df, JVM, path)
    assert [r["body"] for r in _records(path)] == [b"before"]
    assert not os.path.exists(path + ".spark-staging")
    assert not (Path(path) / "config" / "sparkJobs.json").exists()


def test_a_replayed_job_appends_once(jvm: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    df = _df(jvm, 120).cache()
    _save(df, JVM, path, jobTag="nightly")
    _save(df, JVM, path, jobTag="nightly")  # finished: nothing appended
    assert len(_records(path)) == 120
    # A job recorded as unfinished (a driver killed after its last append)
    # counts its tagged messages and appends only what is missing.
    state = Path(path) / "config" / "sparkJobs.json"
    jobs = json.loads(state.read_text())
    state.write_text(json.dumps({"nightly": {**jobs["nightly"], "done": False}}))
    _save(df, JVM, path, jobTag="nightly")
    assert len(_records(path)) == 120
    assert json.loads(state.read_text())["nightly"]["done"] is True
    # The record is shared: the Python sink replaying the job appends nothing.
    _save(df, PY, path, jobTag="nightly")
    assert len(_records(path)) == 120


def test_write_options_are_checked(jvm: Any, tmp_path: Path) -> None:
    df = jvm.createDataFrame([("orders", b"x")], "topic string, body binary")
    with pytest.raises(Exception, match="jobTag"):
        _save(df, JVM, str(tmp_path / "s"), jobTag=" x")
    with pytest.raises(Exception, match=r"unknown option.*batch write: sinkName \(an option "
                                        r"of a streaming write\)"):
        _save(df, JVM, str(tmp_path / "s"), sinkName="x")
    with pytest.raises(Exception, match="needs columns topic and body"):
        _save(jvm.createDataFrame([("orders",)], "topic string"), JVM, str(tmp_path / "s"))
