"""Consumer offsets under attack from several processes (``docs/format.md``, §13.1).

Processes commit to ``config/consumerOffset.json`` in tight loops, each
commit written before the process says so; some are killed with SIGKILL in
the middle of a write. The file must stay a valid offset table holding
every commit any process reported, its own and the others'.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.paths import HELPERS
from rocketstore import MessageStore, StoreConfig
from rocketstore.config_files import loads_fastjson

CHILD = HELPERS / "offsets_loop_child.py"
CFG: dict[str, Any] = {"mapped_file_size_commit_log": 64 * 1024,
                       "mapped_file_size_consume_queue": 20 * 100,
                       "max_hash_slot_num": 64, "max_index_num": 256}


def _spawn(store_path: str, role: str, group: str, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(CHILD), store_path, role, group, str(count)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"child did not start: {line!r} {err}")
    return proc


def _go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def _last_commit(proc: subprocess.Popen[str], stop_after: int | None = None) -> int:
    """The last ``c <i>`` the child printed (reading until ``done``, EOF or ``stop_after``)."""
    assert proc.stdout is not None
    last = 0
    for line in proc.stdout:
        if line.startswith("c "):
            last = int(line.split()[1])
            if stop_after is not None and last >= stop_after:
                break
        elif line.startswith("done"):
            break
    return last


def _finish(proc: subprocess.Popen[str], kill: bool) -> None:
    if kill and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()
    err = proc.stderr.read() if proc.stderr else ""
    code = proc.wait(timeout=60)
    if proc.stderr is not None:
        proc.stderr.close()
    if not kill:
        assert code == 0, err


def _table(store_path: str) -> dict[str, dict[int, int]]:
    text = (Path(store_path) / "config" / "consumerOffset.json").read_text()
    table = loads_fastjson(text)["offsetTable"]
    assert isinstance(table, dict)
    return table


def _put(store_path: str, per_queue: int) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as store:
        for i in range(per_queue * 4):
            assert store.put("T", b"m%d" % i, i % 4).ok


def test_reader_killed_mid_commit_loop_keeps_every_reported_commit(store_path: str) -> None:
    _put(store_path, 400)
    rng = random.Random(7)
    with MessageStore(StoreConfig(store_path=store_path, **CFG), read_only=True) as other:
        other.commit_offsets("other", "T", {2: 5, 3: 6})
        other.persist_offsets()
    for _ in range(4):
        proc = _spawn(store_path, "reader", "loop", 0)
        _go(proc)
        last = _last_commit(proc, stop_after=rng.randrange(5, 60))
        _finish(proc, kill=True)
        table = _table(store_path)  # parses: never a torn file
        assert table["T@loop"][0] >= last and table["T@loop"][1] >= last
        assert table["T@other"] == {2: 5, 3: 6}


def test_two_readers_and_the_writer_committing_at_once_lose_no_entry(store_path: str) -> None:
    _put(store_path, 300)
    count = 150
    writer = _spawn(store_path, "writer", "w", count)
    readers = [_spawn(store_path, "reader", g, count) for g in ("a", "b")]
    procs = [writer, *readers]
    for proc in procs:
        _go(proc)
    lasts = [_last_commit(proc) for proc in procs]
    assert lasts == [count] * 3
    for proc in procs:
        _finish(proc, kill=False)
    table = _table(store_path)
    for group in ("w", "a", "b"):
        assert table[f"T@{group}"] == {0: count, 1: count}, (group, table)
