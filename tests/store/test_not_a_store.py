"""A read-only open of a directory that holds no store is refused with
NotAStoreError (a StoreError and a FileNotFoundError), as the CLI refuses it,
unless the caller asks to wait for a writer that has not started yet."""

from __future__ import annotations

import errno
import os
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
