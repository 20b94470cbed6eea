"""Power-loss images (crash images), which kill -9 cannot show.

A store is written, flushed part-way (``flushed`` = the CommitLog offset known
to be on disk), written further, then stopped like a killed process
(``_simulate_crash``); the directory is copied and, in the copy, everything
past ``flushed`` is damaged the way a power loss can leave it: zeros, random
garbage, a shorter newest file, a torn last record, lost pages, a hole. The
consume queues can be damaged past their flushed part too. Reopening the copy
must give back every message below ``flushed``, intact, return nothing past
the valid end, drop queue units pointing past it, and take new puts at exactly
``recovery_report.end_offset``.

Also here: RocketMQ's corrupt-topic-length recovery case (normal and abnormal),
the abort and checkpoint files, and the index after an abnormal exit.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.durability_util import (
    CL_FILE,
    CQ_FILE,
    QUEUES,
    TOPIC,
    Ack,
    body_for,
    check_message,
    check_store,
    config,
    key_for,
    wait_dispatched,
)
from helpers.paths import HELPERS
from rocketstore import GetStatus, Message, MessageStore

PAGE = 4096
N_FLUSHED = 1900  # messages below the flushed offset (475 units per queue)
N_UNFLUSHED = 500  # written after it: several CommitLog files, a new CQ file per queue


# -- writing ---------------------------------------------------------------------------------


def _put(store: MessageStore, seqs: range, rnd: int = 1, **props: str) -> list[Ack]:
    """Puts ``seqs`` (singles and small batches); returns their acknowledgements."""
    acks: list[Ack] = []
    properties = dict(props) or None
    s = seqs.start
    while s < seqs.stop:
        n = min(1 + s % 5, seqs.stop - s)
        if n == 1:
            rs = [
                store.put(
                    TOPIC, body_for(s, rnd), s % QUEUES, keys=key_for(s), properties=properties
                )
            ]
        else:
            rs = store.put_messages(
                [
                    Message(
                        TOPIC, body_for(i, rnd), i % QUEUES, keys=key_for(i), properties=properties
                    )
                    for i in range(s, s + n)
                ]
            )
        for i, r in zip(range(s, s + n), rs, strict=True):
            assert r.ok, r.status
            acks.append(
                Ack(i, r.wrote_offset, i % QUEUES, r.queue_offset, r.msg_id or "", r.wrote_bytes)
            )
        s += n
    return acks


@dataclasses.dataclass(frozen=True)
class Image:
    """A crashed store's directory as the page cache held it."""

    path: Path
    flush: str
    acks: list[Ack]
    flushed: int  # CommitLog offset flushed before the crash
    cq_flushed: dict[int, int]  # units per queue flushed before the crash
    written_end: int  # CommitLog offset written at the crash


def _crash_image(dst: Path, flush: str) -> Image:
    live = dst.with_name(dst.name + "-live")
    store = MessageStore(config(live, flush)).start()
    acks = _put(store, range(N_FLUSHED))
    flushed = store.flush()
    assert flushed == store.flushed_offset == store.max_phy_offset
    # The checkpoint as that flush left it on disk: its durable mark says
    # `flushed`. Later checkpoint writes are lost with the power, like the
    # pages the tests damage past `flushed` (else the mark would call those
    # pages durable, and their loss damage rather than a torn tail).
    checkpoint_at_flush = (live / "checkpoint").read_bytes()
    cq_flushed = {q: store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
    # SYNC_FLUSH: WAIT=false puts are acknowledged without waiting for the disk.
    extra = {"WAIT": "false"} if flush == "sync" else {}
    acks += _put(store, range(N_FLUSHED, N_FLUSHED + N_UNFLUSHED), **extra)
    wait_dispatched(store)  # queue units exist for the unflushed messages too
    written_end = store.max_phy_offset
    assert written_end // CL_FILE >= flushed // CL_FILE + 2, "unflushed data spans few files"
    store._native._simulate_crash()  # type: ignore[union-attr]
    shutil.copytree(live, dst)
    (dst / "checkpoint").write_bytes(checkpoint_at_flush)
    del store
    shutil.rmtree(live)
    return Image(dst, flush, acks, flushed, cq_flushed, written_end)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Image]:
    root = tmp_path_factory.mktemp("images")
    return {f: _crash_image(root / f, f) for f in ("sync", "async")}


