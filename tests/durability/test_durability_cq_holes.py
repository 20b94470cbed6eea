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
import random
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.durability_util import TOPIC, Ack, body_for, config, parse_ack, seq_of
from helpers.durability_util import WRITER as CRASH_WRITER
from helpers.killed_child import run_then_kill
from rocketstore import GetStatus, MessageStore

N = 300
CQ_FILE_64 = 64 * 20
WRITER = CRASH_WRITER.with_name("one_queue_writer.py")


def _cfg(path: Path):  # type: ignore[no-untyped-def]
    return config(path, "sync", mapped_file_size_consume_queue=CQ_FILE_64)


def _write_and_kill(dst: Path) -> list[Ack]:
    """Runs the writer on ``dst`` until it printed DONE, then SIGKILLs it."""
    run = run_then_kill(
        [WRITER, dst, str(N)],
        stderr_path=dst.with_name(dst.name + ".stderr"),
        marker=b"DONE",
        marker_timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, (run.returncode, run.stderr)
    text = [raw.decode() for raw in run.lines]
    assert text and text[-1].startswith("DONE"), run.stderr
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


def _units(p: Path, first: int, data: bytes) -> None:
    """Overwrites the units of ``p`` from unit ``first`` on with ``data``."""
    with open(p, "r+b") as f:
        f.seek(first * 20)
        f.write(data)


def _unit_of(p: Path, index: int) -> tuple[int, int, int]:
    with open(p, "rb") as f:
        f.seek(index * 20)
        b = f.read(20)
    return (
        int.from_bytes(b[:8], "big", signed=True),
        int.from_bytes(b[8:12], "big", signed=True),
        int.from_bytes(b[12:], "big", signed=True),
    )


def _unit(phy: int, size: int, tags: int = 0) -> bytes:
    return phy.to_bytes(8, "big", signed=True) + size.to_bytes(4, "big", signed=True) + (
        tags.to_bytes(8, "big", signed=True)
    )


def _garbage_phy_past_end(fs: list[Path]) -> None:
    """Unit 70 points far past the CommitLog's end (a plausible size)."""
    _units(fs[1], 6, _unit(1 << 40, 300))


def _garbage_oversize(fs: list[Path]) -> None:
    """Unit 75 points at its own record with a size over any record's."""
    phy, _, tags = _unit_of(fs[1], 11)
    _units(fs[1], 11, _unit(phy, 64 << 20, tags))


def _garbage_backwards(fs: list[Path]) -> None:
    """Units 100..102 point back at records 10..12 (valid records of the
    queue, with their sizes): CommitLog offsets going backwards."""
    back = b"".join(_unit(*_unit_of(fs[0], i)) for i in range(10, 13))
    _units(fs[1], 36, back)


def _garbage_random(fs: list[Path]) -> None:
    """Units 5..24 of the first file are random bytes with a positive size
    field (written-looking units)."""
    rng = random.Random(5)
    units = bytearray(rng.randbytes(20 * 20))
    for k in range(20):
        units[k * 20 + 8] &= 0x7F
        units[k * 20 + 11] |= 1
    _units(fs[0], 5, bytes(units))


DAMAGE: dict[str, Callable[[list[Path]], None]] = {
    "zero_middle_file": lambda fs: _zero(fs[1]),
    "zero_several_files": lambda fs: [_zero(f) for f in fs[1:4]] and None,
    "delete_middle_file": lambda fs: fs[2].unlink(),
    "delete_several_files": lambda fs: [f.unlink() for f in fs[1:3]] and None,
    "zero_first_file": lambda fs: _zero(fs[0]),
    "short_middle_file": lambda fs: os.truncate(fs[1], 610),
    "delete_first_file": lambda fs: fs[0].unlink(),
    "delete_first_two_files": lambda fs: [f.unlink() for f in fs[:2]] and None,
    "garbage_phy_past_end": _garbage_phy_past_end,
    "garbage_oversize": _garbage_oversize,
    "garbage_backwards": _garbage_backwards,
    "garbage_random": _garbage_random,
}


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Ack]]:
    d = tmp_path_factory.mktemp("cq-holes") / "store"
    acks = _write_and_kill(d)
    assert len(_queue_files(d)) == 5
    return d, acks


@pytest.fixture
def killed_copy(killed: tuple[Path, list[Ack]], tmp_path: Path) -> tuple[Path, list[Ack]]:
    """A copy of the killed writer's store for one test to damage, and its acknowledgements."""
    src, acks = killed
    d = tmp_path / "store"
    shutil.copytree(src, d)
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
    killed_copy: tuple[Path, list[Ack]], damage: str
) -> None:
    """A read-only open rebuilds a hole's units in memory (it writes nothing):
    it serves what the writer's recovery keeps."""
    d, acks = killed_copy
    reference = _snapshot(d)
    DAMAGE[damage](_queue_files(d))
    damaged = _snapshot(d)
    _check(d, acks, damaged, "normal", read_only=True)
    _check(d, acks, reference, "abnormal")
    _check(d, acks, reference, "normal", read_only=True)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_hole_rebuilt_after_crash(killed_copy: tuple[Path, list[Ack]], damage: str) -> None:
    d, acks = killed_copy
    reference = _snapshot(d)
    DAMAGE[damage](_queue_files(d))
    _check(d, acks, reference, "abnormal")
    _check(d, acks, reference, "normal")


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_hole_rebuilt_on_clean_reopen(killed_copy: tuple[Path, list[Ack]], damage: str) -> None:
    d, acks = killed_copy
    MessageStore(_cfg(d)).start().shutdown()  # recovered, then stopped cleanly
    reference = _snapshot(d)
    DAMAGE[damage](_queue_files(d))
    _check(d, acks, reference, "normal")
    _check(d, acks, reference, "normal")


