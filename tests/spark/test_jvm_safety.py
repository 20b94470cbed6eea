"""The JVM connector when things go wrong, against the Python source: a
store written by another process while it is read, a CommitLog segment
deleted (as retention deletes it) after planning and under a running task,
damaged files of every kind; the JNI entries given bad input in a JVM of
their own (a native fault there is an exit status, not a lost session); and
native memory freed when a job is cancelled.

Marked ``spark``; skipped when the connector's jar is not built
(``scripts/build-jar.sh``). The session (tests/conftest.py) has the jar on
its class path: ``rocketstore`` is the JVM connector there and
``rocketstore_python`` the Python source.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from helpers.arrow_util import GEOMETRY, fill_rich_store
from helpers.jvm_util import JVM, PY, load, metrics, native, rows, same
from helpers.paths import HELPERS, REPO
from rocketstore import MessageStore, StoreConfig
from rocketstore.spark import jar_path

pytestmark = pytest.mark.spark

OPTS = {k: str(v) for k, v in GEOMETRY.items()}
SEG = GEOMETRY["mapped_file_size_commit_log"]
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


@pytest.fixture(scope="module")
def jvm(jvm: Any) -> Any:
    """The JVM connector's session (tests/spark/conftest.py), with the
    Python source's filter pushdown on."""
    jvm.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    return jvm


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed rich store (several topics, queues and segments)."""
    path = tmp_path_factory.mktemp("safety") / "base"
    fill_rich_store(str(path)).shutdown()
    return path


def copy(src: Path, dst: Path) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def retention(path: str, segment: int = 0) -> None:
    """What retention deletes first: the oldest CommitLog segment."""
    (Path(path) / "commitlog" / f"{segment * SEG:020d}").unlink()


# -- a store being written while it is read ------------------------------------------------


def _check_prefix(got: list[dict[str, Any]], what: str) -> int:
    """The rows of topic ``live`` (live_writer.py) read in one snapshot:
    messages 0 .. n-1, each where the writer put it; returns n."""
    seqs = sorted(int(r["body"]) for r in got)
    assert seqs == list(range(len(seqs))), what
    for r in got:
        seq = int(r["body"])
        assert (r["queue_id"], r["queue_offset"]) == (seq % 3, seq // 3), (what, r)
    by_offset = [int(r["body"]) for r in sorted(got, key=lambda r: r["commit_log_offset"])]
    assert by_offset == seqs, what  # CommitLog order is put order
    return len(seqs)


def _live_reads(spark: Any, fmt: str, path: str, tmp: Path) -> dict[str, int]:
    """Reads of the live store by ``fmt``, each checked against the writer's
    rules; returns what each read saw."""
    cols = ["queue_id", "queue_offset", "body", "commit_log_offset", "tags"]
    seen = {}
    for name, opts, where in [
        ("scan", {}, None),
        ("topic", {"topic": "live", "maxRecordsPerPartition": 40}, None),
        ("offsets", {}, "queue_offset >= 10 AND queue_offset < 40"),
        ("tags", {"topic": "live"}, "tags = 't1'"),
        ("key", {"key": "k150"}, None),
    ]:
        m = tmp / f"live-{fmt}-{name}.jsonl"
        m.unlink(missing_ok=True)
        df = load(spark, fmt, path, metricsFile=m, **OPTS, **opts)
        if where:
            df = df.where(where)
        got = df.select(*cols).toArrow().to_pylist()
        what = f"{fmt} {name}"
        assert metrics(m)["damaged"] == metrics(m)["lost"] == 0, what
        if name == "offsets":
            # Planned when at least 200 messages were there: exactly these.
            assert sorted((r["queue_id"], r["queue_offset"]) for r in got) == [
                (q, o) for q in range(3) for o in range(10, 40)], what
        elif name == "tags":
            odd = sorted(int(r["body"]) for r in got)
            assert odd == list(range(1, 2 * len(odd), 2)), what
        elif name == "key":
            assert [int(r["body"]) for r in got] == [150], what
        else:
            seen[name] = _check_prefix(got, what)
    return seen


def test_a_store_written_while_it_is_read(jvm: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "live")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "python"), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(HELPERS / "live_writer.py"), path],
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "READY"
        seen = {fmt: _live_reads(jvm, fmt, path, tmp_path) for fmt in (JVM, PY)}
        Path(path + ".stop").touch()
        done = child.stdout.readline().split()
        assert done[0] == "DONE", done
        n = int(done[1])
        # The reads ran while the writer put: each saw a part of the messages.
        assert all(0 < v < n for s in seen.values() for v in s.values()), (seen, n)
        # With the writer idle (the store still open), both read the same.
        got = same(jvm, path, tmp_path, select="queue_id,queue_offset,body,commit_log_offset",
                   **OPTS)
        assert _check_prefix(got, "after") == n
        same(jvm, path, tmp_path, where="queue_offset >= 100", topic="live", **OPTS)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


# -- a segment deleted by retention --------------------------------------------------------


def _planned(spark: Any, fmt: str, path: str, m: Path, where: str | None,
             **opts: Any) -> Any:
    """The read's RDD, planned (its partitions fixed) and not yet run."""
    df = load(spark, fmt, path, metricsFile=m, **OPTS, **opts)
    if where:
        df = df.where(where)
    rdd = df.select("queue_offset")._jdf.queryExecution().executedPlan().execute()
    rdd.partitions()
    return rdd


