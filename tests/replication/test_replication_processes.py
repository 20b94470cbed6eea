"""Master and slave as separate processes over loopback, killed with
SIGKILL (docs/format.md §21): after every run each message a
SYNC_MASTER acknowledged is on the slave, the offsets both hold have equal
bytes, and every message the slave serves is whole."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from helpers.ha_util import assert_served_whole, commitlog_bytes, slave_config, wait_until
from helpers.paths import HELPERS
from rocketstore import BrokerRole, MessageStore, StoreConfig

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
        assert_served_whole(m, s, "T", 4)


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


class HoldingProxy:
    """Forwards a slave's connections to the master on ``target``, whole
    frames at a time; once ``cut`` is set it forwards the header and half
    the body of the next non-empty frame, then nothing more (``held`` is
    then that frame's start)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.cut = threading.Event()
        self.held: int | None = None
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                a, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                b = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                a.close()
                continue
            threading.Thread(target=self._copy, args=(a, b), daemon=True).start()
            threading.Thread(target=self._frames, args=(b, a), daemon=True).start()

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _copy(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                dst.sendall(data)
        self._close(src, dst)

    def _frames(self, src: socket.socket, dst: socket.socket) -> None:
        buf = b""
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                if self.held is not None:
                    continue  # holding: the rest is never sent
                buf += data
                while len(buf) >= 12:
                    start, size = struct.unpack(">qi", buf[:12])
                    if self.cut.is_set() and size > 0:
                        if len(buf) < 12 + size // 2:
                            break
                        dst.sendall(buf[:12 + size // 2])
                        self.held = start
                        break
                    if len(buf) < 12 + size:
                        break
                    dst.sendall(buf[:12 + size])
                    buf = buf[12 + size:]
        self._close(src, dst)

    def close(self) -> None:
        self.stopped = True
        self.server.close()


def _slave_end(out: Path) -> int:
    ends = [int(x.split()[1]) for x in out.read_text().splitlines()[:-1] if x.startswith("END ")]
    return ends[-1] if ends else -1


def test_kill_9_of_the_master_mid_frame(tmp_path: Path) -> None:
    port = _free_port()
    mout, sout = tmp_path / "master.out", tmp_path / "slave.out"
    proxy = HoldingProxy(port)
    master = Child("master", tmp_path / "m", port, mout)
    master.wait_ready()
    slave = Child("slave", tmp_path / "s", proxy.port, sout)
    try:
        slave.wait_ready()
        wait_until(lambda: len(_acks(mout)) > 100, 20, "acks")
        proxy.cut.set()
        wait_until(lambda: proxy.held is not None, 20, "half a frame sent")
        held = proxy.held
        assert held is not None
        # The slave took every frame before the half one, and none of it.
        wait_until(lambda: _slave_end(sout) == held, 10, "the frames before it applied")
        master.kill()  # the slave's connection ends inside the frame
        time.sleep(0.5)
        assert _slave_end(sout) == held
        proxy.held = None
        proxy.cut.clear()
        master = Child("master", tmp_path / "m", port, mout)
        master.wait_ready()
        n = len(_acks(mout))
        wait_until(lambda: len(_acks(mout)) > n + 100, 20, "acks after the master restarted")
        wait_until(lambda: _slave_end(sout) > held, 10, "the slave past the cut frame")
    finally:
        master.kill()
        slave.kill()
        proxy.close()
    _check(tmp_path, mout)


def test_kill_9_of_the_slave_holding_a_cut_record(tmp_path: Path) -> None:
    port = _free_port()
    mout, sout = tmp_path / "master.out", tmp_path / "slave.out"
    proxy = HoldingProxy(port)
    master = Child("master", tmp_path / "m", port, mout)
    master.wait_ready()
    slave = Child("slave", tmp_path / "s", proxy.port, sout)
    try:
        slave.wait_ready()
        wait_until(lambda: len(_acks(mout)) > 100, 20, "acks")
        proxy.cut.set()
        wait_until(lambda: proxy.held is not None, 20, "half a frame sent")
        held = proxy.held
        assert held is not None
        # Frames do not follow records: the slave's end is inside one.
        wait_until(lambda: _slave_end(sout) == held, 10, "the frames before it applied")
        slave.kill()
        proxy.held = None
        proxy.cut.clear()
        slave = Child("slave", tmp_path / "s", proxy.port, sout)
        slave.wait_ready()
        ready = [int(x.split()[1]) for x in sout.read_text().splitlines()
                 if x.startswith("READY ")]
        assert ready[-1] <= held  # recovered to its last complete record
        n = len(_acks(mout))
        wait_until(lambda: len(_acks(mout)) > n + 100, 20, "acks after the slave restarted")
        wait_until(lambda: _slave_end(sout) > held, 10, "the slave past the cut frame")
    finally:
        master.kill()
        slave.kill()
        proxy.close()
    _check(tmp_path, mout)


def _slave_end(out: Path) -> int:
    ends = [int(x.split()[1]) for x in out.read_text().splitlines()[:-1] if x.startswith("END ")]
    return ends[-1] if ends else 0


def test_kill_9_of_a_slave_catching_up_across_many_files(tmp_path: Path) -> None:
    # The slave's appends of a catch-up (docs/format.md §21.4) are killed
    # mid-way twice, each time past some file rolls; recovered, it resumes
    # and ends with the master's bytes.
    cfg = StoreConfig(store_path=str(tmp_path / "m"), broker_role=BrokerRole.ASYNC_MASTER,
                      ha_listen_port=0, ha_new_slave_from_first_file=True,
                      mapped_file_size_commit_log=64 * 1024)
    with MessageStore(cfg) as m:
        bodies = [bytes([i % 251]) * 300 for i in range(5000)]
        for q in range(12):
            m.put_batch("T", bodies, q % 4)
        end = m.max_phy_offset
        sout = tmp_path / "slave.out"
        seen = []
        for _ in range(2):
            slave = Child("slave", tmp_path / "s", m.ha_port, sout)
            try:
                slave.wait_ready()
                before = _slave_end(sout)
                wait_until(lambda b=before: _slave_end(sout) > b + 256 * 1024, 30,
                           "the slave got some files further")
            finally:
                slave.kill()
            seen.append(_slave_end(sout))
        assert seen[-1] < end, f"killed mid-way ({seen} of {end})"
        slave = Child("slave", tmp_path / "s", m.ha_port, sout)
        try:
            slave.wait_ready()
            wait_until(lambda: _slave_end(sout) == end, 60, "caught up")
        finally:
            slave.kill()
        with MessageStore(slave_config(tmp_path / "s", None)) as s:
            assert s.max_phy_offset == end
            theirs = commitlog_bytes(tmp_path / "m", 0, end)
            assert commitlog_bytes(tmp_path / "s", 0, end) == theirs
            assert_served_whole(m, s, "T", 4)
