"""Handles that are forgotten, and offsets persisted by commits."""

from __future__ import annotations

import gc
import inspect
from pathlib import Path

import pytest

import rocketstore.consumers.store_commits as commits_module
from helpers.store_util import offset_table
from rocketstore import MessageStore, StoreConfig, _native


def _cfg(path: Path) -> StoreConfig:
    return StoreConfig(
        store_path=str(path),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 200,
        max_hash_slot_num=100,
        max_index_num=400,
    )


def test_dropped_store_is_shut_down_cleanly(tmp_path: Path) -> None:
    store = MessageStore(_cfg(tmp_path)).start()
    offsets = [store.put("T", b"m%d" % i, i % 2).wrote_offset for i in range(20)]
    del store
    gc.collect()
    # The lock was released and the abort file removed: a clean stop.
    assert not (tmp_path / "abort").exists()
    with MessageStore(_cfg(tmp_path)) as again:
        rep = again.recovery_report
        assert rep is not None and rep.mode == "normal"
        assert again.get_max_offset_in_queue("T", 0) == 10
        assert again.get_max_offset_in_queue("T", 1) == 10
        for i, off in enumerate(offsets):
            m = again.look_message_by_offset(off)
            assert m is not None and m.body == b"m%d" % i


def test_commit_is_durable_and_sync_false_persists_on_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MessageStore(_cfg(tmp_path)) as store:
        for _ in range(3):
            store.put("T", b"x")
        monkeypatch.setattr(commits_module, "OFFSETS_PERSIST_INTERVAL", 3600.0)
        c = store.consumer("g", "T", auto_commit=False)
        assert len(c.poll(timeout=5.0, max_messages=1)) == 1
        # commit(sync=False): in memory; written by a later commit once the
        # interval has passed.
        c.commit(sync=False)
        assert store.query_offset("g", "T", 0) == 1
        assert "T@g" not in offset_table(tmp_path), "persisted before the interval passed"
        # commit(): on disk (the journal, docs/format.md §13.3) when it
        # returns, before any flush or shutdown.
        c.commit()
        assert offset_table(tmp_path)["T@g"] == {0: 1}
        assert len(c.poll(timeout=5.0, max_messages=1)) == 1
        c.commit(sync=False)
        assert offset_table(tmp_path)["T@g"] == {0: 1}
        monkeypatch.setattr(commits_module, "OFFSETS_PERSIST_INTERVAL", 0.0)
        store.commit_offset("g", "T", 0, 2)  # the interval passed: this commit writes
        assert offset_table(tmp_path)["T@g"] == {0: 2}


# -- the class shape ---------------------------------------------------------------------

#: The per-message methods MessageStore inherits from its native base class.
NATIVE_METHODS = (
    "put",
    "put_message",
    "put_messages",
    "put_batch",
    "look_message_by_offset",
    "get_max_offset_in_queue",
    "get_min_offset_in_queue",
)


def test_per_message_methods_are_the_native_methods(tmp_path: Path) -> None:
    """``MessageStore.put`` is the native method itself, documented and with
    its signature, before and after start: nothing is swapped in at run time."""
    assert issubclass(MessageStore, _native.MessageStoreBase)
    store = MessageStore(_cfg(tmp_path))
    for started in (False, True):
        for name in NATIVE_METHODS:
            assert name not in MessageStore.__dict__, name
            assert name not in vars(store), name
            method = getattr(MessageStore, name)
            assert method is getattr(_native.MessageStoreBase, name)
            assert type(method).__name__ == "method_descriptor", name
            assert method.__doc__ and len(method.__doc__) > 40, name
        if not started:
            store.start()
    params = inspect.signature(MessageStore.put).parameters
    assert list(params)[:4] == ["self", "topic", "body", "queue_id"]
    assert params["queue_id"].default == 0 and params["born_host"].default is None
    assert inspect.signature(MessageStore.look_message_by_offset).parameters.keys() == {
        "self", "phy_offset"}
    r = store.put("T", b"x")
    assert r.ok
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.body == b"x"
    store.shutdown()
