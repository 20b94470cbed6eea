"""A consumer with auto-commit that polls until it is killed (SIGKILL).

``python autocommit_child.py STORE LOG AUTO_COMMIT_INTERVAL PERSIST_INTERVAL``

Reads every queue of topic ``T`` as group ``g`` with ``auto_commit=True``
(no explicit commit), slowly (a few messages per poll, a short nap between
polls) so a kill lands while messages are still being delivered. Appends
one line per event to LOG, each with a single ``write`` (``CLOCK_MONOTONIC``
is shared by every process on the machine, so the parent can compare):

* ``P <t>``: a poll is about to start (its auto-commit happens inside it);
* ``D <t> <q>:<next> ...``: the poll returned at ``t``; after it the next
  position of queue ``q`` is ``next`` (only queues the poll delivered from).

Prints ``ready`` once the first poll returned.
"""

from __future__ import annotations

import os
import sys
import time

import rocketstore.consumers.store_commits as commits_module
from rocketstore import MessageStore, StoreConfig

#: The store geometry (the test opens the store with it too).
CFG = {"mapped_file_size_commit_log": 1 << 20, "mapped_file_size_consume_queue": 20 * 4000}


def main() -> None:
    path, log_path = sys.argv[1], sys.argv[2]
    auto_commit_interval, persist_interval = float(sys.argv[3]), float(sys.argv[4])
    commits_module.OFFSETS_PERSIST_INTERVAL = persist_interval
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    store = MessageStore(StoreConfig(store_path=path, **CFG)).start()
    consumer = store.consumer("g", "T", auto_commit_interval=auto_commit_interval)
    first = True
    while True:
        os.write(fd, b"P %.6f\n" % time.monotonic())
        msgs = consumer.poll(timeout=0.05, max_messages=8)
        now = time.monotonic()
        nxt: dict[int, int] = {}
        for m in msgs:
            nxt[m.queue_id] = m.queue_offset + 1
        if nxt:
            parts = " ".join(f"{q}:{n}" for q, n in sorted(nxt.items()))
            os.write(fd, f"D {now:.6f} {parts}\n".encode())
        if first:
            first = False
            print("ready", flush=True)
        time.sleep(0.004)


if __name__ == "__main__":
    main()
