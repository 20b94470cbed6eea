"""Handles that are forgotten, and offsets persisted by commits."""

from __future__ import annotations

import gc
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import rocketstore.store as store_module
from rocketstore import Message, MessageStore, StoreClosedError, StoreConfig, _native


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
    path = tmp_path / "config" / "consumerOffset.json"
    with MessageStore(_cfg(tmp_path)) as store:
        for _ in range(3):
            store.put("T", b"x")
        monkeypatch.setattr(store_module, "OFFSETS_PERSIST_INTERVAL", 3600.0)
        c = store.consumer("g", "T", auto_commit=False)
        assert len(c.poll(timeout=5.0, max_messages=1)) == 1
        # commit(sync=False): in memory; written by a later commit once the
        # interval has passed.
        c.commit(sync=False)
        assert store.query_offset("g", "T", 0) == 1
        assert not path.exists(), "persisted before the interval passed"
        # commit(): on disk when it returns, before any flush or shutdown.
        c.commit()
        assert "T@g" in path.read_text() and "0:1" in path.read_text()
        assert len(c.poll(timeout=5.0, max_messages=1)) == 1
        c.commit(sync=False)
        assert "0:1" in path.read_text()
        monkeypatch.setattr(store_module, "OFFSETS_PERSIST_INTERVAL", 0.0)
        store.commit_offset("g", "T", 0, 2)  # the interval passed: this commit writes
        assert "0:2" in path.read_text()


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


def _every_call(store: MessageStore) -> dict[str, Callable[[], object]]:
    """One call of every public method and property of a store."""
    return {
        "put": lambda: store.put("T", b"x"),
        "put_message": lambda: store.put_message(Message("T", b"x")),
        "put_messages": lambda: store.put_messages([Message("T", b"x")]),
        "put_batch": lambda: store.put_batch("T", [b"x"]),
        "look_message_by_offset": lambda: store.look_message_by_offset(0),
        "look_message_by_id": lambda: store.look_message_by_id("0" * 32),
        "get_max_offset_in_queue": lambda: store.get_max_offset_in_queue("T", 0),
        "get_min_offset_in_queue": lambda: store.get_min_offset_in_queue("T", 0),
        "get_commit_log_offset_in_queue": lambda: store.get_commit_log_offset_in_queue("T", 0, 0),
        "get_offset_in_queue_by_time": lambda: store.get_offset_in_queue_by_time("T", 0, 0),
        "get_earliest_message_time": lambda: store.get_earliest_message_time("T", 0),
        "get_message_store_timestamp": lambda: store.get_message_store_timestamp("T", 0, 0),
        "get_message": lambda: store.get_message("g", "T", 0, 0),
        "query_message": lambda: store.query_message("T", "k"),
        "queue_offset_table": store.queue_offset_table,
        "queue_ids": lambda: store.queue_ids("T"),
        "topics": store.topics,
        "dispatch_behind_bytes": store.dispatch_behind_bytes,
        "wait_for_dispatch": lambda: store.wait_for_dispatch(0, 0.0),
        "refresh": store.refresh,
        "commit_offset": lambda: store.commit_offset("g", "T", 0, 0),
        "query_offset": lambda: store.query_offset("g", "T", 0),
        "persist_offsets": store.persist_offsets,
        "consumer": lambda: store.consumer("g", "T"),
        "flush": store.flush,
        "delete_expired_files": store.delete_expired_files,
        "max_phy_offset": lambda: store.max_phy_offset,
        "min_phy_offset": lambda: store.min_phy_offset,
        "flushed_offset": lambda: store.flushed_offset,
        "dispatch_seq": lambda: store.dispatch_seq,
    }


def _refusals(store: MessageStore) -> dict[str, str]:
    """The calls that did not raise StoreClosedError, with what they did instead."""
    wrong: dict[str, str] = {}
    for name, call in _every_call(store).items():
        try:
            out = call()
        except StoreClosedError:
            continue
        except Exception as e:
            wrong[name] = f"raised {type(e).__name__}: {e}"
        else:
            wrong[name] = f"returned {out!r}"
    return wrong


def test_every_method_refuses_before_start_and_after_close(tmp_path: Path) -> None:
    store = MessageStore(_cfg(tmp_path))
    assert _refusals(store) == {}
    with pytest.raises(StoreClosedError, match="not started"):
        store.put("T", b"x")
    assert not store.is_writeable
    store.start()
    assert store.put("T", b"x").ok
    store.shutdown()
    assert _refusals(store) == {}
    assert not store.is_writeable
    # And it starts again.
    store.start()
    assert store.get_max_offset_in_queue("T", 0) == 1
    store.shutdown()


def test_every_method_refuses_in_a_forked_child(tmp_path: Path) -> None:
    """A forked child's copy of a started store refuses every call (with the
    reason), and the parent's store keeps working."""
    store = MessageStore(_cfg(tmp_path)).start()
    assert store.put("T", b"x").ok
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(r)
            wrong = _refusals(store)
            try:
                store.put("T", b"x")
            except StoreClosedError as e:
                if "fork" not in str(e):
                    wrong["reason"] = str(e)
            os.write(w, json.dumps(wrong).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        report = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert json.loads(report) == {}
    assert store.put("T", b"y").ok
    assert store.get_max_offset_in_queue("T", 0) == 2
    store.shutdown()
