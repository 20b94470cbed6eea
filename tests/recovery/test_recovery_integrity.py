"""Recovery never makes acknowledged messages unreachable (crash images).

Each test edits the files of a closed (or killed) store the way a power loss,
a flipped bit or a hostile writer can leave them, then reopens it:

* ConsumeQueue holes — a queue file whose pages never reached the disk (all
  zeros, or its first units zero) while later queue files did — are rebuilt
  from the CommitLog range between the hole's good neighbours; units pointing
  past the recovered end are dropped in every queue file, not just the last.
* One wild unit (CommitLog offset 1<<50) does not hide the rest of its file.
* Damage inside durable data (before the durable mark, or, without a mark,
  stored before the checkpoint's physicMsgTimestamp) is not a torn tail: the
  read-write open refuses with CorruptedError and writes nothing; with
  ``on_corruption="skip"`` or ``rocketstore repair`` the damaged record is
  skipped (pulls skip and count it) and reported; a read-only open serves the
  rest and reports it.
* A record with an illegal topic, queue id or queue offset is invalid (rule
  of damage vs tail), never a ValueError that blocks every open.
* A V2 record with a topic longer than 127 bytes is readable.
* Stored consumer offsets are clamped to the recovered queue ends.
"""

from __future__ import annotations

import json
import struct
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from helpers.killed_child import run_then_kill
from helpers.presets import SEG, SMALL, body_of
from helpers.read_util import wait_dispatched
from helpers.records import encode_record
from helpers.store_util import BODY_AT, diff_snapshots, flip_commitlog_bits, snapshot
from rocketstore import (
    CorruptedError,
    GetStatus,
    InvalidMessageError,
    MessageStore,
    PutResult,
    StoreConfig,
)
from rocketstore.cli import main as cli_main

CQ_UNITS = SMALL["mapped_file_size_consume_queue"] // 20  # 500 units per queue file
TOPIC = "topic"


def cfg(path: Path, **kw: Any) -> StoreConfig:
    return StoreConfig(store_path=str(path), **{**SMALL, **kw})


def write_store(
    path: Path,
    n: int,
    queues: int = 2,
    crash: bool = False,
    pause_at: int | None = None,
    **kw: Any,
) -> list[PutResult]:
    """``n`` messages, message i in queue ``i % queues``; stopped cleanly or killed.

    ``pause_at``: wait 3.2 s before that message, so that an abnormal recovery
    (which starts 3 s before the checkpoint's times) does not start at the
    first CommitLog file and re-dispatch everything.
    """
    store = MessageStore(cfg(path, **kw)).start()
    out = []
    for i in range(n):
        if i == pause_at:
            time.sleep(3.2)
        r = store.put(TOPIC, body_of(i), queue_id=i % queues, keys=[f"key{i}"])
        assert r.ok, r.status
        out.append(r)
    if crash:
        store.flush()
        store._native._simulate_crash()  # type: ignore[union-attr]
    else:
        store.shutdown()
    return out


def cq_file(path: Path, queue_id: int, index: int) -> Path:
    return path / "consumequeue" / TOPIC / str(queue_id) / f"{index * CQ_UNITS * 20:020d}"


def assert_every_message(store: MessageStore, acked: list[PutResult], queues: int = 2) -> None:
    """Each acknowledged message is served by get_message at its queue offset."""
    for i, r in enumerate(acked):
        g = store.get_message("g", TOPIC, i % queues, r.queue_offset, 1)
        assert g.status is GetStatus.FOUND, (i, r.queue_offset, g)
        assert g.messages[0].body == body_of(i), i
        assert g.messages[0].commit_log_offset == r.wrote_offset


def clear_durable_mark(path: Path, physic_ts: int | None = None) -> None:
    """Makes the checkpoint look like an older store's: no durable mark."""
    with open(path / "checkpoint", "r+b") as f:
        if physic_ts is not None:
            f.write(physic_ts.to_bytes(8, "big"))
        f.seek(2048)
        f.write(bytes(2048))


# -- ConsumeQueue holes ---------------------------------------------------------------------


