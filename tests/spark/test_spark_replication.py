"""The Spark format and replication (docs/format.md §21, docs/spark.md): a
write to a ``SYNC_MASTER`` returns once its slave holds every row; without a
slave the commit fails "stored, not yet replicated" and a rerun (a replayed
micro-batch) appends nothing twice and waits again; a read of a running
slave gets the master's rows.

The failure and retry run the driver's commit (``_commit``) on staged
files; the end-to-end ones go through a local SparkSession. Marked
``spark`` (run with ``python -m pytest -m spark``).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from helpers.ha_util import SEGMENT, SHORT, master_config, slave_config, wait_until  # noqa: E402
from rocketstore import MessageStore, PutStatus, StoreConfig, StoredNotFlushedError  # noqa: E402
from rocketstore.spark import _commit, _staging  # noqa: E402
from rocketstore.spark._options import WriteOptions  # noqa: E402

pytestmark = pytest.mark.spark

# The Python source and sink by name: with the JVM connector's jar on the
# class path, "rocketstore" is the JVM connector (whose writer's replication
# tests are tests/spark/test_jvm_write_settings.py).
FMT = "rocketstore_python"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _master_fields(port: int, slave_timeout: int = 1000) -> dict[str, str]:
    """The write options of a SYNC_MASTER listening on ``port`` (a new
    slave is sent every file: it holds rows of the first one too)."""
    return {"broker_role": "SYNC_MASTER", "ha_listen_port": str(port),
            "ha_new_slave_from_first_file": "true",
            "mapped_file_size_commit_log": str(SEGMENT),
            **{k: str(v) for k, v in SHORT.items()}, "slave_timeout": str(slave_timeout)}


def _bodies(path: Path) -> list[bytes]:
    with MessageStore(StoreConfig(store_path=str(path)), read_only=True) as s:
        t = s.read_arrow(topic="orders", columns=["body"]).read_all()
    return sorted(t.column("body").to_pylist())


def _stage(opts: WriteOptions, n: int) -> tuple[str, list[_commit.StagedFile]]:
    job = _staging.make_job_dir(opts.staging_dir)
    batch = pa.RecordBatch.from_pydict({"topic": ["orders"] * n,
                                        "body": [b"r%d" % i for i in range(n)]})
    return job, [_commit.stage_batches([batch], job, 0)]


@pytest.mark.parametrize("kind", ["batch write", "streaming sink"])
def test_without_a_slave_the_commit_fails_stored_and_a_rerun_appends_nothing_twice(
        tmp_path: Path, kind: str) -> None:
    port = _free_port()
    m = tmp_path / "m"
    opts = WriteOptions.parse({"path": str(m), **_master_fields(port, slave_timeout=300)})

    def commit() -> int:
        job, files = _stage(opts, 500)
        if kind == "batch write":
            return _commit.append_staged(opts, job, files)
        return _commit.append_stream_batch(opts, files, 7)

    with pytest.raises(_commit.CommitNotConfirmedError) as e:
        commit()
    assert isinstance(e.value, StoredNotFlushedError)
    assert e.value.status == PutStatus.SLAVE_NOT_AVAILABLE
    assert "stored, not yet replicated" in str(e.value)
    assert e.value.appended == 500
    assert _bodies(m) == sorted(b"r%d" % i for i in range(500))
    # Again without a slave: nothing appended, the same error.
    with pytest.raises(_commit.CommitNotConfirmedError):
        commit()
    assert len(_bodies(m)) == 500
    # With a slave: nothing appended, and it returns once the slave holds it all.
    with MessageStore(slave_config(tmp_path / "s", port)) as s:
        assert commit() == 0
        with MessageStore(StoreConfig(store_path=str(m)), read_only=True) as ro:
            end = ro.max_phy_offset
        assert s.max_phy_offset == end
    assert _bodies(m) == sorted(b"r%d" % i for i in range(500))
    if kind == "batch write":
        # Recorded as finished only now: a jobs file says so.
        assert '"done": true' in (m / "config" / _commit.JOBS_STATE_FILE).read_text()


def test_a_spark_write_to_a_sync_master_returns_once_the_slave_holds_it(
        spark: Any, tmp_path: Path) -> None:
    port = _free_port()
    m = tmp_path / "m"
    df = spark.createDataFrame([("orders", b"w%d" % i) for i in range(300)],
                               "topic string, body binary").repartition(2)

    def save() -> None:
        w = df.write.format(FMT).option("path", str(m)).option("jobTag", "nightly")
        for k, v in _master_fields(port).items():
            w = w.option(k, v)
        w.mode("append").save()

    with pytest.raises(Exception, match="stored, not yet replicated"):
        save()
    with MessageStore(slave_config(tmp_path / "s", port)) as s:
        save()  # the rerun: nothing appended twice, the slave holds it all
        with MessageStore(StoreConfig(store_path=str(m)), read_only=True) as ro:
            end = ro.max_phy_offset
        assert s.max_phy_offset == end
    assert _bodies(m) == sorted(b"w%d" % i for i in range(300))
    # A second job, the slave connected from the start.
    with MessageStore(slave_config(tmp_path / "s", port)) as s:
        df2 = spark.createDataFrame([("orders", b"x%d" % i) for i in range(100)],
                                    "topic string, body binary")
        w = df2.write.format(FMT).option("path", str(m))
        for k, v in _master_fields(port).items():
            w = w.option(k, v)
        w.mode("append").save()
        with MessageStore(StoreConfig(store_path=str(m)), read_only=True) as ro:
            end = ro.max_phy_offset
        assert s.max_phy_offset == end
    assert len(_bodies(m)) == 400


def test_spark_reads_the_same_rows_from_a_running_slave(spark: Any, tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m")) as m, \
            MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
        wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")
        for i in range(200):
            m.put("orders", b"m%d" % i, i % 3, keys=f"k{i}", tags="t")
        assert s.max_phy_offset == m.max_phy_offset  # SYNC_MASTER: acknowledged
        wait_until(lambda: s.dispatch_behind_bytes() == 0, what="slave dispatched")

        def rows(path: Path, **opts: str) -> list[Any]:
            r = spark.read.format(FMT).option("path", str(path))
            for k, v in opts.items():
                r = r.option(k, v)
            return sorted(r.load().collect(), key=lambda x: x["commit_log_offset"])

        for opts in ({}, {"topic": "orders"}):
            want = rows(tmp_path / "m", **opts)
            assert len(want) == 200
            assert rows(tmp_path / "s", **opts) == want
