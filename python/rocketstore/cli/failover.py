"""``promote``, ``rejoin`` and ``reseed``: failover by hand (docs/format.md §21.8).

``promote PATH`` turns a slave into an ``ASYNC_MASTER``: a stopped one here
(its partial record saved aside, the promotion marker written, the store
opened once so recovery cuts there), a running one through the request
file it watches (the command waits for its answer). ``rejoin PATH
--master HOST:PORT`` finds where a stopped store's log forks from the
master's, saves the divergent range to a side file and cuts it, so the
store can follow that master as a slave. ``reseed PATH`` moves a stopped
store's data files aside, so it starts again as a new slave.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click

from rocketstore import _native
from rocketstore._ha_files import LogFiles, move_aside_for_reseed, side_file, write_side_file
from rocketstore._ha_probe import ForkNotFound, find_fork
from rocketstore.cli._common import (
    CliError,
    _check_store_dir,
    _describe,
    _index_geometry,
    _json_flag,
    _make_config,
    _open_read_only,
    _print_json,
    _start,
    _store_path,
    main,
)
from rocketstore.config.store_config import BrokerRole
from rocketstore.services.failover import request_paths
from rocketstore.store import MessageStore

__all__ = ["promote", "rejoin", "reseed"]

_TIMEOUT = click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0,
                        show_default=True, help="Seconds to wait for an answer.")


class _CutStore(MessageStore):
    """A writer whose recovery ends the CommitLog at a given offset. It opens
    as a SLAVE with no master: nothing is put while it is open (no delayed
    delivery), nothing is copied."""

    def __init__(self, path: Path, cut: int) -> None:
        super().__init__(_make_config(path, broker_role=BrokerRole.SLAVE,
                                      **_index_geometry(path, None, None)))
        self._cut_at = cut


def _recovered_end(path: Path) -> int:
    """The CommitLog end recovery finds (read-only: nothing written): the
    end of the last valid record."""
    with _open_read_only(path) as store:
        return store.max_phy_offset


def _open_cut(path: Path, cut: int) -> int:
    """Opens the store once with its recovery ending at ``cut``; its end."""
    with _start(_CutStore(path, cut)) as store:
        return store.max_phy_offset


def _stopped(path: Path) -> None:
    _check_store_dir(path)
    if _native.writer_running(str(path)):
        raise CliError(f"a writer has {path} open: stop it first")


def _marker(path: Path) -> Path:
    return path / _native.HA_DIR / _native.PROMOTED_FILE


def _say(as_json: bool, data: dict[str, Any], text: str) -> None:
    if as_json:
        _print_json(data)
    else:
        click.echo(text)


@main.command()
@_store_path
@_TIMEOUT
@_json_flag
def promote(path: Path, timeout: float, as_json: bool) -> None:
    """Turn the SLAVE store at PATH into an ASYNC_MASTER.

    Its CommitLog continues from the end of its last complete record; the
    partial record after it is saved to ha/tail-<offset>. From then on it
    opens as an ASYNC_MASTER even when its configuration says SLAVE (the
    marker ha/promoted), until `rocketstore rejoin` or `rocketstore reseed`.
    A stopped store is promoted here; a running slave is asked through
    ha/promote.request and the command waits for its answer (at most
    --timeout seconds).
    """
    _check_store_dir(path)
    if _native.writer_running(str(path)):
        r = _promote_running(path, timeout)
        how = "the running store was promoted"
    else:
        r = _promote_stopped(path)
        how = "the stopped store was promoted"
    tail = (f"; the partial record after it ({r['tail_bytes']} bytes) is in {r['tail_file']}"
            if r["tail_file"] else "")
    port = f"; it listens for slaves on port {r['port']}" if r.get("port") else ""
    _say(as_json, r, f"{how}: ASYNC_MASTER from CommitLog offset {r['offset']}{tail}{port}")


def _promote_running(path: Path, timeout: float) -> dict[str, Any]:
    request, answer = request_paths(path)
    answer.unlink(missing_ok=True)
    request.parent.mkdir(exist_ok=True)
    request.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer.exists():
            data: dict[str, Any] = json.loads(answer.read_text())
            answer.unlink(missing_ok=True)
            if not data.get("ok"):
                raise CliError(f"the store running at {path} was not promoted: {data.get('error')}")
            return data
        time.sleep(0.05)
    request.unlink(missing_ok=True)
    raise CliError(f"no answer from the store running at {path} within {timeout:g} s: only a "
                   f"store running as a SLAVE watches {request}")


def _promote_stopped(path: Path) -> dict[str, Any]:
    if _marker(path).exists():
        raise CliError(f"{path} was promoted already ({_marker(path)} exists)")
    files = LogFiles(path)
    cut = _recovered_end(path)
    written = files.written_end(cut)
    tail = None
    if written > cut:
        tail = side_file(path, _native.PROMOTE_TAIL_PREFIX, cut)
        write_side_file(tail, files.read(cut, written))
    end = _open_cut(path, cut)
    write_side_file(_marker(path), f"ASYNC_MASTER {end}\n".encode())
    return {"ok": True, "offset": end, "tail_file": None if tail is None else str(tail),
            "tail_bytes": written - cut, "port": None}


@main.command()
@_store_path
@click.option("--master", required=True, metavar="HOST:PORT",
              help="The HA address of the master the store is to follow.")
@_TIMEOUT
@_json_flag
def rejoin(path: Path, master: str, timeout: float, as_json: bool) -> None:
    """Cut the divergent end of the stopped store at PATH so it can follow MASTER.

    Connects to the master's HA port as a slave does and compares the
    master's bytes with the store's (writing nothing there) to find the
    first record that is not the master's; that record and everything
    after it are saved to ha/diverged-<offset> and cut, with the consume
    queues and the index, as recovery cuts at its end. The promotion marker
    is removed: opened as a SLAVE of MASTER, the store follows it.
    """
    _stopped(path)
    files = LogFiles(path)
    with _open_read_only(path) as store:
        # Recovery's end (nothing written); the engine walks the records.
        end = store.max_phy_offset
        try:
            cut, _ = find_fork(master, files, store._n, end, timeout)
        except (ForkNotFound, OSError, ValueError) as exc:
            raise CliError(f"cannot find where the logs fork: {_describe(exc)}") from None
    written = files.written_end(end)
    saved = None
    if written > cut:
        saved = side_file(path, _native.REJOIN_CUT_PREFIX, cut)
        write_side_file(saved, files.read(cut, written))
    _marker(path).unlink(missing_ok=True)
    now = _open_cut(path, cut)
    if now != cut:
        raise CliError(f"the store ends at {now} after the cut at {cut}")
    data = {"master": master, "offset": cut, "end": written,
            "saved_file": None if saved is None else str(saved), "saved_bytes": written - cut}
    text = (f"the logs fork at {cut}: [{cut}, {written}) saved to {saved} and cut"
            if saved else f"nothing diverges: the store's log up to {cut} is the master's")
    _say(as_json, data, f"{text}; open it as a SLAVE of {master} to follow it")


@main.command()
@_store_path
@_json_flag
def reseed(path: Path, as_json: bool) -> None:
    """Move the data files of the stopped store at PATH aside so it starts
    again as a new slave.

    For a slave whose end is below its master's first file (the bytes it
    needs are deleted there): commitlog/, consumequeue/, index/, the
    checkpoint and the abort file move into ha/reseed-<ms>/ (config/ stays;
    the promotion marker is removed). Opened as a SLAVE, the empty store is
    sent the master's log from the start of its last file, or of its first
    one when the master sets ha_new_slave_from_first_file.
    """
    _stopped(path)
    dest = move_aside_for_reseed(path)
    _say(as_json, {"moved_to": str(dest)},
         f"moved the data files to {dest}: open the store as a SLAVE to copy its master again")
