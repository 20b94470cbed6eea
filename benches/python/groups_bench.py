"""Consumer groups over processes: rebalance times, CPU per message, bookkeeping cost.

Run: ``python benches/python/groups_bench.py [rebalance|join|cpu|ab|all] [options]``
(``--help`` per command). Every store is made on the real disk
(``--medium disk``, the default: ``media.py``) or tmpfs, and removed
afterwards; members are read-only processes (``python -c``), as worker
processes of a service are.

* ``rebalance`` (``--rounds 20``): two members share 8 queues; one is killed
  with SIGKILL; the time from the kill until the survivor's poll has taken
  every queue. Median and max over the rounds; target: at most the session
  timeout + 1 s (a killed member's queues are free at the next heartbeat).
* ``join`` (``--rounds 20``): one member owns 8 queues and polls; a second
  process joins; the time from just before its ``store.consumer()`` until
  it owns its 4 queues. Target: at most 2 heartbeat intervals.
* ``cpu`` (``--messages 200000``): a backlog of messages on 8 queues read by
  1, then 2 member processes (``poll(max_messages=500)``); user + sys CPU
  of the members per message from their join to their last message
  (``getrusage``), the wall
  clock of each run and their ratio, and the load average. Target: 2
  members within 10 % of 1 member's CPU per message.
* ``ab`` (``--rounds 7``): the cost of the group bookkeeping in one process,
  interleaved rounds of A (an ``exclusive=True`` consumer: no membership)
  and B (a shared member: heartbeat thread, lease checks): ``put`` of
  ``--puts`` messages while the consumer is open, and ``poll`` of them.
  Medians per message and the B/A ratios; target: within 5 %.

Intervals: ``--heartbeat`` and ``--timeout`` (default StoreConfig's 3 s and
10 s; smaller ones make ``rebalance`` and ``join`` quicker to run).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from media import bench_base, load_average

from rocketstore import MessageStore, StoreConfig

TOPIC = "orders"
QUEUES = 8
GEOMETRY: dict[str, Any] = {"mapped_file_size_commit_log": 64 << 20,
                            "mapped_file_size_consume_queue": 20 * 300_000,
                            "max_hash_slot_num": 50_000, "max_index_num": 400_000,
                            "message_index_enable": False}

#: A member process: joins, prints ``ready``, then one JSON line per change
#: of its assignment (``{"t": monotonic, "owned": [...]}``); with ``drain``,
#: reads until the topic stays empty for 1 s and prints its count and CPU.
MEMBER = r"""
import json, resource, sys, time
from rocketstore import MessageStore, StoreConfig
cfg = StoreConfig(**json.loads(sys.argv[1]))
mode = sys.argv[2]
with MessageStore(cfg, read_only=True) as store:
    t_join = time.monotonic()
    c = store.consumer("g", "orders", auto_commit_interval=1.0)
    print(json.dumps({"ready": t_join, "t": time.monotonic(), "owned": c.assignment()}),
          flush=True)
    owned = c.assignment()
    if mode == "drain":
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        n, idle_since, w0 = 0, None, time.monotonic()
        last = w0
        while True:
            got = len(c.poll(timeout=0.1, max_messages=500))
            n += got
            now = time.monotonic()
            if got:
                idle_since = None
                last = now
                r1 = resource.getrusage(resource.RUSAGE_SELF)  # up to the last message
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= 1.0:
                break
        if not n:
            r1 = r0
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        c.close()
        print(json.dumps({"count": n, "cpu": cpu, "wall": last - w0}),
              flush=True)
    else:
        while True:
            c.poll(timeout=0.05)
            now_owned = c.assignment()
            if now_owned != owned:
                owned = now_owned
                print(json.dumps({"t": time.monotonic(), "owned": owned}), flush=True)
"""


#: Where the stores live (``--medium``).
_MEDIUM = ["disk"]


@contextmanager
def _store(options: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A fresh store's config (as keywords) with one message in every queue."""
    with tempfile.TemporaryDirectory(dir=bench_base(_MEDIUM[0])) as d:
        cfg = {"store_path": d, **GEOMETRY, **options}
        with MessageStore(StoreConfig(**cfg)) as store:
            for q in range(QUEUES):
                store.put(TOPIC, b"x", q)
        yield cfg


class Member:
    """A member process and its assignment as it reports it."""

    def __init__(self, cfg: dict[str, Any], mode: str = "watch") -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", MEMBER, json.dumps(cfg), mode],
                                     stdout=subprocess.PIPE, text=True)
        first = self.read()
        self.ready: float = first["ready"]
        self.owned: list[int] = first["owned"]
        self.t: float = first["t"]  # when it reported its assignment last

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("member process ended")
        return dict(json.loads(line))

    def until(self, want: int) -> float:
        """Read its reports until it owns ``want`` queues; the time it did."""
        while len(self.owned) != want:
            got = self.read()
            self.owned, self.t = got["owned"], got["t"]
        return self.t

    def kill(self) -> float:
        t = time.monotonic()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return t

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _summary(name: str, samples: list[float], target: float) -> None:
    print(f"{name}: median {statistics.median(samples):.3f} s, max {max(samples):.3f} s "
          f"over {len(samples)} rounds (target <= {target:.3f} s); load {load_average()}")


