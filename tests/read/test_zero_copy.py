"""Zero-copy batches under retention and close: never a crash, never a
changed byte.

A zero-copy batch's ``body`` column points into the mapped CommitLog; each
file it points into stays mapped until the batch is released. These tests
delete the files (retention, forced) and shut the store down while batches
are held, in a child process so that a SIGBUS or SIGSEGV shows as its exit
status instead of killing the test run; the held bytes are compared with
copies taken at the same time. Deleting a segment unlinks it (the engine
never truncates a mapped file), so its blocks stay readable while mapped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import HELPERS
from rocketstore import MessageStore, StoreConfig

pytest.importorskip("pyarrow")

CHILD = HELPERS / "zero_copy_child.py"


def done(stdout: str) -> dict[str, Any]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("DONE ")]
    assert lines, stdout
    out: dict[str, Any] = json.loads(lines[-1][5:])
    return out


def test_retention_and_close_under_held_batches(store_path: str) -> None:
    p = subprocess.run([sys.executable, str(CHILD), store_path, "retention"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    out = done(p.stdout)
    assert out["files"] > 8 and out["left"] == 1, out
    assert out["deleted"] == out["files"] - 1
    assert out["min_offset"] > 0  # the messages held are gone from the store
    _, deleted = out["maps_after_delete"]
    assert deleted >= out["files"] - 1, out  # held: still mapped, name gone
    # Closed: only what the held batches point into stays mapped (every file).
    assert out["maps_after_close"][1] == deleted, out
    assert out["maps_after_close"][0] >= out["files"], out
    assert out["maps_after_release"] == [0, 0], out  # released: unmapped


def test_a_follower_holds_batches_while_the_writer_deletes_and_closes(
        store_path: str) -> None:
    child_mod = __import__("importlib").import_module("helpers.zero_copy_child")
    writer = MessageStore(StoreConfig(store_path=store_path, **child_mod.SMALL)).start()
    try:
        for i in range(child_mod.N):
            assert writer.put(child_mod.TOPIC, child_mod.body(i), queue_id=0).ok
        writer.flush()
        proc = subprocess.Popen([sys.executable, str(CHILD), store_path, "follower"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line.strip() == "HOLDING", line + (proc.stderr.read() if proc.stderr else "")
        deleted = 0
        while (n := writer.delete_expired_files(force=True)) > 0:
            deleted += n
        assert deleted > 8
    finally:
        writer.shutdown()
    out_s, err_s = proc.communicate("go\n", timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{line}{out_s}\n{err_s}"
    out = done(out_s)
    assert out["files_left"] == 1
    _, gone = out["maps_after_delete"]
    assert gone >= deleted, out
    assert out["maps_after_release"] == [0, 0], out


def test_the_engine_unlinks_segments_it_deletes(store_path: str) -> None:
    """Retention removes the name; an open descriptor still sees every byte
    (a truncate would leave it 0 bytes long)."""
    child_mod = __import__("importlib").import_module("helpers.zero_copy_child")
    with MessageStore(StoreConfig(store_path=store_path, **child_mod.SMALL)) as s:
        for i in range(600):
            assert s.put(child_mod.TOPIC, child_mod.body(i), queue_id=0).ok
        s.flush()
        first = sorted((Path(store_path) / "commitlog").iterdir())[0]
        size = first.stat().st_size
        with open(first, "rb") as f:
            before = f.read()
            assert s.delete_expired_files(force=True) >= 1
            assert not first.exists()
            f.seek(0)
            assert f.read() == before and len(before) == size