def _copy(img: Image, dst: Path) -> Image:
    shutil.copytree(img.path, dst)
    return dataclasses.replace(img, path=dst)


# -- damaging a copy -------------------------------------------------------------------------


def _cl_path(img: Image, phy: int) -> Path:
    return img.path / "commitlog" / f"{phy - phy % CL_FILE:020d}"


def _write_phy(img: Image, start: int, data: bytes) -> None:
    """Writes ``data`` at CommitLog offset ``start`` (may cross file boundaries)."""
    pos = 0
    while pos < len(data):
        phy = start + pos
        n = min(len(data) - pos, CL_FILE - phy % CL_FILE)
        p = _cl_path(img, phy)
        if p.exists():
            with open(p, "r+b") as f:
                f.seek(phy % CL_FILE)
                f.write(data[pos : pos + n])
        pos += n


def _read_phy(path: Path, start: int, end: int) -> bytes:
    """CommitLog bytes ``[start, end)``; missing bytes (short or absent file) read as zeros."""
    out = bytearray()
    phy = start
    while phy < end:
        n = min(end - phy, CL_FILE - phy % CL_FILE)
        p = path / "commitlog" / f"{phy - phy % CL_FILE:020d}"
        chunk = b""
        if p.exists():
            with open(p, "rb") as f:
                f.seek(phy % CL_FILE)
                chunk = f.read(n)
        out += chunk + b"\0" * (n - len(chunk))
        phy += n
    return bytes(out)


def _zeros(img: Image, rng: random.Random) -> None:
    _write_phy(img, img.flushed, b"\0" * (img.written_end - img.flushed))


def _garbage(img: Image, rng: random.Random) -> None:
    _write_phy(img, img.flushed, rng.randbytes(img.written_end - img.flushed + 3000))


def _drop_made_ahead(img: Image, after: Path) -> None:
    """Removes CommitLog files after ``after``: files made ahead, never written."""
    for p in sorted((img.path / "commitlog").iterdir()):
        if p.name > after.name:
            assert p.read_bytes().count(0) == p.stat().st_size, f"{p} holds data"
            p.unlink()


