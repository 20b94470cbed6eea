"""Freezing a group member with SIGSTOP at a moment it holds no state lock.

A member holds its group's ``state.lock`` for one read-modify-write of the
state; a process frozen inside it blocks every member until it resumes
(by design: the lock's waiters then fail with ``ConsumerGroupBusyError``
naming it). Tests of a frozen member's lapsed leases freeze it outside that
window: stopped, it must have no descriptor of ``state.lock`` open (the
lock is an open file description's, released when it is closed).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _holds_open(pid: int, target: str) -> bool:
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(os.path.join(fd_dir, fd)) == target:
                return True
        except OSError:  # closed meanwhile (the process was not stopped yet)
            continue
    return False


def freeze_outside_state_lock(pid: int, group_dir: str | Path, limit: float = 10.0) -> None:
    """SIGSTOP ``pid`` at a moment it has ``group_dir``'s state lock closed."""
    target = os.path.realpath(os.path.join(group_dir, "state.lock"))
    deadline = time.monotonic() + limit
    while True:
        os.kill(pid, signal.SIGSTOP)
        while not _stopped(pid):
            time.sleep(0.001)
        if not _holds_open(pid, target):
            return
        os.kill(pid, signal.SIGCONT)
        assert time.monotonic() < deadline, f"process {pid} always held {target}"
        time.sleep(0.003)