@pytest.mark.parametrize("crash", [False, True])
@pytest.mark.parametrize("lost", ["whole_file", "first_units"])
def test_lost_queue_pages_are_rebuilt(tmp_path: Path, lost: str, crash: bool) -> None:
    """Queue 0's second file lost its pages while its third file reached the disk."""
    path = tmp_path / "s"
    n = 2 * 3 * CQ_UNITS - 100  # queue 0: 2.9 files
    acked = write_store(path, n, crash=crash, pause_at=n - 200)
    p = cq_file(path, 0, 1)
    size = p.stat().st_size
    with open(p, "r+b") as f:
        f.write(bytes(size if lost == "whole_file" else 20 * 37))
    with MessageStore(cfg(path)) as store:
        assert store.get_max_offset_in_queue(TOPIC, 0) == (len(acked) + 1) // 2
        assert_every_message(store, acked)
        r = store.put(TOPIC, b"after", queue_id=0)
        assert r.queue_offset == (len(acked) + 1) // 2
    # Rebuilt for good: a second open finds nothing to repair.
    with MessageStore(cfg(path)) as store:
        assert_every_message(store, acked)


def test_stale_units_before_a_lost_newest_queue_file_are_dropped(tmp_path: Path) -> None:
    """The CommitLog lost its tail (past the durable data) and queue 0's newest
    file lost its pages: the units of the lost records in the earlier queue file
    must go too, or the queue end stays past what recovery kept."""
    path = tmp_path / "s"
    acked = write_store(path, 2 * 2 * CQ_UNITS + 200, crash=True)  # queue 0: 2.2 files
    keep = 2 * (CQ_UNITS + 300)  # messages kept: queue 0 ends at 800, in its 2nd file
    cut = acked[keep].wrote_offset
    # The records from `cut` on never reached the disk; neither did the
    # checkpoint that called them durable.
    clear_durable_mark(path, physic_ts=acked[keep].store_timestamp - 1)
    cl = sorted((path / "commitlog").iterdir())
    for f in cl:
        start = int(f.name)
        if start + SEG <= cut:
            continue
        with open(f, "r+b") as fh:
            at = max(cut - start, 0)
            fh.seek(at)
            fh.write(bytes(SEG - at))
    newest = cq_file(path, 0, 2)
    newest.write_bytes(bytes(newest.stat().st_size))
    with MessageStore(cfg(path)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.end_offset == cut, rep
        assert store.get_max_offset_in_queue(TOPIC, 0) == keep // 2
        assert store.get_max_offset_in_queue(TOPIC, 1) == keep // 2
        assert_every_message(store, acked[:keep])
        r = store.put(TOPIC, b"after", queue_id=0)
        assert r.queue_offset == keep // 2
        wait_dispatched(store)
        g = store.get_message("g", TOPIC, 0, keep // 2, 4)
        assert [m.body for m in g.messages] == [b"after"]


def test_one_wild_unit_does_not_hide_its_file(tmp_path: Path) -> None:
    path = tmp_path / "s"
    acked = write_store(path, 128)  # 64 units per queue, one file each
    p = cq_file(path, 0, 0)
    with open(p, "r+b") as f:
        f.seek(20 * 3)
        size, tags = struct.unpack(">iq", f.read(20)[8:])
        f.seek(20 * 3)
        f.write(struct.pack(">qiq", 1 << 50, size, tags))
    with MessageStore(cfg(path)) as store:
        assert store.get_max_offset_in_queue(TOPIC, 0) == 64
        assert_every_message(store, acked)
    assert struct.unpack(">q", p.read_bytes()[60:68])[0] == acked[6].wrote_offset


def test_wild_unit_inside_the_log_does_not_hide_its_file(tmp_path: Path) -> None:
    """A wild unit that points inside the CommitLog (at a later record of the
    queue) makes its successors look out of order: the CommitLog decides."""
    path = tmp_path / "s"
    acked = write_store(path, 128)
    p = cq_file(path, 0, 0)
    with open(p, "r+b") as f:
        f.seek(20 * 3)
        f.write(struct.pack(">qiq", acked[100].wrote_offset, acked[100].wrote_bytes, 0))
    with MessageStore(cfg(path)) as store:
        assert store.get_max_offset_in_queue(TOPIC, 0) == 64
        assert_every_message(store, acked)


# -- damage in durable data -----------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    from rocketstore import FlushDiskType, MessageStore, StoreConfig
    cfg = StoreConfig(store_path=sys.argv[1], flush_disk_type=FlushDiskType.SYNC_FLUSH,
                      mapped_file_size_commit_log=int(sys.argv[3]),
                      mapped_file_size_consume_queue=20000,
                      max_hash_slot_num=100, max_index_num=8000,
                      flush_consume_queue_thorough_interval=100)
    store = MessageStore(cfg).start()
    n = int(sys.argv[2])
    pause_at = int(sys.argv[4])
    for i in range(n):
        if i == pause_at:
            time.sleep(3.2)  # abnormal recovery then starts past the first file
        r = store.put("topic", (b"m%05d-" % i).ljust(100, b"x"), queue_id=i % 2)
        assert r.ok
        print(r.wrote_offset, r.queue_offset, flush=True)
    time.sleep(0.5)  # a checkpoint write carries the durable mark past the last put
    print("done", flush=True)
    time.sleep(60)
    """
)


def killed_sync_writer(
    path: Path, n: int, seg: int = 1 << 20, pause_at: int = -1
) -> list[tuple[int, int]]:
    """A SYNC_FLUSH writer puts ``n`` acknowledged messages and is killed (SIGKILL)."""
    run = run_then_kill(
        ["-c", WRITER, path, str(n), str(seg), str(pause_at)],
        stderr_path=path.with_name(path.name + ".writer.err"),
        marker=b"done",
        marker_timeout=600,  # bounded by the test's timeout
    )
    acks = []
    for line in run.complete:
        if line.strip() == "done":
            break
        off, qoff = line.split()
        acks.append((int(off), int(qoff)))
    assert len(acks) == n, run.stderr
    return acks


BIG = {"mapped_file_size_commit_log": 1 << 20, "mapped_file_size_consume_queue": 20000,
       "max_index_num": 8000}


def flip_body_bit(path: Path, wrote_offset: int, seg: int = 1 << 20) -> None:
    """Flips a bit inside the 100-byte body of the record at ``wrote_offset``."""
    flip_commitlog_bits(path, wrote_offset + BODY_AT + 32, seg, 0x10)


def test_flipped_bit_after_kill_is_refused_then_skipped(tmp_path: Path) -> None:
    path = tmp_path / "s"
    acks = killed_sync_writer(path, 5000)
    assert (path / "abort").exists()
    flip_body_bit(path, acks[100][0])
    before = snapshot(path, mtimes=False)

    with pytest.raises(CorruptedError) as ei:
        MessageStore(cfg(path, **BIG)).start()
    assert "00000000000000000000" in str(ei.value)
    assert f"offset {acks[100][0]}" in str(ei.value)
    assert diff_snapshots(before, snapshot(path, mtimes=False)) == []

    # Read-only: everything else is served, the damage is reported.
    with MessageStore(cfg(path, **BIG), read_only=True) as ro:
        rep = ro.recovery_report
        assert rep is not None and [d[0] for d in rep.damaged] == [acks[100][0]]
        size = acks[1][0] - acks[0][0]
        assert ro.max_phy_offset == acks[-1][0] + size
        g = ro.get_message("g", TOPIC, 0, acks[100][1], 2)
        assert g.damaged == 1
        assert [m.body for m in g.messages] == [body_of(102), body_of(104)]
    assert diff_snapshots(before, snapshot(path, mtimes=False)) == []

    with MessageStore(cfg(path, on_corruption="skip", **BIG)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal"
        assert [(d[0], d[1]) for d in rep.damaged] == [(acks[100][0], acks[101][0])]
        assert rep.end_offset == acks[-1][0] + size and rep.bytes_truncated == 0
        for i, (off, _qoff) in enumerate(acks):
            if i == 100:
                # A lookup of the skipped record names it instead of serving it.
                with pytest.raises(CorruptedError, match=f"offset {off}"):
                    store.look_message_by_offset(off)
                continue
            m = store.look_message_by_offset(off)
            assert m is not None and m.body == body_of(i), i
        pulled, damaged, offset = [], 0, 0
        while True:
            g = store.get_message("g", TOPIC, 0, offset, 32)
            if g.status is GetStatus.OFFSET_OVERFLOW_ONE:
                break
            pulled += [m.body for m in g.messages]
            damaged += g.damaged
            offset = g.next_begin_offset
        assert damaged == 1
        assert pulled == [body_of(i) for i in range(0, 5000, 2) if i != 100]
        assert store.get_max_offset_in_queue(TOPIC, 0) == 2500


def test_flipped_bit_after_clean_stop_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "s"
    acked = write_store(path, 3000, **BIG)
    flip_body_bit(path, acked[11].wrote_offset)
    with pytest.raises(CorruptedError):
        MessageStore(cfg(path, **BIG)).start()
    r = CliRunner().invoke(cli_main, ["repair", str(path), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [d["offset"] for d in out["damaged"]] == [acked[11].wrote_offset]
    # Repaired: a default open accepts the store and keeps all but record 11.
    with MessageStore(cfg(path, **BIG)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "normal" and rep.bytes_truncated == 0
        assert store.max_phy_offset == acked[-1].wrote_offset + acked[-1].wrote_bytes
        assert_every_message(store, acked[:11])
        for i in range(12, 3000):
            m = store.look_message_by_offset(acked[i].wrote_offset)
            assert m is not None and m.body == body_of(i)
        assert store.get_message("g", TOPIC, 1, acked[11].queue_offset, 1).damaged == 1
        c = store.consumer("g2", TOPIC)
        got = []
        while len(got) < 2999:
            batch = c.poll(timeout=2.0, max_messages=500)
            assert batch, len(got)
            got += batch
        assert c.damaged == 1
        assert sorted(m.body for m in got) == sorted(body_of(i) for i in range(3000) if i != 11)


def test_store_without_mark_judges_by_the_checkpoint_timestamp(tmp_path: Path) -> None:
    """Older stores have no durable mark: records stored at or before the
    checkpoint's physicMsgTimestamp are durable, later ones are a tail."""
    path = tmp_path / "s"
    acked = write_store(path, 300, crash=True)
    ts = acked[200].store_timestamp
    clear_durable_mark(path, physic_ts=ts)
    seg = path / "commitlog" / f"{0:020d}"
    victim = next(i for i, r in enumerate(acked) if r.store_timestamp <= ts and i > 20)
    with open(seg, "r+b") as f:
        f.seek(acked[victim].wrote_offset + 4)
        f.write(b"\0\0\0\0")  # magic gone
    with pytest.raises(CorruptedError):
        MessageStore(cfg(path)).start()
    # Damage stored after the timestamp is a torn tail: cut as before.
    clear_durable_mark(path, physic_ts=acked[victim].store_timestamp - 10_000)
    with MessageStore(cfg(path)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.end_offset == acked[victim].wrote_offset
        assert rep.damaged == ()
        assert_every_message(store, acked[:victim])


# -- illegal record fields ------------------------------------------------------------------


@pytest.mark.parametrize("crash", [False, True])
@pytest.mark.parametrize(
    "field",
    [
        {"topic": b"../../ESCAPE_dir"},
        {"topic": b"a/b"},
        {"topic": b""},
        {"topic": b".."},
        {"queue_id": -5},
        {"queue_offset": -7},
    ],
)
def test_illegal_record_at_the_tail_is_cut(
    tmp_path: Path, field: dict[str, Any], crash: bool
) -> None:
    path = tmp_path / "s"
    acked = write_store(path, 40, crash=crash)
    end = acked[-1].wrote_offset + acked[-1].wrote_bytes
    rec = encode_record(
        field.get("topic", b"topic"),
        b"evil",
        phy=end,
        queue_id=field.get("queue_id", 0),
        queue_offset=field.get("queue_offset", 20),
    )
    with open(path / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(end)
        f.write(rec)
    with MessageStore(cfg(path)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.end_offset == end
        assert_every_message(store, acked)
        assert store.put(TOPIC, b"next", queue_id=0).wrote_offset == end
    assert not (path / "ESCAPE_dir").exists()
    assert not (path / "consumequeue" / "ESCAPE_dir").exists()


@pytest.mark.parametrize("field", [{"topic": b"../xy"}, {"queue_id": -5}, {"queue_offset": -7}])
def test_illegal_record_inside_durable_data_is_damage(
    tmp_path: Path, field: dict[str, Any]
) -> None:
    path = tmp_path / "s"
    # Records without the property CRC: the record rules alone judge them.
    acked = write_store(path, 40, enabled_append_prop_crc=False)
    v = acked[10]
    rec = encode_record(
        field.get("topic", b"topic"),
        body_of(10)[: v.wrote_bytes - 91 - 5 - len(b"KEYS\x01key10")],
        phy=v.wrote_offset,
        queue_id=field.get("queue_id", 0),
        queue_offset=field.get("queue_offset", v.queue_offset),
        properties=b"KEYS\x01key10",
    )
    assert len(rec) == v.wrote_bytes
    with open(path / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(v.wrote_offset)
        f.write(rec)
    with pytest.raises(CorruptedError):
        MessageStore(cfg(path)).start()
    with MessageStore(cfg(path, on_corruption="skip")) as store:
        rep = store.recovery_report
        assert rep is not None and [d[0] for d in rep.damaged] == [v.wrote_offset]
        assert_every_message(store, acked[:10])
        for i in range(11, 40):
            g = store.get_message("g", TOPIC, i % 2, acked[i].queue_offset, 1)
            assert g.messages and g.messages[0].body == body_of(i)


def test_zeroed_properties_are_damage(tmp_path: Path) -> None:
    """A record whose properties were zeroed passed recovery (served without
    TAGS/KEYS); its properties must be well-formed pairs."""
    path = tmp_path / "s"
    acked = write_store(path, 40)
    v = acked[10]
    with open(path / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(v.wrote_offset + v.wrote_bytes - len(b"KEYS\x01key10"))
        f.write(bytes(len(b"KEYS\x01key10")))
    with pytest.raises(CorruptedError):
        MessageStore(cfg(path)).start()


def test_record_with_another_physical_offset_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "s"
    acked = write_store(path, 40)
    v = acked[10]
    with open(path / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(v.wrote_offset + 28)
        f.write(struct.pack(">q", v.wrote_offset + 1))
    with pytest.raises(CorruptedError):
        MessageStore(cfg(path)).start()


def test_long_v2_topic_is_readable(tmp_path: Path) -> None:
    """A 5.x store may hold V2 records with topics longer than 127 bytes:
    every read API accepts them (the put rule still refuses them)."""
    path = tmp_path / "s"
    acked = write_store(path, 10)
    end = acked[-1].wrote_offset + acked[-1].wrote_bytes
    long_topic = "T" * 200
    rec = encode_record(long_topic.encode(), b"v2 body", phy=end, queue_id=3, queue_offset=0,
                        properties=b"KEYS\x01k-v2\x02TAGS\x01x", v2=True)
    with open(path / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(end)
        f.write(rec)
    with MessageStore(cfg(path)) as store:
        assert store.max_phy_offset == end + len(rec)
        assert store.get_max_offset_in_queue(long_topic, 3) == 1
        g = store.get_message("g", long_topic, 3, 0, 4)
        assert [m.body for m in g.messages] == [b"v2 body"]
        assert [m.body for m in store.query_message(long_topic, "k-v2")] == [b"v2 body"]
        got = store.consumer("g", long_topic).poll(timeout=2.0)
        assert [m.body for m in got] == [b"v2 body"]
        with pytest.raises(InvalidMessageError, match="at most 127"):
            store.put(long_topic, b"x")


# -- consumer offsets -----------------------------------------------------------------------


def test_consumer_offsets_are_clamped_to_recovered_queue_ends(tmp_path: Path) -> None:
    path = tmp_path / "s"
    acked = write_store(path, 200, crash=True)
    with MessageStore(cfg(path)) as store:
        store.commit_offset("grp", TOPIC, 0, 100)
        store.commit_offset("grp", TOPIC, 1, 90)
        store._native._simulate_crash()  # type: ignore[union-attr]
        store._offsets.persist()
    # Power loss: the CommitLog tail from message 120 on (never durable) is gone.
    cut = acked[120].wrote_offset
    clear_durable_mark(path, physic_ts=acked[120].store_timestamp - 1)
    with open(path / "commitlog" / f"{cut - cut % SEG:020d}", "r+b") as f:
        f.seek(cut % SEG)
        f.write(bytes(SEG - cut % SEG))
    for f in sorted((path / "commitlog").iterdir()):
        if int(f.name) > cut:
            f.write_bytes(bytes(SEG))
    with MessageStore(cfg(path)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.consumer_offsets_clamped == 2
        assert store.get_max_offset_in_queue(TOPIC, 0) == 60
        assert store.query_offset("grp", TOPIC, 0) == 60
        assert store.query_offset("grp", TOPIC, 1) == 60
        r = store.put(TOPIC, b"new", queue_id=0)
        assert r.queue_offset == 60
        got = store.consumer("grp", TOPIC).poll(timeout=2.0)
        assert b"new" in [m.body for m in got]
    data = (path / "config" / "consumerOffset.json").read_text()
    assert "100" not in data and "90" not in data


def test_sigkill_then_power_loss_image_keeps_every_flushed_message(tmp_path: Path) -> None:
    """SYNC_FLUSH writer killed; the queue file holding the first units of
    queue 0 loses its pages, as a power loss may (page writes are unordered)."""
    path = tmp_path / "s"
    acks = killed_sync_writer(path, 3000, seg=SEG, pause_at=2800)
    q0 = path / "consumequeue" / TOPIC / "0"
    first = sorted(q0.iterdir())[0]
    with open(first, "r+b") as f:
        f.write(bytes(20 * 64))
    # (message_index_safe off: with no full index file it would make
    # abnormal recovery start at the first file and re-dispatch everything.)
    reopen = cfg(path, **{**BIG, "mapped_file_size_commit_log": SEG}, message_index_safe=False)
    with MessageStore(reopen) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal"
        for i, (_off, qoff) in enumerate(acks):
            g = store.get_message("g", TOPIC, i % 2, qoff, 1)
            assert g.status is GetStatus.FOUND and g.messages[0].body == body_of(i), i
