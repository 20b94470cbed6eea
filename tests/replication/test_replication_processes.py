"""Master and slave as separate processes over loopback, killed with
SIGKILL (docs/format.md §21): after every run each message a
SYNC_MASTER acknowledged is on the slave, the offsets both hold have equal
bytes, and every message the slave serves is whole."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers.ha_util import commitlog_bytes, slave_config, wait_until
from helpers.paths import HELPERS
from rocketstore import MessageStore, StoreConfig

CHILD = HELPERS / "ha_child.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def _acks(out: Path) -> list[tuple[int, int]]:
    acks = []
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ACK":  # a torn last line is no ack
            acks.append((int(parts[1]), int(parts[2])))
    return acks


def _check(tmp: Path, master_out: Path) -> None:
    """Opens both stores (recovering them) and checks what the slave holds."""
    acks = _acks(master_out)
    assert len(acks) > 50
    m_cfg = StoreConfig(store_path=str(tmp / "m"), mapped_file_size_commit_log=64 * 1024)
    with MessageStore(m_cfg) as m, MessageStore(slave_config(tmp / "s", None)) as s:
        s_min, s_end, m_end = s.min_phy_offset, s.max_phy_offset, m.max_phy_offset
        for off, size in acks:
            assert off + size <= s_end, f"acknowledged message at {off} is not on the slave"
        assert s_min <= acks[0][0]
        shared = min(s_end, m_end)
        m_bytes = commitlog_bytes(tmp / "m", s_min, shared)
        assert commitlog_bytes(tmp / "s", s_min, shared) == m_bytes
        # Every message the slave serves is the master's, whole.
        for q in range(4):
            off = s.get_message("G", "T", q, 0, 1).min_offset
            while True:
                got = s.get_message("G", "T", q, off, 32)
                if not got.messages:
                    break
                mine = m.get_message("G", "T", q, off, len(got.messages))
                assert [x.body for x in got.messages] == [x.body for x in mine.messages]
                off = got.next_begin_offset


def test_kill_9_of_the_slave_and_of_the_master(tmp_path: Path) -> None:
    port = _free_port()
    mout, sout = tmp_path / "master.out", tmp_path / "slave.out"
    master = Child("master", tmp_path / "m", port, mout)
    master.wait_ready()
    slave = Child("slave", tmp_path / "s", port, sout)
    try:
        slave.wait_ready()
        wait_until(lambda: len(_acks(mout)) > 100, 20, "acks")
        # Kill the slave mid-append, restart it: it recovers and resumes.
        slave.kill()
        slave = Child("slave", tmp_path / "s", port, sout)
        slave.wait_ready()
        n = len(_acks(mout))
        wait_until(lambda: len(_acks(mout)) > n + 100, 20, "acks after the slave restarted")
        # Kill the master mid-frame, restart it on the same port.
        master.kill()
        master = Child("master", tmp_path / "m", port, mout)
        master.wait_ready()
        n = len(_acks(mout))
        wait_until(lambda: len(_acks(mout)) > n + 100, 20, "acks after the master restarted")
        time.sleep(0.2)
    finally:
        master.kill()
        slave.kill()
    _check(tmp_path, mout)
