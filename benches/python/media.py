"""Where benchmark stores live: tmpfs and the real disk, side by side.

``tmpfs``: ``ROCKETSTORE_BENCH_DIR``, else ``/dev/shm``, else the temp dir
(no kernel writeback, no file-system page zeroing: the library's own cost).
``disk``: ``ROCKETSTORE_DISK_BENCH_DIR``, else the temp dir (what a user
meets). Shared by the pytest-benchmark suites (``conftest.py``) and the
stand-alone harnesses (``put_latency.py``, ``rss.py``, ``reopen.py``,
``abnormal_recovery.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

#: The media every throughput benchmark runs on, side by side.
MEDIA = ("tmpfs", "disk")


def bench_base(medium: str = "tmpfs") -> str | None:
    """The directory new store directories are made in for ``medium``."""
    if medium == "disk":
        return os.environ.get("ROCKETSTORE_DISK_BENCH_DIR") or tempfile.gettempdir()
    env = os.environ.get("ROCKETSTORE_BENCH_DIR")
    if env:
        return env
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


def media_arg(parser: argparse.ArgumentParser) -> None:
    """Adds ``--medium {tmpfs,disk,both}`` (default both) to a harness."""
    parser.add_argument(
        "--medium", choices=(*MEDIA, "both"), default="both",
        help="where the store lives (default: both, tmpfs first)",
    )


def chosen(medium: str) -> tuple[str, ...]:
    """The media a ``--medium`` value names."""
    return MEDIA if medium == "both" else (medium,)


def load_average() -> str:
    """The 1/5/15-minute load average, for the record of a run."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def percentiles(samples: Iterable[int], qs: tuple[float, ...]) -> dict[float, int]:
    """Nearest-rank percentiles of integer samples, without sorting them all.

    Latencies in ns take a few thousand distinct values, so counting them
    is much cheaper than sorting ten million Python ints.
    """
    counts = Counter(samples)
    n = sum(counts.values())
    out: dict[float, int] = {}
    targets = sorted((max(1, math.ceil(q * n / 100 - 1e-9)), q) for q in qs)
    seen = 0
    it = iter(targets)
    rank, q = next(it)
    for value in sorted(counts):
        seen += counts[value]
        while seen >= rank:
            out[q] = value
            nxt = next(it, None)
            if nxt is None:
                return out
            rank, q = nxt
    return out
