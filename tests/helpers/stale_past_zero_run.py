"""Reproduction (run by hand, not collected by pytest): stale records more than
1 MiB of zeros past the recovered end are not zeroed by truncation, and a later
crash resurrects them.

    python tests/helpers/stale_past_zero_run.py

It needs CommitLog segments larger than 1 MiB (4 MiB here, one file, in a
temporary directory that is removed afterwards), which is why it is not part of
the suite (the suite keeps segments at 64 KiB, where truncation scans the whole
file). docs/format.md §14 (truncation zeroes) promises that a later crash can
never resurrect stale records behind newer ones.

Steps: 3000 same-size records; a power loss loses 1.5 MiB of pages after
record 500 while the pages behind survive (stale, valid records); recovery cuts
at record 500 but zeroes only up to the first run of 256 zero pages
(``dirty_extent`` in rust/src/mapped_file_queue.rs), so the stale records stay;
new same-size records are written over the hole and a little into the stale
part; after a second crash, recovery runs from the new end straight into the
stale records and brings them back. Exit status 1 when that happens.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from durability_util import TOPIC, config

from rocketstore import MessageStore

SEG = 4 * 1024 * 1024
GAP = 1536 * 1024  # > 256 pages of zeros


def main() -> int:
    root = tempfile.mkdtemp(prefix="rocketstore-stale-")
    try:
        path = os.path.join(root, "store")
        cfg = {"mapped_file_size_commit_log": SEG}
        store = MessageStore(config(path, **cfg)).start()
        rs = [store.put(TOPIC, b"A" * 1000, 0, keys=f"o-{i:05d}") for i in range(3000)]
        size = rs[0].wrote_bytes
        store.flush()
        store._native._simulate_crash()  # type: ignore[union-attr]
        del store
        end = rs[500].wrote_offset
        # The lost pages were never flushed: the checkpoint on disk (its
        # durable mark cleared, physicMsgTimestamp before record 500) says so, so
        # what follows the zeros is a stale tail, not damage in durable data.
        with open(os.path.join(path, "checkpoint"), "r+b") as f:
            f.write((rs[499].store_timestamp - 1).to_bytes(8, "big"))
            f.seek(2048)
            f.write(bytes(2048))
        seg0 = os.path.join(path, "commitlog", f"{0:020d}")
        with open(seg0, "r+b") as f:
            f.seek(end)
            f.write(b"\0" * GAP)

        store = MessageStore(config(path, **cfg)).start()
        rep = store.recovery_report
        assert rep is not None and rep.end_offset == end, rep
        with open(seg0, "rb") as f:
            f.seek(end)
            left = sum(1 for b in f.read() if b)
        print(f"first recovery: end {end}, {left} non-zero bytes left after it")
        k = 0
        while store.max_phy_offset < end + GAP + 10 * size:
            assert store.put(TOPIC, b"B" * 1000, 0, keys=f"n-{k:05d}").ok
            k += 1
        new_end = store.max_phy_offset
        store.flush()
        store._native._simulate_crash()  # type: ignore[union-attr]
        del store

        store = MessageStore(config(path, **cfg)).start()
        rep = store.recovery_report
        assert rep is not None
        back = (rep.end_offset - new_end) // size
        m = store.look_message_by_offset(new_end)
        print(f"second recovery: new end {new_end}, recovered end {rep.end_offset}")
        print(f"stale records resurrected: {back}; record at the new end: {m and m.keys}")
        store._native._simulate_crash()  # type: ignore[union-attr]
        return 1 if back else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
