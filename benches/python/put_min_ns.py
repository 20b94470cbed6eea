"""Best-of-N ns per call of ``put`` and ``put_message`` from Python.

For before/after comparisons of two builds on a noisy machine: run it
alternately against each build (``PYTHONPATH=<other build's python dir>``
selects the other one) and compare the best values::

    python benches/python/put_min_ns.py after
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time

from rocketstore import Message, MessageStore, StoreConfig

CALLS = 10_000
REPEATS = 15
BODY = b"x" * 100


def main(label: str) -> None:
    d = tempfile.mkdtemp()
    cfg = StoreConfig(store_path=d, mapped_file_size_commit_log=256 << 20,
                      message_index_enable=False)
    store = MessageStore(cfg).start()
    put, put_message = store.put, store.put_message
    cases = {
        "put": lambda: put("bench", BODY),
        "put_message": lambda: put_message(Message("bench", BODY)),
    }
    best: dict[str, float] = {}
    try:
        for name, call in cases.items():
            best[name] = float("inf")
            for _ in range(REPEATS):
                t = time.perf_counter()
                for _ in range(CALLS):
                    call()
                best[name] = min(best[name], time.perf_counter() - t)
    finally:
        store.shutdown()
        shutil.rmtree(d)
    print(label, " ".join(f"{k}={v / CALLS * 1e9:.0f}ns" for k, v in best.items()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
