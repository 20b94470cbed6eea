"""What every command shares: errors and exit codes, output, opening a store, the ``main`` group."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

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

from rocketstore import __version__, _native
from rocketstore.config.store_config import StoreConfig
from rocketstore.errors import StoreError, UnknownTopicWarning
from rocketstore.store import MessageStore, RecoveryReport

#: The command ran and found a problem.
EXIT_PROBLEM: Final = 1
#: The command could not run.
EXIT_ERROR: Final = 2

_SEGMENT_NAME_DIGITS: Final = _native.SEGMENT_NAME_DIGITS
# Progress is advanced in steps this size, so the bar never dominates a fast loop.
_PROGRESS_STEP: Final = 256

# The consumer group named in get_message calls (it only labels the pull).
_CLI_GROUP: Final = "rocketstore-cli"
# Messages asked of the store per get_message call (RocketMQ's pull batch).
_PULL_BATCH: Final = 32
_DEFAULT_INDEX_NUM: Final = _native.DEFAULT_INDEX_NUM
_CQ_UNIT: Final = _native.CQ_STORE_UNIT_SIZE  # bytes per ConsumeQueue entry
#: Units per ConsumeQueue file of the default geometry.
_DEFAULT_CQ_UNITS: Final = _native.DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE // _CQ_UNIT
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


_S = TypeVar("_S", bound=MessageStore)


def _start(store: _S) -> _S:
    try:
        store.start()
        return store
    except (StoreError, OSError):
        raise
    except ValueError as exc:  # e.g. "no store at ...": the path is not a store
        raise CliError(_describe(exc)) from None


#: What a store directory holds (a RocketMQ broker's or rocketstore's); a
#: directory with none of these is not a store.
_STORE_ENTRIES: Final = tuple(_native.STORE_ENTRIES)


def _check_store_dir(path: Path) -> None:
    """Refuse a directory that is not a store, saying what it looks like."""
    try:
        names = set(os.listdir(path))
    except OSError as exc:
        raise CliError(_describe(exc)) from None
    if names & set(_STORE_ENTRIES):
        return
    segments = [n for n in names if len(n) == _SEGMENT_NAME_DIGITS and n.isdigit()]
    if segments and path.resolve().name == _native.COMMIT_LOG_DIR:
        raise CliError(f"{path} is the CommitLog directory of a store, not a store: give the "
                       f"store directory, {path.resolve().parent}")
    if path.resolve().name in (_native.CONSUME_QUEUE_DIR, _native.INDEX_DIR,
                               _native.CONFIG_DIR):
        raise CliError(f"{path} is the {path.resolve().name} directory of a store, not a store: "
                       f"give the store directory, {path.resolve().parent}")
    dirs = (_native.COMMIT_LOG_DIR, _native.CONSUME_QUEUE_DIR, _native.INDEX_DIR)
    if not names:
        raise CliError(f"{path} is an empty directory, not a store (a store holds "
                       f"{'/, '.join(dirs)}/ and a {_native.CHECKPOINT_FILE} file)")
    raise CliError(f"{path} is not a store: it holds no {'/, '.join(dirs)}/ or "
                   f"{_native.CHECKPOINT_FILE}")


@contextmanager
def _open_read_only(path: Path, *, check_crc: bool = True, no_write: bool = True,
                    **options: Any) -> Iterator[MessageStore]:
    """Open the store at ``path`` read-only (by default ``no_write``: not a
    byte is written); shut it down on exit.

    Raises CliError (exit 2) if ``path`` is not a store directory.
    """
    _check_store_dir(path)
    cfg = _make_config(path, check_crc_on_recover=check_crc, **options)
    store = _start(MessageStore(cfg, read_only=True, no_write=no_write))
    try:
        with warnings.catch_warnings():
            # An unknown topic or queue is said in a plain line on stderr
            # (the store says it once per topic and queue).
            warnings.simplefilter("always", UnknownTopicWarning)
            shown = warnings.showwarning

            def show(message: Warning | str, category: type[Warning], filename: str,
                     lineno: int, file: Any = None, line: str | None = None) -> None:
                if issubclass(category, UnknownTopicWarning):
                    _stderr().print(str(message), markup=False, soft_wrap=True)
                else:
                    shown(message, category, filename, lineno, file, line)

            warnings.showwarning = show
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
    return None if report is None else report.as_dict()


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
    directory = store_path / _native.INDEX_DIR
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.isdigit() and p.is_file())


def _index_geometry(store_path: Path, slots: int | None,
                    num: int | None) -> dict[str, int]:
    """Index geometry options for opening ``store_path`` so that key queries work.

    Explicit values win; a missing one is what the engine reads from the
    index files' size and content (:func:`rocketstore._native.index_geometry`).
    Returns the options to pass to :class:`StoreConfig` (empty: defaults).
    """
    found_slots, found_num = _native.index_geometry(str(store_path), slots, num)
    options: dict[str, int] = {}
    if found_slots is not None:
        options["max_hash_slot_num"] = found_slots
    if found_num is not None:
        options["max_index_num"] = found_num
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
