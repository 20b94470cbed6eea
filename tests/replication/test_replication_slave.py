"""What a slave serves and keeps (docs/format.md §21.4): columnar reads and
consumers work on it, delayed delivery runs only on its master, and each
side's retention deletes its own files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers.ha_util import (
    commitlog_bytes,
    master_config,
    segment_starts,
    slave_config,
    wait_until,
)
from rocketstore import MessageStore


def _caught_up(m: MessageStore, s: MessageStore) -> None:
    end = m.max_phy_offset
    wait_until(lambda: s.max_phy_offset == end, what="caught up")
    wait_until(lambda: s.dispatch_behind_bytes() == 0, what="dispatched")


def test_columnar_reads_and_consumers_work_on_a_slave(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    with MessageStore(master_config(tmp_path / "m", sync=False)) as m, \
            MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
        bodies = [f"b{i}".encode() for i in range(120)]
        for i, b in enumerate(bodies):
            m.put("T", b, i % 3)
        _caught_up(m, s)
        res = s.get_arrow("T", 1, 0, 100)
        assert res.batch.column("body").to_pylist() == bodies[1::3]
        table = s.read_arrow("T").read_all()
        assert sorted(table.column("body").to_pylist()) == sorted(bodies)
        got: list[bytes] = []
        with s.consumer("G", "T", exclusive=True, auto_commit=False) as c:
            deadline = time.monotonic() + 10
            while len(got) < len(bodies) and time.monotonic() < deadline:
                got += [x.body for x in c.poll(timeout=0.2)]
        assert sorted(got) == sorted(bodies)


def test_delayed_delivery_runs_on_the_master_only(tmp_path: Path) -> None:
    levels = {"message_delay_level": "1s 2s"}
    mcfg = master_config(tmp_path / "m", sync=False, **levels)
    with MessageStore(mcfg) as m:
        port = m.ha_port
        with MessageStore(slave_config(tmp_path / "s", port, **levels)) as s:
            m.put("T", b"now", 0)
            m.put("T", b"later", 0, delay_level=1)
            _caught_up(m, s)
            m.close()  # before the delivery is due
            time.sleep(1.6)
            # The slave holds the waiting message and delivers nothing itself.
            assert [x.body for x in s.get_message("G", "T", 0, 0, 10).messages] == [b"now"]
            with MessageStore(master_config(tmp_path / "m", sync=False, ha_listen_port=port,
                                            **levels)) as m2:
                wait_until(lambda: len(m2.get_message("G", "T", 0, 0, 10).messages) == 2, 10,
                           what="the master's delivery")
                _caught_up(m2, s)
                got = s.get_message("G", "T", 0, 0, 10).messages
                assert [x.body for x in got] == [b"now", b"later"]  # the master's copy, once
                end = m2.max_phy_offset
    assert commitlog_bytes(tmp_path / "s", 0, end) == commitlog_bytes(tmp_path / "m", 0, end)


def test_each_side_deletes_its_own_old_files(tmp_path: Path) -> None:
    mcfg = master_config(tmp_path / "m", sync=False, ha_new_slave_from_first_file=True)
    with MessageStore(mcfg) as m, MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
        for i in range(700):
            m.put("T", bytes([i % 251]) * 300, i % 4)
        _caught_up(m, s)
        files = segment_starts(tmp_path / "m")
        assert len(files) >= 4 and segment_starts(tmp_path / "s") == files
        # The slave's retention deletes the slave's files, not the master's.
        assert s.delete_expired_files(force=True) > 0
        assert segment_starts(tmp_path / "m") == files
        s_files = segment_starts(tmp_path / "s")
        assert s_files[0] > files[0] and s.min_phy_offset == s_files[0]
        # The master's deletes the master's; replication goes on.
        assert m.delete_expired_files(force=True) > 0
        assert segment_starts(tmp_path / "m")[0] > files[0]
        assert segment_starts(tmp_path / "s") == s_files
        for i in range(200):
            m.put("T", b"after" * 50, i % 4)
        _caught_up(m, s)
        end = m.max_phy_offset
        start = max(m.min_phy_offset, s.min_phy_offset)
        assert commitlog_bytes(tmp_path / "s", start, end) == \
            commitlog_bytes(tmp_path / "m", start, end)


def _prefault_threads() -> int:
    """Threads of this process named as the CommitLog prefault thread."""
    names = (p.read_text().strip() for p in Path("/proc/self/task").glob("*/comm"))
    return sum(1 for n in names if n == "rocketstore-prefault"[:15])


def test_a_slave_writes_without_prefaulting_until_promoted(tmp_path: Path) -> None:
    # A slave's appends do not go through its mapping (docs/format.md §21.4):
    # a prefault thread would only zero pages it then overwrites. Its
    # promotion starts one for the puts to come.
    with MessageStore(master_config(tmp_path / "m", sync=False,
                                    ha_new_slave_from_first_file=True)) as m:
        for i in range(3000):
            m.put("T", bytes([i % 251]) * 300, i % 4)
        assert len(segment_starts(tmp_path / "m")) >= 3
        base = _prefault_threads()
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            _caught_up(m, s)
            assert _prefault_threads() == base
            end = m.max_phy_offset
            theirs = commitlog_bytes(tmp_path / "m", 0, end)
            assert commitlog_bytes(tmp_path / "s", 0, end) == theirs
            m.shutdown()
            alone = _prefault_threads()
            assert alone == base - 1, "the master's stopped"
            s.promote()
            assert _prefault_threads() == alone + 1
            assert s.put("T", b"after", 0).queue_offset == 750
        assert _prefault_threads() == alone
