"""A writer subprocess killed with SIGKILL: the scaffolding the kill -9 tests share.

The child (a Python script) prints to stdout, one line per acknowledgement
and a marker line (``READY``, ``DONE``) once it reaches the point the test
waits for. A thread reads stdout continuously, so the child never blocks on a
full pipe; stderr goes to a file (recovery may log a lot). What a test makes
of the lines (acknowledgements, markers, errors) stays in the test.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


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
