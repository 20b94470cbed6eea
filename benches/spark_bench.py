"""Spark and Arrow throughput: ``python benches/spark_bench.py [--rows N]``.

Measures, in one run and on the same rows (N messages of 100-byte bodies,
4 queues of one topic):

1. ``read_arrow`` without Spark (CommitLog scan and queue reads), rows/s,
   bodies included;
2. Spark batch read with a ``noop`` sink: the ``rocketstore`` format (by
   CommitLog segment, and by queue) against Spark reading the same rows from
   Parquet;
3. Spark write (``rocketstore`` format, append) from a cached DataFrame;
4. filter pushdown: a ``store_timestamp`` range covering ~1 % of the store
   with ``spark.sql.python.filterPushdown.enabled`` off and on (wall time,
   medians of interleaved runs, and the CommitLog records the engine decoded,
   summed from the ``metricsFile`` lines the partitions append), and the
   ``key`` option on a store of ``--key-rows`` messages (each with its own
   key) answered by the index (``--key-rows 0`` leaves it out).

Each figure is the best of ``--repeat`` warm runs (the first query of a
session pays for JIT and worker start-up and is not counted). Prints a
Markdown table for ``benches/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from rocketstore import Message, MessageStore, StoreConfig

BODY = b"x" * 100
SEGMENT = 128 << 20


def fill(path: str, rows: int) -> None:
    with MessageStore(StoreConfig(store_path=path, mapped_file_size_commit_log=SEGMENT)) as s:
        chunk = 10_000
        for i in range(0, rows, chunk):
            n = min(chunk, rows - i)
            s.put_messages([Message("bench", BODY, queue_id=(i // chunk) % 4)] * n)


def best(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    out = []
    n = 0
    for _ in range(repeat):
        t = time.perf_counter()
        n = fn()
        out.append(time.perf_counter() - t)
    return min(out), n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--key-rows", type=int, default=10_000_000,
                    help="messages of the store the key lookup runs on (0: no key row)")
    ap.add_argument("--dir", default=None, help="keep the data here (default: a temp dir "
                    "under $ROCKETSTORE_BENCH_DIR or /dev/shm, removed afterwards)")
    args = ap.parse_args()
    base = os.environ.get("ROCKETSTORE_BENCH_DIR") or (
        "/dev/shm" if os.path.isdir("/dev/shm") else None)
    root = args.dir or tempfile.mkdtemp(prefix="rs-spark-bench-", dir=base)
    store_path = os.path.join(root, "store")
    results: list[tuple[str, float, int]] = []
    try:
        t = time.perf_counter()
        fill(store_path, args.rows)
        print(f"filled {args.rows} rows in {time.perf_counter() - t:.1f} s", file=sys.stderr)

        with MessageStore(StoreConfig(store_path=store_path), read_only=True) as s:
            def scan(threads: int | None = None) -> int:
                return sum(b.num_rows for b in s.read_arrow(threads=threads))

            def queues() -> int:
                return sum(b.num_rows for b in s.read_arrow("bench"))

            scan()
            results.append(("read_arrow, CommitLog scan, 2 threads (no Spark)",
                            *best(scan, args.repeat)))
            results.append(("read_arrow, CommitLog scan, 1 thread (no Spark)",
                            *best(lambda: scan(1), args.repeat)))
            results.append(("read_arrow, 4 queues, 2 threads (no Spark)",
                            *best(queues, args.repeat)))
            # CPU time, which the machine's load does not inflate much:
            # rows per CPU-second of one decode thread.
            cpu = []
            for _ in range(args.repeat):
                c = time.process_time()
                scan(1)
                cpu.append(time.process_time() - c)
            results.append(("read_arrow, 1 thread: rows per CPU-second (not wall)",
                            min(cpu), args.rows))

        from pyspark.sql import SparkSession

        from rocketstore.spark import RocketStoreDataSource

        spark = (SparkSession.builder.master("local[2]").appName("rocketstore-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(RocketStoreDataSource)
        parquet = os.path.join(root, "parquet")

        def rs_df(**opts: str):  # type: ignore[no-untyped-def]
            r = spark.read.format("rocketstore").option("path", store_path)
            for k, v in opts.items():
                r = r.option(k, v)
            return r.load()

        rs_df().write.mode("overwrite").parquet(parquet)

        def noop(df) -> int:  # type: ignore[no-untyped-def]
            df.write.format("noop").mode("overwrite").save()
            return args.rows

        noop(rs_df())
        noop(spark.read.parquet(parquet))
        results.append(("Spark read, rocketstore by segment, noop sink",
                        *best(lambda: noop(rs_df()), args.repeat)))
        results.append(("Spark read, rocketstore by queue, noop sink",
                        *best(lambda: noop(rs_df(topic="bench")), args.repeat)))
        results.append(("Spark read, Parquet (same rows), noop sink",
                        *best(lambda: noop(spark.read.parquet(parquet)), args.repeat)))

        src = spark.read.parquet(parquet).select("topic", "body", "queue_id").cache()
        src.count()
        out = os.path.join(root, "written")

        def write() -> int:
            shutil.rmtree(out, ignore_errors=True)
            (src.write.format("rocketstore").option("path", out)
             .option("mapped_file_size_commit_log", str(SEGMENT)).mode("append").save())
            return args.rows

        results.append(("Spark write, rocketstore (append)", *best(write, args.repeat)))
        pushdown = pushdown_rows(spark, store_path, root, args.key_rows, max(args.repeat, 5))
        spark.stop()
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)

    print(f"\n| measurement ({args.rows:,} rows of 100-byte bodies) | best s | rows/s |")
    print("|---|---:|---:|")
    for name, secs, n in results:
        print(f"| {name} | {secs:.3f} | {n / secs / 1e6:.2f} M |")
    print("\n| filter pushdown | median wall s | rows | records decoded | of the store |")
    print("|---|---:|---:|---:|---:|")
    for name, secs, rows, decoded, total in pushdown:
        print(f"| {name} | {secs:.3f} | {rows:,} | {decoded:,} | "
              f"{100 * decoded / total:.3f} % |")
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs)")


def fill_keys(path: str, rows: int) -> None:
    """``rows`` messages, each with its own key ``k-<i>``, 4 queues."""
    with MessageStore(StoreConfig(store_path=path, mapped_file_size_commit_log=SEGMENT)) as s:
        chunk = 10_000
        for i in range(0, rows, chunk):
            n = min(chunk, rows - i)
            s.put_messages([Message("bench", BODY, queue_id=(i // chunk) % 4, keys=[f"k-{j}"])
                            for j in range(i, i + n)])


def _decoded(metrics: str) -> int:
    with open(metrics) as f:
        return sum(json.loads(line)["decoded"] for line in f)


def _median_run(fn: Callable[[str], int], metrics: str) -> tuple[float, int, int]:
    """One run of ``fn`` (given a fresh metrics file): wall s, rows, decoded."""
    if os.path.exists(metrics):
        os.remove(metrics)
    t = time.perf_counter()
    rows = fn(metrics)
    return time.perf_counter() - t, rows, _decoded(metrics)


def pushdown_rows(spark: Any, store_path: str, root: str, key_rows: int, repeat: int
                  ) -> list[tuple[str, float, int, int, int]]:
    """Rows of the filter pushdown table: (name, median wall s, rows,
    records decoded, records in the store)."""
    conf = "spark.sql.python.filterPushdown.enabled"
    with MessageStore(StoreConfig(store_path=store_path), read_only=True) as s:
        times = sorted(s.read_arrow(columns=["store_timestamp"]).read_all()
                       .column(0).cast("int64").to_pylist())
    total = len(times)
    lo, hi = times[int(total * 0.495)], times[int(total * 0.505)]
    covered = sum(1 for t in times if lo <= t <= hi)

    def ts(us: int) -> str:
        return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")

    where = f"store_timestamp >= timestamp'{ts(lo)}' AND store_timestamp <= timestamp'{ts(hi)}'"
    metrics = os.path.join(root, "metrics.jsonl")

    def time_range(on: bool) -> Callable[[str], int]:
        def run(m: str) -> int:
            spark.conf.set(conf, "true" if on else "false")
            df = (spark.read.format("rocketstore").option("path", store_path)
                  .option("metricsFile", m).load().where(where))
            return int(df.count())
        return run

    runs: dict[bool, list[tuple[float, int, int]]] = {True: [], False: []}
    for _ in range(repeat):  # interleaved
        for on in (False, True):
            runs[on].append(_median_run(time_range(on), metrics))
    out = []
    for on in (False, True):
        wall = statistics.median(r[0] for r in runs[on])
        rows, decoded = runs[on][-1][1], runs[on][-1][2]
        assert rows == covered, (rows, covered)
        out.append((f"store_timestamp range covering {100 * covered / total:.2f} % of "
                    f"{total:,}, pushdown {'on' if on else 'off'}", wall, rows, decoded, total))
    if key_rows:
        kpath = os.path.join(root, "keys")
        t = time.perf_counter()
        fill_keys(kpath, key_rows)
        print(f"filled {key_rows} rows with keys in {time.perf_counter() - t:.1f} s",
              file=sys.stderr)

        def key(m: str) -> int:
            df = (spark.read.format("rocketstore").option("path", kpath)
                  .option("key", "k-123456").option("metricsFile", m).load())
            got = df.collect()
            assert [r["keys"] for r in got] == [["k-123456"]], got
            return len(got)

        kr = [_median_run(key, metrics) for _ in range(repeat)]
        out.append((f'.option("key", "k-123456") on {key_rows:,} messages',
                    statistics.median(r[0] for r in kr), kr[-1][1], kr[-1][2], key_rows))
    spark.conf.unset(conf)
    return out


if __name__ == "__main__":
    main()
