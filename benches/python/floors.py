"""The physical floor of each row of the side-by-side table against
RocketMQ's store (``benches/RESULTS.md``), in nanoseconds per message, on
this machine: what no implementation of the row from Python can go below.

One command prints the table (run it on a quiet machine; the first run
builds the benchmarks)::

    CARGO_TARGET_DIR=... python benches/python/floors.py    # release build on PYTHONPATH

For each row, its parts:

* **call**: the row's own Python loop (the table harness's loop, arguments
  built as it builds them) with the store's method replaced by its
  measuring hook in ``rocketstore._native`` (``_floor_put``,
  ``_floor_put_batch``, ``_floor_get_message``, ``_floor_query_message``,
  ``_floor_get_arrow``): the same signature and argument conversion, and
  nothing behind it. The median of ``--rounds`` timed rounds, per message
  (a batch's or a pull's call divided by its messages);
* **memcpy** and **crc32**: one copy and one CRC-32 (``crc32fast``) of the
  bytes the row moves per message (``cargo bench --bench floors``: the
  table's record for puts and pulls; ``queue_offset`` and ``body`` for
  ``get_arrow``; a record at a random place for the lookup);
* **floor** = call + memcpy + crc32;
* **engine**: the row on the engine alone, without Python (criterion
  medians of ``rows`` and ``arrow_get``, the real disk), and **engine op**,
  the innermost operation that has a bench of its own
  (``append_100B_cached_clock``, ``append_batch_100B``, ``read/checked_100B``;
  tmpfs). The engine already copies and checks its bytes, so the row's
  cost is at least call + engine: **call+engine**. What a row takes above
  that is the binding (argument rules, result objects) and the threads.

``--no-cargo`` reuses the criterion results already in
``$CARGO_TARGET_DIR/criterion`` (and prints only the call parts if there
are none). ``PYTHONPATH`` selects the rocketstore build timed; it must be a
release build (the script refuses a test build unless ``--allow-debug``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "BenchTopic"
TAGS = ["TagA", "TagB", "TagC", "TagD"]
_TEMPLATE = bytes(ord("a") + i % 26 for i in range(100))
BODIES = [i.to_bytes(4, "little") + _TEMPLATE[4:] for i in range(1024)]
BATCH = 1000
PULL = 32
ARROW_ROWS = 4096
COLUMNS = ["queue_offset", "body"]

#: The criterion benches run: (cargo arguments, filter).
CARGO_RUNS = [
    (["--bench", "floors"], ""),
    (["--bench", "append"], "append_100B_cached_clock/tmpfs$|append_batch_100B/tmpfs$"),
    (["--bench", "read"], "read/checked_100B$"),
    (["--bench", "rows"], "rows_put/|rows_read/"),
    (["--features", "arrow", "--bench", "arrow_get"], "copy_4096_offset_body$"),
]

#: Per row: (label, call timer, memcpy id, crc id, engine row id, engine op id);
#: ids are criterion ``group/function[/parameter]`` (``{record}``: the
#: record's id in ``floors``).
ROWS: list[tuple[str, str, str, str, str | None, str | None]] = [
    ("put, 1 thread, tag+key by keyword", "put", "floors/memcpy_to_log/{record}",
     "floors/crc32_hot/{record}", "rows_put/key_tag_threads/1",
     "commitlog/append_100B_cached_clock/tmpfs"),
    ("put, 1 thread, tag+key by position", "put_positional", "floors/memcpy_to_log/{record}",
     "floors/crc32_hot/{record}", "rows_put/key_tag_threads/1",
     "commitlog/append_100B_cached_clock/tmpfs"),
    ("put, 4 threads", "put4", "floors/memcpy_to_log/{record}", "floors/crc32_hot/{record}",
     "rows_put/key_tag_threads/4", "commitlog/append_100B_cached_clock/tmpfs"),
    ("put_batch of 1,000", "put_batch", "floors/memcpy_to_log/{record}",
     "floors/crc32_hot/{record}", "rows_put/batch_1000_key_tag",
     "commitlog/append_batch_100B/tmpfs"),
    ("query_message by key", "query", "floors/memcpy_from_log_random/{record}",
     "floors/crc32_log/{record}", "rows_read/query_by_key", None),
    ("get_message, pulls of 32", "get", "floors/memcpy_from_log/{record}",
     "floors/crc32_log/{record}", "rows_read/get_batch32_touch_body", "read/checked_100B"),
    ("get_arrow 4,096, offset+body", "get_arrow", "floors/memcpy_from_log/offset_body_108B",
     "floors/crc32_log/offset_body_108B", "arrow_get/copy_4096_offset_body", None),
]


def _timed(n: int, rounds: int, run: Callable[[], None]) -> float:
    """Median ns per message of ``rounds`` calls of ``run`` (``n`` messages each)."""
    run()  # warm-up
    gc.disable()
    try:
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            run()
            times.append((time.perf_counter_ns() - t0) / n)
    finally:
        gc.enable()
    return statistics.median(times)


def call_parts(n: int, rounds: int) -> dict[str, float]:
    """The call part of every row: ns per message."""
    from rocketstore import _native as nat

    keys = [f"K{i}" for i in range(n)]
    put = nat._floor_put

    def put1() -> None:
        for i in range(n):
            put(TOPIC, BODIES[i & 1023], i & 3, tags=TAGS[i & 3], keys=[keys[i]])

    def put_positional() -> None:
        for i in range(n):
            put(TOPIC, BODIES[i & 1023], i & 3, TAGS[i & 3], [keys[i]])

    def put4() -> None:
        per = n // 4
        barrier = threading.Barrier(4)

        def worker(t: int) -> None:
            barrier.wait()
            for i in range(t * per, (t + 1) * per):
                put(TOPIC, BODIES[i & 1023], t, tags=TAGS[i & 3], keys=[keys[i]])

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    batch_tags = [TAGS[i & 3] for i in range(BATCH)]
    batches = [([BODIES[i & 1023] for i in range(b, b + BATCH)], keys[b:b + BATCH],
                (b // BATCH) & 3) for b in range(0, n - n % BATCH, BATCH)]
    put_batch = nat._floor_put_batch

    def batch() -> None:
        for bodies, bkeys, q in batches:
            put_batch(TOPIC, bodies, q, keys=bkeys, tags=batch_tags)

    query = nat._floor_query_message

    def lookups() -> None:
        for k in keys:
            query(TOPIC, k, 32, 0)

    get = nat._floor_get_message

    def pulls() -> None:
        for j in range(n // PULL):
            get(TOPIC, j & 3, j * PULL, PULL)

    get_arrow = nat._floor_get_arrow

    def arrow() -> None:
        for j in range(n // ARROW_ROWS):
            get_arrow(TOPIC, j & 3, j * ARROW_ROWS, ARROW_ROWS, columns=COLUMNS)

    timers: dict[str, tuple[int, Callable[[], None]]] = {
        "put": (n, put1), "put_positional": (n, put_positional), "put4": (n // 4 * 4, put4),
        "put_batch": (len(batches) * BATCH, batch), "query": (n, lookups),
        "get": (n // PULL * PULL, pulls), "get_arrow": (n // ARROW_ROWS * ARROW_ROWS, arrow),
    }
    return {name: _timed(count, rounds, run) for name, (count, run) in timers.items()}


def run_cargo(target: Path, log: Path) -> None:
    """Runs the criterion benches of the table (release profile), output to ``log``."""
    with log.open("w") as out:
        for args, flt in CARGO_RUNS:
            cmd = ["cargo", "bench", *args, "--", *([flt] if flt else [])]
            print(f"running: {' '.join(cmd)}", file=sys.stderr, flush=True)
            subprocess.run(cmd, cwd=ROOT, check=True, stdout=out, stderr=subprocess.STDOUT,
                           env=dict(os.environ, CARGO_TARGET_DIR=str(target)))


def criterion_ns(target: Path, bench_id: str) -> float | None:
    """Median ns per message of a criterion result (its throughput's elements)."""
    d = target / "criterion" / bench_id / "new"
    try:
        est = json.loads((d / "estimates.json").read_text())
        meta = json.loads((d / "benchmark.json").read_text())
    except (OSError, ValueError):
        return None
    elements = (meta.get("throughput") or {}).get("Elements") or 1
    return float(est["median"]["point_estimate"]) / elements


def record_id(target: Path) -> str:
    """The table record's id in the ``floors`` bench (it carries the size)."""
    found = sorted(p.name for p in (target / "criterion" / "floors" / "memcpy_to_log").glob(
        "record_*B"))
    return found[0] if found else "record_?B"


def _fmt(v: float | None) -> str:
    return f"{v:,.1f}" if v is not None else "-"


def table(calls: dict[str, float], target: Path) -> str:
    rec = record_id(target)
    head = ["row", "bytes", "call", "memcpy", "crc32", "floor", "engine", "engine op",
            "call+engine"]
    lines = []
    for label, key, mem, crc, eng, op in ROWS:
        mem, crc = mem.format(record=rec), crc.format(record=rec)
        a = calls.get(key)
        b, c = criterion_ns(target, mem), criterion_ns(target, crc)
        d = criterion_ns(target, eng) if eng else None
        e = criterion_ns(target, op) if op else None
        parts = [a, b, c]
        floor = sum(p for p in parts if p is not None) if None not in parts else None
        size = mem.rsplit("_", 1)[-1].rstrip("B")
        lines.append([label, size, _fmt(a), _fmt(b), _fmt(c), _fmt(floor), _fmt(d), _fmt(e),
                      _fmt(a + d if a is not None and d is not None else None)])
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head))]
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in
                     enumerate(zip(head, widths, strict=True)))]
    out += ["  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in
                      enumerate(zip(r, widths, strict=True))) for r in lines]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=200_000, help="messages per timed round (200,000)")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds per call part (7)")
    ap.add_argument("--no-cargo", action="store_true",
                    help="reuse the criterion results in $CARGO_TARGET_DIR/criterion")
    ap.add_argument("--log", type=Path, default=None,
                    help="cargo's output (default: floors-cargo.log in the target dir)")
    ap.add_argument("--allow-debug", action="store_true")
    a = ap.parse_args()
    from rocketstore import _native as nat

    if hasattr(nat, "_set_fail_point") and not a.allow_debug:
        raise SystemExit(f"{nat.__file__} is a test build (fail points); time a release build, "
                         "or pass --allow-debug")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    if not a.no_cargo:
        run_cargo(target, a.log or target / "floors-cargo.log")
    calls = call_parts(a.n, a.rounds)
    load = os.getloadavg()
    print(f"ns per message (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"calls: median of {a.rounds} rounds of {a.n:,}; criterion medians)")
    print(table(calls, target))


if __name__ == "__main__":
    main()