@pytest.mark.parametrize("opts,where", [
    ({"topic": "orders"}, None),
    ({"topic": "orders,events", "maxRecordsPerPartition": 9}, None),
    ({}, None),
    ({"maxBytesPerPartition": 5000}, "queue_offset >= 3"),
], ids=["queues", "small-partitions", "scan", "pushdown"])
def test_a_segment_deleted_after_planning(jvm: Any, base: Path, tmp_path: Path,
                                          opts: dict[str, Any], where: str | None) -> None:
    full = {}
    got = {}
    for fmt in (JVM, PY):
        path = copy(base, tmp_path / fmt)
        df = load(jvm, fmt, path, **OPTS, **opts)
        full[fmt] = rows(df.where(where) if where else df)
        m = tmp_path / f"{fmt}.jsonl"
        rdd = _planned(jvm, fmt, path, m, where, **opts)
        retention(path)
        got[fmt] = (rdd.count(), metrics(m))
    assert full[JVM] == full[PY]
    survivors = [r for r in full[JVM] if r["commit_log_offset"] >= SEG]
    assert 0 < len(survivors) < len(full[JVM])
    assert got[JVM] == got[PY], got
    count, m = got[JVM]
    assert count == m["rows"] == len(survivors)
    assert m["damaged"] == 0
    if "topic" in opts:
        # Queue reads count what retention took; CommitLog scans start at
        # the CommitLog's new first offset.
        assert m["lost"] == len(full[JVM]) - len(survivors)


def _read_native(spark: Any, path: str, after_first: Callable[[], None]) -> tuple[int, int, int]:
    """Queue orders/1 read through the JNI entries, 4 rows a batch,
    ``after_first`` run after the first batch: (rows, damaged, lost)."""
    n = native(spark)
    gw = spark.sparkContext._gateway
    topics = gw.new_array(gw.jvm.java.lang.String, 1)
    topics[0] = "orders"
    ids = gw.new_array(gw.jvm.int, 1)
    ids[0] = 1
    bounds = gw.new_array(gw.jvm.long, 2)
    bounds[0], bounds[1] = 0, I64_MAX
    s = n.open(path, None, None)
    try:
        r = n.openReader(s, topics, ids, bounds, None, None, 0, I64_MIN, I64_MAX, None, 4,
                         None, None)
        total = 0
        try:
            while (d := n.nextBatch(r)) is not None:
                n.close(d[0])
                if total == 0:
                    after_first()
                total += d[1]
            st = list(n.readStats(r))
        finally:
            n.close(r)
    finally:
        n.close(s)
    return total, st[3], st[4]


def _read_python(path: str, after_first: Callable[[], None]) -> tuple[int, int, int]:
    """The same read through the Python source's engine call."""
    import pyarrow as pa

    store = MessageStore(StoreConfig(store_path=path, **GEOMETRY), read_only=True).start()
    try:
        s = store._arrow_stream("orders", 1, 0, I64_MAX, 4)
        total = 0
        for b in pa.RecordBatchReader.from_stream(s):
            if total == 0:
                after_first()
            total += b.num_rows
        return total, s.skipped_corrupt, s.lost
    finally:
        store.shutdown()


def test_a_segment_deleted_under_a_running_reader(jvm: Any, base: Path, tmp_path: Path) -> None:
    a, b = copy(base, tmp_path / "a"), copy(base, tmp_path / "b")
    before = native(jvm).openHandles()

    def gone(path: str) -> Callable[[], None]:
        def f() -> None:
            for seg in (0, 1):
                retention(path, seg)
            for q in (Path(path) / "consumequeue" / "orders").iterdir():
                (q / f"{0:020d}").unlink()
        return f

    with MessageStore(StoreConfig(store_path=str(base), **GEOMETRY), read_only=True) as s:
        want = s.get_max_offset_in_queue("orders", 1)
    got = _read_native(jvm, a, gone(a))
    assert got == _read_python(b, gone(b))
    # The open reader keeps its files mapped: every row is read.
    assert got == (want, 0, 0)
    assert not (Path(a) / "commitlog" / f"{0:020d}").exists()
    assert native(jvm).openHandles() == before