def bench_rebalance(rounds: int, options: dict[str, Any]) -> None:
    """Time from a member's SIGKILL until the survivor owns every queue."""
    samples = []
    with _store(options) as cfg:
        for _ in range(rounds):
            a, b = Member(cfg), Member(cfg)
            try:
                a.until(QUEUES // 2)
                b.until(QUEUES // 2)
                killed = b.kill()
                samples.append(a.until(QUEUES) - killed)
            finally:
                a.stop()
                b.stop()
    _summary("rebalance after kill -9", samples, options["consumer_session_timeout"] + 1)


def bench_join(rounds: int, options: dict[str, Any]) -> None:
    """Time from a second member's join until it owns its share."""
    samples = []
    with _store(options) as cfg:
        for _ in range(rounds):
            a = Member(cfg)
            try:
                a.until(QUEUES)
                b = Member(cfg)
                try:
                    samples.append(b.until(QUEUES // 2) - b.ready)
                finally:
                    b.stop()
            finally:
                a.stop()
    _summary("share after a join", samples, 2 * options["consumer_heartbeat_interval"])


def _drain(cfg: dict[str, Any], members: int) -> tuple[int, float, float]:
    """``members`` processes read the backlog: messages, CPU seconds, wall seconds."""
    procs = [Member(cfg, "drain") for _ in range(members)]
    try:
        done = [p.read() for p in procs]
    finally:
        for p in procs:
            p.stop()
    return (sum(d["count"] for d in done), sum(d["cpu"] for d in done),
            max(d["wall"] for d in done))


def bench_cpu(messages: int, options: dict[str, Any]) -> None:
    """CPU per message read by 1 and by 2 member processes."""
    body = b"y" * 100
    rows = {}
    for members in (1, 2):
        with _store(options) as cfg:
            with MessageStore(StoreConfig(**cfg)) as store:
                for i in range(messages):
                    store.put(TOPIC, body, i % QUEUES)
            count, cpu, wall = _drain(cfg, members)
            rows[members] = (count, cpu, wall)
            print(f"{members} member(s): {count:,} messages, {cpu / max(count, 1) * 1e6:.2f} "
                  f"µs CPU (user + sys) per message, wall {wall:.2f} s; load {load_average()}")
    (n1, c1, w1), (n2, c2, w2) = rows[1], rows[2]
    print(f"CPU per message 2/1: {(c2 / max(n2, 1)) / (c1 / max(n1, 1)):.3f} "
          f"(target <= 1.10); wall 2/1: {w2 / w1 if w1 else float('nan'):.3f}")


def _ab_round(cfg: dict[str, Any], exclusive: bool, puts: int) -> tuple[float, float]:
    """One round: seconds per put with the consumer open, and per polled message."""
    body = b"z" * 100
    with MessageStore(StoreConfig(**cfg)) as store:
        c = store.consumer("ab", TOPIC, exclusive=exclusive, auto_commit=False)
        c.seek_to_end()
        put = store.put
        t0 = time.perf_counter()
        for i in range(puts):
            put(TOPIC, body, i % QUEUES)
        t_put = (time.perf_counter() - t0) / puts
        while store.dispatch_behind_bytes():
            time.sleep(0.001)
        n = 0
        t0 = time.perf_counter()
        while n < puts:
            n += len(c.poll(timeout=1.0, max_messages=100))
        t_poll = (time.perf_counter() - t0) / n
        c.close()
    return t_put, t_poll


def bench_ab(rounds: int, puts: int, options: dict[str, Any]) -> None:
    """Interleaved A (exclusive) / B (shared member) rounds of put and poll."""
    got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with _store(options) as cfg:
        for r in range(rounds):
            # A B, then B A: neither side always runs first (or later in the log).
            for exclusive in ((True, False) if r % 2 == 0 else (False, True)):
                got[exclusive].append(_ab_round(cfg, exclusive, puts))
    for i, what in enumerate(("put", "poll")):
        a = statistics.median(r[i] for r in got[True]) * 1e9
        b = statistics.median(r[i] for r in got[False]) * 1e9
        print(f"{what}: A exclusive {a:.0f} ns, B member {b:.0f} ns per message, "
              f"B/A {b / a:.3f} (target <= 1.05; median of {rounds} rounds each)")
    print(f"load {load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("what", choices=("rebalance", "join", "cpu", "ab", "all"))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--puts", type=int, default=20_000)
    parser.add_argument("--heartbeat", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--medium", choices=("disk", "tmpfs"), default="disk",
                        help="where the stores live (default: the real disk)")
    args = parser.parse_args()
    _MEDIUM[0] = args.medium
    print(f"stores on {args.medium}: {bench_base(args.medium)}")
    options = {"consumer_heartbeat_interval": args.heartbeat,
               "consumer_session_timeout": args.timeout}
    if args.what in ("rebalance", "all"):
        bench_rebalance(args.rounds or 20, options)
    if args.what in ("join", "all"):
        bench_join(args.rounds or 20, options)
    if args.what in ("cpu", "all"):
        bench_cpu(args.messages, options)
    if args.what in ("ab", "all"):
        bench_ab(args.rounds or 7, args.puts, options)


if __name__ == "__main__":
    main()
