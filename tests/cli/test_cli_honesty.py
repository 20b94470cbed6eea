"""The command line says what it found: a directory that is not a store, why
nothing was found (also as JSON), bodies that cannot be read, cropped table
cells, plain help text, the demo's real minimum segment size, the checkpoint
in plain words."""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from rocketstore import MessageStore, PutStatus, StoreConfig
from rocketstore.cli import main

SEGMENT = 4096
SMALL: dict[str, Any] = {
    "mapped_file_size_commit_log": SEGMENT,
    "mapped_file_size_consume_queue": 20 * 500,
    "max_hash_slot_num": 100,
    "max_index_num": 2000,
}
SYS_FLAG_AT = 36  # SYSFLAG field offset inside a record


def run(args: Sequence[str], **env: str) -> Result:
    return CliRunner(env=env or None).invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A closed store: 12 messages of topic T queue 0, tagged, with keys."""
    path = tmp_path / "store"
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as s:
        for i in range(12):
            body = f"message {i} ".encode() * (1 + 10 * (i % 2))
            r = s.put("T", body, 0, tags=f"tag-{i}", keys=[f"key-{i}", f"k2-{i}"])
            assert r.status is PutStatus.PUT_OK
    return path


# -- not a store -------------------------------------------------------------------


def _not_stores(tmp_path: Path, store_dir: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp_path / "empty"
    empty.mkdir()
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    (folder / "sub").mkdir()
    return {
        "empty": (empty, "empty directory, not a store"),
        "folder": (folder, "is not a store"),
        "commitlog": (store_dir / "commitlog", "CommitLog directory of a store"),
        "consumequeue": (store_dir / "consumequeue", "consumequeue directory of a store"),
    }


@pytest.mark.parametrize("kind", ["empty", "folder", "commitlog", "consumequeue"])
@pytest.mark.parametrize("command", ["verify", "info", "tail"])
def test_a_directory_that_is_not_a_store_is_refused(
    tmp_path: Path, store_dir: Path, kind: str, command: str
) -> None:
    path, words = _not_stores(tmp_path, store_dir)[kind]
    before = sorted(p.name for p in path.iterdir())
    result = run([command, str(path)])
    assert result.exit_code == 2, result.output
    assert words in result.stderr
    assert "OK" not in result.stdout
    if kind == "commitlog":
        assert str(store_dir) in result.stderr  # it names the directory to give instead
    assert sorted(p.name for p in path.iterdir()) == before  # nothing written


def test_an_empty_store_still_verifies(tmp_path: Path) -> None:
    path = tmp_path / "fresh"
    MessageStore(StoreConfig(store_path=str(path), **SMALL)).start().close()
    result = run(["verify", str(path)])
    assert result.exit_code == 0, result.output
    assert "OK: 0 records" in result.stdout


# -- get --json always prints JSON ------------------------------------------------


def _json(result: Result) -> Any:
    return json.loads(result.stdout)


def test_get_json_by_offset_not_found_says_why(store_dir: Path) -> None:
    result = run(["get", str(store_dir), "--offset", "5", "--json"])
    assert result.exit_code == 1
    data = _json(result)
    assert data["found"] is False and data["offset"] == 5
    assert "no record starts at physical offset 5" in data["reason"]


def test_get_json_by_id_not_found_says_why(store_dir: Path) -> None:
    result = run(["get", str(store_dir), "--id", "7F00000100002A9F00000000000F0000", "--json"])
    assert result.exit_code == 1
    data = _json(result)
    assert data["found"] is False and "no message with id" in data["reason"]
    result = run(["get", str(store_dir), "--id", "nonsense", "--json"])
    assert result.exit_code == 2
    data = _json(result)
    assert data["found"] is False and "offset message id" in data["reason"]


@pytest.mark.parametrize(
    ("offset", "tags", "status", "words"),
    [
        (12, None, "OFFSET_OVERFLOW_ONE", "end of the queue"),
        (40, None, "OFFSET_OVERFLOW_BADLY", "holds offsets 0..11"),
        (0, "nope", "NO_MATCHED_MESSAGE", "tags nope"),
    ],
)
def test_get_json_from_a_queue_says_why_nothing_was_found(
    store_dir: Path, offset: int, tags: str | None, status: str, words: str
) -> None:
    args = ["get", str(store_dir), "--topic", "T", "--offset", str(offset), "--json"]
    if tags:
        args += ["--tags", tags]
    result = run(args)
    assert result.exit_code == 1
    data = _json(result)
    assert data["found"] is False and data["status"] == status and data["messages"] == []
    assert words in data["reason"]


def test_get_json_on_something_that_is_not_a_store_is_json(tmp_path: Path) -> None:
    result = run(["get", str(tmp_path), "--topic", "T", "--offset", "0", "--json"])
    assert result.exit_code == 2
    data = _json(result)
    assert data["found"] is False and "not a store" in data["reason"]
    result = run(["get", str(tmp_path), "--offset", "0", "--json"])
    assert result.exit_code == 2
    assert "not a store" in _json(result)["reason"]


def test_get_json_found(store_dir: Path) -> None:
    result = run(["get", str(store_dir), "--offset", "0", "--json"])
    assert result.exit_code == 0
    data = _json(result)
    assert data["found"] is True and data["queue_offset"] == 0


# -- the table -------------------------------------------------------------------------


@pytest.mark.parametrize("columns", ["80", "100", "200"])
def test_get_table_shows_tags_and_keys_and_marks_cropped_bodies(
    store_dir: Path, columns: str
) -> None:
    result = run(["get", str(store_dir), "--topic", "T", "--offset", "0", "-c", "4"],
                 COLUMNS=columns)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "queue@offset" in line)
    for name in ("tags", "keys", "body"):
        assert name in header
    rows = [line for line in lines if line.strip().startswith("T/0@")]
    assert len(rows) == 4
    assert all(len(line) <= int(columns) for line in lines)
    assert "tag-0" in rows[0] and "key-0" in rows[0]
    assert "message 0" in rows[0]
    # Message 1's body (110 bytes) does not fit: the cut is marked.
    assert "…" in rows[1]
    # With room to spare, the body's full size follows the cut.
    tail = "… (110 bytes)" if columns == "200" else "…"
    assert rows[1].rstrip().endswith(tail), rows[1]


# -- help text ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [None, "demo", "info", "verify", "get", "tail", "query",
                                     "bench", "top", "groups"])
def test_help_has_no_markup(command: str | None) -> None:
    args = ["--help"] if command is None else [command, "--help"]
    result = run(args)
    assert result.exit_code == 0
    for markup in ("``", ":meth:", ":class:", ":func:", ":attr:", "\b"):
        assert markup not in result.stdout, (command, markup)


# -- demo --segment-size --------------------------------------------------------------


def test_demo_minimum_segment_size_is_the_real_one(tmp_path: Path) -> None:
    from rocketstore.cli import _demo_min_segment_size, _run_demo

    n = 300
    need = _demo_min_segment_size(n)
    # One byte less really does not work: some demo messages do not fit.
    below = _run_demo(tmp_path / "below", n, need - 1)
    assert below["put_failures"] and below["intact"] < n
    shutil.rmtree(tmp_path / "below")
    # The minimum itself works.
    at = _run_demo(tmp_path / "at", n, need)
    assert at["put_failures"] == {} and at["intact"] == n
    # The command refuses what cannot work, saying the minimum.
    result = run(["demo", "-n", str(n), "--segment-size", str(need - 1)])
    assert result.exit_code == click.BadParameter.exit_code
    assert f"at least {need} bytes" in result.stderr
    help_text = run(["demo", "--help"]).stdout
    assert str(_demo_min_segment_size(10_000)) in help_text


# -- info explains the checkpoint --------------------------------------------------------


def test_info_explains_the_checkpoint(store_dir: Path) -> None:
    result = run(["info", str(store_dir)], COLUMNS="200")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "(CommitLog on disk up to here)" in out
    assert "(consume queues on disk up to here)" in out
    assert "newest message known to be flushed" in " ".join(out.split())
    assert "records scanned" in out and "messages in queues" in out


# -- a body that cannot be inflated ---------------------------------------------------


def _set_compressed_flag(store_dir: Path, offset: int) -> None:
    """Set sys_flag bit 0x1 on the record at ``offset`` (as a writer that
    stored it for a plain body: sys_flag is outside the body CRC, and the
    property CRC, which covers it, is computed again)."""
    name = store_dir / "commitlog" / f"{offset - offset % SEGMENT:020d}"
    with open(name, "r+b") as f:
        f.seek(offset % SEGMENT)
        size = struct.unpack(">i", f.read(4))[0]
        f.seek(offset % SEGMENT)
        rec = bytearray(f.read(size))
        rec[SYS_FLAG_AT + 3] |= 0x01
        assert rec[-20:-11] == b"__CRC32#\x01"
        crc = zlib.crc32(rec[:-20]) & 0x7FFFFFFF
        rec[-11:-1] = bytes(ord("0") + crc // 10**k % 10 for k in range(10))
        f.seek(offset % SEGMENT)
        f.write(rec)


def _offset_of(store_dir: Path, queue_offset: int) -> int:
    with MessageStore(StoreConfig(store_path=str(store_dir), **SMALL), read_only=True) as s:
        return s.get_commit_log_offset_in_queue("T", 0, queue_offset)


def test_a_body_that_cannot_be_inflated(store_dir: Path) -> None:
    bad = _offset_of(store_dir, 3)
    _set_compressed_flag(store_dir, bad)

    result = run(["verify", str(store_dir)])
    assert result.exit_code == 1
    assert f"offset {bad}" in result.stdout and "inflate" in result.stdout

    # tail and get skip it with a warning and show the messages behind it.
    result = run(["tail", str(store_dir), "--from-beginning"])
    assert result.exit_code == 0, result.output
    assert "warning: skipping the message at T/0@3" in result.stderr
    shown = [line for line in result.stdout.splitlines() if "T/0@" in line]
    assert len(shown) == 11 and "T/0@11" in shown[-1]

    result = run(["get", str(store_dir), "--topic", "T", "--offset", "0", "-c", "12",
                  "--json"])
    assert result.exit_code == 0
    assert [m["queue_offset"] for m in _json(result)["messages"]] == [
        i for i in range(12) if i != 3
    ]
    assert "T/0@3" in result.stderr

    result = run(["get", str(store_dir), "--offset", str(bad), "--json"])
    assert result.exit_code == 1
    assert "cannot be read" in _json(result)["reason"]
