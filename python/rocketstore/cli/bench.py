"""The ``bench`` command: a quick self-benchmark."""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

import click
from rich.progress import (
    Progress,
)
from rich.table import Table
from rich.text import Text

from rocketstore.cli._common import (
    _CLI_GROUP,
    _CQ_UNIT,
    _DEFAULT_CQ_UNITS,
    _DEFAULT_INDEX_NUM,
    _PROGRESS_STEP,
    _PULL_BATCH,
    EXIT_PROBLEM,
    CliError,
    _human_bytes,
    _json_flag,
    _make_config,
    _print_json,
    _progress,
    _rate,
    _start,
    _stderr,
    _stdout,
    main,
)
from rocketstore.config.store_config import FlushDiskType
from rocketstore.message import Message, PutStatus
from rocketstore.store import MessageStore

# -- bench --------------------------------------------------------------------------


_BENCH_TOPIC: Final = "bench"
_BENCH_QUEUES: Final = 4
_BENCH_BATCH: Final = 32


@dataclasses.dataclass(slots=True)
class _PutTally:
    written: int = 0
    bytes: int = 0
    failures: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, status: PutStatus, size: int) -> None:
        if status is PutStatus.PUT_OK:
            self.written += 1
            self.bytes += size
        else:
            self.failures[status.name] = self.failures.get(status.name, 0) + 1

    def merge(self, other: _PutTally) -> None:
        self.written += other.written
        self.bytes += other.bytes
        for name, n in other.failures.items():
            self.failures[name] = self.failures.get(name, 0) + n


def _chunks(n: int, parts: int) -> list[range]:
    """``range(n)`` cut into ``parts`` contiguous pieces (none empty unless n < parts)."""
    step, extra = divmod(n, parts)
    out: list[range] = []
    start = 0
    for i in range(parts):
        stop = start + step + (1 if i < extra else 0)
        if stop > start:
            out.append(range(start, stop))
        start = stop
    return out


_T = TypeVar("_T")
_R = TypeVar("_R")


