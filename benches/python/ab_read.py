"""Compare the pull path of two rocketstore builds, interleaved in one run.

Run: ``python ab_read.py PYTHON_A PYTHON_B [ROUNDS]`` where each PYTHON is an
interpreter with a rocketstore build installed (say, a virtualenv of the
previous commit and one of this one). Each starts a worker that fills its own
store with 64,000 100-byte messages (as ``test_bench_read.py`` does; with
``AB_NO_PROP_CRC=1`` in the environment, without the property CRC, so reads
check the body CRC alone); the workers then take turns running a few timed rounds of
``test_get_message_batch32_touch_body``'s loop, so host load hits both alike.
Prints each build's median and the ratio.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

WORKER = r"""
import sys, tempfile, time, os
from rocketstore import MessageStore, StoreConfig
N, BODY = 64_000, b"x" * 100
base = "/dev/shm" if os.path.isdir("/dev/shm") else None
with tempfile.TemporaryDirectory(dir=base) as d:
    cfg = StoreConfig(store_path=d, mapped_file_size_commit_log=256 << 20,
                      mapped_file_size_consume_queue=20 * 300_000,
                      max_hash_slot_num=500_000, max_index_num=2_000_000,
                      **({"enabled_append_prop_crc": False} if os.environ.get("AB_NO_PROP_CRC")
                         else {}))
    with MessageStore(cfg) as store:
        for i in range(N):
            store.put("bench", BODY, 0, None, [f"key-{i}"])
        store.flush()
        get = store.get_message
        print("ready", flush=True)
        for line in sys.stdin:
            out = []
            for _ in range(int(line)):
                t0 = time.perf_counter()
                off = seen = 0
                while off < N:
                    r = get("g", "bench", 0, off, 32)
                    for m in r.messages:
                        seen += len(m.body)
                    off = r.next_begin_offset
                out.append(time.perf_counter() - t0)
                assert seen == N * len(BODY)
            print(" ".join(map(repr, out)), flush=True)
"""


def main() -> None:
    pythons = sys.argv[1:3]
    turns = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    procs = [
        subprocess.Popen([p, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, cwd="/")
        for p in pythons
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    times: list[list[float]] = [[], []]
    for _ in range(turns):
        for i, p in enumerate(procs):
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write("3\n")
            p.stdin.flush()
            times[i] += [float(x) for x in p.stdout.readline().split()]
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    med = [statistics.median(t) for t in times]
    for py, m, t in zip(pythons, med, times, strict=True):
        print(f"{py}: median {m * 1e3:.2f} ms per 64k pull = {64_000 / m / 1e6:.2f} M msg/s "
              f"({len(t)} rounds)")
    print(f"B/A time ratio: {med[1] / med[0]:.3f}")


if __name__ == "__main__":
    main()
