"""Where the JVM connector's read time goes: engine decode, JNI hand-off, Spark.

Run it with the release builds the Spark benchmark uses (benches/RESULTS.md,
"Spark"): the connector's jar (``scripts/build-jar.sh``, not ``--debug``)
and the release extension, then::

    PYTHONPATH=python python benches/spark_profile.py [--rows N] [--repeat R] [--perf]

It fills a store as ``benches/spark_bench.py`` does (N messages of
100-byte bodies, 4 queues, 128 MiB segments), reads it ``--repeat`` times
through the JVM connector into Spark's ``noop`` sink in a ``local[2]``
session (all columns, then the 4 columns ``topic, queue_id, queue_offset,
body``), each read with a ``metricsFile``, and prints per read the split
of the two task slots' time (wall time x 2), summed over its tasks and
given as the median of the reads:

- engine decode: ``decodeNs``, counted by the native library around the
  engine's batch reader;
- JNI hand-off: the native half (``exportNs``: registering the batch and
  its buffer addresses for Java), the crossing (the rest of ``nextNs``,
  the Java-timed ``NativeLib.nextBatch`` call) and the Java half
  (``wrapNs``: checking the batch's description and making Spark's
  column vectors over its buffers);
- opening the store and the reader in the task (``openNs``);
- Spark in the tasks: the rest of each reader's life (``taskNs``), that is
  Spark consuming the batches (here the noop sink's row loop);
- outside the readers: the slots' time no reader was open (planning on
  the driver, scheduling and starting the tasks, idle slots).

With ``--perf`` it also samples the JVM with ``perf record -e cpu-clock
-g`` (no hardware counters needed; ``kernel.perf_event_paranoid`` <= 2
lets a user sample their own processes) over the same reads, started with
``-XX:+PreserveFramePointer`` and with the JIT's symbols written by ``jcmd
<pid> Compiler.perfmap``, and prints the CPU samples by thread kind (task
threads, GC, JIT compiler, other) and, for the task threads, by where the
sampled instruction was: the native library (engine, split off: its
hand-off functions), JIT-compiled Java by package (the connector, Arrow,
Spark, the JDK), the JVM itself, the kernel (page
faults on the mapped segments, system calls), libc. The native library is
built without frame pointers, so a sample's call chain through it is
cut: the split is by the sampled (leaf) frame.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spark_bench import BATCH, FOUR_DDL, JVM_FMT, fill, jvm_built

#: Task slots of the session (``local[2]``).
SLOTS = 2
#: The native library's hand-off functions (the rest of it is the engine).
HANDOFF = re.compile(r"rocketstore_jni::(export|handles|store::long_array)|NativeLib_nextBatch")


def split(metrics: str, wall: float) -> dict[str, float]:
    """The slots' seconds of one read, by part (from its metricsFile lines)."""
    with open(metrics) as f:
        lines = [json.loads(x) for x in f]
    s = {k: sum(x[k] for x in lines) / 1e9
         for k in ("taskNs", "openNs", "nextNs", "decodeNs", "exportNs", "wrapNs")}
    return {
        "engine decode (decodeNs)": s["decodeNs"],
        "JNI hand-off, native: register the batch (exportNs)": s["exportNs"],
        "JNI hand-off, the call's crossing (nextNs - decodeNs - exportNs)":
            s["nextNs"] - s["decodeNs"] - s["exportNs"],
        "JNI hand-off, Java: wrap into column vectors (wrapNs)": s["wrapNs"],
        "open the store and the reader in the task (openNs)": s["openNs"],
        "Spark in the tasks: consuming the batches (the rest of taskNs)":
            s["taskNs"] - s["openNs"] - s["nextNs"] - s["wrapNs"],
        "outside the readers: planning, scheduling, idle slots": wall * SLOTS - s["taskNs"],
    }


def jvm_pid(spark: Any) -> int:
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


def start_perf(pid: int, out: str) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "499", "-g", "-p", str(pid),
                          "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # perf attaches to the threads
    if p.poll() is not None:
        raise SystemExit(f"perf record failed: {p.stderr.read().decode() if p.stderr else ''}")
    return p


def stop_perf(p: subprocess.Popen[bytes], pid: int) -> None:
    # The JIT's symbols for perf: /tmp/perf-<pid>.map.
    subprocess.run(["jcmd", str(pid), "Compiler.perfmap"], check=True, capture_output=True)
    p.send_signal(signal.SIGINT)
    p.wait(60)


def thread_kind(comm: str) -> str:
    if comm.startswith("Executor task"):
        return "task threads"
    if comm.startswith(("GC Thread", "G1 ")):
        return "GC"
    if "CompilerThre" in comm:
        return "JIT compiler"
    return "other threads (driver, Py4J, Spark's services)"


