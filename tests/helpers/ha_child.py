"""A replication peer to be killed with SIGKILL: ``ha_child.py master|slave STORE PORT``.

``master``: opens (and so recovers) a SYNC_MASTER store listening on
``127.0.0.1:PORT``, prints ``READY <max_phy>``, then puts messages (topic
``T``, 4 queues, puts and batches of 2..4) until killed. After each
acknowledgement (PUT_OK) it prints ``ACK wrote_offset wrote_bytes`` per
message and flushes stdout, so a printed line is a message a slave holds;
other statuses print ``STORED <status>``.

``slave``: opens (and so recovers) a SLAVE store following
``127.0.0.1:PORT``, prints ``READY <max_phy>`` and then its CommitLog end
every 50 ms until killed. ``slave STORE PORT CQ_FILE_SIZE`` uses consume
queue files of ``CQ_FILE_SIZE`` bytes.

``omaster``: opens an ASYNC_MASTER listening on ``127.0.0.1:PORT`` (its
offsets on ``PORT + 1``), prints ``READY <max_phy>``, puts one message
delayed by level 1, then puts messages (topic ``T``, 4 queues) until
killed; after every 5 it commits group ``G``'s next offsets durably and
prints ``COMMIT <queue id> <next offset>`` per queue.

``oslave``: a SLAVE of ``127.0.0.1:PORT`` fetching offsets every 100 ms;
prints ``READY <max_phy>`` and then sleeps until killed.

All use the short intervals and segment size of ``ha_util``.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from helpers.ha_util import master_config, slave_config
from rocketstore import Message, MessageStore, StoredNotFlushedError


def run_master(path: str, port: int) -> None:
    store = MessageStore(master_config(path, ha_listen_port=port)).start()
    out = sys.stdout
    out.write(f"READY {store.max_phy_offset}\n")
    out.flush()
    i = 0
    while True:
        n = 1 + i % 4
        msgs = [Message("T", f"m{i + k}".encode() * 20, (i + k) % 4) for k in range(n)]
        try:
            results = store.put_messages(msgs) if n > 1 else [store.put_message(msgs[0])]
            out.write("".join(f"ACK {r.wrote_offset} {r.wrote_bytes}\n" for r in results))
        except StoredNotFlushedError as e:
            out.write(f"STORED {e.status.name}\n")
        out.flush()
        i += n


def run_slave(path: str, port: int, cq_file_size: int | None = None) -> None:
    kw = {} if cq_file_size is None else {"mapped_file_size_consume_queue": cq_file_size}
    store = MessageStore(slave_config(path, port, **kw)).start()
    out = sys.stdout
    out.write(f"READY {store.max_phy_offset}\n")
    out.flush()
    while True:
        out.write(f"END {store.max_phy_offset}\n")
        out.flush()
        time.sleep(0.05)


#: The offsets sync's interval and delay levels of ``omaster``/``oslave``.
OFFSETS = {"ha_offsets_interval": 100, "message_delay_level": "1s 2s"}


def run_offsets_master(path: str, port: int) -> None:
    store = MessageStore(master_config(path, sync=False, ha_listen_port=port,
                                       **OFFSETS)).start()
    out = sys.stdout
    out.write(f"READY {store.max_phy_offset}\n")
    out.flush()
    store.put("T", b"delayed", 0, delay_level=1)
    ends = {q: store.get_max_offset_in_queue("T", q) for q in range(4)}
    i = 0
    while True:
        store.put("T", f"m{i}".encode() * 20, i % 4)
        i += 1
        if i % 5 == 0:
            ends = {q: store.get_max_offset_in_queue("T", q) for q in range(4)}
            store.commit_offsets("G", "T", ends)
            store.persist_offsets()
            out.write("".join(f"COMMIT {q} {o}\n" for q, o in ends.items()))
            out.flush()
            time.sleep(0.01)


def run_offsets_slave(path: str, port: int) -> None:
    store = MessageStore(slave_config(path, port, **OFFSETS)).start()
    sys.stdout.write(f"READY {store.max_phy_offset}\n")
    sys.stdout.flush()
    while True:
        time.sleep(1)


def main() -> int:
    role, path, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "slave" and len(sys.argv) > 4:
        run_slave(path, port, int(sys.argv[4]))
        return 0
    run = {"master": run_master, "slave": run_slave, "omaster": run_offsets_master,
           "oslave": run_offsets_slave}[role]
    run(path, port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
