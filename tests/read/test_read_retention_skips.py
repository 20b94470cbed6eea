"""Retention under readers: every offset a consumer moves past is accounted.

A consumer behind a retention gap moves past offsets whose messages were
deleted. Each such offset must be counted (``consumer.skipped``; the pull
result's ``skipped``), so that for every consumer::

    delivered + skipped + damaged == offsets moved past

whether the store is the writer itself or a read-only follower in another
process, and whether a pull comes after a retention round or between its two
steps (CommitLog files deleted, queue files not yet). A read-only store
reports the same min offset as the writer (docs/format.md §16, "Reads in a
deleted range").
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rocketstore import GetStatus, MessageStore, PutStatus
from rocketstore._native import RetentionPolicy

TOPIC = "R"
#: 2 KiB CommitLog segments: 15-20 messages each.
SEG = 2048
#: 30 units per ConsumeQueue file: a retention boundary lands inside a file.
UNITS = 30
CONFIG: dict[str, Any] = {
    "mapped_file_size_commit_log": SEG,
    "mapped_file_size_consume_queue": UNITS * 20,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
    "clean_resource_interval": 3_600_000,  # rounds are run by hand here
}
COUNT = 600
#: Messages the consumer reads before the retention round.
READ_FIRST = 30


def body(i: int) -> bytes:
    return f"{i:05d};".encode() * (6 + i % 11)


def fill(store: MessageStore, n: int = COUNT) -> list[int]:
    offsets = []
    for i in range(n):
        r = store.put(TOPIC, body(i), 0)
        assert r.status is PutStatus.PUT_OK and r.queue_offset == i
        offsets.append(r.wrote_offset)
    store.flush()
    return offsets


def first_retained(offsets: list[int], min_phy: int) -> int:
    """The queue offset of the first message at or above CommitLog offset ``min_phy``."""
    return next(i for i, o in enumerate(offsets) if o >= min_phy)


@pytest.fixture
def writer(open_store: Callable[..., MessageStore]) -> Iterator[tuple[MessageStore, list[int]]]:
    store = open_store(**CONFIG)
    offsets = fill(store)
    yield store, offsets


def take(consumer: Any, n: int) -> list[int]:
    got: list[int] = []
    while len(got) < n:
        msgs = consumer.poll(timeout=1.0, max_messages=n - len(got))
        assert msgs, "the consumer stalled"
        got += [m.queue_offset for m in msgs]
    return got


def drain(consumer: Any, end: int) -> list[int]:
    """Poll until the consumer's position reaches ``end``; the offsets delivered."""
    got: list[int] = []
    idle = 0
    while consumer.position(0) < end:
        msgs = consumer.poll(timeout=0.2, max_messages=1000)
        got += [m.queue_offset for m in msgs]
        idle = 0 if msgs else idle + 1
        assert idle < 50, f"stuck at {consumer.position(0)} of {end}"
    return got


def check_accounting(
    start: int, end: int, delivered: list[int], skipped: int, damaged: int, new_min: int
) -> None:
    assert delivered == sorted(set(delivered)), "delivered in order, once each"
    assert all(start <= o < end for o in delivered)
    assert damaged == 0, "nothing here is damaged"
    assert len(delivered) + skipped + damaged == end - start, (
        f"delivered {len(delivered)} + skipped {skipped} + damaged {damaged} "
        f"!= {end - start} offsets moved past"
    )
    passed = sorted(set(range(start, end)) - set(delivered))
    assert all(o < new_min for o in passed), (
        f"offsets passed without delivery at or above the min {new_min}: "
        f"{[o for o in passed if o >= new_min][:10]}"
    )
    assert set(range(new_min, end)) <= set(delivered), "every retained message delivered"


