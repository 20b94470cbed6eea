"""``rocketstore repair`` rebuilds what ``verify`` reports as damaged in the
consume queues and the index from the CommitLog (docs/format.md §15.1).

Each test damages a cleanly closed store in one way (bit flips, zeroed or
garbage units, a truncated or deleted index file, a flipped hash slot),
checks that ``verify`` reports it, runs ``repair`` in a child process, and
then checks that ``verify`` passes and that every acknowledged message is
still served with its body: by queue offset (with and without a tag
filter), by CommitLog offset and by key. A second repair finds nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.store_util import flip_bits
from rocketstore import GetStatus, MessageStore, StoreConfig

SEG = 64 * 1024
CQ_FILE = 2000  # 100 units per ConsumeQueue file
SLOTS, ENTRIES = 64, 256
CFG = {"mapped_file_size_commit_log": SEG, "mapped_file_size_consume_queue": CQ_FILE,
       "max_hash_slot_num": SLOTS, "max_index_num": ENTRIES}
N = 400
TOPIC = "T"


def body(i: int) -> bytes:
    return b"%04d" % i + b"x" * 996


def tag(i: int) -> str:
    return "tb" if i % 3 == 0 else "tg"


class Store:
    """A closed store of ``N`` messages (queues 0 and 1, keys ``k<i>``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with MessageStore(StoreConfig(store_path=str(path), **CFG)) as s:
            self.acked = [s.put(TOPIC, body(i), queue_id=i % 2, tags=tag(i), keys=[f"k{i}"])
                          for i in range(N)]
        self.offsets = [r.wrote_offset for r in self.acked]

    def unit(self, queue_id: int, queue_offset: int) -> tuple[Path, int]:
        """The ConsumeQueue file and byte position of a unit."""
        per = CQ_FILE // 20
        name = f"{queue_offset // per * CQ_FILE:020d}"
        return (self.path / "consumequeue" / TOPIC / str(queue_id) / name,
                queue_offset % per * 20)

    def index_files(self) -> list[Path]:
        return sorted((self.path / "index").iterdir())


def write_at(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", *args],
                          capture_output=True, text=True, env=env, timeout=600)


def entry_at(index_file: Path, entry: int) -> int:
    return 40 + SLOTS * 4 + entry * 20


# -- the damage ---------------------------------------------------------------------
# Each returns a piece of what verify must say about it.


def zeroed_unit(s: Store) -> str:
    f, at = s.unit(0, 5)
    write_at(f, at, bytes(20))
    return "ConsumeQueue T/0@5"


def zeroed_units_across_a_file(s: Store) -> str:
    f, at = s.unit(1, 98)
    write_at(f, at, bytes(40))  # the last two units of the first file
    return "ConsumeQueue T/1@98"


def flipped_unit_offset(s: Store) -> str:
    f, at = s.unit(0, 5)
    flip_bits(f, at + 5, 0x10)  # a megabyte further: past the end of the CommitLog
    return "ConsumeQueue T/0@5"


def unit_pointing_at_another_record(s: Store) -> str:
    f, at = s.unit(0, 5)
    write_at(f, at, struct.pack(">q", s.offsets[11]))
    return "ConsumeQueue T/0@5"


def unit_with_a_wrong_size(s: Store) -> str:
    f, at = s.unit(0, 5)
    write_at(f, at + 8, struct.pack(">i", 999))
    return "ConsumeQueue T/0@5"


def unit_with_a_wrong_tags_code(s: Store) -> str:
    f, at = s.unit(0, 6)
    write_at(f, at + 12, struct.pack(">q", 12345))
    return "ConsumeQueue T/0@6"


def garbage_units(s: Store) -> str:
    f, at = s.unit(1, 30)
    write_at(f, at, bytes((i * 89 + 7) % 256 for i in range(60)))
    return "ConsumeQueue T/1@30"


def garbage_last_unit(s: Store) -> str:
    f, at = s.unit(0, N // 2 - 1)
    write_at(f, at, struct.pack(">qiq", 1 << 50, 7, 0))
    return "ConsumeQueue T/0@199"


def deleted_queue(s: Store) -> str:
    shutil.rmtree(s.path / "consumequeue" / TOPIC / "1")
    return "T/1@0"


def deleted_topic_queues(s: Store) -> str:
    # Another topic's queue keeps the queue file size known to repair.
    with MessageStore(StoreConfig(store_path=str(s.path), **CFG)) as store:
        store.put("Other", b"kept", queue_id=0)
    shutil.rmtree(s.path / "consumequeue" / TOPIC)  # the topic config still lists it
    return "T/0@0..199 (200 units) are missing"


def truncated_index_file(s: Store) -> str:
    first = s.index_files()[0]
    os.truncate(first, first.stat().st_size // 2)
    return f"index file {first.name}"


def deleted_index_file(s: Store) -> str:
    s.index_files()[0].unlink()
    return "not indexed"


def flipped_index_entry_offset(s: Store) -> str:
    first = s.index_files()[0]
    flip_bits(first, entry_at(first, 10) + 4 + 6, 0x40)
    return f"index file {first.name} entry 10"


def flipped_index_entry_hash(s: Store) -> str:
    first = s.index_files()[0]
    flip_bits(first, entry_at(first, 10) + 1, 0x40)
    return f"index file {first.name} entry 10"


def flipped_hash_slot(s: Store) -> str:
    first = s.index_files()[0]
    data = first.read_bytes()
    slot = next(i for i in range(SLOTS) if data[40 + 4 * i: 44 + 4 * i] != bytes(4))
    flip_bits(first, 40 + 4 * slot + 3, 0x03)
    return f"index file {first.name} slot {slot}"


DAMAGE: list[Callable[[Store], str]] = [
    zeroed_unit, zeroed_units_across_a_file, flipped_unit_offset,
    unit_pointing_at_another_record, unit_with_a_wrong_size, unit_with_a_wrong_tags_code,
    garbage_units, garbage_last_unit, deleted_queue, deleted_topic_queues,
    truncated_index_file, deleted_index_file, flipped_index_entry_offset,
    flipped_index_entry_hash, flipped_hash_slot,
]


def assert_all_served(path: Path, offsets: list[int]) -> None:
    """Every acknowledged message, by queue offset (all tags, then one tag),
    by CommitLog offset and by key, with its body."""
    with MessageStore(StoreConfig(store_path=str(path), **CFG)) as s:
        for q in (0, 1):
            for tags, want in ((None, [i for i in range(q, N, 2)]),
                               ("tg", [i for i in range(q, N, 2) if tag(i) == "tg"])):
                got: list[bytes] = []
                offset = 0
                while True:
                    g = s.get_message("g", TOPIC, q, offset, 32, tags=tags)
                    assert g.damaged == 0 and g.status in (
                        GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE,
                        GetStatus.OFFSET_OVERFLOW_ONE), (q, offset, g.status)
                    got += [m.body for m in g.messages]
                    if g.next_begin_offset == offset:
                        break
                    offset = g.next_begin_offset
                assert got == [body(i) for i in want], (q, tags)
            assert s.get_max_offset_in_queue(TOPIC, q) == N // 2
        for i in range(N):
            m = s.look_message_by_offset(offsets[i])
            assert m is not None and m.body == body(i), i
            assert [m.body for m in s.query_message(TOPIC, f"k{i}")] == [body(i)], i


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda d: d.__name__)
def test_repair_rebuilds_what_verify_reports(tmp_path: Path,
                                             damage: Callable[[Store], str]) -> None:
    s = Store(tmp_path / "store")
    what = damage(s)

    v = cli("verify", str(s.path))
    assert v.returncode == 1, v.stdout + v.stderr
    assert what in v.stdout, v.stdout

    r = cli("repair", str(s.path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rebuilt" in r.stdout and "nothing to repair" not in r.stdout, r.stdout
    assert "cannot repair" not in r.stdout, r.stdout

    v = cli("verify", str(s.path))
    assert v.returncode == 0, v.stdout + v.stderr
    assert "skipped" not in v.stdout, v.stdout
    assert_all_served(s.path, s.offsets)

    again = cli("repair", str(s.path))
    assert again.returncode == 0 and "nothing to repair" in again.stdout, again.stdout


def test_repair_skips_a_damaged_record_and_rebuilds_a_queue_unit(tmp_path: Path) -> None:
    """A body CRC mismatch is skipped and reported, never rebuilt from; a
    zeroed unit of another queue is rebuilt in the same repair."""
    s = Store(tmp_path / "store")
    victim = s.acked[3]  # queue 1, queue offset 1
    seg = s.path / "commitlog" / f"{victim.wrote_offset - victim.wrote_offset % SEG:020d}"
    flip_bits(seg, victim.wrote_offset % SEG + 200, 0x01)  # inside the body
    zeroed_unit(s)

    r = cli("repair", str(s.path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"offset {victim.wrote_offset}" in r.stdout and "CRC" in r.stdout, r.stdout
    assert "rebuilt 1 consume-queue unit(s)" in r.stdout, r.stdout
    v = cli("verify", str(s.path))
    assert v.returncode == 0, v.stdout + v.stderr
    assert "skipped" in v.stdout, v.stdout  # the damaged record: never served
    with MessageStore(StoreConfig(store_path=str(s.path), **CFG)) as store:
        got = store.get_message("g", TOPIC, 1, 0, 32)
        assert got.damaged == 1
        assert [m.body for m in got.messages] == [body(i) for i in range(1, 67, 2) if i != 3]
        got = store.get_message("g", TOPIC, 0, 0, 32)
        assert [m.body for m in got.messages] == [body(i) for i in range(0, 64, 2)]
    again = cli("repair", str(s.path))
    assert again.returncode == 0 and "nothing to repair" in again.stdout, again.stdout


def damage_magic(s: Store, i: int) -> int:
    """Breaks record ``i``'s magic code (recovery skips it); its offset."""
    off = s.offsets[i]
    write_at(s.path / "commitlog" / f"{off - off % SEG:020d}", off % SEG + 4, b"\xde\xad\xbe\xef")
    return off


def test_a_unit_into_a_skipped_range_stays_the_damaged_records(tmp_path: Path) -> None:
    """A unit pointing into a damaged range recovery skipped is that
    record's unit: pulls count it as damaged; repair rebuilds nothing from
    the range and keeps the index entry of the record."""
    s = Store(tmp_path / "store")
    off = damage_magic(s, 10)  # queue 0, queue offset 5
    f, at = s.unit(0, 5)
    write_at(f, at, struct.pack(">q", off + 3))

    r = cli("repair", str(s.path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"offset {off}" in r.stdout and "rebuilt" not in r.stdout, r.stdout
    v = cli("verify", str(s.path))
    assert v.returncode == 0 and "skipped" in v.stdout, v.stdout + v.stderr
    with MessageStore(StoreConfig(store_path=str(s.path), **CFG)) as store:
        got = store.get_message("g", TOPIC, 0, 4, 3)
        assert got.damaged == 1
        assert [m.body for m in got.messages] == [body(8), body(12), body(14)]


def test_repair_names_a_unit_whose_record_is_gone(tmp_path: Path) -> None:
    """A unit whose record is unreadable and which points nowhere cannot be
    rebuilt: repair names it with the next step and exits 1; the units
    after it and the other queue are served."""
    s = Store(tmp_path / "store")
    off = damage_magic(s, 10)  # queue 0, queue offset 5
    f, at = s.unit(0, 5)
    write_at(f, at, struct.pack(">q", 1 << 50))

    r = cli("repair", str(s.path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"offset {off}" in r.stdout, r.stdout
    assert "cannot repair" in r.stdout and "ConsumeQueue T/0@5" in r.stdout, r.stdout
    assert "next step" in r.stdout, r.stdout
    with MessageStore(StoreConfig(store_path=str(s.path), **CFG)) as store:
        for q in (0, 1):
            got = store.get_message("g", TOPIC, q, 0, 32)
            assert [m.body for m in got.messages] == [
                body(i) for i in range(q, 66, 2) if i != 10][:32]


def test_a_topic_deleted_from_the_topic_config_is_not_checked(tmp_path: Path) -> None:
    """A broker deleting a topic removes its queues and its topic config
    entry, not its records: verify does not ask for their units."""
    s = Store(tmp_path / "store")
    with MessageStore(StoreConfig(store_path=str(s.path), **CFG)) as store:
        store.put("Other", b"kept", queue_id=0)
    shutil.rmtree(s.path / "consumequeue" / TOPIC)
    topics = s.path / "config" / "topics.json"
    doc = json.loads(topics.read_text())
    del doc["topicConfigTable"][TOPIC]
    topics.write_text(json.dumps(doc))
    v = cli("verify", str(s.path))
    assert v.returncode == 0, v.stdout + v.stderr
