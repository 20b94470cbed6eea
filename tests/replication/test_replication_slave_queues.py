"""A slave that started at the master's last CommitLog file (its log and
queues begin mid-log, docs/format.md §21.4), killed with SIGKILL and
restarted: for every queue, each queue offset the slave holds maps to the
CommitLog offset the master's maps it to (docs/format.md §9, §15.3)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.ha_util import segment_starts, slave_config, wait_until
from helpers.paths import HELPERS
from rocketstore import MessageStore, StoreConfig

CHILD = HELPERS / "ha_child.py"
QUEUES = 4
#: The slave's consume queue files: 100 units, so its first records'
#: queue offsets lie several files past 0.
CQ_FILE = 100 * 20
PRE_BLANK = (0).to_bytes(8, "big") + (0x7FFFFFFF).to_bytes(4, "big") + bytes(8)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(role: str, store: Path, port: int, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    with out.open("a") as o, out.with_suffix(".err").open("a") as e:
        return subprocess.Popen([sys.executable, str(CHILD), role, str(store), str(port), *extra],
                                stdout=o, stderr=e)


def _ready(proc: subprocess.Popen[bytes], out: Path) -> None:
    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(out.with_suffix(".err").read_text())
        return "READY" in out.read_text()
    wait_until(ready, 30, f"{out.name} ready")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _ends(out: Path) -> list[int]:
    return [int(x.split()[1]) for x in out.read_text().splitlines()[:-1] if x.startswith("END ")]


def _unwritten_first_file(store: Path, filler: int) -> None:
    """Queue T-0 of the killed ``store`` as a kill leaves it when it lands
    after dispatch made the queue's first file and before its first unit
    was written: one file of zeros, or (``filler`` > 0) holding that many
    of the pre-blank units written before the first message's."""
    files = sorted((store / "consumequeue" / "T" / "0").iterdir())
    for f in files[1:]:
        f.unlink()
    files[0].write_bytes((PRE_BLANK * filler).ljust(CQ_FILE, b"\0"))


def _assert_same_map(m: MessageStore, s: MessageStore) -> int:
    """For every queue: the slave's min/max offsets lie within the
    master's, and each queue offset the slave holds reads the master's
    record at that offset (same CommitLog offset, same body)."""
    n = 0
    for q in range(QUEUES):
        s_min = s.get_min_offset_in_queue("T", q)
        s_max = s.get_max_offset_in_queue("T", q)
        assert s_min > 0, f"queue {q}: the slave began mid-log, its queue cannot start at 0"
        assert m.get_min_offset_in_queue("T", q) <= s_min < s_max <= \
            m.get_max_offset_in_queue("T", q), f"queue {q}: [{s_min}, {s_max})"
        got = s.get_message("G", "T", q, s_min, 1)
        assert (got.min_offset, got.max_offset) == (s_min, s_max)
        for off in range(s_min, s_max):
            mine = s.get_message("G", "T", q, off, 1).messages
            theirs = m.get_message("G", "T", q, off, 1).messages
            assert len(mine) == 1, f"queue {q} offset {off}: nothing on the slave"
            assert (mine[0].queue_offset, mine[0].commit_log_offset, mine[0].body) == \
                (theirs[0].queue_offset, theirs[0].commit_log_offset, theirs[0].body), \
                f"queue {q} offset {off}"
            n += 1
    return n


@pytest.mark.parametrize("lost", [None, 0, 37], ids=["as-killed", "zero-file", "part-filler"])
def test_slave_from_the_last_file_killed_keeps_queue_offsets(
        tmp_path: Path, lost: int | None) -> None:
    port = _free_port()
    mout, sout = tmp_path / "master.out", tmp_path / "slave.out"
    master = _spawn("master", tmp_path / "m", port, mout)
    slave = None
    try:
        _ready(master, mout)
        # The master fills several CommitLog files before the slave starts.
        wait_until(lambda: len(segment_starts(tmp_path / "m")) >= 3, 60, "master files")
        slave = _spawn("slave", tmp_path / "s", port, sout, str(CQ_FILE))
        _ready(slave, sout)
        wait_until(lambda: len(_ends(sout)) > 3 and _ends(sout)[-1] > 0, 30, "slave copies")
        start = segment_starts(tmp_path / "s")[0]
        assert start > 0, "the slave starts at the master's last file"
        wait_until(lambda: _ends(sout)[-1] > start + 20_000, 30, "slave copies more")
        _kill(slave)  # mid-stream: frames keep coming while the slave appends
        if lost is not None:
            _unwritten_first_file(tmp_path / "s", lost)
        slave = _spawn("slave", tmp_path / "s", port, sout, str(CQ_FILE))
        _ready(slave, sout)
        n = len(_ends(sout))
        wait_until(lambda: len(_ends(sout)) > n + 5, 30, "slave resumes")
        time.sleep(0.3)
    finally:
        _kill(master)
        if slave is not None:
            _kill(slave)
    m_cfg = StoreConfig(store_path=str(tmp_path / "m"), mapped_file_size_commit_log=64 * 1024)
    s_cfg = slave_config(tmp_path / "s", None, mapped_file_size_consume_queue=CQ_FILE)
    with MessageStore(m_cfg) as m, MessageStore(s_cfg) as s:
        assert _assert_same_map(m, s) > 100
    assert "consume queue gap" not in sout.with_suffix(".err").read_text()
