"""The ``top`` command: a live view of a store's running state.

Every ``--interval`` seconds the view takes one :meth:`MessageStore.stats`
sample of the store (opened read-only, so a writer may run) and shows the
put rates of the last interval, the dispatch and flush lag, the disk,
replication (the writer's ``config/haStatus.json``: role, slaves or master,
lag, the offsets sync), the busiest queues with their ends, and the consumer groups' lag
(:meth:`MessageStore.consumer_groups`: committed offset, end, lag, and how
fast each group's commits move). On a terminal
the view redraws in place until Ctrl-C (exit 0; the terminal is restored);
elsewhere (a pipe, a file) each refresh is printed after the last one.
``--json`` prints one JSON object per refresh, one per line.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rocketstore.cli._common import (
    _human_bytes,
    _json_flag,
    _open_read_only,
    _stdout,
    _store_path,
    main,
)
from rocketstore.cli._replication import replication_view
from rocketstore.consumers.groups import GroupLag
from rocketstore.stats import QueueStats, StoreStats
from rocketstore.store import MessageStore

# -- one refresh ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Frame:
    """What one refresh shows: the sample, the per-queue put rates over the
    interval before it (None for a queue without an earlier sample), the
    consumer groups, and how fast each group's committed offset moved per
    ``(group, topic, queue_id)`` (None without two commits to compare)."""

    path: Path
    stats: StoreStats
    queue_rates: dict[tuple[str, int], float | None]
    warn_ratio: float
    groups: tuple[GroupLag, ...]
    commit_rates: dict[tuple[str, str, int], float | None]


def _queue_rates(now: StoreStats, before: StoreStats | None) -> dict[tuple[str, int], float | None]:
    seconds = now.interval_s
    old = {} if before is None else {(q.topic, q.queue_id): q.max_offset for q in before.queues}
    rates: dict[tuple[str, int], float | None] = {}
    for q in now.queues:
        key = (q.topic, q.queue_id)
        prev = old.get(key, 0 if before is not None else None)
        if prev is None or not seconds or q.max_offset < prev:
            rates[key] = None
        else:
            rates[key] = (q.max_offset - prev) / seconds
    return rates


def _committed(groups: tuple[GroupLag, ...]) -> dict[tuple[str, str, int], int | None]:
    return {(g.group, q.topic, q.queue_id): q.committed for g in groups for q in g.queues}


def _commit_rates(now: tuple[GroupLag, ...], before: tuple[GroupLag, ...] | None,
                  seconds: float | None) -> dict[tuple[str, str, int], float | None]:
    old = {} if before is None else _committed(before)
    rates: dict[tuple[str, str, int], float | None] = {}
    for key, committed in _committed(now).items():
        prev = old.get(key)
        if committed is None or prev is None or not seconds or committed < prev:
            rates[key] = None
        else:
            rates[key] = (committed - prev) / seconds
    return rates


def _frames(store: MessageStore, interval: float, count: int | None,
            on_first: Any = None) -> Iterator[_Frame]:
    """A frame every ``interval`` seconds (``count`` of them, or forever).

    The first sample is taken at once (``on_first`` shows it, without rates);
    each frame's rates cover the interval before it.
    """
    path = Path(store.config.store_path)
    warn = store.config.disk_space_warning_level_ratio
    before = store.stats()
    groups_before = tuple(store.consumer_groups())
    if on_first is not None:
        on_first(_Frame(path, before, _queue_rates(before, None), warn, groups_before,
                        _commit_rates(groups_before, None, None)))
    shown = 0
    next_at = time.monotonic() + interval
    while count is None or shown < count:
        time.sleep(max(next_at - time.monotonic(), 0.0))
        next_at += interval
        now = store.stats(since=before)
        groups = tuple(store.consumer_groups())
        yield _Frame(path, now, _queue_rates(now, before), warn, groups,
                     _commit_rates(groups, groups_before, now.interval_s))
        before, groups_before = now, groups
        shown += 1


# -- rendering -------------------------------------------------------------------------


def _n(value: int | float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if isinstance(value, int) or value >= 100 else f"{value:,.1f}"
    return f"{text}{unit}"


def _bytes(value: int | float | None) -> str:
    return "-" if value is None else _human_bytes(value)


def _writer_text(s: StoreStats) -> Text:
    if s.writer_running is None:
        return Text("unknown (the lock file cannot be read)", style="yellow")
    if s.writer_running:
        return Text("running", style="green")
    return Text("none (no process holds the store)", style="dim")


def _summary(f: _Frame, with_rates: bool) -> Table:
    s = f.stats
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    where = " (from the files)" if s.read_only else ""
    if with_rates:
        t.add_row("put", f"{_n(s.put_messages_per_s, ' msg/s')}   "
                         f"{_bytes(s.put_bytes_per_s)}/s{where}")
    else:
        t.add_row("put", Text("measuring...", style="dim"))
    t.add_row("messages", f"{s.queue_messages_total:,} in {len(s.queues):,} queue(s)")
    t.add_row("CommitLog", f"{max(s.min_phy_offset, 0):,} .. {s.max_phy_offset:,} "
                           f"({_bytes(s.max_phy_offset - max(s.min_phy_offset, 0))})")
    behind = Text(_bytes(s.dispatch_behind_bytes),
                  style="yellow" if s.dispatch_behind_bytes else "")
    t.add_row("dispatch behind", behind)
    if s.flush_behind_bytes is None:
        t.add_row("flush behind", Text("known to the writer's process only", style="dim"))
    else:
        t.add_row("flush behind", _bytes(s.flush_behind_bytes))
    t.add_row("disk", _disk_text(s, f.warn_ratio))
    t.add_row("store files", f"{_bytes(s.store_size_bytes)} "
                             f"({_bytes(s.store_allocated_bytes)} on disk)")
    t.add_row("writer", _writer_text(s))
    flags = [x for x in s.running_flags if x != "READ_ONLY"]
    if flags:
        t.add_row("flags", Text(", ".join(flags), style="red"))
    elif s.read_only:
        t.add_row("flags", Text("the writer's running flags live in its process", style="dim"))
    else:
        t.add_row("flags", "none")
    return t


def _disk_text(s: StoreStats, warn: float) -> Text:
    if s.disk_used_ratio is None:
        return Text("cannot be read", style="yellow")
    style = "red" if s.disk_used_ratio > warn else ""
    text = Text(f"{s.disk_used_ratio:.0%} used", style=style)
    text.append(f" of {_bytes(s.disk_total_bytes)}, {_bytes(s.disk_available_bytes)} free "
                f"(puts are refused above {warn:.0%})")
    return text


def _queue_table(f: _Frame, with_rates: bool, limit: int) -> RenderableType:
    queues = list(f.stats.queues)
    if not queues:
        return Text("no queues yet", style="dim")

    def busiest(q: QueueStats) -> tuple[float, str, int]:
        return (-(f.queue_rates.get((q.topic, q.queue_id)) or 0.0), q.topic, q.queue_id)

    queues.sort(key=busiest)
    t = Table(title=f"queues ({len(queues):,})", title_justify="left")
    t.add_column("topic")
    t.add_column("queue", justify="right")
    t.add_column("min offset", justify="right")
    t.add_column("max offset", justify="right")
    t.add_column("messages", justify="right")
    t.add_column("msg/s", justify="right")
    for q in queues[:limit]:
        rate = f.queue_rates.get((q.topic, q.queue_id)) if with_rates else None
        t.add_row(q.topic, str(q.queue_id), f"{q.min_offset:,}", f"{q.max_offset:,}",
                  f"{q.messages:,}", _n(rate))
    if len(queues) > limit:
        t.caption = f"the {limit} busiest shown; {len(queues) - limit:,} more"
    return t


def _lag_table(f: _Frame, with_rates: bool, limit: int) -> RenderableType:
    rows = [(g, q) for g in f.groups for q in g.queues]
    if not rows:
        return Text("no consumer groups (no committed offsets)", style="dim")
    rows.sort(key=lambda r: (-r[1].lag, r[0].group, r[1].topic, r[1].queue_id))
    total = sum(g.lag for g in f.groups)
    t = Table(title=f"consumer groups ({len(f.groups):,}), lag {total:,} message(s)",
              title_justify="left")
    # At 80 columns the names give way (folded onto more lines), never the
    # headers: each keeps its width, so no two are cut to the same text.
    for name in ("group", "topic"):
        t.add_column(name, overflow="fold", min_width=5)
    for name, justify in (("queue", "right"), ("committed", "right"), ("end", "right"),
                          ("lag", "right"), ("consumed/s", "right"), ("consumer", "left")):
        t.add_column(name, justify=justify, no_wrap=True,  # type: ignore[arg-type]
                     min_width=len(name))
    for g, q in rows[:limit]:
        rate = f.commit_rates.get((g.group, q.topic, q.queue_id)) if with_rates else None
        t.add_row(g.group, q.topic, str(q.queue_id),
                  "-" if q.committed is None else f"{q.committed:,}", f"{q.max_offset:,}",
                  Text(f"{q.lag:,}", style="yellow" if q.lag else ""), _n(rate),
                  "open" if q.topic in g.active_topics else "")
    if len(rows) > limit:
        t.caption = f"the {limit} most behind shown; {len(rows) - limit:,} more"
    return t


def _view(f: _Frame, interval: float, with_rates: bool, limit: int, live: bool) -> Group:
    s = f.stats
    stamp = datetime.fromtimestamp(s.sample_time_ms / 1000).strftime("%H:%M:%S")
    title = Text(f"rocketstore top  {f.path}  ", style="bold")
    title.append(f"{stamp}, every {interval:g} s" + (" (Ctrl-C quits)" if live else ""),
                 style="dim")
    return Group(title, _summary(f, with_rates), replication_view(s.replication),
                 _queue_table(f, with_rates, limit), _lag_table(f, with_rates, limit))


def _frame_json(f: _Frame) -> dict[str, Any]:
    data = dataclasses.asdict(f.stats)
    data["path"] = str(f.path)
    data["queue_messages_total"] = f.stats.queue_messages_total
    for q in data["queues"]:
        q["put_messages_per_s"] = f.queue_rates.get((q["topic"], q["queue_id"]))
    data["groups"] = []
    for g in f.groups:
        group = g.as_dict()
        for q in group["queues"]:
            q["committed_per_s"] = f.commit_rates.get((g.group, q["topic"], q["queue_id"]))
        data["groups"].append(group)
    return data


# -- the command -------------------------------------------------------------------------


@main.command()
@_store_path
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between refreshes (the rates cover one interval).")
@click.option("--iterations", "-n", type=click.IntRange(min=1), default=None,
              help="Stop after N refreshes [default: run until Ctrl-C].")
@click.option("--once", is_flag=True, help="Show one refresh and exit (--iterations 1).")
@click.option("--queues", "max_queues", type=click.IntRange(min=0), default=20,
              show_default=True,
              help="Show at most N queues (the busiest first) and N group rows "
                   "(the most behind first).")
@_json_flag
def top(path: Path, interval: float, iterations: int | None, once: bool, max_queues: int,
        as_json: bool) -> None:
    """A live view of the store at PATH: rates, lag, disk, queues, consumer groups.

    Refreshes every --interval seconds until Ctrl-C (exit 0), or --iterations
    times (--once: one refresh, one interval after the start). The store is
    opened read-only, so a writer may run: what only the writer's process
    knows (its put counters, the flush lag, its running flags) is not shown,
    and the put rates are measured on the files (the queue ends' and the
    CommitLog's growth). With --json, one JSON object per refresh, one per
    line: the fields of a StoreStats sample, each queue with its put rate,
    and "groups": each consumer group's queues with committed offset, end,
    lag and committed_per_s.
    """
    if once:
        if iterations not in (None, 1):
            raise click.UsageError("--once and --iterations N disagree; give one of them")
        iterations = 1
    try:
        with _open_read_only(path) as store:
            if as_json:
                for frame in _frames(store, interval, iterations):
                    click.echo(json.dumps(_frame_json(frame)))
                return
            _show(store, interval, iterations, max_queues)
    except KeyboardInterrupt:
        return


def _show(store: MessageStore, interval: float, iterations: int | None, limit: int) -> None:
    out = _stdout()
    if not out.is_terminal:
        for i, frame in enumerate(_frames(store, interval, iterations)):
            if i:
                out.print()
            out.print(_view(frame, interval, True, limit, iterations is None))
        return
    with Live(console=out, auto_refresh=False, screen=True, transient=False) as live:

        def first(frame: _Frame) -> None:
            live.update(_view(frame, interval, False, limit, iterations is None), refresh=True)

        last: _Frame | None = None
        for frame in _frames(store, interval, iterations, on_first=first):
            live.update(_view(frame, interval, True, limit, iterations is None), refresh=True)
            last = frame
    if last is not None and iterations is not None:
        # The screen is restored on exit: leave the last refresh behind.
        out.print(_view(last, interval, True, limit, False))
