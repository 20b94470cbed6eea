"""Retention against flushing: a file the retention service deletes while a flush
holds it is skipped by that flush, never reported as a failed flush.

The deterministic tests hold a flush at a pause point (between picking a file
and syncing it), run a retention round that deletes that very file, then let the
flush go on. The slow test is the randomized reproduction: tiny files, a size
cap, a retention round every 100 ms and one thread putting into 30 queues.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.fault_fixtures import fail_points, wait_dispatched, wait_for
from rocketstore import (
    GetStatus,
    MessageStore,
    PoisonedError,
    PutResult,
    PutStatus,
    StoreConfig,
    _native,
)
from rocketstore._logging import pump_now

__all__ = ["fail_points"]  # the fixture, imported for pytest

TOPIC = "R"
#: Every background flush far in the future: only the test's flush runs.
QUIET: dict[str, Any] = {
    "mapped_file_size_commit_log": 4096,
    "mapped_file_size_consume_queue": 5 * 20,  # five units a file
    "max_hash_slot_num": 4,
    "max_index_num": 6,  # five entries a file
    "flush_interval_commit_log": 60_000,
    "flush_commit_log_thorough_interval": 60_000,
    "flush_interval_consume_queue": 60_000,
    "flush_consume_queue_thorough_interval": 60_000,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
    "clean_resource_interval": 3_600_000,  # rounds are run by hand
}


@pytest.fixture
def quiet_store(store_path: str) -> Iterator[MessageStore]:
    s = MessageStore(StoreConfig(store_path=store_path, **QUIET)).start()
    try:
        yield s
    finally:
        for p in ("pause_cq_flush", "pause_commitlog_flush", "pause_index_flush"):
            _native._set_fail_point(p, 0)
        try:
            s.close()
        except (PoisonedError, OSError):
            pass


def put_many(store: MessageStore, n: int, start: int = 0) -> list[PutResult]:
    out = []
    for i in range(start, start + n):
        r = store.put(TOPIC, acked_body(i), queue_id=0, keys=[f"k{i}"])
        assert r.status is PutStatus.PUT_OK
        out.append(r)
    wait_dispatched(store)
    return out


def complaints(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Engine errors, and warnings about a file not found."""
    pump_now()
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "rocketstore"
        and (r.levelno >= logging.ERROR
             or (r.levelno >= logging.WARNING and "No such file" in r.getMessage()))
    ]


def flush_held_while_deleting(
    store: MessageStore, point: str, flush: Callable[[], object]
) -> list[BaseException]:
    """Runs ``flush`` on a thread held at ``point``, deletes every expired
    file meanwhile, then lets the flush go on; returns what it raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            flush()
        except BaseException as e:
            errors.append(e)

    assert _native._set_fail_point(point, 1)
    t = threading.Thread(target=run)
    t.start()
    try:
        wait_for(lambda: _native._fail_point_waiting(point) >= 1, 10.0, f"a flush held at {point}")
        deleted = store.delete_expired_files(force=True)
        assert deleted > 0
    finally:
        _native._set_fail_point(point, 0)
        t.join(30)
    assert not t.is_alive()
    return errors


def check_survivors(store: MessageStore, acked: list[PutResult]) -> None:
    """Every message at or past the new min offsets is readable; new puts work."""
    assert store.is_writeable, store.running_flags
    lo = store.get_min_offset_in_queue(TOPIC, 0)
    hi = store.get_max_offset_in_queue(TOPIC, 0)
    assert lo > 0 and hi == len(acked)
    g = store.get_message("g", TOPIC, 0, lo, hi - lo)
    assert g.status is GetStatus.FOUND
    assert [m.queue_offset for m in g.messages] == list(range(lo, hi))
    more = put_many(store, 3, start=len(acked))
    assert [r.queue_offset for r in more] == [hi, hi + 1, hi + 2]
    assert store.flush() >= more[-1].wrote_offset


def check_flush_held_while_deleting(
    store: MessageStore,
    point: str,
    held: Path,
    acked: list[PutResult],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``store.flush()`` held at ``point`` while a retention round deletes every
    expired file, ``held`` among them: the flush raises nothing, logs no
    complaint, and the survivors stay readable."""
    with caplog.at_level(logging.INFO, logger="rocketstore"):
        errors = flush_held_while_deleting(store, point, store.flush)
        assert not held.exists(), "the retention round did not delete the held file"
        assert errors == [], errors
        check_survivors(store, acked)
        assert complaints(caplog) == []


