"""Spark and Arrow throughput: ``python benches/spark_bench.py [--rows N] [--repeat R]``.

One run measures everything on the same rows (N messages of 100-byte
bodies, 4 queues of one topic, 128 MiB segments), in a warm SparkSession
(``local[2]``), every Spark read into a ``noop`` sink:

- ``read_arrow`` without Spark (all columns, and 4 columns);
- Spark reads: the JVM connector (when its jar is built:
  ``scripts/build-jar.sh``; by its class name) with all columns, 4 columns
  and all columns of a ``store_timestamp`` range of ~1 % of the rows; the
  Python source (``rocketstore_python``) with 4 columns given by
  ``.schema(...)`` (``topic, queue_id, queue_offset, body``), a trivial
  Python data source yielding prebuilt Arrow batches of the same 4 columns
  (the same partitions, with the same rows each, and the same rows per Arrow
  batch: the ceiling of the Python Data Source API), Spark's Parquet reader
  of the same 4 columns; then all columns, and the same 1 % range, against
  Parquet;
- Spark writes from a cached DataFrame: the JVM connector, the Python sink
  and a trivial Python Arrow writer that only consumes the batches (the
  API's ceiling);
- filter pushdown (a table of its own, each query once per round, with a
  warm-up round, and the CommitLog records the engine decoded, summed from
  the ``metricsFile`` lines the partitions append): the 1 % range counted
  through the Python source with ``spark.sql.python.filterPushdown.enabled``
  off and on and through the JVM connector; the ``key`` option on a store of
  ``--key-rows`` messages (each with its own key), answered by the index,
  through both; and Spark's per-query floor beside it: the same one-row
  ``collect()`` of a 1-message store through each connector, of a 1-row
  Parquet file and of ``spark.range(1)`` (``--key-rows 0`` leaves the key and
  the floor out).

Runs are interleaved: each round runs every case once, in the same order,
``--repeat`` rounds after one warm-up round; each figure is the median of
its rounds. Prints the machine's load (``os.getloadavg``) before and after,
the file system of the data, and Markdown tables for ``benches/RESULTS.md``.
Where the JVM connector's read time goes: ``benches/spark_profile.py``.

To add a case: append a :class:`Case` to the list :func:`spark_cases`
returns (or :func:`engine_cases`), and a :class:`Ratio` to :data:`RATIOS` if
it has a target against another case.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from rocketstore import Message, MessageStore, StoreConfig

BODY = b"x" * 100
SEGMENT = 128 << 20
TOPIC = "bench"
#: The 4 columns of the pruned reads.
FOUR = ["topic", "queue_id", "queue_offset", "body"]
FOUR_DDL = "topic string, queue_id int, queue_offset long, body binary"
#: Rows per Arrow batch on both sides (the rocketstore format's default).
BATCH = 65_536
#: The Python source's name (``rocketstore`` is the JVM connector when its jar is built).
PY_FMT = "rocketstore_python"
#: The Python source's filter pushdown (on, but for the pushdown table's "off" row).
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
#: The JVM connector, by its class (measured when its jar is built: scripts/build-jar.sh).
JVM_FMT = "org.rocketstore.spark.RocketStoreProvider"


@dataclass
class Case:
    """One measured thing: ``run()`` does it once and returns its rows
    (``setup()``, if any, runs before each ``run()``, untimed)."""

    key: str
    label: str
    run: Callable[[], int]
    setup: Callable[[], None] | None = None


@dataclass
class Ratio:
    """``num`` / ``den`` (rates), with its target (``None``: reported only)."""

    label: str
    num: str
    den: str
    target: float | None


RATIOS = [
    Ratio("4 columns: rocketstore / trivial Arrow source (API ceiling)", "rs4", "py4", 0.8),
    Ratio("4 columns: rocketstore / Parquet", "rs4", "pq4", None),
    Ratio("4 columns: trivial Arrow source / Parquet", "py4", "pq4", None),
    Ratio("all columns: rocketstore / Parquet", "rs_all", "pq_all", 1.0),
    Ratio("all columns: rocketstore / trivial Arrow source", "rs_all", "py_all", None),
    Ratio("all columns: trivial Arrow source / Parquet", "py_all", "pq_all", None),
    Ratio("4 columns / all columns, rocketstore", "rs4", "rs_all", None),
    Ratio("write: rocketstore / trivial Arrow writer", "w_rs", "w_py", 0.8),
    Ratio("read_arrow, 1 thread: 4 columns / all columns (the engine's pruning)",
          "ra41", "ra_all1", None),
    Ratio("all columns: JVM connector / Parquet", "jvm_all", "pq_all", 1.5),
    Ratio("4 columns: JVM connector / Parquet", "jvm4", "pq4", 1.0),
    Ratio("1 % store_timestamp range, JVM connector: its unfiltered read's time / the range's",
          "jvm_ts", "jvm_all", 5.0),
    Ratio("write: JVM connector / rocketstore (Python sink)", "w_jvm", "w_rs", 2.0),
    Ratio("all columns: JVM connector / rocketstore (Python source)", "jvm_all", "rs_all", None),
    Ratio("4 columns: JVM connector / rocketstore (Python source)", "jvm4", "rs4", None),
    Ratio("1 % store_timestamp range, Python source: its unfiltered read's time / the range's",
          "rs_ts", "rs_all", None),
    Ratio("1 % store_timestamp range: JVM connector / rocketstore (Python source)",
          "jvm_ts", "rs_ts", None),
]


def fill(path: str, rows: int) -> None:
    with MessageStore(StoreConfig(store_path=path, mapped_file_size_commit_log=SEGMENT)) as s:
        chunk = 10_000
        for i in range(0, rows, chunk):
            n = min(chunk, rows - i)
            s.put_messages([Message(TOPIC, BODY, queue_id=(i // chunk) % 4)] * n)


def engine_cases(store: MessageStore) -> list[Case]:
    def scan(columns: list[str] | None = None) -> int:
        return sum(b.num_rows for b in store.read_arrow(threads=2, columns=columns))

    def scan1(columns: list[str] | None = None) -> int:
        return sum(b.num_rows for b in store.read_arrow(threads=1, columns=columns))

    return [
        Case("ra_all", "read_arrow, CommitLog scan, all columns, 2 threads", scan),
        Case("ra4", "read_arrow, CommitLog scan, 4 columns, 2 threads", lambda: scan(FOUR)),
        Case("ra_all1", "read_arrow, CommitLog scan, all columns, 1 thread", scan1),
        Case("ra41", "read_arrow, CommitLog scan, 4 columns, 1 thread", lambda: scan1(FOUR)),
    ]


def write_piece_cases(root: str, rows: int) -> list[Case]:
    """The Spark write's two halves without Spark: what its tasks do (stage
    their rows to Arrow IPC files, here 2 partitions) and what the driver's
    commit does (append the staged files to the store)."""
    import pyarrow as pa

    from rocketstore.spark import _commit, _staging
    from rocketstore.spark._options import WriteOptions

    n = rows
    table = pa.table({
        "topic": pa.array([TOPIC] * n, pa.string()),
        "body": pa.array([BODY] * n, pa.binary()),
        "queue_id": pa.array([i % 4 for i in range(n)], pa.int32()),
    })
    halves = [table.slice(0, n // 2), table.slice(n // 2)]
    out = os.path.join(root, "pieces")
    opts = WriteOptions.parse({"path": out, "mapped_file_size_commit_log": str(SEGMENT)})
    staged: dict[str, Any] = {}

    def stage() -> list[Any]:
        d = _staging.make_job_dir(opts.staging_dir)
        files = [_commit.stage_batches(h.to_batches(BATCH), d, i) for i, h in enumerate(halves)]
        staged.update(dir=d, files=files)
        return files

    def stage_only() -> int:
        stage()
        _staging.remove_dir(opts.staging_dir, staged["dir"])
        return rows

    def fresh_and_staged() -> None:
        shutil.rmtree(out, ignore_errors=True)
        stage()

    def commit() -> int:
        return _commit.append_staged(opts, staged["dir"], staged["files"])

    return [
        Case("w_stage", "write tasks' half alone: stage 2 Arrow IPC files (fsync)", stage_only),
        Case("w_commit", "driver's half alone: append the staged files (put_arrow)", commit,
             setup=fresh_and_staged),
    ]


# -- trivial Python data sources: the API's own ceilings ----------------------------


def _trivial_source() -> type:
    """A source yielding one prebuilt batch over and over: option ``rows``
    lists the rows of each partition, ``batch`` the rows per batch (no
    decoding per row: what the Python Data Source API itself carries). The
    batch holds the 4 columns, made up; with option ``store`` it is instead
    the store's first ``batch`` rows of every column, read once per task."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Part(InputPartition):  # type: ignore[misc]
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class Reader(DataSourceReader):  # type: ignore[misc]
        def __init__(self, rows: list[int], batch: int, store: str | None) -> None:
            self.rows, self.batch, self.store = rows, batch, store

        def partitions(self) -> Sequence[InputPartition]:
            return [Part(n) for n in self.rows]

        def read(self, partition: Any) -> Iterator[Any]:
            import pyarrow as pa

            def made_up(n: int) -> pa.RecordBatch:
                return pa.record_batch([
                    pa.array([TOPIC] * n, pa.string()),
                    pa.array([i % 4 for i in range(n)], pa.int32()),
                    pa.array(range(n), pa.int64()),
                    pa.array([BODY] * n, pa.binary()),
                ], names=FOUR)

            if self.store is None:
                full = made_up(self.batch)
            else:
                with MessageStore(StoreConfig(store_path=self.store), read_only=True) as s:
                    full = s.read_arrow(batch_size=self.batch, threads=1).read_next_batch()
            left = partition.rows
            while left >= self.batch:
                yield full
                left -= self.batch
            if left:
                yield full.slice(0, left)

    class Source(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "trivial_arrow"

        def schema(self) -> str:
            if "store" in self.options:
                from rocketstore.spark._source import SCHEMA_DDL

                return SCHEMA_DDL
            return FOUR_DDL

        def reader(self, schema: Any) -> DataSourceReader:
            rows = [int(x) for x in self.options["rows"].split(",")]
            return Reader(rows, int(self.options["batch"]), self.options.get("store"))

    return Source


def _trivial_writer() -> type:
    """A sink whose tasks consume their Arrow batches and report the rows
    (the API's ceiling for an Arrow writer; the driver only adds them up)."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceWriter,
        WriterCommitMessage,
    )

    class Done(WriterCommitMessage):  # type: ignore[misc]
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class Writer(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            return Done(sum(b.num_rows for b in iterator))

        def commit(self, messages: list[Any]) -> None:
            self.rows = sum(m.rows for m in messages)

    class Sink(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "trivial_arrow_sink"

        def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
            return Writer()

    return Sink


def partition_rows(store_path: str) -> list[int]:
    """The rows of each partition of the ``rocketstore`` read of the whole
    store (the driver's own planning, then each partition counted)."""
    from pyspark.sql.types import StructType

    from rocketstore.spark import RocketStoreDataSource
    from rocketstore.spark._source import SegmentPartition

    ds = RocketStoreDataSource({"path": store_path})
    schema = StructType.fromDDL(FOUR_DDL)
    out = []
    with MessageStore(StoreConfig(store_path=store_path), read_only=True) as s:
        for p in ds.reader(schema).partitions():
            assert isinstance(p, SegmentPartition)
            st = s._arrow_stream(None, None, p.start, p.end, columns=["queue_offset"])
            import pyarrow as pa

            out.append(pa.RecordBatchReader.from_stream(st).read_all().num_rows)
    return out


def jvm_built() -> bool:
    """True when the JVM connector's jar is built (then the session has it)."""
    from rocketstore.spark import jar_path

    try:
        jar_path()
    except FileNotFoundError:
        return False
    return True


def spark_cases(spark: Any, root: str, store_path: str, rows: int) -> list[Case]:
    parquet = os.path.join(root, "parquet")

    def rs(ddl: str | None = None, **opts: str) -> Any:
        r = spark.read.format(PY_FMT).option("path", store_path)
        if ddl is not None:
            r = r.schema(ddl)
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    rs().write.mode("overwrite").parquet(parquet)
    parts = partition_rows(store_path)
    assert sum(parts) == rows, (parts, rows)
    print(f"rocketstore partitions: {len(parts)} ({parts} rows), {BATCH} rows per batch",
          file=sys.stderr)

    def noop(df: Any) -> Callable[[], int]:
        def run() -> int:
            df.write.format("noop").mode("overwrite").save()
            return rows
        return run

    trivial = (spark.read.format("trivial_arrow").option("rows", ",".join(map(str, parts)))
               .option("batch", str(BATCH)).load())
    trivial_all = (spark.read.format("trivial_arrow").option("rows", ",".join(map(str, parts)))
                   .option("batch", str(BATCH)).option("store", store_path).load())
    src = spark.read.parquet(parquet).select("topic", "body", "queue_id").cache()
    assert src.count() == rows
    out = os.path.join(root, "written")

    def write_rs() -> int:
        shutil.rmtree(out, ignore_errors=True)
        (src.write.format(PY_FMT).option("path", out)
         .option("mapped_file_size_commit_log", str(SEGMENT)).mode("append").save())
        return rows

    def write_py() -> int:
        src.write.format("trivial_arrow_sink").mode("append").save()
        return rows

    where, _, _ = ts_range(store_path)
    jvm: list[Case] = []
    if jvm_built():
        def jv(ddl: str | None = None) -> Any:
            r = spark.read.format(JVM_FMT).option("path", store_path)
            if ddl is not None:
                r = r.schema(ddl)
            return r.option("batchSize", str(BATCH)).load()

        def write_jvm() -> int:
            shutil.rmtree(out, ignore_errors=True)
            (src.write.format(JVM_FMT).option("path", out)
             .option("mapped_file_size_commit_log", str(SEGMENT)).mode("append").save())
            return rows

        jvm = [Case("jvm_all", "JVM connector, all columns", noop(jv())),
               Case("jvm4", "JVM connector, 4 columns via .schema", noop(jv(FOUR_DDL))),
               Case("jvm_ts", "JVM connector, all columns, 1 % store_timestamp range "
                    "(rows/s: the store's rows)", noop(jv().where(where))),
               Case("w_jvm", "Spark write, JVM connector (append)", write_jvm)]
    return [
        *jvm,
        Case("rs4", "rocketstore, 4 columns via .schema", noop(rs(FOUR_DDL, batchSize=str(BATCH)))),
        Case("py4", "trivial Python source, prebuilt Arrow, 4 columns", noop(trivial)),
        Case("pq4", "Parquet, 4 columns", noop(spark.read.parquet(parquet).select(*FOUR))),
        Case("rs_all", "rocketstore, all columns", noop(rs(batchSize=str(BATCH)))),
        Case("rs_ts", "rocketstore, all columns, 1 % store_timestamp range, pushdown on "
             "(rows/s: the store's rows)", noop(rs(batchSize=str(BATCH)).where(where))),
        Case("py_all", "trivial Python source, prebuilt Arrow, all columns", noop(trivial_all)),
        Case("pq_all", "Parquet, all columns", noop(spark.read.parquet(parquet))),
        Case("w_rs", "Spark write, rocketstore (append)", write_rs),
        Case("w_py", "Spark write, trivial Python Arrow writer", write_py),
    ]


def interleaved(cases: list[Case], repeat: int) -> dict[str, list[float]]:
    """Seconds of each case per round: one warm-up round (not kept), then
    ``repeat`` rounds, each running every case once."""
    times: dict[str, list[float]] = {c.key: [] for c in cases}
    for r in range(repeat + 1):
        for c in cases:
            if c.setup is not None:
                c.setup()
            t = time.perf_counter()
            c.run()
            if r:
                times[c.key].append(time.perf_counter() - t)
        print(f"round {r}/{repeat} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return times


def file_system(path: str) -> str:
    try:
        return subprocess.run(["df", "-T", path], capture_output=True, text=True,
                              check=True).stdout.splitlines()[-1]
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--key-rows", type=int, default=10_000_000,
                    help="messages of the store the key lookup runs on (0: no key row)")
    ap.add_argument("--cases", default=None,
                    help="comma list of case keys to run, without the pushdown rows "
                    "(default: every case; e.g. rs_all,py_all,pq_all)")
    ap.add_argument("--only-pushdown", action="store_true",
                    help="measure only the filter pushdown rows")
    ap.add_argument("--dir", default=None, help="keep the data here (default: a temp dir "
                    "under $ROCKETSTORE_BENCH_DIR or the system's temp dir, removed afterwards; "
                    "use a real disk, not tmpfs)")
    args = ap.parse_args()
    base = os.environ.get("ROCKETSTORE_BENCH_DIR")
    root = args.dir or tempfile.mkdtemp(prefix="rs-spark-bench-", dir=base)
    store_path = os.path.join(root, "store")
    load_before = os.getloadavg()
    cases: list[Case] = []
    times: dict[str, list[float]] = {}
    pushdown: list[tuple[str, float, int, int, int]] = []
    try:
        t = time.perf_counter()
        fill(store_path, args.rows)
        print(f"filled {args.rows} rows in {time.perf_counter() - t:.1f} s", file=sys.stderr)

        from pyspark.sql import SparkSession

        from rocketstore.spark import configure, register

        builder = configure(SparkSession.builder) if jvm_built() else SparkSession.builder
        spark = (builder.master("local[2]").appName("rocketstore-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC")
                 .config(PUSHDOWN_CONF, "true").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        for ds in (_trivial_source(), _trivial_writer()):
            spark.dataSource.register(ds)
        if not args.only_pushdown:
            with MessageStore(StoreConfig(store_path=store_path), read_only=True) as s:
                cases = (engine_cases(s) + write_piece_cases(root, args.rows)
                         + spark_cases(spark, root, store_path, args.rows))
                if args.cases:
                    keep = args.cases.split(",")
                    cases = [c for c in cases if c.key in keep]
                times = interleaved(cases, args.repeat)
        if not args.cases:
            pushdown = pushdown_rows(spark, store_path, root, args.key_rows, args.repeat)
        spark.stop()
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()

    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: args.rows / s for k, s in med.items()}
    print(f"\ndata on: {file_system(os.path.dirname(root) or '.')}")
    print(f"load average before: {load_before[0]:.1f} / {load_before[1]:.1f} / "
          f"{load_before[2]:.1f}; after: {load_after[0]:.1f} / {load_after[1]:.1f} / "
          f"{load_after[2]:.1f} (1 / 5 / 15 min)")
    print(f"\n| measurement ({args.rows:,} rows of 100-byte bodies; median of "
          f"{args.repeat} interleaved runs) | median s | rows/s | runs (s) |")
    print("|---|---:|---:|---|")
    for c in cases:
        runs = ", ".join(f"{x:.2f}" for x in times[c.key])
        print(f"| {c.label} | {med[c.key]:.3f} | {rate[c.key] / 1e6:.2f} M | {runs} |")
    # Two ratios: of the medians, and the median of each round's ratio (the
    # two cases of a round ran back to back, under about the same load).
    print("\n| ratio | of median rates | median of per-round ratios (each round) | target | |")
    print("|---|---:|---|---|---|")
    for r in RATIOS:
        if r.num not in rate or r.den not in rate:
            continue
        x = rate[r.num] / rate[r.den]
        per = [d / n for n, d in zip(times[r.num], times[r.den], strict=True)]
        paired = statistics.median(per)
        tgt = "" if r.target is None else f"≥ {r.target}x"
        ok = "" if r.target is None else ("met" if min(x, paired) >= r.target else
                                          "not met" if max(x, paired) < r.target else "mixed")
        each = ", ".join(f"{v:.2f}" for v in per)
        print(f"| {r.label} | {x:.2f}x | {paired:.2f}x ({each}) | {tgt} | {ok} |")
    if not pushdown:
        return
    print(f"\n| filter pushdown (median of {args.repeat} runs) | median wall s | rows | "
          "records decoded | of the store |")
    print("|---|---:|---:|---:|---:|")
    for name, secs, rows, decoded, total in pushdown:
        share = f"{100 * decoded / total:.3f} %" if total else "-"
        dec = f"{decoded:,}" if total else "-"
        print(f"| {name} | {secs:.3f} | {rows:,} | {dec} | {share} |")
    walls = {name: secs for name, secs, *_ in pushdown}
    key_jvm = next((n for n in walls if n.startswith(".option") and "JVM" in n), None)
    if key_jvm is not None:
        floor = walls["floor: spark.range(1)"]
        own = walls["floor: 1-message store, JVM connector"]
        print(f"\nkey lookup through the JVM connector: {walls[key_jvm]:.3f} s; Spark's "
              f"per-query floor, spark.range(1).collect(): {floor:.3f} s "
              f"({walls[key_jvm] / floor:.2f}x of it); a 1-message store through the JVM "
              f"connector: {own:.3f} s ({walls[key_jvm] / own:.2f}x of it)")


def fill_keys(path: str, rows: int) -> None:
    """``rows`` messages, each with its own key ``k-<i>``, 4 queues."""
    with MessageStore(StoreConfig(store_path=path, mapped_file_size_commit_log=SEGMENT)) as s:
        chunk = 10_000
        for i in range(0, rows, chunk):
            n = min(chunk, rows - i)
            s.put_messages([Message("bench", BODY, queue_id=(i // chunk) % 4, keys=[f"k-{j}"])
                            for j in range(i, i + n)])


def _decoded(metrics: str) -> int:
    if not os.path.exists(metrics):
        return 0
    with open(metrics) as f:
        return sum(json.loads(line)["decoded"] for line in f)


def ts_range(store_path: str) -> tuple[str, int, int]:
    """A ``store_timestamp`` range of ~1 % of the store's rows, from the
    middle on: (its SQL condition, the rows it covers, the store's rows)
    (messages put together share a millisecond: the range covers whole
    milliseconds)."""
    with MessageStore(StoreConfig(store_path=store_path), read_only=True) as s:
        times = sorted(s.read_arrow(columns=["store_timestamp"]).read_all()
                       .column(0).cast("int64").to_pylist())
    total = len(times)
    lo, hi = times[total // 2], times[total // 2 + total // 100 - 1]
    covered = sum(1 for t in times if lo <= t <= hi)

    def ts(us: int) -> str:
        return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")

    where = f"store_timestamp >= timestamp'{ts(lo)}' AND store_timestamp <= timestamp'{ts(hi)}'"
    return where, covered, total


@dataclass
class Query:
    """One row of the pushdown table: ``run(metrics_file)`` runs the query
    once and returns its rows; ``total``: the records of its store (0: a
    query of no rocketstore store, nothing decoded)."""

    name: str
    run: Callable[[str], int]
    total: int


def pushdown_queries(spark: Any, store_path: str, root: str, key_rows: int) -> list[Query]:
    """The filter pushdown rows, both connectors (the JVM one when its jar
    is built), and Spark's per-query floor beside the key lookup."""
    where, covered, total = ts_range(store_path)
    jvm = jvm_built()
    fmts = [JVM_FMT, PY_FMT] if jvm else [PY_FMT]
    name = {JVM_FMT: "JVM connector", PY_FMT: "Python source"}

    def ranged(fmt: str, on: bool) -> Callable[[str], int]:
        def run(m: str) -> int:
            spark.conf.set(PUSHDOWN_CONF, "true" if on else "false")
            df = (spark.read.format(fmt).option("path", store_path)
                  .option("metricsFile", m).load().where(where))
            got = int(df.count())
            assert got == covered, (fmt, got, covered)
            return got
        return run

    rng = f"store_timestamp range covering {100 * covered / total:.2f} % of {total:,}"
    out = [Query(f"{rng}, Python source, pushdown off", ranged(PY_FMT, False), total),
           Query(f"{rng}, Python source, pushdown on", ranged(PY_FMT, True), total)]
    if jvm:
        out.append(Query(f"{rng}, JVM connector", ranged(JVM_FMT, True), total))
    if not key_rows:
        return out
    kpath = os.path.join(root, "keys")
    t = time.perf_counter()
    fill_keys(kpath, key_rows)
    print(f"filled {key_rows} rows with keys in {time.perf_counter() - t:.1f} s",
          file=sys.stderr)

    k = f"k-{min(123_456, key_rows // 2)}"

    def key(fmt: str) -> Callable[[str], int]:
        def run(m: str) -> int:
            got = (spark.read.format(fmt).option("path", kpath).option("key", k)
                   .option("metricsFile", m).load().collect())
            assert [r["keys"] for r in got] == [[k]], got
            return len(got)
        return run

    out += [Query(f'.option("key", "{k}") on {key_rows:,} messages, {name[f]}', key(f),
                  key_rows) for f in fmts]
    # Spark's per-query floor: one-row queries, collected like the key's.
    one = os.path.join(root, "one")
    fill(one, 1)
    one_pq = os.path.join(root, "one.parquet")
    spark.read.format(PY_FMT).option("path", one).load().write.mode("overwrite").parquet(one_pq)

    def one_row(df: Callable[[], Any]) -> Callable[[str], int]:
        def run(m: str) -> int:
            got = df().collect()
            assert len(got) == 1, got
            return 1
        return run

    def one_store(fmt: str) -> Callable[[], Any]:
        return lambda: spark.read.format(fmt).option("path", one).load()

    out += [Query(f"floor: 1-message store, {name[f]}", one_row(one_store(f)), 0) for f in fmts]
    out += [Query("floor: 1-row Parquet file", one_row(lambda: spark.read.parquet(one_pq)), 0),
            Query("floor: spark.range(1)", one_row(lambda: spark.range(1)), 0)]
    return out


def pushdown_rows(spark: Any, store_path: str, root: str, key_rows: int, repeat: int
                  ) -> list[tuple[str, float, int, int, int]]:
    """Rows of the filter pushdown table: (name, median wall s, rows,
    records decoded, records in the store), each query run once per round,
    one warm-up round, then ``repeat`` rounds."""
    queries = pushdown_queries(spark, store_path, root, key_rows)
    metrics = os.path.join(root, "metrics.jsonl")
    runs: dict[str, list[tuple[float, int, int]]] = {q.name: [] for q in queries}
    for r in range(repeat + 1):
        for q in queries:
            if os.path.exists(metrics):
                os.remove(metrics)
            t = time.perf_counter()
            rows = q.run(metrics)
            wall = time.perf_counter() - t
            if r:
                runs[q.name].append((wall, rows, _decoded(metrics)))
        print(f"pushdown round {r}/{repeat} done, load {os.getloadavg()[0]:.1f}",
              file=sys.stderr)
    spark.conf.set(PUSHDOWN_CONF, "true")
    return [(q.name, statistics.median(x[0] for x in runs[q.name]), runs[q.name][-1][1],
             runs[q.name][-1][2], q.total) for q in queries]


if __name__ == "__main__":
    main()
