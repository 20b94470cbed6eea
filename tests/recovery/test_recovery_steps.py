"""Recovery runs as named engine steps in a fixed order.

Opening the engine store takes the lock and maps the files, and changes
nothing else on disk; the recovery steps repair what it found (short newest
files, index files newer than the index checkpoint) and say so in the report.
A step out of order, or a put or read before the last step, is a
RecoveryOrderError.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from helpers.presets import SEG, SMALL
from rocketstore import (
    MessageStore,
    RecoveryMode,
    RecoveryOrderError,
    RecoveryReport,
    StoreConfig,
    StoreError,
)
from rocketstore._native import NativeStore


def _crashed_store(path: str, n: int = 400) -> StoreConfig:
    """A store over several CommitLog files whose writer died after a flush."""
    cfg = StoreConfig(store_path=path, **SMALL)
    store = MessageStore(cfg).start()
    for i in range(n):
        assert store.put("T", b"m" * 300, queue_id=i % 2, keys=[f"k{i}"]).ok
    store.flush()
    store._native._simulate_crash()  # type: ignore[union-attr]
    assert (Path(path) / "abort").exists()
    return cfg


def _snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _zero_index_checkpoint(root: Path) -> None:
    with open(root / "checkpoint", "r+b") as f:
        f.seek(16)  # indexMsgTimestamp
        f.write((0).to_bytes(8, "big"))


def _make_short_newest_files(root: Path) -> list[str]:
    cl = sorted((root / "commitlog").iterdir())
    short_cl = root / "commitlog" / f"{int(cl[-1].name) + SEG:020d}"
    short_cl.write_bytes(b"")
    cq = sorted((root / "consumequeue" / "T" / "0").iterdir())[-1]
    os.truncate(cq, 40)
    return [str(short_cl), str(cq)]


def test_opening_changes_nothing_on_disk(tmp_path: Path) -> None:
    cfg = _crashed_store(str(tmp_path))
    _make_short_newest_files(tmp_path)
    _zero_index_checkpoint(tmp_path)
    before = _snapshot(tmp_path)
    time.sleep(0.02)
    native = NativeStore(cfg)
    assert native.recovery_mode == RecoveryMode.ABNORMAL
    assert _snapshot(tmp_path) == before
    native.shutdown()  # recovery never ran: shutting down writes nothing
    assert _snapshot(tmp_path) == before


def test_report_says_what_opening_found_and_recovery_repaired(tmp_path: Path) -> None:
    cfg = _crashed_store(str(tmp_path))
    short = _make_short_newest_files(tmp_path)
    _zero_index_checkpoint(tmp_path)
    index_files = sorted(str(p) for p in (tmp_path / "index").iterdir())
    assert index_files
    with MessageStore(cfg) as store:
        rep = store.recovery_report
        assert isinstance(rep, RecoveryReport)
        assert rep.mode == RecoveryMode.ABNORMAL and rep.mode == "abnormal"
        assert str(rep.mode) == "abnormal"
        assert list(rep.short_files_extended) == short
        assert sorted(rep.index_files_destroyed) == index_files
        assert rep.index_redispatch_from == 0
        assert rep.as_dict()["mode"] == "abnormal"
        # The rebuilt index finds every key; the extended queue file is full
        # size (the empty CommitLog file past the end was then cut away).
        for i in range(0, 400, 37):
            assert len(store.query_message("T", f"k{i}")) == 1
        assert os.path.getsize(short[1]) == SMALL["mapped_file_size_consume_queue"]
        assert not os.path.exists(short[0])


def test_steps_run_in_order_and_the_store_waits_for_them(tmp_path: Path) -> None:
    cfg = StoreConfig(store_path=str(tmp_path), **SMALL)
    MessageStore(cfg).start().shutdown()
    native = NativeStore(cfg)
    try:
        with pytest.raises(RecoveryOrderError, match="next step is check_file_sizes"):
            native.truncate()
        with pytest.raises(RecoveryOrderError, match="not recovered yet"):
            native.put("T", b"x")
        with pytest.raises(RecoveryOrderError, match="not recovered yet"):
            native.get_message("T", 0, 0, 1)
        assert issubclass(RecoveryOrderError, StoreError)
        assert native.check_file_sizes().short_files_extended == []
        native.judge_damage(False)
        with pytest.raises(RecoveryOrderError, match="normally"):
            native.scan_commit_log_abnormally(True)
        scan = native.scan_commit_log_normally(True)
        assert scan.mode == RecoveryMode.NORMAL
        native.recover_consume_queues()
        native.rebuild_queue_holes()
        native.truncate()
        native.rebuild_index()
        native.redispatch()
        native.clamp_consumer_offsets([])
        native.rebuild_queue_offset_table()
        assert native.recovery_report().mode == "normal"
        with pytest.raises(RecoveryOrderError, match="after recovery finished"):
            native.check_file_sizes()
    finally:
        native.shutdown()


def test_read_only_open_runs_the_same_steps_and_writes_nothing(tmp_path: Path) -> None:
    cfg = _crashed_store(str(tmp_path))
    _make_short_newest_files(tmp_path)
    before = _snapshot(tmp_path)
    with MessageStore(cfg, read_only=True) as ro:
        rep = ro.recovery_report
        assert rep is not None and rep.mode == RecoveryMode.NORMAL
        assert rep.short_files_extended == () and rep.index_files_destroyed == ()
        assert ro.get_message("g", "T", 1, 0, 32, None).max_offset == 200
    assert _snapshot(tmp_path) == before
