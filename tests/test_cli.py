"""Tests for the ``rocketstore`` command line (rocketstore.cli)."""

from __future__ import annotations

import json
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rocketstore import Message, MessageStore, PutStatus, StoreConfig
from rocketstore.cli import main

SEGMENT = 4096
TOPICS = ("orders", "payments")


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
    with MessageStore(StoreConfig(store_path=str(path), mapped_file_size_commit_log=SEGMENT)) as s:
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
    assert "mapped_file_size_commit_log" in result.stderr


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
    assert data["records"] == len(store.messages)
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
    assert data["recovery"]["end_offset"] == victim.offset


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
    assert "not checked" in data["problems"][0]["problem"]
    assert data["records"] == len(store.messages) // 2


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


@pytest.mark.parametrize("command", ["info", "verify", "get"])
def test_missing_path_is_exit_2(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope"
    extra = ["--offset", "0"] if command == "get" else []
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
    for command in ("demo", "info", "verify", "get"):
        assert command in result.stdout
    assert run(["--version"]).exit_code == 0