def test_queue_flush_skips_a_file_deleted_under_it(
    fail_points: Callable[[str, int], None],
    quiet_store: MessageStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = quiet_store
    acked = put_many(store, 40)  # 8 queue files, ~ 14 CommitLog files
    cq_dir = Path(store.config.store_path) / "consumequeue" / TOPIC / "0"
    first = sorted(cq_dir.iterdir())[0]
    # store.flush(): the CommitLog, then the queues: held at queue file 0.
    check_flush_held_while_deleting(store, "pause_cq_flush", first, acked, caplog)


def test_commitlog_flush_skips_a_file_deleted_under_it(
    fail_points: Callable[[str, int], None],
    quiet_store: MessageStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The held file is full: its flush would also stamp its mtime."""
    store = quiet_store
    acked = put_many(store, 40)
    first = sorted(Path(store.config.commit_log_dir).iterdir())[0]
    check_flush_held_while_deleting(store, "pause_commitlog_flush", first, acked, caplog)


def test_index_flush_skips_a_file_deleted_under_it(
    fail_points: Callable[[str, int], None],
    quiet_store: MessageStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A full index file waits for the background index flush; the retention
    round deletes it while that flush holds it."""
    store = quiet_store
    with caplog.at_level(logging.INFO, logger="rocketstore"):
        assert _native._set_fail_point("pause_index_flush", 1)
        acked = put_many(store, 40)  # ~ 16 index files; the flusher holds the first batch
        wait_for(
            lambda: _native._fail_point_waiting("pause_index_flush") >= 1, 10.0, "index flush held"
        )
        index_dir = Path(store.config.store_path) / "index"
        first = sorted(index_dir.iterdir())[0]
        assert store.delete_expired_files(force=True) > 0
        assert not first.exists(), "the retention round did not delete the held file"
        _native._set_fail_point("pause_index_flush", 0)
        wait_for(
            lambda: _native._fail_point_waiting("pause_index_flush") == 0, 10.0, "index flush on"
        )
        assert store.flush() > 0
        errors = complaints(caplog)
    assert errors == [], errors
    check_survivors(store, acked)
    assert [m.body for m in store.query_message(TOPIC, f"k{len(acked) - 1}")] == [
        acked_body(len(acked) - 1)
    ]


def acked_body(i: int) -> bytes:
    return f"body {i:05d}".encode() * 20


# -- the randomized reproduction ----------------------------------------------------

RANDOM: dict[str, Any] = {
    "mapped_file_size_commit_log": 16 * 1024,
    "mapped_file_size_consume_queue": 64 * 20,
    "max_store_size_bytes": 96 * 1024,
    "clean_resource_interval": 100,
    "max_hash_slot_num": 100,
    "max_index_num": 400,
}


def one_random_run(root: str, n: int) -> str | None:
    s = MessageStore(StoreConfig(store_path=root, **RANDOM)).start()
    body = b"x" * 600
    try:
        for i in range(n):
            r = s.put(TOPIC, body, queue_id=i % 30, keys=[f"k{i}"])
            if r.status is not PutStatus.PUT_OK:
                return f"put {i}: {r.status.name} {s.running_flags}"
    finally:
        try:
            s.close()
        except PoisonedError as e:
            return str(e)
    return None


@pytest.mark.slow
def test_retention_never_poisons_a_store_it_races_with(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No run is poisoned, and no flush complains about a file retention
    deleted (a ConsumeQueue flush that does poisons the store; a CommitLog
    flush that stamps a deleted full file's mtime only warns, and is far
    more frequent, so it shows the race is being hit)."""
    failures = []
    with caplog.at_level(logging.INFO, logger="rocketstore"):
        for k in range(12):
            root = tempfile.mkdtemp(dir=tmp_path)
            why = one_random_run(root, 6000)
            if why is not None:
                failures.append(f"run {k}: {why}")
        failures += complaints(caplog)
    assert failures == []
