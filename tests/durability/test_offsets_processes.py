"""Consumer offsets committed from several processes (``docs/format.md``, §13.1).

Readers (``read_only=True``) commit to ``config/consumerOffset.json`` as the
writer does, every write a read-modify-write under
``config/consumerOffset.lock``; a consumer holds its group's lock for the
topic while open. Processes are real (``subprocess``) and killed with
SIGKILL.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.offsets_child import CFG, TOPIC
from helpers.paths import HELPERS
from helpers.store_util import diff_snapshots, offset_table, snapshot
from rocketstore import ConsumerGroupBusyError, MessageStore, StoreConfig

CHILD = HELPERS / "offsets_child.py"


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines_until(proc: subprocess.Popen[str], last: str) -> list[str]:
    """Lines the child prints up to and including one that starts with ``last``."""
    assert proc.stdout is not None
    out: list[str] = []
    while True:
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"child ended before {last!r}: {out[-3:]} {err}")
        out.append(line.strip())
        if line.startswith(last):
            return out


def _kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL (if still running), reap, and close the pipes."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _positions(line: str) -> dict[int, int]:
    return {int(q): off for q, off in json.loads(line.split(" ", 1)[1]).items()}


def _put(store_path: str, n: int) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as store:
        for i in range(n):
            assert store.put(TOPIC, b"m%d" % i, i % 4).ok


def test_reader_commit_survives_kill9_with_the_writer_running(store_path: str) -> None:
    writer = _spawn("writer", store_path, "100", "-")
    reader = again = None
    try:
        _lines_until(writer, "ready")
        reader = _spawn("reader", store_path, "rg", "37", "hold")
        lines = _lines_until(reader, "done")
        assert _positions(lines[0]) == {0: 0, 1: 0, 2: 0, 3: 0}
        committed = _positions(lines[-2])
        assert sum(committed.values()) == 37
        _kill(reader)  # kill -9 after its last commit returned
        # The file is RocketMQ's shape, unquoted queue ids, the reader's entry in it.
        assert offset_table(store_path) == {"T@rg": committed}
        raw = (Path(store_path) / "config" / "consumerOffset.json").read_text()
        assert '"T@rg":{0:' in raw
        again = _spawn("reader", store_path, "rg", "5", "close")
        lines = _lines_until(again, "done")
        assert _positions(lines[0]) == committed  # resumes exactly at the commit
        assert again.wait(timeout=30) == 0, again.stderr.read() if again.stderr else ""
    finally:
        for p in (writer, reader, again):
            if p is not None:
                _kill(p)


def test_reader_commits_while_the_writer_is_down(store_path: str) -> None:
    _put(store_path, 60)  # the writer ran and stopped
    reader = _spawn("reader", store_path, "rg", "30", "hold")
    try:
        committed = _positions(_lines_until(reader, "done")[-2])
    finally:
        _kill(reader)
    assert sum(committed.values()) == 30
    # The writer starts again: its recovery keeps the reader's commit, and a
    # consumer of the group in the writer's process resumes there.
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as store:
        assert {q: store.query_offset("rg", TOPIC, q) for q in range(4)} == committed
        with store.consumer("rg", TOPIC) as c:
            assert c.positions() == committed
            assert len(c.poll(timeout=1, max_messages=100)) == 30
    assert sum(offset_table(store_path)["T@rg"].values()) == 60


def test_writer_and_reader_committing_concurrently_keep_each_others_entries(
    store_path: str,
) -> None:
    n = 160
    writer = _spawn("writer", store_path, str(n), "wg")
    reader = None
    seen: list[dict[str, dict[int, int]]] = []
    stop = threading.Event()

    def sample() -> None:
        path = Path(store_path) / "config" / "consumerOffset.json"
        while not stop.is_set():
            try:
                seen.append(offset_table(store_path))
            except (FileNotFoundError, ValueError):
                assert not path.exists()
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    try:
        _lines_until(writer, "ready")
        sampler.start()
        reader = _spawn("reader", store_path, "rg", str(n), "hold")
        w_lines = _lines_until(writer, "done")
        r_lines = _lines_until(reader, "done")
        stop.set()
        sampler.join()
        w_last, r_last = _positions(w_lines[-2]), _positions(r_lines[-2])
        assert sum(w_last.values()) == sum(r_last.values()) == n
        _kill(writer)  # kill -9 both: every commit above was durable
        _kill(reader)
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join()
        for p in (writer, reader):
            if p is not None:
                _kill(p)
    assert offset_table(store_path) == {"T@wg": w_last, "T@rg": r_last}
    # Both committed throughout; once in the file, no entry ever went back or away.
    both = [t for t in seen if "T@wg" in t and "T@rg" in t]
    assert len(both) >= 2, f"the two groups never shared the file ({len(seen)} samples)"
    for before, after in itertools.pairwise(seen):
        for key, queues in before.items():
            assert key in after, f"{key} vanished"
            for q, off in queues.items():
                assert after[key][q] >= off, (key, q, off, after[key][q])


def test_second_consumer_of_a_group_is_refused_across_processes(store_path: str) -> None:
    _put(store_path, 8)
    holder = _spawn("hold", store_path, "g")
    try:
        _lines_until(holder, "held")
        with MessageStore(StoreConfig(store_path=store_path, **CFG), read_only=True) as ro:
            with pytest.raises(ConsumerGroupBusyError, match="'g' on topic 'T'"):
                ro.consumer("g", TOPIC, exclusive=True)
            with pytest.raises(ConsumerGroupBusyError, match='"g" on topic "T"'):
                ro.consumer("g", TOPIC)  # a shared member neither
            (g,) = ro.consumer_groups()
            assert g.group == "g" and g.active_topics == (TOPIC,)
            with pytest.raises(ConsumerGroupBusyError):
                ro.reset_consumer_group("g", "latest")
            with pytest.raises(ConsumerGroupBusyError):
                ro.delete_consumer_group("g")
            assert offset_table(store_path) == {"T@g": {0: 0, 1: 0, 2: 0, 3: 0}}  # untouched
            ro.consumer("other", TOPIC, exclusive=True).close()  # another group is free
        # The writer's process is refused as well.
        with MessageStore(StoreConfig(store_path=store_path, **CFG)) as w:
            with pytest.raises(ConsumerGroupBusyError):
                w.consumer("g", TOPIC, exclusive=True)
            _kill(holder)  # the kernel drops a dead process's lock
            with w.consumer("g", TOPIC, exclusive=True) as c:
                assert c.positions() == {0: 0, 1: 0, 2: 0, 3: 0}
                # In one process too: one exclusive consumer of the group and topic.
                with pytest.raises(ConsumerGroupBusyError):
                    w.consumer("g", TOPIC, exclusive=True)
            w.consumer("g", TOPIC, exclusive=True).close()  # closed: free again
    finally:
        _kill(holder)


def test_no_write_open_leaves_every_byte_identical(store_path: str) -> None:
    _put(store_path, 40)
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as w:
        with w.consumer("g", TOPIC) as c:
            assert len(c.poll(timeout=1, max_messages=10)) == 10
    before = snapshot(store_path)
    assert "config/consumerOffset.json" in before
    with MessageStore(StoreConfig(store_path=store_path, **CFG), read_only=True,
                      no_write=True) as ro:
        c = ro.consumer("g", TOPIC, exclusive=True)
        assert sum(c.positions().values()) == 10
        assert len(c.poll(timeout=1, max_messages=100)) == 30
        with pytest.warns(RuntimeWarning, match="nothing is persisted"):
            c.commit()
        assert sum(c.committed(q) for q in range(4)) == 40  # in memory
        (g,) = ro.consumer_groups()
        assert g.lag == 30 and not g.active
        c.close()
        ro.flush()
        ro.persist_offsets()
    assert diff_snapshots(before, snapshot(store_path)) == []


def test_consumer_groups_agree_in_the_writer_and_a_reader_process(store_path: str) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as w:
        for i in range(10):
            assert w.put(TOPIC, b"x", i % 2).ok
        w.commit_offsets("g", TOPIC, {0: 3})
        w.persist_offsets()
        mine = [g.as_dict() for g in w.consumer_groups()]
        assert mine == [{
            "group": "g", "lag": 2 + 5, "active": False, "active_topics": [],
            "members": [], "problems": [], "queues": [
                {"topic": TOPIC, "queue_id": 0, "committed": 3, "min_offset": 0,
                 "max_offset": 5, "lag": 2, "owner": None},
                {"topic": TOPIC, "queue_id": 1, "committed": None, "min_offset": 0,
                 "max_offset": 5, "lag": 5, "owner": None},
            ],
        }]
        p = subprocess.run([sys.executable, str(CHILD), "groups", store_path],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout) == mine
