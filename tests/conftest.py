"""Shared fixtures for the store tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore, StoreConfig

# ``fail_points`` and ``opened`` for the fault-injection and flush tests.
pytest_plugins = ["helpers.fault_fixtures"]


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
