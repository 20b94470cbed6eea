"""A writer that puts while Spark reads: ``live_writer.py STORE``.

Opens the store at ``STORE`` with the Spark tests' small geometry
(``arrow_util.GEOMETRY``: 16 KiB CommitLog segments, 50 units per queue
file) and puts message ``seq`` = 0, 1, 2, ... to topic ``live``, queue
``seq % 3``, body ``b"<seq>"``, key ``k<seq>``, tag ``t<seq % 2>``, ten
messages every 50 ms. Prints ``READY`` once the first 200 are dispatched,
and when the file ``STORE.stop`` appears (or after 10,000 messages) waits
until everything is dispatched, prints ``DONE <count>`` and sleeps, still
holding the store open, until it is killed.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from helpers.arrow_util import GEOMETRY
from helpers.read_util import wait_dispatched
from rocketstore import Message, MessageStore, StoreConfig

TOPIC = "live"
QUEUES = 3
CAP = 10_000


def main() -> int:
    path = sys.argv[1]
    stop = path + ".stop"
    store = MessageStore(StoreConfig(store_path=path, **GEOMETRY)).start()
    seq = 0
    ready = False
    while seq < CAP and not os.path.exists(stop):
        msgs = [Message(topic=TOPIC, body=str(i).encode(), queue_id=i % QUEUES,
                        keys=[f"k{i}"], tags=f"t{i % 2}") for i in range(seq, seq + 10)]
        for r in store.put_messages(msgs):
            if not r.ok:
                print(f"ERR {r.status}", flush=True)
                return 2
        seq += len(msgs)
        if not ready and seq >= 200:
            wait_dispatched(store)
            print("READY", flush=True)
            ready = True
        time.sleep(0.05)
    wait_dispatched(store)
    print(f"DONE {seq}", flush=True)
    time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
