"""What the replication harnesses share (``ha_catchup.py``, ``ha_lag.py``,
``ha_put.py``; docs/format.md §21): master and slave configs on a medium,
waits, medians and the run's header line.

Master and slave live in the harness's process: every replication loop is a
Rust thread that never takes the GIL, so the Python side only puts and polls.
Both use the side-by-side table's geometry (``bench_store.TABLE_GEOMETRY``)
unless a harness sets the CommitLog segment size.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench_store import TABLE_GEOMETRY, bench_config

from rocketstore import BrokerRole, FlushDiskType, StoreConfig


def geometry(segment: int | None = None) -> dict[str, int]:
    """The table's geometry, with CommitLog files of ``segment`` bytes when set."""
    g = dict(TABLE_GEOMETRY)
    if segment:
        g["mapped_file_size_commit_log"] = segment
    return g


def master_config(path: str, geo: Mapping[str, int], *, role: BrokerRole,
                  flush: FlushDiskType, listen: bool = True, **kw: Any) -> StoreConfig:
    """A master (or, with ``listen=False``, a store with no slave) at ``path``."""
    return bench_config(path, geo, broker_role=role, flush_disk_type=flush,
                        ha_listen_port=0 if listen else None, **kw)


def slave_config(path: str, geo: Mapping[str, int], port: int, **kw: Any) -> StoreConfig:
    """A slave at ``path`` following the loopback master on ``port`` (ASYNC_FLUSH)."""
    return bench_config(path, geo, broker_role=BrokerRole.SLAVE,
                        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                        ha_master_address=f"127.0.0.1:{port}", **kw)


def wait_for(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.001) -> float:
    """Polls ``cond`` every ``step`` s; the ``perf_counter`` time it first held."""
    deadline = time.perf_counter() + timeout
    while True:
        if cond():
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def median(xs: Sequence[float]) -> float:
    """The median of ``xs`` (0 for none)."""
    return statistics.median(xs) if xs else 0.0


def pct(sorted_xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of already sorted samples."""
    if not sorted_xs:
        return 0.0
    i = min(len(sorted_xs) - 1, max(0, int(len(sorted_xs) * q / 100 + 0.5) - 1))
    return sorted_xs[i]


def mib(n: float) -> str:
    """``n`` bytes (or bytes/s) in MiB with one decimal."""
    return f"{n / (1 << 20):,.1f} MiB"
