"""The offsets sync (docs/format.md §21.7): a rocketstore slave takes its
master's consumer and delay offsets from the master's offsets listener, no
further ahead than its own CommitLog; commits on a slave are refused; a
master without the service (or a bad snapshot) changes nothing."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.ha_util import master_config, slave_config, wait_until
from rocketstore import MessageStore, SlaveOffsetsError
from rocketstore._logging import pump_now
from rocketstore.config.files import DelayOffsets
from rocketstore.consumers.offsets import ConsumerOffsets

FAST = {"ha_offsets_interval": 100, "message_delay_level": "1s 2s"}


def _synced_slave(tmp: Path, m: MessageStore, **kw: object) -> MessageStore:
    return MessageStore(slave_config(
        tmp / "s", m.ha_port, ha_offsets_master_address=f"127.0.0.1:{m.ha_offsets_port}",
        **FAST, **kw))  # type: ignore[arg-type]


def test_offsets_reach_the_slave_and_commits_there_are_refused(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False, **FAST)) as m:
        assert m.ha_offsets_port and m.ha_offsets_port != m.ha_port
        with _synced_slave(tmp_path, m) as s:
            for i in range(40):
                m.put("T", b"x%d" % i, i % 4)
            m.put("T", b"later", 0, delay_level=1)
            m.commit_offsets("G", "T", {0: 7, 1: 3})
            m.commit_offset("H", "T", 2, 5)
            wait_until(lambda: s.query_offset("G", "T", 0) == 7, what="offsets synced")
            assert (s.query_offset("G", "T", 1), s.query_offset("H", "T", 2)) == (3, 5)
            # Delayed delivery runs on the master; its progress reaches the slave.
            delay_file = tmp_path / "s" / "config" / DelayOffsets.FILE_NAME
            wait_until(lambda: delay_file.exists()
                       and DelayOffsets.load(delay_file).table() == {1: 1},
                       what="delay offsets synced")
            st = s.ha_status()["offsets"]
            assert st["error"] is None and st["last_sync"] and st["taken"]
            assert m.ha_status()["offsets"]["served"] > 0
            # The synced table replaces the slave's: a group deleted on the master goes.
            m.delete_consumer_group("H")
            wait_until(lambda: s.query_offset("H", "T", 2) == -1, what="deletion synced")
            # Commits on the slave are refused, in every form.
            with pytest.raises(SlaveOffsetsError, match="SLAVE"):
                s.commit_offset("G", "T", 0, 1)
            with pytest.raises(SlaveOffsetsError):
                s.reset_consumer_group("G", "earliest")
            with pytest.raises(SlaveOffsetsError):
                s.delete_consumer_group("G")
            wait_until(lambda: s.get_max_offset_in_queue("T", 0) >= 10, what="dispatch")
            # A consumer on the slave reads from the synced offsets; its
            # auto-commits stay in the consumer, an explicit commit raises.
            with s.consumer("G", "T", exclusive=True, auto_commit_interval=0) as c:
                got = []
                for _ in range(50):
                    got += [(x.queue_id, x.queue_offset) for x in c.poll(timeout=0.05)]
                    if (0, 9) in got:
                        break
                assert min(o for q, o in got if q == 0) == 7
                assert min(o for q, o in got if q == 1) == 3
                with pytest.raises(SlaveOffsetsError):
                    c.commit()
            assert s.query_offset("G", "T", 0) == 7
            # A shared group's member reads there too (membership is the slave's own).
            with s.consumer("G", "T", auto_commit_interval=0) as member:
                for _ in range(50):
                    if member.poll(timeout=0.05):
                        break
                else:
                    raise AssertionError("the member read nothing")
                pos = member.positions()  # started at the synced offsets, only move on
                assert pos[0] >= 7 and pos[1] >= 3
            # A reader opened as a SLAVE refuses commits too.
            with MessageStore(slave_config(tmp_path / "s", None), read_only=True) as r:
                assert r.query_offset("G", "T", 0) == 7
                with pytest.raises(SlaveOffsetsError):
                    r.commit_offset("G", "T", 0, 1)
            m.commit_offset("G", "T", 0, 9)
            wait_until(lambda: s.query_offset("G", "T", 0) == 9, what="a later commit synced")
    # Written the crash-safe way: the slave's files hold the master's table.
    on_disk = ConsumerOffsets.load(tmp_path / "s" / "config" / ConsumerOffsets.FILE_NAME)
    assert on_disk.offsets("G", "T") == {0: 9, 1: 3}
    assert on_disk.offsets("H", "T") == {}


def test_offsets_wait_until_the_slave_holds_the_log_they_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nowhere = sock.getsockname()[1]
    with MessageStore(master_config(tmp_path / "m", sync=False, **FAST)) as m:
        m.put("T", b"x", 0)
        m.commit_offset("G", "T", 0, 1)
        # Offsets from the master, but no CommitLog: never applied.
        with caplog.at_level(logging.INFO, logger="rocketstore"), MessageStore(slave_config(
                tmp_path / "s", nowhere, **FAST,
                ha_offsets_master_address=f"127.0.0.1:{m.ha_offsets_port}")) as s:
            wait_until(lambda: s.ha_status()["offsets"]["last_fetch"] is not None,
                       what="a fetch")
            wait_until(lambda: m.ha_status()["offsets"]["served"] >= 3, what="three fetches")
            assert s.ha_status()["offsets"]["last_sync"] is None
            assert s.query_offset("G", "T", 0) == -1
            pump_now()
            works = [r for r in caplog.records if "offsets sync from" in r.getMessage()]
            assert len(works) == 1  # logged once, not at every fetch
        # The same slave following the master: applied once it holds the log.
        with _synced_slave(tmp_path, m) as s:
            wait_until(lambda: s.query_offset("G", "T", 0) == 1, what="offsets synced")
            assert s.max_phy_offset >= m.max_phy_offset


def test_a_master_without_the_service_is_logged_once(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nowhere = sock.getsockname()[1]
    with caplog.at_level(logging.INFO, logger="rocketstore"):
        with MessageStore(master_config(tmp_path / "m", sync=True)) as m:
            with MessageStore(slave_config(
                    tmp_path / "s", m.ha_port, **FAST,
                    ha_offsets_master_address=f"127.0.0.1:{nowhere}")) as s:
                wait_until(lambda: len(m.ha_status()["slaves"]) == 1, what="connected")
                for i in range(10):  # SYNC_MASTER: each put waits for the slave
                    m.put("T", b"x%d" % i, 0)
                wait_until(lambda: s.ha_status()["offsets"]["error"] is not None, what="error")
                time.sleep(0.6)  # several more rounds (ha_offsets_interval 100 ms)
                assert s.ha_status()["offsets"]["last_fetch"] is None
                assert s.max_phy_offset == m.max_phy_offset
                assert m.ha_status()["offsets"]["served"] == 0
    logged = [r for r in caplog.records if "no offsets from" in r.getMessage()]
    assert len(logged) == 1 and "cannot connect" in logged[0].getMessage()


class _FakeMaster:
    """Answers every offsets request with ``reply``."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except TimeoutError:
                continue
            with c:
                c.settimeout(2)
                self.requests.append(c.recv(8))
                c.sendall(self.reply)

    def close(self) -> None:
        self._stop.set()
        self._t.join()
        self.sock.close()


