"""A process holding zero-copy batches while their CommitLog files go:
``zero_copy_child.py STORE MODE``.

Modes:

* ``retention``: writes 3,000 messages over ~12 CommitLog segments of
  64 KiB, takes zero-copy batches of the whole queue (each points into many
  segments) and copies of the same rows, then deletes every CommitLog file
  but the last (``delete_expired_files(force=True)``), shuts the store down,
  and checks the held batches after each step: their bytes must be the
  copies'. It also reads ``/proc/self/maps``: while the batches are held the
  deleted files stay mapped (``(deleted)``); once they are released, no
  mapping of the store is left.
* ``follower``: a read-only store follows a writer (the parent): prints
  ``HOLDING`` once it holds zero-copy batches of everything written, waits
  for a line on stdin (the writer deletes the files and shuts down
  meanwhile), then checks the batches and the mappings as above.

Prints one JSON line ``DONE {...}``; any difference is an assertion error
(exit 1), and a crash is the signal's exit status.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import pyarrow as pa

from rocketstore import GetStatus, MessageStore, StoreConfig

TOPIC = "Z"
N = 3000
SMALL = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 6000,
    "max_hash_slot_num": 100,
    "max_index_num": 6000,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
    "clean_resource_interval": 3_600_000,
}


def body(i: int) -> bytes:
    return (b"%06d|" % i) * (4 + i % 30)


def mapped(store_path: str) -> tuple[int, int]:
    """(mappings of the store's CommitLog files, of which deleted)."""
    lines = [ln for ln in Path("/proc/self/maps").read_text().splitlines()
             if str(Path(store_path) / "commitlog") in ln]
    return len(lines), sum(1 for ln in lines if ln.endswith("(deleted)"))


def hold(store: MessageStore) -> tuple[list[pa.RecordBatch], list[list[bytes]]]:
    views, copies = [], []
    offset = 0
    while True:
        r = store.get_arrow(TOPIC, 0, offset, 1024, zero_copy=True)
        if r.status is not GetStatus.FOUND:
            break
        assert r.batch.schema.field("body").type == pa.binary_view()
        views.append(r.batch)
        c = store.get_arrow(TOPIC, 0, offset, 1024).batch
        copies.append(c.column("body").to_pylist())
        offset = r.next_begin_offset
    assert offset == N, offset
    return views, copies


def check(views: list[pa.RecordBatch], copies: list[list[bytes]]) -> None:
    i = 0
    for v, c in zip(views, copies, strict=True):
        got = v.column("body").to_pylist()
        assert got == c, "held bytes changed"
        assert got == [body(j) for j in range(i, i + len(got))]
        # Read every byte through Arrow itself (a cast copies out the views).
        assert v.column("body").cast(pa.binary()).equals(pa.array(c, pa.binary()))
        i += len(got)


def main() -> None:
    store_path, mode = sys.argv[1], sys.argv[2]
    out: dict[str, object] = {}
    if mode == "retention":
        store = MessageStore(StoreConfig(store_path=store_path, **SMALL)).start()
        for i in range(N):
            assert store.put(TOPIC, body(i), queue_id=0).ok
        store.flush()
        views, copies = hold(store)
        files = len(list((Path(store_path) / "commitlog").iterdir()))
        deleted = 0
        while (n := store.delete_expired_files(force=True)) > 0:
            deleted += n
        left = len(list((Path(store_path) / "commitlog").iterdir()))
        out.update(files=files, deleted=deleted, left=left,
                   min_offset=store.get_min_offset_in_queue(TOPIC, 0))
        check(views, copies)
        out["maps_after_delete"] = mapped(store_path)
        store.shutdown()
        check(views, copies)
    else:
        store = MessageStore(StoreConfig(store_path=store_path, **SMALL), read_only=True).start()
        views, copies = hold(store)
        print("HOLDING", flush=True)
        sys.stdin.readline()  # the writer deletes its files and shuts down
        out["files_left"] = len(list((Path(store_path) / "commitlog").iterdir()))
        check(views, copies)
        out["maps_after_delete"] = mapped(store_path)
        store.shutdown()
        check(views, copies)
    out["maps_after_close"] = mapped(store_path)
    del views
    gc.collect()
    out["maps_after_release"] = mapped(store_path)
    print("DONE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
