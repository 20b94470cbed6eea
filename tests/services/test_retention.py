"""Retention: the retention service deletes expired CommitLog, ConsumeQueue and index files.

The scenario follows RocketMQ's clean-files test: 128-byte CommitLog segments
holding one 120-byte record plus the 8-byte end-of-file blank each, 55
messages, 15 of the files aged past ``file_reserved_time``.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.retention_util import (
    CONFIG,
    COUNT,
    HOUR_MS,
    RECORD,
    SEG,
    TOPIC,
    age,
    body,
    cl_files,
    cq_files,
    fill,
    hour_clock,
    index_files,
    read_all,
    with_config,
)
from rocketstore import GetStatus, MessageRefusedError, MessageStore, PutStatus, StoreConfig
from rocketstore._native import RetentionPolicy

AGED = 15


@pytest.fixture
def opened(open_store: Callable[..., MessageStore]) -> Callable[..., MessageStore]:
    return with_config(open_store)


def test_record_geometry(opened: Callable[..., MessageStore]) -> None:
    store = opened()
    fill(store, 3)
    m = store.look_message_by_offset(SEG)
    assert m is not None and m.store_size == RECORD
    assert len(cl_files(store)) == 3, "one record per 128-byte file"


def test_retention_files_scenario(opened: Callable[..., MessageStore]) -> None:
    clock, hour = hour_clock()
    store = opened(delete_when=hour)
    retention = store._retention
    assert retention is not None
    retention.clock = clock
    retention.disk_usage = lambda path: 0.10
    offsets = fill(store)
    assert len(cl_files(store)) == COUNT
    assert len(cq_files(store)) == 11
    n_index = len(index_files(store))
    assert n_index >= 10
    age(cl_files(store)[:AGED], 2 * 72)

    # Round 1: at most ten files.
    report = retention.run_round()
    assert report.commit_log_files == 10
    assert report.reasons == ("time",)
    assert len(cl_files(store)) == COUNT - 10
    assert store.min_phy_offset == 10 * SEG
    assert len(cq_files(store)) == 11 - 2, "CQ files whose last unit is below the min"
    assert store.get_min_offset_in_queue(TOPIC, 0) == 10
    assert len(index_files(store)) < n_index
    # Round 2: the other five aged files.
    n_index = len(index_files(store))
    assert retention.run_round().commit_log_files == 5
    assert len(cl_files(store)) == COUNT - 15
    assert store.min_phy_offset == 15 * SEG
    assert len(cq_files(store)) == 11 - 3
    assert store.get_min_offset_in_queue(TOPIC, 0) == 15
    assert len(index_files(store)) < n_index
    # Nothing else is old enough.
    assert retention.run_round().commit_log_files == 0

    # Reads: the deleted range is gone, the rest is intact.
    r = store.get_message("g", TOPIC, 0, 3, 1)
    assert r.status is GetStatus.OFFSET_TOO_SMALL
    assert r.next_begin_offset == 15
    assert store.look_message_by_offset(offsets[3]) is None
    assert store.query_message(TOPIC, "k03") == []
    r = store.get_message("g", TOPIC, 0, 15, 32)
    assert r.status is GetStatus.FOUND
    assert [m.body for m in r.messages] == [body(i) for i in range(15, 15 + len(r.messages))]
    assert [m.body for m in store.query_message(TOPIC, "k40")] == [body(40)]

    # A manual round judges by age; force ignores it but keeps the file being written.
    assert store.delete_expired_files() == 0
    assert store.delete_expired_files(force=True) == 10
    assert store.delete_expired_files(force=True) == 10
    left = len(cl_files(store))
    while store.delete_expired_files(force=True):
        pass
    assert len(cl_files(store)) == 1, "never the file being written"
    assert left > 1
    last = store.look_message_by_offset(offsets[-1])
    assert last is not None and last.body == body(COUNT - 1)
    assert store.get_min_offset_in_queue(TOPIC, 0) == COUNT - 1
    assert store.put(TOPIC, body(99), keys="k99").status is PutStatus.PUT_OK


def test_not_in_delete_when_hour_nothing_goes(opened: Callable[..., MessageStore]) -> None:
    clock, hour = hour_clock()
    other = str((int(hour) + 12) % 24)
    store = opened(delete_when=other)
    retention = store._retention
    assert retention is not None
    retention.clock = clock
    retention.disk_usage = lambda path: 0.10
    fill(store, 20)
    age(cl_files(store)[:15], 200)
    assert retention.run_round().commit_log_files == 0
    # The same files go once the clock reaches a delete_when hour.
    retention.clock = lambda: clock() + 12 * HOUR_MS
    assert retention.run_round().commit_log_files == 10


def test_deletion_by_disk_ratio(opened: Callable[..., MessageStore]) -> None:
    clock, hour = hour_clock()
    store = opened(delete_when=str((int(hour) + 12) % 24), disk_max_used_space_ratio=75)
    retention = store._retention
    assert retention is not None
    retention.clock = clock
    usage = {"ratio": 0.50}
    seen: list[str] = []

    def probe(path: str) -> float:
        seen.append(path)
        return usage["ratio"]

    retention.disk_usage = probe
    fill(store, 20)
    age(cl_files(store)[:3], 200)
    assert retention.run_round().commit_log_files == 0, "below every watermark, outside delete_when"
    assert str(store.config.commit_log_dir) in seen
    usage["ratio"] = 0.80  # above disk_max_used_space_ratio: aged files only
    report = retention.run_round()
    assert report.commit_log_files == 3
    assert report.reasons == ("disk",)
    assert retention.run_round().commit_log_files == 0, "the young ones stay below 85 %"
    usage["ratio"] = 0.86  # above disk_space_clean_forcibly_ratio: any age
    assert retention.run_round().commit_log_files == 10
    assert store.is_writeable, "85..90 % cleans but still accepts puts"
    assert store.put(TOPIC, body(1), keys="k01").status is PutStatus.PUT_OK


def test_disk_full_refuses_puts_until_usage_falls(
    opened: Callable[..., MessageStore], caplog: pytest.LogCaptureFixture
) -> None:
    clock, hour = hour_clock()
    store = opened(delete_when=str((int(hour) + 12) % 24), clean_file_forcibly_enable=False)
    retention = store._retention
    assert retention is not None
    retention.clock = clock
    usage = {"ratio": 0.95}
    retention.disk_usage = lambda path: usage["ratio"]
    fill(store, 5)
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        retention.run_round()
        retention.run_round()
    assert sum("disk_space_warning_level_ratio" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(MessageRefusedError) as raised:
        store.put(TOPIC, body(7), keys="k07")
    assert raised.value.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert not isinstance(raised.value, ValueError)
    assert "95%" in (raised.value.reason or "")
    r = store.put(TOPIC, body(7), keys="k07", check=False)
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
    batch = store.put_messages([])
    assert batch == []
    assert not store.is_writeable
    assert any(f.startswith("DISK_FULL") for f in store.running_flags)
    assert store.max_phy_offset == 5 * SEG - 8, "nothing written"
    # Reads keep working.
    assert store.get_message("g", TOPIC, 0, 0, 5).status is GetStatus.FOUND
    usage["ratio"] = 0.60
    retention.run_round()
    assert store.is_writeable
    assert store.running_flags == []
    assert store.put(TOPIC, body(7), keys="k07").status is PutStatus.PUT_OK


def test_disk_full_is_checked_by_the_periodic_service(
    open_store: Callable[..., MessageStore],
) -> None:
    store = open_store(**{**CONFIG, "clean_resource_interval": 20})
    retention = store._retention
    assert retention is not None and retention.running
    retention.disk_usage = lambda path: 0.99
    deadline = time.monotonic() + 10
    while store.is_writeable and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.put(TOPIC, b"x", check=False).status is PutStatus.SERVICE_NOT_AVAILABLE
    retention.disk_usage = lambda path: 0.20
    while not store.is_writeable and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.put(TOPIC, b"x").status is PutStatus.PUT_OK


def test_size_cap_deletes_oldest_files(opened: Callable[..., MessageStore]) -> None:
    clock, hour = hour_clock()
    store = opened(delete_when=str((int(hour) + 12) % 24), max_store_size_bytes=20 * SEG)
    retention = store._retention
    assert retention is not None
    retention.clock = clock
    retention.disk_usage = lambda path: 0.10
    fill(store, 35)
    report = retention.run_round()
    assert report.reasons == ("size",)
    assert report.commit_log_files == 10
    assert retention.run_round().commit_log_files == 5
    assert store.max_phy_offset - store.min_phy_offset <= 20 * SEG
    assert retention.run_round().commit_log_files == 0
    # A manual round does not apply the cap.
    assert store.delete_expired_files() == 0


def test_reader_holding_a_message_while_its_file_is_deleted(
    opened: Callable[..., MessageStore],
) -> None:
    store = opened()
    offsets = fill(store, 40)
    held = store.get_message("g", TOPIC, 0, 0, 5)  # one CQ file
    assert held.status is GetStatus.FOUND
    looked = store.look_message_by_offset(offsets[0])
    assert looked is not None
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[tuple[int, bytes]] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                for i, off in enumerate(offsets[:30]):
                    m = store.look_message_by_offset(off)
                    if m is not None:
                        seen.append((i, m.body))
                r = store.get_message("g", TOPIC, 0, 0, 32)
                for m in r.messages:
                    seen.append((m.queue_offset, m.body))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    deleted = 0
    while True:
        n = store.delete_expired_files(force=True)
        if not n:
            break
        deleted += n
    time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert deleted == 39
    assert seen, "the readers read"
    assert all(b == body(i) for i, b in seen), "every byte a reader got is intact"
    assert [m.body for m in held.messages] == [body(i) for i in range(5)]
    assert looked.body == body(0) and looked.commit_log_offset == offsets[0]
    assert store.look_message_by_offset(offsets[0]) is None


def test_pull_in_a_deleted_range(opened: Callable[..., MessageStore]) -> None:
    store = opened()
    fill(store, 12)
    r = store.get_message("g", TOPIC, 0, 2, 4)
    assert r.status is GetStatus.FOUND
    assert store.delete_expired_files(force=True) == 10
    r = store.get_message("g", TOPIC, 0, 2, 4)
    assert r.status is GetStatus.OFFSET_TOO_SMALL
    assert r.next_begin_offset == 10 == r.min_offset


def test_consumer_behind_the_min_continues_and_counts_skipped(
    opened: Callable[..., MessageStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = opened()
    fill(store, 30)
    c = store.consumer("billing", TOPIC)
    got = c.poll(timeout=1.0, max_messages=3)
    assert [m.queue_offset for m in got] == [0, 1, 2]
    c.commit()
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        assert store.delete_expired_files(force=True) == 10
    assert any(
        "billing" in r.getMessage() and "7 message" in r.getMessage() for r in caplog.records
    ), "the round names the group whose unconsumed messages it deleted"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        got = c.poll(timeout=1.0, max_messages=5)
    assert [m.queue_offset for m in got] == [10, 11, 12, 13, 14]
    assert c.skipped == 7
    assert any("billing" in r.getMessage() and "skipping 7" in r.getMessage()
               for r in caplog.records)
    # A group whose committed offset is below the min starts at the min, too.
    late = store.consumer("late", TOPIC)
    assert [m.queue_offset for m in late.poll(timeout=1.0, max_messages=1)] == [10]
    assert late.skipped == 0, "a new group skipped nothing it had committed to read"
    c.close()
    late.close()


def test_restart_after_deletion(opened: Callable[..., MessageStore], store_path: str) -> None:
    store = opened()
    offsets = fill(store, 30)
    assert store.delete_expired_files(force=True) == 10
    store.shutdown()
    assert not (Path(store_path) / "commitlog" / f"{0:020d}").exists()
    store = opened()
    assert store.min_phy_offset == 10 * SEG
    assert store.get_min_offset_in_queue(TOPIC, 0) == 10
    assert store.get_max_offset_in_queue(TOPIC, 0) == 30
    for i in range(10, 30):
        m = store.look_message_by_offset(offsets[i])
        assert m is not None and m.body == body(i)
    r = store.put(TOPIC, body(30), keys="k30")
    assert r.status is PutStatus.PUT_OK and r.queue_offset == 30


def test_abnormal_restart_after_deletion(opened: Callable[..., MessageStore]) -> None:
    store = opened()
    offsets = fill(store, 30)
    assert store.delete_expired_files(force=True) == 10
    store._n._simulate_crash()
    store = opened()
    assert store.recovery_report is not None
    assert store.min_phy_offset == 10 * SEG
    assert store.get_min_offset_in_queue(TOPIC, 0) == 10
    assert read_all(store, 10) == [body(i) for i in range(10, 30)]
    assert store.look_message_by_offset(offsets[29]) is not None


_CRASH_CHILD = textwrap.dedent(
    """
    import sys
    from rocketstore import MessageStore, StoreConfig
    cfg = StoreConfig(store_path=sys.argv[1], **eval(sys.argv[2]))
    store = MessageStore(cfg).start()
    print("ready", flush=True)
    store.delete_expired_files(force=True)
    print("done", flush=True)
    """
)


def test_kill_during_a_clean_round(opened: Callable[..., MessageStore], store_path: str) -> None:
    store = opened()
    offsets = fill(store, 40)
    store.shutdown()
    cfg = {**CONFIG, "delete_commit_log_files_interval": 300}
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASH_CHILD, store_path, repr(cfg)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    first = Path(store_path) / "commitlog" / f"{0:020d}"
    deadline = time.monotonic() + 20
    while first.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not first.exists(), "the round started deleting"
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    store = opened()
    min_phy = store.min_phy_offset
    assert 0 < min_phy < 10 * SEG, "killed in the middle of the round"
    first_left = min_phy // SEG
    assert store.get_min_offset_in_queue(TOPIC, 0) == first_left
    for i in range(first_left, 40):
        m = store.look_message_by_offset(offsets[i])
        assert m is not None and m.body == body(i), i
    assert read_all(store, first_left) == [body(i) for i in range(first_left, 40)]
    assert store.put(TOPIC, body(40), keys="k40").queue_offset == 40
    # The next round finishes the job.
    assert store.delete_expired_files(force=True) == 10


def test_read_only_store_cannot_delete(opened: Callable[..., MessageStore],
                                       open_store: Callable[..., MessageStore]) -> None:
    from rocketstore import ReadOnlyStoreError

    store = opened()
    fill(store, 3)
    store.shutdown()
    ro = open_store(read_only=True, **CONFIG)
    with pytest.raises(ReadOnlyStoreError):
        ro.delete_expired_files()


def test_retention_interval_comes_from_config() -> None:
    from rocketstore.services.retention import RetentionService, disk_usage_ratio

    cfg = StoreConfig(store_path="/nonexistent", clean_resource_interval=2500)
    svc = RetentionService(lambda: None, cfg)
    assert svc.interval == 2.5
    r = disk_usage_ratio("/")
    assert 0.0 <= r <= 1.0
    assert disk_usage_ratio("/nonexistent/nowhere") == -1.0


def test_pull_between_the_commit_log_and_queue_steps(opened: Callable[..., MessageStore]) -> None:
    """Units that still point into deleted CommitLog files: MESSAGE_WAS_REMOVING."""
    store = opened()
    fill(store, 12)
    c = store.consumer("audit", TOPIC)
    # The CommitLog step alone (a round runs the queue step right after it).
    step = store._n.delete_expired_commit_log(
        RetentionPolicy(now_ms=0, reserved_ms=0, max_files=5, immediately=True)
    )
    assert (step.deleted, step.from_offset, step.min_offset) == (5, 0, 5 * SEG)
    min_phy = step.min_offset
    assert store.get_min_offset_in_queue(TOPIC, 0) == 0, "queues not cleaned yet"
    r = store.get_message("g", TOPIC, 0, 0, 4)
    assert r.status is GetStatus.MESSAGE_WAS_REMOVING
    assert r.next_begin_offset == 5, "past the queue file whose records are gone"
    got = c.poll(timeout=1.0, max_messages=3)
    assert [m.queue_offset for m in got] == [5, 6, 7]
    assert c.skipped == 5
    # The queue step then moves the min offset.
    assert store._n.delete_expired_queues(min_phy, 0).consume_queue_files == 1
    assert store.get_min_offset_in_queue(TOPIC, 0) == 5
    c.close()


def test_a_full_file_gets_its_last_message_time_as_mtime(
    opened: Callable[..., MessageStore], store_path: str
) -> None:
    store = opened()
    offsets = []
    for i in range(4):
        time.sleep(0.003)  # distinct store times, so the ages below differ
        offsets.append(store.put(TOPIC, body(i), keys=f"k{i:02d}").wrote_offset)
    stamps = []
    for off in offsets[:3]:
        m = store.look_message_by_offset(off)
        assert m is not None
        stamps.append(m.store_timestamp)
    files = cl_files(store)
    mtimes = [p.stat().st_mtime_ns // 1_000_000 for p in files[:3]]
    assert mtimes == stamps, "set explicitly when the file filled"
    store.flush()
    store.shutdown()
    # It survives the final flush and a restart, and is the age a round judges by.
    assert [p.stat().st_mtime_ns // 1_000_000 for p in files[:3]] == stamps
    store = opened()
    assert store.delete_expired_files() == 0
    retention = store._retention
    assert retention is not None
    retention.clock = lambda: stamps[1] + 72 * HOUR_MS
    assert retention.run_round(manual=True).commit_log_files == 2, "files 0 and 1 are 72 h old"


def test_a_reader_process_follows_deletion(
    opened: Callable[..., MessageStore], open_store: Callable[..., MessageStore]
) -> None:
    writer = opened()
    offsets = fill(writer, 20)
    reader = open_store(read_only=True, **CONFIG)
    held = reader.look_message_by_offset(offsets[2])
    assert held is not None
    assert writer.delete_expired_files(force=True) == 10
    reader.refresh()
    assert reader.min_phy_offset == 10 * SEG
    assert reader.look_message_by_offset(offsets[2]) is None
    assert held.body == body(2)
    assert reader.get_min_offset_in_queue(TOPIC, 0) == 10
    r = reader.get_message("g", TOPIC, 0, 0, 4)
    assert r.status is GetStatus.OFFSET_TOO_SMALL and r.next_begin_offset == 10
    assert read_all(reader, 10) == [body(i) for i in range(10, 20)]


def test_a_round_passes_its_decision_as_one_retention_policy() -> None:
    """The service builds one frozen, keyword-only policy from the config."""
    from rocketstore.services.retention import RetentionService

    cfg = StoreConfig(
        store_path="/nonexistent",
        file_reserved_time=0.5,
        delete_commit_log_files_interval=7,
    )
    svc = RetentionService(lambda: None, cfg)
    policy = svc._policy(1_000, immediately=False, max_files=3)
    assert policy == RetentionPolicy(
        now_ms=1_000, reserved_ms=1_800_000, max_files=3, interval_ms=7
    )
    assert (policy.immediately, policy.interval_ms) == (False, 7)
    assert "reserved_ms=1800000" in repr(policy)
    with pytest.raises(AttributeError):
        policy.max_files = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        RetentionPolicy(1_000, 0, 3)  # type: ignore[misc]
