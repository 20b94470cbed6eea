"""A writer subprocess killed with SIGKILL: the scaffolding the kill -9 tests share.

The child (a Python script) prints to stdout, one line per acknowledgement
and a marker line (``READY``, ``DONE``) once it reaches the point the test
waits for. A thread reads stdout continuously, so the child never blocks on a
full pipe; stderr goes to a file (recovery may log a lot). What a test makes
of the lines (acknowledgements, markers, errors) stays in the test.

:func:`run_then_kill` runs a child to a marker and kills it;
:class:`LineChild` keeps a child running while the test works beside it;
:func:`killed_at_exit` and :func:`start_early` serve a child a module-scoped
fixture starts ahead of the test that kills it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class ChildRun:
    """What a child printed before it was killed (or ended by itself)."""

    #: Every stdout line read, in order; the last may be partial (no newline).
    lines: list[bytes]
    #: ``-signal.SIGKILL`` if the kill ended it, else its own exit status.
    returncode: int | None
    #: Whether a line starting with the marker came.
    marked: bool
    stderr: str
    #: ``time.monotonic()`` right before the SIGKILL (None: it ended by itself).
    killed_at: float | None = None

    @property
    def first_line(self) -> str:
        """The first line printed, decoded (``""``: none)."""
        return self.lines[0].decode() if self.lines else ""

    @property
    def complete(self) -> list[str]:
        """The lines that ended in a newline (a printed line is a whole one), decoded."""
        return [raw.decode() for raw in self.lines if raw.endswith(b"\n")]


def run_then_kill(
    argv: Sequence[str | os.PathLike[str]],
    *,
    stderr_path: str | os.PathLike[str],
    marker: bytes,
    marker_timeout: float,
    run_for: float = 0.0,
    env: Mapping[str, str] | None = None,
) -> ChildRun:
    """Runs ``python argv...``, waits up to ``marker_timeout`` seconds for a
    stdout line starting with ``marker`` (or for the child's end), lets it
    run ``run_for`` more seconds (less if it ends), then SIGKILLs it if it
    still runs. Waits for the child and for every line it printed. ``env``:
    the child's environment (default: this process's)."""
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, *map(os.fspath, argv)], stdout=subprocess.PIPE, stderr=err, env=env
        )
    lines: list[bytes] = []
    marked: list[bool] = []
    woken = threading.Event()  # the marker came, or stdout ended

    def read() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            lines.append(raw)
            if raw.startswith(marker) and not marked:
                marked.append(True)
                woken.set()
        woken.set()  # EOF: the child is gone

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    killed_at = None
    try:
        woken.wait(marker_timeout)
        try:
            proc.wait(run_for)
        except subprocess.TimeoutExpired:
            pass
    finally:
        if proc.poll() is None:
            killed_at = time.monotonic()
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
        reader.join(60)
        assert proc.stdout is not None
        proc.stdout.close()
    stderr = Path(stderr_path).read_text(errors="replace")
    return ChildRun(lines, proc.returncode, bool(marked), stderr, killed_at)


class LineChild:
    """A child process whose stdout lines a thread hands to :meth:`take`
    as they come; the lines it does not take are events, queued for
    :meth:`next_event` (``""`` once stdout ended).

    A subclass sets what :meth:`take` uses before calling ``__init__``: the
    thread starts there.
    """

    def __init__(
        self, argv: Sequence[str | os.PathLike[str]], *, stderr: Any, stdin: Any = None
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *map(os.fspath, argv)], stdin=stdin, stdout=subprocess.PIPE,
            stderr=stderr, text=True,
        )
        self.events: queue.Queue[str] = queue.Queue()
        self.done = threading.Event()  # stdout ended: the child is gone
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def take(self, line: str) -> bool:
        """Whether ``line`` is taken (not an event); by default none is."""
        return False

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not self.take(line):
                self.events.put(line)
        self.proc.stdout.close()
        self.done.set()
        self.events.put("")

    def next_event(self, timeout: float) -> str | None:
        """The next event line (``""``: stdout ended), or None after ``timeout`` seconds."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def wait(self, timeout: float = 60.0) -> None:
        """Waits for the child to end and for the thread to read all it printed."""
        self.proc.wait(timeout=timeout)
        self.thread.join(timeout)

    def kill(self, timeout: float = 60.0) -> None:
        """SIGKILLs the child if it still runs, then :meth:`wait`."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.wait(timeout)


@contextlib.contextmanager
def killed_at_exit(proc: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """``proc`` (started with ``start_new_session=True``); at exit its process
    group is killed with SIGKILL if it still runs, and it is reaped."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def start_early(request: Any, test: str, fixture: str) -> None:
    """Starts the module-scoped ``fixture`` with the module's first test when
    the test named ``test`` is selected: the child it starts boots while the
    tests before that one run."""
    if any(item.name == test for item in request.session.items):
        request.getfixturevalue(fixture)
