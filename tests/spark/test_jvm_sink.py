"""The JVM connector's streaming sink against the Python sink: the same
records and batch tags, a replayed micro-batch appended once whichever
connector's sink wrote it first, a batch cut short completed from where it
stopped, a row breaking a put rule refusing the whole micro-batch with
nothing appended, and the staging a dead driver left reclaimed.

Marked ``spark``; skipped when the connector's jar is not built
(``scripts/build-jar.sh``). In the session (tests/conftest.py)
``rocketstore`` is the JVM connector and ``rocketstore_python`` the Python
sink.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from helpers.arrow_util import GEOMETRY
from helpers.killed_child import killed_at_exit, start_early
from helpers.paths import HELPERS, REPO
from rocketstore import MessageStore, StoreConfig
from rocketstore.spark import _staging

pytestmark = pytest.mark.spark

JVM, PY = "rocketstore", "rocketstore_python"
SINK = "SPARK_SINK_BATCH"
SEGMENT = str(GEOMETRY["mapped_file_size_commit_log"])


@pytest.fixture
def src(tmp_path: Path) -> str:
    """30 messages in two queues."""
    path = str(tmp_path / "src")
    with MessageStore(StoreConfig(store_path=path, **GEOMETRY)) as s:
        for i in range(30):
            s.put("orders", f"m{i}".encode(), queue_id=i % 2, tags=f"t{i % 3}",
                  keys=[f"k{i}"], properties={"n": str(i)})
    return path


def sink(spark: Any, fmt: str, src: str, dst: str, ckpt: Path, *, select: str | None = None,
         per_trigger: int = 10, **opts: str) -> Any:
    """A Trigger.AvailableNow run of the JVM source of ``src`` into the sink
    ``fmt`` at ``dst`` (``select``: "; "-separated column expressions);
    returns the finished query."""
    df = (spark.readStream.format(JVM).option("path", src).option("topic", "orders")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(per_trigger)).load())
    df = df.selectExpr(*(select or "topic; body; queue_id; tags; keys; "
                                   "map('n', properties['n']) AS properties").split("; "))
    w = (df.writeStream.format(fmt).option("path", dst)
         .option("mapped_file_size_commit_log", SEGMENT)
         .option("checkpointLocation", str(ckpt)))
    for k, v in opts.items():
        w = w.option(k, v)
    q = w.trigger(availableNow=True).start()
    q.awaitTermination(120)
    return q


def records(path: str) -> list[dict[str, Any]]:
    """Every message, in CommitLog order, as the write columns."""
    cols = ["topic", "queue_id", "body", "tags", "keys", "properties"]
    with MessageStore(StoreConfig(store_path=path), read_only=True) as s:
        out = s.read_arrow(columns=cols).read_all().to_pylist()
    for r in out:
        r["properties"] = dict(r["properties"] or [])
    return out


def forget_last_commit(ckpt: Path) -> int:
    """What a crash between the sink's append and Spark's record of it
    leaves: the last micro-batch is not recorded as committed, so the next
    run replays it. Returns the number of micro-batches committed before."""
    commits = sorted((ckpt / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    crc = commits[-1].with_name(f".{commits[-1].name}.crc")
    if crc.exists():
        crc.unlink()
    return len(commits)


def test_the_same_batches_give_the_same_records(jvm: Any, src: str, tmp_path: Path) -> None:
    a, b = str(tmp_path / "jvm"), str(tmp_path / "py")
    assert sink(jvm, JVM, src, a, tmp_path / "ca").exception() is None
    assert sink(jvm, PY, src, b, tmp_path / "cb").exception() is None
    got = records(a)
    assert got == records(b) and len(got) == 30
    assert {r["properties"][SINK] for r in got} == {"default:0", "default:1", "default:2"}
    assert sorted(r["body"] for r in got) == sorted(f"m{i}".encode() for i in range(30))
    # Where each sink's last batch began, recorded the same way.
    state = [json.loads((Path(p) / "config" / "sparkSink.json").read_text()) for p in (a, b)]
    assert state[0] == state[1] and state[0]["default"]["batch"] == 2
    assert not os.path.exists(a + ".spark-staging")


def test_a_replayed_batch_is_appended_once_by_either_sink(
        jvm: Any, src: str, tmp_path: Path) -> None:
    dst, ckpt = str(tmp_path / "dst"), tmp_path / "ckpt"
    assert sink(jvm, PY, src, dst, ckpt, sinkName="s").exception() is None
    # The Python sink appended batch 2; the JVM sink replays it; then the
    # other way round.
    for fmt in (JVM, PY, JVM):
        n = forget_last_commit(ckpt)
        assert sink(jvm, fmt, src, dst, ckpt, sinkName="s").exception() is None
        got = records(dst)
        assert sorted(r["body"] for r in got) == sorted(f"m{i}".encode() for i in range(30))
        assert {r["properties"][SINK] for r in got} == {f"s:{i}" for i in range(n)}


def test_a_batch_cut_short_is_completed(jvm: Any, src: str, tmp_path: Path) -> None:
    dst = str(tmp_path / "dst")
    # What a driver killed in the middle of batch 0's append leaves: its
    # first 12 rows (the rows come in offset order: one queue, one task).
    with MessageStore(StoreConfig(store_path=dst, **GEOMETRY)) as s:
        s.put("orders", b"before")
        for i in range(0, 24, 2):
            s.put("orders", f"m{i}".encode(), properties={SINK: "cut:0"})
    q = sink(jvm, JVM, src, dst, tmp_path / "ckpt", select="topic; body", per_trigger=100,
             sinkName="cut")
    assert q.exception() is None
    mine = [r for r in records(dst) if r["properties"].get(SINK) == "cut:0"]
    # queue 0 holds the even messages: the batch is one queue after the other
    want = [f"m{i}".encode() for i in [*range(0, 30, 2), *range(1, 30, 2)]]
    assert sorted(r["body"] for r in mine) == sorted(want)
    assert [r["body"] for r in mine][:12] == want[:12]


KILLED_SINK_TEST = "test_a_commit_killed_mid_append_is_completed_by_the_replay"
KILLED_SINK_SEGMENT = 256 * 1024


@pytest.fixture(scope="module")
def killed_sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """The driver ``KILLED_SINK_TEST`` kills (tests/helpers/spark_sink_child.py),
    booted but not yet streaming: ``(process, folder)``, its SRC, DST and
    checkpoint ``src``, ``dst`` and ``ckpt`` in that folder. Killed at
    teardown if still running."""
    d = tmp_path_factory.mktemp("killed-sink")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"),
                                                        os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, str(HELPERS / "spark_sink_child.py"), str(d / "src"),
            str(d / "dst"), str(d / "ckpt"), str(KILLED_SINK_SEGMENT)]
    with (open(d / "child.err", "wb") as err,
          subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=err, start_new_session=True) as proc,
          killed_at_exit(proc)):
        yield proc, d


@pytest.fixture(scope="module", autouse=True)
def _boot_the_killed_sink_early(request: pytest.FixtureRequest) -> None:
    """Starts ``killed_sink`` with the module's first test when its test is
    selected: its JVM boots while the tests before it run."""
    start_early(request, KILLED_SINK_TEST, "killed_sink")


def test_a_commit_killed_mid_append_is_completed_by_the_replay(
        jvm: Any, killed_sink: tuple[Any, Path]) -> None:
    proc, d = killed_sink
    src, dst, ckpt = str(d / "src"), str(d / "dst"), d / "ckpt"
    want = [(b"r%06d-" % i).ljust(200, b"x") for i in range(60_000)]
    with MessageStore(StoreConfig(store_path=src, mapped_file_size_commit_log=1 << 24)) as s:
        for a in range(0, len(want), 5_000):
            s.put_batch("orders", want[a:a + 5_000])
    segment = KILLED_SINK_SEGMENT
    commitlog = Path(dst) / "commitlog"
    try:
        # The child's session is up; the stream starts now.
        assert proc.stdout.readline() == b"READY\n", (d / "child.err").read_text()
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 120
        # 12 MB of rows over 256 KiB segments: kill once a few have been rolled.
        while not commitlog.is_dir() or len(os.listdir(commitlog)) < 6:
            assert proc.poll() is None, (d / "child.err").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.001)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    stored = [r["body"] for r in records(dst)]
    assert 1 < len(stored) < len(want), "the kill did not land mid-append"
    assert stored == want[:len(stored)]  # a prefix, in order
    assert not (ckpt / "commits" / "0").exists()
    # Spark replays the micro-batch; the sink appends the rest, each row once.
    q = (jvm.readStream.format(JVM).option("path", src).option("startingOffsets", "earliest")
         .load().select("topic", "body").writeStream.format(JVM).option("path", dst)
         .option("mapped_file_size_commit_log", str(segment))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = records(dst)
    assert [r["body"] for r in got] == want
    assert {r["properties"][SINK] for r in got} == {"default:0"}
    # The killed driver's staging was reclaimed, the replay's removed.
    assert not os.path.exists(dst + ".spark-staging")


def test_a_bad_row_refuses_the_micro_batch(jvm: Any, src: str, tmp_path: Path) -> None:
    dst = str(tmp_path / "dst")
    with MessageStore(StoreConfig(store_path=dst, **GEOMETRY)) as s:
        s.put("orders", b"before")
    bad = "IF(body = X'6D3137', 'bad topic!', topic) AS topic"  # the row of m17
    with pytest.raises(Exception, match=r"row \d+ of \d+ \(in partition order\) breaks a put "
                                        r"rule \(MESSAGE_ILLEGAL.*nothing was appended"):
        sink(jvm, JVM, src, dst, tmp_path / "ckpt", select=f"{bad}; body", per_trigger=100)
    assert [r["body"] for r in records(dst)] == [b"before"]
    assert not os.path.exists(dst + ".spark-staging")


def test_staging_a_dead_driver_left_is_reclaimed(jvm: Any, src: str, tmp_path: Path) -> None:
    dst = str(tmp_path / "dst")
    root = Path(dst + ".spark-staging")
    me = _staging.owner_record()
    for name, owner in [
        ("stream-default-7", {**me, "boot": "an earlier boot"}),   # dead: reclaimed
        ("job-0123", {**me, "pid": 1, "start": _staging._proc_start(1)}),  # alive: kept
        (".trash-5", None),                                         # a deletion cut short
        ("job-unowned", None),                                      # unowned, fresh: kept
    ]:
        (root / name).mkdir(parents=True)
        (root / name / "part-00000-x.rows").write_bytes(b"staged")
        if owner is not None:
            (root / name / "owner.json").write_text(json.dumps(owner))
    assert sink(jvm, JVM, src, dst, tmp_path / "ckpt").exception() is None
    assert sorted(os.listdir(root)) == ["job-0123", "job-unowned"]
    assert len(records(dst)) == 30


def test_streaming_write_options_are_checked(jvm: Any, src: str, tmp_path: Path) -> None:
    dst = str(tmp_path / "dst")
    for fmt in (JVM, PY):
        with pytest.raises(Exception, match=r"unknown option for a rocketstore streaming write: "
                                            r"jobTag \(an option of a batch write\)"):
            sink(jvm, fmt, src, dst, tmp_path / f"c-{fmt}", jobTag="j")
        with pytest.raises(Exception, match="needs columns topic and body"):
            sink(jvm, fmt, src, dst, tmp_path / f"c2-{fmt}", select="topic")
    assert not os.path.exists(dst)
