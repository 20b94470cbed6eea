"""Tests for the ``rocketstore`` command line (rocketstore.cli)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import pytest
from click.testing import CliRunner, Result

from rocketstore import Message, MessageStore, PutStatus, StoreConfig
from rocketstore.cli import main

SEGMENT = 4096
TOPICS = ("orders", "payments")
# Small files everywhere: default sizes reserve 1 GiB per CommitLog file.
SMALL: dict[str, Any] = {
    "mapped_file_size_consume_queue": 20 * 500,
    "max_hash_slot_num": 100,
    "max_index_num": 2000,
}


def small_config(path: Path, segment: int = SEGMENT) -> StoreConfig:
    return StoreConfig(store_path=str(path), mapped_file_size_commit_log=segment, **SMALL)


@dataclass(frozen=True)
class Written:
    """A message the fixture wrote, as the put reported it."""

    topic: str
    queue_id: int
    body: bytes
    offset: int
    size: int
    msg_id: str
    queue_offset: int


@dataclass(frozen=True)
class Store:
    path: Path
    messages: list[Written]

    @property
    def end(self) -> int:
        return max(m.offset + m.size for m in self.messages)


def run(args: Sequence[str]) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def run_json(args: Sequence[str]) -> Any:
    result = run([*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _body(i: int) -> bytes:
    return f"body-{i}-".encode() * (1 + i % 5)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A closed store of 4 KiB segments: 60 single puts and a batch of 10."""
    path = tmp_path / "store"
    written: list[Written] = []
    with MessageStore(small_config(path)) as s:
        for i in range(60):
            topic, queue_id = TOPICS[i % 2], i % 3
            r = s.put(topic, _body(i), queue_id, tags=f"tag{i % 4}", keys=[f"key-{i}"])
            assert r.status is PutStatus.PUT_OK
            assert r.msg_id is not None
            written.append(Written(topic, queue_id, _body(i), r.wrote_offset, r.wrote_bytes,
                                   r.msg_id, r.queue_offset))
        batch = [Message("audit", _body(100 + i), queue_id=0, tags="batch") for i in range(10)]
        for msg, r in zip(batch, s.put_messages(batch), strict=True):
            assert r.status is PutStatus.PUT_OK
            assert r.msg_id is not None
            written.append(Written(msg.topic, msg.queue_id, msg.body, r.wrote_offset,
                                   r.wrote_bytes, r.msg_id, r.queue_offset))
    return Store(path, written)


def _next_offsets(messages: list[Written]) -> dict[tuple[str, int], int]:
    table: dict[tuple[str, int], int] = {}
    for m in messages:
        key = (m.topic, m.queue_id)
        table[key] = max(table.get(key, 0), m.queue_offset + 1)
    return table


def _flip_body_byte(store: Store, m: Written, at: int = 3) -> None:
    """Flip one bit inside the body of record ``m`` (IPv4 hosts: body starts at +88)."""
    name = store.path / "commitlog" / f"{m.offset - m.offset % SEGMENT:020d}"
    with open(name, "r+b") as f:
        f.seek(m.offset % SEGMENT + 88 + at)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x01]))


# -- demo ------------------------------------------------------------------------


