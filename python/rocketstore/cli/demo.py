"""The ``demo`` command: write, reopen and read back a store."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import click
from rich.progress import (
    Progress,
)
from rich.table import Table
from rich.text import Text

from rocketstore import _native
from rocketstore.cli._common import (
    _CQ_UNIT,
    _DEFAULT_CQ_UNITS,
    _DEFAULT_INDEX_NUM,
    _DEMO_BATCH_MAX,
    _DEMO_BATCH_SIZE,
    _DEMO_TAGS,
    _DEMO_TOPICS,
    _PROGRESS_STEP,
    EXIT_PROBLEM,
    _human_bytes,
    _json_flag,
    _make_config,
    _print_json,
    _progress,
    _rate,
    _report_dict,
    _segment_files,
    _segment_size,
    _start,
    _stderr,
    _stdout,
    main,
)
from rocketstore.message import Message, PutStatus
from rocketstore.store import MessageStore

# -- demo ---------------------------------------------------------------------------


def _demo_body(i: int) -> bytes:
    """The body of demo message ``i`` (deterministic, so it can be checked on read-back)."""
    text = f"rocketstore demo message {i:08d};"
    return (text * (1 + i % 7)).encode() + i.to_bytes(4, "big")


def _demo_route(i: int) -> tuple[str, int]:
    topic, queues = _DEMO_TOPICS[i % len(_DEMO_TOPICS)]
    return topic, (i // len(_DEMO_TOPICS)) % queues


def _demo_message(i: int) -> Message:
    topic, queue_id = _demo_route(i)
    return Message(topic, _demo_body(i), queue_id=queue_id, tags=_DEMO_TAGS[i % len(_DEMO_TAGS)],
                   keys=[f"demo-{i}"])


# Bytes every full CommitLog file keeps for its end marker.
_END_FILE_BLANK: Final = _native.END_FILE_MIN_BLANK_LENGTH


def _demo_record_size(i: int) -> int:
    """Bytes the CommitLog record of demo message ``i`` takes (the engine's length)."""
    return _native.record_size(_demo_message(i))


def _demo_min_segment_size(count: int) -> int:
    """The smallest segment that holds every demo record of a ``count``-message run."""
    # Sizes grow with i's body length (period 7), tags and topic (periods 4
    # and 3) and the key's digits: the largest is among the last 84 messages.
    last = range(max(count - 84, 0), count)
    return max(_demo_record_size(i) for i in last) + _END_FILE_BLANK


@dataclasses.dataclass(slots=True)
class _DemoWrite:
    offsets: list[int]  # physical offset of message i (-1: not written)
    record_bytes: int
    failures: dict[str, int]
    seconds: float


def _demo_write(store: MessageStore, n: int, progress: Progress) -> _DemoWrite:
    n_batch = min(max(n // 10, 1), _DEMO_BATCH_MAX)
    n_single = n - n_batch
    offsets = [-1] * n
    failures: dict[str, int] = {}
    record_bytes = 0
    task = progress.add_task("writing", total=n)
    t0 = time.perf_counter()
    for i in range(n_single):
        topic, queue_id = _demo_route(i)
        # Statuses are counted, not raised: the demo reports refusals.
        r = store.put(topic, _demo_body(i), queue_id, tags=_DEMO_TAGS[i % len(_DEMO_TAGS)],
                      keys=[f"demo-{i}"], check=False)
        if r.status is PutStatus.PUT_OK:
            offsets[i] = r.wrote_offset
            record_bytes += r.wrote_bytes
        else:
            failures[r.status.name] = failures.get(r.status.name, 0) + 1
        if i % _PROGRESS_STEP == 0:
            progress.update(task, completed=i)
    for start in range(n_single, n, _DEMO_BATCH_SIZE):
        indices = range(start, min(start + _DEMO_BATCH_SIZE, n))
        results = store.put_messages([_demo_message(i) for i in indices], check=False)
        for i, r in zip(indices, results, strict=True):
            if r.status is PutStatus.PUT_OK:
                offsets[i] = r.wrote_offset
                record_bytes += r.wrote_bytes
            else:
                failures[r.status.name] = failures.get(r.status.name, 0) + 1
        progress.update(task, completed=indices.stop)
    store.flush()
    seconds = time.perf_counter() - t0
    progress.update(task, completed=n)
    return _DemoWrite(offsets, record_bytes, failures, seconds)


def _demo_read_back(store: MessageStore, offsets: list[int], progress: Progress) -> tuple[
        int, list[str], float]:
    """Read every written message back; returns (intact, problems, seconds)."""
    intact = 0
    problems: list[str] = []
    task = progress.add_task("reading back", total=len(offsets))
    t0 = time.perf_counter()
    for i, offset in enumerate(offsets):
        if offset < 0:
            continue
        m = store.look_message_by_offset(offset)
        topic, queue_id = _demo_route(i)
        if m is None:
            problems.append(f"message {i}: nothing at offset {offset}")
        elif m.body != _demo_body(i) or m.topic != topic or m.queue_id != queue_id:
            problems.append(f"message {i}: record at offset {offset} differs from what was put")
        else:
            intact += 1
        if i % _PROGRESS_STEP == 0:
            progress.update(task, completed=i)
    seconds = time.perf_counter() - t0
    progress.update(task, completed=len(offsets))
    return intact, problems, seconds


#: The put measurement: ``store.put(topic, body)`` in a hot loop, 100-byte
#: bodies, best of ``_PUT_ROUNDS`` rounds of ``_PUT_PER_ROUND`` (as
#: ``rocketstore bench`` and ``benches/guard.py`` measure it).
_PUT_BODY: Final = b"x" * 100
_PUT_PER_ROUND: Final = 50_000
_PUT_ROUNDS: Final = 3


def _measure_put(progress: Progress) -> tuple[float, int]:
    """(msg/s, record bytes) of the best hot-loop round, in a store of its
    own in a temporary directory (removed)."""
    task = progress.add_task("measuring put", total=_PUT_ROUNDS * _PUT_PER_ROUND)
    best = 0.0
    record = 0
    with tempfile.TemporaryDirectory(prefix="rocketstore-demo-put-") as path:
        cfg = _make_config(Path(path), mapped_file_size_commit_log=64 << 20,
                           mapped_file_size_consume_queue=_CQ_UNIT * 300_000,
                           max_hash_slot_num=10_000, max_index_num=40_000)
        store = _start(MessageStore(cfg))
        try:
            put = store.put
            record = put("demo-put", _PUT_BODY).wrote_bytes  # the first file, untimed
            for r in range(_PUT_ROUNDS):
                t0 = time.perf_counter()
                for _ in range(_PUT_PER_ROUND):
                    put("demo-put", _PUT_BODY)
                best = max(best, _rate(_PUT_PER_ROUND, time.perf_counter() - t0))
                progress.update(task, completed=(r + 1) * _PUT_PER_ROUND)
        finally:
            store.shutdown()
    return best, record


@main.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Store directory to use and keep [default: a temporary one].")
@click.option("--messages", "-n", "count", type=click.IntRange(min=1), default=10_000,
              show_default=True, help="Number of messages to write.")
@click.option("--segment-size", type=click.IntRange(min=1), default=1 << 20, show_default=True,
              help="CommitLog segment (file) size in bytes; at least the largest demo record "
                   "plus 8 bytes: 403 for 10,000 messages (one more per extra digit of -n).")
@_json_flag
@click.pass_context
def demo(ctx: click.Context, directory: Path | None, count: int, segment_size: int,
         as_json: bool) -> None:
    """Write messages, reopen the store, read them all back and summarise.

    Messages go to three topics over several queues with tags and keys; the
    last tenth is written with put_messages batches. Exits 0 only if every
    message reads back intact. The put throughput shown is measured apart,
    as the README's numbers are: put(topic, body) in a hot loop, 100-byte
    bodies, best of 3 rounds of 50,000, in a temporary store of its own.
    """
    need = _demo_min_segment_size(count)
    if segment_size < need:
        raise click.BadParameter(
            f"{segment_size} is too small: a segment must hold the largest demo record of "
            f"{need - _END_FILE_BLANK} bytes plus the {_END_FILE_BLANK}-byte end-of-file marker, "
            f"so at least {need} bytes for {count:,} messages", param_hint="--segment-size")
    temporary = directory is None
    root = Path(tempfile.mkdtemp(prefix="rocketstore-demo-")) if directory is None else directory
    try:
        summary = _run_demo(root, count, segment_size)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    summary["store_path"] = None if temporary else str(root)
    ok = summary["intact"] == count
    summary["ok"] = ok
    if as_json:
        _print_json(summary)
    else:
        _print_demo_summary(summary)
    if not ok:
        ctx.exit(EXIT_PROBLEM)


def _run_demo(root: Path, count: int, segment_size: int) -> dict[str, Any]:
    # An index sized for the demo, not the default ~420 MB file.
    index_num = min(count + 64, _DEFAULT_INDEX_NUM)
    cq_units = min(max(count, 1024), _DEFAULT_CQ_UNITS)
    cfg = _make_config(root, mapped_file_size_commit_log=segment_size,
                       mapped_file_size_consume_queue=_CQ_UNIT * cq_units,
                       max_index_num=index_num, max_hash_slot_num=max(index_num // 4, 1))
    err = _stderr()
    with _progress(err, byte_counts=False) as progress:
        store = _start(MessageStore(cfg))
        try:
            written = _demo_write(store, count, progress)
        finally:
            store.shutdown()
        t0 = time.perf_counter()
        store = _start(MessageStore(cfg))
        recovery_seconds = time.perf_counter() - t0
        try:
            # Files holding data (the next file, made ahead, holds none yet).
            end = store.max_phy_offset
            segments = sum(1 for n in _segment_files(store) if int(n) < end)
            actual_segment_size = _segment_size(store)
            report = store.recovery_report
            intact, problems, read_seconds = _demo_read_back(store, written.offsets, progress)
        finally:
            store.shutdown()
        put_rate, put_record = _measure_put(progress)
    n_written = sum(1 for off in written.offsets if off >= 0)
    return {
        "messages": count,
        "written": n_written,
        "put_failures": written.failures,
        "record_bytes": written.record_bytes,
        "segments": segments,
        "segment_size": actual_segment_size,
        # The demo's own write (tags, keys, three topics, progress updates).
        "put_seconds": written.seconds,
        "write_msgs_per_s": _rate(n_written, written.seconds),
        # put() in a hot loop, 100-byte bodies (as the README measures it).
        "put_msgs_per_s": put_rate,
        "put_bytes_per_s": put_rate * put_record,
        "read_seconds": read_seconds,
        "read_msgs_per_s": _rate(n_written, read_seconds),
        "intact": intact,
        "problems": problems[:20],
        "problem_count": len(problems),
        "recovery_seconds": recovery_seconds,
        "recovery": _report_dict(report),
    }


def _print_demo_summary(s: dict[str, Any]) -> None:
    out = _stdout()
    table = Table(title="rocketstore demo", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("store", s["store_path"] or "(temporary, removed)")
    table.add_row("messages", f"{s['written']:,} of {s['messages']:,} written")
    if s["put_failures"]:
        failed = ", ".join(f"{k}: {v}" for k, v in sorted(s["put_failures"].items()))
        table.add_row("put failures", Text(failed, style="red"))
    table.add_row("bytes", f"{s['record_bytes']:,} ({_human_bytes(s['record_bytes'])})")
    table.add_row("segments", f"{s['segments']} of {_human_bytes(s['segment_size'])}")
    table.add_row("write", f"{s['written']:,} messages with tags and keys in "
                           f"{s['put_seconds']:.2f} s")
    table.add_row("put throughput", f"{s['put_msgs_per_s']:,.0f} msg/s "
                                    f"({_human_bytes(s['put_bytes_per_s'])}/s; put() in a "
                                    "hot loop, 100 B bodies)")
    table.add_row("read-back throughput", f"{s['read_msgs_per_s']:,.0f} msg/s")
    rec = s["recovery"]
    if rec is not None:
        stop = f", stopped: {rec['stop_reason']}" if rec["stop_reason"] else ""
        table.add_row("recovery", f"{rec['records_scanned']:,} records scanned, end offset "
                                  f"{rec['end_offset']:,}, {rec['bytes_truncated']:,} bytes "
                                  f"truncated, {s['recovery_seconds'] * 1000:.1f} ms{stop}")
    style = "green" if s["ok"] else "red"
    table.add_row("read back intact", Text(f"{s['intact']:,} / {s['messages']:,}", style=style))
    out.print(table)
    for problem in s["problems"]:
        out.print(Text(problem, style="red"), soft_wrap=True)
    if s["problem_count"] > len(s["problems"]):
        out.print(Text(f"... and {s['problem_count'] - len(s['problems'])} more", style="red"))
