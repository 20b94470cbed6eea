"""Best-of-N ns per call of ``put`` and ``put_message`` from Python.

For before/after comparisons of two builds on a noisy machine: run it
alternately against each build (``PYTHONPATH=<other build's python dir>``
selects the other one) and compare the best values::

    python benches/python/put_min_ns.py after

Each case runs against two stores in the same process, one writing the
property CRC (``enabled_append_prop_crc``, the default) and one not
(``-nocrc``), their repeats interleaved, so the difference is the cost of
the property CRC per put.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable

from rocketstore import Message, MessageStore, StoreConfig

CALLS = 10_000
REPEATS = 15
BODY = b"x" * 100


def main(label: str) -> None:
    dirs = [tempfile.mkdtemp(), tempfile.mkdtemp()]
    stores = [
        MessageStore(StoreConfig(store_path=d, mapped_file_size_commit_log=256 << 20,
                                 message_index_enable=False,
                                 enabled_append_prop_crc=crc)).start()
        for d, crc in zip(dirs, (True, False), strict=True)
    ]
    cases: dict[str, Callable[[], object]] = {}
    for store, suffix in zip(stores, ("", "-nocrc"), strict=True):
        put, put_message = store.put, store.put_message
        cases["put" + suffix] = lambda put=put: put("bench", BODY, tags="t")
        cases["put_message" + suffix] = (
            lambda put_message=put_message: put_message(Message("bench", BODY, tags="t")))
    best = dict.fromkeys(cases, float("inf"))
    try:
        for _ in range(REPEATS):
            for name, call in cases.items():
                t = time.perf_counter()
                for _ in range(CALLS):
                    call()
                best[name] = min(best[name], time.perf_counter() - t)
    finally:
        for store in stores:
            store.shutdown()
        for d in dirs:
            shutil.rmtree(d)
    print(label, " ".join(f"{k}={v / CALLS * 1e9:.0f}ns" for k, v in best.items()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
