"""Soak: retention deletes files under a writer-side and a read-only consumer.

A writer process (SYNC_FLUSH; ``SOAK_FLUSH=ASYNC_FLUSH``: asynchronous
flushing, which lets the flush fall behind retention) puts to small CommitLog
segments with a size cap, so its retention service deletes the oldest files every
few milliseconds; a consumer thread inside it reads the topic. Both
consumers pause now and then, so retention passes them. The writer is killed
with SIGKILL and restarted at random moments. This process follows the store
read-only with a consumer of its own. Both consumers check, for every poll::

    sum of position moves == delivered + newly skipped + newly damaged

and at the end every offset the follower passed without delivering lies
below the queue's final min offset, and every acknowledged message at or
above it was delivered.

``SOAK_SECONDS`` (default 60) sets the length; ``SOAK_SEED`` the kill times.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.killed_child import LineChild
from helpers.presets import FAST_FLUSH
from rocketstore import MessageStore, StoreConfig

pytestmark = pytest.mark.slow

TOPIC = "S"
QUEUES = 3
SEG = 4096
CONFIG: dict[str, Any] = {
    "mapped_file_size_commit_log": SEG,
    "mapped_file_size_consume_queue": 20 * 50,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
    "clean_resource_interval": 5,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
    **FAST_FLUSH,
}

WRITER = r"""
import json, os, random, sys, threading, time
from rocketstore import FlushDiskType, MessageStore, StoreConfig

path, topic, queues, stop_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = MessageStore(StoreConfig(store_path=path, flush_disk_type=FlushDiskType[sys.argv[6]],
                                 **json.loads(sys.argv[5]))).start()
lock = threading.Lock()

