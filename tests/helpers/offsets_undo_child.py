"""A writer that leaves commits pending, for the reset/delete tests.

``python offsets_undo_child.py STORE HOW``: open the store for writing, put
60 messages on ``T`` queue 0, commit offset 30 of group ``g`` durably, then
offset 60 with ``sync=False``: HOW = ``consumer`` through a consumer
(``auto_commit=False``, ``poll``, ``commit(sync=False)``, ``close()``),
``commit_offset`` through ``store.commit_offset`` (left pending). Prints
``ready``, waits for a line on stdin (the parent resets or deletes the group
meanwhile), closes the store and prints ``closed``.
"""

from __future__ import annotations

import sys

from rocketstore import MessageStore, StoreConfig

CFG = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 100,
       "max_hash_slot_num": 64, "max_index_num": 256}


def main() -> None:
    path, how = sys.argv[1], sys.argv[2]
    store = MessageStore(StoreConfig(store_path=path, **CFG)).start()
    for i in range(60):
        assert store.put("T", b"m%d" % i, 0).ok
    if how == "consumer":
        consumer = store.consumer("g", "T", auto_commit=False)
        got = 0
        while got < 60:
            got += len(consumer.poll(timeout=5.0))
        consumer.commit({0: 30})
        consumer.commit(sync=False)
        consumer.close()
    else:
        store.commit_offset("g", "T", 0, 30)
        store.persist_offsets()
        store.commit_offset("g", "T", 0, 60)
    print("ready", flush=True)
    sys.stdin.readline()
    store.close()
    print("closed", flush=True)


if __name__ == "__main__":
    main()