def _snapshot(consumer: bytes, delay: bytes, *, end: int = 0, bad_crc: bool = False) -> bytes:
    """A snapshot as docs/format.md §21.7 spells it."""
    head = b"RSOF" + struct.pack(">IQqII", 1, end, 1_700_000_000_000, len(consumer), len(delay))
    body = head + consumer + delay
    crc = zlib.crc32(body) ^ (1 if bad_crc else 0)
    return body + struct.pack(">I", crc)


@pytest.fixture
def fake() -> Iterator[list[_FakeMaster]]:
    made: list[_FakeMaster] = []
    yield made
    for f in made:
        f.close()


@pytest.mark.parametrize("bad_crc", [False, True])
def test_a_snapshot_is_taken_only_whole_and_checked(tmp_path: Path, fake: list[_FakeMaster],
                                                    bad_crc: bool) -> None:
    consumer = b'{"offsetTable":{"T@G":{0:4,3:2}}}'
    f = _FakeMaster(_snapshot(consumer, b'{"offsetTable":{2:8}}', bad_crc=bad_crc))
    fake.append(f)
    with MessageStore(slave_config(tmp_path / "s", None, **FAST,
                                   ha_offsets_master_address=f"127.0.0.1:{f.port}")) as s:
        wait_until(lambda: len(f.requests) >= 3, what="requests")
        assert f.requests[0] == b"RSOQ" + struct.pack(">I", 1)
        if bad_crc:
            assert "checksum" in s.ha_status()["offsets"]["error"]
            assert s.query_offset("G", "T", 0) == -1
        else:
            wait_until(lambda: s.query_offset("G", "T", 3) == 2, what="applied")
            assert s.query_offset("G", "T", 0) == 4
            delay = DelayOffsets.load(tmp_path / "s" / "config" / DelayOffsets.FILE_NAME)
            assert delay.table() == {2: 8}


