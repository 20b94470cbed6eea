"""Shared fixtures for the Python benchmarks (pytest-benchmark)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest
from media import MEDIA, bench_base

from rocketstore import FlushDiskType, MessageStore, StoreConfig

__all__ = ["MEDIA", "bench_base"]


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
