"""A writer process with a consumer, to be killed with SIGKILL:
``visibility_child.py STORE MODE``.

Modes (every message: topic ``V``, 4 queues, key ``k-<seq>``):

* ``commit``: puts 100 messages (ASYNC_FLUSH), a consumer polls all of them
  and calls ``commit()``; then prints ``DONE`` and waits to be killed.
* ``close``: the same, but the consumer (auto-commit on, the default) is
  closed instead of committing.
* ``sync``: SYNC_FLUSH. Phase 1: 4 producer threads put 2,000 messages while
  a consumer thread polls, checks each message it receives against
  ``store.flushed_offset`` (read after it received it: flushed data only
  grows, so a message past it was not on disk when delivered) and commits
  every 100 messages. Phase 2: once everything is delivered and committed,
  the ``flush_hold`` fail point stalls the disk, the flushed offset is
  printed, 20 messages are put with ``WAIT=false`` (acknowledged without the
  disk), the consumer polls again, commits, and the offsets are persisted.
  Prints one JSON line ``DONE {...}`` with what it saw, then waits.

The test kills the process after ``DONE``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from presets import SMALL  # a sibling: this file runs as a script

from rocketstore import FlushDiskType, MessageStore, StoreConfig, _native

TOPIC = "V"
QUEUES = 4


def config(path: str, sync: bool) -> StoreConfig:
    ftype = FlushDiskType.SYNC_FLUSH if sync else FlushDiskType.ASYNC_FLUSH
    # ASYNC: no background flush during the run (the commit must flush).
    # SYNC: reads stop waiting for the stalled disk of phase 2 after 300 ms.
    extra = {"sync_flush_timeout": 300} if sync else {
        "flush_interval_commit_log": 60_000, "flush_commit_log_thorough_interval": 60_000}
    return StoreConfig(store_path=path, flush_disk_type=ftype, **SMALL, **extra)


def commit_or_close(path: str, mode: str) -> None:
    store = MessageStore(config(path, sync=False)).start()
    for i in range(100):
        assert store.put(TOPIC, b"m%d" % i, i % QUEUES, keys=[f"k-{i}"]).ok
    c = store.consumer("g", TOPIC, auto_commit=(mode == "close"))
    got = 0
    deadline = time.monotonic() + 30
    while got < 100 and time.monotonic() < deadline:
        got += len(c.poll(timeout=1.0))
    assert got == 100, got
    if mode == "commit":
        c.commit()
    else:
        c.close()
    print("DONE", flush=True)


def sync_run(path: str) -> None:
    store = MessageStore(config(path, sync=True)).start()
    total, producers = 2000, 4
    c = store.consumer("g", TOPIC, auto_commit=False)
    received: list[int] = []
    violations: list[tuple[int, int]] = []
    stop = threading.Event()

    def produce(k: int) -> None:
        for i in range(k, total, producers):
            r = store.put(TOPIC, b"x" * (i % 200), i % QUEUES, keys=[f"k-{i}"])
            assert r.ok, r.status

    def consume() -> None:
        while not stop.is_set():
            for m in c.poll(timeout=0.1):
                end = m.commit_log_offset + m.store_size
                flushed = store.flushed_offset
                if end > flushed:
                    violations.append((end, flushed))
                received.append(m.queue_offset)
                if len(received) % 100 == 0:
                    c.commit()

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    consumer = threading.Thread(target=consume)
    consumer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 60
    while len(received) < total and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    consumer.join()
    c.commit()
    phase1 = len(received)

    # Phase 2: a stalled disk. Every put so far was acknowledged after its
    # flush, so the flushed offset is the end of the log and stays there.
    assert _native._set_fail_point("flush_hold", 1)
    flushed = store.flushed_offset
    assert flushed == store.max_phy_offset, (flushed, store.max_phy_offset)
    acked = 0
    for i in range(total, total + 20):
        r = store.put(TOPIC, b"late", i % QUEUES, keys=[f"k-{i}"], properties={"WAIT": "false"},
                      check=False)
        acked += r.ok
    late = c.poll(timeout=0.3)
    c.commit()
    store.persist_offsets()
    print("DONE " + json.dumps({
        "phase1_received": phase1,
        "violations": violations[:10],
        "violation_count": len(violations),
        "flushed": flushed,
        "late_acked": acked,
        "late_received": len(late),
        "positions": c.positions(),
    }), flush=True)


def main() -> int:
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "sync":
        sync_run(path)
    else:
        commit_or_close(path, mode)
    sys.stdout.flush()
    while True:  # wait for SIGKILL
        time.sleep(1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
