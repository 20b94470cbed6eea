"""The ``verify`` and ``repair`` commands: check a whole store, skip damaged records."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from rocketstore import _native
from rocketstore.cli._common import (
    EXIT_PROBLEM,
    _check_store_dir,
    _index_geometry,
    _json_flag,
    _make_config,
    _open_read_only,
    _print_json,
    _progress,
    _report_dict,
    _segment_files,
    _segment_size,
    _start,
    _stderr,
    _stdout,
    _store_path,
    _with_index_options,
    main,
)
from rocketstore.config.files import TopicConfigs
from rocketstore.errors import CorruptedError
from rocketstore.services.recovery import RecoveryReport
from rocketstore.store import MessageStore

# -- verify -------------------------------------------------------------------------


def _known_topics(store: MessageStore) -> list[str]:
    """The topics the store's topic config lists (``config/topics.json``):
    their records must have queue units even if no queue directory is left
    (a topic it does not list and without queues was deleted)."""
    return sorted(TopicConfigs.load(store.config.config_dir / _native.TOPICS_FILE).topics())


def _run_verifier(path: Path, store: MessageStore, start: int, end: int,
                  complete: bool) -> _native.VerifyReport:
    """The engine's whole-store check, on a worker thread (it runs without
    the GIL) while this one draws its progress. ``complete``: ``[start,
    end)`` is all the data and no writer adds to it."""
    counter = _native.VerifyProgress()
    cfg = store.config
    topics = _known_topics(store)
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(_native.verify_store, str(path), _segment_size(store), start, end,
                             cfg.max_hash_slot_num, cfg.max_index_num, counter, complete,
                             topics)
        with _progress(_stderr(), byte_counts=True) as progress:
            task = progress.add_task("verifying", total=max(end - start, 0))
            while True:
                try:
                    result = future.result(timeout=0.1)
                except TimeoutError:
                    progress.update(task, completed=counter.done)
                    continue
                progress.update(task, completed=counter.done)
                return result


def _in_ranges(offset: int | None, ranges: Sequence[tuple[int, int]]) -> bool:
    return offset is not None and any(a <= offset < b for a, b in ranges)


def _check_store(path: Path) -> dict[str, Any]:
    """Everything ``verify`` finds: ``problems`` (what fails it) and
    ``skipped`` (damage an earlier repair recorded: never served, no
    longer a problem)."""
    geometry: dict[str, Any] = dict(_index_geometry(path, None, None))
    with _open_read_only(path, check_crc=True, **geometry) as store:
        segment_size = _segment_size(store)
        report = store.recovery_report
        start = max(store.min_phy_offset, 0)
        end = store.max_phy_offset
        if report is not None:
            # The store reads no further than its recovered end; where the
            # scan stopped early, everything behind it is reported below.
            end = report.end_offset if report.stop_reason else max(end, report.end_offset)
        # Without a writer, the queues and the index must cover every record
        # up to the end, and nothing may point past it.
        complete = (_native.writer_running(str(path)) is False
                    and (report is None or not report.stop_reason))
        checked = _run_verifier(path, store, start, end, complete)
        files = _segment_files(store)
    known = [] if report is None else list(report.known_damaged)
    found: dict[int | None, list[str]] = {}
    skipped: list[dict[str, Any]] = []
    for off, text in checked.problems:
        if _in_ranges(off, known):
            skipped.append({"offset": off, "problem": text})
        else:
            found.setdefault(off, []).append(text)
    if report is not None and report.stop_reason:
        found.setdefault(report.end_offset, []).append(
            f"recovery stopped: {report.stop_reason}")
        later = sum(1 for name in files if int(name) > report.end_offset)
        found[report.end_offset].append(
            "the rest of the CommitLog cannot be read and was not checked"
            + (f" ({later} later segment file(s))" if later else ""))
    problems = [{"offset": off, "problem": "; ".join(texts)}
                for off, texts in sorted(found.items(),
                                         key=lambda kv: (kv[0] is not None, kv[0] or 0))]
    return {
        "path": str(path),
        "ok": not problems,
        "records": checked.records,
        "bytes": checked.bytes,
        "consume_queue_units": checked.cq_units,
        "index_entries": checked.index_entries,
        "not_checked": checked.not_checked,
        "start_offset": start,
        "end_offset": end,
        "segments": len(files),
        "segment_size": segment_size,
        "recovery": _report_dict(report),
        "problems": problems,
        "skipped": skipped,
        "known_damaged": [list(r) for r in known],
    }


@main.command()
@_store_path
@_json_flag
@click.pass_context
def verify(ctx: click.Context, path: Path, as_json: bool) -> None:
    """Check the whole store at PATH (exit 1 on a problem).

    Recovery is run read-only with body CRC checks; then the engine checks
    every CommitLog record from the first file to the end of the data (the
    record rules of recovery and its body CRC; a body flagged compressed
    must inflate; the scan goes on behind a damaged record), every
    ConsumeQueue unit (it must point at a record of its topic, queue, queue
    offset and size, with its tags code) and every index entry (it must
    point at a record carrying a key of its hash, and be linked from its
    hash slot). Without a writer running, every record must also have its
    queue unit and an index entry for each key, and nothing may point past
    the end. Damage that repair recorded (kept in the checkpoint, never
    served) is listed as skipped, not as a problem. Exits 2 if PATH is not
    a store.
    """
    data = _check_store(path)
    ok = data["ok"]
    if as_json:
        _print_json(data)
    else:
        out = _stdout()
        scanned = (f"{data['records']:,} records, {data['bytes']:,} bytes in "
                   f"{data['segments']} segment(s); {data['consume_queue_units']:,} queue "
                   f"units and {data['index_entries']:,} index entries checked")
        for sk in data["skipped"]:
            out.print(Text(f"offset {sk['offset']}: {sk['problem']} (skipped: recorded by "
                           "repair, never served)", style="yellow"), soft_wrap=True)
        for p in data["problems"]:
            where = "" if p["offset"] is None else f"offset {p['offset']}: "
            out.print(Text(f"{where}{p['problem']}", style="red"), soft_wrap=True)
        if ok:
            out.print(Text(f"OK: {scanned}", style="green"), soft_wrap=True)
        else:
            out.print(Text(f"FAILED: {len(data['problems'])} problem(s); {scanned}",
                           style="red"), soft_wrap=True)
    if not ok:
        ctx.exit(EXIT_PROBLEM)


class _RepairStore(MessageStore):
    """A writer whose recovery scans the CommitLog from its first file and
    rebuilds index files of the wrong size instead of refusing them."""

    _repair = True

    def rebuild_damaged_pointers(self) -> _native.PointerRebuildReport:
        """Rebuilds the queue units and index files verify finds damaged."""
        return self._n.rebuild_damaged_pointers(_known_topics(self))


def _rebuilt(report: RecoveryReport | None,
             pointers: _native.PointerRebuildReport | None) -> dict[str, Any]:
    """What recovery and the rebuild step wrote again from the CommitLog."""
    out: dict[str, Any] = {"queue_units": 0, "queues": [], "index_from": None,
                           "index_files_replaced": [], "index_records": 0,
                           "redispatched_records": 0}
    froms: list[int] = []
    if report is not None:
        out["queue_units"] += report.queue_units_rebuilt
        out["index_files_replaced"] += report.index_files_destroyed
        out["index_records"] += report.index_redispatched_records
        out["redispatched_records"] = report.redispatched_records
        froms += [] if report.index_redispatch_from is None else [report.index_redispatch_from]
    if pointers is not None:
        out["queue_units"] += pointers.units_rebuilt
        out["queues"] = [list(q) for q in pointers.queues]
        out["index_files_replaced"] += pointers.index_files_destroyed
        out["index_records"] += pointers.index_records
        froms += [] if pointers.index_from is None else [pointers.index_from]
    out["index_from"] = min(froms, default=None)
    return out


#: What to do about damage ``repair`` cannot skip.
_NEXT_STEP = ("next step: restore the file from a backup (its bytes cannot be rebuilt from "
              "the rest of the store), then run `rocketstore repair` again; or copy the "
              "readable messages into a new store (`rocketstore tail`, "
              "`MessageStore.read_arrow`)")


@main.command()
@_store_path
@_with_index_options
@_json_flag
@click.pass_context
def repair(ctx: click.Context, path: Path, hash_slots: int | None, index_num: int | None,
           as_json: bool) -> None:
    """Open the store at PATH for writing, skipping damaged records (exit 1
    if damage is left that it cannot fix).

    Damage inside durable CommitLog data (invalid bytes that intact records
    follow, a body whose CRC does not match) makes a normal open refuse the
    store or verify fail. Repair runs recovery over the whole CommitLog,
    with body CRC checks, as StoreConfig(on_corruption="skip") does: every
    intact record is kept, each damaged record is skipped (its queue unit
    stays, so queue offsets stay dense; pulls skip and count it) and
    remembered in the checkpoint, so later opens accept the store and verify
    lists it as skipped. What it cannot fix (a missing or short segment, a
    queue unit whose record is gone) is named with the next step, and it
    exits 1. It takes the writer lock: no
    other writer may have the store open. A directory that
    is not a store is refused (exit 2) and left untouched.

    Consume queues and the index are rebuilt from the CommitLog: after
    recovery the store is checked as verify does, every damaged or missing
    queue unit (a hole, a unit pointing at the wrong record, a wrong size or
    tags code, a lost queue file) is written again from its record, and the
    index is rebuilt from the oldest damaged index file on (a truncated
    file, a wrong entry or hash slot, keys it misses). Then it checks the
    store again; only what has no record left to be rebuilt from is named.
    """
    _check_store_dir(path)
    # The index geometry is taken from the index files, like the other
    # commands do: a writer opened with another geometry could not use them.
    cfg = _make_config(path, on_corruption="skip", check_crc_on_recover=True,
                       **_index_geometry(path, hash_slots, index_num))
    report: RecoveryReport | None = None
    pointers: _native.PointerRebuildReport | None = None
    left: list[dict[str, Any]] = []
    try:
        store = _start(_RepairStore(cfg))
    except CorruptedError as exc:
        left.append({"offset": None, "problem": str(exc)})
    else:
        try:
            report = store.recovery_report
            pointers = store.rebuild_damaged_pointers()
        finally:
            store.shutdown()
        left = _check_store(path)["problems"]
    rebuilt = _rebuilt(report, pointers)
    known = [] if report is None else list(report.known_damaged)
    damaged: list[dict[str, Any]] = [] if report is None else [
        {"offset": off, "resume_offset": resume, "file": file, "reason": reason}
        for off, resume, file, reason in report.damaged
        if not _in_ranges(off, known)  # skipped by an earlier repair
    ]
    data: dict[str, Any] = {
        "path": str(path),
        "damaged": damaged,
        "known_damaged": [list(r) for r in known],
        "recovery": _report_dict(report),
        "rebuilt": rebuilt,
        "not_repaired": left,
        "next_step": _NEXT_STEP if left else None,
    }
    if as_json:
        _print_json(data)
    else:
        out = _stdout()
        for d in damaged:
            resume, offset = int(d["resume_offset"]), int(d["offset"])
            what = (f"skipped, intact records resume at {resume}"
                    if resume > offset else "nothing intact follows it")
            out.print(Text(f"offset {d['offset']} ({d['file']}): {d['reason']}; {what}",
                           style="yellow"), soft_wrap=True)
        if rebuilt["redispatched_records"]:
            out.print(f"rebuilt the consume-queue units and index entries of "
                      f"{rebuilt['redispatched_records']} record(s) the queues missed "
                      "(dispatched again)", soft_wrap=True)
        if rebuilt["queue_units"]:
            out.print(f"rebuilt {rebuilt['queue_units']} consume-queue unit(s) from the "
                      "CommitLog", soft_wrap=True)
        if rebuilt["index_from"] is not None:
            out.print(f"rebuilt the index from CommitLog offset {rebuilt['index_from']} "
                      f"({rebuilt['index_records']} record(s) indexed again, "
                      f"{len(rebuilt['index_files_replaced'])} index file(s) replaced)",
                      soft_wrap=True)
        for p in left:
            where = "" if p["offset"] is None else f"offset {p['offset']}: "
            out.print(Text(f"cannot repair: {where}{p['problem']}", style="red"),
                      soft_wrap=True)
        if left:
            out.print(Text(_NEXT_STEP, style="red"), soft_wrap=True)
        elif damaged:
            out.print(f"repaired: {len(damaged)} damaged range(s) skipped", soft_wrap=True)
        elif (rebuilt["queue_units"] or rebuilt["redispatched_records"]
              or rebuilt["index_from"] is not None):
            out.print("repaired", soft_wrap=True)
        else:
            out.print(Text("nothing to repair", style="green"), soft_wrap=True)
    if left:
        ctx.exit(EXIT_PROBLEM)