def test_an_invalid_table_in_a_whole_snapshot_changes_nothing(
        tmp_path: Path, fake: list[_FakeMaster], caplog: pytest.LogCaptureFixture) -> None:
    f = _FakeMaster(_snapshot(b'{"offsetTable":{"no-separator":{0:1}}}', b"{}"))
    fake.append(f)
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        with MessageStore(slave_config(tmp_path / "s", None, **FAST,
                                       ha_offsets_master_address=f"127.0.0.1:{f.port}")) as s:
            wait_until(lambda: len(f.requests) >= 4, what="requests")
            assert s.consumer_groups() == []
    bad = [r for r in caplog.records if "snapshot is not valid" in r.getMessage()]
    assert len(bad) == 1


def test_allowed_slaves_refuse_offsets_to_others(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False, ha_allowed_slaves="10.9.9.9",
                                    **FAST)) as m:
        m.commit_offset("G", "T", 0, 1)
        with _synced_slave(tmp_path, m) as s:
            wait_until(lambda: s.ha_status()["offsets"]["error"] is not None, what="refused")
            assert m.ha_status()["offsets"]["served"] == 0
            assert s.query_offset("G", "T", 0) == -1


def test_the_offsets_port_defaults_to_the_ha_port_plus_one(tmp_path: Path) -> None:
    for _ in range(20):  # find two free neighbouring ports
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            try:
                with socket.socket() as b:
                    b.bind(("127.0.0.1", port + 1))
                    break
            except OSError:
                continue
    with MessageStore(master_config(tmp_path / "m", sync=False, ha_listen_port=port,
                                    **FAST)) as m:
        assert (m.ha_port, m.ha_offsets_port) == (port, port + 1)
        m.commit_offset("G", "T", 0, 0)
        with MessageStore(slave_config(tmp_path / "s", port, **FAST)) as s:
            assert s.ha_status()["offsets"]["address"] == f"127.0.0.1:{port + 1}"
            wait_until(lambda: s.query_offset("G", "T", 0) == 0, what="synced")


def test_an_offsets_port_in_use_refuses_the_open_and_releases_the_store(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=str(port)):
            MessageStore(master_config(tmp_path / "m", ha_offsets_port=port)).start()
    with MessageStore(master_config(tmp_path / "m", ha_offsets_port=port)) as m:
        assert m.ha_offsets_port == port



def test_a_default_offsets_port_in_use_is_logged_and_the_store_runs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1] - 1  # the HA port whose + 1 is taken
        with caplog.at_level(logging.WARNING, logger="rocketstore"):
            try:
                m = MessageStore(master_config(tmp_path / "m", sync=False,
                                               ha_listen_port=port)).start()
            except OSError:
                pytest.skip(f"port {port} itself is in use")
            with m:
                assert m.ha_port == port and m.ha_offsets_port is None
                m.put("T", b"x", 0)
        assert any("cannot serve offsets" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("request_bytes", [b"", b"RSOQ", b"GET / HTTP/1.0\r\n\r\n",
                                           b"RSOQ\x00\x00\x00\x02"])
def test_a_bad_request_is_closed_unanswered(tmp_path: Path, request_bytes: bytes) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False, **FAST)) as m:
        m.commit_offset("G", "T", 0, 1)
        with socket.create_connection(("127.0.0.1", m.ha_offsets_port), timeout=5) as c:
            c.sendall(request_bytes)
            c.shutdown(socket.SHUT_WR)
            try:
                got = c.recv(64)
            except ConnectionResetError:  # closed with bytes left unread
                got = b""
            assert got == b""  # closed, nothing sent
        # A well-formed request is still answered (the commit is served
        # from the next renewal on, ha_offsets_interval 100 ms).
        wait_until(lambda: b"T@G" in _request(m.ha_offsets_port), what="served")
        reply = _request(m.ha_offsets_port)
        assert reply[:8] == b"RSOF" + struct.pack(">I", 1)
        assert struct.unpack(">I", reply[-4:])[0] == zlib.crc32(reply[:-4])


def _request(port: int | None) -> bytes:
    """One offsets request's whole reply."""
    assert port is not None
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(b"RSOQ" + struct.pack(">I", 1))
        reply = b""
        while chunk := c.recv(65536):
            reply += chunk
    return reply


def test_a_promoted_slave_keeps_its_own_commits_while_the_old_master_commits_on(
    tmp_path: Path,
) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False, **FAST)) as m:
        with _synced_slave(tmp_path, m) as s:
            for i in range(8):
                m.put("T", b"x%d" % i, 0)
            m.commit_offset("G", "T", 0, 5)
            wait_until(lambda: s.query_offset("G", "T", 0) == 5, what="offsets synced")
            s.promote()
            s.commit_offset("G", "T", 0, 6)
            # The old master goes on committing: none of it reaches the
            # promoted store, whose own commit stands.
            for off in (7, 8):
                m.commit_offset("G", "T", 0, off)
                time.sleep(0.3)  # three sync intervals each
            assert s.query_offset("G", "T", 0) == 6
            assert s.ha_status()["role"] == "ASYNC_MASTER"
