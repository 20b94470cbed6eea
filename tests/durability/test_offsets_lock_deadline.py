"""Waits on config/consumerOffset.lock have a deadline (docs/format.md §13.1):
a process stopped (SIGSTOP) while it holds the lock makes another process's
commit, reset and a writer's close fail within the deadline with a
TimeoutError naming the holder's pid, instead of blocking them forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import rocketstore.consumers.offsets as offsets_module
from helpers.read_util import SMALL
from rocketstore import MessageStore
from rocketstore.cli import main

OpenStore = Callable[..., MessageStore]
DEADLINE = 0.5

HOLDER = textwrap.dedent("""
    import os, signal, sys
    from rocketstore import _native
    lock = _native.FileLock.acquire(sys.argv[1], False)
    assert lock is not None
    print("held", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen while holding the lock
""")


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


@pytest.fixture
def stopped_holder(store_path: str) -> Iterator[int]:
    """A process that took the offsets lock and stopped itself; its pid."""
    lock = os.path.join(store_path, "config", "consumerOffset.lock")
    child = subprocess.Popen([sys.executable, "-c", HOLDER, lock], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        deadline = time.monotonic() + 10
        while _state(child.pid) != "T":
            assert time.monotonic() < deadline, "the holder did not stop"
            time.sleep(0.01)
        yield child.pid
    finally:
        child.kill()
        os.kill(child.pid, signal.SIGCONT)
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()


def _ends(call: Callable[[], object], limit: float = DEADLINE + 3.0) -> BaseException | None:
    """Run ``call`` in a thread; its exception (None if none). Fails if it is
    still blocked after ``limit`` seconds."""
    caught: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            caught.append(None)
        except BaseException as e:  # handed to the test
            caught.append(e)

    worker = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(limit)
    assert not worker.is_alive(), f"still blocked on the offsets lock after {limit} s"
    assert time.monotonic() - start >= DEADLINE * 0.9  # it did wait out the deadline
    return caught[0]


def test_a_stopped_holder_fails_commit_reset_and_close_naming_its_pid(
        open_store: OpenStore, store_path: str, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    monkeypatch.setattr(offsets_module, "OFFSETS_LOCK_TIMEOUT", DEADLINE)
    store = open_store(**SMALL)
    for i in range(4):
        assert store.put("T", b"m%d" % i, 0).ok
    consumer = store.consumer("g", "T", auto_commit=False)
    assert len(consumer.poll(timeout=5.0)) == 4
    consumer.commit()  # the group has offsets on disk: a reset can find it
    consumer.close()
    pid = request.getfixturevalue("stopped_holder")
    named = f"held by pid {pid}"

    consumer = store.consumer("g", "T", auto_commit=False)
    consumer.seek(0, 2)
    e = _ends(consumer.commit)
    assert isinstance(e, TimeoutError) and named in str(e), e

    result: list[object] = []
    e = _ends(lambda: result.append(CliRunner().invoke(
        main, ["groups", store_path, "--group", "h", "--reset-offsets", "--to-earliest",
               "--topic", "T"])))
    assert e is None
    [run] = result
    assert run.exit_code == 2 and named in run.output, run.output  # type: ignore[attr-defined]

    store.commit_offset("h", "T", 0, 1)  # pending: close must write it
    e = _ends(store.close)
    assert isinstance(e, TimeoutError) and named in str(e), e
