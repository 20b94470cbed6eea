"""The reading commands: ``get``, ``tail`` and ``query``."""

from __future__ import annotations

import base64
import dataclasses
import heapq
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from rocketstore.cli._common import (
    _CLI_GROUP,
    _PULL_BATCH,
    EXIT_PROBLEM,
    _describe,
    _index_geometry,
    _iso,
    _json_flag,
    _Millis,
    _one_line,
    _open_read_only,
    _preview,
    _print_json,
    _split_tags,
    _stderr,
    _stdout,
    _store_path,
    _with_index_options,
    main,
)
from rocketstore.errors import CorruptedError, StoreError, UnknownTopicWarning
from rocketstore.message import GetMessageResult, GetStatus, MessageExt
from rocketstore.store import MessageStore

# -- messages that cannot be shown --------------------------------------------------


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
        # An unknown topic or queue: its warning is the reason given.
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnknownTopicWarning)
            try:
                pulled = _pull(store, topic, queue_id, offset, count, tags)
                unknown = None
            except UnknownTopicWarning as w:
                unknown = str(w)
                pulled = _pull(store, topic, queue_id, offset, count, tags)
        pulled.messages = _readable(pulled.messages)
        messages = [_message_dict(m) for m in pulled.messages] if as_json else []
    if as_json:
        _print_json({
            **where,
            "found": bool(messages),
            "status": pulled.status.name,
            "reason": None if messages else unknown or _why_nothing(pulled, offset, tags),
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
            _stderr().print(unknown or _why_nothing(pulled, offset, tags), markup=False,
                            soft_wrap=True)
        if len(pulled.messages) == 1 and count == 1:
            _print_message_detail(pulled.messages[0])
        elif pulled.messages:
            _print_message_table(pulled.messages)
    if not pulled.messages:
        ctx.exit(EXIT_PROBLEM)


# -- tail ---------------------------------------------------------------------------


def _selected_queues(store: MessageStore, topic: str | None,
                     queue_id: int | None) -> list[tuple[str, int]]:
    topics = [topic] if topic is not None else store.topics(include_system=True)
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