def where(sym: str, dso: str) -> str:
    """The part a task thread's sample belongs to, by its sampled frame."""
    if "librocketstore_jni" in dso:
        return ("JNI hand-off, native (registering the batch)" if HANDOFF.search(sym)
                else "engine decode (the native library)")
    if dso.startswith("[kernel") or (dso == "[unknown]" and sym.startswith("0xffff")):
        return "kernel (page faults on mapped segments, system calls)"
    if "libjvm" in dso:
        return "the JVM itself (runtime, JNI entry, allocation)"
    if "libc" in dso:
        return "libc (memcpy, allocation)"
    if dso.startswith("/tmp/perf-") or "perf-" in dso:
        if "NativeColumnVector" in sym and "Cursor" not in sym and "batch" not in sym:
            return "the connector's column vectors (Spark's reads of the values)"
        if "rocketstore" in sym:
            return "JNI hand-off, Java (the connector's wrapping and checks)"
        if "org.apache.arrow" in sym or "org/apache/arrow" in sym:
            return "Arrow Java"
        if "org.apache.spark" in sym or "org/apache/spark" in sym:
            return "Spark (JIT-compiled)"
        return "other Java (JDK, Scala, interpreter stubs)"
    return f"other ({os.path.basename(dso)})"


def perf_split(data: str) -> tuple[dict[str, int], dict[str, int]]:
    """CPU samples by thread kind, and the task threads' by part."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    kinds: dict[str, int] = collections.Counter()
    parts: dict[str, int] = collections.Counter()
    comm = None
    leaf = True
    for line in out.splitlines():
        if not line.strip():
            comm, leaf = None, True
            continue
        if comm is None:
            comm = line.strip()
            kinds[thread_kind(comm)] += 1
            continue
        if leaf:
            leaf = False
            if thread_kind(comm) == "task threads":
                m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
                sym, dso = (m.group(1), m.group(2)) if m else ("?", "?")
                parts[where(sym, dso)] += 1
    return dict(kinds), dict(parts)


def table(title: str, counts: Mapping[str, float], unit: str) -> None:
    total = sum(counts.values()) or 1
    print(f"\n| {title} | {unit} | share |\n|---|---:|---:|")
    for k, v in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {v:.3f} | {100 * v / total:.1f} % |" if isinstance(v, float)
              else f"| {k} | {v} | {100 * v / total:.1f} % |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--perf", action="store_true", help="also sample the JVM with perf")
    args = ap.parse_args()
    if not jvm_built():
        raise SystemExit("the JVM connector's jar is not built (scripts/build-jar.sh)")
    from pyspark.sql import SparkSession

    from rocketstore.spark import configure

    root = tempfile.mkdtemp(prefix="rs-spark-profile-", dir=os.environ.get("ROCKETSTORE_BENCH_DIR"))
    try:
        store = os.path.join(root, "store")
        fill(store, args.rows)
        b = (configure(SparkSession.builder).master("local[2]").appName("rocketstore-profile")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
        if args.perf:
            b = b.config("spark.driver.extraJavaOptions", "-XX:+PreserveFramePointer")
        spark = b.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        metrics = os.path.join(root, "metrics.jsonl")
        reads = {"all columns": None, "4 columns": FOUR_DDL}
        print(f"load average before: {os.getloadavg()[0]:.1f}")

        def read(ddl: str | None) -> dict[str, float]:
            if os.path.exists(metrics):
                os.remove(metrics)
            r = (spark.read.format(JVM_FMT).option("path", store)
                 .option("batchSize", str(BATCH)).option("metricsFile", metrics))
            df = (r.schema(ddl) if ddl else r).load()
            t = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            wall = time.perf_counter() - t
            return {"wall": wall, **split(metrics, wall)}

        for ddl in reads.values():
            read(ddl)  # warm-up: the JIT, the executor's threads
        pid = jvm_pid(spark)
        data = os.path.join(root, "perf.data")
        perf = start_perf(pid, data) if args.perf else None
        got: dict[str, list[dict[str, float]]] = {k: [] for k in reads}
        for _ in range(args.repeat):
            for name, ddl in reads.items():
                got[name].append(read(ddl))
        if perf is not None:
            stop_perf(perf, pid)
        spark.stop()
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        for name, runs in got.items():
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            wall = med.pop("wall")
            table(f"JVM read, {name}, {args.rows:,} rows, wall {wall:.3f} s x {SLOTS} slots "
                  f"(median of {args.repeat})", med, "slot s")
        if perf is not None:
            kinds, parts = perf_split(data)
            table("perf cpu-clock samples, all reads, by thread", kinds, "samples")
            table("perf samples of the task threads, by sampled frame", parts, "samples")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
