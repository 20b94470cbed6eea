"""The ``rocketstore`` command line.

Subcommands:

``demo``
    Write messages into a store (a temporary one by default), reopen it, read
    every message back by physical offset and print a summary.
``info PATH``
    Segment size, CommitLog files, offsets, recovery report and the next
    offset of every queue of a store.
``verify PATH``
    Walk every CommitLog record with CRC checks; exit 1 if anything is wrong.
``get PATH``
    Print one message, found by physical offset (``--offset``), by message id
    (``--id``), or by queue offset (``--topic T --queue Q --offset N``).

Every command that inspects a store opens it read-only, so it never writes a
byte and may run while a writer has the store open. ``--json`` prints
machine-readable output on stdout; progress bars go to stderr and only appear
on a terminal.

Exit codes: 0 success; 1 the command ran but found a problem (a damaged
record, a message not found, a demo message that did not read back); 2 the
command could not run (bad arguments, no store, an error from the store or
the operating system). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from rocketstore import __version__
from rocketstore.config import StoreConfig
from rocketstore.errors import StoreError
from rocketstore.message import Message, MessageExt, PutStatus
from rocketstore.store import MessageStore, RecoveryReport

__all__ = ["main"]

#: The command ran and found a problem.
EXIT_PROBLEM: Final = 1
#: The command could not run.
EXIT_ERROR: Final = 2

_BLANK_MAGIC_CODE: Final = 0xCBD43194
_MESSAGE_MAGIC_CODES: Final = frozenset({0xDAA320A7, 0xDAA320AB})
_BODY_CRC_MASK: Final = 0x7FFFFFFF
_SEGMENT_NAME_DIGITS: Final = 20
# Progress is advanced in steps this size, so the bar never dominates a fast loop.
_PROGRESS_STEP: Final = 256

_DEMO_TOPICS: Final = (("demo-orders", 4), ("demo-payments", 2), ("demo-audit", 1))
_DEMO_TAGS: Final = ("created", "paid", "shipped", "refunded")
_DEMO_BATCH_SIZE: Final = 64
_DEMO_BATCH_MAX: Final = 1000


# -- errors and plumbing ----------------------------------------------------------


class CliError(click.ClickException):
    """A one-line error that ends the command with exit code 2."""

    exit_code = EXIT_ERROR


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return _one_line(f"{exc.strerror}{where}")
    if isinstance(exc, ValueError) and not isinstance(exc, StoreError) and str(exc):
        return _one_line(str(exc))
    name = type(exc).__name__
    return _one_line(f"{name}: {exc}") if str(exc) else name


class _Group(click.Group):
    """Turns errors from the store and the OS into :class:`CliError`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (StoreError, OSError) as exc:
            raise CliError(_describe(exc)) from None


def _stdout() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _progress(console: Console, *, byte_counts: bool) -> Progress:
    """A progress bar on ``console``; silent unless it is a terminal."""
    columns: list[Any] = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn()]
    if byte_counts:
        columns += [DownloadColumn(), TransferSpeedColumn()]
    else:
        columns.append(MofNCompleteColumn())
    columns.append(TimeRemainingColumn())
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def _print_json(obj: object) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def _make_config(path: Path, **options: Any) -> StoreConfig:
    try:
        return StoreConfig(store_path=str(path), **options)
    except ValueError as exc:
        raise CliError(_describe(exc)) from None


def _start(store: MessageStore) -> MessageStore:
    try:
        return store.start()
    except (StoreError, OSError):
        raise
    except ValueError as exc:  # e.g. "no store at ...": the path is not a store
        raise CliError(_describe(exc)) from None


@contextmanager
def _open_read_only(path: Path, *, check_crc: bool = True) -> Iterator[MessageStore]:
    """Open the store at ``path`` read-only; shut it down on exit."""
    cfg = _make_config(path, check_crc_on_recover=check_crc)
    store = _start(MessageStore(cfg, read_only=True))
    try:
        yield store
    finally:
        store.shutdown()


def _segment_files(store: MessageStore) -> list[str]:
    """Names of the CommitLog segment files, oldest first."""
    directory = store.config.commit_log_dir
    if not directory.is_dir():
        return []
    return sorted(
        name
        for name in os.listdir(directory)
        if len(name) == _SEGMENT_NAME_DIGITS and name.isdigit()
    )


