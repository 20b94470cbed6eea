"""``rocketstore repair``: refuses a non-store, fixes what ``verify`` reports,
and names what it cannot fix (exit 1) with the next step."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner, Result

from rocketstore import MessageStore, StoreConfig
from rocketstore.cli import main

SEG = 64 * 1024
CFG = {"mapped_file_size_commit_log": SEG, "mapped_file_size_consume_queue": 2000,
       "max_hash_slot_num": 64, "max_index_num": 256}


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _store(path: Path, n: int = 400) -> list[int]:
    """A cleanly closed store of ``n`` 1000-byte messages over 7 segments."""
    with MessageStore(StoreConfig(store_path=str(path), **CFG)) as store:
        return [store.put("T", b"%04d" % i + b"x" * 996, queue_id=i % 2).wrote_offset
                for i in range(n)]


def _flip(path: Path, offset: int) -> None:
    seg = path / "commitlog" / f"{offset - offset % SEG:020d}"
    with open(seg, "r+b") as f:
        f.seek(offset % SEG + 200)  # inside the body
        b = f.read(1)[0]
        f.seek(offset % SEG + 200)
        f.write(bytes([b ^ 1]))


def test_repair_refuses_a_directory_that_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    r = cli("repair", str(tmp_path))
    assert r.exit_code == 2
    assert "not a store" in r.output
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("repair", str(empty)).exit_code == 2
    assert os.listdir(empty) == []


def test_repair_fixes_a_body_crc_mismatch_that_verify_reports(tmp_path: Path) -> None:
    path = tmp_path / "store"
    offsets = _store(path)
    _flip(path, offsets[3])  # in the first segment: a clean open never scans it
    r = cli("verify", str(path))
    assert r.exit_code == 1 and "body CRC" in r.output, r.output
    r = cli("repair", str(path))
    assert r.exit_code == 0, r.output
    assert f"offset {offsets[3]}" in r.output and "nothing to repair" not in r.output
    r = cli("verify", str(path))
    assert r.exit_code == 0, r.output
    assert "skipped" in r.output  # verify still says the record is not served
    with MessageStore(StoreConfig(store_path=str(path), **CFG)) as store:
        got = store.get_message("g", "T", 1, 0, 32)
        assert got.damaged == 1  # message 3 is queue 1's offset 1
        assert [m.body[:4] for m in got.messages][:2] == [b"0001", b"0005"]
    r = cli("repair", str(path))
    assert r.exit_code == 0 and "nothing to repair" in r.output, r.output


def test_repair_names_a_missing_segment_it_cannot_fix(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _store(path)
    (path / "commitlog" / f"{2 * SEG:020d}").unlink()
    v = cli("verify", str(path))
    assert v.exit_code != 0, v.output
    r = cli("repair", str(path))
    assert r.exit_code == 1, r.output
    assert "cannot" in r.output and "backup" in r.output, r.output


def test_repair_names_a_short_segment_it_cannot_fix(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _store(path)
    seg = path / "commitlog" / f"{2 * SEG:020d}"
    os.truncate(seg, SEG // 2)
    v = cli("verify", str(path))
    assert v.exit_code != 0, v.output
    r = cli("repair", str(path))
    assert r.exit_code == 1, r.output
    assert "cannot" in r.output and "backup" in r.output, r.output
