"""Errors say what happened: every engine error kind is pinned to its Python
exception, damage is CorruptedError, a missing store is FileNotFoundError,
a broken invariant is InternalError, caller input alone is ValueError, and
messages use Python's type names."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

import rocketstore
from helpers.presets import FAILPOINTS_MISSING, SEG, SMALL
from rocketstore import (
    ConfigMismatchError,
    CorruptedError,
    InternalError,
    MessageStore,
    StoreConfig,
    StoreError,
    _native,
)
from rocketstore.config.store_config import (
    DEFAULT_MAPPED_FILE_SIZE_COMMIT_LOG,
    DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE,
)

#: Each engine error kind and the Python exception it must become, by name.
#: Written here independently of the engine's own table, so a change on
#: either side fails this test.
EXPECTED = {
    "Io": "FileNotFoundError",  # the sample is ENOENT: OSError picks the subclass
    "Corrupted": "CorruptedError",
    "Mismatch": "ConfigMismatchError",
    "Locked": "StoreLockedError",
    "InvalidArgument": "ValueError",
    "Poisoned": "PoisonedError",
    "Closed": "StoreClosedError",
    "ReadOnly": "ReadOnlyStoreError",
    "Internal": "InternalError",
    "RecoveryOrder": "RecoveryOrderError",
    "NotAStore": "NotAStoreError",
    "GroupBusy": "ConsumerGroupBusyError",
    "Fenced": "FencedError",
}


def _require_test_bindings() -> None:
    if not hasattr(_native, "_raise_store_error"):
        pytest.fail(FAILPOINTS_MISSING, pytrace=False)


def test_every_engine_error_kind_is_pinned_to_its_python_exception() -> None:
    _require_test_bindings()
    assert sorted(_native._error_kinds()) == sorted(EXPECTED)
    for kind, name in EXPECTED.items():
        with pytest.raises(BaseException) as ei:
            _native._raise_store_error(kind)
        assert type(ei.value).__name__ == name, (kind, type(ei.value))
        # Caller input and I/O errors are builtins; every other kind is ours.
        is_ours = name not in ("ValueError", "FileNotFoundError")
        assert isinstance(ei.value, StoreError) is is_ours, kind
        if is_ours:
            assert getattr(rocketstore.errors, name) is type(ei.value), kind
    with pytest.raises(ValueError, match="unknown error kind"):
        _native._raise_store_error("NoSuchKind")


def test_internal_errors_ask_for_a_bug_report() -> None:
    _require_test_bindings()
    with pytest.raises(InternalError, match="please report this bug"):
        _native._raise_store_error("Internal")
    # Not a ValueError: the caller did nothing wrong.
    assert not issubclass(InternalError, ValueError)
    assert "InternalError" in rocketstore.__all__


def _several_segments(store_path: str) -> list[Path]:
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as store:
        while store.max_phy_offset < 3 * SEG:
            store.put("T", b"x" * 900)
    files = sorted((Path(store_path) / "commitlog").iterdir())
    assert len(files) >= 4
    return files


def test_gap_between_segments_is_corruption(store_path: str) -> None:
    files = _several_segments(store_path)
    files[1].unlink()
    with pytest.raises(CorruptedError, match="gap between segments") as ei:
        MessageStore(StoreConfig(store_path=store_path, **SMALL)).start()
    assert not isinstance(ei.value, ConfigMismatchError)
    assert files[2].name in str(ei.value)


def test_misaligned_segment_is_corruption(store_path: str) -> None:
    files = _several_segments(store_path)
    last = files[-1]
    misplaced = last.with_name(f"{int(last.name) + 100:020d}")
    last.rename(misplaced)
    with pytest.raises(CorruptedError, match="misaligned segment") as ei:
        MessageStore(StoreConfig(store_path=store_path, **SMALL)).start()
    assert misplaced.name in str(ei.value)


def test_wrong_length_segment_is_corruption(store_path: str) -> None:
    files = _several_segments(store_path)
    os.truncate(files[1], SEG // 2)
    with pytest.raises(CorruptedError) as ei:
        MessageStore(StoreConfig(store_path=store_path, **SMALL)).start()
    assert files[1].name in str(ei.value)
    assert files[1].stat().st_size == SEG // 2  # refused, nothing changed


def test_missing_store_opened_read_only_is_file_not_found(store_path: str) -> None:
    missing = os.path.join(store_path, "nothing-here")
    with pytest.raises(FileNotFoundError) as ei:
        MessageStore(StoreConfig(store_path=missing), read_only=True).start()
    assert missing in str(ei.value)
    assert not os.path.exists(missing)


def test_type_errors_use_python_type_names(store_path: str) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as store:
        with pytest.raises(TypeError, match=r"^topic must be str, not int$"):
            store.put(1, b"x")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not str") as ei:
            store.get_max_offset_in_queue("T", "0")  # type: ignore[arg-type]
        assert "Py" not in str(ei.value)


# -- the config object crosses the FFI --------------------------------------


def test_config_defaults_equal_the_engine_defaults() -> None:
    rust = _native._default_options()
    cfg = StoreConfig(store_path="/unused")
    fields = {f.name for f in dataclasses.fields(StoreConfig)}
    derived = {
        "delay_level_table",
        "default_mapped_file_size_commit_log",
        "default_mapped_file_size_consume_queue",
    }
    assert set(rust) - derived <= fields
    for name, value in rust.items():
        if name in derived:
            continue
        ours = getattr(cfg, name)
        if name in ("flush_disk_type", "broker_role"):
            ours = ours.name
        assert ours == value, f"StoreConfig.{name} defaults to {ours!r}, the engine to {value!r}"
    assert list(cfg.delay_level_table().values()) == rust["delay_level_table"]
    assert rust["default_mapped_file_size_commit_log"] == DEFAULT_MAPPED_FILE_SIZE_COMMIT_LOG
    assert rust["default_mapped_file_size_consume_queue"] == DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE


class _Spy:
    """A StoreConfig that records which fields are read."""

    def __init__(self, cfg: StoreConfig) -> None:
        self.cfg = cfg
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self.cfg, name)


def test_every_config_field_the_engine_reads_has_its_default_pinned(store_path: str) -> None:
    """Each field the engine reads from the config object is in the engine's
    defaults (so the test above compares it), except the paths and
    ``effective_*`` properties (derived from pinned fields)."""
    spy = _Spy(StoreConfig(store_path=store_path, **SMALL))
    native = _native.NativeStore(spy)  # type: ignore[arg-type]
    native.shutdown()
    read = {name for name in spy.read if not name.startswith("effective_")}
    read -= {"store_path", "commit_log_dir"}
    assert read, "the engine read no field"
    assert read - set(_native._default_options()) == set()


def test_engine_reads_the_config_object(store_path: str) -> None:
    cfg = StoreConfig(store_path=store_path, **SMALL)
    native = _native.NativeStore(cfg)
    try:
        assert native.commit_log_file_size == SEG
        assert native.consume_queue_file_size == SMALL["mapped_file_size_consume_queue"]
    finally:
        native.shutdown()


@dataclasses.dataclass
class _Partial:
    store_path: str


def test_config_errors_name_the_field(store_path: str) -> None:
    with pytest.raises(TypeError, match="no field") as ei:
        _native.NativeStore(_Partial(store_path))  # type: ignore[arg-type]
    assert "StoreConfig" in str(ei.value)
    bad = StoreConfig(store_path=store_path, **SMALL)
    # Bypass the dataclass's own checks to see what the engine says.
    object.__setattr__(bad, "max_index_num", "many")
    with pytest.raises(TypeError, match=r"^StoreConfig\.max_index_num must be int, not str$"):
        _native.NativeStore(bad)
    object.__setattr__(bad, "max_index_num", -1)
    with pytest.raises(ValueError, match=r"StoreConfig\.max_index_num must be >= 0"):
        _native.NativeStore(bad)
    assert not os.path.exists(os.path.join(store_path, "lock"))


def test_module_helpers_use_python_type_names() -> None:
    with pytest.raises(TypeError, match=r"^s must be str, not int$"):
        _native.java_string_hash(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^tags must be str, not int$"):
        _native.tags_code(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^body must be a bytes-like object"):
        _native.body_crc("x")  # type: ignore[arg-type]
    assert _native.body_crc(bytearray(b"abc")) == _native.body_crc(b"abc")


def test_put_message_type_errors_name_the_type(store_path: str) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as store:
        with pytest.raises(TypeError, match=r"^msg must be rocketstore\.Message, not str$"):
            store.put_message("x")  # type: ignore[arg-type]
        msgs_error = r"^msgs must be a list of rocketstore\.Message, not int$"
        with pytest.raises(TypeError, match=msgs_error):
            store.put_messages(3)  # type: ignore[arg-type]
        each_error = r"^each message must be rocketstore\.Message, not int$"
        with pytest.raises(TypeError, match=each_error):
            store.put_messages([1])  # type: ignore[list-item]


def test_stored_body_that_does_not_inflate_is_corruption(store_path: str) -> None:
    # A record as RocketMQ 4.9.8 writes it (no property CRC, which covers
    # sys_flag too).
    old = StoreConfig(store_path=store_path, enabled_append_prop_crc=False, **SMALL)
    with MessageStore(old) as store:
        offset = store.put("T", b"plain, not zlib").wrote_offset
    # sys_flag (record offset 36, an int) is outside the body CRC: flag the
    # plain body as zlib-compressed, as a damaged or foreign record would be.
    seg = Path(store_path) / "commitlog" / f"{offset - offset % SEG:020d}"
    with open(seg, "r+b") as f:
        f.seek(offset % SEG + 36 + 3)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] | 0x01]))
    with MessageStore(StoreConfig(store_path=store_path, **SMALL), read_only=True) as ro:
        m = ro.look_message_by_offset(offset)
        assert m is not None
        with pytest.raises(CorruptedError, match=f"offset {offset}.*does not inflate"):
            m.body  # noqa: B018
        assert m.stored_body == b"plain, not zlib"