def _segment_size(store: MessageStore) -> int:
    size = store.config.mapped_file_size_commit_log
    if size is None:  # resolved by start(); None only for a store never started
        raise CliError("the store did not report its CommitLog segment size")
    return size


def _report_dict(report: RecoveryReport | None) -> dict[str, Any] | None:
    return None if report is None else dataclasses.asdict(report)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _install_log_handler(ctx: click.Context, verbose: int) -> None:
    """Send the library's log records to stderr for the duration of the command.

    Without ``-v`` only errors are shown: the commands report what recovery
    found themselves. The handler is removed when the command ends.
    """
    logger = logging.getLogger("rocketstore")
    handler = RichHandler(console=_stderr(), show_path=False, show_time=False)
    handler.setLevel(logging.ERROR if verbose == 0 else logging.INFO if verbose == 1
                     else logging.DEBUG)
    old_level = logger.level
    if verbose:
        logger.setLevel(handler.level)
    logger.addHandler(handler)

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(old_level)

    ctx.call_on_close(restore)


# -- the group ----------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rocketstore")
@click.option("-v", "--verbose", count=True, help="Show the store's log (-v info, -vv debug).")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Inspect, verify and try out rocketstore (RocketMQ-compatible) message stores."""
    _install_log_handler(ctx, verbose)


_store_path = click.argument(
    "path", type=click.Path(exists=True, file_okay=False, path_type=Path)
)
_json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


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
        r = store.put(topic, _demo_body(i), queue_id, tags=_DEMO_TAGS[i % len(_DEMO_TAGS)],
                      keys=[f"demo-{i}"])
        if r.status is PutStatus.PUT_OK:
            offsets[i] = r.wrote_offset
            record_bytes += r.wrote_bytes
        else:
            failures[r.status.name] = failures.get(r.status.name, 0) + 1
        if i % _PROGRESS_STEP == 0:
            progress.update(task, completed=i)
    for start in range(n_single, n, _DEMO_BATCH_SIZE):
        indices = range(start, min(start + _DEMO_BATCH_SIZE, n))
        results = store.put_messages([_demo_message(i) for i in indices])
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


@main.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Store directory to use and keep [default: a temporary one].")
@click.option("--messages", "-n", "count", type=click.IntRange(min=1), default=10_000,
              show_default=True, help="Number of messages to write.")
@click.option("--segment-size", type=click.IntRange(min=1), default=1 << 20, show_default=True,
              help="CommitLog segment (file) size in bytes.")
@_json_flag
@click.pass_context
def demo(ctx: click.Context, directory: Path | None, count: int, segment_size: int,
         as_json: bool) -> None:
    """Write messages, reopen the store, read them all back and summarise.

    Messages go to three topics over several queues with tags and keys; the
    last tenth is written with ``put_messages`` batches. Exits 0 only if every
    message reads back intact.
    """
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
    cfg = _make_config(root, mapped_file_size_commit_log=segment_size)
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
            segments = len(_segment_files(store))
            actual_segment_size = _segment_size(store)
            report = store.recovery_report
            intact, problems, read_seconds = _demo_read_back(store, written.offsets, progress)
        finally:
            store.shutdown()
    n_written = sum(1 for off in written.offsets if off >= 0)
    return {
        "messages": count,
        "written": n_written,
        "put_failures": written.failures,
        "record_bytes": written.record_bytes,
        "segments": segments,
        "segment_size": actual_segment_size,
        "put_seconds": written.seconds,
        "put_msgs_per_s": _rate(n_written, written.seconds),
        "put_bytes_per_s": _rate(written.record_bytes, written.seconds),
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
    table.add_row("put throughput", f"{s['put_msgs_per_s']:,.0f} msg/s "
                                    f"({_human_bytes(s['put_bytes_per_s'])}/s)")
    table.add_row("read-back throughput", f"{s['read_msgs_per_s']:,.0f} msg/s")
    rec = s["recovery"]
    if rec is not None:
        stop = f", stopped: {rec['stop_reason']}" if rec["stop_reason"] else ""
        table.add_row("recovery", f"{rec['records']:,} records, end offset "
                                  f"{rec['end_offset']:,}, {rec['bytes_truncated']:,} bytes "
                                  f"truncated, {s['recovery_seconds'] * 1000:.1f} ms{stop}")
    style = "green" if s["ok"] else "red"
    table.add_row("read back intact", Text(f"{s['intact']:,} / {s['messages']:,}", style=style))
    out.print(table)
    for problem in s["problems"]:
        out.print(Text(problem, style="red"), soft_wrap=True)
    if s["problem_count"] > len(s["problems"]):
        out.print(Text(f"... and {s['problem_count'] - len(s['problems'])} more", style="red"))


# -- info ---------------------------------------------------------------------------


@main.command()
@_store_path
@_json_flag
def info(path: Path, as_json: bool) -> None:
    """Describe the store at PATH: files, offsets, recovery report, queues."""
    with _open_read_only(path) as store:
        files = _segment_files(store)
        report = store.recovery_report
        queues = sorted(store.queue_offset_table().items())
        data: dict[str, Any] = {
            "path": str(path),
            "segment_size": _segment_size(store),
            "commit_log_files": files,
            "min_phy_offset": store.min_phy_offset,
            "max_phy_offset": store.max_phy_offset,
            "records": None if report is None else report.records,
            "end_offset": None if report is None else report.end_offset,
            "recovery": _report_dict(report),
            "queues": [{"topic": t, "queue_id": q, "next_offset": n} for (t, q), n in queues],
        }
    if as_json:
        _print_json(data)
        return
    out = _stdout()
    table = Table(title=f"store {path}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    size = data["segment_size"]
    table.add_row("segment size", f"{size:,} ({_human_bytes(size)})")
    table.add_row("CommitLog files", _file_summary(files))
    table.add_row("min phy offset", f"{data['min_phy_offset']:,}")
    table.add_row("max phy offset", f"{data['max_phy_offset']:,}")
    if report is not None:
        table.add_row("records", f"{report.records:,}")
        table.add_row("end offset", f"{report.end_offset:,}")
        if report.stop_reason:
            table.add_row("recovery stopped", Text(report.stop_reason, style="yellow"))
    out.print(table)
    qt = Table(title="queues", title_justify="left")
    qt.add_column("topic")
    qt.add_column("queue", justify="right")
    qt.add_column("next offset", justify="right")
    for (topic, queue_id), next_offset in queues:
        qt.add_row(topic, str(queue_id), f"{next_offset:,}")
    if queues:
        out.print(qt)
    else:
        out.print("no queues")


def _file_summary(files: list[str], shown: int = 6) -> str:
    if len(files) <= shown:
        names = files
    else:
        names = [*files[: shown // 2], "...", *files[-(shown // 2):]]
    return f"{len(files)}: " + ", ".join(names) if files else "0"


# -- verify -------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Walk:
    records: int = 0
    bytes: int = 0
    problems: dict[int, list[str]] = dataclasses.field(default_factory=dict)

    def problem(self, offset: int, text: str) -> None:
        self.problems.setdefault(offset, []).append(text)


def _peek(store: MessageStore, segment_size: int, offset: int) -> str | None:
    """Why no record could be read at ``offset``; None for an end-of-file blank."""
    name = f"{offset - offset % segment_size:0{_SEGMENT_NAME_DIGITS}d}"
    path = store.config.commit_log_dir / name
    try:
        with open(path, "rb") as f:
            f.seek(offset % segment_size)
            head = f.read(8)
    except FileNotFoundError:
        return f"segment file {name} is missing"
    if len(head) < 8:
        return f"segment file {name} ends early"
    size = int.from_bytes(head[:4], "big", signed=True)
    magic = int.from_bytes(head[4:], "big")
    if magic == _BLANK_MAGIC_CODE:
        return None
    if magic in _MESSAGE_MAGIC_CODES:
        return f"record of {size} bytes does not decode (bad length or fields)"
    return f"neither a record nor an end-of-file blank (bytes {head.hex()})"


def _walk(store: MessageStore, start: int, end: int, segment_size: int,
          advance: Callable[[int], None]) -> _Walk:
    """Read every record in ``[start, end)`` by offset, checking body CRCs."""
    walk = _Walk()
    offset = start
    while offset < end:
        m = store.look_message_by_offset(offset)
        if m is None or m.store_size <= 0:
            why = _peek(store, segment_size, offset)
            if why is not None:
                walk.problem(offset, why)
            nxt = offset + segment_size - offset % segment_size
            advance(min(nxt, end) - offset)
            offset = nxt
            continue
        if m.commit_log_offset != offset:
            walk.problem(offset, f"PHYSICALOFFSET field says {m.commit_log_offset}")
        crc = zlib.crc32(m.stored_body) & _BODY_CRC_MASK
        if crc != m.body_crc:
            walk.problem(offset, f"body CRC mismatch (stored {m.body_crc}, computed {crc})")
        walk.records += 1
        walk.bytes += m.store_size
        advance(m.store_size)
        offset += m.store_size
    return walk


@main.command()
@_store_path
@_json_flag
@click.pass_context
def verify(ctx: click.Context, path: Path, as_json: bool) -> None:
    """Check every CommitLog record of the store at PATH (exit 1 on a problem).

    Recovery is run read-only with body CRC checks, then every record is read
    by offset from the first file to the end of the data, checking its body
    CRC and physical offset; records behind a body that fails its CRC are
    checked too. A record whose structure is damaged ends what can be read.
    """
    with _open_read_only(path, check_crc=True) as store:
        report = store.recovery_report
    # The walk opens without CRC checks, so that a bad body does not hide the
    # records behind it; it checks every CRC itself.
    with _open_read_only(path, check_crc=False) as store:
        segment_size = _segment_size(store)
        walk_report = store.recovery_report
        start = max(store.min_phy_offset, 0)
        end = store.max_phy_offset
        if walk_report is not None:
            # The store reads no further than its recovered end; where the
            # scan stopped early, everything behind it is reported below.
            end = (walk_report.end_offset if walk_report.stop_reason
                   else max(end, walk_report.end_offset))
        with _progress(_stderr(), byte_counts=True) as progress:
            task = progress.add_task("verifying", total=max(end - start, 0))

            def advance(n: int) -> None:
                progress.advance(task, n)

            walk = _walk(store, start, end, segment_size, advance)
        files = _segment_files(store)
    for rep in (report, walk_report):
        if rep is not None and rep.stop_reason:
            text = f"recovery stopped: {rep.stop_reason}"
            if text not in walk.problems.get(rep.end_offset, []):
                walk.problem(rep.end_offset, text)
    if walk_report is not None and walk_report.stop_reason:
        later = sum(1 for name in files if int(name) > walk_report.end_offset)
        walk.problem(walk_report.end_offset,
                     "the rest of the CommitLog cannot be read and was not checked"
                     + (f" ({later} later segment file(s))" if later else ""))
    problems = [{"offset": off, "problem": "; ".join(texts)}
                for off, texts in sorted(walk.problems.items())]
    ok = not problems
    data: dict[str, Any] = {
        "path": str(path),
        "ok": ok,
        "records": walk.records,
        "bytes": walk.bytes,
        "start_offset": start,
        "end_offset": end,
        "segments": len(files),
        "segment_size": segment_size,
        "recovery": _report_dict(report),
        "problems": problems,
    }
    if as_json:
        _print_json(data)
    else:
        out = _stdout()
        scanned = f"{walk.records:,} records, {walk.bytes:,} bytes in {len(files)} segment(s)"
        for p in problems:
            out.print(Text(f"offset {p['offset']}: {p['problem']}", style="red"), soft_wrap=True)
        if ok:
            out.print(Text(f"OK: {scanned}", style="green"), soft_wrap=True)
        else:
            out.print(Text(f"FAILED: {len(problems)} problem(s); {scanned}", style="red"),
                      soft_wrap=True)
    if not ok:
        ctx.exit(EXIT_PROBLEM)


# -- get ----------------------------------------------------------------------------


def _message_dict(m: MessageExt) -> dict[str, Any]:
    try:
        text: str | None = m.body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "msg_id": m.msg_id,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset,
        "store_size": m.store_size,
        "tags": m.tags,
        "tags_code": m.tags_code,
        "keys": m.keys,
        "properties": m.properties,
        "flag": m.flag,
        "sys_flag": m.sys_flag,
        "body_crc": m.body_crc,
        "born_timestamp": m.born_timestamp,
        "born_host": f"{m.born_host[0]}:{m.born_host[1]}",
        "store_timestamp": m.store_timestamp,
        "store_host": f"{m.store_host[0]}:{m.store_host[1]}",
        "reconsume_times": m.reconsume_times,
        "prepared_transaction_offset": m.prepared_transaction_offset,
        "body_length": len(m.body),
        "body_utf8": text,
        "body_base64": base64.b64encode(m.body).decode("ascii"),
    }


def _format_ms(ms: int) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    return f"{ms} ({stamp}.{ms % 1000:03d})"


def _find_by_queue_offset(store: MessageStore, topic: str, queue_id: int,
                          offset: int) -> MessageExt | None:
    get_message: Callable[..., Any] | None = getattr(store, "get_message", None)
    if get_message is None:
        raise CliError("this build cannot read by queue offset; use --offset without --topic")
    result = get_message("rocketstore-cli", topic, queue_id, offset, 1, None)
    messages: list[MessageExt] = list(getattr(result, "messages", None) or [])
    return messages[0] if messages else None


@main.command()
@_store_path
@click.option("--offset", type=click.IntRange(min=0), default=None,
              help="Physical (CommitLog) offset; with --topic, a queue offset.")
@click.option("--id", "msg_id", default=None, help="Offset message id (32 or 56 hex digits).")
@click.option("--topic", default=None, help="Read by queue offset in this topic.")
@click.option("--queue", "queue_id", type=click.IntRange(min=0), default=None,
              help="Queue id for --topic [default: 0].")
@_json_flag
@click.pass_context
def get(ctx: click.Context, path: Path, offset: int | None, msg_id: str | None,
        topic: str | None, queue_id: int | None, as_json: bool) -> None:
    """Print one message of the store at PATH.

    By physical offset (``--offset N``), by message id (``--id MSGID``), or by
    queue offset (``--topic T --queue Q --offset N``). Exits 1 if there is no
    such message.
    """
    if (offset is None) == (msg_id is None):
        raise click.UsageError("give exactly one of --offset and --id")
    if topic is None and queue_id is not None:
        raise click.UsageError("--queue needs --topic")
    if topic is not None and offset is None:
        raise click.UsageError("--topic needs --offset (a queue offset)")
    with _open_read_only(path) as store:
        if msg_id is not None:
            where = f"id {msg_id}"
            try:
                m = store.look_message_by_id(msg_id.strip())
            except ValueError as exc:
                raise CliError(_describe(exc)) from None
        elif topic is not None:
            assert offset is not None
            q = queue_id or 0
            where = f"{topic}/{q} queue offset {offset}"
            m = _find_by_queue_offset(store, topic, q, offset)
        else:
            assert offset is not None
            where = f"offset {offset}"
            m = store.look_message_by_offset(offset)
        data = None if m is None else _message_dict(m)
    if data is None or m is None:
        _stderr().print(f"no message at {where}", markup=False)
        ctx.exit(EXIT_PROBLEM)
    if as_json:
        _print_json(data)
        return
    table = Table(show_header=False, title=f"message {data['msg_id']}", title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name in ("topic", "queue_id", "queue_offset", "commit_log_offset", "store_size", "tags",
                 "tags_code", "keys", "flag", "sys_flag", "body_crc"):
        table.add_row(name, Text(str(data[name])))
    table.add_row("properties", Text(repr(data["properties"])))
    table.add_row("born", Text(f"{_format_ms(m.born_timestamp)} from {data['born_host']}"))
    table.add_row("stored", Text(f"{_format_ms(m.store_timestamp)} at {data['store_host']}"))
    table.add_row("reconsume_times", str(data["reconsume_times"]))
    table.add_row("prepared_tx_offset", str(data["prepared_transaction_offset"]))
    table.add_row("body", Text(f"{len(m.body)} bytes: {m.body!r}"))
    _stdout().print(table)


if __name__ == "__main__":  # pragma: no cover
    main()