def test_demo_small_prints_summary() -> None:
    result = run(["demo", "--messages", "500", "--segment-size", str(64 * 1024)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for label in ("messages", "bytes", "segments", "put throughput", "read-back throughput",
                  "recovery", "read back intact"):
        assert label in out
    assert "500 / 500" in out
    assert "(temporary, removed)" in out
    assert "hot loop" in out  # measured as the README measures it


def test_demo_measures_put_apart_from_its_own_write() -> None:
    data = run_json(["demo", "-n", "200", "--segment-size", str(64 * 1024)])
    # The hot-loop rate is its own measurement, not the demo's write rate.
    assert data["put_msgs_per_s"] > 0 and data["write_msgs_per_s"] > 0
    assert data["put_msgs_per_s"] != data["write_msgs_per_s"]
    assert data["put_bytes_per_s"] > data["put_msgs_per_s"] * 100  # 100 B bodies + headers


def test_demo_json_keeps_dir(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    data = run_json(["demo", "-n", "300", "--segment-size", "8192", "--dir", str(d)])
    assert data["ok"] is True
    assert data["messages"] == data["written"] == data["intact"] == 300
    assert data["put_failures"] == {}
    assert data["segment_size"] == 8192
    assert data["segments"] == len(list((d / "commitlog").iterdir())) > 1
    assert data["recovery"]["mode"] == "normal"
    assert data["recovery"]["bytes_truncated"] == 0
    assert data["store_path"] == str(d)
    # The kept store verifies clean and holds the same records.
    v = run_json(["verify", str(d)])
    assert v["ok"] is True
    assert v["records"] == 300
    assert v["bytes"] == data["record_bytes"]


def test_demo_temporary_dir_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert run(["demo", "-n", "50", "--segment-size", "4096"]).exit_code == 0
    assert list(tmp_path.iterdir()) == []


def test_demo_bad_segment_size_is_exit_2() -> None:
    result = run(["demo", "-n", "10", "--segment-size", "16"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "--segment-size" in result.stderr and "at least" in result.stderr


def test_demo_segment_size_mismatch_is_exit_2(store: Store) -> None:
    result = run(["demo", "-n", "10", "--segment-size", "8192", "--dir", str(store.path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ")
    assert len(result.stderr.strip().splitlines()) == 1


# -- info ------------------------------------------------------------------------


def test_info_json(store: Store) -> None:
    data = run_json(["info", str(store.path)])
    assert data["segment_size"] == SEGMENT
    files = sorted(p.name for p in (store.path / "commitlog").iterdir())
    assert data["commit_log_files"] == files
    assert len(files) == store.end // SEGMENT + 1
    assert data["min_phy_offset"] == 0
    assert data["max_phy_offset"] == store.end
    assert data["records_scanned"] == len(store.messages)
    assert data["messages_in_queues"] == len(store.messages)
    assert data["end_offset"] == store.end
    assert data["recovery"]["stop_reason"] is None
    queues = {(q["topic"], q["queue_id"]): q["next_offset"] for q in data["queues"]}
    assert queues == _next_offsets(store.messages)


def test_info_human(store: Store) -> None:
    result = run(["info", str(store.path)])
    assert result.exit_code == 0, result.output
    assert "segment size" in result.stdout
    assert "4,096" in result.stdout
    for topic in (*TOPICS, "audit"):
        assert topic in result.stdout


def test_info_does_not_write(store: Store) -> None:
    before = {p: p.stat().st_mtime_ns for p in store.path.rglob("*")}
    assert run(["info", str(store.path)]).exit_code == 0
    assert run(["verify", str(store.path)]).exit_code == 0
    assert {p: p.stat().st_mtime_ns for p in store.path.rglob("*")} == before


# -- verify ----------------------------------------------------------------------


def test_verify_clean_store(store: Store) -> None:
    data = run_json(["verify", str(store.path)])
    assert data["ok"] is True
    assert data["problems"] == []
    assert data["records"] == len(store.messages)
    assert data["bytes"] == sum(m.size for m in store.messages)
    assert data["end_offset"] == store.end
    result = run(["verify", str(store.path)])
    assert result.exit_code == 0
    assert "OK" in result.stdout


def test_verify_detects_flipped_body_byte(store: Store) -> None:
    # A record in the middle of a segment that is not the first one.
    victim = next(m for m in store.messages[1:]
                  if m.offset >= SEGMENT and m.offset % SEGMENT != 0)
    _flip_body_byte(store, victim)
    result = run(["verify", str(store.path)])
    assert result.exit_code == 1
    assert str(victim.offset) in result.stdout
    assert "CRC" in result.stdout

    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert [p["offset"] for p in data["problems"]] == [victim.offset]
    # Records behind the damaged one are still walked and counted.
    assert data["records"] == len(store.messages)
    # The read-only recovery reports the damage and serves what follows it.
    assert data["recovery"]["end_offset"] == store.messages[-1].offset + store.messages[-1].size
    assert [d[0] for d in data["recovery"]["damaged"]] == [victim.offset]


def test_verify_detects_garbage_record_header(store: Store) -> None:
    victim = store.messages[len(store.messages) // 2]
    name = store.path / "commitlog" / f"{victim.offset - victim.offset % SEGMENT:020d}"
    with open(name, "r+b") as f:
        f.seek(victim.offset % SEGMENT + 4)
        f.write(b"\x12\x34\x56\x78")  # destroy the magic code
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert [p["offset"] for p in data["problems"]] == [victim.offset]
    # Damage inside durable data: the read-only recovery reports it and
    # reads on (it no longer ends the readable data).
    assert [d[0] for d in data["recovery"]["damaged"]] == [victim.offset]
    assert data["recovery"]["end_offset"] == store.messages[-1].offset + store.messages[-1].size


def test_verify_checks_queue_units_and_index_entries(store: Store) -> None:
    data = run_json(["verify", str(store.path)])
    assert data["consume_queue_units"] == len(store.messages)
    # Every single put carries one key; the batch none.
    assert data["index_entries"] == 60
    assert data["not_checked"] == 0


def test_verify_detects_a_queue_unit_with_a_wrong_size(store: Store) -> None:
    victim = next(m for m in store.messages if (m.topic, m.queue_id, m.queue_offset)
                  == ("orders", 0, 1))
    unit = store.path / "consumequeue" / "orders" / "0" / f"{0:020d}"
    with open(unit, "r+b") as f:
        f.seek(1 * 20 + 8)
        f.write((victim.size + 4).to_bytes(4, "big"))
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert [p["offset"] for p in data["problems"]] == [victim.offset]
    assert "ConsumeQueue orders/0@1" in data["problems"][0]["problem"]


def test_verify_checks_a_units_tags_code_but_not_an_extension_address(store: Store) -> None:
    victim = next(m for m in store.messages if (m.topic, m.queue_id, m.queue_offset)
                  == ("orders", 0, 1))
    unit = store.path / "consumequeue" / "orders" / "0" / f"{0:020d}"
    with open(unit, "r+b") as f:
        f.seek(1 * 20 + 12)
        f.write((12345).to_bytes(8, "big", signed=True))
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert [p["offset"] for p in data["problems"]] == [victim.offset]
    assert "ConsumeQueue orders/0@1 has tags code 12345" in data["problems"][0]["problem"]
    # A code below the int range is a broker's ConsumeQueue extension
    # address, not a tags hash: not checked.
    with open(unit, "r+b") as f:
        f.seek(1 * 20 + 12)
        f.write((-(2**31) - 7).to_bytes(8, "big", signed=True))
    assert run(["verify", str(store.path)]).exit_code == 0


def test_verify_detects_an_index_entry_with_a_wrong_hash(store: Store) -> None:
    (index,) = sorted((store.path / "index").iterdir())
    entry = 40 + SMALL["max_hash_slot_num"] * 4 + 1 * 20  # entry 0 is unused
    with open(index, "r+b") as f:
        f.seek(entry)
        key_hash = int.from_bytes(f.read(4), "big")
        f.seek(entry)
        f.write(((key_hash + 1) % 2**31).to_bytes(4, "big"))
        f.seek(entry + 4)
        phy = int.from_bytes(f.read(8), "big")
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    # The entry, and the record whose key it no longer indexes; its hash
    # slot now points at an entry of another slot.
    at = {p["offset"]: p["problem"] for p in data["problems"]}
    assert sorted(at, key=lambda o: (o is not None, o or 0)) == [None, phy]
    assert "entry 1: no key of the record has hash" in at[phy]
    assert "have keys that are not indexed" in at[phy]
    assert "slot" in at[None]


def _unit_file(store: Store, topic: str, queue_id: int) -> Path:
    return store.path / "consumequeue" / topic / str(queue_id) / f"{0:020d}"


def _index_entry_at(j: int) -> int:
    return 40 + SMALL["max_hash_slot_num"] * 4 + j * 20


def test_verify_detects_a_queue_unit_pointing_inside_its_record(store: Store) -> None:
    victim = next(m for m in store.messages if (m.topic, m.queue_id, m.queue_offset)
                  == ("orders", 0, 2))
    with open(_unit_file(store, "orders", 0), "r+b") as f:
        f.seek(2 * 20)
        f.write((victim.offset + 8).to_bytes(8, "big"))
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert [p["offset"] for p in data["problems"]] == [victim.offset + 8]
    assert "ConsumeQueue orders/0@2 points at no valid record" in data["problems"][0]["problem"]
    assert data["consume_queue_units"] == len(store.messages)


def test_verify_checks_queue_units_out_of_commit_log_order(store: Store) -> None:
    # Swapped units: the second goes back in CommitLog order and is checked
    # on its own; both point at records of another queue offset.
    first, second = (next(m for m in store.messages
                          if (m.topic, m.queue_id, m.queue_offset) == ("payments", 1, q))
                     for q in (0, 1))
    with open(_unit_file(store, "payments", 1), "r+b") as f:
        units = f.read(40)
        f.seek(0)
        f.write(units[20:] + units[:20])
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert [p["offset"] for p in data["problems"]] == [first.offset, second.offset]
    assert all("with queue offset" in p["problem"] for p in data["problems"])
    assert data["consume_queue_units"] == len(store.messages)


def test_verify_detects_an_index_entry_pointing_at_another_record(store: Store) -> None:
    (index,) = sorted((store.path / "index").iterdir())
    other = store.messages[40]
    with open(index, "r+b") as f:
        f.seek(_index_entry_at(5) + 4)
        indexed = int.from_bytes(f.read(8), "big")
        f.seek(_index_entry_at(5) + 4)
        f.write(other.offset.to_bytes(8, "big"))
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    # The entry, and the record whose key it no longer indexes.
    at = {p["offset"]: p["problem"] for p in data["problems"]}
    assert sorted(at) == sorted([other.offset, indexed])
    assert "entry 5: no key of the record has hash" in at[other.offset]
    assert "have keys that are not indexed" in at[indexed]


def test_verify_detects_an_index_entry_pointing_inside_a_record(store: Store) -> None:
    (index,) = sorted((store.path / "index").iterdir())
    with open(index, "r+b") as f:
        f.seek(_index_entry_at(7) + 4)
        phy = int.from_bytes(f.read(8), "big") + 1
        f.seek(-8, 1)
        f.write(phy.to_bytes(8, "big"))
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    # The entry, and the record whose key it no longer indexes.
    at = {p["offset"]: p["problem"] for p in data["problems"]}
    assert sorted(at) == [phy - 1, phy]
    assert "entry 7 points at no valid record" in at[phy]
    assert "have keys that are not indexed" in at[phy - 1]


def test_verify_checks_index_entries_out_of_commit_log_order(store: Store) -> None:
    # Entries 3 and 4 swapped whole (hash and offset): both still point at
    # a record carrying their key, though entry 4 now goes back; only the
    # hash slots and chains, which still lead to the old places, are wrong.
    (index,) = sorted((store.path / "index").iterdir())
    with open(index, "r+b") as f:
        f.seek(_index_entry_at(3))
        two = f.read(40)
        f.seek(_index_entry_at(3))
        f.write(two[20:36] + two[16:20] + two[:16] + two[36:40])
    result = run(["verify", str(store.path), "--json"])
    data = json.loads(result.stdout)
    assert [p["offset"] for p in data["problems"]] == [None], data["problems"]
    assert f"index file {index.name} " in data["problems"][0]["problem"]
    assert data["index_entries"] == 60
    # The one going back is checked as closely: a wrong hash is found.
    with open(index, "r+b") as f:
        f.seek(_index_entry_at(4))
        key_hash = int.from_bytes(f.read(4), "big")
        phy = int.from_bytes(f.read(8), "big")
        f.seek(_index_entry_at(4))
        f.write(((key_hash + 1) % 2**31).to_bytes(4, "big"))
    result = run(["verify", str(store.path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    at = {p["offset"]: p["problem"] for p in data["problems"]}
    assert sorted(o for o in at if o is not None) == [phy]
    assert "entry 4: no key of the record has hash" in at[phy]


def test_verify_walks_queues_over_several_files(tmp_path: Path) -> None:
    path = tmp_path / "store"
    cfg = StoreConfig(store_path=str(path), mapped_file_size_commit_log=SEGMENT,
                      **{**SMALL, "mapped_file_size_consume_queue": 20 * 4})
    with MessageStore(cfg) as s:
        results = [s.put("orders", _body(i), i % 2, keys=[f"key-{i}"]) for i in range(30)]
    assert len(list((path / "consumequeue" / "orders" / "1").iterdir())) == 4
    data = run_json(["verify", str(path)])
    assert (data["consume_queue_units"], data["index_entries"]) == (30, 30)
    # Unit 5 of queue 1 (the second unit of its second file) with a wrong size.
    victim = results[11]
    assert victim.queue_offset == 5
    with open(path / "consumequeue" / "orders" / "1" / f"{4 * 20:020d}", "r+b") as f:
        f.seek(20 + 8)
        f.write((victim.wrote_bytes + 1).to_bytes(4, "big"))
    result = run(["verify", str(path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert [p["offset"] for p in data["problems"]] == [victim.wrote_offset]
    assert "ConsumeQueue orders/1@5 says size" in data["problems"][0]["problem"]


def test_crc_matches_what_the_store_wrote(store: Store) -> None:
    # verify computes CRC32 & 0x7FFFFFFF over the stored body: the store agrees.
    data = run_json(["get", str(store.path), "--offset", str(store.messages[0].offset)])
    assert data["body_crc"] == zlib.crc32(store.messages[0].body) & 0x7FFFFFFF


# -- get -------------------------------------------------------------------------


def test_get_by_offset_json(store: Store) -> None:
    m = store.messages[7]
    data = run_json(["get", str(store.path), "--offset", str(m.offset)])
    assert data["msg_id"] == m.msg_id
    assert data["topic"] == m.topic
    assert data["queue_id"] == m.queue_id
    assert data["queue_offset"] == m.queue_offset
    assert data["commit_log_offset"] == m.offset
    assert data["store_size"] == m.size
    assert data["tags"] == "tag3"
    assert data["keys"] == ["key-7"]
    assert data["properties"] == {"TAGS": "tag3", "KEYS": "key-7"}
    assert data["body_utf8"] == m.body.decode()
    assert data["body_length"] == len(m.body)
    assert data["store_host"] == "127.0.0.1:10911"


def test_get_by_id(store: Store) -> None:
    m = store.messages[-1]
    data = run_json(["get", str(store.path), "--id", m.msg_id])
    assert data["commit_log_offset"] == m.offset
    assert data["topic"] == "audit"
    # Message ids are hex: lower case finds the same record.
    assert run_json(["get", str(store.path), "--id", m.msg_id.lower()]) == data


def test_get_human_shows_fields_and_body(store: Store) -> None:
    m = store.messages[0]
    result = run(["get", str(store.path), "--offset", str(m.offset)])
    assert result.exit_code == 0, result.output
    for text in ("topic", "orders", "body", "b'body-0-'", m.msg_id):
        assert text in result.stdout


def test_get_not_found_is_exit_1(store: Store) -> None:
    result = run(["get", str(store.path), "--offset", str(store.end + 1000)])
    assert result.exit_code == 1
    assert "no message" in result.stderr


def test_get_bad_id_is_exit_2(store: Store) -> None:
    result = run(["get", str(store.path), "--id", "not-an-id"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "not-an-id" in result.stderr


@pytest.mark.parametrize("args", [[], ["--offset", "0", "--id", "00"], ["--queue", "1",
                                                                         "--offset", "0"]])
def test_get_usage_errors(store: Store, args: list[str]) -> None:
    result = run(["get", str(store.path), *args])
    assert result.exit_code == 2
    assert "Error" in result.stderr


# -- errors ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["info", "verify", "get", "tail", "query"])
def test_missing_path_is_exit_2(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope"
    extra = {"get": ["--offset", "0"], "query": ["--topic", "t", "--key", "k"]}.get(command, [])
    result = run([command, str(missing), *extra])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.output


def test_store_error_is_one_line_exit_2(store: Store) -> None:
    # A short CommitLog file that is not the newest is refused by the store.
    first = store.path / "commitlog" / f"{0:020d}"
    with open(first, "r+b") as f:
        f.truncate(SEGMENT // 2)
    result = run(["info", str(store.path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.output


def test_help_and_version() -> None:
    result = run(["--help"])
    assert result.exit_code == 0
    for command in ("demo", "info", "verify", "get", "tail", "query", "bench"):
        assert command in result.stdout
    assert run(["--version"]).exit_code == 0


# -- get by queue offset ---------------------------------------------------------


def _queue(store: Store, topic: str, queue_id: int) -> list[Written]:
    return sorted((m for m in store.messages if (m.topic, m.queue_id) == (topic, queue_id)),
                  key=lambda m: m.queue_offset)


def test_get_by_queue_offset_found(store: Store) -> None:
    q = _queue(store, "orders", 1)
    data = run_json(["get", str(store.path), "--topic", "orders", "--queue", "1",
                     "--offset", "2"])
    assert data["status"] == "FOUND"
    assert data["next_begin_offset"] == 3
    assert (data["min_offset"], data["max_offset"]) == (0, len(q))
    [m] = data["messages"]
    assert (m["topic"], m["queue_id"], m["queue_offset"]) == ("orders", 1, 2)
    assert m["commit_log_offset"] == q[2].offset
    assert m["body_utf8"] == q[2].body.decode()

    data = run_json(["get", str(store.path), "--topic", "orders", "--queue", "1",
                     "--offset", "1", "--count", "3"])
    assert [m["queue_offset"] for m in data["messages"]] == [1, 2, 3]
    assert data["next_begin_offset"] == 4


def test_get_by_queue_offset_human(store: Store) -> None:
    q = _queue(store, "payments", 0)
    result = run(["get", str(store.path), "--topic", "payments", "--offset", "0"])
    assert result.exit_code == 0, result.output
    assert "FOUND" in result.stdout
    assert "next offset 1" in result.stdout
    assert q[0].msg_id in result.stdout
    result = run(["get", str(store.path), "--topic", "payments", "--offset", "0", "-c", "4"])
    assert result.exit_code == 0, result.output
    assert "4 message(s)" in result.stdout
    for i in range(4):
        assert f"payments/0@{i}" in result.stdout


def test_get_by_queue_offset_overflow(store: Store) -> None:
    end = len(_queue(store, "orders", 0))
    result = run(["get", str(store.path), "--topic", "orders", "--queue", "0",
                  "--offset", str(end), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["status"] == "OFFSET_OVERFLOW_ONE"
    assert data["messages"] == []
    assert data["next_begin_offset"] == end

    result = run(["get", str(store.path), "--topic", "orders", "--queue", "0",
                  "--offset", str(end + 5), "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["status"] == "OFFSET_OVERFLOW_BADLY"

    result = run(["get", str(store.path), "--topic", "orders", "--queue", "0",
                  "--offset", str(end)])
    assert result.exit_code == 1
    assert "OFFSET_OVERFLOW_ONE" in result.stdout

    result = run(["get", str(store.path), "--topic", "nosuchtopic", "--offset", "0", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["status"] == "NO_MESSAGE_IN_QUEUE"


def test_get_count_beyond_one_pull(tmp_path: Path) -> None:
    path = tmp_path / "deep"
    with MessageStore(small_config(path, 64 * 1024)) as s:
        for i in range(80):
            assert s.put("deep", f"m{i}".encode()).status is PutStatus.PUT_OK
    data = run_json(["get", str(path), "--topic", "deep", "--offset", "5", "--count", "70"])
    assert data["status"] == "FOUND"
    assert [m["body_utf8"] for m in data["messages"]] == [f"m{i}" for i in range(5, 75)]
    assert data["next_begin_offset"] == 75


def test_get_tags_filter(store: Store) -> None:
    q = _queue(store, "payments", 0)
    wanted = [m for m in q if _tag(store, m) == "tag1"]
    assert 0 < len(wanted) < len(q)
    data = run_json(["get", str(store.path), "--topic", "payments", "--offset", "0",
                     "--count", str(len(q)), "--tags", "tag1"])
    assert data["status"] == "FOUND"
    assert data["tags"] == ["tag1"]
    assert [m["commit_log_offset"] for m in data["messages"]] == [m.offset for m in wanted]
    assert {m["tags"] for m in data["messages"]} == {"tag1"}

    both = run_json(["get", str(store.path), "--topic", "payments", "--offset", "0",
                     "--count", str(len(q)), "--tags", "tag1,tag3"])
    assert len(both["messages"]) == len(q)
    star = run_json(["get", str(store.path), "--topic", "payments", "--offset", "0",
                     "--count", str(len(q)), "--tags", "*"])
    assert star["tags"] is None
    assert len(star["messages"]) == len(q)

    result = run(["get", str(store.path), "--topic", "payments", "--offset", "0",
                  "--tags", "nosuchtag", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["status"] == "NO_MATCHED_MESSAGE"


def _tag(store: Store, m: Written) -> str:
    return f"tag{store.messages.index(m) % 4}"


@pytest.mark.parametrize("args", [["--offset", "0", "--count", "2"],
                                  ["--offset", "0", "--tags", "a"],
                                  ["--topic", "orders", "--id", "00"],
                                  ["--topic", "orders"],
                                  ["--topic", "orders", "--offset", "-1"]])
def test_get_queue_usage_errors(store: Store, args: list[str]) -> None:
    result = run(["get", str(store.path), *args])
    assert result.exit_code == 2
    assert "Error" in result.stderr
    assert "Traceback" not in result.output


# -- tail ------------------------------------------------------------------------


def test_tail_prints_last_n_in_write_order(store: Store) -> None:
    result = run(["tail", str(store.path), "-n", "5", "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [m["commit_log_offset"] for m in lines] == [m.offset for m in store.messages[-5:]]

    result = run(["tail", str(store.path), "--topic", "orders", "-n", "3", "--json"])
    orders = [m for m in store.messages if m.topic == "orders"]
    got = [json.loads(line)["commit_log_offset"] for line in result.stdout.splitlines()]
    assert got == [m.offset for m in orders[-3:]]

    result = run(["tail", str(store.path), "--topic", "orders", "--queue", "2", "-n", "100"])
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == len(_queue(store, "orders", 2))


def test_tail_human_and_default_count(store: Store) -> None:
    result = run(["tail", str(store.path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 10
    last = store.messages[-1]
    assert f"audit/0@{last.queue_offset}" in lines[-1]
    assert "tags=batch" in lines[-1]
    assert last.body.decode() in lines[-1]
    assert run(["tail", str(store.path), "-n", "0"]).stdout == ""


def test_tail_from_beginning(store: Store) -> None:
    result = run(["tail", str(store.path), "--topic", "payments", "--from-beginning", "--json"])
    assert result.exit_code == 0, result.output
    got = [json.loads(line)["commit_log_offset"] for line in result.stdout.splitlines()]
    assert got == [m.offset for m in store.messages if m.topic == "payments"]


def test_tail_queue_needs_topic(store: Store) -> None:
    result = run(["tail", str(store.path), "--queue", "1"])
    assert result.exit_code == 2
    assert "--queue needs --topic" in result.stderr


def _line_reader(stream: IO[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _next_line(lines: queue.Queue[str], proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"tail printed nothing within {timeout} s; stderr: {err}")


def test_tail_follow_prints_new_messages(store: Store) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketstore.cli", "tail", str(store.path), "--topic", "orders",
         "-n", "1", "--follow", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = _line_reader(proc.stdout)  # type: ignore[arg-type]
        last_orders = [m for m in store.messages if m.topic == "orders"][-1]
        first = json.loads(_next_line(lines, proc, 30))
        assert first["commit_log_offset"] == last_orders.offset  # tail has started
        with MessageStore(small_config(store.path)) as writer:
            r1 = writer.put("orders", b"after-start", 2, tags="late")
            r2 = writer.put("orders", b"new-queue", 7)  # a queue that did not exist
            writer.put("payments", b"other topic", 0)
            writer.flush()
            seen = [json.loads(_next_line(lines, proc, 30)) for _ in range(2)]
        assert [m["body_utf8"] for m in seen] == ["after-start", "new-queue"]
        assert seen[0]["commit_log_offset"] == r1.wrote_offset
        assert (seen[1]["queue_id"], seen[1]["queue_offset"]) == (7, r2.queue_offset)
        assert proc.poll() is None  # still following
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert lines.empty()  # nothing of the other topic
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


# -- query -----------------------------------------------------------------------


def test_query_finds_keys(store: Store) -> None:
    m = store.messages[8]
    data = run_json(["query", str(store.path), "--topic", m.topic, "--key", "key-8"])
    assert data["count"] == 1
    [found] = data["messages"]
    assert found["commit_log_offset"] == m.offset
    assert found["keys"] == ["key-8"]

    result = run(["query", str(store.path), "--topic", m.topic, "--key", "key-8"])
    assert result.exit_code == 0, result.output
    assert f"{m.topic}/{m.queue_id}@{m.queue_offset}" in result.stdout


def test_query_ascending_and_max(tmp_path: Path) -> None:
    path = tmp_path / "dup"
    with MessageStore(small_config(path, 64 * 1024)) as s:
        offsets = [s.put("t", f"v{i}".encode(), i % 2, keys=["same", f"u{i}"]).wrote_offset
                   for i in range(12)]
    data = run_json(["query", str(path), "--topic", "t", "--key", "same"])
    assert [m["commit_log_offset"] for m in data["messages"]] == offsets
    data = run_json(["query", str(path), "--topic", "t", "--key", "same", "--max", "5"])
    got = [m["commit_log_offset"] for m in data["messages"]]
    assert len(got) == 5
    assert got == sorted(got)


def test_query_not_found_and_time_window(store: Store) -> None:
    # key-7 was written to payments, not orders.
    result = run(["query", str(store.path), "--topic", "orders", "--key", "key-7"])
    assert result.exit_code == 1
    assert "no message" in result.stderr
    future = str(int(time.time() * 1000) + 3_600_000)
    result = run(["query", str(store.path), "--topic", "orders", "--key", "key-8",
                  "--begin", future])
    assert result.exit_code == 1
    result = run(["query", str(store.path), "--topic", "orders", "--key", "key-8",
                  "--end", "2001-01-01T00:00:00"])
    assert result.exit_code == 1
    data = run_json(["query", str(store.path), "--topic", "orders", "--key", "key-8",
                     "--begin", "2001-01-01T00:00:00+00:00"])
    assert data["count"] == 1


def test_query_bad_arguments(store: Store) -> None:
    result = run(["query", str(store.path), "--topic", "orders", "--key", "k",
                  "--begin", "yesterday"])
    assert result.exit_code == 2
    assert "ISO 8601" in result.stderr
    result = run(["query", str(store.path), "--topic", "orders"])
    assert result.exit_code == 2
    # A geometry that does not match the index files: one-line refusal.
    result = run(["query", str(store.path), "--topic", "orders", "--key", "key-8",
                  "--max-hash-slot-num", "50", "--max-index-num", "2000"])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_query_explicit_geometry(store: Store) -> None:
    for args in (["--max-hash-slot-num", "100", "--max-index-num", "2000"],
                 ["--max-hash-slot-num", "100"], ["--max-index-num", "2000"]):
        data = run_json(["query", str(store.path), "--topic", "orders", "--key", "key-8", *args])
        assert data["count"] == 1


# -- info (topics, checkpoint, abort) --------------------------------------------


def test_info_json_topics_queues_checkpoint_abort(store: Store) -> None:
    data = run_json(["info", str(store.path)])
    assert [t["topic"] for t in data["topics"]] == ["audit", "orders", "payments"]
    by_topic = {t["topic"]: t for t in data["topics"]}
    assert by_topic["orders"]["queue_ids"] == [0, 1, 2]
    assert by_topic["audit"]["messages"] == 10
    assert sum(t["messages"] for t in data["topics"]) == len(store.messages)
    for q in data["queues"]:
        assert q["min_offset"] == 0
        assert q["max_offset"] == q["next_offset"] == len(_queue(store, q["topic"],
                                                                 q["queue_id"]))
        assert q["messages"] == q["max_offset"]
    cp = data["checkpoint"]
    assert cp["physic_msg_timestamp"] > 0
    stamp = datetime.fromisoformat(cp["physic_time"])
    assert stamp.tzinfo is not None
    assert int(stamp.timestamp() * 1000) == cp["physic_msg_timestamp"]
    for name in ("logics", "index"):
        assert f"{name}_msg_timestamp" in cp
        assert f"{name}_time" in cp
    assert data["abort_file"] is False
    assert data["writer_running"] is False
    assert data["last_stop"] == "clean"
    assert data["index_files"] == len(list((store.path / "index").iterdir())) >= 1
    assert data["index_geometry"] == {"max_hash_slot_num": 100, "max_index_num": 2000}


def test_info_running_and_crashed(store: Store) -> None:
    writer = MessageStore(small_config(store.path)).start()
    try:
        data = run_json(["info", str(store.path)])
        assert data["abort_file"] is True
        assert data["writer_running"] is True
        assert data["last_stop"] == "running"
        assert writer._native is not None
        writer._native._simulate_crash()
    finally:
        writer.shutdown()
    data = run_json(["info", str(store.path)])
    assert data["abort_file"] is True
    assert data["writer_running"] is False
    assert data["last_stop"] == "crashed"
    result = run(["info", str(store.path)])
    assert result.exit_code == 0
    assert "crashed" in result.stdout
    assert "checkpoint physic" in result.stdout


def test_info_human_shows_new_fields(store: Store) -> None:
    result = run(["info", str(store.path)])
    assert result.exit_code == 0, result.output
    for text in ("last stop", "clean", "checkpoint physic", "index files", "min offset",
                 "max offset", "3 topic(s)"):
        assert text in result.stdout


# -- bench -----------------------------------------------------------------------


def test_bench_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    result = run(["bench", "--messages", "50", "--body-size", "32",
                  "--segment-size", str(64 * 1024)])
    assert result.exit_code == 0, result.output
    assert "msg/s" in result.stdout
    assert "p99" in result.stdout
    for phase in ("put", "put_messages", "get_message", "query_message"):
        assert phase in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_bench_json_threads_sync_kept_dir(tmp_path: Path) -> None:
    d = tmp_path / "bench"
    data = run_json(["bench", str(d), "-n", "120", "--threads", "3", "--flush", "sync",
                     "--segment-size", str(64 * 1024), "--queries", "20"])
    assert data["ok"] is True
    assert data["put"]["messages"] == data["put_messages"]["messages"] == 120
    assert data["get_message"]["messages"] == 240
    assert data["query_message"]["queries"] == data["query_message"]["found"] == 20
    lat = data["query_message"]["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert data["put"]["msgs_per_s"] > 0
    assert data["store_path"] == str(d)
    info = run_json(["info", str(d)])
    assert info["topics"] == [{"topic": "bench", "queue_ids": [0, 1, 2, 3], "messages": 240}]
    assert run_json(["query", str(d), "--topic", "bench", "--key", "bench-batch-7"])["count"] == 1


def test_bench_refuses_non_empty_dir(store: Store) -> None:
    result = run(["bench", str(store.path), "-n", "5"])
    assert result.exit_code == 2
    assert "not an empty directory" in result.stderr


def test_unknown_topic_is_said_plainly(store: Store) -> None:
    result = run(["query", str(store.path), "--topic", "nosuchtopic", "--key", "k"])
    assert result.exit_code == 1
    assert "topic 'nosuchtopic' does not exist" in result.stderr
    assert "'orders'" in result.stderr  # the known topics
    assert "UnknownTopicWarning" not in result.stderr  # a plain line, not a Python warning
    result = run(["get", str(store.path), "--topic", "nosuchtopic", "--offset", "0", "--json"])
    assert result.exit_code == 1
    assert "topic 'nosuchtopic' does not exist" in json.loads(result.stdout)["reason"]
