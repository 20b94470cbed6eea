"""The master's frames and both sides' timers, seen on the wire
(docs/format.md §21.2, §21.3): a raw socket plays the slave of a real
master, or the master of a real slave."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from helpers.ha_util import SEGMENT, commitlog_bytes, master_config, slave_config, wait_until
from rocketstore import MessageStore


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _frame(conn: socket.socket) -> tuple[int, bytes]:
    """The next frame: its start and body."""
    start, size = struct.unpack(">qi", _recv_exact(conn, 12))
    return start, _recv_exact(conn, size)


def _closed_after(conn: socket.socket, limit: float) -> float:
    """Seconds until the peer closes ``conn`` (what it sends is read and
    dropped); fails after ``limit``."""
    t0 = time.monotonic()
    conn.settimeout(0.05)
    while time.monotonic() - t0 < limit:
        try:
            if not conn.recv(1 << 16):
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - t0
    raise AssertionError(f"not closed within {limit} s")


@pytest.mark.parametrize("batch", [None, 5000])
def test_frames_hold_at_most_the_batch_and_never_cross_a_segment_end(
        tmp_path: Path, batch: int | None) -> None:
    kw = {} if batch is None else {"ha_transfer_batch_size": batch}
    cfg = master_config(tmp_path / "m", sync=False, ha_new_slave_from_first_file=True, **kw)
    limit = batch or 32 * 1024  # ha_transfer_batch_size's default, 32 KiB
    with MessageStore(cfg) as m:
        for i in range(700):
            m.put("T", bytes([i % 251]) * 300, i % 4)
        end = m.max_phy_offset
        assert end > 3 * SEGMENT
        with socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
            peer.settimeout(5)
            peer.sendall((0).to_bytes(8, "big"))
            got = bytearray()
            sizes = []
            while len(got) < end:
                start, body = _frame(peer)
                if not body:
                    continue  # a heartbeat
                assert start == len(got), "frames follow each other"
                assert len(body) <= limit
                assert start % SEGMENT + len(body) <= SEGMENT, "a frame crossed a segment end"
                sizes.append(len(body))
                got += body
    assert bytes(got) == commitlog_bytes(tmp_path / "m", 0, end)
    assert max(sizes) == limit  # full frames are the batch size, not less
    # A segment's last frame ends at the segment end (its blank included).
    assert any((s + n) % SEGMENT == 0 for s, n in _starts(sizes))


def _starts(sizes: list[int]) -> list[tuple[int, int]]:
    out, off = [], 0
    for n in sizes:
        out.append((off, n))
        off += n
    return out


def test_written_bytes_are_sent_before_they_are_flushed(tmp_path: Path) -> None:
    cfg = master_config(tmp_path / "m", sync=False, flush_interval_commit_log=60_000,
                        flush_commit_log_least_pages=1000,
                        flush_commit_log_thorough_interval=600_000)
    with MessageStore(cfg) as m:
        with socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
            peer.settimeout(5)
            peer.sendall((0).to_bytes(8, "big"))
            for i in range(20):
                m.put("T", b"u" * 200, i % 2)
            end = m.max_phy_offset
            got = bytearray()
            while len(got) < end:
                got += _frame(peer)[1]
            flushed = m.stats().flushed_offset
            assert flushed is not None and flushed < end
    assert bytes(got) == commitlog_bytes(tmp_path / "m", 0, end)


def test_an_idle_master_sends_heartbeats_at_its_interval(tmp_path: Path) -> None:
    # ha_send_heartbeat_interval 100 ms (helpers.ha_util.SHORT).
    with MessageStore(master_config(tmp_path / "m", sync=False)) as m:
        m.put("T", b"h" * 100, 0)
        end = m.max_phy_offset
        with socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
            peer.settimeout(5)
            peer.sendall(end.to_bytes(8, "big"))
            t0 = time.monotonic()
            beats = []
            while time.monotonic() - t0 < 1.0:
                start, body = _frame(peer)
                assert (start, body) == (end, b"")  # empty, at the next offset to send
                beats.append(time.monotonic())
                peer.sendall(end.to_bytes(8, "big"))  # a live slave keeps reporting
    gaps = [b - a for a, b in zip([t0, *beats[:-1]], beats, strict=True)]
    assert 5 <= len(beats) <= 12, gaps
    assert min(gaps) >= 0.07, gaps


def test_the_master_closes_a_slave_that_stops_reporting(tmp_path: Path) -> None:
    # ha_housekeeping_interval 800 ms; heartbeats keep flowing to the peer.
    with MessageStore(master_config(tmp_path / "m", sync=False)) as m:
        with socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
            peer.sendall((0).to_bytes(8, "big"))
            wait_until(lambda: bool(m.ha_status()["slaves"]), what="connected")
            took = _closed_after(peer, 5)
        assert 0.7 <= took <= 3, took
        wait_until(lambda: m.ha_status()["slaves"] == [], what="forgotten")
        # A peer that keeps reporting stays connected well past the interval.
        with socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
            peer.settimeout(0.2)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2.0:
                peer.sendall((0).to_bytes(8, "big"))
                try:
                    assert peer.recv(1 << 16), "closed while reporting"
                except TimeoutError:
                    pass
            assert len(m.ha_status()["slaves"]) == 1


def _accept_and_read_report(server: socket.socket) -> socket.socket:
    conn, _ = server.accept()
    conn.settimeout(5)
    _recv_exact(conn, 8)
    return conn


def test_a_slave_closes_a_silent_master_and_connects_again(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        port = server.getsockname()[1]
        with MessageStore(slave_config(tmp_path / "s", port)) as s:
            # Accepted, then not a byte (not even a heartbeat): closed after
            # ha_housekeeping_interval (800 ms).
            conn = _accept_and_read_report(server)
            with conn:
                took = _closed_after(conn, 5)
            assert 0.7 <= took <= 3, took
            wait_until(lambda: "no frame for 800 ms" in (s.ha_status()["error"] or ""),
                       what="the reason")
            # It connects again; heartbeats every 200 ms keep it connected.
            conn = _accept_and_read_report(server)
            with conn:
                conn.settimeout(0.05)
                t0 = time.monotonic()
                while time.monotonic() - t0 < 2.0:
                    conn.sendall(struct.pack(">qi", 0, 0))
                    time.sleep(0.2)
                    try:
                        assert conn.recv(64), "the slave closed a master that sends heartbeats"
                    except TimeoutError:
                        pass  # a report comes only every heartbeat interval
                assert s.ha_status()["connected"]