def _truncate_newest(img: Image, rng: random.Random) -> None:
    last = img.acks[-1]
    p = _cl_path(img, last.wrote_offset)
    # A file can be cut short only while it is created, when no later file
    # exists yet (the next one is made ahead only after it).
    _drop_made_ahead(img, p)
    assert p == sorted((img.path / "commitlog").iterdir())[-1]
    os.truncate(p, last.wrote_offset % CL_FILE + last.wrote_bytes // 2)


def _torn_last(img: Image, rng: random.Random) -> None:
    last = img.acks[-1]
    half = last.wrote_bytes // 2
    _write_phy(img, last.wrote_offset + half, b"\0" * (last.wrote_bytes - half))


def _lost_pages(img: Image, rng: random.Random) -> None:
    """Pages of the unflushed part reach the disk in any order: lose a random half."""
    first = img.flushed - img.flushed % PAGE + PAGE  # the flushed page itself stays
    for page in range(first, img.written_end, PAGE):
        if rng.random() < 0.5:
            _write_phy(img, page, b"\0" * min(PAGE, CL_FILE - page % CL_FILE))


def _hole(img: Image, rng: random.Random) -> None:
    """One lost record in the unflushed part; the (valid) records behind it are stale."""
    victim = img.acks[N_FLUSHED + N_UNFLUSHED // 3]
    _write_phy(img, victim.wrote_offset, b"\0" * victim.wrote_bytes)


CL_DAMAGE: dict[str, Callable[[Image, random.Random], None]] = {
    "zeros": _zeros,
    "garbage": _garbage,
    "truncate_newest": _truncate_newest,
    "torn_last": _torn_last,
    "lost_pages": _lost_pages,
    "hole": _hole,
}


def _cq_files(img: Image, q: int) -> list[Path]:
    return sorted((img.path / "consumequeue" / TOPIC / str(q)).iterdir())


def _damage_cq(img: Image, kind: str, rng: random.Random) -> None:
    """Damages every queue's units from its flushed count on."""
    for q in range(QUEUES):
        start = img.cq_flushed[q] * 20
        for p in _cq_files(img, q):
            frm = int(p.name)
            if frm + CQ_FILE <= start:
                continue
            at = max(start - frm, 0)
            newest = p == _cq_files(img, q)[-1]
            if kind == "zeros":
                data = b"\0" * (CQ_FILE - at)
            elif kind == "garbage":
                data = rng.randbytes(CQ_FILE - at)
            elif kind == "truncate" and newest:
                os.truncate(p, at + 7)  # mid-unit; the open extends it with zeros
                continue
            elif kind == "delete" and at == 0:
                p.unlink()
                continue
            else:
                data = b"\0" * (CQ_FILE - at)
            with open(p, "r+b") as f:
                f.seek(at)
                f.write(data)


# -- checking --------------------------------------------------------------------------------


def _expected_end(orig: Path, img: Image) -> int:
    """Where the valid CommitLog ends in the damaged copy: at the first record (or
    END_OF_FILE blank) past ``flushed`` whose bytes the damage changed."""

    def changed(a: int, b: int) -> bool:
        return _read_phy(orig, a, b) != _read_phy(img.path, a, b)

    prev_end = 0
    for a in img.acks:
        if a.wrote_offset // CL_FILE != prev_end // CL_FILE and changed(prev_end, prev_end + 8):
            return prev_end  # the blank that ends the previous file
        if changed(a.wrote_offset, a.wrote_offset + a.wrote_bytes):
            return a.wrote_offset
        prev_end = a.wrote_offset + a.wrote_bytes
    return prev_end


def _check_recovered(img: Image, end: int) -> None:
    """Reopens the damaged copy and checks it against what was written."""
    assert end >= img.flushed
    survivors = [a for a in img.acks if a.wrote_offset + a.wrote_bytes <= end]
    lost = [a for a in img.acks if a.wrote_offset >= end]
    assert len(survivors) + len(lost) == len(img.acks)
    assert len(survivors) >= N_FLUSHED
    with MessageStore(config(img.path, img.flush)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal"
        assert rep.end_offset == end, rep
        assert store.max_phy_offset == end
        # Every message below the end is there, intact; the queues are dense and
        # hold exactly those messages (units pointing past the end were dropped).
        n = check_store(store, survivors)
        assert n == len(survivors)
        for q in range(QUEUES):
            assert store.get_max_offset_in_queue(TOPIC, q) == sum(
                1 for a in survivors if a.queue_id == q
            )
        for a in lost[:40] + lost[-40:]:
            assert store.look_message_by_offset(a.wrote_offset) is None, a
            assert store.look_message_by_id(a.msg_id) is None, a
            assert store.query_message(TOPIC, key_for(a.seq)) == [], a
            got = store.get_message("g", TOPIC, a.queue_id, a.queue_offset, 1)
            assert not got.messages, a
        # New puts go exactly to the recovered end and continue every queue.
        table = store.queue_offset_table()
        new = []
        for s in range(n, n + 8):
            r = store.put(TOPIC, body_for(s), s % QUEUES, keys=key_for(s))
            assert r.ok
            new.append(
                Ack(s, r.wrote_offset, s % QUEUES, r.queue_offset, r.msg_id or "", r.wrote_bytes)
            )
        first = new[0]
        if end % CL_FILE + first.wrote_bytes + 8 <= CL_FILE:
            assert first.wrote_offset == end
        else:
            assert first.wrote_offset == end - end % CL_FILE + CL_FILE
        for a in new[:QUEUES]:
            assert a.queue_offset == table.get((TOPIC, a.queue_id), 0)
        wait_dispatched(store)
        check_store(store, survivors + new)
    # And a clean restart keeps all of it.
    with MessageStore(config(img.path, img.flush)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "normal" and rep.bytes_truncated == 0
        check_store(store, survivors + new)


@pytest.mark.parametrize("damage", list(CL_DAMAGE))
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_power_loss_image(
    images: dict[str, Image], tmp_path: Path, flush: str, damage: str
) -> None:
    img = _copy(images[flush], tmp_path / "img")
    CL_DAMAGE[damage](img, random.Random(damage))
    end = _expected_end(images[flush].path, img)
    if damage in ("zeros", "garbage"):
        assert end == img.flushed
    elif damage in ("truncate_newest", "torn_last"):
        assert end == img.acks[-1].wrote_offset
    _check_recovered(img, end)


@pytest.mark.parametrize("cq_damage", ["zeros", "truncate", "delete"])
@pytest.mark.parametrize("damage", ["zeros", "garbage", "torn_last"])
def test_power_loss_image_with_damaged_consume_queues(
    images: dict[str, Image], tmp_path: Path, damage: str, cq_damage: str
) -> None:
    """Queue units past the flushed part are lost too: recovery re-dispatches them."""
    img = _copy(images["async"], tmp_path / "img")
    rng = random.Random(damage + cq_damage)
    CL_DAMAGE[damage](img, rng)
    _damage_cq(img, cq_damage, rng)
    _check_recovered(img, _expected_end(images["async"].path, img))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_power_loss_image_lost_pages_many(
    images: dict[str, Image], tmp_path: Path, flush: str, seed: int
) -> None:
    img = _copy(images[flush], tmp_path / "img")
    rng = random.Random(seed)
    _lost_pages(img, rng)
    if seed % 2:
        _damage_cq(img, rng.choice(["zeros", "truncate", "delete"]), rng)
    _check_recovered(img, _expected_end(images[flush].path, img))


def test_power_loss_image_cq_garbage_keeps_flushed_messages(
    images: dict[str, Image], tmp_path: Path
) -> None:
    """Random garbage in the queues past their flushed part: every flushed message
    is still consumable at its offset, and nothing corrupt is ever returned."""
    base = images["async"]
    img = _copy(base, tmp_path / "img")
    rng = random.Random(11)
    _torn_last(img, rng)
    _damage_cq(img, "garbage", rng)
    end = _expected_end(base.path, img)
    with MessageStore(config(img.path)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal" and rep.end_offset == end
        for a in img.acks:
            if a.wrote_offset + a.wrote_bytes > img.flushed:
                break
            got = store.get_message("g", TOPIC, a.queue_id, a.queue_offset, 1)
            assert got.status is GetStatus.FOUND, (a, got.status)
            assert got.messages[0].commit_log_offset == a.wrote_offset
            check_message(got.messages[0], lambda s: 1)
        for q in range(QUEUES):
            off, top = 0, store.get_max_offset_in_queue(TOPIC, q)
            while off < top:
                got = store.get_message("g", TOPIC, q, off, 32)
                for m in got.messages:
                    check_message(m, lambda s: 1)
                    assert m.commit_log_offset + m.store_size <= end
                off = max(got.next_begin_offset, off + 1)
        assert store.put(TOPIC, b"after", 0).ok


def test_bogus_cq_units_do_not_hide_messages(images: dict[str, Image], tmp_path: Path) -> None:
    """Units that look valid but point past the CommitLog end sit in the middle
    of a queue: recovery must stop at them (units follow CommitLog order), cut
    them, and re-dispatch the records they hid."""
    img = _copy(images["async"], tmp_path / "img")  # the CommitLog is intact
    q = 2
    at = img.cq_flushed[q] * 20
    p = _cq_files(img, q)[at // CQ_FILE]
    with open(p, "r+b") as f:
        f.seek(at % CQ_FILE)
        f.write(struct.pack(">qiq", 1 << 40, 100, 0) * 5)
    _check_recovered(img, img.written_end)


@pytest.mark.parametrize("which", ["commitlog", "consumequeue"])
def test_lone_short_newest_file_is_extended(tmp_path: Path, which: str) -> None:
    """A directory's only file, cut short by a crash, is the newest file: it is
    extended with zeros and recovered (docs/format.md §14: file sizes on open)."""
    path = tmp_path / "s"
    store = MessageStore(config(path)).start()
    acks = _put(store, range(40))  # one CommitLog file, one CQ file per queue
    wait_dispatched(store)
    store._native._simulate_crash()  # type: ignore[union-attr]
    del store
    if which == "commitlog":
        short = path / "commitlog" / f"{0:020d}"
        # Cut short while it was created: no file was made after it yet.
        for p in (path / "commitlog").iterdir():
            if p != short:
                assert p.read_bytes().count(0) == p.stat().st_size, f"{p} holds data"
                p.unlink()
        last = acks[-1]
        os.truncate(short, last.wrote_offset + last.wrote_bytes // 2)
        survivors, size = acks[:-1], CL_FILE
    else:
        short = path / "consumequeue" / TOPIC / "0" / f"{0:020d}"
        os.truncate(short, 3 * 20 + 7)  # three units and part of a fourth
        survivors, size = acks, CQ_FILE
    with MessageStore(config(path)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal"
        assert short.stat().st_size == size
        check_store(store, survivors)


# -- crashing again after a truncation -------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "hole"])
def test_truncated_bytes_never_resurface(
    images: dict[str, Image], tmp_path: Path, damage: str
) -> None:
    """After a truncation, a second crash must not bring the cut bytes back: they
    were zeroed on disk (docs/format.md §14: truncation zeroes)."""
    orig = images["async"]
    img = _copy(orig, tmp_path / "img")
    CL_DAMAGE[damage](img, random.Random(5))
    end = _expected_end(orig.path, img)
    survivors = [a for a in img.acks if a.wrote_offset + a.wrote_bytes <= end]
    store = MessageStore(config(img.path, "async")).start()
    rep = store.recovery_report
    assert rep is not None and rep.end_offset == end and rep.bytes_truncated > 0
    n = len(survivors)
    if damage == "hole":
        # Rewrite the lost record with one of the same size: the log then ends
        # exactly where the stale records behind the hole used to start.
        new = _put(store, range(n, n + 1), rnd=2)
        assert new[0].wrote_offset == end
        assert new[0].wrote_offset + new[0].wrote_bytes == img.acks[n + 1].wrote_offset
    else:
        new = _put(store, range(n, n + 5), rnd=2)
    new_end = store.max_phy_offset
    store.flush()
    store._native._simulate_crash()  # type: ignore[union-attr]
    del store

    # On disk: zeros from the new end to the end of its file; no later file.
    tail = _read_phy(img.path, new_end, new_end - new_end % CL_FILE + CL_FILE)
    assert tail == b"\0" * len(tail), f"non-zero bytes survive past {new_end}"
    # No later file holds data (one made ahead holds only zeros).
    for p in sorted((img.path / "commitlog").iterdir()):
        if int(p.name) > new_end - new_end % CL_FILE:
            assert p.read_bytes().count(0) == p.stat().st_size, f"{p} holds data"

    with MessageStore(config(img.path, "async")) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal"
        assert rep.end_offset == new_end and rep.bytes_truncated == 0
        # The image is older than the checkpoint's 3 s margin by now, so the scan
        # may start late: the older keys then come from the index rebuild.
        check_store(store, survivors + new, lambda s: 1 if s < n else 2)


# -- RocketMQ's corrupt topic length ---------------------------------------------------------


@pytest.mark.parametrize("topic_len", [len(TOPIC) + 1, 0, 0x80, 0x7F])
@pytest.mark.parametrize("mode", ["normal", "abnormal"])
def test_corrupt_topic_length_of_last_record(tmp_path: Path, mode: str, topic_len: int) -> None:
    path = tmp_path / "s"
    store = MessageStore(config(path)).start()
    acks = _put(store, range(60))
    wait_dispatched(store)
    if mode == "normal":
        store.shutdown()
        assert not (path / "abort").exists()
    else:
        store.flush()
        store._native._simulate_crash()  # type: ignore[union-attr]
        assert (path / "abort").exists()
    del store
    last = acks[-1]
    # V1, IPv4 hosts: the topic length byte follows the body at 88 + bodyLen.
    at = last.wrote_offset % CL_FILE + 88 + len(body_for(last.seq))
    with open(
        path / "commitlog" / f"{last.wrote_offset - last.wrote_offset % CL_FILE:020d}", "r+b"
    ) as f:
        f.seek(at)
        assert f.read(1) == bytes([len(TOPIC)])
        f.seek(at)
        f.write(bytes([topic_len]))

    with MessageStore(config(path)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == mode
        assert rep.end_offset == last.wrote_offset
        assert store.max_phy_offset == last.wrote_offset
        assert store.look_message_by_offset(last.wrote_offset) is None
        assert store.get_max_offset_in_queue(TOPIC, last.queue_id) == last.queue_offset
        got = store.get_message("g", TOPIC, last.queue_id, last.queue_offset, 4)
        assert got.status is GetStatus.OFFSET_OVERFLOW_ONE and not got.messages
        assert store.query_message(TOPIC, key_for(last.seq)) == []
        check_store(store, acks[:-1])
        r = store.put(TOPIC, body_for(last.seq, 2), last.queue_id, keys=key_for(last.seq))
        assert (r.wrote_offset, r.queue_offset) == (last.wrote_offset, last.queue_offset)
        wait_dispatched(store)
        check_store(store, acks[:-1], lambda s: 2 if s == last.seq else 1)


# -- abort and checkpoint files --------------------------------------------------------------


def test_abort_file_tells_crash_from_clean_stop(tmp_path: Path) -> None:
    path = tmp_path / "s"
    abort = path / "abort"
    store = MessageStore(config(path)).start()
    assert abort.exists() and abort.stat().st_size == 0
    assert store.recovery_report is not None and store.recovery_report.mode == "normal"
    _put(store, range(10))
    store.shutdown()
    assert not abort.exists()

    store = MessageStore(config(path)).start()
    assert store.recovery_report is not None and store.recovery_report.mode == "normal"
    assert abort.exists()
    _put(store, range(10, 20))
    store._native._simulate_crash()  # type: ignore[union-attr]
    assert abort.exists()
    del store

    # A read-only open repairs nothing and leaves the marker alone.
    with MessageStore(config(path), read_only=True):
        assert abort.exists()
    assert abort.exists()

    store = MessageStore(config(path)).start()
    assert store.recovery_report is not None and store.recovery_report.mode == "abnormal"
    assert abort.exists()
    wait_dispatched(store)
    check_store(store, [])
    store.shutdown()
    assert not abort.exists()
    with MessageStore(config(path)) as store:
        assert store.recovery_report is not None and store.recovery_report.mode == "normal"
        assert check_store(store, []) == 20


def _checkpoint(path: Path) -> tuple[int, int, int]:
    data = (path / "checkpoint").read_bytes()
    assert len(data) == 4096
    # RocketMQ's fields (4.9.8: 0..24, 5.x: 0..48) hold the three timestamps
    # and zeros; our durable mark lives at 2048, past anything RocketMQ uses.
    assert data[24:2048] == b"\0" * (2048 - 24), "only the three timestamps (and 5.x zeros)"
    assert data[2048:2056] == b"RSDMARK1"  # every store this engine opened has the mark
    return struct.unpack(">qqq", data[:24])


def test_checkpoint_file(tmp_path: Path) -> None:
    path = tmp_path / "s"
    t0 = int(time.time() * 1000)
    store = MessageStore(config(path)).start()
    assert _checkpoint(path) == (0, 0, 0)
    acks = _put(store, range(50))
    last_ts = store.look_message_by_offset(acks[-1].wrote_offset).store_timestamp  # type: ignore[union-attr]
    store.flush()
    physic, logics, index = _checkpoint(path)
    now = int(time.time() * 1000)
    assert t0 <= physic <= now and physic == last_ts
    assert t0 <= logics <= now and logics <= last_ts
    assert 0 <= index <= now
    times = store._native.checkpoint()  # type: ignore[union-attr]
    assert (times.physic_msg_timestamp, times.logics_msg_timestamp,
            times.index_msg_timestamp) == (physic, logics, index)
    store.shutdown()
    physic2, logics2, index2 = _checkpoint(path)
    assert physic2 == physic and logics2 >= logics and index2 >= index
    assert max(physic2, logics2, index2) <= int(time.time() * 1000)


# -- the index after an abnormal exit ------------------------------------------------------

KEYS_PER_MSG = 3  # three index entries per message: 1999 entries roll a file every ~666


def _index_keys(seq: int) -> list[str]:
    return [key_for(seq), f"a-{seq}", f"b-{seq}"]


def _put_indexed(store: MessageStore, seqs: range) -> list[Ack]:
    acks = []
    for s in seqs:
        r = store.put(TOPIC, body_for(s), s % QUEUES, keys=_index_keys(s))
        assert r.ok
        acks.append(
            Ack(s, r.wrote_offset, s % QUEUES, r.queue_offset, r.msg_id or "", r.wrote_bytes)
        )
    return acks


def _assert_all_keys_found(store: MessageStore, acks: list[Ack]) -> None:
    missing = []
    for a in acks:
        for k in _index_keys(a.seq):
            found = store.query_message(TOPIC, k)
            if [m.commit_log_offset for m in found] != [a.wrote_offset]:
                missing.append(k)
    assert not missing, f"{len(missing)} keys not found, e.g. {missing[:5]}"


def test_index_complete_after_abnormal_exit(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = MessageStore(config(path)).start()
    acks = _put_indexed(store, range(2500))  # 7500 entries: 4 index files
    wait_dispatched(store)
    store._native._simulate_crash()  # type: ignore[union-attr]
    del store
    assert len(list((path / "index").iterdir())) >= 4
    with MessageStore(config(path)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal"
        _assert_all_keys_found(store, acks)


@pytest.fixture(scope="module")
def index_gap_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Ack]]:
    """Old messages, a pause longer than the checkpoint's 3 s margin, new messages,
    then a crash: abnormal recovery starts its CommitLog scan after the first
    file, while the index files destroyed (newer than the index checkpoint) go
    back further than that."""
    root = tmp_path_factory.mktemp("index-gap")
    live = root / "live"
    store = MessageStore(config(live)).start()
    acks = _put_indexed(store, range(1100))  # 3300 entries: index file 0 full, 1 started
    store.flush()
    time.sleep(3.5)
    acks += _put_indexed(store, range(1100, 1300))
    store.flush()
    times = store._native.checkpoint()  # type: ignore[union-attr]
    physic, logics = times.physic_msg_timestamp, times.logics_msg_timestamp
    index = times.index_msg_timestamp
    assert 0 < index < min(physic, logics) - 3000, (physic, logics, index)
    store._native._simulate_crash()  # type: ignore[union-attr]
    shutil.copytree(live, root / "image")
    del store
    shutil.rmtree(live)
    return root / "image", acks


def _recover_index_gap_image(image: Path, tmp_path: Path, index_safe: bool) -> MessageStore:
    """Opens (and so recovers) a copy of the image."""
    path = tmp_path / "s"
    shutil.copytree(image, path)
    store = MessageStore(config(path, message_index_safe=index_safe)).start()
    rep = store.recovery_report
    assert rep is not None and rep.mode == "abnormal"
    assert rep.index_redispatch_from is not None, "no index file was destroyed"
    return store


def _scan_start(store: MessageStore) -> int:
    """CommitLog offset the abnormal recovery scan started from."""
    rep = store.recovery_report
    assert rep is not None
    n_files = len(list((Path(store.config.store_path) / "commitlog").iterdir()))
    return (n_files - rep.files_scanned) * CL_FILE


def test_index_rebuilt_after_abnormal_exit_index_safe(
    index_gap_image: tuple[Path, list[Ack]], tmp_path: Path
) -> None:
    """message_index_safe (the default): the scan starts no later than the index
    checkpoint, so it re-indexes what the destroyed files held — unless the first
    record of a later CommitLog file was stored in the same millisecond as the last
    key of the kept index file (common at high put rates); the keys in between then
    come from the index rebuild, which must run before the scan raises the index's
    end offset (regression: they were skipped as already built)."""
    image, acks = index_gap_image
    with _recover_index_gap_image(image, tmp_path, True) as store:
        _assert_all_keys_found(store, acks)
        check_store(store, acks, query_keys=False)


def test_index_rebuilt_from_oldest_destroyed_file(
    index_gap_image: tuple[Path, list[Ack]], tmp_path: Path
) -> None:
    """Without message_index_safe the scan starts after the records the destroyed
    index file covered: their keys come only from the index rebuild (docs/format.md
    §14: no key is lost to an abnormal exit). Regression: the rebuild ran after
    the scan had raised the index's end offset, so build_index skipped them all."""
    image, acks = index_gap_image
    with _recover_index_gap_image(image, tmp_path, False) as store:
        rep = store.recovery_report
        assert rep is not None and rep.index_redispatch_from is not None
        assert _scan_start(store) > rep.index_redispatch_from, "scenario not reached"
        check_store(store, acks, query_keys=False)
        _assert_all_keys_found(store, acks)


def test_keys_of_new_messages_indexed_after_truncation(tmp_path: Path) -> None:
    """Power loss after a full index file was flushed but before the CommitLog
    records it indexes were: the CommitLog is cut below that file's end offset.
    Regression: recovery kept that index file, and build_index skips records below
    the newest file's end offset, so new messages went unindexed."""
    live = tmp_path / "live"
    slow_flush = {
        "flush_interval_commit_log": 600_000,
        "flush_commit_log_thorough_interval": 600_000,
    }
    store = MessageStore(config(live, **slow_flush)).start()
    acks = _put(store, range(1900))
    flushed = store.flush()
    acks += _put(store, range(1900, 2100))  # index file 0 fills at its 1999th key
    wait_dispatched(store)
    deadline = time.monotonic() + 10
    while _checkpoint(live)[2] == 0:  # the full index file was flushed in the background
        assert time.monotonic() < deadline, "index checkpoint never written"
        time.sleep(0.01)
    written_end = store.max_phy_offset
    store._native._simulate_crash()  # type: ignore[union-attr]
    img = Image(tmp_path / "img", "async", acks, flushed, {}, written_end)
    shutil.copytree(live, img.path)
    del store
    _zeros(img, random.Random(0))  # the CommitLog past `flushed` never reached the disk

    with MessageStore(config(img.path, **slow_flush)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal" and rep.end_offset == flushed
        check_store(store, acks[:1900])
        # Longer bodies than before: the new records do not land where the lost ones were.
        new = _put(store, range(1900, 1910), rnd=10)
        wait_dispatched(store)
        for a in new:
            found = store.query_message(TOPIC, key_for(a.seq))
            assert [m.commit_log_offset for m in found] == [a.wrote_offset], a


def test_truncation_zeroes_stale_records_behind_a_long_zero_run() -> None:
    """Lost pages can leave a zero gap longer than 1 MiB with stale records
    behind it; truncation must zero those too, or a second crash brings them
    back (4 MiB segments, so the gap fits inside one file)."""
    import subprocess
    import sys

    helper = HELPERS / "stale_past_zero_run.py"
    r = subprocess.run([sys.executable, str(helper)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stale records resurrected: 0" in r.stdout, r.stdout
