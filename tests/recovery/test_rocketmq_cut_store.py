"""A store RocketMQ 4.9.8 cut at a damaged record and appended to is served
as RocketMQ serves it.

The fixture ``rocketmq_4_9_8_cut_store`` (docs/format.md §15.1, "A store a
RocketMQ broker cut and appended to"): rocketstore wrote 300 records with
the property CRC (the checkpoint lists ``[0, 130786)`` as written with
it), one body byte of record 220 was flipped, and RocketMQ 4.9.8's own
``DefaultMessageStore`` opened the directory: its recovery cut the log at
that record (body CRC), it appended 12 records without the property from
there and shut down. ``rocketmq_4_9_8_cut_expected.json`` holds what that
store then serves, read back by RocketMQ itself: the 220 records before the
cut and its 12, none of the 80 it cut.

The checkpoint still lists the whole old range as written with the
property; the broker rewrote ``physicMsgTimestamp``, so the durable mark is
stale and the ranges count only up to the first record without the
property (docs/format.md §11, "Ranges another writer wrote over").
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from helpers.paths import FIXTURES
from rocketstore import CorruptedError, MessageStore, StoreConfig
from rocketstore.cli import main as cli_main

STORE = FIXTURES / "rocketmq_4_9_8_cut_store"
EXPECTED = json.loads((FIXTURES / "rocketmq_4_9_8_cut_expected.json").read_text("utf-8"))
CFG: dict[str, Any] = EXPECTED["config"]
TOPIC = EXPECTED["topic"]
CUT = EXPECTED["cut_at"]
OLD_END = EXPECTED["rocketstore_end"]
QUEUES = len(EXPECTED["queues"])


def copy(tmp_path: Path) -> Path:
    path = tmp_path / "s"
    shutil.copytree(STORE, path)
    return path


def config(path: Path, **kw: Any) -> StoreConfig:
    return StoreConfig(store_path=str(path), **CFG, **kw)


def crc_ranges(path: Path) -> list[tuple[int, int]]:
    """The property-CRC ranges block of the checkpoint (docs/format.md §11)."""
    block = (path / "checkpoint").read_bytes()[3072:]
    assert block[:8] == b"RSPCRC01"
    n = struct.unpack_from(">i", block, 8)[0]
    assert struct.unpack_from(">I", block, 12)[0] == zlib.crc32(block[:12] + block[16:16 + 16 * n])
    return [struct.unpack_from(">qq", block, 16 + 16 * i) for i in range(n)]


def served(store: MessageStore) -> list[dict[str, Any]]:
    """Every message the queues serve, as the expected json lists them."""
    out = []
    for q in range(QUEUES):
        lo = store.get_min_offset_in_queue(TOPIC, q)
        hi = store.get_max_offset_in_queue(TOPIC, q)
        assert [lo, hi] == EXPECTED["queues"][str(q)], q
        off = lo
        while off < hi:
            r = store.get_message("g", TOPIC, q, off, 32)
            assert r.damaged == 0 and r.skipped == 0, (q, off)
            for m in r.messages:
                out.append({
                    "phy": m.commit_log_offset, "queue_id": m.queue_id,
                    "queue_offset": m.queue_offset, "store_size": m.store_size,
                    "store_timestamp": m.store_timestamp, "keys": " ".join(m.keys),
                    "tags": m.tags or "", "body": m.body.decode("ascii"),
                })
            assert r.next_begin_offset > off
            off = r.next_begin_offset
        assert not store.get_message("g", TOPIC, q, hi, 32).messages
    return sorted(out, key=lambda m: m["phy"])


def check_serves_what_rocketmq_serves(store: MessageStore) -> None:
    assert store.max_phy_offset == EXPECTED["max_phy_offset"]
    assert store.min_phy_offset == EXPECTED["min_phy_offset"]
    assert served(store) == EXPECTED["records"]
    # Lookups: the broker's records and those before its cut; nothing it cut.
    for rec in EXPECTED["records"][215:225]:
        m = store.look_message_by_offset(rec["phy"])
        assert m is not None and m.body.decode("ascii") == rec["body"]
    for i in (220, 221, 250, 299):
        assert store.query_message(TOPIC, f"k{i:05d}") == [], i
    assert store.look_message_by_offset(OLD_END - 435) is None


def test_the_fixture_is_what_the_docs_say() -> None:
    records = EXPECTED["records"]
    assert len(records) == 232 and EXPECTED["appended"] == 12
    assert records[220]["phy"] == CUT and all(r["body"].startswith("broker") for r in records[220:])
    assert all(r["body"].startswith(f"old{i:05d}-") for i, r in enumerate(records[:220]))
    assert EXPECTED["max_phy_offset"] < OLD_END
    # The checkpoint still lists the whole old range as written with the property.
    assert crc_ranges(STORE) == [(0, OLD_END)]


def test_read_only_serves_what_rocketmq_serves(tmp_path: Path) -> None:
    path = copy(tmp_path)
    with MessageStore(config(path), read_only=True) as store:
        check_serves_what_rocketmq_serves(store)
        # Where the broker's records end, the bytes are what is left of an
        # old record: the log ends there, as RocketMQ's does.
        assert [d[:2] for d in store.recovery_report.damaged] == [
            (EXPECTED["max_phy_offset"],) * 2]
    assert crc_ranges(path) == [(0, OLD_END)], "a read-only open writes nothing"


def test_a_writer_follows_the_rules_for_a_cut_store(tmp_path: Path) -> None:
    path = copy(tmp_path)
    # An ordinary writer never destroys intact records on the older-log
    # judgement alone (§15.1): it refuses, naming where the broker's records
    # end, not the broker's records themselves.
    with pytest.raises(CorruptedError, match=f"offset {EXPECTED['max_phy_offset']} "):
        MessageStore(config(path)).start()
    with MessageStore(config(path, on_corruption="skip")) as store:
        check_serves_what_rocketmq_serves(store)
        # The broker did not index its records (RocketMQ's index skips
        # offsets below its newest entry, the cut records'); a writer that
        # cuts rebuilds the index from the cut (§15, "Recovery and the index").
        assert [m.body[:6] for m in store.query_message(TOPIC, "b011")] == [b"broker"]
        r = store.put(TOPIC, b"after", queue_id=0, keys=["after"])
        assert r.ok and r.wrote_offset == EXPECTED["max_phy_offset"]
    end = r.wrote_offset + r.wrote_bytes
    # The checkpoint now lists what rocketstore wrote: up to the broker's cut,
    # and its own record after the broker's.
    assert crc_ranges(path) == [(0, CUT), (EXPECTED["max_phy_offset"], end)]
    with MessageStore(config(path)) as store:  # an ordinary open now
        assert store.max_phy_offset == end
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == b"after"
        assert len(served_all(store)) == 233
    res = CliRunner().invoke(cli_main, ["verify", str(path), "--json"])
    assert res.exit_code == 0, res.output


def served_all(store: MessageStore) -> list[bytes]:
    out = []
    for q in range(QUEUES):
        off = store.get_min_offset_in_queue(TOPIC, q)
        while off < store.get_max_offset_in_queue(TOPIC, q):
            r = store.get_message("g", TOPIC, q, off, 32)
            assert r.damaged == 0
            out += [m.body for m in r.messages]
            off = r.next_begin_offset
    return out


def test_repair_and_verify(tmp_path: Path) -> None:
    path = copy(tmp_path)
    # verify, read-only: the broker's records are not property-CRC damage.
    res = CliRunner().invoke(cli_main, ["verify", str(path), "--json"])
    problems = json.loads(res.output)["problems"]
    assert not [p for p in problems if "property CRC" in p["problem"]], problems
    res = CliRunner().invoke(cli_main, ["repair", str(path), "--json"])
    assert res.exit_code == 0, res.output
    with MessageStore(config(path)) as store:
        check_serves_what_rocketmq_serves(store)
    res = CliRunner().invoke(cli_main, ["verify", str(path), "--json"])
    assert res.exit_code == 0, res.output
