"""The ``groups`` command: consumer groups, their lag and members, reset and delete.

``rocketstore groups PATH`` prints every group's committed offset, end
offset, lag and owning member per queue (``kafka-consumer-groups
--describe``), then the groups' shared members (pid, host, since, heartbeat
age, queues). ``--expire`` removes the members whose process ended (the
next member's heartbeat does too) and rebuilds a membership state that
cannot be read.
``--group G --reset-offsets --to-earliest | --to-latest | --to-offset N |
--to-datetime TIME [--topic T] [--dry-run]`` moves a group's offsets and
``--group G --delete [--topic T]`` removes them, as
``kafka-consumer-groups --reset-offsets/--delete`` do: both refuse (exit 2)
while a consumer of the group is open in any process. Looking opens the
store ``no_write``; a change writes ``config/consumerOffset.json`` only,
under its lock (``docs/format.md``, §13.1).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from rocketstore import _native
from rocketstore.cli._common import (
    CliError,
    _json_flag,
    _Millis,
    _open_read_only,
    _print_json,
    _stdout,
    _store_path,
    main,
)
from rocketstore.consumers.group_members import expire_members
from rocketstore.consumers.groups import GroupLag, ResetTarget
from rocketstore.services.ha_status import read_status


def _short(member_id: str) -> str:
    """A member id's random part (``<host>-<pid>-<random>``): what tells two
    members of one process apart."""
    return member_id.rsplit("-", 1)[-1]


def _owner(g: GroupLag, member_id: str | None) -> str:
    """A queue's owner as the table shows it: its member's pid and id."""
    for m in g.members:
        if m.member_id == member_id:
            return f"pid {m.pid} {_short(m.member_id)}" + ("" if m.alive else " (dead)")
    return member_id or ""


def _lag_table(groups: list[GroupLag]) -> Table:
    table = Table(title="consumer groups", title_justify="left")
    for name, justify in (("group", "left"), ("topic", "left"), ("queue", "right"),
                          ("committed", "right"), ("end offset", "right"), ("lag", "right"),
                          ("consumer", "left"), ("owner", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for g in groups:
        for q in g.queues:
            table.add_row(g.group, q.topic, str(q.queue_id),
                          "-" if q.committed is None else f"{q.committed:,}",
                          f"{q.max_offset:,}", f"{q.lag:,}",
                          "open" if q.topic in g.active_topics else "", _owner(g, q.owner))
    return table


def _members_table(groups: list[GroupLag]) -> Table | None:
    """The shared members of ``groups`` (None when there are none)."""
    rows = [(g.group, m) for g in groups for m in g.members]
    if not rows:
        return None
    table = Table(title="members", title_justify="left")
    for name, justify in (("group", "left"), ("topic", "left"), ("pid", "right"),
                          ("host", "left"), ("since", "left"), ("heartbeat", "right"),
                          ("queues", "left"), ("member", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for group, m in rows:
        table.add_row(group, m.topic, str(m.pid), m.host,
                      m.since.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
                      f"{m.heartbeat_age:.1f} s ago" if m.alive else "dead",
                      ",".join(map(str, m.queues)) or "-", _short(m.member_id))
    return table


def _expire(path: Path, as_json: bool) -> None:
    """``--expire``: remove dead members (and rebuild unreadable states)."""
    with _open_read_only(path, no_write=False) as store:
        removed = expire_members(store.config.config_dir)
    if as_json:
        _print_json(removed)
        return
    gone = [(d, m) for d, ids in removed.items() for m in ids]
    for d, m in gone:
        click.echo(f"removed member {m} of {d}")
    if not gone:
        click.echo("no dead member found")


def _target(earliest: bool, latest: bool, offset: int | None,
            when: int | None) -> ResetTarget:
    chosen = [t for t, on in (("--to-earliest", earliest), ("--to-latest", latest),
                              ("--to-offset", offset is not None),
                              ("--to-datetime", when is not None)) if on]
    if len(chosen) != 1:
        raise CliError("--reset-offsets needs exactly one of --to-earliest, --to-latest, "
                       f"--to-offset, --to-datetime (got {', '.join(chosen) or 'none'})")
    if earliest:
        return "earliest"
    if latest:
        return "latest"
    if offset is not None:
        return offset
    assert when is not None
    return dt.datetime.fromtimestamp(when / 1000, tz=dt.UTC)


@main.command()
@_store_path
@click.option("--group", "-g", default=None, help="The consumer group to show or change.")
@click.option("--topic", "-t", default=None,
              help="Only this topic (a reset of a group with no offsets needs it).")
@click.option("--reset-offsets", "reset", is_flag=True,
              help="Move the group's committed offsets (needs one --to-...).")
@click.option("--to-earliest", is_flag=True, help="Reset to each queue's min offset.")
@click.option("--to-latest", is_flag=True, help="Reset to each queue's end (max offset).")
@click.option("--to-offset", type=click.IntRange(min=0), default=None,
              help="Reset to this offset (kept within each queue's min and max).")
@click.option("--to-datetime", "to_time", type=_Millis(), default=None,
              help="Reset to the first message stored at or after this time "
                   "(ms since the epoch, or ISO 8601; local unless zoned).")
@click.option("--dry-run", is_flag=True, help="Show what a reset would do; write nothing.")
@click.option("--delete", is_flag=True, help="Remove the group's committed offsets.")
@click.option("--expire", is_flag=True,
              help="Remove members whose process ended; rebuild an unreadable membership.")
@_json_flag
def groups(path: Path, group: str | None, topic: str | None, reset: bool, to_earliest: bool,
           to_latest: bool, to_offset: int | None, to_time: int | None, dry_run: bool,
           delete: bool, expire: bool, as_json: bool) -> None:
    """Consumer groups: committed offset, end offset, lag and owner per queue,
    and members; reset, delete or expire."""
    if reset and delete:
        raise CliError("give --reset-offsets or --delete, not both")
    if expire:
        if reset or delete or group is not None or topic is not None:
            raise CliError("--expire goes alone (it looks at every group)")
        _expire(path, as_json)
        return
    if (reset or delete) and group is None:
        raise CliError(f"--{'delete' if delete else 'reset-offsets'} needs --group")
    if not reset and (to_earliest or to_latest or to_offset is not None
                      or to_time is not None or dry_run):
        raise CliError("--to-... and --dry-run go with --reset-offsets")
    changing = (reset and not dry_run) or delete
    if changing and _native.writer_running(str(path)):
        status = read_status(path / _native.CONFIG_DIR)
        if status is not None and status.get("role") == "SLAVE":
            raise CliError("the store is a running SLAVE: its consumer offsets are its "
                           "master's, replaced by each offsets sync; change them on the master")
    with _open_read_only(path, no_write=not changing) as store:
        if delete:
            assert group is not None
            removed = store.delete_consumer_group(group, topic=topic)
            if as_json:
                _print_json({"group": group, "deleted_topics": removed})
            elif removed:
                click.echo(f"deleted group {group} on {', '.join(removed)}")
            else:
                click.echo(f"group {group} has no committed offsets"
                           + (f" on {topic}" if topic else ""))
            return
        if reset:
            assert group is not None
            target = _target(to_earliest, to_latest, to_offset, to_time)
            changes = store.reset_consumer_group(group, target, topic=topic, dry_run=dry_run)
            rows: list[dict[str, Any]] = [
                {"topic": t, "queue_id": q, "old": old, "new": new}
                for (t, q), (old, new) in sorted(changes.items())]
            if as_json:
                _print_json({"group": group, "dry_run": dry_run, "queues": rows})
                return
            table = Table(title=f"{group}: {'would reset' if dry_run else 'reset'}",
                          title_justify="left")
            for name in ("topic", "queue", "old", "new"):
                table.add_column(name, justify="left" if name == "topic" else "right")
            for r in rows:
                table.add_row(r["topic"], str(r["queue_id"]),
                              "-" if r["old"] is None else f"{r['old']:,}", f"{r['new']:,}")
            _stdout().print(table)
            return
        found = [g for g in store.consumer_groups() if group is None or g.group == group]
        if topic is not None:
            found = [GroupLag(g.group, tuple(q for q in g.queues if q.topic == topic),
                              tuple(t for t in g.active_topics if t == topic),
                              tuple(m for m in g.members if m.topic == topic), g.problems)
                     for g in found]
            found = [g for g in found if g.queues or g.members]
        if as_json:
            _print_json([g.as_dict() for g in found])
        elif not found:
            click.echo("no consumer group has committed offsets or members" if group is None
                       else f"group {group} has no committed offsets or members")
        else:
            _stdout().print(_lag_table(found))
            members = _members_table(found)
            if members is not None:
                _stdout().print(members)
            for g in found:
                for problem in g.problems:
                    click.echo(f"group {g.group}: {problem}", err=True)
