"""Helpers shared by the ``tests/read/`` modules (the store's read side)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rocketstore import MessageStore

#: Small segments: the default sizes reserve 1 GiB per CommitLog file.
SMALL: dict[str, Any] = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 200,  # 200 units per CQ file
}
#: Small segments plus a tiny index geometry (399 entries per index file).
SMALL_INDEX: dict[str, Any] = {**SMALL, "max_hash_slot_num": 100, "max_index_num": 400}

CQ_UNITS_PER_FILE = 200


def wait_dispatched(store: MessageStore, timeout: float = 10.0) -> None:
    """Block until every CommitLog byte is in the consume queues and index."""
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() != 0:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"dispatch still {store.dispatch_behind_bytes()} bytes behind after {timeout} s"
            )
        time.sleep(0.002)


def cq_dir(store_path: str | os.PathLike[str], topic: str, queue_id: int | None = None) -> Path:
    p = Path(store_path) / "consumequeue" / topic
    return p if queue_id is None else p / str(queue_id)


def listing(root: str | os.PathLike[str]) -> set[str]:
    """Every file and directory below ``root`` (relative paths; dirs end with ``/``)."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out.add(os.path.relpath(os.path.join(dirpath, d), root) + "/")
        for f in filenames:
            out.add(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def record_waits(store: Any, monkeypatch: Any) -> list[float | None]:
    """Records the timeout of every ``wait_for_dispatch`` call made on ``store``."""
    waits: list[float | None] = []
    inner = store.wait_for_dispatch

    def wait(seq: int, timeout: float | None = None) -> int:
        waits.append(timeout)
        result: int = inner(seq, timeout)
        return result

    monkeypatch.setattr(store, "wait_for_dispatch", wait)
    return waits


@contextlib.contextmanager
def hang_guard(store: Any, seconds: float = 120.0) -> Iterator[None]:
    """Shuts ``store`` down if the block is still running after ``seconds``.

    For calls that wait forever (``timeout=None``): a wakeup that never comes
    then fails the test with StoreClosedError instead of hanging the run. It
    measures nothing: the block is expected to end long before.
    """
    timer = threading.Timer(seconds, store.shutdown)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


class Iteration:
    """``for msg in consumer`` in a daemon thread: ``seen`` grows as messages
    come, ``done`` is set once the loop ends."""

    def __init__(self, consumer: Iterable[Any]) -> None:
        self.consumer = consumer
        self.seen: list[Any] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for msg in self.consumer:
            self.seen.append(msg)
        self.done.set()

    def wait_for(self, n: int, deadline: float) -> None:
        """Waits until ``n`` messages came or ``time.monotonic()`` passed ``deadline``."""
        while len(self.seen) < n and time.monotonic() < deadline:
            time.sleep(0.01)
