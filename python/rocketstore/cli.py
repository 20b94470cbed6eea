"""The ``rocketstore`` command line.

Subcommands:

``demo``
    Write messages into a store (a temporary one by default), reopen it, read
    every message back by physical offset and print a summary.
``info PATH``
    Segment sizes, files, offsets, how the last writer stopped, checkpoint
    times, recovery report, and every topic and queue with its min/max offsets.
``verify PATH``
    Walk every CommitLog record with CRC checks; exit 1 if anything is wrong.
``repair PATH``
    Open the store for writing, skipping damaged records in durable data
    (which a normal open refuses) and remembering them; print what was skipped.
``get PATH``
    Read from a consume queue (``--topic T --queue Q --offset N``, with
    ``--count`` and ``--tags``), or print one message by physical offset
    (``--offset N`` without ``--topic``) or by message id (``--id``).
``tail PATH``
    The last messages of a topic's queues (or of every topic); ``--follow``
    keeps printing new messages as the writer dispatches them.
``query PATH --topic T --key K``
    Messages carrying a key, found through the index files.
``bench [PATH]``
    A quick self-benchmark (put, batched put, get, key queries) in a
    temporary store.

Every command that inspects a store opens it read-only, so it never writes a
byte and may run while a writer has the store open (``repair`` is the one
command that writes: it takes the writer lock). ``--json`` prints
machine-readable output on stdout (``tail`` prints one JSON object per line);
progress bars go to stderr and only appear on a terminal.

Exit codes: 0 success; 1 the command ran but found a problem (a damaged
record, a message not found, a demo or bench message that did not read back);
2 the command could not run (bad arguments, no store, an error from the store
or the operating system). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import heapq
import json
import logging
import mmap
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click
from rich import box
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

from rocketstore import __version__, _native
from rocketstore.config import FlushDiskType, StoreConfig
from rocketstore.errors import CorruptedError, StoreError
from rocketstore.message import GetMessageResult, GetStatus, Message, MessageExt, PutStatus
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

# The consumer group named in get_message calls (it only labels the pull).
_CLI_GROUP: Final = "rocketstore-cli"
# Messages asked of the store per get_message call (RocketMQ's pull batch).
_PULL_BATCH: Final = 32
# Index file layout (SPEC §3): header, 4-byte hash slots, 20-byte entries.
_INDEX_HEADER_SIZE: Final = 40
_INDEX_SLOT_SIZE: Final = 4
_INDEX_ENTRY_SIZE: Final = 20
_DEFAULT_HASH_SLOT_NUM: Final = 5_000_000
_DEFAULT_INDEX_NUM: Final = 20_000_000
_CQ_UNIT: Final = 20  # bytes per ConsumeQueue entry
_BODY_PREVIEW: Final = 60

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
        except (StoreError, OSError, ValueError) as exc:
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


#: What a store directory holds (a RocketMQ broker's or rocketstore's); a
#: directory with none of these is not a store.
_STORE_ENTRIES: Final = ("commitlog", "consumequeue", "index", "checkpoint", "abort", "lock",
                         "config")


def _check_store_dir(path: Path) -> None:
    """Refuse a directory that is not a store, saying what it looks like."""
    try:
        names = set(os.listdir(path))
    except OSError as exc:
        raise CliError(_describe(exc)) from None
    if names & set(_STORE_ENTRIES):
        return
    segments = [n for n in names if len(n) == _SEGMENT_NAME_DIGITS and n.isdigit()]
    if segments and path.resolve().name == "commitlog":
        raise CliError(f"{path} is the CommitLog directory of a store, not a store: give the "
                       f"store directory, {path.resolve().parent}")
    if path.resolve().name in ("consumequeue", "index", "config"):
        raise CliError(f"{path} is the {path.resolve().name} directory of a store, not a store: "
                       f"give the store directory, {path.resolve().parent}")
    if not names:
        raise CliError(f"{path} is an empty directory, not a store (a store holds commitlog/, "
                       "consumequeue/, index/ and a checkpoint file)")
    raise CliError(f"{path} is not a store: it holds no commitlog/, consumequeue/, index/ or "
                   "checkpoint")


@contextmanager
def _open_read_only(path: Path, *, check_crc: bool = True,
                    **options: Any) -> Iterator[MessageStore]:
    """Open the store at ``path`` read-only; shut it down on exit.

    Raises CliError (exit 2) if ``path`` is not a store directory.
    """
    _check_store_dir(path)
    cfg = _make_config(path, check_crc_on_recover=check_crc, **options)
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


def version_text() -> str:
    """``rocketstore --version``: the installed package, the compiled engine, the format.

    The two versions come from one place (Cargo.toml) and differ only when the
    compiled engine is stale (an editable install not rebuilt after a version
    change). A test build says it carries fault-injection points.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("rocketstore")
    except PackageNotFoundError:
        package = "unknown (not installed)"
    extra = ", test build with fail points" if hasattr(_native, "_set_fail_point") else ""
    return (f"rocketstore {package} (engine {__version__}, "
            f"store format RocketMQ 4.9.8{extra})")


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the package and engine versions and exit.")
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


_END_FILE_BLANK: Final = 8  # bytes every full CommitLog file keeps for its end marker


