"""The offsets sync between processes (docs/format.md §21.7): offsets a
master process commits reach a slave process within 10 s; a slave killed
with SIGKILL while it applies them reopens with a whole table, and refuses
commits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.ha_util import slave_config, wait_until
from helpers.paths import HELPERS
from rocketstore import MessageStore, SlaveOffsetsError
from rocketstore.config.files import DelayOffsets
from rocketstore.consumers.offsets import ConsumerOffsets

CHILD = HELPERS / "ha_child.py"
#: How far behind the master a slave's offsets may be, s.
BOUND = 10.0


def _free_port_pair() -> int:
    """A port whose next port is free too (the HA port and the offsets port)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = int(a.getsockname()[1])
            if port >= 65535:
                continue
            try:
                with socket.socket() as b:
                    b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no two neighbouring free ports")


class Child:
    """A peer process whose output goes to a file (read while it runs)."""

    def __init__(self, role: str, store: Path, port: int, out: Path) -> None:
        self.out = out
        with out.open("a") as o, out.with_suffix(".err").open("a") as e:
            self.proc = subprocess.Popen(
                [sys.executable, str(CHILD), role, str(store), str(port)], stdout=o, stderr=e)

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(self.out.with_suffix(".err").read_text())
            return any(x.startswith("READY") for x in self.lines())
        wait_until(ready, 30, "child ready")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _last_commit(out: Path) -> dict[int, int]:
    """The master's last whole round of durable commits."""
    commits: dict[int, int] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "COMMIT":
            commits[int(parts[1])] = int(parts[2])
    return commits


def _slave_offsets(store: Path) -> dict[int, int]:
    """What the slave's files hold for group G on topic T (read without a lock,
    as any reader does: never a torn table)."""
    return ConsumerOffsets.load(store / "config" / ConsumerOffsets.FILE_NAME).offsets("G", "T")


def _within_bound(mout: Path, spath: Path) -> None:
    """The master's commit seen now is on the slave within ``BOUND`` seconds."""
    wait_until(lambda: len(_last_commit(mout)) == 4, 20, "master commits")
    seen = _last_commit(mout)
    start = time.monotonic()
    wait_until(lambda: all(_slave_offsets(spath).get(q, -1) >= o for q, o in seen.items()),
               BOUND, "the master's commits on the slave")
    assert time.monotonic() - start < BOUND


@pytest.mark.timeout(120)
def test_offsets_committed_by_a_master_process_reach_a_slave_process(tmp_path: Path) -> None:
    port = _free_port_pair()
    mout, sout = tmp_path / "master.out", tmp_path / "slave.out"
    spath = tmp_path / "s"
    master = Child("omaster", tmp_path / "m", port, mout)
    slave = None
    try:
        master.wait_ready()
        slave = Child("oslave", spath, port, sout)
        slave.wait_ready()
        _within_bound(mout, spath)
        # The delayed message was delivered on the master: its progress too.
        delay = spath / "config" / DelayOffsets.FILE_NAME
        wait_until(lambda: delay.exists() and DelayOffsets.load(delay).get(1) == 1,
                   BOUND, "delay offsets on the slave")
        # SIGKILL of the slave while it applies snapshots (every 100 ms), then again.
        for _ in range(3):
            time.sleep(0.35)
            slave.kill()
            slave = Child("oslave", spath, port, sout)
            slave.wait_ready()
            _within_bound(mout, spath)
        # SIGKILL of the master: it comes back on the same ports, the sync resumes.
        master.kill()
        master = Child("omaster", tmp_path / "m", port, mout)
        master.wait_ready()
        time.sleep(0.3)
        _within_bound(mout, spath)
    finally:
        master.kill()
        if slave is not None:
            slave.kill()
    # The killed slave reopens with a whole table and refuses commits.
    last = _last_commit(mout)
    with MessageStore(slave_config(spath, None)) as s:
        offsets = {q: s.query_offset("G", "T", q) for q in range(4)}
        assert all(0 < offsets[q] <= last[q] for q in range(4)), (offsets, last)
        with pytest.raises(SlaveOffsetsError):
            s.commit_offset("G", "T", 0, 0)
