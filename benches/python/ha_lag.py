"""A slave's lag behind its master under a steady put rate (100 k msg/s by default).

Run: ``python benches/python/ha_lag.py [--rate 100000] [--seconds 10] [--rounds 3]
[--medium both]`` (a quick check: ``--seconds 2 --rounds 2 --medium tmpfs``).

A master (``ASYNC_MASTER``, ``ASYNC_FLUSH``) and a slave that follows it
(docs/format.md §21), on the same medium. A producer thread puts 100-byte
messages at ``--rate``: a ``put_batch`` of ``rate / 1000`` messages every
millisecond, on a fixed schedule (a late tick is not made up for by a
burst). A sampler thread reads, every millisecond, the master's CommitLog
end, the slave's and the slave's dispatch backlog. Per round:

- time lag: for each batch, from its return on the master until the first
  sample in which the slave's end reached the batch's end (p50, p99, max;
  the 1 ms sampling is part of it);
- byte lag: master end minus slave end at each sample (p50, p99, max);
- the slave's dispatch backlog (bytes its consume queues are behind its
  own CommitLog end) at each sample (p99, max);
- the rate reached.

Rounds follow each other on the same stores (0.5 s of warm-up each, not
counted); prints each round and the medians over rounds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import QUEUES
from ha_common import geometry, master_config, median, pct, slave_config, wait_for
from media import bench_base, chosen, load_average, media_arg

from rocketstore import BrokerRole, FlushDiskType, MessageStore

BODY = b"l" * 100
TICK = 0.001
WARMUP = 0.5


def produce(m: MessageStore, rate: int, seconds: float,
            marks: list[tuple[float, int]]) -> int:
    """Puts ``rate`` msg/s for ``seconds`` (after the warm-up); returns the
    messages put in the measured part and records ``(time, end)`` per batch."""
    bodies = [BODY] * max(1, round(rate * TICK))
    t_start = time.perf_counter()
    t_measure = t_start + WARMUP
    t_end = t_measure + seconds
    tick = 0
    n = 0
    while True:
        due = t_start + tick * TICK
        now = time.perf_counter()
        if now >= t_end:
            return n
        if due > now:
            time.sleep(due - now)
        elif now - due > 0.05:  # far behind: skip the missed ticks, do not burst
            tick = int((now - t_start) / TICK)
        r = m.put_batch("lag", bodies, tick % QUEUES)
        t = time.perf_counter()
        if t >= t_measure:
            marks.append((t, r.wrote_offset + r.wrote_bytes))
            n += len(bodies)
        tick += 1


def sample(m: MessageStore, s: MessageStore, stop: threading.Event,
           out: list[tuple[float, int, int, int]]) -> None:
    """Every millisecond: (time, master end, slave end, slave's dispatch backlog)."""
    while not stop.is_set():
        out.append((time.perf_counter(), m.max_phy_offset, s.max_phy_offset,
                    s.dispatch_behind_bytes()))
        time.sleep(TICK)


def time_lags(marks: list[tuple[float, int]],
              samples: list[tuple[float, int, int, int]]) -> list[float]:
    """Per batch: seconds from its put until a sample shows the slave past its end."""
    lags: list[float] = []
    i = 0
    for t, end in marks:
        while i < len(samples) and (samples[i][0] < t or samples[i][2] < end):
            i += 1
        if i == len(samples):
            break
        lags.append(samples[i][0] - t)
    return lags


def one_round(m: MessageStore, s: MessageStore, rate: int, seconds: float) -> dict[str, float]:
    marks: list[tuple[float, int]] = []
    samples: list[tuple[float, int, int, int]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(m, s, stop, samples))
    sampler.start()
    t0 = time.perf_counter()
    n = produce(m, rate, seconds, marks)
    took = time.perf_counter() - t0 - WARMUP
    end = m.max_phy_offset
    wait_for(lambda: s.max_phy_offset >= end, 60, "the slave's end")
    time.sleep(0.01)
    stop.set()
    sampler.join()
    measured = [x for x in samples if x[0] >= marks[0][0]] if marks else []
    lags = sorted(time_lags(marks, measured))
    behind = sorted(x[1] - x[2] for x in measured)
    backlog = sorted(x[3] for x in measured)
    return {
        "rate": n / took,
        "lag_p50_ms": pct(lags, 50) * 1e3, "lag_p99_ms": pct(lags, 99) * 1e3,
        "lag_max_ms": pct(lags, 100) * 1e3,
        "bytes_p50": pct(behind, 50), "bytes_p99": pct(behind, 99), "bytes_max": pct(behind, 100),
        "dispatch_p99": pct(backlog, 99), "dispatch_max": pct(backlog, 100),
    }


def show(row: dict[str, float]) -> str:
    return (f"{row['rate']:,.0f} msg/s; slave behind by time p50 {row['lag_p50_ms']:.2f} ms "
            f"p99 {row['lag_p99_ms']:.2f} ms max {row['lag_max_ms']:.2f} ms, by bytes "
            f"p50 {row['bytes_p50']:,.0f} p99 {row['bytes_p99']:,.0f} "
            f"max {row['bytes_max']:,.0f}; its dispatch backlog p99 "
            f"{row['dispatch_p99']:,.0f} max {row['dispatch_max']:,.0f} bytes")


def run(medium: str, rate: int, seconds: float, rounds: int) -> None:
    geo = geometry()
    with tempfile.TemporaryDirectory(dir=bench_base(medium)) as md, \
            tempfile.TemporaryDirectory(dir=bench_base(medium)) as sd:
        cfg = master_config(md, geo, role=BrokerRole.ASYNC_MASTER,
                            flush=FlushDiskType.ASYNC_FLUSH)
        with MessageStore(cfg) as m:
            assert m.ha_port
            with MessageStore(slave_config(sd, geo, m.ha_port)) as s:
                wait_for(lambda: bool(m.ha_status()["slaves"]), 30, "the slave")
                rows = []
                for r in range(rounds):
                    rows.append(one_round(m, s, rate, seconds))
                    print(f"  {medium} round {r + 1}: {show(rows[-1])}; "
                          f"load {load_average()}")
    med = {k: median([row[k] for row in rows]) for k in rows[0]}
    print(f"  {medium} median of {rounds} rounds: {show(med)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=100_000, help="messages per second")
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per round")
    p.add_argument("--rounds", type=int, default=3)
    media_arg(p)
    args = p.parse_args()
    print(f"replication lag at {args.rate:,} msg/s of 100 B, {args.rounds} rounds of "
          f"{args.seconds:g} s; load average {load_average()}")
    for medium in chosen(args.medium):
        run(medium, args.rate, args.seconds, args.rounds)


if __name__ == "__main__":
    main()
