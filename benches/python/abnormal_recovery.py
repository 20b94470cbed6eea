"""Abnormal recovery throughput: re-dispatch to the consume queues and index.

Run: ``python benches/python/abnormal_recovery.py [--n 2000000] [--repeats 3] [--medium both]``.

A child process writes ``--n`` 100-byte messages with one key each
(``put_batch`` of 1,000, one topic, 4 queues; default geometry), waits until
dispatch has caught up (so the queues and index hold the records, as they
usually do when a writer dies) and is killed with SIGKILL: the abort file
stays behind. The parent then times ``MessageStore(cfg).start()`` — lock,
load, abnormal recovery (CRC scan of the CommitLog from the file the
checkpoint points at, every record re-dispatched to its consume queue and
the index), services started — and reports records re-dispatched per
second. ``--at-once`` kills the child right after its last put instead
(dispatch may be behind). Each repeat is a new store and a new crash.
Target: ≥ 1 M records/s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from media import bench_base, chosen, load_average, media_arg

from rocketstore import MessageStore, StoreConfig

CHILD = """
import os, signal, sys, time
from rocketstore import MessageStore, StoreConfig
path, n, wait = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
body = b"x" * 100
store = MessageStore(StoreConfig(store_path=path)).start()
bodies = [body] * 1000
for b in range(n // 1000):
    r = store.put_batch("bench", bodies, b % 4, keys=[f"k{b}-{i}" for i in range(1000)])
    assert r.ok, r.reason
if wait:
    while store.dispatch_behind_bytes() > 0:
        time.sleep(0.01)
print("written", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def crash_store(path: str, n: int, wait: bool) -> None:
    """Writes ``n`` keyed records in a child and SIGKILLs it."""
    p = subprocess.run(
        [sys.executable, "-c", CHILD, path, str(n), "1" if wait else "0"],
        capture_output=True, text=True, check=False,
    )
    if p.returncode != -signal.SIGKILL or "written" not in p.stdout:
        raise RuntimeError(f"writer ended with {p.returncode}: {p.stderr[-2000:]}")
    if not os.path.exists(os.path.join(path, "abort")):
        raise RuntimeError("the killed writer left no abort file")


def measure(medium: str, n: int, repeats: int, wait: bool) -> list[float]:
    rates = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(dir=bench_base(medium)) as d:
            crash_store(d, n, wait)
            t = time.perf_counter()
            store = MessageStore(StoreConfig(store_path=d)).start()
            took = time.perf_counter() - t
            r = store.recovery_report
            store.shutdown()
            assert r is not None and r.mode == "abnormal", r
            rate = r.redispatched_records / took
            rates.append(rate)
            print(f"  {medium:5} {took * 1000:.0f} ms: {r.records_scanned:,} records scanned, "
                  f"{r.redispatched_records:,} re-dispatched, "
                  f"{r.index_redispatched_records:,} re-indexed -> {rate / 1e6:.2f} M records/s"
                  f"  load {load_average()}")
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2_000_000, help="records written before the kill")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--at-once", action="store_true",
                   help="kill right after the last put, without waiting for dispatch")
    media_arg(p)
    args = p.parse_args()
    print(f"abnormal recovery, {args.n:,} records of 100 B with a key each, default "
          f"geometry; load average {load_average()}")
    for medium in chosen(args.medium):
        rates = measure(medium, args.n, args.repeats, not args.at_once)
        med = statistics.median(rates)
        print(f"  {medium:5} median {med / 1e6:.2f} M records/s; target >= 1 M records/s: "
              f"{'met' if med >= 1e6 else 'NOT met'}")


if __name__ == "__main__":
    main()