def say(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

table = store.queue_offset_table()
seq = sum(table.get((topic, q), 0) for q in range(queues))
for q in range(queues):  # every queue exists before the follower starts
    if table.get((topic, q), 0) == 0:
        r = store.put(topic, b"x" * 40, q)
        say(f"A {q} {r.queue_offset}")
        seq += 1
done = threading.Event()

def consume():
    c = store.consumer("writer-side", topic, auto_commit=False, exclusive=True)
    rng = random.Random(len(table))
    while not done.is_set():
        if rng.random() < 0.02:
            time.sleep(rng.uniform(0.5, 2.0))  # fall behind: retention passes it
        before = c.positions()
        sk, dm = c.skipped, c.damaged
        msgs = c.poll(timeout=0.05, max_messages=500)
        after = c.positions()
        moved = sum(after[q] - before.get(q, after[q]) for q in after)
        if moved != len(msgs) + (c.skipped - sk) + (c.damaged - dm):
            say(f"BAD moved {moved} delivered {len(msgs)} skipped {c.skipped - sk} "
                f"damaged {c.damaged - dm} {before} -> {after}")
    c.close()

t = threading.Thread(target=consume, daemon=True)
t.start()
say("READY")
i = 0
while not os.path.exists(stop_file):
    q = seq % queues
    r = store.put(topic, f"{seq};".encode() * (4 + seq % 40), q, check=False)
    if r.ok:
        say(f"A {q} {r.queue_offset}")
        seq += 1
    i += 1
done.set()
t.join()
store.shutdown()
say("DONE")
"""


class Writer(LineChild):
    def __init__(self, path: str, stop_file: str, log: Path, cfg: dict[str, Any],
                 flush: str) -> None:
        self.acked: list[tuple[int, int]] = []
        self.bad: list[str] = []
        with open(log, "a") as err:
            super().__init__(
                ["-c", WRITER, path, TOPIC, str(QUEUES), stop_file, json.dumps(cfg), flush],
                stderr=err,
            )

    def take(self, line: str) -> bool:
        if line.startswith("A "):
            _, q, off = line.split()
            self.acked.append((int(q), int(off)))
        elif line.startswith("BAD"):
            self.bad.append(line.strip())
        else:
            return False
        return True

    def expect(self, what: str, timeout: float = 60) -> None:
        event = self.next_event(timeout)
        line = "<timeout>" if event is None else event.strip()
        if line != what:
            self.kill()
            raise AssertionError(f"writer said {line!r}, expected {what!r}")


def test_retention_under_consumers_with_writer_kills(tmp_path: Path) -> None:
    flush = os.environ.get("SOAK_FLUSH", "SYNC_FLUSH")
    # ASYNC writes faster: a larger cap keeps the same few seconds of data.
    cap_segments = 8 if flush == "SYNC_FLUSH" else 24
    cfg = {**CONFIG, "max_store_size_bytes": cap_segments * SEG}
    seconds = float(os.environ.get("SOAK_SECONDS", "60"))
    rng = random.Random(int(os.environ.get("SOAK_SEED", "7")))
    path = str(tmp_path / "store")
    stop_file = str(tmp_path / "stop")
    log = tmp_path / "writer.err"
    writers = [Writer(path, stop_file, log, cfg, flush)]
    writers[-1].expect("READY")
    ro = MessageStore(StoreConfig(store_path=path, **CONFIG), read_only=True).start()
    # The group's one consumer (exclusive): it owns every queue from the start,
    # so positions() lists each queue before the poll that first reads it.
    c = ro.consumer("follower", TOPIC, auto_commit=False, exclusive=True)
    delivered: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
    violations: list[str] = []
    start_pos: dict[int, int] = {}

    def poll_once(timeout: float) -> int:
        before = c.positions()
        for q, p in before.items():
            start_pos.setdefault(q, p)
        sk, dm = c.skipped, c.damaged
        msgs = c.poll(timeout=timeout, max_messages=2000)
        after = c.positions()
        for q, p in after.items():
            start_pos.setdefault(q, before.get(q, p))
        for m in msgs:
            q, off = m.queue_id, m.queue_offset
            if not before.get(q, start_pos[q]) <= off < after[q]:
                violations.append(f"queue {q} delivered {off} outside "
                                  f"{before.get(q)}..{after[q]}")
            delivered[q].append(off)
        moved = sum(after[q] - before.get(q, start_pos[q]) for q in after)
        if moved != len(msgs) + (c.skipped - sk) + (c.damaged - dm):
            violations.append(f"moved {moved} != delivered {len(msgs)} + skipped "
                              f"{c.skipped - sk} + damaged {c.damaged - dm}: {before} -> {after}")
        return len(msgs)

    kills = 0
    try:
        end = time.monotonic() + seconds
        next_kill = time.monotonic() + rng.uniform(1.0, 4.0)
        while time.monotonic() < end:
            poll_once(0.05)
            if rng.random() < 0.005:
                time.sleep(rng.uniform(0.5, 3.0))  # fall behind: retention passes it
            if time.monotonic() >= next_kill:
                writers[-1].kill()
                kills += 1
                writers.append(Writer(path, stop_file, log, cfg, flush))
                writers[-1].expect("READY")
                next_kill = time.monotonic() + rng.uniform(1.0, 4.0)
        Path(stop_file).touch()
        writers[-1].expect("DONE")
        writers[-1].wait()
        # The last writer stopped cleanly: its queues' ends and min offsets.
        final = MessageStore(StoreConfig(store_path=path, **CONFIG), read_only=True).start()
        ends = {q: final.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
        mins = {q: final.get_min_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
        final.shutdown()
        ro.refresh()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            c.position(q) < ends[q] for q in range(QUEUES)
        ):
            poll_once(0.2)
        positions = c.positions()
        skipped, damaged = c.skipped, c.damaged
        ro_mins = {q: ro.get_min_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
    finally:
        for w in writers:
            w.kill()
        c.close()
        ro.shutdown()
    acked = [a for w in writers for a in w.acked]
    writer_bad = [b for w in writers for b in w.bad]
    print(f"soak: {len(acked)} puts, {kills} kills, follower delivered "
          f"{sum(map(len, delivered.values()))}, skipped {skipped}, ends {ends}, mins {mins}")
    assert kills >= 3 and len(acked) > 1000
    assert skipped > 0, "retention passed the follower at least once"
    assert all(mins[q] > 0 for q in range(QUEUES)), "retention deleted messages"
    assert not violations, f"{len(violations)} follower polls broke the rule: {violations[:5]}"
    assert not writer_bad, f"{len(writer_bad)} writer-side polls broke the rule: {writer_bad[:5]}"
    assert positions == ends, "the follower reached the end"
    assert damaged == 0
    assert ro_mins == mins, "the follower's min offsets agree with the writer's"
    total = sum(ends[q] - start_pos[q] for q in range(QUEUES))
    assert sum(map(len, delivered.values())) + skipped == total
    acked_by_q: dict[int, set[int]] = {q: set() for q in range(QUEUES)}
    for q, off in acked:
        acked_by_q[q].add(off)
    for q in range(QUEUES):
        got = delivered[q]
        assert got == sorted(set(got)), f"queue {q}: delivered out of order or twice"
        passed = set(range(start_pos[q], ends[q])) - set(got)
        above = sorted(o for o in passed if o >= mins[q])
        assert not above, f"queue {q}: passed {len(above)} retained offsets: {above[:10]}"
        lost = sorted(o for o in acked_by_q[q] if o >= mins[q] and o not in set(got))
        assert not lost, f"queue {q}: {len(lost)} acknowledged messages never delivered"
