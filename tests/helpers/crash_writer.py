"""A writer to be killed with SIGKILL: ``crash_writer.py STORE sync|async ROUND SEED``.

Opens (and so recovers) the store, prints ``READY <mode> <n> <max_phy>`` where
``n`` is the number of messages already in the store (the writer continues
with seq ``n``), then puts messages as fast as it can: single ``put``,
``put_message`` and ``put_messages`` batches (2..8), chosen by ``SEED``.
After every acknowledgement it prints one line per message::

    seq wrote_offset queue_id queue_offset msg_id wrote_bytes

and flushes stdout, so a printed line is an acknowledged message. Under
SYNC_FLUSH it also checks ``flushed_offset >= wrote_offset + wrote_bytes`` at
each acknowledgement and prints ``BAD ...`` if that does not hold. It stops by
itself after 30 s (the test kills it long before).
"""

from __future__ import annotations

import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from durability_util import QUEUES, TOPIC, body_for, config, key_for

from rocketstore import Message, MessageStore, PutResult


def main() -> int:
    path, flush, rnd, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    sync = flush == "sync"
    store = MessageStore(config(path, flush)).start()
    report = store.recovery_report
    assert report is not None
    table = store.queue_offset_table()
    seq = sum(table.get((TOPIC, q), 0) for q in range(QUEUES))
    out = sys.stdout
    out.write(f"READY {report.mode} {seq} {store.max_phy_offset}\n")
    out.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kind = rng.random()
        results: list[tuple[int, PutResult]]
        if kind < 0.5:
            r = store.put(TOPIC, body_for(seq, rnd), seq % QUEUES, keys=key_for(seq), check=False)
            results = [(seq, r)]
        elif kind < 0.75:
            m = Message(TOPIC, body_for(seq, rnd), seq % QUEUES, keys=[key_for(seq)])
            results = [(seq, store.put_message(m, check=False))]
        else:
            seqs = range(seq, seq + rng.randint(2, 8))
            msgs = [Message(TOPIC, body_for(s, rnd), s % QUEUES, keys=key_for(s)) for s in seqs]
            results = list(zip(seqs, store.put_messages(msgs, check=False), strict=True))
        lines = []
        for s, r in results:
            if not r.ok:
                out.write(f"ERR {s} {r.status}\n")
                out.flush()
                return 2
            end = r.wrote_offset + r.wrote_bytes
            if sync and store.flushed_offset < end:
                lines.append(f"BAD {s} flushed {store.flushed_offset} < end {end}\n")
            lines.append(
                f"{s} {r.wrote_offset} {s % QUEUES} {r.queue_offset} {r.msg_id} {r.wrote_bytes}\n"
            )
        out.write("".join(lines))
        out.flush()
        seq += len(results)
    store.shutdown()
    out.write("DONE\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
