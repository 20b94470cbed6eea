"""Failover by hand in one process (docs/format.md §21.8): a running slave
promoted to ASYNC_MASTER cuts its partial record into a side file, takes
puts at the next queue offsets, starts delayed delivery, keeps its
consumers, listens for slaves; the promotion outlives a SLAVE config."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from helpers.fault_fixtures import fail_points
from helpers.ha_util import SEGMENT, commitlog_bytes, master_config, slave_config, wait_until
from rocketstore import MessageStore, PutStatus, _native
from rocketstore._native import (
    HA_DIR,
    PROMOTE_REQUEST_FILE,
    PROMOTE_TAIL_PREFIX,
    PROMOTED_FILE,
    RESEED_PREFIX,
)

__all__ = ["fail_points"]  # the fixture, imported for pytest


def _put_many(store: MessageStore, n: int, size: int = 300) -> None:
    for i in range(n):
        store.put("T", bytes([i % 251]) * size, i % 4, keys=f"k{i}")


def test_a_running_slave_is_promoted_and_keeps_its_consumers(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False,
                                    ha_new_slave_from_first_file=True)) as m:
        _put_many(m, 100)
        cfg = slave_config(tmp_path / "s", m.ha_port, ha_listen_port=0)
        with MessageStore(cfg) as s:
            wait_until(lambda: s.max_phy_offset == m.max_phy_offset, what="caught up")
            wait_until(lambda: s.dispatch_behind_bytes() == 0, what="dispatched")
            consumer = s.consumer("G", "T")
            first = consumer.poll(timeout=2)
            assert first
            ends = {q: m.get_message("G", "T", q, 0, 1).max_offset for q in range(4)}
            end = m.max_phy_offset
            m.shutdown()  # the master goes away
            r = s.promote()
            assert r["offset"] == end and r["tail_file"] is None and r["tail_bytes"] == 0
            assert r["port"] and s.ha_port == r["port"]
            st = s.ha_status()
            assert st["role"] == "ASYNC_MASTER" and st["slaves"] == []
            assert s.config.broker_role.name == "ASYNC_MASTER"
            for q in range(4):
                assert s.put("T", b"after", q).queue_offset == ends[q]
            # The consumer goes on past the promotion.
            got = []
            for _ in range(50):
                got += [x.body for x in consumer.poll(timeout=0.2)]
                if b"after" in got:
                    break
            assert b"after" in got
            consumer.close()
            with pytest.raises(ValueError, match="ASYNC_MASTER"):
                s.promote()
            # A new slave follows the promoted store.
            with MessageStore(slave_config(tmp_path / "n", s.ha_port)) as n:
                wait_until(lambda: n.max_phy_offset == s.max_phy_offset, what="new slave")
    assert (tmp_path / "s" / HA_DIR / PROMOTED_FILE).exists()
    # Opened again with its SLAVE config, it is a master.
    with MessageStore(slave_config(tmp_path / "s", 1)) as s:
        assert s.ha_status()["role"] == "ASYNC_MASTER"
        assert s.put("T", b"again", 0).status == PutStatus.PUT_OK


def _serve_once(listener: socket.socket, data: bytes, stop: threading.Event) -> None:
    """A master that sends ``data`` from offset 0 in one frame, then heartbeats."""
    conn, _ = listener.accept()
    with conn:
        conn.recv(8)  # the slave's first report
        conn.sendall(struct.pack(">qi", 0, len(data)) + data)
        while not stop.wait(0.1):
            try:
                conn.sendall(struct.pack(">qi", len(data), 0))
            except OSError:
                return


@contextmanager
def _slave_holding_a_partial_record(
        tmp_path: Path) -> Iterator[tuple[MessageStore, list[int], bytes]]:
    """A slave whose master sent six records and 300 bytes of a seventh, the
    six dispatched: ``(slave, record starts, the bytes sent)``."""
    with MessageStore(master_config(tmp_path / "m", sync=False)) as m:
        starts = [m.put("T", bytes([65 + i]) * 700, 0).wrote_offset for i in range(6)]
        end = m.max_phy_offset
    held = starts[-1] + 300  # the last record, in part
    sent = commitlog_bytes(tmp_path / "m", 0, end)[:held]
    stop = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        t = threading.Thread(target=_serve_once, args=(listener, sent, stop))
        t.start()
        try:
            with MessageStore(slave_config(tmp_path / "s", listener.getsockname()[1])) as s:
                wait_until(lambda: s.max_phy_offset == held, what="the partial copy")
                wait_until(lambda: s.get_message("G", "T", 0, 0, 1).max_offset == 5,
                           what="the whole records dispatched")
                yield s, starts, sent
        finally:
            stop.set()
            t.join()


def _check_promoted_at_the_cut(tmp_path: Path, s: MessageStore, r: dict[str, Any],
                               starts: list[int], sent: bytes) -> None:
    assert r["offset"] == starts[-1] and r["tail_bytes"] == 300
    tail = Path(r["tail_file"])
    assert tail.name == f"{PROMOTE_TAIL_PREFIX}{starts[-1]:020d}"
    assert tail.parent == tmp_path / "s" / HA_DIR
    assert tail.read_bytes() == sent[starts[-1]:]
    assert s.max_phy_offset == starts[-1]
    got = s.get_message("G", "T", 0, 0, 32)
    assert [x.body[:1] for x in got.messages] == [bytes([65 + i]) for i in range(5)]
    assert s.put("T", b"new", 0).queue_offset == 5


def test_a_promotion_saves_the_partial_record_it_cuts(tmp_path: Path) -> None:
    with _slave_holding_a_partial_record(tmp_path) as (s, starts, sent):
        _check_promoted_at_the_cut(tmp_path, s, s.promote(), starts, sent)
    # The cut bytes were zeroed: reopened, the log ends after the new record.
    with MessageStore(slave_config(tmp_path / "s", None)) as s:
        got = s.get_message("G", "T", 0, 5, 32)
        assert [x.body for x in got.messages] == [b"new"]


def test_a_promotion_waits_for_a_dispatch_step_reading_the_partial_record(
        tmp_path: Path, fail_points: Callable[[str, int], None]) -> None:
    # A dispatch step that read the partial record before the cut must not
    # judge it after the promotion: the record would look torn, and the
    # store would stop taking puts.
    with _slave_holding_a_partial_record(tmp_path) as (s, starts, sent):
        fail_points("pause_dispatch_step", 1)
        wait_until(lambda: _native._fail_point_waiting("pause_dispatch_step") > 0,
                   what="a dispatch step held on the partial record")
        done: list[dict[str, Any]] = []
        promoting = threading.Thread(target=lambda: done.append(s.promote()))
        promoting.start()
        time.sleep(0.3)  # a promotion that does not wait for the step ends here
        fail_points("pause_dispatch_step", 0)
        promoting.join(timeout=30)
        assert done, "the promotion did not end"
        _check_promoted_at_the_cut(tmp_path, s, done[0], starts, sent)


def test_a_master_is_not_promoted(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False)) as m:
        with pytest.raises(ValueError, match="only a SLAVE"):
            m.promote()
    assert not (tmp_path / "m" / HA_DIR).exists()


def test_a_promoted_slave_delivers_delayed_messages(tmp_path: Path) -> None:
    levels = {"message_delay_level": "1s 2s"}
    with MessageStore(master_config(tmp_path / "m", sync=False, **levels)) as m:
        with MessageStore(slave_config(tmp_path / "s", m.ha_port, **levels)) as s:
            m.put("D", b"later", 0, delay_level=1)
            end = m.max_phy_offset
            wait_until(lambda: s.max_phy_offset == end, what="the parked copy")
            m.shutdown()  # before the level is due: the master never delivers it
            time.sleep(1.5)  # due now: a slave does not deliver it
            assert "D" not in s.topics()
            s.promote()
            def delivered() -> bool:
                return "D" in s.topics() and bool(s.get_message("G", "D", 0, 0, 1).messages)

            wait_until(delivered, 10, "delivered by the promoted slave")
            assert [x.body for x in s.get_message("G", "D", 0, 0, 1).messages] == [b"later"]


def test_promote_command_of_a_stopped_slave_saves_its_partial_record(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False)) as m:
        starts = [m.put("T", bytes([65 + i]) * 700, 0).wrote_offset for i in range(6)]
        end = m.max_phy_offset
    full = commitlog_bytes(tmp_path / "m", 0, end)
    held = starts[-1] + 300
    stop = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        t = threading.Thread(target=_serve_once, args=(listener, full[:held], stop))
        t.start()
        try:
            with MessageStore(slave_config(tmp_path / "s", listener.getsockname()[1])) as s:
                wait_until(lambda: s.max_phy_offset == held, what="the partial copy")
        finally:
            stop.set()
            t.join()
    r = _cli("promote", str(tmp_path / "s"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["offset"] == starts[-1] and out["tail_bytes"] == 300
    assert Path(out["tail_file"]).read_bytes() == full[starts[-1]:held]
    assert (tmp_path / "s" / HA_DIR / PROMOTED_FILE).read_text() == f"ASYNC_MASTER {starts[-1]}\n"
    with MessageStore(slave_config(tmp_path / "s", 1)) as s:
        assert s.ha_status()["role"] == "ASYNC_MASTER"
        assert s.max_phy_offset == starts[-1]
        assert s.put("T", b"new", 0).queue_offset == 5


def test_promote_command_asks_a_running_slave(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", sync=False)) as m:
        _put_many(m, 20)
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == m.max_phy_offset, what="caught up")
            r = _cli("promote", str(tmp_path / "s"), "--timeout", "20", "--json")
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            assert out["ok"] and out["offset"] == m.max_phy_offset
            assert s.ha_status()["role"] == "ASYNC_MASTER"
            assert not (tmp_path / "s" / HA_DIR / PROMOTE_REQUEST_FILE).exists()
            # Asked again, the store (now a master) does not answer: exit 2.
            r = _cli("promote", str(tmp_path / "s"), "--timeout", "1")
            assert r.returncode == 2 and "SLAVE" in r.stderr
            assert not (tmp_path / "s" / HA_DIR / PROMOTE_REQUEST_FILE).exists()


def test_reseed_lets_a_slave_below_the_masters_first_file_follow(tmp_path: Path) -> None:
    cfg = master_config(tmp_path / "m", sync=False, ha_new_slave_from_first_file=True)
    with MessageStore(cfg) as m:
        _put_many(m, 100)
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == m.max_phy_offset, what="caught up")
            old_end = s.max_phy_offset
        _put_many(m, 800)
        while m.min_phy_offset <= old_end:
            assert m.delete_expired_files(force=True) > 0
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: s.ha_status()["needs_reseed"], what="needs a reseed")
            assert "reseed" in s.ha_status()["error"]
            assert s.max_phy_offset == old_end
        r = _cli("reseed", str(tmp_path / "s"), "--json")
        assert r.returncode == 0, r.stderr
        moved = Path(json.loads(r.stdout)["moved_to"])
        assert moved.parent == tmp_path / "s" / HA_DIR
        assert moved.name.startswith(RESEED_PREFIX)
        assert (moved / "commitlog").is_dir() and not (tmp_path / "s" / "commitlog").exists()
        with MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == m.max_phy_offset, what="copied again")
            assert s.min_phy_offset == m.min_phy_offset
            start, end = s.min_phy_offset, m.max_phy_offset
            assert not s.ha_status()["needs_reseed"]
    assert commitlog_bytes(tmp_path / "s", start, end) == commitlog_bytes(tmp_path / "m", start,
                                                                          end)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_a_fork_is_found_when_the_last_file_holds_no_record(tmp_path: Path) -> None:
    # A store killed right after it rolled to a new CommitLog file, before
    # that file's bytes reached the disk: its last file holds no record, and
    # the fork check compares the newest record before it.
    with MessageStore(master_config(tmp_path / "a", sync=False,
                                    ha_new_slave_from_first_file=True)) as a:
        while a.max_phy_offset <= SEGMENT:
            a.put("T", b"a" * 300, 0)
        with MessageStore(slave_config(tmp_path / "s", a.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == a.max_phy_offset, what="copy of a")
    (tmp_path / "s" / "commitlog" / f"{SEGMENT:020d}").write_bytes(bytes(SEGMENT))
    with MessageStore(master_config(tmp_path / "b", sync=False,
                                    ha_new_slave_from_first_file=True)) as b:
        while b.max_phy_offset <= 2 * SEGMENT:
            b.put("OTHER", b"b" * 333, 0)
        with MessageStore(slave_config(tmp_path / "s", b.ha_port)) as s:
            wait_until(lambda: s.ha_status()["stopped"], what="stopped")
            st = s.ha_status()
            assert st["diverged"] and not st["verified"]
            assert s.max_phy_offset == SEGMENT
    assert commitlog_bytes(tmp_path / "s", SEGMENT, 2 * SEGMENT) == bytes(SEGMENT)


def test_a_slave_ahead_of_its_new_master_is_diverged(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "a", sync=False)) as a:
        _put_many(a, 100)
        with MessageStore(slave_config(tmp_path / "s", a.ha_port)) as s:
            wait_until(lambda: s.max_phy_offset == a.max_phy_offset, what="copy of a")
        end = a.max_phy_offset
    with MessageStore(master_config(tmp_path / "b", sync=False)) as b:
        for _ in range(10):
            b.put("OTHER", b"b" * 100, 0)
        b_end = b.max_phy_offset
        with MessageStore(slave_config(tmp_path / "s", b.ha_port)) as s:
            wait_until(lambda: s.ha_status()["diverged"], what="diverged")
            st = s.ha_status()
            assert f"[{b_end}, {end})" in st["error"] and not st["verified"]
            time.sleep(0.5)  # it tries again: refused again, nothing written
            assert s.max_phy_offset == end and s.ha_status()["diverged"]
            assert all(x["acked_offset"] < 0 for x in b.ha_status()["slaves"])


def _fill_to(store: MessageStore, left: int) -> None:
    """Puts records until exactly ``left`` bytes of the CommitLog's file remain."""
    before = store.max_phy_offset
    store.put("T", b"x" * 100, 0)
    per = store.max_phy_offset - before  # one record's bytes besides its body, plus 100
    while SEGMENT - store.max_phy_offset % SEGMENT - left > 2 * per:
        store.put("T", b"x" * 100, 0)
    rest = SEGMENT - store.max_phy_offset % SEGMENT - left
    store.put("T", b"x" * (rest - per + 100), 0)
    assert SEGMENT - store.max_phy_offset % SEGMENT == left


