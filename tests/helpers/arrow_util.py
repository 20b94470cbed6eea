"""Helpers shared by the Arrow and Spark tests: a store with every kind of
message, and rows as the Python API returns them, for comparison."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

from rocketstore import Message, MessageExt, MessageStore, StoreConfig

from .paths import FIXTURES
from .read_util import wait_dispatched

#: Small segments, so a few hundred messages span several CommitLog files.
GEOMETRY: dict[str, Any] = {
    "mapped_file_size_commit_log": 16 * 1024,
    "mapped_file_size_consume_queue": 20 * 50,
    "max_hash_slot_num": 100,
    "max_index_num": 400,
}

FIXTURE_STORE = FIXTURES / "rocketmq_4_9_8_store"
FIXTURE_EXPECTED = FIXTURES / "rocketmq_4_9_8_expected.json"
FIXTURE_GEOMETRY: dict[str, Any] = {"max_hash_slot_num": 200, "max_index_num": 800}

TRANSACTION_PREPARED = 0x4
TRANSACTION_ROLLBACK = 0xC


def fill_rich_store(path: str, *, ipv6_store: bool = False, n: int = 240) -> MessageStore:
    """A started store at ``path`` holding several topics, queues and
    segments, IPv6 born hosts, empty bodies, unicode tags/keys/properties, a
    delayed message, and transaction prepared / rolled-back records."""
    host = ("::1", 10911) if ipv6_store else ("127.0.0.1", 10911)
    store = MessageStore(StoreConfig(store_path=path, store_host=host, **GEOMETRY)).start()
    msgs = []
    for i in range(n):
        topic = "orders" if i % 3 else "events"
        qid = i % (4 if topic == "orders" else 2)
        body = b"" if i % 17 == 0 else (f"body-{i}-".encode() + bytes(range(i % 50)))
        msgs.append(
            Message(
                topic=topic,
                body=body,
                queue_id=qid,
                tags=("標籤-ü" if i % 5 == 0 else f"tag{i % 4}") if i % 7 else None,
                keys=[f"k{i}", "ключ", "😀"] if i % 2 else None,
                properties={"seq": str(i), "ü": "😀 v"} if i % 4 == 0 else None,
                born_host=("2001:db8::7", 4000 + i) if i % 6 == 0 else ("10.1.2.3", 5000),
                flag=i % 3,
            )
        )
    for r in store.put_messages(msgs):
        assert r.status.name == "PUT_OK", r
    # Left out of CommitLog scans unless asked for:
    store.put("orders", b"delayed", queue_id=0, delay_level=3)
    store.put("orders", b"prepared", queue_id=1, sys_flag=TRANSACTION_PREPARED)
    store.put("orders", b"rolled back", queue_id=1, sys_flag=TRANSACTION_ROLLBACK)
    wait_dispatched(store)
    return store


def host_str(h: tuple[str, int]) -> str:
    ip, port = h
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def ms(t: dt.datetime | int) -> int:
    if isinstance(t, int):
        return t
    return (t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)


def row_of(m: MessageExt) -> dict[str, Any]:
    """A message as a row of the Arrow/Spark schema (timestamps in ms)."""
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset,
        "msg_id": m.msg_id,
        "tags": m.tags,
        "keys": list(m.keys),
        "properties": dict(m.properties),
        "body": bytes(m.body),
        "body_crc": m.body_crc,
        "flag": m.flag,
        "sys_flag": m.sys_flag,
        "born_timestamp": m.born_timestamp,
        "born_host": host_str(m.born_host),
        "store_timestamp": m.store_timestamp,
        "store_host": host_str(m.store_host),
        "reconsume_times": m.reconsume_times,
    }


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """An Arrow ``to_pylist`` row (or a Spark row dict) in :func:`row_of`'s shape."""
    out = dict(row)
    props = out["properties"]
    out["properties"] = dict(props) if props is not None else {}
    out["keys"] = list(out["keys"] or [])
    out["body"] = bytes(out["body"])
    out["born_timestamp"] = ms(out["born_timestamp"])
    out["store_timestamp"] = ms(out["store_timestamp"])
    return out


def api_rows(store: MessageStore, topic: str, queue_id: int) -> list[dict[str, Any]]:
    """Every message of a queue through ``get_message``, as rows."""
    out: list[dict[str, Any]] = []
    off = store.get_min_offset_in_queue(topic, queue_id)
    end = store.get_max_offset_in_queue(topic, queue_id)
    while off < end:
        g = store.get_message("g", topic, queue_id, off, 32)
        out.extend(row_of(m) for m in g.messages)
        assert g.next_begin_offset > off
        off = g.next_begin_offset
    return out


def all_api_rows(store: MessageStore, topics: list[str] | None = None) -> list[dict[str, Any]]:
    """Every message of every (or the given) topic's queues, as rows."""
    rows: list[dict[str, Any]] = []
    for t in topics if topics is not None else store.topics(include_system=True):
        for q in store.queue_ids(t):
            rows.extend(api_rows(store, t, q))
    return rows


def key(row: dict[str, Any]) -> tuple[str, int, int]:
    return (row["topic"], row["queue_id"], row["queue_offset"])


def copy_fixture(dst: Path) -> Path:
    """A writable copy of the store RocketMQ 4.9.8 wrote."""
    out = dst / "rmq498"
    shutil.copytree(FIXTURE_STORE, out)
    for p in out.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return out


def fixture_expected() -> dict[str, Any]:
    with open(FIXTURE_EXPECTED, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def damaged_rich_store(path: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """A closed rich store whose first CommitLog segment was deleted (as
    retention does) and in which one record's body and another's properties
    are damaged; returns its path and the two damaged rows."""
    store = fill_rich_store(str(path))
    rows2 = api_rows(store, "orders", 1)
    seg = GEOMETRY["mapped_file_size_commit_log"]
    later = [r for r in rows2 if r["commit_log_offset"] >= seg and r["body"] and r["keys"]]
    body_victim, prop_victim = later[1], later[4]
    spots = []
    for victim, part in ((body_victim, "body"), (prop_victim, "props")):
        phy = victim["commit_log_offset"]
        m = store.look_message_by_offset(phy)
        assert m is not None
        raw = m.record_bytes()
        # The body's first byte, or the last byte of the value before the
        # property CRC (which covers it).
        inner = raw.index(m.stored_body) if part == "body" else raw.rindex(b"__CRC32#") - 2
        spots.append((phy // seg * seg, phy % seg + inner))
    store.shutdown()
    for base, at in spots:
        f = path / "commitlog" / f"{base:020d}"
        data = bytearray(f.read_bytes())
        data[at] ^= 0x5A
        f.write_bytes(bytes(data))
    (path / "commitlog" / f"{0:020d}").unlink()
    return path, body_victim, prop_victim
