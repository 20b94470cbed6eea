"""A writer process appends while this process reads the same store read-only.

The writer (a subprocess) takes the lock and appends N messages to 4 queues
with small pauses; CommitLog (64 KiB) and CQ (200 units) files roll during the
run. This process opens the store ``read_only=True, no_write=True`` *after* the writer
started (so it cannot hold the lock) and consumes with ``store.consumer``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import NoReturn

import pytest

from helpers.killed_child import LineChild
from helpers.read_util import SMALL_INDEX
from rocketstore import GetStatus, MessageStore, StoreConfig

N = 2000
QUEUES = 4
TOPIC = "X"

WRITER = r"""
import hashlib, json, os, sys, time
from rocketstore import MessageStore, StoreConfig

path, n, queues = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = StoreConfig(store_path=path, **json.loads(sys.argv[4]))

def body(q, off):
    return f"X-{q}-{off}-".encode() + bytes((off * 7 + j) % 256 for j in range(100 + off % 50))

store = MessageStore(cfg).start()
print("started", flush=True)
sys.stdin.readline()  # "go"
for i in range(n):
    q, off = i % queues, i // queues
    r = store.put("X", body(q, off), q, keys=[f"key{i}"])
    assert r.ok and r.queue_offset == off, (i, r)
    if i % 5 == 4:
        time.sleep(0.002)
store.shutdown()

snap = {}
for dirpath, dirnames, filenames in os.walk(path):
    for d in dirnames:
        snap[os.path.relpath(os.path.join(dirpath, d), path) + "/"] = None
    for f in filenames:
        p = os.path.join(dirpath, f)
        with open(p, "rb") as fh:
            data = fh.read()
        snap[os.path.relpath(p, path)] = [len(data), hashlib.sha256(data).hexdigest()]
print(json.dumps(snap), flush=True)
"""


def _body(q: int, off: int) -> bytes:
    return f"X-{q}-{off}-".encode() + bytes((off * 7 + j) % 256 for j in range(100 + off % 50))


def _snapshot(path: str) -> dict[str, list[object] | None]:
    import hashlib

    snap: dict[str, list[object] | None] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for d in dirnames:
            snap[os.path.relpath(os.path.join(dirpath, d), path) + "/"] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            data = Path(p).read_bytes()
            snap[os.path.relpath(p, path)] = [len(data), hashlib.sha256(data).hexdigest()]
    return snap


@pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")  # read before the first put
def test_read_only_consumer_follows_a_writer_process(tmp_path: Path) -> None:
    store_path = str(tmp_path / "store")
    stderr_path = tmp_path / "writer.err"
    with open(stderr_path, "w") as err:
        lines = LineChild(["-c", WRITER, store_path, str(N), str(QUEUES),
                           json.dumps(SMALL_INDEX)], stderr=err, stdin=subprocess.PIPE)
    proc = lines.proc
    try:
        def fail(msg: str) -> NoReturn:
            raise AssertionError(f"{msg}; writer stderr:\n{stderr_path.read_text()}")

        first = lines.next_event(30)
        if first is None:
            fail("writer did not start")
        if first.strip() != "started":
            fail(f"writer said {first!r}")

        # The writer holds the lock; a read-only open must not need it.
        ro = MessageStore(StoreConfig(store_path=store_path, **SMALL_INDEX), read_only=True,
                          no_write=True)
        ro.start()
        try:
            assert proc.poll() is None
            consumer = ro.consumer("reader", TOPIC, exclusive=True)
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

            seen: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
            bad_bodies: list[tuple[int, int]] = []
            count = 0
            polls_while_writing = 0
            deadline = time.monotonic() + 30
            while count < N and time.monotonic() < deadline:
                batch = consumer.poll(timeout=0.5, max_messages=500)
                if batch and proc.poll() is None:
                    polls_while_writing += 1
                for m in batch:
                    assert m.topic == TOPIC
                    seen[m.queue_id].append(m.queue_offset)
                    if m.body != _body(m.queue_id, m.queue_offset):
                        bad_bodies.append((m.queue_id, m.queue_offset))
                    count += 1
            assert count == N, f"saw {count} of {N} messages in 30 s"
            # the reader followed the writer (it did not just read the end result)
            assert polls_while_writing >= 2
            assert bad_bodies == []
            for q in range(QUEUES):
                # every message exactly once, in queue order, dense from 0
                assert seen[q] == list(range(N // QUEUES)), q
            assert consumer.poll(timeout=0.05) == []
            # no_write: kept in memory, and the consumer says so
            with pytest.warns(RuntimeWarning, match="nothing is persisted"):
                consumer.commit()
            assert consumer.committed(0) == N // QUEUES
            assert not (Path(store_path) / "config" / "consumerOffset.json").exists()

            # the writer ends on its own and reports its view of the directory
            report = lines.next_event(30)
            if report is None:
                fail("writer did not finish")
            assert proc.wait(timeout=30) == 0, stderr_path.read_text()
            writer_snap = json.loads(report)

            # reads after the writer left still work (index files rolled meanwhile)
            r = ro.get_message("g", TOPIC, 3, 0, 5)
            assert r.status is GetStatus.FOUND
            assert [m.body for m in r.messages] == [_body(3, i) for i in range(5)]
            hits = ro.query_message(TOPIC, "key1234")
            assert [(m.queue_id, m.queue_offset) for m in hits] == [(1234 % 4, 1234 // 4)]
            assert ro.get_max_offset_in_queue(TOPIC, 0) == N // QUEUES
        finally:
            ro.shutdown()

        # The reader created, changed and removed nothing.
        assert _snapshot(store_path) == writer_snap
        assert "config/consumerOffset.json" not in writer_snap
        cl_files = [k for k in writer_snap if k.startswith("commitlog/") and k[-1] != "/"]
        cq_files = [k for k in writer_snap if k.startswith(f"consumequeue/{TOPIC}/0/")]
        assert len(cl_files) >= 4  # the CommitLog rolled during the run
        assert len(cq_files) >= 3  # and so did the consume queues
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