# -- the front of a queue after retention ------------------------------------------------

SEG = 4096
CQ_FILE_4 = 4 * 20
D_MESSAGES = 40

KILL_AFTER_OPEN = r"""
import sys, time
from rocketstore import MessageStore, StoreConfig
store = MessageStore(StoreConfig(store_path=sys.argv[1], mapped_file_size_commit_log=4096,
                                 mapped_file_size_consume_queue=80)).start()
print("READY", flush=True)
time.sleep(120)
"""


def _sparse_cfg(path: Path):  # type: ignore[no-untyped-def]
    return config(
        path,
        "async",
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=CQ_FILE_4,
        delete_file_batch_max=1,
        delete_commit_log_files_interval=0,
    )


def _sparse_store(d: Path, deleted: int) -> tuple[list[int], list[bytes]]:
    """One message of ``D``/0 in each CommitLog file, after a filler record
    of topic ``F`` (4 units per queue file: queue file ``j`` holds the
    messages of CommitLog files ``4j..4j+3``); then retention deletes the
    oldest ``deleted`` CommitLog files and the queue files wholly below
    them. Returns each message's CommitLog offset and body."""
    offsets: list[int] = []
    bodies: list[bytes] = []
    with MessageStore(_sparse_cfg(d)) as store:
        while len(offsets) < D_MESSAGES:
            r = store.put("F", b"f" * 900, 0)
            if offsets and r.wrote_offset // SEG == offsets[-1] // SEG:
                continue
            body = body_for(len(offsets))
            rd = store.put(TOPIC, body, 0)
            assert rd.wrote_offset // SEG == r.wrote_offset // SEG
            assert rd.wrote_offset > r.wrote_offset
            offsets.append(rd.wrote_offset)
            bodies.append(body)
        store.flush()
        while store.min_phy_offset < deleted * SEG:
            assert store.delete_expired_files(force=True) == 1
        assert store.min_phy_offset == deleted * SEG
    return offsets, bodies


def _kill_after_open(d: Path) -> None:
    """A writer opens the store and is killed with SIGKILL (the abort file stays)."""
    run = run_then_kill(
        ["-c", KILL_AFTER_OPEN, d],
        stderr_path=d.with_name(d.name + ".stderr"),
        marker=b"READY",
        marker_timeout=600,  # bounded by the test's timeout
    )
    assert run.first_line.startswith("READY"), (run.first_line, run.stderr)


def _read_all(d: Path, first: int, bodies: list[bytes], offsets: list[int], mode: str) -> None:
    with MessageStore(_sparse_cfg(d)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == mode, rep
        assert store.get_min_offset_in_queue(TOPIC, 0) == first
        assert store.get_max_offset_in_queue(TOPIC, 0) == D_MESSAGES
        got = []
        off = first
        while off < D_MESSAGES:
            r = store.get_message("g", TOPIC, 0, off, 32)
            assert r.status is GetStatus.FOUND, (off, r.status)
            got.extend(r.messages)
            off = r.next_begin_offset
        assert [m.queue_offset for m in got] == list(range(first, D_MESSAGES))
        assert [m.body for m in got] == bodies[first:]
        assert [m.commit_log_offset for m in got] == offsets[first:]


def test_queue_files_deleted_by_retention_are_not_rebuilt(tmp_path: Path) -> None:
    """Retention deleted 20 CommitLog files and the 5 queue files wholly
    below them: the queue's first file now starts with a unit pointing above
    the CommitLog's min offset, and the CommitLog before it holds only other
    topics' records. Reopening (cleanly, and after a kill -9) rebuilds
    nothing: the same queue files, byte for byte, and the same min offset."""
    d = tmp_path / "store"
    offsets, bodies = _sparse_store(d, 20)
    reference = _snapshot(d)
    assert sorted(reference)[0] == f"{5 * CQ_FILE_4:020d}"
    assert offsets[20] > 20 * SEG
    _read_all(d, 20, bodies, offsets, "normal")
    assert _snapshot(d) == reference
    _kill_after_open(d)
    _read_all(d, 20, bodies, offsets, "abnormal")
    assert _snapshot(d) == reference


def test_deleted_first_queue_file_after_retention_is_rebuilt(tmp_path: Path) -> None:
    """Retention deleted 21 CommitLog files (message 20's among them) and
    the queue files wholly below them; then the queue's first file (units
    20..23) is lost. The CommitLog still holds messages 21..23: they are
    rebuilt in a new first file whose unit 20 is a pre-blank (its message is
    gone), after a kill -9 and on a clean reopen."""
    for crash in (True, False):
        d = tmp_path / f"store-{crash}"
        offsets, bodies = _sparse_store(d, 21)
        reference = _snapshot(d)
        first = sorted(reference)[0]
        assert first == f"{5 * CQ_FILE_4:020d}"
        (d / "consumequeue" / TOPIC / "0" / first).unlink()
        if crash:
            _kill_after_open(d)
        _read_all(d, 21, bodies, offsets, "abnormal" if crash else "normal")
        now = _snapshot(d)
        assert sorted(now) == sorted(reference)
        assert now[first][:20] == _unit(0, 0x7FFFFFFF, 0), "unit 20: pre-blank"
        assert now[first][20:] == reference[first][20:], "units 21..23 as dispatch wrote them"
        _read_all(d, 21, bodies, offsets, "normal")
        assert _snapshot(d) == now
