"""Shared fixtures for the Python benchmarks (pytest-benchmark)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore import FlushDiskType, MessageStore, StoreConfig


def bench_base() -> str | None:
    """Where stores live: ROCKETSTORE_BENCH_DIR, else /dev/shm, else the temp dir.

    tmpfs keeps kernel writeback from re-protecting mapped pages in the middle
    of a measurement, so the numbers show the library's own cost.
    """
    env = os.environ.get("ROCKETSTORE_BENCH_DIR")
    if env:
        return env
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


@pytest.fixture
def store_dir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(dir=bench_base()) as d:
        yield d


@pytest.fixture
def async_store(store_dir: str) -> Iterator[MessageStore]:
    cfg = StoreConfig(store_path=store_dir, flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    with MessageStore(cfg) as s:
        yield s
