"""Shared fixtures for the store tests."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import outside_guard
from helpers.paths import REPO
from rocketstore import MessageStore, StoreConfig

# ``fail_points`` and ``opened`` for the fault-injection and flush tests.
pytest_plugins = ["helpers.fault_fixtures"]

#: The folder in pytest's base temporary folder that ``TMPDIR`` names
#: (pytest's own folders there end in a number, so it meets none of them).
TMPDIR_NAME = "tmpdir"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is collected: every temporary file of the run
    goes to pytest's base temporary folder (``TMPDIR`` and
    ``tempfile.tempdir``, which subprocesses and Spark inherit), and nothing
    else outside the repository may be opened (fixtures live in
    tests/fixtures): an open or a listing of a file elsewhere raises
    PermissionError, and the test fails even if it swallowed that
    (tests/helpers/outside_guard.py has the rules; scripts/check_test_paths.py
    checks the sources by the same ones). Wherever the clone lives and
    whatever ``TMPDIR`` said, the rules are the same."""
    base = config._tmp_path_factory.getbasetemp()  # the tmpdir plugin's, made now
    temp = base / TMPDIR_NAME
    temp.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(temp)
    tempfile.tempdir = str(temp)
    outside_guard.install(str(REPO), str(base))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish() -> None:
    # After the last test: pytest's own reports and clean-up of earlier runs'
    # temporary folders are not tests.
    outside_guard.uninstall()


@pytest.fixture(autouse=True)
def _nothing_read_outside_the_repository() -> Iterator[None]:
    yield
    refused = outside_guard.take()
    if refused:
        pytest.fail(f"the test opened files outside the repository and the run's temporary "
                    f"folder: {refused}", pytrace=False)


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
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local SparkSession (``local[2]``) for the Spark tests, with the
    Python source registered as ``rocketstore`` and ``rocketstore_python``
    and, when its jar is built, the JVM connector on the class path (which
    then answers to ``rocketstore``). Workers run this interpreter; Spark's
    scratch files (``spark.local.dir``, the JVM's ``java.io.tmpdir``) go to
    the run's base temporary folder, like every other temporary file."""
    pytest.importorskip("pyspark")
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from rocketstore.spark import configure, register
    from rocketstore.spark._jvm import missing

    scratch = tmp_path_factory.mktemp("spark")
    builder = SparkSession.builder
    if missing() is None:
        # The JVM connector when built (scripts/build-jar.sh): then the format
        # ``rocketstore`` is the JVM connector and ``rocketstore_python`` the
        # Python source, which the tests of the Python source name.
        builder = configure(builder)
    session = (
        builder.master("local[2]")
        .appName("rocketstore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(scratch))
        .config("spark.driver.extraJavaOptions", f'"-Djava.io.tmpdir={scratch}"')
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()
