"""A replication peer for the failover tests, to be killed with SIGKILL.

``failover_child.py follower STORE MASTER_PORT LISTEN_PORT COUNT``: a SLAVE
of ``127.0.0.1:MASTER_PORT`` that listens on ``LISTEN_PORT`` once
promoted; it prints ``READY``, then ``ROLE <role> <max_phy>`` every 50 ms;
once promoted (``rocketstore promote STORE``) it puts COUNT messages
(topic ``T``, 4 queues), printing ``ACK wrote_offset wrote_bytes`` for
each, then ``DONE <max_phy>``, and idles until killed.

``failover_child.py slave STORE MASTER_PORT``: a SLAVE printing ``READY``
and then ``STATUS <ha_status as JSON>`` every 50 ms until killed.

``failover_child.py master STORE PORT``: ``ha_child.py master`` whose new
slaves start at its first file (``ha_new_slave_from_first_file``).

Both use the short intervals and segment size of ``ha_util``.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from helpers.ha_util import master_config, slave_config
from rocketstore import Message, MessageStore, StoredNotFlushedError


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_follower(path: str, master_port: int, listen_port: int, count: int) -> None:
    store = MessageStore(slave_config(path, master_port, ha_listen_port=listen_port)).start()
    _say("READY")
    while store.ha_status()["role"] == "SLAVE":
        _say(f"ROLE SLAVE {store.max_phy_offset}")
        time.sleep(0.05)
    _say(f"ROLE {store.ha_status()['role']} {store.max_phy_offset}")
    for i in range(count):
        r = store.put("T", f"b{i}".encode() * 30, i % 4)
        _say(f"ACK {r.wrote_offset} {r.wrote_bytes}")
    _say(f"DONE {store.max_phy_offset}")
    while True:
        time.sleep(1)


def run_slave(path: str, master_port: int) -> None:
    store = MessageStore(slave_config(path, master_port)).start()
    _say("READY")
    while True:
        _say("STATUS " + json.dumps(store.ha_status()))
        time.sleep(0.05)


def run_master(path: str, port: int) -> None:
    cfg = master_config(path, ha_listen_port=port, ha_new_slave_from_first_file=True)
    store = MessageStore(cfg).start()
    _say("READY")
    i = 0
    while True:
        n = 1 + i % 4
        msgs = [Message("T", f"m{i + k}".encode() * 20, (i + k) % 4) for k in range(n)]
        try:
            results = store.put_messages(msgs) if n > 1 else [store.put_message(msgs[0])]
            _say("".join(f"ACK {r.wrote_offset} {r.wrote_bytes}\n" for r in results).rstrip())
        except StoredNotFlushedError as e:
            _say(f"STORED {e.status.name}")
        i += n


def main() -> int:
    role, path, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "follower":
        run_follower(path, port, int(sys.argv[4]), int(sys.argv[5]))
    elif role == "master":
        run_master(path, port)
    else:
        run_slave(path, port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
