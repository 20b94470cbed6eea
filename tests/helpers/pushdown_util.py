"""A store for the filter pushdown tests, and a reference evaluator of
Spark's pushdown filters over plain rows.

The store holds several topics and queues, tags (with a hash collision:
``Aa`` and ``BB`` share a tag hash code), keys, a delayed message (system
topic), transaction records, CommitLog segments deleted by retention (their
queue units remain), a record with a damaged body, and a queue whose store
times decrease once.
"""

from __future__ import annotations

import datetime as dt
import os
import struct
import time
from typing import Any

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore._native import RetentionPolicy

from .arrow_util import GEOMETRY
from .read_util import wait_dispatched

TRANSACTION_PREPARED = 0x4
TRANSACTION_ROLLBACK = 0xC

N = 900
#: Offset of STORETIMESTAMP in a record with an IPv4 born host (docs/format.md §3.1).
STORE_TS_AT = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8
#: Read options every read of the store takes (its index geometry).
OPTIONS = {k: str(v) for k, v in GEOMETRY.items()}


def tag_of(i: int) -> str | None:
    if i % 11 == 0:
        return None
    return ("Aa", "BB", "t2", "t3", "t4")[i % 5]


def fill(path: str) -> dict[str, Any]:
    """Writes the store at ``path`` and damages it; returns what the tests
    need to know of it (the damaged body, the queue made non-monotone and the
    store time its outlier got)."""
    # Without the property CRC (as a RocketMQ 4.9.8 broker writes): a store
    # time patched below stays a valid record.
    store = MessageStore(StoreConfig(store_path=path, enabled_append_prop_crc=False,
                                     **GEOMETRY)).start()
    for i in range(N):
        topic = ("orders", "events", "audit")[i % 3]
        qid = i % {"orders": 4, "events": 2, "audit": 1}[topic]
        msg = Message(topic=topic, body=f"body-{i:04d}-".encode() + b"x" * (i % 40),
                      queue_id=qid, tags=tag_of(i),
                      keys=[f"k{i}", f"g{i % 10}"] if i % 4 else None,
                      born_host=("10.1.2.3", 5000))
        assert store.put_messages([msg])[0].ok
        if i % 30 == 0:
            time.sleep(0.003)  # store times spread over some milliseconds
    store.put("orders", b"delayed", queue_id=0, delay_level=3, keys=["g1"])
    store.put("orders", b"prepared", queue_id=1, sys_flag=TRANSACTION_PREPARED, keys=["g2"])
    store.put("orders", b"rolled back", queue_id=1, sys_flag=TRANSACTION_ROLLBACK)
    wait_dispatched(store)
    # Retention deletes the two oldest CommitLog files; their queue units stay.
    gone = store._n.delete_expired_commit_log(
        RetentionPolicy(now_ms=0, reserved_ms=0, max_files=2, immediately=True)
    ).min_offset
    store.shutdown()
    assert gone > 0
    info: dict[str, Any] = {"min_phy": gone}
    with MessageStore(StoreConfig(store_path=path, **GEOMETRY), read_only=True) as ro:
        audit = ro.read_arrow("audit").read_all().to_pylist()
    # One body damaged (its CRC no longer matches).
    info["damaged_body"] = _flip(path, b"body-0600-")
    # One audit message, early in its queue, gets a store time from the
    # middle of the data: the queue's times then decrease once.
    victim = audit[5]
    mid = audit[len(audit) // 2]["store_timestamp"]
    mid_ms = (mid - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
    _patch_store_ts(path, victim["commit_log_offset"], mid_ms)
    info["outlier"] = (victim["queue_offset"], mid_ms)
    return info


def _segments(path: str) -> list[str]:
    d = os.path.join(path, "commitlog")
    return [os.path.join(d, f) for f in sorted(os.listdir(d))]


def _flip(path: str, needle: bytes) -> bytes:
    for f in _segments(path):
        with open(f, "r+b") as fh:
            data = fh.read()
            at = data.find(needle)
            if at >= 0:
                fh.seek(at + len(needle) - 2)
                fh.write(b"#")
                return needle
    raise AssertionError(f"{needle!r} not found")


def _patch_store_ts(path: str, phy: int, ts_ms: int) -> None:
    size = GEOMETRY["mapped_file_size_commit_log"]
    base = phy - phy % size
    f = os.path.join(path, "commitlog", f"{base:020d}")
    with open(f, "r+b") as fh:
        fh.seek(phy - base + STORE_TS_AT)
        fh.write(struct.pack(">q", ts_ms))


# -- a reference evaluator of Spark's filters --------------------------------------


def _cmp_value(v: Any) -> Any:
    return v


def holds(f: Any, row: dict[str, Any]) -> bool:
    """Spark's three-valued logic collapsed to "kept or not" for a row."""
    from pyspark.sql import datasource as ds

    if isinstance(f, ds.Not):
        inner = f.child
        col = inner.attribute[0] if hasattr(inner, "attribute") else None
        if col is not None and row.get(col) is None:
            return False
        return not holds(inner, row)
    col = f.attribute[0]
    v = row.get(col)
    if isinstance(f, ds.IsNull):
        return v is None
    if isinstance(f, ds.IsNotNull):
        return v is not None
    if isinstance(f, ds.EqualNullSafe):
        return bool(v == f.value)
    if v is None:
        return False
    if isinstance(f, ds.EqualTo):
        return bool(v == f.value)
    if isinstance(f, ds.In):
        return v in [x for x in f.value if x is not None]
    if isinstance(f, ds.GreaterThan):
        return bool(v > f.value)
    if isinstance(f, ds.GreaterThanOrEqual):
        return bool(v >= f.value)
    if isinstance(f, ds.LessThan):
        return bool(v < f.value)
    if isinstance(f, ds.LessThanOrEqual):
        return bool(v <= f.value)
    if isinstance(f, ds.StringStartsWith):
        return bool(v.startswith(f.value))
    raise AssertionError(f"no reference for {f!r}")
