"""Instructions per message from callgrind: the rows of the side-by-side
table (``benches/RESULTS.md``) counted in instructions, which load on the
machine does not move.

Each operation runs in a child process under ``valgrind --tool=callgrind``
twice: once doing only its setup (the store opened, the arguments built)
and once doing the setup and then ``N`` messages' worth of the operation.
The difference of the two instruction counts (``Ir``) divided by ``N`` is
the operation's cost per message. The table's geometry: one topic, 4
queues, 100-byte bodies, one key and one tag per message, ASYNC_FLUSH, a
store on tmpfs (``ROCKETSTORE_BENCH_DIR`` to change; the kernel's work is
not counted by callgrind anyway). The operations:

* ``put``: ``put(topic, body, queue, tags=tag, keys=[key])``, its status
  checked, queues rotating as the table's producers do;
* ``put_positional``: the same puts with the same tags and keys passed by
  position (``put(topic, body, queue, tag, [key])``): a keyword must cost
  no more than a position;
* ``put_messages``: ``put_messages`` of 1,000 ``Message`` objects with a
  key and a tag each, built per call (their construction is counted);
* ``put_batch``: ``put_batch`` of 1,000 bodies with a key and a tag each;
* ``get``: ``get_message`` in pulls of 32 over every queue, one byte of
  each body read (a ``MessageExt`` per message);
* ``get_arrow``: ``get_arrow`` of 4,096 rows, columns ``queue_offset`` and
  ``body``, over every queue;
* ``query``: ``query_message`` by key, ``N`` random keys of the ``N``
  messages (one hit each).

The read operations read a store of ``N`` messages written (without
callgrind) before the runs. Two counts are reported: the calling thread's
(the one to decide by: callgrind serialises threads, so background threads
that wake on a timer run a number of times that depends on how long the
run took) and every thread's (for the puts, the dispatcher's consume-queue
and index work too; each run waits for the dispatcher to catch up before
it closes the store, so the closing thread dispatches nothing). Run::

    python benches/python/instructions.py                    # every operation
    python benches/python/instructions.py put query -n 20000 # some, fewer messages
    python benches/python/instructions.py put --annotate 25  # plus where they go

``--annotate K`` adds a third run of each operation that collects only
inside the operation (it is called through ``operator.call``, and callgrind
is told ``--toggle-collect=_operator_call``) and prints the calling
thread's top ``K`` functions by inclusive count (``callgrind_annotate
--inclusive=yes``). ``PYTHONPATH`` selects the build measured (callgrind
must measure a release build; the script refuses a debug one unless
``--allow-debug``).
"""

from __future__ import annotations

import argparse
import glob
import operator
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OPS = ("put", "put_positional", "put_messages", "put_batch", "get", "get_arrow", "query")
TOPIC = "BenchTopic"
QUEUES = 4
TAGS = ["TagA", "TagB", "TagC", "TagD"]
_TEMPLATE = bytes(ord("a") + i % 26 for i in range(100))
BODIES = [i.to_bytes(4, "little") + _TEMPLATE[4:] for i in range(1024)]
#: The table's geometry (``bench_store.TABLE_GEOMETRY``).
GEOMETRY = {
    "mapped_file_size_commit_log": 256 << 20,
    "mapped_file_size_consume_queue": 20 * 300_000,
    "max_hash_slot_num": 500_000,
    "max_index_num": 2_000_000,
}
BATCH = 1000
ARROW_ROWS = 4096


def _store(path: str) -> Any:
    from rocketstore import FlushDiskType, MessageStore, StoreConfig

    cfg = StoreConfig(store_path=path, flush_disk_type=FlushDiskType.ASYNC_FLUSH, **GEOMETRY)
    return MessageStore(cfg)


def _fill(path: str, n: int) -> None:
    """Writes the read operations' store: ``n`` messages, key ``K<i>`` each."""
    with _store(path) as s:
        put = s.put
        for i in range(n):
            put(TOPIC, BODIES[i & 1023], i & 3, tags=TAGS[i & 3], keys=[f"K{i}"])
        s.flush()
        while s.dispatch_behind_bytes() > 0:
            pass


