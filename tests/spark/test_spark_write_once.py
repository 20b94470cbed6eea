"""A batch write is checked whole before its first append, and appended once
per job tag: a row breaking a put rule leaves the store as it was, and a
commit cut short (SIGKILL, a full disk) leaves a prefix that a rerun of the
same write completes without duplicates.

Most tests run the driver's commit (``_commit.append_staged``) on files
staged as tasks stage them; the ones with a ``spark`` fixture go through a
local SparkSession. Marked ``spark`` (run with ``python -m pytest -m spark``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from helpers.paths import HELPERS, REPO  # noqa: E402
from rocketstore import MessageStore, StoreConfig  # noqa: E402
from rocketstore.spark import _commit, _staging  # noqa: E402
from rocketstore.spark._options import WriteOptions  # noqa: E402

pytestmark = pytest.mark.spark

FMT = "rocketstore_python"
SEGMENT = 256 * 1024
#: The columns a write takes, typed as Spark hands them to the tasks.
SCHEMA = pa.schema([("topic", pa.string()), ("body", pa.binary()), ("queue_id", pa.int32()),
                    ("tags", pa.string()), ("keys", pa.list_(pa.string())),
                    ("properties", pa.map_(pa.string(), pa.string()))])


def _rows(n: int, first: int = 0, size: int = 40) -> list[dict[str, Any]]:
    return [{"topic": "orders", "body": (b"r%07d-" % i).ljust(size, b"x"), "queue_id": i % 3}
            for i in range(first, first + n)]


def _stage(opts: WriteOptions, parts: list[list[dict[str, Any]]],
           batch_rows: int = 500) -> tuple[str, list[_commit.StagedFile]]:
    """Stage ``parts`` (one list of rows per task) as the tasks of a batch
    write do, in a job directory of their own."""
    job = _staging.make_job_dir(opts.staging_dir)
    names = {k for rows in parts for r in rows for k in r}
    schema = pa.schema([f for f in SCHEMA if f.name in names])
    files = []
    for i, rows in enumerate(parts):
        batches = [pa.RecordBatch.from_pylist(rows[a:a + batch_rows], schema=schema)
                   for a in range(0, len(rows), batch_rows)]
        files.append(_commit.stage_batches(batches, job, i))
    return job, files


def _opts(path: str, **extra: str) -> WriteOptions:
    return WriteOptions.parse({"path": path, "mapped_file_size_commit_log": str(SEGMENT),
                               **extra})


def _bodies(path: str) -> list[bytes]:
    """Every stored body of topic ``orders``, in CommitLog order."""
    with MessageStore(StoreConfig(store_path=path), read_only=True) as s:
        t = s.read_arrow(columns=["topic", "body"]).read_all()
    return [b for tp, b in zip(t.column("topic").to_pylist(), t.column("body").to_pylist(),
                               strict=True) if tp == "orders"]


def _end(path: str) -> int:
    with MessageStore(StoreConfig(store_path=path), read_only=True) as s:
        return s.max_phy_offset


def _seeded(tmp_path: Path) -> str:
    path = str(tmp_path / "s")
    with MessageStore(StoreConfig(store_path=path, mapped_file_size_commit_log=SEGMENT)) as s:
        s.put("orders", b"before")
    return path


@pytest.mark.parametrize(("bad", "why"), [
    ({"topic": "bad topic!"}, "topic 'bad topic!' contains ' '|topic \"bad topic!\""),
    ({"queue_id": -1}, "queue_id must be >= 0"),
    ({"body": b"x" * (SEGMENT + 1)}, "CommitLog segment"),
    ({"properties": [("DELAY", "soon")]}, "DELAY must be a whole number"),
    ({"keys": ["a b"]}, "contains a space"),
    ({"tags": ""}, "tags must not be empty"),
])
def test_a_row_breaking_a_put_rule_leaves_the_store_as_it_was(
        tmp_path: Path, bad: dict[str, Any], why: str) -> None:
    path = _seeded(tmp_path)
    before = _end(path)
    opts = _opts(path)
    rows = _rows(1000)
    for r in rows:
        r.update(tags="t", keys=["k"], properties=[("P", "v")])
    rows[500] = {**rows[500], **bad}
    job, files = _stage(opts, [rows[:400], rows[400:]])
    with pytest.raises(_commit.CommitError, match=r"row 500 of 1000") as e:
        _commit.append_staged(opts, job, files)
    assert "nothing was appended" in str(e.value)
    assert e.value.appended == 0
    import re
    assert re.search(why, str(e.value)), str(e.value)
    assert _end(path) == before
    assert _bodies(path) == [b"before"]
    assert not os.path.exists(opts.staging_dir)


def test_a_bad_row_in_a_spark_write_stores_nothing(spark: Any, tmp_path: Path) -> None:
    path = _seeded(tmp_path)
    before = _end(path)
    rows = [("orders", f"r{i}".encode()) for i in range(1000)]
    rows[500] = ("bad topic!", b"refused")
    df = spark.createDataFrame(rows, "topic string, body binary").repartition(4)
    with pytest.raises(Exception, match=r"row \d+ of 1000 .*breaks a put rule.*nothing was "
                                        r"appended"):
        (df.write.format(FMT).option("path", path)
         .option("mapped_file_size_commit_log", str(SEGMENT)).mode("append").save())
    assert _end(path) == before
    assert not os.path.exists(path + ".spark-staging")
    # The same rows without the bad one go in, each once.
    good = df.where("topic = 'orders'")
    good.write.format(FMT).option("path", path).mode("append").save()
    assert sorted(_bodies(path)) == sorted([b"before"] + [f"r{i}".encode()
                                                         for i in range(1000) if i != 500])


def test_a_commit_killed_mid_append_is_completed_by_a_rerun(tmp_path: Path) -> None:
    path = _seeded(tmp_path)
    opts = _opts(path)
    parts = [_rows(15_000, first=p * 15_000, size=200) for p in range(4)]
    want = [b"before"] + [r["body"] for part in parts for r in part]
    job, files = _stage(opts, parts)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(REPO / "tests"),
                                                        os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, str(HELPERS / "spark_commit_child.py"),
            json.dumps({"path": path, "mapped_file_size_commit_log": str(SEGMENT)}), job,
            json.dumps([dataclasses.asdict(f) for f in files])]
    commitlog = Path(path) / "commitlog"
    with subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE) as proc:
        try:
            deadline = time.monotonic() + 60
            # 12 MB of rows over 256 KiB segments: kill once a few have been rolled.
            while len(os.listdir(commitlog)) < 6:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.001)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    stored = _bodies(path)
    assert 1 < len(stored) < len(want), "the kill did not land mid-append"
    assert stored == want[:len(stored)]  # a prefix, in order
    jobs = json.loads((Path(path) / "config" / _commit.JOBS_STATE_FILE).read_text())
    assert [v["done"] for v in jobs.values()] == [False]
    # A rerun of the same write (the tasks stage the same rows again).
    job2, files2 = _stage(opts, parts)
    n = _commit.append_staged(opts, job2, files2)
    assert n == len(want) - len(stored)
    assert _bodies(path) == want  # each row exactly once, in order
    jobs = json.loads((Path(path) / "config" / _commit.JOBS_STATE_FILE).read_text())
    assert [v["done"] for v in jobs.values()] == [True]


def test_a_commit_cut_short_by_a_full_disk_is_completed_by_a_rerun(
        tmp_path: Path, fail_points: Any) -> None:
    path = _seeded(tmp_path)
    opts = _opts(path, jobTag="nightly-2026-11-29")
    parts = [_rows(3_000, first=p * 3_000, size=200) for p in range(2)]
    want = [b"before"] + [r["body"] for part in parts for r in part]
    job, files = _stage(opts, parts)
    # No new CommitLog file can be made (ENOSPC) once the first is full.
    fail_points("allocate_file", 28)
    with pytest.raises(_commit.CommitError, match="rerun of the same write") as e:
        _commit.append_staged(opts, job, files)
    assert "nightly-2026-11-29" in str(e.value)
    fail_points("allocate_file", 0)
    stored = _bodies(path)
    assert 1 < len(stored) < len(want) and stored == want[:len(stored)]
    job2, files2 = _stage(opts, parts)
    assert _commit.append_staged(opts, job2, files2) == len(want) - len(stored)
    assert _bodies(path) == want
    # A finished jobTag is not appended again.
    job3, files3 = _stage(opts, parts)
    assert _commit.append_staged(opts, job3, files3) == 0
    assert _bodies(path) == want
    assert not os.path.exists(opts.staging_dir)


def test_the_same_rows_written_twice_on_purpose_are_stored_twice(tmp_path: Path) -> None:
    """The default tag (a digest of the rows) completes only a write that
    did not finish; a finished one is written again."""
    path = _seeded(tmp_path)
    opts = _opts(path)
    parts = [_rows(100)]
    for _ in range(2):
        job, files = _stage(opts, parts)
        assert _commit.append_staged(opts, job, files) == 100
    assert _bodies(path) == [b"before"] + [r["body"] for r in parts[0]] * 2


def test_spark_reruns_stage_the_same_digest(spark: Any, tmp_path: Path) -> None:
    """A rerun of a deterministic Spark job finds the unfinished job its
    first run recorded (here: marked unfinished by hand, as a driver killed
    after its last append but before it marked the job done leaves it)."""
    path = _seeded(tmp_path)
    df = spark.createDataFrame([("orders", f"s{i}".encode(), i % 2) for i in range(300)],
                               "topic string, body binary, queue_id int").repartition(3)

    def save() -> None:
        (df.write.format(FMT).option("path", path)
         .option("mapped_file_size_commit_log", str(SEGMENT)).mode("append").save())

    save()
    state = Path(path) / "config" / _commit.JOBS_STATE_FILE
    jobs = json.loads(state.read_text())
    (tag,) = jobs
    assert tag.startswith("rows-")
    state.write_text(json.dumps({tag: {**jobs[tag], "done": False}}))
    save()  # the same job again: complete already, nothing appended
    assert len(_bodies(path)) == 301
    with MessageStore(StoreConfig(store_path=path), read_only=True) as s:
        props = s.read_arrow(topic="orders", columns=["properties"]).read_all()
    assert {p["SPARK_WRITE_JOB"] for p in (dict(x) for x in
                                             props.column("properties").to_pylist())
            if "SPARK_WRITE_JOB" in p} == {tag}
    save()  # finished: the same rows on purpose, written again
    assert len(_bodies(path)) == 601


def test_a_bad_job_tag_is_refused_at_planning(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame([("orders", b"x")], "topic string, body binary")
    for tag in ("", " x", "a\x01b", "y" * 201):
        with pytest.raises(Exception, match="jobTag"):
            df.write.format(FMT).option("path", str(tmp_path / "s")).option(
                "jobTag", tag).mode("append").save()
