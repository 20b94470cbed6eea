"""A read-only store follows a live SYNC writer in another process.

The writer (a subprocess) appends to 8 KiB CommitLog segments, so segments
roll every few dozen messages, and is killed with SIGKILL and restarted a few
times. This process reads the same store ``read_only=True``:

* a consumer must receive every queue offset, in order, with no gap (a queue
  unit can become visible before this process has adopted the CommitLog
  segment it points into; that must never be taken for a removed message);
* a plain ``get_message`` loop (no consumer, no explicit ``refresh()``) must
  keep seeing what the writer appends.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.killed_child import LineChild
from helpers.presets import FAST_FLUSH
from rocketstore import GetStatus, MessageStore, StoreConfig

TOPIC = "F"
QUEUES = 2
#: 8 KiB CommitLog segments: a roll every ~40 messages.
FOLLOW_CFG: dict[str, Any] = {
    "mapped_file_size_commit_log": 8 * 1024,
    "mapped_file_size_consume_queue": 20 * 100,
    "max_hash_slot_num": 100,
    "max_index_num": 400,
    # The checkpoint is persisted often, so a restarted writer's recovery
    # scans only the last segments.
    **FAST_FLUSH,
}

WRITER = r"""
import json, sys, time
from rocketstore import FlushDiskType, MessageStore, StoreConfig

path, topic, queues, limit, pause = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
cfg = StoreConfig(store_path=path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                  **json.loads(sys.argv[6]))
store = MessageStore(cfg).start()
table = store.queue_offset_table()
seq = sum(table.get((topic, q), 0) for q in range(queues))
print("READY", seq, flush=True)
out = sys.stdout
while seq < limit:
    q = seq % queues
    r = store.put(topic, f"{q}:{seq // queues};".encode() * (20 + seq % 80), q)
    assert r.ok and r.queue_offset == seq // queues, (seq, r)
    out.write(f"{q} {r.queue_offset}\n")
    out.flush()
    seq += 1
    if pause:
        time.sleep(pause)
