"""Write the upgrade fixture: a small store written by rocketstore 0.1.0.

The directory ``tests/fixtures/store_0_1_0`` was produced by this script with
the engine as released in 0.1.0, before the recovery rules learned the durable
mark and damage detection. ``tests/recovery/test_upgrade.py`` opens a copy of it with
the current engine and checks that every message reads back as listed in
``tests/fixtures/store_0_1_0_expected.json``. Run it again only to rebuild the
fixture from a 0.1.0 checkout::

    python tests/helpers/make_upgrade_fixture.py tests/fixtures
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from rocketstore import GetStatus, Message, MessageStore, StoreConfig

GEOMETRY = {
    "mapped_file_size_commit_log": 8 * 1024,
    "mapped_file_size_consume_queue": 20 * 50,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
}


def _write(path: Path) -> None:
    cfg = StoreConfig(store_path=str(path), **GEOMETRY)
    with MessageStore(cfg) as store:
        for i in range(120):
            topic = ("orders", "audit", "%RETRY%group-a")[i % 3]
            store.put(
                topic,
                f"body {i} ".encode() * (1 + i % 7),
                queue_id=i % 4,
                tags=("paid", "新しい", "x")[i % 3],
                keys=[f"k-{i}", f"ключ-{i % 10}"],
                properties={"seq": str(i)},
            )
        store.put_messages([Message("batch", bytes([i]) * i, queue_id=1) for i in range(20)])
        store.put("orders", b"", queue_id=0, tags="empty")
        store.put("orders", b"later", queue_id=2, properties={"DELAY": "3"})
        store.commit_offset("group-a", "orders", 0, 5)
        store.commit_offset("group-a", "audit", 1, 3)
        store.persist_offsets()
    ipv6 = StoreConfig(store_path=str(path), store_host=("::1", 10911), **GEOMETRY)
    with MessageStore(ipv6) as store:
        store.put("orders", b"from ipv6", queue_id=3, keys=["v6"])


def read_all(store: MessageStore) -> list[dict[str, object]]:
    """Every message of every queue, in topic/queue/offset order, as JSON-ready dicts."""
    out: list[dict[str, object]] = []
    for topic in sorted(store.topics(include_system=True)):
        for qid in sorted(store.queue_ids(topic)):
            off = store.get_min_offset_in_queue(topic, qid)
            end = store.get_max_offset_in_queue(topic, qid)
            while off < end:
                g = store.get_message("fixture", topic, qid, off, 32)
                assert g.status is GetStatus.FOUND, (topic, qid, off, g.status)
                for m in g.messages:
                    out.append(
                        {
                            "topic": m.topic,
                            "queue_id": m.queue_id,
                            "queue_offset": m.queue_offset,
                            "phy": m.commit_log_offset,
                            "msg_id": m.msg_id,
                            "tags": m.tags,
                            "keys": list(m.keys),
                            "properties": dict(m.properties),
                            "body_hex": m.body.hex(),
                            "store_timestamp": m.store_timestamp,
                        }
                    )
                off = g.next_begin_offset
    return out


def _expected(path: Path) -> dict[str, object]:
    cfg = StoreConfig(store_path=str(path), **GEOMETRY)
    with MessageStore(cfg, read_only=True) as store:
        return {
            "geometry": GEOMETRY,
            "max_phy_offset": store.max_phy_offset,
            "offsets": {
                "group-a/orders/0": store.query_offset("group-a", "orders", 0),
                "group-a/audit/1": store.query_offset("group-a", "audit", 1),
            },
            "messages": read_all(store),
        }


def main(dest: str) -> None:
    target = Path(dest) / "store_0_1_0"
    if target.exists():
        shutil.rmtree(target)
    _write(target)
    (target / "lock").unlink(missing_ok=True)
    expected = _expected(target)
    (target / "lock").unlink(missing_ok=True)
    Path(dest, "store_0_1_0_expected.json").write_text(
        json.dumps(expected, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    )


if __name__ == "__main__":
    main(sys.argv[1])
