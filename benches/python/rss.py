"""Anonymous memory (``RssAnon``) while writing 10 M messages from Python.

Run: ``python benches/python/rss.py [--n 10000000] [--api put] [--medium both]``.

A store with the default geometry, ASYNC_FLUSH, 100-byte bodies with one
key each (so the index is written too). A thread samples ``RssAnon`` from
``/proc/self/status`` every 10 ms while the main thread writes; printed are
the process's RssAnon before the store opens, the peak while writing, and
the peak minus the baseline (the store's own growth). Mapped segments are
file-backed (``RssFile``/``RssShmem``), not anonymous. Target: ≤ 200 MB.

``--api``: ``put`` (one call per message, the default), ``put_batch``
(1,000 bodies and keys per call) or ``put_messages`` (1,000 ``Message``
objects built per call).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from media import bench_base, chosen, load_average, media_arg

from rocketstore import Message, MessageStore, StoreConfig

BODY = b"x" * 100
BATCH = 1_000


def rss_anon_kib() -> int:
    """This process's ``RssAnon`` in KiB."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


class Sampler(threading.Thread):
    """Samples ``RssAnon`` every ``period`` seconds; keeps the peak."""

    def __init__(self, period: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.peak = 0
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, rss_anon_kib())
            self.samples += 1
            self._halt.wait(self.period)

    def stop(self) -> None:
        self._halt.set()
        self.join()
        self.peak = max(self.peak, rss_anon_kib())


def write(store: MessageStore, n: int, api: str) -> None:
    """Writes ``n`` messages with one key each through ``api``."""
    if api == "put":
        put = store.put
        for i in range(n):
            put("bench", BODY, 0, None, f"k{i}")
    elif api == "put_batch":
        bodies = [BODY] * BATCH
        for b in range(n // BATCH):
            store.put_batch("bench", bodies, keys=[f"k{b}-{i}" for i in range(BATCH)])
    else:
        for b in range(n // BATCH):
            store.put_messages([Message("bench", BODY, keys=f"k{b}-{i}") for i in range(BATCH)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000_000, help="messages per medium")
    p.add_argument("--api", choices=("put", "put_batch", "put_messages"), default="put")
    media_arg(p)
    args = p.parse_args()
    print(f"RssAnon while writing {args.n:,} messages of 100 B with a key each via "
          f"{args.api}, default geometry; load average {load_average()}")
    for medium in chosen(args.medium):
        with tempfile.TemporaryDirectory(dir=bench_base(medium)) as d:
            base = rss_anon_kib()
            sampler = Sampler()
            sampler.start()
            t = time.perf_counter()
            with MessageStore(StoreConfig(store_path=d)) as store:
                write(store, args.n, args.api)
                wrote = time.perf_counter() - t
                in_store = rss_anon_kib()
            sampler.stop()
        peak_mb = sampler.peak / 1024
        growth_mb = (sampler.peak - base) / 1024
        print(f"  {medium:5} baseline {base / 1024:.1f} MB  peak {peak_mb:.1f} MB  "
              f"growth {growth_mb:.1f} MB  at the end {in_store / 1024:.1f} MB  "
              f"({sampler.samples} samples, {args.n / wrote / 1e6:.2f} M msg/s)  "
              f"load {load_average()}")
        print(f"        target peak <= 200 MB: {'met' if peak_mb <= 200 else 'NOT met'}")


if __name__ == "__main__":
    main()
