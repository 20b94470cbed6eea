"""Delayed delivery: the schedule service and its progress file.

Most tests move an injected clock instead of sleeping (the service reads
``rocketstore.services.schedule.now_ms`` each round); the crash tests use
real time with 1 s / 2 s levels and assert only lower bounds on time.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import FIXTURES, TESTS
from helpers.presets import SMALL
from rocketstore import (
    CorruptedError,
    FlushDiskType,
    GetStatus,
    MessageExt,
    MessageStore,
    PoisonedError,
    StoreConfig,
)
from rocketstore.config.files import loads_fastjson
from rocketstore.services import schedule as schedule_mod
from rocketstore.services.schedule import SCHEDULE_TOPIC, ScheduleService

# The tests pull a delayed message's real topic before its delivery time,
# when the topic does not exist yet: the pull returns nothing (what they
# check) and warns UnknownTopicWarning, which is not what they check.
pytestmark = pytest.mark.filterwarnings("ignore::rocketstore.errors.UnknownTopicWarning")

LEVELS = "1s 2s"
# A store written by a RocketMQ 4.9.8 broker (tests/fixtures).
FIXTURE_STORE = FIXTURES / "rocketmq_4_9_8_store"
FIXTURE_EXPECTED = FIXTURES / "rocketmq_4_9_8_expected.json"
FIXTURE_GEOMETRY: dict[str, Any] = {
    "mapped_file_size_commit_log": 131072,
    "mapped_file_size_consume_queue": 4000,
    "max_hash_slot_num": 200,
    "max_index_num": 800,
}
HERE = Path(__file__).resolve().parent


class Clock:
    """An injected wall clock (ms) that only moves when told to."""

    def __init__(self, start: int) -> None:
        self.ms = start

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(schedule_mod.now_ms())
    monkeypatch.setattr(schedule_mod, "now_ms", c)
    return c


def service(store: MessageStore) -> ScheduleService:
    found = [s for s in store._services if isinstance(s, ScheduleService)]
    assert len(found) == 1, store._services
    return found[0]


def wait_rounds(store: MessageStore, n: int = 2, timeout: float = 30.0) -> None:
    """Let the service complete ``n`` more rounds (after dispatch caught up)."""
    svc = service(store)
    _wait_dispatched(store)
    target = svc.rounds + n
    deadline = time.monotonic() + timeout
    while svc.rounds < target:
        assert svc.running, svc.failure
        assert time.monotonic() < deadline, "the schedule service made no progress"
        svc.wakeup()
        time.sleep(0.01)
    _wait_dispatched(store)


def _wait_dispatched(store: MessageStore, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() > 0:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.005)


def read_all(store: MessageStore, topic: str, queue_id: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while True:
        r = store.get_message("t", topic, queue_id, offset, 32)
        if r.status is not GetStatus.FOUND:
            return out
        out.extend(r.messages)
        offset = r.next_begin_offset


def cfg(path: str, **kw: Any) -> StoreConfig:
    return StoreConfig(store_path=path, **{**SMALL, "message_delay_level": LEVELS, **kw})


@pytest.fixture
def opener(store_path: str) -> Iterator[Callable[..., MessageStore]]:
    opened: list[MessageStore] = []

    def _open(path: str | None = None, **kw: Any) -> MessageStore:
        s = MessageStore(cfg(path or store_path, **kw)).start()
        opened.append(s)
        return s

    yield _open
    for s in reversed(opened):
        try:
            s.shutdown()
        except (PoisonedError, OSError):
            pass  # a test that poisoned its store


def delay_file(path: str) -> dict[int, int]:
    text = (Path(path) / "config" / "delayOffset.json").read_text()
    doc = loads_fastjson(text)
    return dict(doc["offsetTable"])


# -- delivery ----------------------------------------------------------------


def test_delivered_after_the_level_and_not_before(opener: Any, clock: Clock) -> None:
    store = opener()
    body = zlib.compress(b"payload " * 20)
    r1 = store.put(
        "orders", body, 3, tags="TagA", keys=["k1", "k2"],
        properties={"UNIQ_KEY": "U1", "app": "x"}, delay_level=1, flag=7,
        born_timestamp=1_700_000_000_123, born_host=("10.0.0.9", 4321), sys_flag=0x1,
    )
    r2 = store.put("orders", b"second", 3, tags="TagB", properties={"UNIQ_KEY": "U2"},
                   delay_level=2)
    assert r1.ok and r2.ok
    parked = store.look_message_by_offset(r1.wrote_offset)
    assert parked is not None and parked.topic == SCHEDULE_TOPIC and parked.queue_id == 0
    t1 = parked.store_timestamp
    t2 = r2.store_timestamp

    clock.ms = t1 + 999  # one ms before level 1 is due
    wait_rounds(store)
    assert read_all(store, "orders", 3) == []

    clock.ms = t1 + 1000
    wait_rounds(store)
    got = read_all(store, "orders", 3)
    assert [m.properties["UNIQ_KEY"] for m in got] == ["U1"]

    clock.ms = max(t1 + 1000, t2 + 1999)
    wait_rounds(store)
    assert len(read_all(store, "orders", 3)) == 1
    clock.ms = t2 + 2000
    wait_rounds(store)
    got = read_all(store, "orders", 3)
    assert [m.properties["UNIQ_KEY"] for m in got] == ["U1", "U2"]

    copy = got[0]
    # The copy is RocketMQ 4.9.8's: the stored properties string as it was
    # (DELAY, REAL_TOPIC and REAL_QID kept), body, flags, born time and host.
    assert copy.topic == "orders" and copy.queue_id == 3 and copy.queue_offset == 0
    assert copy.properties == parked.properties
    assert copy.properties["DELAY"] == "1"
    assert copy.properties["REAL_TOPIC"] == "orders"
    assert copy.properties["REAL_QID"] == "3"
    assert copy.keys == ["k1", "k2"] and copy.tags == "TagA"
    assert copy.stored_body == body and copy.body == b"payload " * 20
    assert copy.flag == 7 and copy.sys_flag == 0x1
    assert copy.born_timestamp == 1_700_000_000_123
    assert copy.born_host == ("10.0.0.9", 4321)
    assert copy.store_timestamp >= t1
    assert copy.commit_log_offset > parked.commit_log_offset
    # Its queue tag code is the TAGS hash again (not a deliver time): the tag
    # filter finds it.
    by_tag = store.get_message("g", "orders", 3, 0, 32, tags="TagA")
    assert by_tag.status is GetStatus.FOUND
    assert [m.properties["UNIQ_KEY"] for m in by_tag.messages] == ["U1"]
    # Found by key as well (indexed like any message).
    found = store.query_message("orders", "U1")
    assert [m.commit_log_offset for m in found] == [copy.commit_log_offset]
    assert service(store).offsets() == {1: 1, 2: 1}


def test_a_level_above_the_configured_ones_is_clamped_to_the_last(
    opener: Any, clock: Clock
) -> None:
    store = opener()
    r = store.put("orders", b"x", 0, properties={"UNIQ_KEY": "C"}, delay_level=99)
    parked = store.look_message_by_offset(r.wrote_offset)
    assert parked is not None
    assert (parked.topic, parked.queue_id) == (SCHEDULE_TOPIC, 1)
    assert parked.properties["DELAY"] == "2"
    clock.ms = parked.store_timestamp + 1999
    wait_rounds(store)
    assert read_all(store, "orders", 0) == []
    clock.ms = parked.store_timestamp + 2000
    wait_rounds(store)
    [copy] = read_all(store, "orders", 0)
    assert copy.properties["DELAY"] == "2"


def test_sync_flush_copies_are_delivered_and_visible(opener: Any, clock: Clock) -> None:
    # Under SYNC_FLUSH consumers see only flushed records: the copies of a
    # batch are flushed before the step returns, with no put to push them.
    store = opener(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    for i in range(3):
        assert store.put("orders", b"s%d" % i, 0, properties={"UNIQ_KEY": f"Y{i}"},
                         delay_level=1).ok
    clock.ms += 1500
    wait_rounds(store)
    got = read_all(store, "orders", 0)
    assert [m.properties["UNIQ_KEY"] for m in got] == ["Y0", "Y1", "Y2"]
    assert store.flushed_offset >= got[-1].commit_log_offset + got[-1].store_size


def test_many_due_messages_are_delivered_in_batches_in_order(
    opener: Any, clock: Clock
) -> None:
    store = opener()
    n = schedule_mod.BATCH * 2 + 7
    for i in range(n):
        assert store.put("bulk", b"m%d" % i, i % 2, properties={"UNIQ_KEY": f"B{i}"},
                         delay_level=1).ok
    clock.ms += 10_000
    wait_rounds(store)
    got = read_all(store, "bulk", 0) + read_all(store, "bulk", 1)
    assert sorted(m.properties["UNIQ_KEY"] for m in got) == sorted(f"B{i}" for i in range(n))
    assert [m.body for m in read_all(store, "bulk", 0)] == [b"m%d" % i for i in range(0, n, 2)]
    assert service(store).offsets() == {1: n}


# -- progress ------------------------------------------------------------------


def test_progress_file_has_rocketmqs_shape_and_is_written_at_shutdown(
    opener: Any, clock: Clock, store_path: str
) -> None:
    store = opener(flush_delay_offset_interval=3_600_000)
    for i in range(3):
        store.put("orders", b"x", 0, properties={"UNIQ_KEY": f"P{i}"}, delay_level=1)
    store.put("orders", b"y", 0, properties={"UNIQ_KEY": "P3"}, delay_level=2)
    clock.ms += 1500
    wait_rounds(store)
    assert not (Path(store_path) / "config" / "delayOffset.json").exists()
    store.shutdown()
    text = (Path(store_path) / "config" / "delayOffset.json").read_text()
    # Level 2 never moved from 0: like RocketMQ, only levels with progress are written.
    assert text == '{\n\t"offsetTable":{1:3\n\t}\n}'


def test_progress_is_written_every_flush_delay_offset_interval(
    opener: Any, clock: Clock, store_path: str
) -> None:
    store = opener(flush_delay_offset_interval=50)
    store.put("orders", b"x", 0, properties={"UNIQ_KEY": "I"}, delay_level=1)
    clock.ms += 1500
    deadline = time.monotonic() + 30
    path = Path(store_path) / "config" / "delayOffset.json"
    while not (path.exists() and delay_file(store_path).get(1) == 1):
        assert time.monotonic() < deadline, "progress never written while running"
        time.sleep(0.02)
    assert read_all(store, "orders", 0) != []


def test_progress_is_not_written_when_the_commitlog_flush_fails(
    opener: Any, clock: Clock, store_path: str, fail_points: Callable[[str, int], None]
) -> None:
    # No background flush during the test: the copies stay dirty until the
    # service flushes them itself before writing progress.
    store = opener(flush_delay_offset_interval=3_600_000, flush_interval_commit_log=3_600_000,
                   flush_commit_log_thorough_interval=3_600_000)
    svc = service(store)
    store.put("orders", b"a", 0, properties={"UNIQ_KEY": "FA"}, delay_level=1)
    clock.ms += 1500
    wait_rounds(store)
    [a] = read_all(store, "orders", 0)
    assert store.flushed_offset < a.commit_log_offset + a.store_size
    assert svc.persist() is True
    assert store.flushed_offset >= a.commit_log_offset + a.store_size
    assert delay_file(store_path) == {1: 1}

    store.put("orders", b"b", 0, properties={"UNIQ_KEY": "FB"}, delay_level=1)
    clock.ms += 1500
    wait_rounds(store)
    assert svc.offsets() == {1: 2}
    fail_points("msync", errno.EIO)
    assert svc.persist() is False
    assert delay_file(store_path) == {1: 1}
    fail_points("msync", 0)
    # A store whose flush failed never records progress again.
    assert svc.persist() is False
    assert delay_file(store_path) == {1: 1}


def test_progress_is_corrected_into_the_queue_range_on_open(
    opener: Any, clock: Clock, store_path: str
) -> None:
    store = opener()
    for i in range(2):
        store.put("orders", b"x", 0, properties={"UNIQ_KEY": f"R{i}"}, delay_level=1)
    clock.ms += 1500
    wait_rounds(store)
    assert len(read_all(store, "orders", 0)) == 2
    store.shutdown()
    # A progress file ahead of the queue (99 > 2 units) falls back to the
    # queue's end, so a message parked later is still delivered.
    (Path(store_path) / "config" / "delayOffset.json").write_text('{"offsetTable":{"1":99}}')
    store = opener()
    assert service(store).offsets() == {1: 2}
    store.put("orders", b"late", 0, properties={"UNIQ_KEY": "R2"}, delay_level=1)
    clock.ms += 10_000
    wait_rounds(store)
    assert [m.properties["UNIQ_KEY"] for m in read_all(store, "orders", 0)] == ["R0", "R1", "R2"]


def test_an_unreadable_progress_file_refuses_the_open_and_releases_the_store(
    opener: Any, store_path: str
) -> None:
    opener().shutdown()
    conf = Path(store_path) / "config"
    conf.mkdir(exist_ok=True)
    (conf / "delayOffset.json").write_text('{"offsetTable":{1:"six"}}')
    (conf / "delayOffset.json.bak").write_text("not json")
    with pytest.raises(CorruptedError, match=r"delayOffset\.json"):
        MessageStore(cfg(store_path)).start()
    assert not (Path(store_path) / "abort").exists()
    (conf / "delayOffset.json").write_text('{"offsetTable":{1:0}}')
    store = opener()  # the lock was released
    assert service(store).offsets() == {1: 0}


def test_survives_a_clean_restart_before_it_is_due_and_is_delivered_once(
    opener: Any, clock: Clock, store_path: str
) -> None:
    store = opener()
    r = store.put("orders", b"x", 1, properties={"UNIQ_KEY": "S"}, delay_level=2)
    clock.ms = r.store_timestamp + 1000
    wait_rounds(store)
    assert read_all(store, "orders", 1) == []
    store.shutdown()

    store = opener()
    assert read_all(store, "orders", 1) == []
    clock.ms = r.store_timestamp + 2000
    wait_rounds(store)
    assert [m.properties["UNIQ_KEY"] for m in read_all(store, "orders", 1)] == ["S"]
    for _ in range(3):
        store.shutdown()
        assert delay_file(store_path)[2] == 1
        store = opener()
        clock.ms += 5000
        wait_rounds(store)
        assert len(read_all(store, "orders", 1)) == 1


def test_real_time_delivery_is_not_early(opener: Any) -> None:
    # The real clock: a 1 s level is not delivered before 1 s has passed.
    store = opener()
    t0 = time.time()
    r = store.put("orders", b"x", 0, properties={"UNIQ_KEY": "RT"}, delay_level=1)
    deadline = time.monotonic() + 30
    while not read_all(store, "orders", 0):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    [copy] = read_all(store, "orders", 0)
    assert copy.store_timestamp - r.store_timestamp >= 1000
    assert time.time() - t0 >= 0.99


# -- crash ---------------------------------------------------------------------

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[4])
from test_schedule import cfg, read_all
from rocketstore import MessageStore
path, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = MessageStore(cfg(path, flush_delay_offset_interval=int(sys.argv[5]))).start()
for i in range(n):
    r = store.put("crash", b"body%d" % i, i % 2, properties={"UNIQ_KEY": "K%d" % i},
                  delay_level=1 + i % 2)
    assert r.ok, r
store.flush()
print("PUT", flush=True)
if mode == "delivered":
    while sum(len(read_all(store, "crash", q)) for q in (0, 1)) < n:
        time.sleep(0.01)
    print("DELIVERED", flush=True)
time.sleep(60)
"""