def test_an_end_of_file_blank_both_logs_hold_is_not_a_fork(tmp_path: Path) -> None:
    # The slave held every record of the master's first file, not its
    # end-of-file blank: it is promoted at the blank's offset, and its own
    # first record does not fit there either, so it writes the same blank.
    # The logs then fork at the next file's start, not at the promotion's.
    # (In the second file: a probe from the first reports 0, which a master
    # answers from its last file.)
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    with MessageStore(master_config(a_dir, sync=False, ha_new_slave_from_first_file=True)) as a:
        while a.max_phy_offset < SEGMENT:
            a.put("T", b"x" * 300, 0)
        _fill_to(a, 40)
        with MessageStore(slave_config(b_dir, a.ha_port)) as b:
            wait_until(lambda: b.max_phy_offset == a.max_phy_offset, what="copy of a")
        a.put("T", b"a" * 300, 0)  # the blank, and the record in the next file
        a_end = a.max_phy_offset
    r = _cli("promote", str(b_dir), "--json")
    assert r.returncode == 0, r.stderr
    cut = json.loads(r.stdout)["offset"]
    assert cut == 2 * SEGMENT - 40
    with MessageStore(slave_config(b_dir, None, ha_listen_port=0)) as b:
        b.put("T", b"b" * 300, 0)
        assert commitlog_bytes(b_dir, 0, 2 * SEGMENT) == commitlog_bytes(a_dir, 0, 2 * SEGMENT)
        r = _cli("rejoin", str(a_dir), "--master", f"127.0.0.1:{b.ha_port}", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        rejoined = json.loads(r.stdout)
        assert (rejoined["offset"], rejoined["end"]) == (2 * SEGMENT, a_end), r.stdout
        with MessageStore(slave_config(a_dir, b.ha_port)) as a:
            wait_until(lambda: a.max_phy_offset == b.max_phy_offset, what="a follows b")
            assert a.ha_status()["verified"] and not a.ha_status()["diverged"]
    assert commitlog_bytes(a_dir, 0, a_end) == commitlog_bytes(b_dir, 0, a_end)


def test_a_fork_in_the_first_file_is_found(tmp_path: Path) -> None:
    # The promoted slave held part of the first file only; its own records
    # fill files past the former master's. A report of 0 would ask for no
    # offset (its master answers from its last file), so the first file is
    # probed from its second record.
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    with MessageStore(master_config(a_dir, sync=False, ha_new_slave_from_first_file=True)) as a:
        _put_many(a, 20)
        with MessageStore(slave_config(b_dir, a.ha_port)) as b:
            wait_until(lambda: b.max_phy_offset == a.max_phy_offset, what="copy of a")
        while a.max_phy_offset < 2 * SEGMENT:
            a.put("T", b"a" * 300, 0)
        a_end = a.max_phy_offset
    r = _cli("promote", str(b_dir), "--json")
    assert r.returncode == 0, r.stderr
    cut = json.loads(r.stdout)["offset"]
    assert 0 < cut < SEGMENT
    with MessageStore(slave_config(b_dir, None, ha_listen_port=0)) as b:
        while b.max_phy_offset < 3 * SEGMENT:
            b.put("T", b"b" * 333, 0)
        r = _cli("rejoin", str(a_dir), "--master", f"127.0.0.1:{b.ha_port}", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        rejoined = json.loads(r.stdout)
        assert (rejoined["offset"], rejoined["end"]) == (cut, a_end), r.stdout
        with MessageStore(slave_config(a_dir, b.ha_port)) as a:
            wait_until(lambda: a.max_phy_offset == b.max_phy_offset, what="a follows b")
            assert a.ha_status()["verified"] and not a.ha_status()["diverged"]
    assert commitlog_bytes(a_dir, 0, 3 * SEGMENT) == commitlog_bytes(b_dir, 0, 3 * SEGMENT)
