"""A process that commits one group's offsets in a tight loop (``docs/format.md``, §13.1).

``python offsets_loop_child.py STORE ROLE GROUP COUNT``: open the store at
STORE (topic ``T``, 4 queues) as a reader (ROLE ``reader``) or as the writer
(ROLE ``writer``), print ``ready``, wait for a line on stdin, then for
``i`` in ``1..COUNT`` commit ``{0: i, 1: i}`` for GROUP with
``persist_offsets()`` after each (the commit is on disk when it returns) and
print ``c <i>``; print ``done`` and shut down once stdin closes. COUNT 0
loops until killed. An optional fifth argument is the seconds between
rewrites of ``consumerOffset.json`` from its journal (default 0: at every
commit; ``docs/format.md``, §13.3).
"""

from __future__ import annotations

import itertools
import sys

from offsets_child import CFG  # the same store geometry

import rocketstore.consumers.store_commits as commits_module
from rocketstore import MessageStore, StoreConfig


def main() -> None:
    path, role, group, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    commits_module.OFFSETS_PERSIST_INTERVAL = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    store = MessageStore(StoreConfig(store_path=path, **CFG),
                         read_only=role == "reader").start()
    print("ready", flush=True)
    sys.stdin.readline()
    for i in itertools.count(1) if count == 0 else range(1, count + 1):
        store.commit_offsets(group, "T", {0: i, 1: i})
        store.persist_offsets()
        print(f"c {i}", flush=True)
    print("done", flush=True)
    sys.stdin.read()
    store.shutdown()


if __name__ == "__main__":
    main()