store.shutdown()
print("DONE", flush=True)
"""


def body_of(q: int, off: int) -> bytes:
    seq = off * QUEUES + q
    return f"{q}:{off};".encode() * (20 + seq % 80)


class Writer(LineChild):
    """One writer process; its acknowledged ``(queue, offset)`` pairs are collected."""

    def __init__(self, path: str, limit: int, pause: float, acked: set[tuple[int, int]]) -> None:
        self.acked = acked
        # stderr goes to a file: recovery may log a lot, and a full pipe would block.
        self.err_path = Path(path).with_name(f"writer-{time.monotonic_ns()}.err")
        with open(self.err_path, "w") as err:
            super().__init__(
                ["-c", WRITER, path, TOPIC, str(QUEUES), str(limit), str(pause),
                 json.dumps(FOLLOW_CFG)],
                stderr=err,
            )

    def take(self, line: str) -> bool:
        if line.startswith(("READY", "DONE")):
            return False
        q, off = line.split()
        self.acked.add((int(q), int(off)))
        return True

    def wait_ready(self) -> None:
        line = self.next_event(60) or ""
        if not line.startswith("READY"):
            self.kill()
            raise AssertionError(f"writer did not start: {line!r}\n{self.stderr()[-3000:]}")

    def kill(self, timeout: float = 30.0) -> None:
        super().kill(timeout)

    def stderr(self) -> str:
        return self.err_path.read_text()


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
def test_read_only_consumer_never_skips_an_offset_across_rolls_and_writer_kills(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "store")
    acked: set[tuple[int, int]] = set()
    w = Writer(path, 10**9, 0.0, acked)
    w.wait_ready()
    ro = MessageStore(StoreConfig(store_path=path, **FOLLOW_CFG), read_only=True).start()
    seen: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
    gaps: list[tuple[int, int, int]] = []
    bad: list[tuple[int, int]] = []

    def take(msgs: list[Any]) -> None:
        for m in msgs:
            q, off = m.queue_id, m.queue_offset
            s = seen[q]
            expected = s[-1] + 1 if s else 0
            if off != expected:
                gaps.append((q, expected, off))
            s.append(off)
            if m.body != body_of(q, off):
                bad.append((q, off))

    try:
        consumer = ro.consumer("follower", TOPIC)
        kills = 0
        phase_end = time.monotonic() + 1.0
        while True:
            take(consumer.poll(timeout=0.05, max_messages=200))
            if time.monotonic() < phase_end:
                continue
            if kills == 4:
                break
            # kill -9 the writer mid-stream, restart it (it recovers and goes on).
            w.kill()
            kills += 1
            w = Writer(path, 10**9, 0.0, acked)
            w.wait_ready()
            phase_end = time.monotonic() + 1.0
        w.kill()
        # The last kill may have come between a SYNC put's flush and its
        # dispatch: a writer's recovery writes the missing queue units. Open
        # and close one more writer (limit 0), as a restarted service would.
        w = Writer(path, 0, 0.0, acked)
        w.wait_ready()
        w.done.wait(timeout=60)
        w.kill()
        # Catch up with everything the writers acknowledged.
        target = {q: 1 + max((o for (qq, o) in acked if qq == q), default=-1)
                  for q in range(QUEUES)}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            len(seen[q]) < target[q] for q in range(QUEUES)
        ):
            take(consumer.poll(timeout=0.2, max_messages=500))
        consumer.close()
    finally:
        w.kill()
        ro.shutdown()
    assert acked, "the writers acknowledged nothing"
    assert sum(len(s) for s in seen.values()) > 1000, "too few messages to exercise rolls"
    assert not gaps, f"{len(gaps)} gaps (queue, expected, got), first: {gaps[:10]}"
    assert not bad, f"altered bodies: {bad[:10]}"
    seen_sets = {q: set(s) for q, s in seen.items()}
    missing = sorted(a for a in acked if a[1] not in seen_sets[a[0]])
    assert not missing, f"{len(missing)} acknowledged messages never reached the follower"


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
def test_get_message_loop_on_a_read_only_store_sees_new_messages(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    # The store exists (empty queue dirs do not) before the reader opens it.
    MessageStore(StoreConfig(store_path=path, **FOLLOW_CFG)).start().shutdown()
    ro = MessageStore(StoreConfig(store_path=path, **FOLLOW_CFG), read_only=True).start()
    acked: set[tuple[int, int]] = set()
    n = 400
    w = Writer(path, n, 0.002, acked)
    try:
        w.wait_ready()
        got: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
        offsets = dict.fromkeys(range(QUEUES), 0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(map(len, got.values())) < n:
            for q in range(QUEUES):
                r = ro.get_message("g", TOPIC, q, offsets[q], 32)
                # (OFFSET_FOUND_NULL without moving: not readable yet, pull again.)
                assert r.status in (
                    GetStatus.FOUND,
                    GetStatus.NO_MESSAGE_IN_QUEUE,
                    GetStatus.OFFSET_OVERFLOW_ONE,
                ) or (
                    r.status is GetStatus.OFFSET_FOUND_NULL
                    and r.next_begin_offset == offsets[q]
                ), r
                for m in r.messages:
                    assert m.queue_offset == len(got[q]), (q, m.queue_offset, len(got[q]))
                    got[q].append(m.body)
                offsets[q] = r.next_begin_offset
        assert sum(map(len, got.values())) == n, (
            f"the get_message loop saw {sum(map(len, got.values()))} of {n} messages"
        )
        for q in range(QUEUES):
            assert got[q] == [body_of(q, off) for off in range(n // QUEUES)]
        w.done.wait(timeout=30)
    finally:
        w.kill()
        ro.shutdown()
    assert len(acked) == n



@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the dispatch
def test_read_only_pull_never_jumps_a_queue_file_whose_units_point_past_the_known_commitlog(
    tmp_path: Path,
) -> None:
    """The follower adopts several new queue files at once while the CommitLog
    file that the middle one's last units point into is not adoptable yet (a
    writer still creating it): the pull stops before those units and reads
    them once the file is there; it never moves to the next queue file."""
    path = tmp_path / "store"
    cfg: dict[str, Any] = dict(FOLLOW_CFG, mapped_file_size_consume_queue=20 * 10)
    w = MessageStore(StoreConfig(store_path=str(path), **cfg)).start()
    n = 40

    def body(i: int) -> bytes:
        return f"{i};".encode() * 150

    for i in range(5):
        assert w.put(TOPIC, body(i), 0).ok
    ro = MessageStore(StoreConfig(store_path=str(path), **cfg), read_only=True).start()
    try:
        first: list[int] = []
        for _ in range(500):  # the writer's dispatch is asynchronous
            first += [m.queue_offset
                      for m in ro.get_message("g", TOPIC, 0, len(first), 32).messages]
            if len(first) == 5:
                break
            time.sleep(0.01)
        assert first == list(range(5))
        for i in range(5, n):
            assert w.put(TOPIC, body(i), 0).ok
        w.shutdown()
        cl = path / "commitlog"
        files = sorted(cl.iterdir())
        assert len(files) >= 3, files
        # The second CommitLog file is not there yet (being created).
        hidden = tmp_path / "hidden"
        files[1].rename(hidden)
        got: list[int] = []
        off = 5
        for _ in range(20):
            r = ro.get_message("g", TOPIC, 0, off, 32)
            got += [m.queue_offset for m in r.messages]
            assert r.next_begin_offset == off + len(r.messages), (
                f"moved from {off} to {r.next_begin_offset} past offsets never served "
                f"({r.status}, max {r.max_offset})"
            )
            off = r.next_begin_offset
        assert got == list(range(5, off)) and off < n
        hidden.rename(files[1])
        for _ in range(20):
            r = ro.get_message("g", TOPIC, 0, off, 32)
            got += [m.queue_offset for m in r.messages]
            off = r.next_begin_offset
        assert got == list(range(5, n))
        assert [ro.get_message("g", TOPIC, 0, o, 1).messages[0].body for o in (5, n - 1)] == [
            body(5), body(n - 1)]
    finally:
        ro.shutdown()
