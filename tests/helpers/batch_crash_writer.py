"""A batch writer to be killed with SIGKILL: ``batch_crash_writer.py STORE SEED``.

Opens the store (SYNC_FLUSH, small segments), prints ``READY <n>`` where ``n``
is the number of messages already in the queue, then puts batches of 50..400
messages with ``put_batch`` as fast as it can. Message ``seq`` has body
``seq:<seq>:`` padded with ``.`` to a length that depends on ``seq`` and key
``k<seq>``. After every acknowledged batch it prints
``ACK <first_seq> <count> <queue_offset> <flushed_offset> <end>`` and flushes
stdout, so a printed line is an acknowledged batch. Stops after 30 s.
"""

from __future__ import annotations

import random
import sys
import time

from rocketstore import FlushDiskType, MessageStore, StoreConfig

TOPIC = "batch"
QUEUE = 1


def body_for(seq: int) -> bytes:
    head = f"seq:{seq}:".encode()
    return head + b"." * (seq * 7 % 150)


def config(path: str) -> StoreConfig:
    return StoreConfig(
        store_path=path,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 2000,
        max_hash_slot_num=1000,
        max_index_num=200_000,
    )


def main() -> int:
    path, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    store = MessageStore(config(path)).start()
    seq = store.get_max_offset_in_queue(TOPIC, QUEUE)
    out = sys.stdout
    out.write(f"READY {seq}\n")
    out.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        n = rng.randint(50, 400)
        seqs = range(seq, seq + n)
        r = store.put_batch(TOPIC, [body_for(s) for s in seqs], QUEUE,
                            keys=[f"k{s}" for s in seqs], return_offsets=True, check=False)
        if not r.ok:
            out.write(f"ERR {seq} {r.status} {r.reason}\n")
            out.flush()
            return 1
        offsets = r.offsets
        assert offsets is not None
        end = offsets[-1]
        out.write(f"ACK {seq} {n} {r.queue_offset} {store.flushed_offset} {end}\n")
        out.flush()
        seq += n
    store.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
