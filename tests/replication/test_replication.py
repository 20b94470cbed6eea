"""Replication in one process (docs/format.md §21): a slave
holds the master's CommitLog byte for byte and serves it, refuses puts; a
SYNC_MASTER put waits for a slave; where a new slave starts; segment sizes
that differ stop replication with both named."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import warnings
from pathlib import Path

import pytest

from helpers.ha_util import (
    SEGMENT,
    commitlog_bytes,
    master_config,
    segment_starts,
    slave_config,
    wait_until,
)
from rocketstore import Message, MessageStore, PutStatus, StoreConfig, StoredNotFlushedError
from rocketstore.aio import aput
from rocketstore.errors import MessageRefusedError


def _put_many(store: MessageStore, n: int, size: int = 300) -> list[int]:
    """Puts ``n`` messages over 4 queues; the end offset of each."""
    ends = []
    for i in range(n):
        r = store.put("T", bytes([i % 251]) * size, i % 4, keys=f"k{i}")
        ends.append(r.wrote_offset + r.wrote_bytes)
    return ends


def test_a_slave_holds_the_masters_bytes_and_serves_them(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m")) as m:
        assert m.ha_port
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: len(m.ha_status()["slaves"]) == 1, what="slave connected")
            # SYNC_MASTER: every put is acknowledged only once the slave holds it.
            ends = _put_many(m, 800)
            assert s.max_phy_offset >= ends[-1]
            assert len(segment_starts(tmp_path / "m")) > 2
            end = m.max_phy_offset
            wait_until(lambda: s.max_phy_offset == end, what="slave caught up")
            wait_until(lambda: s.dispatch_behind_bytes() == 0, what="slave dispatched")
            got = s.get_message("G", "T", 1, 0, 500)
            assert got.max_offset == 200 and len(got.messages) == 32
            assert [x.body for x in got.messages[:3]] == [bytes([i]) * 300 for i in (1, 5, 9)]
            assert s.query_message("T", "k9", 10)  # the slave's own index
            with pytest.raises(MessageRefusedError) as e:
                s.put("T", b"no", 0)
            assert e.value.status == PutStatus.SERVICE_NOT_AVAILABLE
            assert "SLAVE" in str(e.value)
            st = s.ha_status()
            assert st["connected"] and st["applied_offset"] == end and st["error"] is None
            slaves = m.ha_status()["slaves"]
            assert slaves[0]["acked_offset"] == end and slaves[0]["lag_bytes"] == 0
            stats = m.stats().replication
            assert stats is not None and stats["slaves"][0]["acked_offset"] == end
            assert s.stats().replication["applied_offset"] == end  # type: ignore[index]
    assert commitlog_bytes(tmp_path / "m", 0, end) == commitlog_bytes(tmp_path / "s", 0, end)
    assert segment_starts(tmp_path / "m") == segment_starts(tmp_path / "s")


def test_sync_master_without_a_slave_is_slave_not_available(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m")) as m:
        with pytest.raises(StoredNotFlushedError) as e:
            m.put("T", b"x", 0)
        assert e.value.status == PutStatus.SLAVE_NOT_AVAILABLE
        assert "no slave is connected" in str(e.value)
        # Stored all the same.
        wait_until(lambda: m.dispatch_behind_bytes() == 0, what="dispatch")
        assert m.get_message("G", "T", 0, 0).messages[0].body == b"x"


def test_sync_master_times_out_when_the_slave_does_not_report(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", slave_timeout=300)) as m:
        # A slave that reports once (offset 0) and then never again.
        with socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
            peer.sendall((0).to_bytes(8, "big"))
            wait_until(lambda: m.ha_status()["slaves"] and
                       m.ha_status()["slaves"][0]["acked_offset"] == 0, what="report")
            t = time.monotonic()
            with pytest.raises(StoredNotFlushedError) as e:
                m.put("T", b"x", 0)
            assert e.value.status == PutStatus.FLUSH_SLAVE_TIMEOUT
            assert 0.25 < time.monotonic() - t < 3
            end = m.max_phy_offset
            # Its report acknowledges what is pending and later puts.
            peer.sendall(end.to_bytes(8, "big"))
            wait_until(lambda: m.ha_status()["slaves"][0]["acked_offset"] == end, what="ack")


def test_a_slave_too_far_behind_is_slave_not_available(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", ha_slave_fallbehind_max=1000)) as m:
        with socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
            peer.sendall((0).to_bytes(8, "big"))
            wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")
            with pytest.raises(StoredNotFlushedError) as e:
                m.put("T", b"x" * 2000, 0)
            assert e.value.status == PutStatus.SLAVE_NOT_AVAILABLE
            assert "ha_slave_fallbehind_max" in str(e.value)


def test_async_master_returns_at_once_and_a_late_slave_catches_up(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False)) as m:
        assert m.put("T", b"a", 0).status == PutStatus.PUT_OK
        _put_many(m, 10)
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == m.max_phy_offset, what="catch-up")


@pytest.mark.parametrize("first_file", [False, True])
def test_a_new_slave_starts_at_the_last_file_or_the_first(tmp_path: Path,
                                                           first_file: bool) -> None:
    cfg = master_config(tmp_path / "m", sync=False, ha_new_slave_from_first_file=first_file)
    with MessageStore(cfg) as m:
        _put_many(m, 700)
        starts = segment_starts(tmp_path / "m")
        assert len(starts) >= 3
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == m.max_phy_offset, what="catch-up")
            first = starts[0] if first_file else starts[-1]
            assert s.min_phy_offset == first
            assert segment_starts(tmp_path / "s")[0] == first
            end = m.max_phy_offset
            wait_until(lambda: s.dispatch_behind_bytes() == 0, what="dispatch")
            # The queues start where the copied records do.
            mq = m.get_message("G", "T", 0, 0, 1)
            got = s.get_message("G", "T", 0, 0, 1)
            assert got.max_offset == mq.max_offset
            assert (got.min_offset == 0) == first_file
            got = s.get_message("G", "T", 0, got.min_offset, 1000)
            assert got.messages
            assert all(x.commit_log_offset >= first for x in got.messages)
    m_bytes = commitlog_bytes(tmp_path / "m", first, end)
    assert m_bytes == commitlog_bytes(tmp_path / "s", first, end)


@pytest.mark.parametrize("slave_segment", [SEGMENT // 2, SEGMENT * 2])
def test_different_segment_sizes_stop_replication(tmp_path: Path, slave_segment: int) -> None:
    mcfg = master_config(tmp_path / "m", sync=False, ha_new_slave_from_first_file=True)
    with MessageStore(mcfg) as m:
        _put_many(m, 400)
        cfg = slave_config(tmp_path / "s", m.ha_port, mapped_file_size_commit_log=slave_segment)
        with MessageStore(cfg) as s:
            wait_until(lambda: s.ha_status()["stopped"], what="replication stopped")
            err = s.ha_status()["error"]
            assert str(slave_segment) in err and "mapped_file_size_commit_log" in err
            # The master's size too: its blank ends its file; a record of
            # its larger file crosses the slave's end.
            theirs = (f"is {SEGMENT})" if slave_segment > SEGMENT
                      else f"is larger than {slave_segment}")
            assert f"the master's {theirs}" in err, err
            # Nothing beyond this store's own segment geometry was written.
            assert s.max_phy_offset <= slave_segment


def test_a_slave_refuses_puts_without_a_master(tmp_path: Path) -> None:
    with MessageStore(slave_config(tmp_path / "s", None)) as s:
        with pytest.raises(MessageRefusedError):
            s.put_batch("T", [b"a", b"b"], 0)
        st = s.ha_status()
        assert st["role"] == "SLAVE" and not st["connected"]


def test_allowed_slaves_refuse_others_before_a_byte(tmp_path: Path) -> None:
    cfg = master_config(tmp_path / "m", sync=False, ha_allowed_slaves="10.9.9.9,192.168.0.0/16")
    with MessageStore(cfg) as m:
        m.put("T", b"x", 0)
        with socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
            peer.settimeout(3)
            try:
                peer.sendall((0).to_bytes(8, "big"))
                got = peer.recv(100)
            except ConnectionError:
                got = b""
            assert got == b""
        assert m.ha_status()["slaves"] == []
    ok = master_config(tmp_path / "m2", sync=False, ha_allowed_slaves="127.0.0.0/8")
    with MessageStore(ok) as m2:
        with MessageStore(slave_config(tmp_path / "s2", m2.ha_port)) as s2:
            wait_until(lambda: s2.ha_status()["connected"], what="allowed slave")


def test_the_listener_is_on_loopback_by_default(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m")) as m:
        assert m.config.ha_listen_address == "127.0.0.1"
        # Nobody listens when no port is set.
    with MessageStore(master_config(tmp_path / "n", ha_listen_port=None)) as n:
        assert n.ha_port is None


def test_a_broker_conf_port_is_logged_as_loopback_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        cfg = StoreConfig.from_properties({"storePathRootDir": "/x", "haListenPort": "10912"})
    assert cfg.ha_listen_port == 10912 and cfg.ha_listen_address == "127.0.0.1"
    assert any("every interface" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        StoreConfig.from_properties({"storePathRootDir": "/x", "haListenPort": "1",
                                     "haListenAddress": "0.0.0.0"})
    assert not any("every interface" in r.getMessage() for r in caplog.records)


def test_a_slave_whose_log_forked_stops_and_names_the_range(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "a", sync=False)) as a:
        _put_many(a, 50)
        with MessageStore(slave_config(tmp_path / "s", a.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == a.max_phy_offset, what="copy of a")
            assert s.ha_status()["verified"]
        end = a.max_phy_offset
    # Another master whose log has other bytes at the same offsets.
    with MessageStore(master_config(tmp_path / "b", sync=False,
                                    ha_new_slave_from_first_file=True)) as b:
        for i in range(60):
            b.put("OTHER", bytes([i]) * 333, 0)
        assert b.max_phy_offset > end
        before = commitlog_bytes(tmp_path / "s", 0, end)
        with MessageStore(slave_config(tmp_path / "s", b.ha_port)) as s:
            wait_until(lambda: s.ha_status()["stopped"], what="stopped")
            st = s.ha_status()
            assert st["diverged"] and not st["verified"]
            assert f", {end})" in st["error"] and "diverged" in st["error"]
            assert s.max_phy_offset == end
            # Never counted as holding the master's bytes past what matched.
            assert all(x["acked_offset"] < end for x in b.ha_status()["slaves"])
        assert commitlog_bytes(tmp_path / "s", 0, end) == before


def test_every_put_form_waits_for_the_slave(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", slave_timeout=300)) as m:
        with pytest.raises(StoredNotFlushedError) as e:
            m.put_batch("T", [b"a", b"b"], 0)
        assert e.value.status == PutStatus.SLAVE_NOT_AVAILABLE
        results = m.put_messages([Message("T", b"c", 1), Message("T", b"d", 2)], check=False)
        assert {r.status for r in results} == {PutStatus.SLAVE_NOT_AVAILABLE}
        # WAIT=false: acknowledged without a slave, as RocketMQ does.
        assert m.put("T", b"e", 0, properties={"WAIT": "false"}).status == PutStatus.PUT_OK
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")
            b = m.put_batch("T", [b"f", b"g"], 0)
            assert b.status == PutStatus.PUT_OK
            assert s.max_phy_offset >= b.wrote_offset + b.wrote_bytes
            results = m.put_messages([Message("T", b"h", 1), Message("T", b"i", 2)])
            assert all(r.ok for r in results)
            r = asyncio.run(aput(m, "T", b"j", 3))
            assert r.ok and s.max_phy_offset >= r.wrote_offset + r.wrote_bytes


def test_a_port_in_use_refuses_the_open_and_releases_the_store(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=str(port)):
            MessageStore(master_config(tmp_path / "m", ha_listen_port=port)).start()
    # Nothing held: the same store opens at once on a free port.
    with MessageStore(master_config(tmp_path / "m")) as m:
        assert m.ha_port and m.ha_port != port


def test_a_stopped_slave_opens_as_a_master_and_continues_the_queues(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False,
                                    ha_new_slave_from_first_file=True)) as m:
        _put_many(m, 100)
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == m.max_phy_offset, what="caught up")
        ends = {q: m.get_message("G", "T", q, 0, 1).max_offset for q in range(4)}
    # Failover by hand: the stopped slave opened as a master.
    cfg = master_config(tmp_path / "s", sync=False, ha_listen_port=None)
    with MessageStore(cfg) as new_master:
        for q in range(4):
            r = new_master.put("T", b"after", q)
            assert r.queue_offset == ends[q]
        got = new_master.get_message("G", "T", 0, ends[0], 5)
        assert [x.body for x in got.messages] == [b"after"]


def test_a_slave_serves_records_written_without_the_property_crc(tmp_path: Path) -> None:
    # A RocketMQ 4.9 master writes no __CRC32#: so does this master.
    cfg = master_config(tmp_path / "m", sync=False, enabled_append_prop_crc=False)
    with MessageStore(cfg) as m:
        _put_many(m, 30)
        end = m.max_phy_offset
        for _ in range(2):  # a fresh slave, then the same one reopened
            with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
                wait_until(lambda: s.max_phy_offset == end, what="caught up")
                wait_until(lambda: s.dispatch_behind_bytes() == 0, what="dispatched")
                assert [x.body for x in s.query_message("T", "k29", 5)] == [bytes([29]) * 300]
                assert len(s.get_message("G", "T", 1, 0, 32).messages) == 8


def test_concurrent_sync_master_puts_all_wait_for_the_slave(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m")) as m, \
            MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
        wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")
        ends: list[int] = []
        lock = threading.Lock()

        def worker(k: int) -> None:
            for i in range(100):
                r = m.put("T", f"{k}-{i}".encode(), k % 4)
                with lock:
                    ends.append(r.wrote_offset + r.wrote_bytes)
                assert s.max_phy_offset >= r.wrote_offset + r.wrote_bytes

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(ends) == 800


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_leaves_the_masters_connections_alone(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m")) as m, \
            MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
        wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")
        m.put("T", b"before", 0)
        peer = m.ha_status()["slaves"][0]["address"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
            pid = os.fork()
        if pid == 0:  # the child drops its copy of both stores
            try:
                m.close()
                s.close()
            finally:
                os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        time.sleep(0.3)
        r = m.put("T", b"after", 0)  # PUT_OK: the slave still connected
        assert s.max_phy_offset >= r.wrote_offset + r.wrote_bytes
        # The same connection (a reconnect would come from another port).
        assert [x["address"] for x in m.ha_status()["slaves"]] == [peer]


def test_a_new_slave_acknowledges_nothing_below_where_its_copy_starts(tmp_path: Path) -> None:
    cfg = master_config(tmp_path / "m", slave_timeout=1000, ha_housekeeping_interval=5000)
    with MessageStore(cfg) as m, socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
        wait_until(lambda: bool(m.ha_status()["slaves"]), what="connected")
        results: dict[str, PutStatus] = {}

        def put(name: str, body: bytes) -> None:
            try:
                results[name] = m.put("T", body, 0).status
            except StoredNotFlushedError as e:
                results[name] = e.status

        # "old" lands in the first file, "new" rolls to the second one.
        old = threading.Thread(target=put, args=("old", b"o" * 100))
        old.start()
        wait_until(lambda: m.max_phy_offset > 0, what="old appended")
        new = threading.Thread(target=put, args=("new", b"n" * (SEGMENT - 300)))
        new.start()
        wait_until(lambda: m.max_phy_offset > SEGMENT, what="new appended")
        # A new slave: sent the last file only, then it reports the end.
        peer.sendall((0).to_bytes(8, "big"))
        wait_until(lambda: m.ha_status()["slaves"][0]["acked_offset"] == 0, what="report")
        peer.sendall(m.max_phy_offset.to_bytes(8, "big"))
        old.join()
        new.join()
        assert results == {"old": PutStatus.FLUSH_SLAVE_TIMEOUT, "new": PutStatus.PUT_OK}