def _demo_record_size(i: int) -> int:
    """Bytes the CommitLog record of demo message ``i`` takes (IPv4 hosts)."""
    topic, _ = _demo_route(i)
    props = f"TAGS\x01{_DEMO_TAGS[i % len(_DEMO_TAGS)]}\x02KEYS\x01demo-{i}".encode()
    return 91 + len(_demo_body(i)) + len(topic.encode()) + len(props)


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
              help="CommitLog segment (file) size in bytes; at least the largest demo record "
                   "plus 8 bytes: 382 for 10,000 messages (one more per extra digit of -n).")
@_json_flag
@click.pass_context
def demo(ctx: click.Context, directory: Path | None, count: int, segment_size: int,
         as_json: bool) -> None:
    """Write messages, reopen the store, read them all back and summarise.

    Messages go to three topics over several queues with tags and keys; the
    last tenth is written with put_messages batches. Exits 0 only if every
    message reads back intact.
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
    cfg = _make_config(root, mapped_file_size_commit_log=segment_size,
                       mapped_file_size_consume_queue=_CQ_UNIT * min(max(count, 1024), 300_000),
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


# -- shared helpers for messages, times and the index --------------------------------


def _iso(ms: int) -> str | None:
    """``ms`` since the epoch as a local ISO 8601 time; None for 0 or less (never)."""
    if ms <= 0:
        return None
    try:
        stamp = dt.datetime.fromtimestamp(ms / 1000).astimezone()
    except (OverflowError, OSError, ValueError):
        return None
    return stamp.isoformat(timespec="milliseconds")


def _preview(body: bytes, limit: int = _BODY_PREVIEW) -> str:
    """A one-line preview of a body: text with escapes, or hex if it is not UTF-8."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        shown = body[: limit // 2].hex()
        more = len(body) > limit // 2
        return f"hex:{shown}" + (f"… ({len(body)} bytes)" if more else "")
    escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    if len(escaped) > limit or len(text) > limit:
        return f"{escaped[:limit]}… ({len(body)} bytes)"
    return escaped


def _split_tags(value: str | None) -> list[str] | None:
    """``--tags A,B`` (or ``A || B``) as a list; None for no filter (absent or ``*``)."""
    if value is None:
        return None
    tags = [t.strip() for part in value.split(",") for t in part.split("||")]
    tags = [t for t in tags if t]
    if not tags or "*" in tags:
        return None
    return tags


if TYPE_CHECKING:
    _IntParamType = click.ParamType[int]
else:  # click < 8.2: ParamType is not subscriptable at runtime
    _IntParamType = click.ParamType


class _Millis(_IntParamType):
    """A time: milliseconds since the epoch, or an ISO 8601 time (local unless zoned)."""

    name = "MS|ISO-TIME"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time",
                      param, ctx)
        if when.tzinfo is None:
            when = when.astimezone()
        return int(when.timestamp() * 1000)


def _index_files(store_path: Path) -> list[Path]:
    directory = store_path / "index"
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.isdigit() and p.is_file())


def _index_file_geometry(path: Path) -> tuple[int, int] | None:
    """Work out ``(max_hash_slot_num, max_index_num)`` from one index file's content.

    The header holds the entry count ``c`` and the CommitLog offset of the
    last key; that key's entry (number ``c - 1``) holds the same offset, and
    its hash slot points back at it. Every occurrence of the offset's bytes is
    tried as that entry; None if the file holds fewer than one key or nothing
    fits.
    """
    size = path.stat().st_size
    if size <= _INDEX_HEADER_SIZE:
        return None
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        end_phy = mm[24:32]
        count = int.from_bytes(mm[36:40], "big", signed=True)
        if count < 2 or end_phy == bytes(8):
            return None
        last = count - 1
        at = mm.find(end_phy, _INDEX_HEADER_SIZE)
        while at >= 0:
            entry = at - 4
            slots_bytes = entry - _INDEX_HEADER_SIZE - last * _INDEX_ENTRY_SIZE
            if slots_bytes > 0 and slots_bytes % _INDEX_SLOT_SIZE == 0:
                slots = slots_bytes // _INDEX_SLOT_SIZE
                rest = size - _INDEX_HEADER_SIZE - slots_bytes
                if rest % _INDEX_ENTRY_SIZE == 0 and rest // _INDEX_ENTRY_SIZE >= count:
                    key_hash = int.from_bytes(mm[entry:entry + 4], "big", signed=True)
                    first = _INDEX_HEADER_SIZE + slots_bytes
                    slot = _INDEX_HEADER_SIZE + (key_hash % slots) * _INDEX_SLOT_SIZE
                    if (key_hash >= 0 and mm[first:first + _INDEX_ENTRY_SIZE]
                            == bytes(_INDEX_ENTRY_SIZE)
                            and int.from_bytes(mm[slot:slot + 4], "big") == last):
                        return slots, rest // _INDEX_ENTRY_SIZE
            at = mm.find(end_phy, at + 1)
    return None


