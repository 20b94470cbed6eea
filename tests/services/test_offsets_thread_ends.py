"""The writer's ``rocketstore-offsets`` thread (docs/format.md §13.3) ends
with its store: after a crash (the engine gone, the Python object kept) and
after the store object is dropped without a shutdown. A thread left looping
per store would pile up in a process that opens many stores (thousands of
threads in a long run) and would rewrite the offsets of a crashed store."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

from rocketstore import MessageStore, StoreConfig

CFG = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 2000,
       "max_hash_slot_num": 64, "max_index_num": 256}


def _offsets_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rocketstore-offsets"]


def _ended(before: set[threading.Thread], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [t for t in _offsets_threads() if t not in before]:
            return True
        time.sleep(0.05)
    return False


def test_the_thread_ends_after_a_crash(tmp_path: Path) -> None:
    before = set(_offsets_threads())
    store = MessageStore(StoreConfig(store_path=str(tmp_path / "s"), **CFG)).start()
    assert [t for t in _offsets_threads() if t not in before], "the writer runs the thread"
    native = store._native
    assert native is not None
    native._simulate_crash()
    assert _ended(before), "the offsets thread outlived its crashed store"


def test_the_thread_ends_when_the_store_is_dropped(tmp_path: Path) -> None:
    before = set(_offsets_threads())
    store = MessageStore(StoreConfig(store_path=str(tmp_path / "s"), **CFG)).start()
    assert [t for t in _offsets_threads() if t not in before]
    native = store._native
    assert native is not None
    native._simulate_crash()  # the engine's files let go, as at a kill
    del store, native
    gc.collect()
    assert _ended(before), "the offsets thread outlived its dropped store"