def _run_child(store_path: str, n: int, mode: str, persist_ms: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, store_path, str(n), mode, str(HERE), str(persist_ms)],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(TESTS), *sys.path])},
    )
    assert proc.stdout is not None
    want = "DELIVERED" if mode == "delivered" else "PUT"
    deadline = time.monotonic() + 60
    try:
        for line in proc.stdout:
            if line.strip() == want:
                break
            assert time.monotonic() < deadline
        else:
            pytest.fail(f"child ended early with {proc.wait()}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()


def _copies_after_reopen(opener: Any, n: int) -> Counter[str]:
    store = opener()
    deadline = time.monotonic() + 60
    while True:
        got = read_all(store, "crash", 0) + read_all(store, "crash", 1)
        keys = Counter(m.properties["UNIQ_KEY"] for m in got)
        if len(keys) == n:
            break
        assert time.monotonic() < deadline, f"only {len(keys)} of {n} delivered"
        time.sleep(0.05)
    # Wait until both levels' progress is at the end of their parked
    # messages: every copy a level could deliver (again) is put by then.
    svc = service(store)
    deadline = time.monotonic() + 60
    while any(svc.offsets().get(level) != store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
              for level in (1, 2)):
        assert time.monotonic() < deadline, svc.offsets()
        time.sleep(0.01)
    wait_rounds(store)
    got = read_all(store, "crash", 0) + read_all(store, "crash", 1)
    for m in got:
        i = int(m.properties["UNIQ_KEY"][1:])
        assert m.body == b"body%d" % i and m.queue_id == i % 2
    store.shutdown()
    return Counter(m.properties["UNIQ_KEY"] for m in got)


def _killed_after_delivery(opener: Any, store_path: str, n: int, persist_ms: int) -> Counter[str]:
    """The child delivers ``n`` delayed messages (writing its progress every
    ``persist_ms``) and is killed; after a reopen each of them came, none
    more than once again. Returns the copies of each."""
    _run_child(store_path, n, "delivered", persist_ms)
    copies = _copies_after_reopen(opener, n)
    assert set(copies) == {f"K{i}" for i in range(n)}
    assert all(1 <= c <= 2 for c in copies.values()), copies
    return copies


def test_sigkill_before_delivery_delivers_after_reopen(opener: Any, store_path: str) -> None:
    n = 20
    _run_child(store_path, n, "put", 10_000)
    copies = _copies_after_reopen(opener, n)
    assert copies == Counter({f"K{i}": 1 for i in range(n)})
    # And once more across a clean restart.
    assert _copies_after_reopen(opener, n) == copies


def test_sigkill_after_delivery_before_progress_write_duplicates_at_most_once(
    opener: Any, store_path: str
) -> None:
    # Progress is never written before the kill: every copy may come again,
    # but only once, and with its UNIQ_KEY.
    copies = _killed_after_delivery(opener, store_path, 20, 3_600_000)
    assert _copies_after_reopen(opener, 20) == copies


def test_sigkill_with_progress_written_often_loses_nothing(
    opener: Any, store_path: str
) -> None:
    _killed_after_delivery(opener, store_path, 40, 10)


# -- a store written by RocketMQ 4.9.8 -------------------------------------------


def _fixture_copy(tmp_path: Path) -> str:
    if not FIXTURE_STORE.is_dir():
        pytest.fail(f"the RocketMQ 4.9.8 fixture store is missing: {FIXTURE_STORE}")
    dst = tmp_path / "rmq"
    shutil.copytree(FIXTURE_STORE, dst)
    return str(dst)


def _fixture_records() -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = json.loads(FIXTURE_EXPECTED.read_text())["records"]
    return recs


def _open_fixture(path: str) -> MessageStore:
    return MessageStore(StoreConfig(store_path=path, **FIXTURE_GEOMETRY)).start()


def test_fixture_nothing_rocketmq_delivered_is_delivered_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _fixture_copy(tmp_path)
    recs = _fixture_records()
    parked = [r for r in recs if r["topic"] == SCHEDULE_TOPIC]
    last_store = max(r["store_timestamp"] for r in recs)
    # A minute after the broker stopped: level 1 (1 s) is long due, level 18
    # (2 h) is not.
    clock = Clock(last_store + 60_000)
    monkeypatch.setattr(schedule_mod, "now_ms", clock)
    before = json.loads(FIXTURE_EXPECTED.read_text())["max_phy_offset"]
    store = _open_fixture(path)
    try:
        assert service(store).offsets() == {1: 6}
        wait_rounds(store, 3)
        assert store.max_phy_offset == before, "something was delivered again"
        assert service(store).offsets() == {1: 6}
    finally:
        store.shutdown()
    assert delay_file(path) == {1: 6}
    assert len([r for r in parked if r["queue_id"] == 17]) == 6


def test_fixture_pending_level_18_is_delivered_once_when_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _fixture_copy(tmp_path)
    recs = _fixture_records()
    pending = [r for r in recs if r["topic"] == SCHEDULE_TOPIC and r["queue_id"] == 17]
    delivered_by_rmq = [r for r in recs if r["topic"] != SCHEDULE_TOPIC and
                        r["properties"].get("DELAY")]
    assert len(pending) == 6 and len(delivered_by_rmq) == 6
    clock = Clock(max(r["store_timestamp"] for r in recs) + 3 * 3_600_000)
    monkeypatch.setattr(schedule_mod, "now_ms", clock)
    for _ in range(2):  # and once more after a clean restart
        store = _open_fixture(path)
        try:
            wait_rounds(store, 3)
            for r in pending + delivered_by_rmq:
                real, qid = r["properties"]["REAL_TOPIC"], int(r["properties"]["REAL_QID"])
                copies = [m for m in read_all(store, real, qid)
                          if m.keys == r["keys"] and m.properties.get("DELAY")]
                assert len(copies) == 1, (r["keys"], len(copies))
                c = copies[0]
                assert c.properties == r["properties"]
                assert c.born_timestamp == r["born_timestamp"]
                assert c.body_crc == r["body_crc"]
                assert c.sys_flag == r["sys_flag"]
            assert service(store).offsets() == {1: 6, 18: 6}
        finally:
            store.shutdown()
    assert delay_file(path) == {1: 6, 18: 6}


# -- a store written by rocketstore 0.1.0 ------------------------------------------


def test_a_store_written_before_delayed_delivery_delivers_its_parked_message_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = FIXTURES / "store_0_1_0"
    expected = json.loads((FIXTURES / "store_0_1_0_expected.json").read_text())
    [parked] = [m for m in expected["messages"] if m["topic"] == SCHEDULE_TOPIC]
    path = tmp_path / "old"
    shutil.copytree(src, path)
    clock = Clock(parked["store_timestamp"] + 3_600_000)
    monkeypatch.setattr(schedule_mod, "now_ms", clock)
    real, qid = parked["properties"]["REAL_TOPIC"], int(parked["properties"]["REAL_QID"])
    for _ in range(2):
        store = MessageStore(StoreConfig(store_path=str(path), **expected["geometry"])).start()
        try:
            wait_rounds(store, 3)
            copies = [m for m in read_all(store, real, qid) if "DELAY" in m.properties]
            assert len(copies) == 1
            assert copies[0].properties == parked["properties"]
            assert copies[0].body.hex() == parked["body_hex"]
        finally:
            store.shutdown()