def _op_put(s: Any, n: int) -> Callable[[], None]:
    from rocketstore import PutStatus

    keys = [f"K{i}" for i in range(n)]
    put, ok = s.put, PutStatus.PUT_OK

    def run() -> None:
        for i in range(n):
            r = put(TOPIC, BODIES[i & 1023], i & 3, tags=TAGS[i & 3], keys=[keys[i]])
            if r.status is not ok:
                raise SystemExit(f"put refused: {r.status}")

    return run


def _op_put_positional(s: Any, n: int) -> Callable[[], None]:
    from rocketstore import PutStatus

    keys = [f"K{i}" for i in range(n)]
    put, ok = s.put, PutStatus.PUT_OK

    def run() -> None:
        for i in range(n):
            r = put(TOPIC, BODIES[i & 1023], i & 3, TAGS[i & 3], [keys[i]])
            if r.status is not ok:
                raise SystemExit(f"put refused: {r.status}")

    return run


def _op_put_messages(s: Any, n: int) -> Callable[[], None]:
    from rocketstore import Message

    keys = [f"K{i}" for i in range(n)]

    def run() -> None:
        for b in range(0, n, BATCH):
            q = (b // BATCH) & 3
            msgs = [Message(TOPIC, BODIES[i & 1023], q, tags=TAGS[i & 3], keys=[keys[i]])
                    for i in range(b, b + BATCH)]
            s.put_messages(msgs)

    return run


def _op_put_batch(s: Any, n: int) -> Callable[[], None]:
    tags = [TAGS[i & 3] for i in range(BATCH)]
    bodies = [BODIES[i & 1023] for i in range(BATCH)]
    batches = [[f"K{i}" for i in range(b, b + BATCH)] for b in range(0, n, BATCH)]

    def run() -> None:
        for j, keys in enumerate(batches):
            if not s.put_batch(TOPIC, bodies, j & 3, keys=keys, tags=tags).ok:
                raise SystemExit("put_batch refused")

    return run


def _op_get(s: Any, n: int) -> Callable[[], None]:
    from rocketstore import GetStatus

    get, found = s.get_message, GetStatus.FOUND

    def run() -> None:
        count = total = 0
        for q in range(QUEUES):
            off = 0
            while True:
                g = get("g", TOPIC, q, off, 32)
                if g.status is not found:
                    break
                for m in g.messages:
                    total += m.body[0]
                    count += 1
                off = g.next_begin_offset
        if count != n:
            raise SystemExit(f"get read {count} of {n}")

    return run


def _op_get_arrow(s: Any, n: int) -> Callable[[], None]:
    from rocketstore import GetStatus

    get, found, columns = s.get_arrow, GetStatus.FOUND, ["queue_offset", "body"]

    def run() -> None:
        count = 0
        for q in range(QUEUES):
            off = 0
            while True:
                r = get(TOPIC, q, off, ARROW_ROWS, columns=columns)
                if r.status is not found:
                    break
                count += r.batch.num_rows
                off = r.next_begin_offset
        if count != n:
            raise SystemExit(f"get_arrow read {count} of {n}")

    return run


def _op_query(s: Any, n: int) -> Callable[[], None]:
    rnd = random.Random(1000)
    keys = [f"K{rnd.randrange(n)}" for _ in range(n)]
    q = s.query_message

    def run() -> None:
        hits = 0
        for k in keys:
            hits += len(q(TOPIC, k, 32, 0))
        if hits != n:
            raise SystemExit(f"query found {hits} of {n}")

    return run


SETUPS: dict[str, Callable[[Any, int], Callable[[], None]]] = {
    "put": _op_put,
    "put_positional": _op_put_positional,
    "put_messages": _op_put_messages,
    "put_batch": _op_put_batch,
    "get": _op_get,
    "get_arrow": _op_get_arrow,
    "query": _op_query,
}


def child(op: str, path: str, n: int, run_it: bool) -> None:
    """One measured process: the setup of ``op``, then (``run_it``) the operation."""
    if op == "get_arrow":
        import pyarrow  # noqa: F401  (imported in both runs, not counted)
    with _store(path) as s:
        run = SETUPS[op](s, n)
        if op in ("get", "get_arrow"):  # pulls and queries import lazily: once in both runs
            SETUPS[op](s, 0)
        if run_it:
            # Through `operator.call`, so that an annotated run collects
            # inside it only (`--toggle-collect=_operator_call`).
            operator.call(run)
        # The dispatcher catches up before the store closes (else the
        # closing thread dispatches what is left, a share that depends on
        # the threads' timing), in both runs alike.
        while s.dispatch_behind_bytes() > 0:
            time.sleep(0.01)


def _total(files: list[str]) -> tuple[int, int]:
    """(calling thread's Ir, every thread's Ir) of one run's per-thread files."""
    per: dict[int, int] = {}
    for f in files:
        tid = int(f.rsplit("-", 1)[1])
        text = Path(f).read_text(errors="replace")
        m = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
        if m is None:
            raise SystemExit(f"no totals in {f}")
        per[tid] = int(m.group(1))
    return per.get(1, 0), sum(per.values())


def _callgrind(op: str, path: str, n: int, run_it: bool, out: str,
               only_op: bool = False) -> tuple[int, int, str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    toggle = ["--toggle-collect=_operator_call"] if only_op else []
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", *toggle,
           f"--callgrind-out-file={out}", sys.executable, str(Path(__file__).resolve()),
           "--child", op, "--store", path, "-n", str(n)]
    if run_it:
        cmd.append("--run")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    files = sorted(glob.glob(out + "-*"))
    main_ir, all_ir = _total(files)
    main_file = next((f for f in files if int(f.rsplit("-", 1)[1]) == 1), "")
    return main_ir, all_ir, main_file


def _annotate(path: str, top: int) -> str:
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
        check=True, capture_output=True, text=True).stdout
    # The frames above the operation (100 % each) say nothing.
    lines = [ln for ln in text.splitlines()
             if re.match(r"^\s*[\d,]+ \(", ln) and "(100.0%)" not in ln]
    return "\n".join(lines[:top])


