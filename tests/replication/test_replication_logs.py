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
