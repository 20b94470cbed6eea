"""Replication is visible (docs/format.md §21.6): ``stats()``, ``rocketstore
info`` and ``rocketstore top`` show the role, the slaves or the master, the
lag and the offsets sync; a slave falling behind logs once per change."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers.ha_util import master_config, slave_config, wait_until
from rocketstore import MessageStore
from rocketstore.services.ha_status import STATUS_FILE

FAST = {"ha_offsets_interval": 100}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "rocketstore.cli", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def _info(path: Path) -> dict[str, Any]:
    return dict(json.loads(_cli("info", str(path), "--json").stdout))


def test_info_top_and_stats_show_replication(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False, **FAST)) as m:
        with MessageStore(slave_config(
                tmp_path / "s", m.ha_port, **FAST,
                ha_offsets_master_address=f"127.0.0.1:{m.ha_offsets_port}")) as s:
            for i in range(20):
                m.put("T", b"x%d" % i, 0)
            m.commit_offset("G", "T", 0, 3)
            end = m.max_phy_offset
            wait_until(lambda: s.query_offset("G", "T", 0) == 3, what="offsets synced")
            wait_until(lambda: m.ha_status()["slaves"][0]["acked_offset"] == end, what="acked")
            # The sync records its time just after it applied the tables.
            wait_until(lambda: s.ha_status()["offsets"]["last_sync"] is not None,
                       what="sync recorded")
            st = s.stats().replication
            assert st is not None and st["role"] == "SLAVE" and st["offsets"]["last_sync"]
            # Other processes see what the writers last wrote (every second).
            wait_until(lambda: json.loads((tmp_path / "s" / "config" / STATUS_FILE).read_text())
                       ["status"]["offsets"]["last_sync"] is not None, 5, "status file")
            wait_until(lambda: json.loads((tmp_path / "m" / "config" / STATUS_FILE).read_text())
                       ["status"]["slaves"][0]["acked_offset"] == end, 5, "status file")
            slave = _info(tmp_path / "s")["replication"]
            assert slave["role"] == "SLAVE" and slave["connected"] and slave["verified"]
            assert slave["applied_offset"] == end and slave["as_of"] > 0
            assert slave["master_address"] == f"127.0.0.1:{m.ha_port}"
            assert slave["offsets"]["address"] == f"127.0.0.1:{m.ha_offsets_port}"
            # The groups command does not change a running slave's offsets.
            r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "groups",
                                str(tmp_path / "s"), "--group", "G", "--delete"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode != 0 and "running SLAVE" in r.stderr
            assert s.query_offset("G", "T", 0) == 3
            text = _cli("info", str(tmp_path / "s")).stdout
            assert "replication: SLAVE" in text and "connected, verified" in text
            assert "offsets sync" in text and "last applied" in text
            frame = json.loads(_cli("top", str(tmp_path / "m"), "--once", "--interval", "0.1",
                                    "--json").stdout)
            master = frame["replication"]
            assert master["role"] == "ASYNC_MASTER" and master["port"] == m.ha_port
            assert master["slaves"][0]["acked_offset"] == end
            assert master["slaves"][0]["lag_bytes"] == 0
            assert master["offsets"]["port"] == m.ha_offsets_port
            text = _cli("top", str(tmp_path / "m"), "--once", "--interval", "0.1").stdout
            assert "replication: ASYNC_MASTER" in text and "slaves (1)" in text
    # No writer: nothing shown as if it were live.
    assert _info(tmp_path / "s")["replication"] is None
    assert "replication: none shown" in _cli("info", str(tmp_path / "m")).stdout


def test_a_store_without_replication_writes_no_status(tmp_path: Path) -> None:
    path = tmp_path / "m"
    with MessageStore(master_config(path, sync=False)):
        assert (path / "config" / STATUS_FILE).exists()
    with MessageStore(master_config(path, sync=False, ha_listen_port=None)) as m:
        assert not (path / "config" / STATUS_FILE).exists()  # the stale one is gone
        assert m.stats().replication == {**m.ha_status(), "offsets": m.ha_status()["offsets"]}


def test_a_slave_falling_behind_is_logged_once_per_change(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rocketstore"):
        with MessageStore(master_config(tmp_path / "m", sync=False,
                                        ha_new_slave_from_first_file=True,
                                        ha_slave_fallbehind_max=4096,
                                        ha_transfer_batch_size=2048)) as m:
            for i in range(300):
                m.put("T", bytes([i % 251]) * 500, 0)
            # A new slave starts at the first byte: far behind, then caught up.
            with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
                wait_until(lambda: s.max_phy_offset == m.max_phy_offset, what="caught up")
                wait_until(lambda: any("caught up" in r.getMessage() for r in caplog.records),
                           5, "caught-up log")
    lines = [r.getMessage() for r in caplog.records
             if "fell behind" in r.getMessage() or "caught up" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "fell behind" in lines[0] and "ha_slave_fallbehind_max 4096" in lines[0]
    assert "caught up" in lines[1]
