"""Shared fixtures for the Python benchmarks (pytest-benchmark)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore import FlushDiskType, MessageStore, StoreConfig

#: The media every throughput benchmark runs on, side by side.
MEDIA = ("tmpfs", "disk")


def bench_base(medium: str = "tmpfs") -> str | None:
    """Where stores live.

    ``tmpfs``: ROCKETSTORE_BENCH_DIR, else /dev/shm, else the temp dir (no
    kernel writeback re-protecting mapped pages mid-measurement: the library's
    own cost). ``disk``: ROCKETSTORE_DISK_BENCH_DIR, else the temp dir (what a
    user meets).
    """
    if medium == "disk":
        return os.environ.get("ROCKETSTORE_DISK_BENCH_DIR") or tempfile.gettempdir()
    env = os.environ.get("ROCKETSTORE_BENCH_DIR")
    if env:
        return env
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


@pytest.fixture(params=MEDIA)
def medium(request: pytest.FixtureRequest) -> str:
    """The medium of the store (parametrizes every benchmark that uses it)."""
    return str(request.param)


@pytest.fixture
def store_dir(medium: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(dir=bench_base(medium)) as d:
        yield d


@pytest.fixture
def async_store(store_dir: str) -> Iterator[MessageStore]:
    cfg = StoreConfig(store_path=store_dir, flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    with MessageStore(cfg) as s:
        yield s
