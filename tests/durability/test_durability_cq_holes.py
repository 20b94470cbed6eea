"""ConsumeQueue holes anywhere in a queue are rebuilt from the CommitLog.

A power loss can leave a consume-queue file in the middle of a queue as
zeros (its pages never reached the disk) while later queue files were
written back; a file can also be missing or short. Recovery must find such
a hole wherever it is — in any file, not only the newest ones it scans unit
by unit — after a crash *and* on a clean reopen, and rebuild its units from
the CommitLog between the hole's good neighbours (from the CommitLog's first
retained record for a hole at the front of the queue): every acknowledged
message is delivered exactly once, in order, and the rebuilt units are
byte-identical to what dispatch wrote.

The store is written by a subprocess (SYNC_FLUSH, 300 puts to one queue, 64
units per queue file: 5 files) that is killed with SIGKILL once every record
is dispatched; the damage is then applied to the directory it left.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.durability_util import TOPIC, Ack, body_for, config, parse_ack, seq_of
from helpers.durability_util import WRITER as CRASH_WRITER
from rocketstore import GetStatus, MessageStore

N = 300
CQ_FILE_64 = 64 * 20
WRITER = CRASH_WRITER.with_name("one_queue_writer.py")


def _cfg(path: Path):  # type: ignore[no-untyped-def]
    return config(path, "sync", mapped_file_size_consume_queue=CQ_FILE_64)


def _write_and_kill(dst: Path) -> list[Ack]:
    """Runs the writer on ``dst`` until it printed DONE, then SIGKILLs it."""
    err = dst.with_name(dst.name + ".stderr")
    with open(err, "wb") as e:
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), os.fspath(dst), str(N)],
            stdout=subprocess.PIPE,
            stderr=e,
        )
    lines: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            lines.append(raw)
            if raw.startswith(b"DONE"):
                break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        done.wait(120)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
        reader.join(60)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, err.read_text())
    text = [raw.decode() for raw in lines]
    assert text and text[-1].startswith("DONE"), err.read_text()
    acks = [parse_ack(ln) for ln in text if ln[0].isdigit()]
    assert [a.seq for a in acks] == list(range(N))
    assert [a.queue_offset for a in acks] == list(range(N))
    return acks


def _queue_files(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "consumequeue" / TOPIC / "0").iterdir())


def _snapshot(store_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in _queue_files(store_dir)}


def _check(
    store_dir: Path,
    acks: list[Ack],
    reference: dict[str, bytes],
    mode: str,
    read_only: bool = False,
) -> None:
    """Opens the store: every acknowledged message is delivered exactly once,
    in order; the queue files equal what dispatch wrote before the damage (a
    read-only open leaves them as they were: ``reference`` is the damage)."""
    with MessageStore(_cfg(store_dir), read_only=read_only) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == mode, rep
        assert store.get_min_offset_in_queue(TOPIC, 0) == 0
        assert store.get_max_offset_in_queue(TOPIC, 0) == N
        got = []
        off = 0
        while off < N:
            r = store.get_message("g", TOPIC, 0, off, 32)
            assert r.status is GetStatus.FOUND, (off, r.status)
            assert r.messages
            got.extend(r.messages)
            off = r.next_begin_offset
        assert len(got) == N
        for a, m in zip(acks, got, strict=True):
            assert m.queue_offset == a.queue_offset
            assert seq_of(m) == a.seq
            assert m.body == body_for(a.seq)
            assert m.commit_log_offset == a.wrote_offset
            assert m.msg_id == a.msg_id
    now = _snapshot(store_dir)
    assert sorted(now) == sorted(reference), (sorted(now), sorted(reference))
    for name, data in reference.items():
        assert now[name] == data, f"queue file {name} differs from what dispatch wrote"


def _zero(p: Path) -> None:
    p.write_bytes(b"\0" * p.stat().st_size)


DAMAGE: dict[str, Callable[[list[Path]], None]] = {
    "zero_middle_file": lambda fs: _zero(fs[1]),
    "zero_several_files": lambda fs: [_zero(f) for f in fs[1:4]] and None,
    "delete_middle_file": lambda fs: fs[2].unlink(),
    "delete_several_files": lambda fs: [f.unlink() for f in fs[1:3]] and None,
    "zero_first_file": lambda fs: _zero(fs[0]),
    "short_middle_file": lambda fs: os.truncate(fs[1], 610),
}


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Ack]]:
    d = tmp_path_factory.mktemp("cq-holes") / "store"
    acks = _write_and_kill(d)
    assert len(_queue_files(d)) == 5
    return d, acks


def test_sync_flush_kill9_zeroed_second_queue_file_is_rebuilt(tmp_path: Path) -> None:
    """SYNC_FLUSH, 300 acknowledged puts, kill -9, the second queue file back
    to zeros: units 64-127 are delivered after the abnormal open and after a
    clean reopen."""
    d = tmp_path / "store"
    acks = _write_and_kill(d)
    reference = _snapshot(d)
    _zero(_queue_files(d)[1])
    _check(d, acks, reference, "abnormal")
    _check(d, acks, reference, "normal")


@pytest.mark.parametrize("damage", [d for d in DAMAGE if d.startswith("zero")])
def test_read_only_open_serves_the_rebuilt_units(
    killed: tuple[Path, list[Ack]], tmp_path: Path, damage: str
) -> None:
    """A read-only open rebuilds a hole's units in memory (it writes nothing):
    it serves what the writer's recovery keeps."""
    src, acks = killed
    d = tmp_path / "store"
    shutil.copytree(src, d)
    reference = _snapshot(d)
    DAMAGE[damage](_queue_files(d))
    damaged = _snapshot(d)
    _check(d, acks, damaged, "normal", read_only=True)
    _check(d, acks, reference, "abnormal")
    _check(d, acks, reference, "normal", read_only=True)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_hole_rebuilt_after_crash(
    killed: tuple[Path, list[Ack]], tmp_path: Path, damage: str
) -> None:
    src, acks = killed
    d = tmp_path / "store"
    shutil.copytree(src, d)
    reference = _snapshot(d)
    DAMAGE[damage](_queue_files(d))
    _check(d, acks, reference, "abnormal")
    _check(d, acks, reference, "normal")


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_hole_rebuilt_on_clean_reopen(
    killed: tuple[Path, list[Ack]], tmp_path: Path, damage: str
) -> None:
    src, acks = killed
    d = tmp_path / "store"
    shutil.copytree(src, d)
    MessageStore(_cfg(d)).start().shutdown()  # recovered, then stopped cleanly
    reference = _snapshot(d)
    DAMAGE[damage](_queue_files(d))
    _check(d, acks, reference, "normal")
    _check(d, acks, reference, "normal")