#: A column that sleeps 20 ms per row in the task's thread (Spark's
#: ``java_method``): a read stays open long enough to act under it.
SLOW = "java_method('java.lang.Thread', 'sleep', cast(20 as bigint)) AS slow"


def _in_thread(f: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Runs the Spark action ``f`` in a thread; its result or error lands in the list."""
    from pyspark import InheritableThread

    out: list[Any] = []

    def run() -> None:
        try:
            out.append(f())
        except Exception as e:
            out.append(e)

    t = InheritableThread(target=run)
    t.start()
    return t, out


def _wait(cond: Callable[[], bool], t: threading.Thread, what: str) -> None:
    deadline = time.monotonic() + 120
    while not cond():
        assert time.monotonic() < deadline and t.is_alive(), what
        time.sleep(0.01)


def test_a_segment_deleted_under_a_running_task(jvm: Any, base: Path, tmp_path: Path) -> None:
    """One task reads the partitions one after the other (``coalesce(1)``),
    slowly; once the first partition is read, retention deletes the first
    two segments: the partitions opened later lose their rows there, which
    the retention count reports, on both connectors."""
    for fmt in (JVM, PY):
        path = copy(base, tmp_path / fmt)
        full = rows(load(jvm, fmt, path, topic="orders", **OPTS))
        m = tmp_path / f"{fmt}.jsonl"
        df = load(jvm, fmt, path, metricsFile=m, topic="orders", maxRecordsPerPartition=10,
                  **OPTS).coalesce(1).selectExpr("queue_id", "queue_offset",
                                                 "commit_log_offset", SLOW)
        t, out = _in_thread(lambda df=df: df.toArrow().to_pylist())
        _wait(lambda m=m: m.exists() and m.read_text().count("\n") >= 1, t, fmt)
        for seg in (0, 1):
            retention(path, seg)
        t.join(300)
        got = out[0]
        assert isinstance(got, list), got
        counts = metrics(m)
        keys = {(r["queue_id"], r["queue_offset"]) for r in got}
        assert keys <= {(r["queue_id"], r["queue_offset"]) for r in full}, fmt
        # Every row missing is one the deleted segments held, counted as lost.
        missing = [r for r in full if (r["queue_id"], r["queue_offset"]) not in keys]
        assert missing and all(r["commit_log_offset"] < 2 * SEG for r in missing), fmt
        assert counts["lost"] == len(missing) and counts["damaged"] == 0, (fmt, counts)
        assert counts["rows"] == len(got), fmt


# -- damaged files -------------------------------------------------------------------------


def _flip(f: Path, at: int, n: int = 1, value: int | None = None) -> None:
    data = bytearray(f.read_bytes())
    for i in range(at, at + n):
        data[i] = value if value is not None else data[i] ^ 0x5A
    f.write_bytes(bytes(data))


def _cut(f: Path, size: int) -> None:
    with open(f, "r+b") as fh:
        fh.truncate(size)


def _cq(path: Path, topic: str, q: int) -> Path:
    return path / "consumequeue" / topic / str(q) / f"{0:020d}"


def _cl(path: Path, seg: int) -> Path:
    return path / "commitlog" / f"{seg * SEG:020d}"


#: How each store is damaged (after it was closed).
DAMAGE: dict[str, Callable[[Path], None]] = {
    # A record's total size in the middle of segment 1: the rest of the
    # segment cannot be delimited.
    "record-size-flipped": lambda p: _flip(_cl(p, 1), 4000, 2),
    # A record's magic code.
    "record-magic-flipped": lambda p: _flip(_cl(p, 1), 4004 + 0, 4),
    "commitlog-zeroed": lambda p: _flip(_cl(p, 1), 3000, 3000, 0),
    "commitlog-bytes-random": lambda p: _flip(_cl(p, 0), 500, 4000),
    "newest-commitlog-cut": lambda p: _cut(sorted((p / "commitlog").iterdir())[-1], 5000),
    "middle-commitlog-cut": lambda p: _cut(_cl(p, 1), 7000),
    "middle-commitlog-empty": lambda p: _cut(_cl(p, 1), 0),
    "middle-commitlog-deleted": lambda p: _cl(p, 1).unlink(),
    "queue-unit-flipped": lambda p: _flip(_cq(p, "orders", 1), 20 * 5 + 2, 3),
    "queue-size-flipped": lambda p: _flip(_cq(p, "orders", 2), 20 * 3 + 8, 4, 0xFF),
    "queue-file-cut": lambda p: _cut(_cq(p, "orders", 1), 20 * 7 + 9),
    "queue-file-zeroed": lambda p: _flip(_cq(p, "orders", 3), 0, 200, 0),
    "index-damaged": lambda p: [_flip(f, 40, 400) for f in (p / "index").iterdir()],
    "checkpoint-garbage": lambda p: _flip(p / "checkpoint", 0, 24),
    "checkpoint-missing": lambda p: (p / "checkpoint").unlink(),
}


def _outcome(spark: Any, fmt: str, path: str, tmp: Path, **opts: Any
             ) -> tuple[str, Any, dict[str, int]]:
    """A read's rows and counts, or the store's error it failed with."""
    m = tmp / f"d-{fmt}-{abs(hash(str(opts)))}.jsonl"
    m.unlink(missing_ok=True)
    try:
        got = rows(load(spark, fmt, path, metricsFile=m, **OPTS, **opts))
    except Exception as e:
        # The engine's message, as the Java StoreException or the Python
        # error carries it.
        found = re.findall(r"(?:StoreException|Error): (.*)", str(e))
        assert found, str(e)
        return "error", found[0], {}
    c = metrics(m)
    return "rows", got, {"damaged": c["damaged"], "lost": c["lost"]}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_files(jvm: Any, base: Path, tmp_path: Path, kind: str) -> None:
    path = tmp_path / kind
    shutil.copytree(base, path)
    DAMAGE[kind](path)
    reads: list[dict[str, Any]] = [{}, {"topic": "orders,events", "maxRecordsPerPartition": 25}]
    if kind == "index-damaged":
        reads.append({"key": "k5,k77"})
    before = native(jvm).openHandles()
    for opts in reads:
        a = _outcome(jvm, JVM, str(path), tmp_path, **opts)
        b = _outcome(jvm, PY, str(path), tmp_path, **opts)
        assert a == b, (kind, opts)
    assert native(jvm).openHandles() == before


def test_store_fields_out_of_range_are_refused_as_store_config_refuses_them(
        jvm: Any, base: Path) -> None:
    # A store whose queues have one (short) file each takes any queue file
    # size it is opened with: the range is what refuses it.
    for field, value, why in [
        ("mapped_file_size_consume_queue", str(I64_MAX), "must be in [1, 2147483647]"),
        ("mapped_file_size_consume_queue", "2147483647", "rounds up to 2147483660"),
        ("max_index_num", "0", "must be in [1, 2147483647]"),
        ("mapped_file_size_commit_log", "98", "must be in [99, 2147483647]"),
    ]:
        for fmt in (JVM, PY):
            with pytest.raises(Exception, match=re.escape(f"{field}={value}: {why}")):
                load(jvm, fmt, str(base), **{**OPTS, field: value}).collect()


# -- the JNI guards ------------------------------------------------------------------------


def test_jni_guards_in_a_jvm_of_their_own(jvm: Any, base: Path, tmp_path: Path) -> None:
    """Every JNI entry given bad input (tests/helpers/JniGuardProbe.java
    lists the cases) raises a Java exception, never crashes the JVM, and the
    JVM's JNI checks (``-Xcheck:jni``) find no misuse."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.skip("no JDK on PATH")
    jar = str(jar_path())
    classes = tmp_path / "classes"
    subprocess.run([javac, "-Xlint:all", "-Werror", "-d", str(classes), "-cp", jar,
                    str(HELPERS / "JniGuardProbe.java")], check=True, timeout=300)
    plain = tmp_path / "plain"
    plain.write_text("not a store")
    store = copy(base, tmp_path / "store")
    r = subprocess.run(
        [java, "-Xcheck:jni", f"-XX:ErrorFile={tmp_path}/hs_err_%p.log",
         f"-Djava.io.tmpdir={tmp_path}", "-cp", f"{classes}{os.pathsep}{jar}", "JniGuardProbe",
         store, str(tmp_path / "fresh"), str(plain)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "RUST_BACKTRACE": "0"})
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert "FAIL" not in r.stdout and r.stdout.count("\nok ") > 400, out[-5000:]
    assert "WARNING in native method" not in out and "FATAL ERROR" not in out, out[-5000:]
    assert not list(tmp_path.glob("hs_err_*"))


# -- native memory -------------------------------------------------------------------------


def test_native_memory_is_freed_when_a_job_is_cancelled(jvm: Any, base: Path) -> None:
    n = native(jvm)
    sc = jvm.sparkContext
    before = n.openHandles()

    def run() -> Any:
        sc.setJobGroup("rocketstore-cancel", "a read cancelled", interruptOnCancel=True)
        return load(jvm, JVM, str(base), batchSize=5, **OPTS).selectExpr(
            "queue_offset", SLOW).collect()

    t, out = _in_thread(run)
    # The tasks are reading: their stores, readers and batches are open.
    _wait(lambda: n.openHandles() > before, t, "no read started")
    sc.cancelJobGroup("rocketstore-cancel")
    t.join(120)
    assert not t.is_alive()
    assert out and "cancel" in str(out[0]).lower(), out
    deadline = time.monotonic() + 30
    while n.openHandles() != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert n.openHandles() == before
    assert jvm.range(3).count() == 3
