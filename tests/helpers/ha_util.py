"""Helpers of the replication tests: configs with short intervals, waits,
and the comparison of two stores' CommitLog bytes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketstore import BrokerRole, MessageStore, StoreConfig

#: CommitLog segment size of the replication tests (several files quickly).
SEGMENT = 64 * 1024

#: Short intervals (ms): heartbeats, housekeeping, the SYNC_MASTER wait.
SHORT = {
    "ha_send_heartbeat_interval": 100,
    "ha_housekeeping_interval": 800,
    "slave_timeout": 1000,
}


def master_config(path: Path, *, sync: bool = True, **kw: Any) -> StoreConfig:
    """A master listening on a free loopback port."""
    fields: dict[str, Any] = {
        "store_path": str(path),
        "broker_role": BrokerRole.SYNC_MASTER if sync else BrokerRole.ASYNC_MASTER,
        "ha_listen_port": 0,
        "mapped_file_size_commit_log": SEGMENT,
        **SHORT,
    }
    fields.update(kw)
    return StoreConfig(**fields)


def slave_config(path: Path, master_port: int | None, **kw: Any) -> StoreConfig:
    """A slave following the master on ``master_port`` (None: no master)."""
    fields: dict[str, Any] = {
        "store_path": str(path),
        "broker_role": BrokerRole.SLAVE,
        "ha_master_address": None if master_port is None else f"127.0.0.1:{master_port}",
        "mapped_file_size_commit_log": SEGMENT,
        **SHORT,
    }
    fields.update(kw)
    return StoreConfig(**fields)


def wait_until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``cond`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def commitlog_bytes(store_path: Path, start: int, end: int) -> bytes:
    """The CommitLog bytes ``[start, end)`` of the store at ``store_path``."""
    out = bytearray()
    off = start
    while off < end:
        base = off - off % SEGMENT
        f = store_path / "commitlog" / f"{base:020d}"
        with open(f, "rb") as fh:
            fh.seek(off - base)
            chunk = fh.read(min(end, base + SEGMENT) - off)
        if not chunk:
            break
        out += chunk
        off += len(chunk)
    return bytes(out)


def segment_starts(store_path: Path) -> list[int]:
    """Start offsets of the CommitLog files, oldest first (none while the
    store has not made its ``commitlog`` folder yet: a process that said it
    is ready may not have written its first message)."""
    d = store_path / "commitlog"
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())


def assert_served_whole(m: MessageStore, s: MessageStore, topic: str, queues: int) -> int:
    """Every message the slave ``s`` serves from ``topic`` is the master
    ``m``'s at the same queue offset, whole (body, keys, offset); returns
    how many were compared."""
    n = 0
    for q in range(queues):
        off = s.get_message("G", topic, q, 0, 1).min_offset
        while True:
            got = s.get_message("G", topic, q, off, 32)
            if not got.messages:
                break
            mine = m.get_message("G", topic, q, off, len(got.messages)).messages
            assert [(x.body, x.keys, x.commit_log_offset) for x in got.messages] == \
                [(x.body, x.keys, x.commit_log_offset) for x in mine]
            n += len(got.messages)
            off = got.next_begin_offset
    return n
