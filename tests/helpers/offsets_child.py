"""A process that writes or reads topic ``T`` (4 queues) and commits consumer offsets.

``python offsets_child.py MODE STORE ARGS...``:

* ``writer STORE N GROUP``: open the store for writing, put N messages,
  print ``ready``; then, unless GROUP is ``-``, consume them as GROUP one by
  one, committing after each (alternately ``sync=True`` and ``sync=False``
  with the store's offset writes due at every commit), printing
  ``c <json positions>`` after each durable commit and ``done`` at the end.
  Then waits until stdin closes and shuts down.
* ``reader STORE GROUP COUNT HOLD``: open read-only, print ``start <json
  positions>``, consume COUNT messages as GROUP one by one, ``commit()``
  after each and print ``c <json positions>``; print ``done``; with HOLD
  = ``hold`` wait until stdin closes (the parent kills it), else close.
* ``hold STORE GROUP``: open read-only, open a consumer of GROUP, commit its
  start positions, print ``held`` and wait until stdin closes.
* ``groups STORE``: open read-only and print ``consumer_groups()`` as JSON.
"""

from __future__ import annotations

import json
import sys

import rocketstore.consumers.store_commits as commits_module
from rocketstore import MessageStore, StoreConfig
from rocketstore.consumers.consumer import Consumer

TOPIC = "T"
QUEUES = 4
#: The store geometry of every offsets process test (``offsets_loop_child.py`` too).
CFG = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 100,
       "max_hash_slot_num": 64, "max_index_num": 256}


def _say(*parts: str) -> None:
    print(" ".join(parts), flush=True)


def _consume(consumer: Consumer, count: int, alternate: bool) -> None:
    for i in range(count):
        msgs = consumer.poll(timeout=10, max_messages=1)
        assert len(msgs) == 1, f"poll {i} returned {len(msgs)} messages"
        sync = not alternate or i % 2 == 1 or i == count - 1
        consumer.commit(sync=sync)
        if sync:
            _say("c", json.dumps(consumer.positions()))


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    cfg = StoreConfig(store_path=path, **CFG)
    if mode == "writer":
        n, group = int(sys.argv[3]), sys.argv[4]
        commits_module.OFFSETS_PERSIST_INTERVAL = 0.0
        store = MessageStore(cfg).start()
        for i in range(n):
            assert store.put(TOPIC, b"m%d" % i, i % QUEUES).ok
        _say("ready")
        if group != "-":
            with store.consumer(group, TOPIC, auto_commit=False) as consumer:
                _consume(consumer, n, alternate=True)
            _say("done")
        sys.stdin.read()
        store.shutdown()
    elif mode == "reader":
        group, count, hold = sys.argv[3], int(sys.argv[4]), sys.argv[5] == "hold"
        store = MessageStore(cfg, read_only=True).start()
        consumer = store.consumer(group, TOPIC, auto_commit=False)
        _say("start", json.dumps(consumer.positions()))
        _consume(consumer, count, alternate=False)
        _say("done")
        if hold:
            sys.stdin.read()
        consumer.close()
        store.shutdown()
    elif mode == "hold":
        store = MessageStore(cfg, read_only=True).start()
        consumer = store.consumer(sys.argv[3], TOPIC, auto_commit=False, exclusive=True)
        consumer.commit()
        _say("held")
        sys.stdin.read()
        consumer.close()
        store.shutdown()
    elif mode == "groups":
        with MessageStore(cfg, read_only=True) as store:
            _say(json.dumps([g.as_dict() for g in store.consumer_groups()]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
