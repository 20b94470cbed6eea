"""The JVM connector's writer takes the Python sink's flush and replication
settings (rust/jni/src/fields.rs, writer.rs): under ``SYNC_FLUSH`` each
append returns with its rows on disk; on a ``SYNC_MASTER`` a write returns
once its slave holds every row, and without a slave it fails "stored, not
yet replicated" and a rerun appends nothing twice; a ``SLAVE`` takes no
rows. A value the engine does not know is refused by name.

Marked ``spark``; skipped when the connector's jar is not built
(``scripts/build-jar.sh``). ``rocketstore`` is the JVM connector in the
session.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from helpers.ha_util import SEGMENT, SHORT, slave_config
from rocketstore import MessageStore, StoreConfig

pytestmark = pytest.mark.spark

JVM = "rocketstore"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _str(v: bytes | None) -> bytes:
    return struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v


def _rows(n: int) -> bytes:
    """``n`` rows of topic ``orders`` in the connector's row encoding
    (rust/jni/src/write.rs): topic, body, queue id, tags, keys, properties."""
    out = b""
    for i in range(n):
        out += (_str(b"orders") + _str(b"body-%d" % i) + b"\x01" + struct.pack(">i", i % 2)
                + _str(None) + struct.pack(">i", -1) + struct.pack(">i", -1))
    return out


def _strings(gw: Any, items: list[str]) -> Any:
    a = gw.new_array(gw.jvm.java.lang.String, len(items))
    for i, s in enumerate(items):
        a[i] = s
    return a


def _bodies(path: Path) -> list[bytes]:
    with MessageStore(StoreConfig(store_path=str(path)), read_only=True) as s:
        t = s.read_arrow(topic="orders", columns=["body"]).read_all()
    return sorted(t.column("body").to_pylist())


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_under_sync_flush_each_append_returns_with_its_rows_on_disk(
        jvm: Any, tmp_path: Path, flush: str) -> None:
    gw = jvm.sparkContext._gateway
    n = jvm._jvm.org.rocketstore.spark.NativeLib
    # The periodic flush would not come for a minute: only the group
    # commit of SYNC_FLUSH puts the rows on disk before the append returns.
    fields = {"flush_disk_type": flush, "flush_interval_commit_log": "60000",
              "flush_commit_log_thorough_interval": "60000",
              "flush_commit_log_least_pages": "1000",
              "mapped_file_size_commit_log": str(SEGMENT)}
    w = n.openWriter(str(tmp_path / "s"), _strings(gw, list(fields)),
                     _strings(gw, list(fields.values())))
    try:
        r = n.appendRows(w, _rows(40), 0, None, False)
        assert (r[0], r[1]) == ("40", "-1")
        assert list(n.finishAppend(w)) == ["-1", "0", ""]
        low, end, *_, flushed = n.commitLog(w)
        assert end > low
        if flush == "SYNC_FLUSH":
            assert flushed == end
        else:
            assert flushed < end
    finally:
        n.close(w)
    assert len(_bodies(tmp_path / "s")) == 40


def _save(df: Any, path: Path, **opts: str) -> None:
    w = df.write.format(JVM).option("path", str(path))
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()


def test_a_spark_write_takes_the_flush_settings_and_refuses_bad_ones(
        jvm: Any, tmp_path: Path) -> None:
    df = jvm.createDataFrame([("orders", b"s%d" % i) for i in range(60)],
                             "topic string, body binary").repartition(2)
    _save(df, tmp_path / "s", flush_disk_type="SYNC_FLUSH", sync_flush_timeout="3000",
          mapped_file_size_commit_log=str(SEGMENT))
    assert _bodies(tmp_path / "s") == sorted(b"s%d" % i for i in range(60))
    with pytest.raises(Exception, match=r"flush_disk_type=\"SOMETIMES\": must be one of "
                                        r"ASYNC_FLUSH, SYNC_FLUSH"):
        _save(df, tmp_path / "s", flush_disk_type="SOMETIMES")
    with pytest.raises(Exception, match=r"unknown option.*file_reserved_hours"):
        _save(df, tmp_path / "s", file_reserved_hours="3")
    # A read takes a writer's settings and leaves them (as the Python source).
    r = jvm.read.format(JVM).option("path", str(tmp_path / "s")) \
        .option("flush_disk_type", "SYNC_FLUSH").load()
    assert r.count() == 60


def test_a_slave_takes_no_rows(jvm: Any, tmp_path: Path) -> None:
    df = jvm.createDataFrame([("orders", b"x")], "topic string, body binary")
    with pytest.raises(Exception, match=r"0 of 1 rows appended; row 0 was refused "
                                        r"\(SERVICE_NOT_AVAILABLE: this store is a SLAVE"):
        _save(df, tmp_path / "s", broker_role="SLAVE")


def _master(port: int) -> dict[str, str]:
    return {"broker_role": "SYNC_MASTER", "ha_listen_port": str(port),
            "ha_new_slave_from_first_file": "true",
            "mapped_file_size_commit_log": str(SEGMENT),
            **{k: str(v) for k, v in SHORT.items()}}


def test_a_write_to_a_sync_master_returns_once_the_slave_holds_it(
        jvm: Any, tmp_path: Path) -> None:
    port = _free_port()
    m = tmp_path / "m"
    df = jvm.createDataFrame([("orders", b"w%d" % i) for i in range(300)],
                             "topic string, body binary").repartition(2)
    with pytest.raises(Exception, match=r"all 300 rows appended; rows 0 on are stored, not yet "
                                        r"replicated.*SLAVE_NOT_AVAILABLE"):
        _save(df, m, jobTag="nightly", **_master(port))
    assert len(_bodies(m)) == 300
    with pytest.raises(Exception, match="stored, not yet replicated"):
        _save(df, m, jobTag="nightly", **_master(port))  # still no slave: nothing appended
    assert len(_bodies(m)) == 300
    with MessageStore(slave_config(tmp_path / "s", port)) as s:
        _save(df, m, jobTag="nightly", **_master(port))  # the slave holds it all now
        with MessageStore(StoreConfig(store_path=str(m)), read_only=True) as ro:
            end = ro.max_phy_offset
        assert s.max_phy_offset == end
    assert _bodies(m) == sorted(b"w%d" % i for i in range(300))
    assert '"done":true' in (m / "config" / "sparkJobs.json").read_text().replace(" ", "")
    # A second job, the slave connected from the start.
    with MessageStore(slave_config(tmp_path / "s", port)) as s:
        df2 = jvm.createDataFrame([("orders", b"x%d" % i) for i in range(100)],
                                  "topic string, body binary")
        _save(df2, m, **_master(port))
        with MessageStore(StoreConfig(store_path=str(m)), read_only=True) as ro:
            end = ro.max_phy_offset
        assert s.max_phy_offset == end
    assert len(_bodies(m)) == 400


def _stream(spark: Any, src: Path, dst: Path, ckpt: Path, **opts: str) -> None:
    """A Trigger.AvailableNow run of a stream of ``src`` into the JVM sink
    at ``dst`` with the write options ``opts``."""
    df = (spark.readStream.format(JVM).option("path", str(src)).option("topic", "orders")
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load()
          .select("topic", "body"))
    w = df.writeStream.format(JVM).option("path", str(dst)) \
        .option("checkpointLocation", str(ckpt))
    for k, v in opts.items():
        w = w.option(k, v)
    w.trigger(availableNow=True).start().awaitTermination(120)


def test_the_streaming_sink_confirms_its_rows_as_the_batch_write_does(
        jvm: Any, tmp_path: Path) -> None:
    src, m, ckpt = tmp_path / "src", tmp_path / "m", tmp_path / "ckpt"
    with MessageStore(StoreConfig(store_path=str(src))) as s:
        for i in range(100):
            s.put("orders", b"e%d" % i)
    port = _free_port()
    with pytest.raises(Exception, match=r"rows 0 on are stored, not yet replicated.*"
                                        r"SLAVE_NOT_AVAILABLE"):
        _stream(jvm, src, m, ckpt, **_master(port))
    assert len(_bodies(m)) == 40  # the first micro-batch, stored
    # The replay with a slave: nothing appended twice, then the rest.
    with MessageStore(slave_config(tmp_path / "s", port)) as s:
        _stream(jvm, src, m, ckpt, **_master(port))
        with MessageStore(StoreConfig(store_path=str(m)), read_only=True) as ro:
            end = ro.max_phy_offset
        assert s.max_phy_offset == end
    assert _bodies(m) == sorted(b"e%d" % i for i in range(100))