def _run_threads(threads: int, work: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """Run ``work(item)`` for every item on ``threads`` threads; re-raises the first error."""
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rocketstore-bench") as ex:
        futures = [ex.submit(work, item) for item in items]
        return [f.result() for f in futures]


def _percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty sequence."""
    rank = max(1, min(len(sorted_values), int(-(-pct * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def _phase(count: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {"messages": count, "seconds": seconds, "msgs_per_s": _rate(count, seconds), **extra}


class _Bench:
    """The benchmark run over one open store."""

    def __init__(self, store: MessageStore, n: int, body_size: int, threads: int,
                 progress: Progress) -> None:
        self.store = store
        self.n = n
        self.body = (bytes(range(256)) * (body_size // 256 + 1))[:body_size]
        self.threads = threads
        self.progress = progress
        self.lock = threading.Lock()

    def _advance(self, task: Any, k: int) -> None:
        with self.lock:
            self.progress.advance(task, k)

    def put_single(self) -> tuple[_PutTally, float]:
        task = self.progress.add_task("put", total=self.n)
        put = self.store.put
        body = self.body

        def work(chunk: range) -> _PutTally:
            tally = _PutTally()
            done = 0
            for i in chunk:
                # Statuses are counted, not raised: the report shows refusals.
                r = put(_BENCH_TOPIC, body, i % _BENCH_QUEUES, f"t{i % 4}", f"bench-put-{i}",
                        check=False)
                tally.add(r.status, r.wrote_bytes)
                done += 1
                if done == _PROGRESS_STEP:
                    self._advance(task, done)
                    done = 0
            self._advance(task, done)
            return tally

        return self._timed_puts(work)

    def put_batches(self) -> tuple[_PutTally, float]:
        task = self.progress.add_task("put_messages", total=self.n)
        body = self.body

        def work(chunk: range) -> _PutTally:
            tally = _PutTally()
            for start in range(chunk.start, chunk.stop, _BENCH_BATCH):
                indices = range(start, min(start + _BENCH_BATCH, chunk.stop))
                batch = [Message(_BENCH_TOPIC, body, queue_id=i % _BENCH_QUEUES, tags=f"t{i % 4}",
                                 keys=f"bench-batch-{i}") for i in indices]
                for r in self.store.put_messages(batch, check=False):
                    tally.add(r.status, r.wrote_bytes)
                self._advance(task, len(indices))
            return tally

        return self._timed_puts(work)

    def _timed_puts(self, work: Callable[[range], _PutTally]) -> tuple[_PutTally, float]:
        t0 = time.perf_counter()
        tallies = _run_threads(self.threads, work, _chunks(self.n, self.threads))
        seconds = time.perf_counter() - t0
        total = _PutTally()
        for t in tallies:
            total.merge(t)
        return total, seconds

    def get_all(self, expected: int) -> tuple[int, float]:
        task = self.progress.add_task("get_message", total=expected)
        store = self.store

        def work(queue_id: int) -> int:
            offset = store.get_min_offset_in_queue(_BENCH_TOPIC, queue_id)
            end = store.get_max_offset_in_queue(_BENCH_TOPIC, queue_id)
            read = 0
            while offset < end:
                r = store.get_message(_CLI_GROUP, _BENCH_TOPIC, queue_id, offset, _BENCH_BATCH)
                if not r.messages or r.next_begin_offset <= offset:
                    break
                read += len(r.messages)
                offset = r.next_begin_offset
                self._advance(task, len(r.messages))
            return read

        t0 = time.perf_counter()
        counts = _run_threads(self.threads, work, range(_BENCH_QUEUES))
        return sum(counts), time.perf_counter() - t0

    def queries(self, keys: list[str]) -> tuple[int, list[float], float]:
        task = self.progress.add_task("query_message", total=len(keys))
        latencies: list[float] = []
        found = 0
        t0 = time.perf_counter()
        for key in keys:
            q0 = time.perf_counter()
            hits = self.store.query_message(_BENCH_TOPIC, key, 1)
            latencies.append(time.perf_counter() - q0)
            found += any(key in m.keys for m in hits)
            self.progress.advance(task)
        return found, latencies, time.perf_counter() - t0


def _bench_dir(path: Path | None) -> tuple[Path, bool]:
    """The directory to benchmark in and whether it is a temporary one."""
    if path is None:
        return Path(tempfile.mkdtemp(prefix="rocketstore-bench-")), True
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise CliError(f"{path} is not an empty directory; bench needs a new store")
    return path, False


@main.command()
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--messages", "-n", "count", type=click.IntRange(min=1), default=100_000,
              show_default=True, help="Messages written by each of put and put_messages.")
@click.option("--body-size", type=click.IntRange(min=0, max=4 * 1024 * 1024), default=256,
              show_default=True, help="Body size in bytes.")
@click.option("--threads", "-t", type=click.IntRange(min=1, max=256), default=1,
              show_default=True, help="Threads writing and reading concurrently.")
@click.option("--flush", "flush", type=click.Choice(["async", "sync"]), default="async",
              show_default=True, help="Flush mode: ASYNC_FLUSH, or SYNC_FLUSH (every put "
                                      "waits for its fsync).")
@click.option("--segment-size", type=click.IntRange(min=4096), default=64 << 20,
              show_default=True, help="CommitLog segment (file) size in bytes.")
@click.option("--queries", type=click.IntRange(min=0), default=100, show_default=True,
              help="Key queries timed.")
@click.option("--peers", is_flag=True,
              help="Compare put, get and batch with persist-queue, litequeue, diskcache.Deque "
                   "and raw sqlite3 on the real disk instead (20,000 messages of 100 B unless "
                   "given; PATH: where the temporary directory goes, default the current one).")
@_json_flag
@click.pass_context
def bench(ctx: click.Context, path: Path | None, count: int, body_size: int, threads: int,
          flush: str, segment_size: int, queries: int, peers: bool, as_json: bool) -> None:
    """A quick self-benchmark of this machine in a temporary store (or new, kept PATH).

    Writes N messages with put and N more with put_messages batches of 32 to
    4 queues of one topic, reads them all back with get_message batches of
    32, then times key queries. Prints msg/s for each and query latency
    percentiles; exits 1 if a put failed or a message did not read back.
    The real benchmarks live in benches/.
    """
    if peers:
        from rocketstore import bench_peers

        bench_peers.cli(ctx, path, count, body_size, as_json, _stdout())
        return
    root, temporary = _bench_dir(path)
    try:
        summary = _run_bench(root, count, body_size, threads, flush, segment_size, queries)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    summary["store_path"] = None if temporary else str(root)
    if as_json:
        _print_json(summary)
    else:
        _print_bench(summary)
    if not summary["ok"]:
        ctx.exit(EXIT_PROBLEM)


def _run_bench(root: Path, n: int, body_size: int, threads: int, flush: str,
               segment_size: int, n_queries: int) -> dict[str, Any]:
    index_num = min(2 * n + 64, _DEFAULT_INDEX_NUM)
    cfg = _make_config(
        root,
        mapped_file_size_commit_log=segment_size,
        mapped_file_size_consume_queue=_CQ_UNIT * min(max(n, 1024), _DEFAULT_CQ_UNITS),
        flush_disk_type=FlushDiskType.SYNC_FLUSH if flush == "sync" else FlushDiskType.ASYNC_FLUSH,
        max_index_num=index_num,
        max_hash_slot_num=max(index_num // 4, 1),
    )
    with _progress(_stderr(), byte_counts=False) as progress:
        store = _start(MessageStore(cfg))
        try:
            run = _Bench(store, n, body_size, threads, progress)
            single, single_s = run.put_single()
            batched, batched_s = run.put_batches()
            t0 = time.perf_counter()
            store.flush()  # dispatch everything to the queues and index, and fsync
            dispatch_s = time.perf_counter() - t0
            written = single.written + batched.written
            read, read_s = run.get_all(written)
            keys = [f"bench-put-{i}" for i in range(n)] + [f"bench-batch-{i}" for i in range(n)]
            sample = random.Random(42).sample(keys, min(n_queries, len(keys)))
            found, latencies, query_s = run.queries(sample)
        finally:
            store.shutdown()
    failures = dict(single.failures)
    for name, k in batched.failures.items():
        failures[name] = failures.get(name, 0) + k
    latencies.sort()
    latency_ms = ({name: _percentile(latencies, pct) * 1000
                   for name, pct in (("p50", 50), ("p90", 90), ("p99", 99))}
                  | {"max": latencies[-1] * 1000} if latencies else {})
    ok = not failures and read == written and found == len(sample)
    return {
        "messages": n,
        "body_size": body_size,
        "threads": threads,
        "flush": flush,
        "segment_size": segment_size,
        "put": _phase(single.written, single_s, bytes_per_s=_rate(single.bytes, single_s),
                      failures=single.failures),
        "put_messages": _phase(batched.written, batched_s, batch_size=_BENCH_BATCH,
                               bytes_per_s=_rate(batched.bytes, batched_s),
                               failures=batched.failures),
        "dispatch_flush_seconds": dispatch_s,
        "get_message": _phase(read, read_s, batch_size=_PULL_BATCH, expected=written),
        "query_message": {"queries": len(sample), "found": found, "seconds": query_s,
                          "queries_per_s": _rate(len(sample), query_s),
                          "latency_ms": latency_ms},
        "put_failures": failures,
        "ok": ok,
    }


def _print_bench(s: dict[str, Any]) -> None:
    out = _stdout()
    table = Table(title="rocketstore bench", title_justify="left",
                  caption=f"{s['messages']:,} messages per put phase, {s['body_size']} B bodies, "
                          f"{s['threads']} thread(s), {s['flush']} flush",
                  caption_justify="left")
    table.add_column("phase", style="bold", no_wrap=True)
    table.add_column("messages", justify="right", no_wrap=True)
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("throughput", justify="right", no_wrap=True)

    def phase_row(label: str, key: str) -> None:
        p = s[key]
        rate = f"{p['msgs_per_s']:,.0f} msg/s"
        if "bytes_per_s" in p:
            rate += f" ({_human_bytes(p['bytes_per_s'])}/s)"
        table.add_row(label, f"{p['messages']:,}", f"{p['seconds']:.3f}", rate)

    phase_row("put", "put")
    phase_row("put_messages (x32)", "put_messages")
    table.add_row("dispatch + flush", "", f"{s['dispatch_flush_seconds']:.3f}", "")
    phase_row("get_message (x32)", "get_message")
    q = s["query_message"]
    table.add_row("query_message", f"{q['queries']:,}", f"{q['seconds']:.3f}",
                  f"{q['queries_per_s']:,.0f} queries/s")
    out.print(table)
    if q["latency_ms"]:
        lat = q["latency_ms"]
        out.print(f"query latency: p50 {lat['p50']:.3f} ms, p90 {lat['p90']:.3f} ms, "
                  f"p99 {lat['p99']:.3f} ms, max {lat['max']:.3f} ms", soft_wrap=True)
    if s["put_failures"]:
        failed = ", ".join(f"{k}: {v}" for k, v in sorted(s["put_failures"].items()))
        out.print(Text(f"put failures: {failed}", style="red"), soft_wrap=True)
    if s["get_message"]["messages"] != s["get_message"]["expected"]:
        out.print(Text(f"read back {s['get_message']['messages']:,} of "
                       f"{s['get_message']['expected']:,} messages", style="red"))
    if q["found"] != q["queries"]:
        out.print(Text(f"{q['queries'] - q['found']} key queries found nothing", style="red"))
    if s["store_path"]:
        out.print(f"store kept at {s['store_path']}", soft_wrap=True, markup=False)