@pytest.mark.parametrize("mid_round", [False, True], ids=["after_round", "between_steps"])
def test_writer_consumer_counts_every_offset_retention_passed(
    writer: tuple[MessageStore, list[int]], mid_round: bool
) -> None:
    store, offsets = writer
    c = store.consumer("g", TOPIC)
    assert take(c, READ_FIRST) == list(range(READ_FIRST))
    start = c.position(0)
    n = store._n
    step = n.delete_expired_commit_log(
        RetentionPolicy(now_ms=0, reserved_ms=0, max_files=10, immediately=True)
    )
    assert step.deleted == 10
    min_phy = step.min_offset
    new_min = first_retained(offsets, min_phy)
    assert new_min % UNITS, "the boundary lies inside a queue file (the case under test)"
    if not mid_round:
        n.delete_expired_queues(min_phy, 0)
        assert store.get_min_offset_in_queue(TOPIC, 0) == new_min
    delivered = drain(c, COUNT)
    if mid_round:
        n.delete_expired_queues(min_phy, 0)
        assert store.get_min_offset_in_queue(TOPIC, 0) == new_min
    check_accounting(start, COUNT, delivered, c.skipped, c.damaged, new_min)
    c.close()


def test_found_pull_reports_the_offsets_it_skipped(
    writer: tuple[MessageStore, list[int]],
) -> None:
    store, offsets = writer
    min_phy = store._n.delete_expired_commit_log(
        RetentionPolicy(now_ms=0, reserved_ms=0, max_files=10, immediately=True)
    ).min_offset
    new_min = first_retained(offsets, min_phy)
    file_start = new_min - new_min % UNITS
    assert file_start < new_min
    # Between the two steps: the queue file still holds units of deleted
    # messages in front of retained ones.
    for at in (file_start, new_min - 1):
        r = store.get_message("g", TOPIC, 0, at, 4)
        assert r.status is GetStatus.FOUND, r
        assert [m.queue_offset for m in r.messages] == list(range(new_min, new_min + 4))
        assert r.skipped == new_min - at
        assert r.damaged == 0
        assert r.next_begin_offset == at + r.skipped + len(r.messages)
    # A pull that finds only deleted units (an earlier queue file).
    r = store.get_message("g", TOPIC, 0, 0, 4)
    assert r.status is GetStatus.MESSAGE_WAS_REMOVING and r.messages == []
    assert r.skipped == r.next_begin_offset == UNITS
    # A pull below the min offset.
    store._n.delete_expired_queues(min_phy, 0)
    r = store.get_message("g", TOPIC, 0, 3, 4)
    assert r.status is GetStatus.OFFSET_TOO_SMALL and r.messages == []
    assert r.next_begin_offset == new_min and r.skipped == new_min - 3
    # Nothing skipped in an ordinary pull.
    r = store.get_message("g", TOPIC, 0, new_min, 4)
    assert r.status is GetStatus.FOUND and r.skipped == 0
    assert "skipped" not in repr(r)


def test_read_only_min_offset_agrees_with_the_writer(
    writer: tuple[MessageStore, list[int]], open_store: Callable[..., MessageStore],
    store_path: str,
) -> None:
    store, offsets = writer
    before = open_store(read_only=True, **CONFIG)
    assert before.get_min_offset_in_queue(TOPIC, 0) == 0
    assert store.delete_expired_files(force=True) == 10
    new_min = first_retained(offsets, store.min_phy_offset)
    assert new_min % UNITS
    assert store.get_min_offset_in_queue(TOPIC, 0) == new_min
    # A store opened before the round follows it; one opened after agrees.
    before.refresh()
    assert before.get_min_offset_in_queue(TOPIC, 0) == new_min
    after = open_store(read_only=True, path=store_path, **CONFIG)
    assert after.get_min_offset_in_queue(TOPIC, 0) == new_min
    for ro in (before, after):
        r = ro.get_message("g", TOPIC, 0, 0, 4)
        assert r.status is GetStatus.OFFSET_TOO_SMALL and r.next_begin_offset == new_min
        assert r.skipped == new_min


# -- a read-only follower in another process -------------------------------------------

