"""Catch-up of an existing CommitLog to an empty slave, beside a loopback socket copy.

Run: ``python benches/python/ha_catchup.py [--size-mib 1024] [--rounds 3] [--medium both]``
(a quick check: ``--size-mib 64 --segment-mib 16 --rounds 2 --medium tmpfs``).

A master (``ASYNC_MASTER``, ``ASYNC_FLUSH``, ``ha_new_slave_from_first_file``,
docs/format.md §21.2) is filled with ``--size-mib`` of 100-byte messages
(4 queues, CommitLog files of ``--segment-mib``). Then, in interleaved
rounds:

- replication: an empty slave is opened on the same medium and follows the
  master from its first file; timed from the open until the slave's
  CommitLog end equals the master's (bytes/s), and, reported apart, until
  its dispatch (consume queues, index) reached that end;
- socket copy: the same CommitLog bytes, file by file, sent over a loopback
  TCP connection with ``socket.sendfile`` and written by the receiving
  thread into one file on the same medium (1 MiB reads), timed until the
  last byte is written.

Prints each round, the medians and the ratio replication / copy of the
medians (target >= 0.7).
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import QUEUES
from ha_common import geometry, master_config, median, mib, slave_config, wait_for
from media import bench_base, chosen, load_average, media_arg

from rocketstore import BrokerRole, FlushDiskType, MessageStore

BODY = b"r" * 100
BATCH = 10_000
TARGET = 0.7


def fill(store: MessageStore, size: int) -> int:
    """Puts batches of 100-byte messages until the CommitLog holds ``size`` bytes."""
    bodies = [BODY] * BATCH
    q = 0
    while store.max_phy_offset < size:
        store.put_batch("ha", bodies, q % QUEUES)
        q += 1
    return q * BATCH


def socket_copy(commitlog: Path, start: int, end: int, seg: int, out: Path) -> float:
    """Copies CommitLog bytes ``[start, end)`` over loopback into ``out``; seconds."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    total = end - start
    got = [0]

    def receive() -> None:
        conn, _ = server.accept()
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        with conn, out.open("wb", buffering=0) as f:
            while got[0] < total:
                n = conn.recv_into(buf)
                if not n:
                    break
                f.write(view[:n])
                got[0] += n

    t = threading.Thread(target=receive)
    t0 = time.perf_counter()
    t.start()
    with socket.create_connection(("127.0.0.1", port)) as s:
        off = start
        while off < end:
            base = off - off % seg
            with (commitlog / f"{base:020d}").open("rb") as f:
                n = min(end, base + seg) - off
                s.sendfile(f, off - base, n)
            off += n
        t.join()
    took = time.perf_counter() - t0
    server.close()
    assert got[0] == total, f"copied {got[0]} of {total} bytes"
    return took


def replicate(medium: str, geo: dict[str, int], port: int, start: int,
              end: int) -> tuple[float, float]:
    """Opens an empty slave; seconds until its end equals ``end`` and until
    its dispatch reached it."""
    with tempfile.TemporaryDirectory(dir=bench_base(medium)) as d:
        t0 = time.perf_counter()
        with MessageStore(slave_config(d, geo, port)) as s:
            t_end = wait_for(lambda: s.max_phy_offset >= end, 600, "the slave's end")
            t_disp = wait_for(lambda: s.dispatch_behind_bytes() == 0, 600, "dispatch")
            assert s.max_phy_offset == end and s.min_phy_offset == start, (
                s.min_phy_offset, s.max_phy_offset, start, end)
    return t_end - t0, t_disp - t0


def run(medium: str, size: int, seg: int, rounds: int) -> None:
    geo = geometry(seg)
    with tempfile.TemporaryDirectory(dir=bench_base(medium)) as d:
        cfg = master_config(d, geo, role=BrokerRole.ASYNC_MASTER,
                            flush=FlushDiskType.ASYNC_FLUSH, ha_new_slave_from_first_file=True)
        with MessageStore(cfg) as m:
            msgs = fill(m, size)
            m.flush()
            start, end = m.min_phy_offset, m.max_phy_offset
            n = end - start
            port = m.ha_port
            assert port
            print(f"  {medium}: {mib(n)} in {msgs:,} messages, {(n + seg - 1) // seg} files "
                  f"of {mib(seg)}; load {load_average()}")
            repl: list[float] = []
            disp: list[float] = []
            copy: list[float] = []
            for r in range(rounds):
                order = ("copy", "repl") if r % 2 == 0 else ("repl", "copy")
                for what in order:
                    if what == "copy":
                        with tempfile.TemporaryDirectory(dir=bench_base(medium)) as cd:
                            copy.append(socket_copy(Path(d) / "commitlog", start, end, seg,
                                                    Path(cd) / "copy"))
                    else:
                        t_end, t_disp = replicate(medium, geo, port, start, end)
                        repl.append(t_end)
                        disp.append(t_disp)
                print(f"    round {r + 1}: replication {mib(n / repl[-1])}/s "
                      f"(dispatched at {disp[-1]:.2f} s, {msgs / disp[-1]:,.0f} msg/s), "
                      f"socket copy {mib(n / copy[-1])}/s; load {load_average()}")
    rate, copy_rate = n / median(repl), n / median(copy)
    print(f"    median: replication {mib(rate)}/s until the ends match "
          f"({median(repl):.2f} s), socket copy {mib(copy_rate)}/s; "
          f"ratio {rate / copy_rate:.2f} (target >= {TARGET}: "
          f"{'met' if rate / copy_rate >= TARGET else 'NOT met'})")
    print(f"    slave's dispatch: done {median(disp):.2f} s after the open "
          f"({median(disp) - median(repl):+.2f} s after the ends matched), "
          f"{msgs / median(disp):,.0f} msg/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=1024, help="the master's CommitLog size")
    p.add_argument("--segment-mib", type=int, default=256, help="CommitLog file size")
    p.add_argument("--rounds", type=int, default=3)
    media_arg(p)
    args = p.parse_args()
    print(f"replication catch-up, {args.size_mib} MiB, {args.rounds} interleaved rounds; "
          f"load average {load_average()}")
    for medium in chosen(args.medium):
        run(medium, args.size_mib << 20, args.segment_mib << 20, args.rounds)


if __name__ == "__main__":
    main()