def _index_geometry(store_path: Path, slots: int | None,
                    num: int | None) -> dict[str, int]:
    """Index geometry options for opening ``store_path`` so that key queries work.

    Explicit values win; otherwise the default geometry if the files have its
    size, else what the files' content shows (see :func:`_index_file_geometry`).
    Returns the options to pass to :class:`StoreConfig` (empty: defaults).
    """
    options: dict[str, int] = {}
    if slots is not None:
        options["max_hash_slot_num"] = slots
    if num is not None:
        options["max_index_num"] = num
    if len(options) == 2:
        return options
    files = _index_files(store_path)
    if not files:
        return options
    sizes = [p.stat().st_size for p in files]
    size = max(sizes)

    def file_size(s: int, n: int) -> int:
        return _INDEX_HEADER_SIZE + s * _INDEX_SLOT_SIZE + n * _INDEX_ENTRY_SIZE

    rest = size - _INDEX_HEADER_SIZE
    if slots is not None:  # the other one follows from the size
        n, r = divmod(rest - slots * _INDEX_SLOT_SIZE, _INDEX_ENTRY_SIZE)
        return {**options, "max_index_num": n} if r == 0 and n >= 2 else options
    if num is not None:
        s, r = divmod(rest - num * _INDEX_ENTRY_SIZE, _INDEX_SLOT_SIZE)
        return {**options, "max_hash_slot_num": s} if r == 0 and s >= 1 else options
    if size == file_size(_DEFAULT_HASH_SLOT_NUM, _DEFAULT_INDEX_NUM):
        return options
    for path, file_len in zip(files, sizes, strict=True):
        if file_len != size:
            continue
        found = _index_file_geometry(path)
        if found is not None:
            return {"max_hash_slot_num": found[0], "max_index_num": found[1]}
    # No key in any file: any geometry of the right size reads them (as empty).
    s, r = divmod(rest, _INDEX_SLOT_SIZE + 4 * _INDEX_ENTRY_SIZE)  # RocketMQ's 1:4 ratio
    if r == 0 and s >= 1:
        return {"max_hash_slot_num": s, "max_index_num": 4 * s}
    return options


_index_options = [
    click.option("--max-hash-slot-num", "hash_slots", type=click.IntRange(min=1), default=None,
                 help="Index geometry the store was written with [default: read from the "
                      "index files]."),
    click.option("--max-index-num", "index_num", type=click.IntRange(min=2), default=None,
                 help="Index geometry the store was written with [default: read from the "
                      "index files]."),
]


def _with_index_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_index_options):
        f = option(f)
    return f


# -- info ---------------------------------------------------------------------------


_FLOCK: Final = "@hhqqi4x"  # struct flock on 64-bit Linux


def _writer_running(store_path: Path) -> bool | None:
    """Whether a writer holds the store's lock (None if that cannot be told).

    Asks with ``F_OFD_GETLK``, which reports a conflicting lock without
    taking one, so a writer starting at the same moment is never disturbed.
    """
    lock = store_path / "lock"
    if not lock.exists():
        return False
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not a POSIX system
        return None
    cmd = getattr(fcntl, "F_OFD_GETLK", None)
    if cmd is None or not sys.platform.startswith("linux") or sys.maxsize < 2**32:
        return None
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        answer = fcntl.fcntl(fd, cmd, query)
        return bool(struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK)
    except OSError:
        return None
    finally:
        os.close(fd)


def _queue_rows(store: MessageStore, progress: Progress) -> list[dict[str, Any]]:
    table = store.queue_offset_table()
    keys = set(table)
    for topic in store.topics():
        keys.update((topic, q) for q in store.queue_ids(topic))
    rows: list[dict[str, Any]] = []
    task = progress.add_task("reading queues", total=len(keys))
    for topic, queue_id in sorted(keys):
        lo = store.get_min_offset_in_queue(topic, queue_id)
        hi = store.get_max_offset_in_queue(topic, queue_id)
        rows.append({"topic": topic, "queue_id": queue_id, "min_offset": lo, "max_offset": hi,
                     "messages": max(hi - lo, 0), "next_offset": table.get((topic, queue_id), hi)})
        progress.advance(task)
    return rows


