"""The retention scenario shared by ``tests/services/``.

It follows RocketMQ's clean-files test: 128-byte CommitLog segments holding
one 120-byte record plus the 8-byte end-of-file blank each, ``COUNT``
messages to topic ``T``, queue 0, key ``kNN``; rounds are run by hand.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketstore import GetStatus, MessageStore, PutStatus

SEG = 128
RECORD = 120
COUNT = 55
HOUR_MS = 3_600_000
TOPIC = "T"

# 91 fixed bytes + topic (1) + properties "KEYS\x01kNN" (8) + body (20) = 120.
BODY_LEN = RECORD - 91 - len(TOPIC) - len("KEYS\x01k00")

CONFIG: dict[str, Any] = {
    "mapped_file_size_commit_log": SEG,
    "mapped_file_size_consume_queue": 5 * 20,  # five units a file
    "max_hash_slot_num": 4,
    "max_index_num": 6,  # five entries a file (entry 0 is unused)
    "file_reserved_time": 72,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
    "clean_resource_interval": 3_600_000,  # rounds are run by hand here
    # Records as RocketMQ 4.9.8 writes them (no property CRC): one per file.
    "enabled_append_prop_crc": False,
}


def body(i: int) -> bytes:
    return f"{i:04d}".encode() * (BODY_LEN // 4)


def cl_dir(store: MessageStore) -> Path:
    return Path(store.config.commit_log_dir)


def cl_files(store: MessageStore) -> list[Path]:
    return sorted(p for p in cl_dir(store).iterdir() if p.name.isdigit())


def cq_files(store: MessageStore) -> list[Path]:
    d = Path(store.config.store_path) / "consumequeue" / TOPIC / "0"
    return sorted(d.iterdir())


def index_files(store: MessageStore) -> list[Path]:
    return sorted((Path(store.config.store_path) / "index").iterdir())


def fill(store: MessageStore, n: int = COUNT) -> list[int]:
    offsets = []
    for i in range(n):
        r = store.put(TOPIC, body(i), keys=f"k{i:02d}")
        assert r.status is PutStatus.PUT_OK
        offsets.append(r.wrote_offset)
    store.wait_for_dispatch(0, 0)
    deadline = time.monotonic() + 10
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.dispatch_behind_bytes() == 0
    return offsets


def read_all(store: MessageStore, start: int) -> list[bytes]:
    """Bodies of queue 0 from ``start`` to the end (a pull stops at a CQ file's end)."""
    out: list[bytes] = []
    offset = start
    while offset < store.get_max_offset_in_queue(TOPIC, 0):
        r = store.get_message("g", TOPIC, 0, offset, 32)
        assert r.status is GetStatus.FOUND, (offset, r.status)
        out.extend(m.body for m in r.messages)
        offset = r.next_begin_offset
    return out


def age(files: list[Path], hours: int) -> None:
    when = time.time() - hours * 3600
    for p in files:
        os.utime(p, (when, when))


def hour_clock(hours_ahead: int = 0) -> tuple[Callable[[], int], str]:
    """A clock and the delete_when hour it is in."""
    now = int(time.time() * 1000) + hours_ahead * HOUR_MS
    return (lambda: now), str(time.localtime(now / 1000).tm_hour)



def with_config(open_store: Callable[..., MessageStore]) -> Callable[..., MessageStore]:
    """``open_store`` (the tests' store opener) with ``CONFIG``; keyword
    arguments add to it or override it."""

    def _open(**cfg: Any) -> MessageStore:
        return open_store(**{**CONFIG, **cfg})

    return _open
