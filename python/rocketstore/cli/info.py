"""The ``info`` command: describe a store."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from rich.progress import (
    Progress,
)
from rich.table import Table
from rich.text import Text

from rocketstore import _native
from rocketstore.cli._common import (
    CliError,
    _human_bytes,
    _index_files,
    _index_geometry,
    _iso,
    _json_flag,
    _open_read_only,
    _print_json,
    _progress,
    _report_dict,
    _segment_files,
    _segment_size,
    _stderr,
    _stdout,
    _store_path,
    main,
)
from rocketstore.cli._replication import replication_view
from rocketstore.services.ha_status import read_status
from rocketstore.store import MessageStore, RecoveryReport

# -- info ---------------------------------------------------------------------------


def _writer_running(store_path: Path) -> bool | None:
    """Whether a writer holds the store's lock (None if that cannot be told).

    The engine asks without taking the lock, so a writer starting at the
    same moment is never disturbed.
    """
    return _native.writer_running(str(store_path))


def _queue_rows(store: MessageStore, progress: Progress) -> list[dict[str, Any]]:
    table = store.queue_offset_table()
    keys = set(table)
    for topic in store.topics(include_system=True):
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
    times = native.checkpoint()
    physic, logics = times.physic_msg_timestamp, times.logics_msg_timestamp
    index = times.index_msg_timestamp
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
    are known to be on disk), the recovery report, every topic and queue
    with its min/max offsets, the consumer groups with their lag
    ('rocketstore groups' shows them per queue), and replication as the
    running writer last wrote it (config/haStatus.json: role, slaves or
    master, lag, the offsets sync). Exits 2 if PATH is not a store.
    """
    running = _writer_running(path)
    geometry: dict[str, Any] = dict(_index_geometry(path, None, None))
    with _open_read_only(path, **geometry) as store:
        files = _segment_files(store)
        report = store.recovery_report
        with _progress(_stderr(), byte_counts=False) as progress:
            queues = _queue_rows(store, progress)
        abort = (path / _native.ABORT_FILE).exists()
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
            "consumer_groups": [g.as_dict() for g in store.consumer_groups()],
            "replication": read_status(path / "config") if running else None,
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
    groups = data["consumer_groups"]
    table.add_row("consumer groups", (
        f"{len(groups)}: " + ", ".join(f"{g['group']} (lag {g['lag']:,})" for g in groups[:6])
        + (", ..." if len(groups) > 6 else "") + " (per queue: rocketstore groups PATH)"
    ) if groups else "none")
    out.print(table)
    out.print(Text(_CHECKPOINT_NOTE, style="dim"), soft_wrap=True)
    out.print(replication_view(data["replication"]))
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
