"""A read-only open of a directory that holds no store is refused with
NotAStoreError (a StoreError and a FileNotFoundError), as the CLI refuses it,
unless the caller asks to wait for a writer that has not started yet. A
writer makes a store in a missing or empty directory only: one holding other
files is refused the same way, nothing written, unless asked with
``create=True``. A store path that is a file is refused as one."""

from __future__ import annotations

import errno
import os
import pickle
import time
from pathlib import Path

import pytest

import rocketstore
from helpers.presets import SMALL
from rocketstore import MessageStore, NotAStoreError, StoreConfig, StoreError


def test_not_a_store_error_is_a_store_error_and_a_file_not_found_error() -> None:
    assert issubclass(NotAStoreError, StoreError)
    assert issubclass(NotAStoreError, FileNotFoundError)
    assert "NotAStoreError" in rocketstore.__all__


def test_read_only_open_of_an_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotAStoreError, match="is not a store") as ei:
        MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL), read_only=True).start()
    assert ei.value.errno == errno.ENOENT
    assert str(tmp_path) in str(ei.value)
    assert "wait_for_writer" in str(ei.value)
    assert os.listdir(tmp_path) == []  # nothing written


def test_read_only_open_of_a_directory_of_other_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(NotAStoreError):
        MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL), read_only=True).start()
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_read_only_open_of_a_missing_directory_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(NotAStoreError, match="does not exist"):
        MessageStore(StoreConfig(store_path=str(missing), **SMALL), read_only=True).start()
    assert not missing.exists()


def test_read_only_open_of_a_store_still_works(tmp_path: Path) -> None:
    cfg = StoreConfig(store_path=str(tmp_path), **SMALL)
    with MessageStore(cfg) as store:
        store.put("orders", b"x")
    with MessageStore(cfg, read_only=True) as ro:
        assert [m.body for m in ro.get_message("g", "orders", 0, 0).messages] == [b"x"]


# The follower may pull before it has seen the writer's first put: that
# pull returns nothing and warns UnknownTopicWarning; the loop pulls again.
@pytest.mark.filterwarnings("ignore::rocketstore.errors.UnknownTopicWarning")
def test_wait_for_writer_opens_an_empty_directory_and_follows_the_writer(
        tmp_path: Path) -> None:
    cfg = StoreConfig(store_path=str(tmp_path), **SMALL)
    with MessageStore(cfg, read_only=True, wait_for_writer=True) as ro:
        assert ro.topics() == []
        with MessageStore(cfg) as writer:
            writer.put("orders", b"x")
            writer.flush()
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = [m.body for m in ro.get_message("g", "orders", 0, 0).messages]
                time.sleep(0.01)
            assert got == [b"x"]


def test_wait_for_writer_needs_read_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="read_only"):
        MessageStore(StoreConfig(store_path=str(tmp_path)), wait_for_writer=True)


def _snapshot(path: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under ``path``: its mode and, for a file, its bytes."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for p in sorted(path.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(path))] = (st.st_mode, p.read_bytes() if p.is_file() else None)
    return out


def _other_files(path: Path) -> None:
    (path / "notes.txt").write_text("hello")
    (path / "photos").mkdir()
    (path / "photos" / "a.jpg").write_bytes(b"\xff\xd8")


def test_a_writer_refuses_a_directory_of_other_files_and_writes_nothing(
        tmp_path: Path) -> None:
    _other_files(tmp_path)
    before = _snapshot(tmp_path)
    with pytest.raises(NotAStoreError, match="create=True") as ei:
        MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL)).start()
    assert str(tmp_path) in str(ei.value) and "not empty" in str(ei.value)
    assert _snapshot(tmp_path) == before
    # The path alone (the shortest way to open a store) is refused the same way.
    with pytest.raises(NotAStoreError):
        MessageStore(str(tmp_path)).start()
    assert _snapshot(tmp_path) == before


def test_create_makes_a_store_in_a_directory_of_other_files(tmp_path: Path) -> None:
    _other_files(tmp_path)
    cfg = StoreConfig(store_path=str(tmp_path), **SMALL)
    with MessageStore(cfg, create=True) as store:
        store.put("orders", b"x")
    assert (tmp_path / "notes.txt").read_text() == "hello"
    # Now a store: it opens without asking, read-write and read-only.
    with MessageStore(cfg) as store:
        assert [m.body for m in store.get_message("g", "orders", 0, 0).messages] == [b"x"]
    with MessageStore(cfg, read_only=True) as ro:
        assert ro.get_max_offset_in_queue("orders", 0) == 1


def test_create_needs_a_writer(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="create=True needs a writer"):
        MessageStore(StoreConfig(store_path=str(tmp_path)), read_only=True, create=True)


@pytest.mark.parametrize("entries", [[], ["lost+found"]], ids=["empty", "lost+found"])
def test_a_writer_makes_a_store_in_an_empty_directory(tmp_path: Path,
                                                      entries: list[str]) -> None:
    for e in entries:
        (tmp_path / e).mkdir()
    with MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL)) as store:
        store.put("orders", b"x")
    assert {"commitlog", "checkpoint", *entries} <= set(os.listdir(tmp_path))


def test_a_writer_makes_a_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "a" / "store"
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as store:
        store.put("orders", b"x")
    assert (path / "checkpoint").is_file()


@pytest.mark.parametrize("read_only", [True, False], ids=["read_only", "writer"])
def test_a_store_path_that_is_a_file_is_refused_as_a_file(tmp_path: Path,
                                                           read_only: bool) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"not a store")
    with pytest.raises(NotADirectoryError, match="is a file, not a store directory") as ei:
        MessageStore(StoreConfig(store_path=str(path), **SMALL), read_only=read_only).start()
    assert ei.value.errno == errno.ENOTDIR and str(path) in str(ei.value)
    assert "does not exist" not in str(ei.value)
    assert path.read_bytes() == b"not a store" and os.listdir(tmp_path) == ["data.bin"]


def test_create_survives_pickling(tmp_path: Path) -> None:
    """A pickled handle reopens by path with the same open mode: a copy of a
    ``create=True`` handle may still make the store in a folder of other files."""
    _other_files(tmp_path)
    cfg = StoreConfig(store_path=str(tmp_path), **SMALL)
    copy = pickle.loads(pickle.dumps(MessageStore(cfg, create=True)))
    with copy:
        copy.put("orders", b"x")
    photos = StoreConfig(store_path=str(tmp_path / "photos"), **SMALL)
    plain = pickle.loads(pickle.dumps(MessageStore(photos)))
    with pytest.raises(NotAStoreError, match="create=True"):
        plain.start()
