"""Fixtures and waits shared by the fault-injection and flush tests.

Import the fixtures into a test module to use them; they rely on the
``store_path`` fixture of ``conftest.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from helpers.presets import FAILPOINTS_MISSING, PANIC_POINTS, POINTS, SMALL
from rocketstore import MessageStore, PoisonedError, StoreConfig, _native


def has_fail_points() -> bool:
    """Whether this build of the engine has the ``failpoints`` feature."""
    return hasattr(_native, "_set_fail_point")


def _disarm_all() -> None:
    if has_fail_points():
        for p in POINTS + PANIC_POINTS:
            _native._set_fail_point(p, 0)


@pytest.fixture
def fail_points() -> Iterator[Callable[[str, int], None]]:
    """``arm(name, errno)``; every point is disarmed at teardown.

    Fails (never skips) the test when the engine was built without them.
    """
    if not has_fail_points():
        pytest.fail(FAILPOINTS_MISSING, pytrace=False)

    def arm(name: str, err: int) -> None:
        assert _native._set_fail_point(name, err), f"unknown fail point {name}"

    _disarm_all()
    try:
        yield arm
    finally:
        _disarm_all()


@pytest.fixture
def opened(store_path: str) -> Iterator[Callable[..., MessageStore]]:
    """Factory ``opened(**config)`` -> a started store (small segments).

    Stores are shut down at teardown (fault points disarmed first); the
    PoisonedError/OSError of a store a test left poisoned is ignored there.
    """
    stores: list[MessageStore] = []

    def _open(**cfg: Any) -> MessageStore:
        s = MessageStore(StoreConfig(store_path=store_path, **{**SMALL, **cfg}))
        stores.append(s)
        return s.start()

    yield _open
    _disarm_all()  # never shut down with a point armed
    for s in reversed(stores):
        try:
            s.shutdown()
        except (PoisonedError, OSError):
            pass


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls ``cond`` until true; returns the seconds it took."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.005)
    return time.monotonic() - t0


def wait_dispatched(store: MessageStore, timeout: float = 10.0) -> None:
    wait_for(lambda: store.dispatch_behind_bytes() == 0, timeout, "dispatch")