def _check_release() -> None:
    import rocketstore._native as native

    if hasattr(native, "_set_fail_point"):
        raise SystemExit(f"{native.__file__} is a test build (fail points); measure a release "
                         "build, or pass --allow-debug")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ops", nargs="*", metavar="op", help=f"of {', '.join(OPS)} (default: all)")
    ap.add_argument("-n", type=int, default=100_000, help="messages (default 100,000)")
    ap.add_argument("--annotate", type=int, default=0, metavar="K",
                    help="print the top K functions (inclusive) of each full run")
    ap.add_argument("--allow-debug", action="store_true")
    ap.add_argument("--child", choices=OPS, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.store, a.n, a.run)
        return
    if not a.allow_debug:
        _check_release()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    ops = a.ops or list(OPS)
    if set(ops) - set(OPS):
        raise SystemExit(f"unknown operations {sorted(set(ops) - set(OPS))}; known: {OPS}")
    if a.n % (BATCH * QUEUES) and {"put_batch", "put_messages"} & set(ops):
        raise SystemExit(f"-n must be a multiple of {BATCH * QUEUES} for the batches")
    base = os.environ.get("ROCKETSTORE_BENCH_DIR") or (
        "/dev/shm" if Path("/dev/shm").is_dir() else None)
    print(f"{'operation':<10} {'Ir/msg (calling thread)':>24} {'Ir/msg (all threads)':>21}")
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        filled = os.path.join(tmp, "filled")
        if any(op in ("get", "get_arrow", "query") for op in ops):
            _fill(filled, a.n)
        for op in ops:
            counts = []
            for run_it in (False, True):
                path = filled if op in ("get", "get_arrow", "query") else os.path.join(
                    tmp, f"{op}-{int(run_it)}")
                out = os.path.join(tmp, f"cg-{op}-{int(run_it)}")
                counts.append(_callgrind(op, path, a.n, run_it, out))
            (m0, a0, _), (m1, a1, _) = counts
            print(f"{op:<10} {(m1 - m0) / a.n:>24,.0f} {(a1 - a0) / a.n:>21,.0f}", flush=True)
            if a.annotate:
                # A third run collecting inside the operation only (the calling thread).
                path = filled if op in ("get", "get_arrow", "query") else os.path.join(
                    tmp, f"{op}-annotated")
                out = os.path.join(tmp, f"cg-{op}-annotated")
                _, _, f2 = _callgrind(op, path, a.n, True, out, only_op=True)
                print(_annotate(f2, a.annotate), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
