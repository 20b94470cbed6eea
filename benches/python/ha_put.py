"""SYNC_MASTER put latency and throughput from 1 and 8 threads, beside local SYNC_FLUSH.

Run: ``python benches/python/ha_put.py [--puts 20000] [--rounds 5] [--medium both]``
(a quick check: ``--puts 2000 --rounds 3 --medium tmpfs``).

Three stores on the same medium, open for the whole run, 100-byte bodies:

- ``local SYNC_FLUSH``: no replication (``ASYNC_MASTER``, no listener), each
  put waits for its flush (group commit);
- ``SYNC_MASTER, ASYNC_FLUSH``: each put waits until its slave reported it
  (docs/format.md §21.5);
- ``SYNC_MASTER, SYNC_FLUSH``: each put waits for its flush and its slave.

Each master has its own slave (``ASYNC_FLUSH``) on the same medium. A round
puts ``--puts`` messages into each store from ``T`` threads (``--puts / T``
each, one topic, queue = thread), for T in 1 and 8, the stores in a rotated
order each round. Every put is timed (``perf_counter_ns``); throughput is
the round's puts over its wall time. Prints per store and thread count the
median throughput over rounds and p50/p99 of every put of every round, and
the ratio of each SYNC_MASTER's median throughput to local SYNC_FLUSH's in
the same run (target at 8 threads: >= 0.5).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ha_common import geometry, master_config, median, slave_config, wait_for
from media import bench_base, chosen, load_average, media_arg, percentiles

from rocketstore import BrokerRole, FlushDiskType, MessageStore

BODY = b"p" * 100
THREADS = (1, 8)
TARGET = 0.5
#: name -> (role, flush type, with a slave)
STORES = {
    "local SYNC_FLUSH": (BrokerRole.ASYNC_MASTER, FlushDiskType.SYNC_FLUSH, False),
    "SYNC_MASTER, ASYNC_FLUSH": (BrokerRole.SYNC_MASTER, FlushDiskType.ASYNC_FLUSH, True),
    "SYNC_MASTER, SYNC_FLUSH": (BrokerRole.SYNC_MASTER, FlushDiskType.SYNC_FLUSH, True),
}


@contextlib.contextmanager
def open_stores(medium: str) -> Iterator[dict[str, MessageStore]]:
    """Every store of ``STORES`` (and the masters' slaves), connected."""
    geo = geometry(64 << 20)
    with contextlib.ExitStack() as stack:
        out: dict[str, MessageStore] = {}
        for name, (role, flush, replicated) in STORES.items():
            d = stack.enter_context(tempfile.TemporaryDirectory(dir=bench_base(medium)))
            m = stack.enter_context(MessageStore(master_config(
                d, geo, role=role, flush=flush, listen=replicated)))
            if replicated:
                assert m.ha_port
                sd = stack.enter_context(tempfile.TemporaryDirectory(dir=bench_base(medium)))
                stack.enter_context(MessageStore(slave_config(sd, geo, m.ha_port)))
                wait_for(_has_slave(m), 30, f"{name}'s slave")
            out[name] = m
        yield out


def _has_slave(m: MessageStore) -> Callable[[], bool]:
    return lambda: bool(m.ha_status()["slaves"])


def one_round(store: MessageStore, threads: int, puts: int,
              lat: array[int]) -> float:
    """``puts`` puts from ``threads`` threads; appends each latency (ns) to
    ``lat``; returns puts per second."""
    per = puts // threads
    parts = [array("q", bytes(8 * per)) for _ in range(threads)]
    go = threading.Barrier(threads + 1)

    def worker(k: int) -> None:
        put, clock, mine = store.put, time.perf_counter_ns, parts[k]
        go.wait()
        for i in range(per):
            t0 = clock()
            put("ha", BODY, k)
            mine[i] = clock() - t0

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    took = time.perf_counter() - t0
    for p in parts:
        lat.extend(p)
    return per * threads / took


def run(medium: str, puts: int, rounds: int) -> None:
    names = list(STORES)
    rates: dict[tuple[str, int], list[float]] = {(n, t): [] for n in names for t in THREADS}
    lats = {(n, t): array("q") for n in names for t in THREADS}
    with open_stores(medium) as stores:
        for name in names:  # warm-up: files mapped, connections busy once
            one_round(stores[name], 1, min(puts, 500), array("q"))
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for t in THREADS:
                for name in order:
                    rates[(name, t)].append(one_round(stores[name], t, puts, lats[(name, t)]))
            print(f"  {medium} round {r + 1}: " + ", ".join(
                f"{n} x{t} {rates[(n, t)][-1]:,.0f}/s" for t in THREADS for n in names)
                + f"; load {load_average()}")
    for t in THREADS:
        local = median(rates[(names[0], t)])
        for name in names:
            rate = median(rates[(name, t)])
            p = percentiles(lats[(name, t)], (50.0, 99.0))
            ratio = rate / local if local else 0.0
            mark = ""
            if t == 8 and name != names[0]:
                mark = f" (target >= {TARGET}: {'met' if ratio >= TARGET else 'NOT met'})"
            print(f"  {medium} {t} thread{'s' if t > 1 else ''}, {name:24s} "
                  f"{rate:>9,.0f} puts/s  p50 {p[50.0] / 1e3:8.1f} µs  "
                  f"p99 {p[99.0] / 1e3:8.1f} µs  x{ratio:.2f} of local SYNC_FLUSH{mark}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--puts", type=int, default=20_000, help="puts per store, round and "
                   "thread count")
    p.add_argument("--rounds", type=int, default=5)
    media_arg(p)
    args = p.parse_args()
    print(f"SYNC_MASTER puts, {args.puts:,} a round from 1 and 8 threads, {args.rounds} "
          f"interleaved rounds; load average {load_average()}")
    for medium in chosen(args.medium):
        run(medium, args.puts, args.rounds)


if __name__ == "__main__":
    main()