def _topic_rows(queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    topics: dict[str, dict[str, Any]] = {}
    for q in queues:
        t = topics.setdefault(q["topic"], {"topic": q["topic"], "queue_ids": [], "messages": 0})
        t["queue_ids"].append(q["queue_id"])
        t["messages"] += q["messages"]
    return list(topics.values())


def _checkpoint(store: MessageStore) -> dict[str, Any]:
    native = store._native
    if native is None:  # not started: cannot happen inside _open_read_only
        raise CliError("the store is not open")
    physic, logics, index = native.checkpoint()
    return {
        "physic_msg_timestamp": physic,
        "logics_msg_timestamp": logics,
        "index_msg_timestamp": index,
        "physic_time": _iso(physic),
        "logics_time": _iso(logics),
        "index_time": _iso(index),
    }


# The checkpoint file's three times, in plain words.
_CHECKPOINT_ROWS: Final = (
    ("physic", "CommitLog on disk up to here"),
    ("logics", "consume queues on disk up to here"),
    ("index", "index on disk up to here"),
)
_CHECKPOINT_NOTE: Final = (
    "The checkpoint records, for the CommitLog (RocketMQ's 'physic' time), the consume "
    "queues ('logics') and the index, the store time of the newest message known to be "
    "flushed to disk. After a crash, recovery re-reads the CommitLog from the file holding "
    "the oldest of these times."
)


def _last_stop(abort: bool, running: bool | None) -> str:
    if running:
        return "running"
    return "crashed" if abort else "clean"


@main.command()
@_store_path
@_json_flag
def info(path: Path, as_json: bool) -> None:
    """Describe the store at PATH.

    Files and offsets, how the last writer stopped (the abort file), the
    checkpoint times (how far the CommitLog, the consume queues and the index
    are known to be on disk), the recovery report, and every topic and queue
    with its min/max offsets. Exits 2 if PATH is not a store.
    """
    running = _writer_running(path)
    geometry: dict[str, Any] = dict(_index_geometry(path, None, None))
    with _open_read_only(path, **geometry) as store:
        files = _segment_files(store)
        report = store.recovery_report
        with _progress(_stderr(), byte_counts=False) as progress:
            queues = _queue_rows(store, progress)
        abort = (path / "abort").exists()
        data: dict[str, Any] = {
            "path": str(path),
            "segment_size": _segment_size(store),
            "consume_queue_file_size": store.config.mapped_file_size_consume_queue,
            "commit_log_files": files,
            "min_phy_offset": store.min_phy_offset,
            "max_phy_offset": store.max_phy_offset,
            "records_scanned": None if report is None else report.records_scanned,
            "messages_in_queues": sum(q["messages"] for q in queues),
            "end_offset": None if report is None else report.end_offset,
            "abort_file": abort,
            "writer_running": running,
            "last_stop": _last_stop(abort, running),
            "checkpoint": _checkpoint(store),
            "index_files": len(_index_files(path)),
            "index_geometry": {
                "max_hash_slot_num": store.config.max_hash_slot_num,
                "max_index_num": store.config.max_index_num,
            },
            "recovery": _report_dict(report),
            "topics": _topic_rows(queues),
            "queues": queues,
        }
    if as_json:
        _print_json(data)
        return
    _print_info(path, data, report)


def _print_info(path: Path, data: dict[str, Any], report: RecoveryReport | None) -> None:
    out = _stdout()
    table = Table(title=f"store {path}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    size = data["segment_size"]
    table.add_row("segment size", f"{size:,} ({_human_bytes(size)})")
    table.add_row("CommitLog files", _file_summary(data["commit_log_files"]))
    table.add_row("min phy offset", f"{data['min_phy_offset']:,}")
    table.add_row("max phy offset", f"{data['max_phy_offset']:,}")
    table.add_row("messages in queues", f"{data['messages_in_queues']:,}")
    if report is not None:
        table.add_row("records scanned", f"{report.records_scanned:,} (by recovery, in the "
                                         "files it read)")
        table.add_row("end offset", f"{report.end_offset:,}")
        if report.stop_reason:
            table.add_row("recovery stopped", Text(report.stop_reason, style="yellow"))
    stop = data["last_stop"]
    stop_text = {"clean": Text("clean (no abort file)", style="green"),
                 "crashed": Text("crashed (abort file left behind)", style="red"),
                 "running": Text("running (a writer has the store open)", style="yellow")}[stop]
    table.add_row("last stop", stop_text)
    cp = data["checkpoint"]
    for name, what in _CHECKPOINT_ROWS:
        table.add_row(f"checkpoint {name}", f"{cp[f'{name}_time'] or 'never'} ({what})")
    table.add_row("index files", str(data["index_files"]))
    out.print(table)
    out.print(Text(_CHECKPOINT_NOTE, style="dim"), soft_wrap=True)
    queues = data["queues"]
    if not queues:
        out.print("no queues")
        return
    qt = Table(title=f"{len(data['topics'])} topic(s), {len(queues)} queue(s)",
               title_justify="left")
    qt.add_column("topic")
    qt.add_column("queue", justify="right")
    qt.add_column("min offset", justify="right")
    qt.add_column("max offset", justify="right")
    qt.add_column("messages", justify="right")
    for q in queues:
        qt.add_row(q["topic"], str(q["queue_id"]), f"{q['min_offset']:,}",
                   f"{q['max_offset']:,}", f"{q['messages']:,}")
    out.print(qt)


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


def _record_size(store: MessageStore, segment_size: int, offset: int) -> int:
    """TOTALSIZE of the record at ``offset`` as stored (0 if unreadable)."""
    name = f"{offset - offset % segment_size:0{_SEGMENT_NAME_DIGITS}d}"
    try:
        with open(store.config.commit_log_dir / name, "rb") as f:
            f.seek(offset % segment_size)
            head = f.read(4)
    except OSError:
        return 0
    return int.from_bytes(head, "big", signed=True) if len(head) == 4 else 0


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


_COMPRESSED: Final = 0x1
_COMPRESSION_TYPE_MASK: Final = 0x700
_ZLIB_TYPES: Final = (0, 3)  # compression types this build inflates


def _body_problem(m: MessageExt) -> str | None:
    """Why a body flagged compressed cannot be read, or None.

    Only zlib bodies are checked: a type this build does not inflate (LZ4,
    ZSTD, written by RocketMQ 5) is not a damaged record.
    """
    if not m.sys_flag & _COMPRESSED:
        return None
    if (m.sys_flag & _COMPRESSION_TYPE_MASK) >> 8 not in _ZLIB_TYPES:
        return None
    try:
        m.body  # noqa: B018 - inflates the body
    except (CorruptedError, ValueError) as exc:  # does not inflate; LZ4/ZSTD
        return f"body flagged compressed (sys_flag 0x1) {_one_line(str(exc))}"
    return None


def _where(m: MessageExt) -> str:
    return f"{m.topic}/{m.queue_id}@{m.queue_offset} (offset {m.commit_log_offset})"


def _readable(messages: Iterable[MessageExt]) -> list[MessageExt]:
    """The messages whose body can be read; each other one is skipped with a
    warning on stderr (a compressed body that does not inflate)."""
    out = []
    for m in messages:
        try:
            m.body  # noqa: B018 - inflates a compressed body
        except (CorruptedError, ValueError) as exc:  # does not inflate; LZ4/ZSTD
            _warn_skipped(m, exc)
            continue
        out.append(m)
    return out


def _warn_skipped(m: MessageExt, exc: Exception) -> None:
    _stderr().print(f"warning: skipping the message at {_where(m)}: {_one_line(str(exc))}",
                    markup=False, highlight=False, soft_wrap=True)


def _walk(store: MessageStore, start: int, end: int, segment_size: int,
          advance: Callable[[int], None]) -> _Walk:
    """Read every record in ``[start, end)`` by offset, checking body CRCs."""
    walk = _Walk()
    offset = start
    while offset < end:
        try:
            m = store.look_message_by_offset(offset)
        except CorruptedError as exc:
            # Reads refuse a damaged record; a body that fails its CRC still
            # has a sound size, so the walk goes on behind it.
            size = _record_size(store, segment_size, offset)
            if "body CRC mismatch" in str(exc) and size > 0:
                walk.problem(offset, "body CRC mismatch")
                walk.records += 1
                walk.bytes += size
                advance(size)
                offset += size
                continue
            m = None
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
        elif (why := _body_problem(m)) is not None:
            walk.problem(offset, why)
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
    checked too, and a body flagged compressed must inflate. A record whose
    structure is damaged ends what can be read. Exits 2 if PATH is not a store.
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


@main.command()
@_store_path
@_with_index_options
@_json_flag
def repair(path: Path, hash_slots: int | None, index_num: int | None, as_json: bool) -> None:
    """Open the store at PATH for writing, skipping damaged records.

    Damage inside durable CommitLog data (invalid bytes that intact records
    follow) makes a normal open refuse the store. ``repair`` runs recovery
    as ``StoreConfig(on_corruption="skip")`` does: every intact record is
    kept, each damaged record is skipped (its queue unit stays, so queue
    offsets stay dense; pulls skip and count it) and remembered in the
    checkpoint, so later opens accept the store. It takes the writer lock:
    no other writer may have the store open. Prints what was skipped.
    """
    # The index geometry is taken from the index files, like the other
    # commands do: a writer opened with another geometry could not use them.
    cfg = _make_config(path, on_corruption="skip",
                       **_index_geometry(path, hash_slots, index_num))
    store = _start(MessageStore(cfg))
    try:
        report = store.recovery_report
    finally:
        store.shutdown()
    damaged: list[dict[str, Any]] = [] if report is None else [
        {"offset": off, "resume_offset": resume, "file": file, "reason": reason}
        for off, resume, file, reason in report.damaged
    ]
    data: dict[str, Any] = {
        "path": str(path),
        "damaged": damaged,
        "recovery": _report_dict(report),
    }
    if as_json:
        _print_json(data)
        return
    out = _stdout()
    for d in damaged:
        resume, offset = int(d["resume_offset"]), int(d["offset"])
        what = (f"skipped, intact records resume at {resume}"
                if resume > offset else "nothing intact follows it")
        out.print(Text(f"offset {d['offset']} ({d['file']}): {d['reason']}; {what}",
                       style="yellow"), soft_wrap=True)
    if damaged:
        out.print(f"repaired: {len(damaged)} damaged range(s) skipped", soft_wrap=True)
    else:
        out.print(Text("nothing to repair", style="green"), soft_wrap=True)


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


def _print_message_detail(m: MessageExt) -> None:
    """Every field of one message, as a two-column table."""
    data = _message_dict(m)
    table = Table(show_header=False, title=f"message {m.msg_id}", title_justify="left")
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


def _print_message_table(messages: Sequence[MessageExt], title: str | None = None) -> None:
    """One row per message: position, store time, tags, keys and a body preview.

    Position is never shortened. Tags and keys keep a few characters even on
    a narrow terminal; the body gets the rest of the line. Whatever is cut
    ends with "…" (a body preview cut at 60 characters also says the body's
    full length).
    """
    rows = []
    for m in messages:
        stored = _iso(m.store_timestamp)
        rows.append((f"{m.topic}/{m.queue_id}@{m.queue_offset}", str(m.commit_log_offset),
                     stored[5:19].replace("T", " ") if stored else str(m.store_timestamp),
                     m.tags or "", ",".join(m.keys), _preview(m.body)))

    headers = ("queue@offset", "phy offset", "stored", "tags", "keys", "body")

    def width(i: int) -> int:
        return max([len(headers[i]), *(len(r[i]) for r in rows)])

    out = _stdout()
    widths = [width(i) for i in range(len(headers))]
    # Tags and keys get their full width up to 16 and 24 characters, the body
    # the rest; on a narrow terminal tags and keys shrink to 6 first.
    widths[3], widths[4] = min(widths[3], 16), min(widths[4], 24)
    # Each gap between columns takes 3 characters, the two edges 1 each.
    room = out.width - 3 * (len(headers) - 1) - 2 - sum(widths[:5])
    for i in (4, 3):
        if room < 20:
            cut = min(widths[i] - min(widths[i], 6), 20 - room)
            widths[i] -= cut
            room += cut
    widths[5] = max(min(widths[5], room), 8)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for i, header in enumerate(headers):
        table.add_column(header, no_wrap=True, overflow="ellipsis", width=widths[i],
                         justify="right" if i == 1 else "left")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    out.print(table)


def _why_nothing(pulled: _Pull, offset: int, tags: list[str] | None) -> str:
    """Why a read from a queue offset found no message, in plain words."""
    lo, hi = pulled.min_offset, pulled.max_offset
    return {
        GetStatus.NO_MESSAGE_IN_QUEUE: "the queue holds no message (it does not exist, or "
                                       "every message expired)",
        GetStatus.OFFSET_OVERFLOW_ONE: f"offset {offset} is the end of the queue: no message "
                                       "there yet",
        GetStatus.OFFSET_OVERFLOW_BADLY: f"offset {offset} is not in the queue, which holds "
                                         f"offsets {lo}..{hi - 1}",
        GetStatus.OFFSET_TOO_SMALL: f"offset {offset} is below the queue's first offset {lo} "
                                    "(those messages expired)",
        GetStatus.NO_MATCHED_MESSAGE: f"no message from offset {offset} has one of the tags "
                                      f"{', '.join(tags or [])}",
        GetStatus.MESSAGE_WAS_REMOVING: "the CommitLog file holding these messages is being "
                                        "deleted (expired)",
        GetStatus.OFFSET_FOUND_NULL: f"no consume queue entry is readable at offset {offset}",
    }.get(pulled.status, "the messages found there could not be read (see the warnings)")


@contextmanager
def _json_errors(as_json: bool, where: dict[str, Any]) -> Iterator[None]:
    """With --json, an error that ends the command is printed as JSON on
    stdout too (``found: false`` and the reason), then exits as before."""
    try:
        yield
    except click.ClickException as exc:
        if as_json:
            _print_json({**where, "found": False, "reason": exc.format_message()})
        raise
    except (StoreError, OSError, ValueError) as exc:
        if as_json:
            _print_json({**where, "found": False, "reason": _describe(exc)})
        raise


@dataclasses.dataclass(slots=True)
class _Pull:
    """What reading from a queue offset found (one or more get_message calls)."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]


def _pull(store: MessageStore, topic: str, queue_id: int, offset: int, count: int,
          tags: list[str] | None) -> _Pull:
    """Up to ``count`` messages from ``offset``; pulls again while the store returns some.

    The store caps one ``get_message`` at its transfer limits (32 messages by
    default), so larger counts take several calls. The status is ``FOUND``
    when any message was read, else the status of the (only) call.
    """
    messages: list[MessageExt] = []
    result: GetMessageResult = store.get_message(_CLI_GROUP, topic, queue_id, offset, count,
                                                 tags)
    first_status = result.status
    while True:
        messages.extend(result.messages)
        at = result.next_begin_offset
        if (len(messages) >= count or result.status is not GetStatus.FOUND
                or not result.messages or at <= offset):
            break
        offset = at
        result = store.get_message(_CLI_GROUP, topic, queue_id, offset, count - len(messages),
                                   tags)
    status = GetStatus.FOUND if messages else first_status
    return _Pull(status, result.next_begin_offset, result.min_offset, result.max_offset,
                 messages[:count])


@main.command()
@_store_path
@click.option("--topic", default=None,
              help="Read from a consume queue of this topic (--offset is then a queue offset).")
@click.option("--queue", "queue_id", type=click.IntRange(min=0), default=None,
              help="Queue id, with --topic [default: 0].")
@click.option("--offset", type=click.IntRange(min=0), default=None,
              help="Queue offset with --topic; otherwise a physical (CommitLog) offset.")
@click.option("--count", "-c", type=click.IntRange(min=1), default=None,
              help="Messages to read from the queue, with --topic [default: 1].")
@click.option("--tags", default=None, metavar="A,B",
              help="Only messages with one of these tags, with --topic (RocketMQ's "
                   "'A || B' works too; '*' means all).")
@click.option("--id", "msg_id", default=None,
              help="Print the message with this offset message id (32 or 56 hex digits).")
@_json_flag
@click.pass_context
def get(ctx: click.Context, path: Path, topic: str | None, queue_id: int | None,
        offset: int | None, count: int | None, tags: str | None, msg_id: str | None,
        as_json: bool) -> None:
    """Read messages of the store at PATH.

    \b
    Three forms:
      get PATH --topic T [--queue Q] --offset N [--count C] [--tags A,B]
          read from consume queue T/Q at queue offset N (get_message);
          prints the status, the next offset and the messages
      get PATH --offset N      one message by physical (CommitLog) offset
      get PATH --id MSGID      one message by offset message id

    With --topic, --offset is a queue offset; without it, a physical offset.
    Exits 1 if nothing was found (the JSON output still says why).
    """
    if topic is None:
        if queue_id is not None or count is not None or tags is not None:
            raise click.UsageError("--queue, --count and --tags need --topic (read by queue "
                                   "offset)")
        if (offset is None) == (msg_id is None):
            raise click.UsageError("give exactly one of --offset (physical offset) and --id, "
                                   "or --topic T --queue Q --offset N")
    else:
        if msg_id is not None:
            raise click.UsageError("--id cannot be combined with --topic")
        if offset is None:
            raise click.UsageError("--topic needs --offset (a queue offset)")
        _get_from_queue(ctx, path, topic, queue_id or 0, offset, count or 1, _split_tags(tags),
                        as_json)
        return
    with _json_errors(as_json, {"id": msg_id, "offset": offset}):
        with _open_read_only(path) as store:
            why = ""
            if msg_id is not None:
                where = f"id {msg_id}"
                m = store.look_message_by_id(msg_id.strip())
            else:
                assert offset is not None
                where = f"offset {offset}"
                m = store.look_message_by_offset(offset)
            if m is None:
                why = (f"no record starts at physical offset {offset} (the store holds "
                       f"{max(store.min_phy_offset, 0)}..{store.max_phy_offset})"
                       if msg_id is None else f"no message with id {msg_id} in this store")
            elif not _readable([m]):
                why = f"the message at {where} has a body that cannot be read"
                m = None
            data = None if m is None else _message_dict(m)
    if data is None or m is None:
        if as_json:
            _print_json({"found": False, "id": msg_id, "offset": offset, "reason": why})
        else:
            _stderr().print(f"no message at {where}: {why}", markup=False)
        ctx.exit(EXIT_PROBLEM)
    if as_json:
        _print_json({"found": True, **data})
        return
    _print_message_detail(m)


def _get_from_queue(ctx: click.Context, path: Path, topic: str, queue_id: int, offset: int,
                    count: int, tags: list[str] | None, as_json: bool) -> None:
    where = {"topic": topic, "queue_id": queue_id, "offset": offset, "tags": tags}
    with _json_errors(as_json, where), _open_read_only(path) as store:
        pulled = _pull(store, topic, queue_id, offset, count, tags)
        pulled.messages = _readable(pulled.messages)
        messages = [_message_dict(m) for m in pulled.messages] if as_json else []
    if as_json:
        _print_json({
            **where,
            "found": bool(messages),
            "status": pulled.status.name,
            "reason": None if messages else _why_nothing(pulled, offset, tags),
            "next_begin_offset": pulled.next_begin_offset,
            "min_offset": pulled.min_offset,
            "max_offset": pulled.max_offset,
            "messages": messages,
        })
    else:
        style = "green" if pulled.messages else "yellow"
        summary = Text.assemble(
            f"{topic}/{queue_id} from queue offset {offset}: ",
            (pulled.status.name, style),
            f", {len(pulled.messages)} message(s), next offset {pulled.next_begin_offset} "
            f"(queue holds {pulled.min_offset}..{pulled.max_offset})",
        )
        _stdout().print(summary, soft_wrap=True)
        if not pulled.messages:
            _stderr().print(_why_nothing(pulled, offset, tags), markup=False, soft_wrap=True)
        if len(pulled.messages) == 1 and count == 1:
            _print_message_detail(pulled.messages[0])
        elif pulled.messages:
            _print_message_table(pulled.messages)
    if not pulled.messages:
        ctx.exit(EXIT_PROBLEM)


# -- tail ---------------------------------------------------------------------------


def _selected_queues(store: MessageStore, topic: str | None,
                     queue_id: int | None) -> list[tuple[str, int]]:
    topics = [topic] if topic is not None else store.topics()
    queues: list[tuple[str, int]] = []
    for t in topics:
        ids = store.queue_ids(t)
        if queue_id is not None:
            ids = [queue_id]
        queues.extend((t, q) for q in ids)
    return queues


def _read_queue(store: MessageStore, topic: str, queue_id: int, start: int,
                end: int | None, positions: dict[tuple[str, int], int]) -> Iterator[MessageExt]:
    """Messages of a queue from ``start`` up to ``end`` (None: as far as there are any).

    Keeps ``positions[(topic, queue_id)]`` at the next offset to read; skips
    expired or unreadable ranges as the store's next offsets say.
    """
    key = (topic, queue_id)
    offset = start
    moved_back = False
    positions[key] = offset
    while end is None or offset < end:
        ask = _PULL_BATCH if end is None else min(_PULL_BATCH, end - offset)
        r = store.get_message(_CLI_GROUP, topic, queue_id, offset, ask, None)
        nxt = r.next_begin_offset
        if end is not None:
            nxt = min(nxt, end)
        for m in r.messages:
            if end is not None and m.queue_offset >= end:
                break
            yield m
        if r.messages:
            offset = max(nxt, offset + 1)
        elif nxt > offset:  # expired or unreadable units: skip ahead as the store says
            offset = nxt
        elif nxt < offset and not moved_back and r.status is GetStatus.OFFSET_OVERFLOW_BADLY:
            moved_back = True  # the queue is shorter than we thought: go back to its end once
            offset = nxt
        else:
            break
        positions[key] = offset
    positions[key] = offset


def _tail_printer(as_json: bool) -> Callable[[MessageExt], None]:
    def emit(m: MessageExt) -> None:
        try:
            m.body  # noqa: B018 - inflates a compressed body
        except (CorruptedError, ValueError) as exc:  # does not inflate; LZ4/ZSTD
            _warn_skipped(m, exc)
            return
        if as_json:
            click.echo(json.dumps(_message_dict(m), separators=(",", ":")))
            return
        stored = _iso(m.store_timestamp) or str(m.store_timestamp)
        parts = [stored, f"{m.topic}/{m.queue_id}@{m.queue_offset}"]
        if m.tags:
            parts.append(f"tags={m.tags}")
        if m.keys:
            parts.append("keys=" + ",".join(m.keys))
        parts.append(_preview(m.body))
        click.echo(" ".join(parts))

    return emit


def _silence_broken_pipe() -> None:
    """The reader went away (``tail -f | head``): stop quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


@main.command()
@_store_path
@click.option("--topic", default=None, help="Only this topic [default: every topic].")
@click.option("--queue", "queue_id", type=click.IntRange(min=0), default=None,
              help="Only this queue id of --topic [default: every queue].")
@click.option("-n", "--lines", "lines", type=click.IntRange(min=0), default=10,
              show_default=True, help="Print the last N messages first.")
@click.option("--from-beginning", is_flag=True,
              help="Print every message held, oldest first, instead of the last N.")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing new messages as they are dispatched (Ctrl-C stops).")
@click.option("--poll-interval", type=click.FloatRange(min=0.05), default=1.0,
              show_default=True, hidden=True,
              help="Longest wait, in seconds, between checks for new queues.")
@_json_flag
def tail(path: Path, topic: str | None, queue_id: int | None, lines: int, from_beginning: bool,
         follow: bool, poll_interval: float, as_json: bool) -> None:
    """Print the last messages of the store at PATH, in write order.

    One line per message: store time, TOPIC/QUEUE@OFFSET, tags, keys and a
    body preview; with --json, one JSON object per line. With --follow, keeps
    printing messages as the writer dispatches them (new topics and queues
    included) until Ctrl-C, which exits 0. The store is opened read-only, so
    it can be tailed while a writer runs.
    """
    if queue_id is not None and topic is None:
        raise click.UsageError("--queue needs --topic")
    emit = _tail_printer(as_json)
    try:
        with _open_read_only(path) as store:
            seq = store.dispatch_seq
            positions: dict[tuple[str, int], int] = {}
            queues = _selected_queues(store, topic, queue_id)
            ends = {q: store.get_max_offset_in_queue(*q) for q in queues}
            if from_beginning:
                streams = [_read_queue(store, t, q, store.get_min_offset_in_queue(t, q),
                                       ends[(t, q)], positions) for t, q in queues]
                for m in heapq.merge(*streams, key=lambda m: m.commit_log_offset):
                    emit(m)
            else:
                recent: list[MessageExt] = []
                for t, q in queues:
                    end = ends[(t, q)]
                    start = max(store.get_min_offset_in_queue(t, q), end - lines)
                    recent.extend(_read_queue(store, t, q, start, end, positions))
                recent.sort(key=lambda m: m.commit_log_offset)
                for m in recent[len(recent) - lines:] if lines else []:
                    emit(m)
            positions.update(ends)
            if follow:
                _follow(store, topic, queue_id, positions, seq, poll_interval, emit)
    except KeyboardInterrupt:
        return
    except BrokenPipeError:
        _silence_broken_pipe()


def _follow(store: MessageStore, topic: str | None, queue_id: int | None,
            positions: dict[tuple[str, int], int], seq: int, interval: float,
            emit: Callable[[MessageExt], None]) -> None:
    """Print new messages until interrupted; sleeps in ``wait_for_dispatch`` between rounds."""
    while True:
        new_seq = store.wait_for_dispatch(seq, interval)
        if new_seq == seq:
            continue
        seq = new_seq
        fresh: list[MessageExt] = []
        for t, q in _selected_queues(store, topic, queue_id):
            start = positions.get((t, q))
            if start is None:  # a queue that appeared after we started: all of it is new
                start = store.get_min_offset_in_queue(t, q)
            fresh.extend(_read_queue(store, t, q, start, None, positions))
        fresh.sort(key=lambda m: m.commit_log_offset)
        for m in fresh:
            emit(m)


# -- query --------------------------------------------------------------------------


@main.command()
@_store_path
@click.option("--topic", required=True, help="Topic of the messages.")
@click.option("--key", required=True, help="Message key (KEYS) or unique key (UNIQ_KEY).")
@click.option("--max", "max_num", type=click.IntRange(min=1), default=32, show_default=True,
              help="At most this many messages.")
@click.option("--begin", type=_Millis(), default=0,
              help="Stored at or after this time (ms since the epoch or ISO 8601) "
                   "[default: any].")
@click.option("--end", type=_Millis(), default=None,
              help="Stored at or before this time (ms or ISO 8601) [default: now].")
@_with_index_options
@_json_flag
@click.pass_context
def query(ctx: click.Context, path: Path, topic: str, key: str, max_num: int, begin: int,
          end: int | None, hash_slots: int | None, index_num: int | None,
          as_json: bool) -> None:
    """Find the messages of TOPIC carrying KEY in the store at PATH (via the index).

    Prints them ascending by CommitLog offset; exits 1 if there is none. The
    index geometry is read from the index files unless given.
    """
    if end is not None and end < begin:
        raise click.BadParameter(f"--end {end} is before --begin {begin}", param_hint="--end")
    options: dict[str, Any] = dict(_index_geometry(path, hash_slots, index_num))
    options["max_msgs_num_batch"] = max(max_num, 64)
    with _open_read_only(path, **options) as store:
        found = _readable(store.query_message(topic, key, max_num, begin, end))
        found.sort(key=lambda m: m.commit_log_offset)
        messages = [_message_dict(m) for m in found]
    if as_json:
        _print_json({"topic": topic, "key": key, "begin": begin, "end": end,
                     "count": len(messages), "messages": messages})
    elif found:
        _print_message_table(found, title=f"{len(found)} message(s) of {topic} with key {key}")
    else:
        _stderr().print(f"no message of {topic} with key {key}", markup=False)
    if not found:
        ctx.exit(EXIT_PROBLEM)


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
                r = put(_BENCH_TOPIC, body, i % _BENCH_QUEUES, f"t{i % 4}", f"bench-put-{i}")
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
                for r in self.store.put_messages(batch):
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
        mapped_file_size_consume_queue=_CQ_UNIT * min(max(n, 1024), 300_000),
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


if __name__ == "__main__":  # pragma: no cover
    main(prog_name="rocketstore")
