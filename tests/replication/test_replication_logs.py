"""A slave whose master stays away logs it once, not at every attempt
(docs/format.md §21.1), and logs again when the state changes."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from helpers.ha_util import master_config, slave_config, wait_until
from rocketstore import MessageStore
from rocketstore._logging import pump_now


def test_a_master_that_stays_away_is_logged_once(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there once closed
    with caplog.at_level(logging.INFO, logger="rocketstore"):
        with MessageStore(slave_config(tmp_path / "s", port)) as slave:
            time.sleep(1.0)  # about ten attempts (ha_send_heartbeat_interval 100 ms)
            refused = [r for r in caplog.records if "cannot connect" in r.getMessage()]
            assert len(refused) == 1
            assert not slave.ha_status()["connected"]
            assert "cannot connect" in slave.ha_status()["error"]
            # The master comes: connected (logged), then gone again (logged once more).
            with MessageStore(master_config(tmp_path / "m", sync=False,
                                            ha_listen_port=port)) as m:
                wait_until(lambda: slave.ha_status()["connected"], what="connected")
                m.put("T", b"x", 0)
            time.sleep(1.0)
            refused = [r for r in caplog.records if "cannot connect" in r.getMessage()]
            assert len(refused) == 2
            assert any("connected to master" in r.getMessage() for r in caplog.records)


def _refused(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage() and r.levelno >= logging.WARNING]


def _report_past_the_end(port: int) -> None:
    """One connection whose first report lies past the master's end, read
    until the master closes it."""
    with socket.create_connection(("127.0.0.1", port)) as peer:
        peer.settimeout(3)
        peer.sendall((10**9).to_bytes(8, "big"))
        try:
            while peer.recv(100):
                pass
        except ConnectionError:
            pass


def test_a_slave_refused_again_and_again_is_warned_about_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Each attempt comes from a new port; the master warns once per host
    and reason, until a connection from that host works."""
    with caplog.at_level(logging.DEBUG, logger="rocketstore"):
        cfg = master_config(tmp_path / "m", sync=False, ha_allowed_slaves="10.9.9.9")
        with MessageStore(cfg) as m:
            with MessageStore(slave_config(tmp_path / "s", m.ha_port)):
                time.sleep(1.0)  # about ten attempts
            pump_now()
            assert len(_refused(caplog, "not in ha_allowed_slaves")) == 1
            assert len([r for r in caplog.records
                        if "not in ha_allowed_slaves" in r.getMessage()]) > 1
        with MessageStore(master_config(tmp_path / "m2", sync=False)) as m2:
            m2.put("T", b"x", 0)
            for _ in range(4):  # a first report past the master's end, four times
                _report_past_the_end(m2.ha_port)
            pump_now()
            assert len(_refused(caplog, "closing the connection of slave")) == 1
            # A connection that works clears the record: the next failure warns.
            with MessageStore(slave_config(tmp_path / "s2", m2.ha_port)) as s2:
                wait_until(lambda: s2.ha_status()["connected"], what="connected")
                wait_until(lambda: s2.max_phy_offset == m2.max_phy_offset, what="caught up")
            _report_past_the_end(m2.ha_port)
            time.sleep(0.3)
            pump_now()
            assert len(_refused(caplog, f"{10**9}")) == 2
