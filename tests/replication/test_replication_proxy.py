"""A proxy between slave and master that trickles, pauses and cuts the
connection (docs/format.md §21.3): the slave takes only whole frames,
reconnects after a cut or a stall, and ends with the master's bytes; every
SYNC_MASTER-acknowledged message is on it."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from helpers.ha_util import (
    assert_served_whole,
    commitlog_bytes,
    master_config,
    slave_config,
    wait_until,
)
from rocketstore import MessageStore, StoredNotFlushedError


class Proxy:
    """Forwards connections to ``port``; ``mode`` says how bytes travel."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.mode = "plain"
        self.connections = 0
        self.stopped = False
        self.cut_now = threading.Event()
        self.rng = random.Random(7)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                a, _ = self.sock.accept()
            except TimeoutError:
                continue
            b = socket.create_connection(("127.0.0.1", self.target))
            self.connections += 1
            self.cut_now.clear()
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.05)
        try:
            while not self.stopped and not self.cut_now.is_set():
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                while self.mode == "pause" and not self.stopped:
                    time.sleep(0.01)
                if self.mode == "trickle":
                    i = 0
                    while i < len(data):
                        n = self.rng.randint(1, 13)
                        dst.sendall(data[i:i + n])
                        i += n
                        if self.rng.random() < 0.01:
                            time.sleep(0.001)
                else:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self.stopped = True
        self.thread.join()
        self.sock.close()


@contextlib.contextmanager
def _proxy(port: int) -> Iterator[Proxy]:
    p = Proxy(port)
    try:
        yield p
    finally:
        p.close()


def test_trickle_pause_and_cut(tmp_path: Path) -> None:
    acked: list[tuple[int, int]] = []
    with MessageStore(master_config(tmp_path / "m", slave_timeout=2000)) as m, \
            _proxy(m.ha_port) as proxy, \
            MessageStore(slave_config(tmp_path / "s", proxy.port)) as s:
        wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")

        def put_for(seconds: float) -> None:
            end = time.monotonic() + seconds
            i = 0
            while time.monotonic() < end:
                try:
                    r = m.put("T", f"{i}".encode() * 40, i % 4)
                    acked.append((r.wrote_offset, r.wrote_bytes))
                except StoredNotFlushedError:
                    pass
                i += 1

        proxy.mode = "trickle"
        put_for(1.0)
        # A pause shorter than housekeeping: puts wait, then go on.
        proxy.mode = "pause"
        threading.Timer(0.4, lambda: setattr(proxy, "mode", "plain")).start()
        put_for(1.0)
        # Cut mid-stream: the slave reconnects and resumes from its end.
        before = proxy.connections
        proxy.cut_now.set()
        put_for(1.0)
        wait_until(lambda: proxy.connections > before, what="reconnect")
        proxy.mode = "trickle"
        put_for(1.0)
        end = m.max_phy_offset
        wait_until(lambda: s.max_phy_offset == end, 20, what="caught up")
        assert len(acked) > 20
        for off, size in acked:
            assert off + size <= s.max_phy_offset
        start = s.min_phy_offset
        assert commitlog_bytes(tmp_path / "s", start, end) == commitlog_bytes(tmp_path / "m",
                                                                              start, end)
        wait_until(lambda: s.dispatch_behind_bytes() == 0, what="dispatched")
        assert s.running_flags == []
        # Nothing the slave serves is torn.
        assert assert_served_whole(m, s, "T", 4) >= len(acked)