FOLLOWER = r"""
import json, sys
from rocketstore import MessageStore, StoreConfig

path, topic, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = MessageStore(StoreConfig(store_path=path, **cfg), read_only=True).start()
c = store.consumer("follower", topic)
delivered = []

def report():
    print(json.dumps({"delivered": delivered, "skipped": c.skipped, "damaged": c.damaged,
                      "position": c.position(0),
                      "min": store.get_min_offset_in_queue(topic, 0)}), flush=True)

report()
for line in sys.stdin:
    cmd, arg = line.split()
    n = int(arg)
    if cmd == "take":
        while len(delivered) < n:
            delivered += [m.queue_offset for m in
                          c.poll(timeout=1.0, max_messages=n - len(delivered))]
    elif cmd == "refresh":
        store.refresh()
    elif cmd == "drain":
        idle = 0
        while c.position(0) < n and idle < 50:
            msgs = c.poll(timeout=0.2, max_messages=1000)
            delivered += [m.queue_offset for m in msgs]
            idle = 0 if msgs else idle + 1
    report()
c.close()
store.shutdown()
"""


class Follower:
    def __init__(self, path: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FOLLOWER, path, TOPIC, json.dumps(CONFIG)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.state = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the follower exited ({self.proc.wait()})"
        state: dict[str, Any] = json.loads(line)
        return state

    def send(self, cmd: str, arg: int = 0) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{cmd} {arg}\n")
        self.proc.stdin.flush()
        self.state = self._read()
        return self.state

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def test_read_only_follower_counts_every_offset_retention_passed(
    writer: tuple[MessageStore, list[int]], store_path: str
) -> None:
    store, offsets = writer
    f = Follower(store_path)
    try:
        assert f.state["min"] == 0
        assert f.send("take", READ_FIRST)["delivered"] == list(range(READ_FIRST))
        start = f.state["position"]
        assert store.delete_expired_files(force=True) == 10
        new_min = first_retained(offsets, store.min_phy_offset)
        assert new_min % UNITS
        assert store.get_min_offset_in_queue(TOPIC, 0) == new_min
        # The follower picks up the round (a waiting consumer refreshes the
        # same way); it then reports the writer's min offset.
        ro_min = f.send("refresh")["min"]
        s = f.send("drain", COUNT)
        assert s["position"] == COUNT
        check_accounting(start, COUNT, s["delivered"][READ_FIRST:], s["skipped"], s["damaged"],
                         new_min)
        assert ro_min == new_min
    finally:
        f.close()
    assert f.proc.returncode == 0


def test_retention_keeps_files_dispatch_has_not_passed(
    open_store: Callable[..., MessageStore],
) -> None:
    """Dispatch behind the producer (a loaded machine; here its thread is
    stopped) while retention deletes every CommitLog file it may: the files
    dispatch has not passed stay, whatever their age, so their messages get
    their units at their own queue offsets once dispatch goes on. A consumer
    then delivers every message from the min offset on, none damaged, and
    the queue has no gap (new puts keep their offsets)."""
    store = open_store(**CONFIG)
    offsets = fill(store, 100)
    native = store._native
    assert native is not None
    native.stop_dispatch()
    for i in range(100, 400):
        r = store.put(TOPIC, body(i), 0)
        assert r.status is PutStatus.PUT_OK and r.queue_offset == i
        offsets.append(r.wrote_offset)
    assert store.dispatch_behind_bytes() > 0
    while store.delete_expired_files(force=True):
        pass
    assert store.min_phy_offset > 0, "retention deleted the dispatched files"
    assert store.min_phy_offset <= offsets[100], "a file dispatch had not passed was deleted"
    native.start_dispatch()
    r = store.put(TOPIC, body(400), 0)
    assert r.status is PutStatus.PUT_OK and r.queue_offset == 400
    offsets.append(r.wrote_offset)
    for _ in range(2000):
        if not store.dispatch_behind_bytes():
            break
        store.wait_for_dispatch(store.dispatch_seq, 0.01)
    assert store.get_max_offset_in_queue(TOPIC, 0) == 401
    first = first_retained(offsets, store.min_phy_offset)
    c = store.consumer("g", TOPIC, auto_commit=False)
    got = take(c, 401 - first)
    assert got == list(range(first, 401))
    assert c.damaged == 0
    assert c.positions() == {0: 401}
    r2 = store.get_message("g", TOPIC, 0, first, 401)
    bodies = [m.body for m in r2.messages]
    assert bodies == [body(i) for i in range(first, first + len(bodies))]
    c.close()
