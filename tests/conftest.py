"""Shared fixtures for the store tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import outside_guard
from helpers.paths import REPO
from rocketstore import MessageStore, StoreConfig

# ``fail_points`` and ``opened`` for the fault-injection and flush tests.
pytest_plugins = ["helpers.fault_fixtures"]

# No test reads outside the repository (fixtures live in tests/fixtures):
# an open or a listing of a file elsewhere raises PermissionError, and the
# test fails even if it swallowed that (scripts/check_test_paths.py checks
# the sources the same way).
outside_guard.install(str(REPO))


@pytest.fixture(autouse=True)
def _nothing_read_outside_the_repository() -> Iterator[None]:
    yield
    refused = outside_guard.take()
    if refused:
        pytest.fail(f"the test opened files outside the repository: {refused}", pytrace=False)


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    """A store directory that does not exist yet."""
    return str(tmp_path / "store")


@pytest.fixture
def open_store(store_path: str) -> Iterator[Callable[..., MessageStore]]:
    """Factory: ``open_store(read_only=False, path=None, **config)`` -> a started store.

    Every store it opened is shut down at teardown (shutdown is idempotent).
    """
    opened: list[MessageStore] = []

    def _open(*, read_only: bool = False, path: str | None = None, **cfg: Any) -> MessageStore:
        store = MessageStore(StoreConfig(store_path=path or store_path, **cfg), read_only=read_only)
        opened.append(store)
        return store.start()

    yield _open
    for s in reversed(opened):
        s.shutdown()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession (``local[2]``) for the Spark tests, with the
    ``rocketstore`` format registered. Workers run this interpreter."""
    pytest.importorskip("pyspark")
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from rocketstore.spark import RocketStoreDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("rocketstore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.dataSource.register(RocketStoreDataSource)
    yield session
    session.stop()
