"""A worker process of a shared consumer group, for the membership tests.

Usage: ``group_worker.py STORE CFG_JSON GROUP TOPIC NAME LOG [OPTIONS_JSON]``.

Opens the store read-only, joins ``GROUP`` on ``TOPIC`` (``OPTIONS_JSON``:
keyword arguments of ``store.consumer``), prints ``ready`` and polls until
told otherwise. Every event is one JSON line appended to ``LOG`` with one
``os.write`` (so a ``kill -9`` leaves whole lines), times from
``time.monotonic()`` (CLOCK_MONOTONIC, shared by the host's processes):

* ``{"ev": "assign" | "revoke", "m": NAME, "q": [queue ids], "t": t}`` from
  the listeners;
* ``{"ev": "got", "m": NAME, "t": t, "msgs": [[queue, offset], ...]}`` after
  each poll that returned messages (``t``: when it returned);
* ``{"ev": "closed", "m": NAME, "t": t}`` after a clean close.

Commands, one per line on stdin (answers on stdout):

* ``stop``: close the consumer (commits, leaves the group) and exit;
* ``pause`` / ``resume``: stop / start polling (answers ``paused`` /
  ``resumed``);
* ``commit``: ``commit()`` now; answers ``committed`` or ``fenced <message>``;
* ``poll``: one ``poll(timeout=0.5)``; answers a JSON object
  ``{"msgs": [[q, o], ...], "assignment": [...], "events": [...]}`` with the
  listener events of that poll.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
import warnings
from typing import Any

from rocketstore import FencedError, MessageStore, StoreConfig


def main() -> None:
    path, cfg_json, group, topic, name, log_path = sys.argv[1:7]
    options: dict[str, Any] = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
    warnings.simplefilter("ignore")
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    events: list[dict[str, Any]] = []

    def log(entry: dict[str, Any]) -> None:
        entry = {"m": name, "t": time.monotonic(), **entry}
        events.append(entry)
        os.write(fd, (json.dumps(entry) + "\n").encode())

    def on_assign(qs: list[int]) -> None:
        log({"ev": "assign", "q": qs})

    def on_revoke(qs: list[int]) -> None:
        log({"ev": "revoke", "q": qs})

    commands: queue.Queue[str] = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("stop")

    threading.Thread(target=read_stdin, daemon=True).start()
    cfg = StoreConfig(store_path=path, **json.loads(cfg_json))
    with MessageStore(cfg, read_only=True) as store:
        c = store.consumer(group, topic, on_assign=on_assign, on_revoke=on_revoke, **options)
        print("ready", flush=True)
        paused = False
        while True:
            try:
                cmd = commands.get_nowait()
            except queue.Empty:
                cmd = ""
            if cmd == "stop":
                c.close()
                log({"ev": "closed"})
                break
            if cmd in ("pause", "resume"):
                paused = cmd == "pause"
                print(cmd + "d", flush=True)
            elif cmd == "commit":
                try:
                    c.commit()
                    print("committed", flush=True)
                except FencedError as e:
                    print("fenced " + str(e), flush=True)
            elif cmd == "poll":
                mark = len(events)
                msgs = c.poll(timeout=0.5, max_messages=1000)
                got = [[m.queue_id, m.queue_offset] for m in msgs]
                if got:
                    log({"ev": "got", "msgs": got})
                print(json.dumps({"msgs": got, "assignment": c.assignment(),
                                  "events": events[mark:]}), flush=True)
            if paused:
                time.sleep(0.01)
                continue
            msgs = c.poll(timeout=0.1, max_messages=50)
            if msgs:
                log({"ev": "got", "msgs": [[m.queue_id, m.queue_offset] for m in msgs]})
    print("closed", flush=True)


if __name__ == "__main__":
    main()
