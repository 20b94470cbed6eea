"""A writer to be killed with SIGKILL: ``one_queue_writer.py STORE N``.

Opens the store (SYNC_FLUSH, 64 units per ConsumeQueue file), puts ``N``
messages to queue 0 of topic ``D`` (seq ``i``: key ``k-<i>``, body
``body_for(i)``), printing one line per acknowledgement::

    seq wrote_offset queue_id queue_offset msg_id wrote_bytes

then waits until every record is dispatched to its queue, prints ``DONE``
and sleeps until it is killed.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from durability_util import TOPIC, body_for, config, key_for, wait_dispatched

from rocketstore import MessageStore

#: 64 units per ConsumeQueue file.
CQ_FILE_64 = 64 * 20


def main() -> int:
    path, n = sys.argv[1], int(sys.argv[2])
    store = MessageStore(config(path, "sync", mapped_file_size_consume_queue=CQ_FILE_64)).start()
    out = sys.stdout
    for seq in range(n):
        r = store.put(TOPIC, body_for(seq), 0, keys=key_for(seq), check=False)
        if not r.ok:
            out.write(f"ERR {seq} {r.status}\n")
            out.flush()
            return 2
        out.write(f"{seq} {r.wrote_offset} 0 {r.queue_offset} {r.msg_id} {r.wrote_bytes}\n")
        out.flush()
    wait_dispatched(store)
    out.write("DONE\n")
    out.flush()
    time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
