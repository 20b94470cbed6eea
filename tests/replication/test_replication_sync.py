"""A SYNC_MASTER put's wait (docs/format.md §21.5): ``ha_slave_fallbehind_max``
decides between waiting and ``SLAVE_NOT_AVAILABLE``, and under SYNC_FLUSH
the put waits for its flush and its slave, the replication status
replacing the flush's."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from helpers.ha_util import master_config, slave_config, wait_until
from rocketstore import FlushDiskType, MessageStore, PutStatus, StoredNotFlushedError


def _status(m: MessageStore, body: bytes) -> tuple[PutStatus, float]:
    t = time.monotonic()
    try:
        status = m.put("T", body, 0).status
    except StoredNotFlushedError as e:
        status = e.status
    return status, time.monotonic() - t


def test_fallbehind_max_decides_between_waiting_and_not_available(tmp_path: Path) -> None:
    cfg = master_config(tmp_path / "m", slave_timeout=300, ha_slave_fallbehind_max=1000)
    with MessageStore(cfg) as m, socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
        peer.sendall((0).to_bytes(8, "big"))  # reports 0, then nothing
        wait_until(lambda: bool(m.ha_status()["slaves"]) and
                   m.ha_status()["slaves"][0]["acked_offset"] == 0, what="report")
        # Within ha_slave_fallbehind_max of the report: the put waits for it.
        status, took = _status(m, b"s" * 100)
        assert status == PutStatus.FLUSH_SLAVE_TIMEOUT and took >= 0.25
        # Past it: SLAVE_NOT_AVAILABLE at once.
        status, took = _status(m, b"b" * 1000)
        assert status == PutStatus.SLAVE_NOT_AVAILABLE and took < 0.25
        # Once it reports the end, the same large put is within the margin
        # of its report again: it waits instead.
        end = m.max_phy_offset
        peer.sendall(end.to_bytes(8, "big"))
        wait_until(lambda: m.ha_status()["slaves"][0]["acked_offset"] == end, what="report")
        status, took = _status(m, b"b" * 800)
        assert status == PutStatus.FLUSH_SLAVE_TIMEOUT and took >= 0.25

@pytest.mark.parametrize("with_slave", [False, True])
def test_sync_flush_waits_for_the_flush_and_the_slave(tmp_path: Path, with_slave: bool) -> None:
    cfg = master_config(tmp_path / "m", flush_disk_type=FlushDiskType.SYNC_FLUSH)
    with MessageStore(cfg) as m:
        if with_slave:
            s = MessageStore(slave_config(tmp_path / "s", m.ha_port)).start()
            wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")
        try:
            for i in range(20):
                status, _ = _status(m, f"f{i}".encode() * 30)
                end = m.max_phy_offset
                flushed = m.stats().flushed_offset
                assert flushed is not None and flushed >= end, "returned before its flush"
                if with_slave:
                    assert status == PutStatus.PUT_OK
                    assert s.max_phy_offset >= end
                else:
                    # Flushed here, not replicated: the replication status wins.
                    assert status == PutStatus.SLAVE_NOT_AVAILABLE
        finally:
            if with_slave:
                s.close()
