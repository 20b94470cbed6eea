"""A slave's property-CRC bookkeeping follows the bytes across kills and
restarts (docs/format.md §11, §21.4).

The slave's store was first written by rocketstore with the property CRC
(the checkpoint lists that range); its master continues the same log
without the property, as a RocketMQ 4.9 master writes it. The slave, run
as its own process and killed with SIGKILL while it appends, recovers,
catches up and serves every message with nothing taken for damage; its
checkpoint lists exactly the range rocketstore wrote; once it is opened as
a master its own appends get a range of their own.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import zlib
from pathlib import Path

from click.testing import CliRunner

from helpers.ha_util import SEGMENT, master_config, slave_config, wait_until
from helpers.paths import HELPERS
from rocketstore import MessageStore, StoreConfig
from rocketstore.cli import main as cli_main

CHILD = HELPERS / "ha_child.py"


def crc_ranges(path: Path) -> list[tuple[int, int]]:
    block = (path / "checkpoint").read_bytes()[3072:]
    assert block[:8] == b"RSPCRC01"
    n = struct.unpack_from(">i", block, 8)[0]
    assert struct.unpack_from(">I", block, 12)[0] == zlib.crc32(block[:12] + block[16:16 + 16 * n])
    return [struct.unpack_from(">qq", block, 16 + 16 * i) for i in range(n)]


def pull_all(store: MessageStore) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for q in range(4):
        off, got = store.get_min_offset_in_queue("T", q), []
        while off < store.get_max_offset_in_queue("T", q):
            r = store.get_message("G", "T", q, off, 32)
            assert r.damaged == 0, (q, off)
            got += [m.body for m in r.messages]
            off = r.next_begin_offset
        out[q] = got
    return out


def test_a_slave_of_a_master_without_the_property_keeps_its_ranges(tmp_path: Path) -> None:
    s_path, m_path = tmp_path / "s", tmp_path / "m"
    plain = StoreConfig(store_path=str(s_path), mapped_file_size_commit_log=SEGMENT)
    with MessageStore(plain) as st:
        for i in range(20):
            assert st.put("T", b"crc%03d" % i * 40, i % 4).ok
        e0 = st.max_phy_offset
    assert crc_ranges(s_path) == [(0, e0)]
    shutil.copytree(s_path, m_path)  # the master continues the same log
    stop = threading.Event()
    with MessageStore(master_config(m_path, sync=False, enabled_append_prop_crc=False)) as m:

        def put_on() -> None:
            i = 0
            while not stop.is_set() and i < 3000:
                m.put("T", b"plain%04d" % i * 30, i % 4)
                i += 1

        putter = threading.Thread(target=put_on)
        putter.start()
        try:
            out = tmp_path / "slave.out"
            with out.open("w") as o, (tmp_path / "slave.err").open("w") as e:
                child = subprocess.Popen(
                    [sys.executable, str(CHILD), "slave", str(s_path), str(m.ha_port)],
                    stdout=o, stderr=e)
            try:
                def copied_past(n: int) -> bool:
                    ends = [int(x.split()[1]) for x in out.read_text().splitlines()
                            if x.startswith("END ") and len(x.split()) == 2]
                    return bool(ends) and ends[-1] > n
                wait_until(lambda: copied_past(e0 + 3 * SEGMENT), 30, "the slave copying")
            finally:
                os.kill(child.pid, signal.SIGKILL)  # while frames arrive
                child.wait(timeout=30)
        finally:
            stop.set()
            putter.join()
        end = m.max_phy_offset
        want = pull_all(m)
        for _ in range(2):  # recovers after the kill, then reopened after a clean stop
            with MessageStore(slave_config(s_path, m.ha_port)) as s:
                wait_until(lambda: s.max_phy_offset == end, what="caught up")
                wait_until(lambda: s.dispatch_behind_bytes() == 0, what="dispatched")
                assert s.recovery_report.damaged == ()
                assert pull_all(s) == want
            assert crc_ranges(s_path) == [(0, e0)]
    with MessageStore(StoreConfig(store_path=str(s_path), mapped_file_size_commit_log=SEGMENT),
                      read_only=True) as ro:
        assert pull_all(ro) == want
    # Opened as a master, its own appends get a range.
    with MessageStore(master_config(s_path, sync=False)) as st:
        r = st.put("T", b"mine", 0)
    assert crc_ranges(s_path) == [(0, e0), (end, r.wrote_offset + r.wrote_bytes)]
    res = CliRunner().invoke(cli_main, ["verify", str(s_path)])
    assert res.exit_code == 0, res.output
