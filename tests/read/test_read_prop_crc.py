"""Damaged metadata is never served: the ``__CRC32#`` property (5.x format).

Every record the store writes (with ``enabled_append_prop_crc``, the
default) ends with the property ``__CRC32#``: the CRC32 of the record's
first TOTALSIZE - 20 bytes, written as ten decimal digits, least significant
first (docs/format.md "Property CRC"). The checkpoint's mark area records
which CommitLog ranges were written that way; inside them a record whose
property CRC is missing or wrong is damaged, exactly like a record whose body
CRC is wrong: pulls and consumers skip and count it, lookups raise
``CorruptedError``, ``verify`` reports it, ``repair`` skips it and recovery
treats it as damage. Outside them (RocketMQ 4.x, older rocketstore, a
broker's delayed and retry copies carrying a stale property) the property is
not checked. Readers never show it among a message's properties.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.presets import SEG, SMALL
from helpers.records import encode_record
from rocketstore import (
    CorruptedError,
    GetStatus,
    InvalidMessageError,
    MessageStore,
    PutResult,
    PutStatus,
    StoreConfig,
)
from rocketstore.cli import main as cli_main

TOPIC = "topic"
N = 600
BODY = 1000
#: Body position inside a record with IPv4 hosts (after the body length at 84).
BODY_AT = 88
#: Victim i has FLIPS[i] bytes of its properties flipped; all in old segments.
VICTIMS = {3: 1, 70: 2, 150: 3, 222: 4}
CRC_NAME = b"__CRC32#"


def body_of(i: int, size: int = BODY) -> bytes:
    return (b"m%05d-" % i).ljust(size, b"x")


def segment(path: Path, off: int, seg: int = SEG) -> Path:
    return path / "commitlog" / f"{off // seg * seg:020d}"


def read_record(path: Path, r: PutResult, seg: int = SEG) -> bytes:
    return record_at(path, r.wrote_offset, seg)


def props_range(rec: bytes) -> tuple[int, int]:
    """Where the properties of an IPv4, V1 record lie."""
    body_len = struct.unpack_from(">i", rec, 84)[0]
    p = BODY_AT + body_len
    p += 1 + rec[p]
    n = struct.unpack_from(">h", rec, p)[0]
    return p + 2, p + 2 + n


def flip_property_bytes(path: Path, r: PutResult, n: int, seg: int = SEG) -> None:
    """Flips the case of ``n`` letters at the start of the first property
    name: the properties stay well-formed pairs, only their meaning changes."""
    rec = read_record(path, r, seg)
    start, _ = props_range(rec)
    assert rec[start:start + n].isalpha(), rec[start:start + n]
    with open(segment(path, r.wrote_offset, seg), "r+b") as f:
        f.seek(r.wrote_offset % seg + start)
        f.write(bytes(b ^ 0x20 for b in rec[start:start + n]))


def crc_digits(value: int) -> bytes:
    """The 10 digits RocketMQ 5.x writes: least significant first."""
    return bytes(ord("0") + value // 10**k % 10 for k in range(10))


def check_trailer(rec: bytes) -> None:
    """``rec`` ends with a correct ``__CRC32#`` property, as 5.3.1 reads it."""
    start, end = props_range(rec)
    assert end == len(rec)
    trailer = rec[-20:]
    assert trailer[:9] == CRC_NAME + b"\x01" and trailer[-1:] == b"\x02", trailer
    if end - start > 20:
        assert rec[-21] == 2, "the property before the CRC must end with 0x02"
    digits = trailer[9:19]
    # RocketMQ 5.3.1's reading: digits from the last to the first.
    value = 0
    for ch in reversed(digits):
        value = value * 10 + (ch - ord("0"))
    assert value == zlib.crc32(rec[:-20]) & 0x7FFFFFFF
    assert digits == crc_digits(value)


def java_properties(raw: bytes) -> dict[bytes, bytes]:
    """RocketMQ's ``string2messageProperties`` (4.9.8 and 5.3.1 alike)."""
    out = {}
    for seg in raw.split(b"\x02"):
        i = seg.find(b"\x01")
        if len(seg) >= 3 and 0 < i < len(seg) - 1:
            out[seg[:i]] = seg[i + 1:]
    return out


# -- the trailer itself ------------------------------------------------------------------


def test_digits_are_written_least_significant_first() -> None:
    # Hand-computed: 1234567890 written backwards; 7 padded with zeros after it.
    assert crc_digits(1234567890) == b"0987654321"
    assert crc_digits(7) == b"7000000000"
    assert crc_digits(2147483647) == b"7463847412"


def record_at(path: Path, off: int, seg: int = SEG) -> bytes:
    with open(segment(path, off, seg), "rb") as f:
        f.seek(off % seg)
        size = struct.unpack(">i", f.read(4))[0]
        f.seek(off % seg)
        return f.read(size)


def test_every_writer_appends_a_correct_property(store_path: str) -> None:
    import pyarrow as pa

    path = Path(store_path)
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as s:
        one = s.put(TOPIC, b"one", tags="a", keys=["k1"], properties={"x": "1"})
        bare = s.put(TOPIC, b"bare")
        batch = s.put_batch(TOPIC, [b"b1", b"b2"], keys=[["k2"], None],
                            properties=[{"y": "2"}, None], return_offsets=True)
        many = s.put_messages([])
        delayed = s.put(TOPIC, b"delayed", properties={"DELAY": "1"})
        before = s.max_phy_offset
        table = pa.table({"topic": [TOPIC, TOPIC], "body": [b"a1", b"a2"],
                          "tags": ["ta", None]})
        appended = s._n.put_arrow(pa.RecordBatchReader.from_batches(
            table.schema, table.to_batches()), [("z", "3")])
        assert appended == (2, None, None)
        assert one.ok and bare.ok and batch.ok and delayed.ok and many == []
        assert batch.offsets is not None
        offsets = [one.wrote_offset, bare.wrote_offset, *batch.offsets, delayed.wrote_offset]
        arrow_first = record_at(path, before)
        offsets += [before, before + len(arrow_first)]
        for off in offsets:
            check_trailer(record_at(path, off))
        # A record without other properties holds the 20 bytes alone.
        start, end = props_range(record_at(path, bare.wrote_offset))
        assert end - start == 20
        # Readers do not show the property.
        for off in offsets:
            m = s.look_message_by_offset(off)
            assert m is not None and "__CRC32#" not in m.properties, m.properties
        m = s.look_message_by_offset(one.wrote_offset)
        assert m is not None and m.properties == {"x": "1", "TAGS": "a", "KEYS": "k1"}
        assert m.tags == "a" and m.keys == ["k1"]
        # 4.9.8's parser sees one more property, and nothing else changes.
        rec = record_at(path, one.wrote_offset)
        props = java_properties(rec[slice(*props_range(rec))])
        assert props.pop(CRC_NAME).isdigit()
        assert props == {b"x": b"1", b"TAGS": b"a", b"KEYS": b"k1"}
        # The body CRC is as before.
        assert struct.unpack_from(">i", rec, 8)[0] == zlib.crc32(b"one") & 0x7FFFFFFF
        # The delivered copy of the delayed message carries a fresh one.
        delivered = None
        for _ in range(100):
            g = s.get_message("g", TOPIC, 0, 6, 1)
            if g.messages:
                delivered = g.messages[0]
                break
            time.sleep(0.1)
        assert delivered is not None and delivered.body == b"delayed"
        assert "__CRC32#" not in delivered.properties
        check_trailer(record_at(path, delivered.commit_log_offset))
        # The parked record's properties hold exactly one property CRC.
        assert record_at(path, delayed.wrote_offset).count(CRC_NAME) == 1
        assert record_at(path, delivered.commit_log_offset).count(CRC_NAME) == 1


def test_producers_cannot_set_the_property(store_path: str) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as s:
        with pytest.raises(InvalidMessageError, match="__CRC32#"):
            s.put(TOPIC, b"x", properties={"__CRC32#": "0000000000"})
        r = s.put(TOPIC, b"x", properties={"__CRC32#": "0000000000"}, check=False)
        assert r.status is PutStatus.MESSAGE_ILLEGAL and "__CRC32#" in (r.reason or "")
        with pytest.raises(InvalidMessageError, match="__CRC32#"):
            s.put_batch(TOPIC, [b"x"], properties=[{"__CRC32#": "1"}])
        b = s.put_batch(TOPIC, [b"x"], properties=[{"__CRC32#": "1"}], check=False)
        assert b.status is PutStatus.MESSAGE_ILLEGAL and "__CRC32#" in (b.reason or "")
        assert s.max_phy_offset == 0


def test_setting_off_writes_no_property(store_path: str) -> None:
    path = Path(store_path)
    with MessageStore(StoreConfig(store_path=store_path, enabled_append_prop_crc=False,
                                  **SMALL)) as s:
        r = s.put(TOPIC, b"one", tags="a")
        start, end = props_range(read_record(path, r))
        assert read_record(path, r)[start:end] == b"TAGS\x01a"


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(props=st.dictionaries(
    st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
            min_size=1, max_size=8).filter(lambda k: k not in ("__CRC32#", "TAGS", "KEYS")),
    st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
            min_size=1, max_size=12),
    max_size=5))
def test_round_trip_with_random_properties(tmp_path_factory: pytest.TempPathFactory,
                                           props: dict[str, str]) -> None:
    path = tmp_path_factory.mktemp("rt")
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as s:
        r = s.put(TOPIC, b"body", properties=props or None)
        assert r.ok
        check_trailer(read_record(path, r))
        m = s.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.properties == props
        g = s.get_message("g", TOPIC, 0, 0, 1)
        assert g.damaged == 0 and g.messages[0].properties == props


# -- damaged properties -------------------------------------------------------------------


@pytest.fixture
def flipped(store_path: str) -> Iterator[tuple[Path, list[PutResult]]]:
    path = Path(store_path)
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as s:
        acked = [
            s.put(TOPIC, body_of(i), queue_id=i % 2, tags=f"t{i % 3}", keys=[f"key{i}"])
            for i in range(N)
        ]
    assert all(r.ok for r in acked)
    n_files = len(list((path / "commitlog").iterdir()))
    for i, n in VICTIMS.items():
        assert acked[i].wrote_offset // SEG < n_files - 3, "a victim inside the recovery scan"
        flip_property_bytes(path, acked[i], n)
    yield path, acked


def check_reads(store: MessageStore, acked: list[PutResult]) -> None:
    for i in VICTIMS:
        r = acked[i]
        for look, arg in (
            (store.look_message_by_offset, r.wrote_offset),
            (store.look_message_by_id, r.msg_id),
        ):
            with pytest.raises(CorruptedError, match=f"offset {r.wrote_offset}"):
                look(arg)
        # The index still points at the record: the lookup names it.
        with pytest.raises(CorruptedError, match=f"offset {r.wrote_offset}"):
            store.query_message(TOPIC, f"key{i}")
    for i in (0, 4, 69, 71, N - 1):
        m = store.look_message_by_offset(acked[i].wrote_offset)
        assert m is not None and m.tags == f"t{i % 3}" and m.keys == [f"key{i}"]
    for q in (0, 1):
        offset, served, damaged = 0, [], 0
        n = store.get_max_offset_in_queue(TOPIC, q)
        while offset < n:
            g = store.get_message("g", TOPIC, q, offset, 9)
            for m in g.messages:
                i = int(m.body[1:6])
                assert m.tags == f"t{i % 3}" and m.keys == [f"key{i}"], (i, m.properties)
                served.append(i)
            damaged += g.damaged
            offset = g.next_begin_offset
        assert served == [i for i in range(q, N, 2) if i not in VICTIMS]
        assert damaged == sum(1 for i in VICTIMS if i % 2 == q)
    # The group's one consumer: every queue is its own from the start (the
    # loop ends at the first empty poll).
    with store.consumer("c", TOPIC, exclusive=True) as consumer:
        got = []
        while batch := consumer.poll(timeout=0.5, max_messages=500):
            got += batch
        assert consumer.damaged == len(VICTIMS)
    assert sorted(int(m.body[1:6]) for m in got) == [i for i in range(N) if i not in VICTIMS]


def test_flipped_property_bytes_are_never_served(
    flipped: tuple[Path, list[PutResult]]
) -> None:
    path, acked = flipped
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as store:
        check_reads(store, acked)


def test_flipped_property_bytes_are_never_served_read_only(
    flipped: tuple[Path, list[PutResult]]
) -> None:
    path, acked = flipped
    with MessageStore(StoreConfig(store_path=str(path), **SMALL), read_only=True) as store:
        check_reads(store, acked)


def test_verify_reports_flipped_property_bytes(flipped: tuple[Path, list[PutResult]]) -> None:
    path, acked = flipped
    r = CliRunner().invoke(cli_main, ["verify", str(path), "--json"])
    assert r.exit_code == 1, r.output
    out = json.loads(r.output)
    found = {p["offset"]: p["problem"] for p in out["problems"]}
    for i in VICTIMS:
        assert "property CRC" in found.get(acked[i].wrote_offset, ""), (i, found)


BIG: dict[str, Any] = {"mapped_file_size_commit_log": 1 << 20,
                       "mapped_file_size_consume_queue": 20000, "max_index_num": 8000}


def test_recovery_and_repair_treat_flipped_property_bytes_as_damage(tmp_path: Path) -> None:
    path = tmp_path / "s"
    cfg = StoreConfig(store_path=str(path), **BIG)
    with MessageStore(cfg) as s:
        acked = [s.put(TOPIC, body_of(i, 100), queue_id=i % 2, keys=[f"key{i}"])
                 for i in range(3000)]
    for n in (1, 2, 3, 4):
        victim = acked[11]
        flip_property_bytes(path, victim, n, seg=1 << 20)
        with pytest.raises(CorruptedError, match=f"offset {victim.wrote_offset}"):
            MessageStore(cfg).start()
        flip_property_bytes(path, victim, n, seg=1 << 20)  # flipped back
    flip_property_bytes(path, acked[11], 4, seg=1 << 20)
    r = CliRunner().invoke(cli_main, ["repair", str(path), "--json"])
    assert r.exit_code == 0, r.output
    assert [d["offset"] for d in json.loads(r.output)["damaged"]] == [acked[11].wrote_offset]
    with MessageStore(cfg) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "normal" and rep.bytes_truncated == 0
        assert store.max_phy_offset == acked[-1].wrote_offset + acked[-1].wrote_bytes
        assert store.get_message("g", TOPIC, 1, acked[11].queue_offset, 1).damaged == 1
        for i in (10, 12, 2999):
            m = store.look_message_by_offset(acked[i].wrote_offset)
            assert m is not None and m.body == body_of(i, 100)


# -- outside the marked ranges ---------------------------------------------------------------


def stale_crc_properties(rest: bytes) -> bytes:
    """What a RocketMQ 4.9.8 broker writes in a retry copy: the original's
    property, copied (stale), somewhere among the others."""
    return b"__CRC32#\x011234567890\x02" + rest + b"\x02"


def test_stale_property_outside_marked_ranges_is_served(tmp_path: Path) -> None:
    path = tmp_path / "s"
    old = StoreConfig(store_path=str(path), enabled_append_prop_crc=False, **SMALL)
    with MessageStore(old) as s:
        acked = [s.put(TOPIC, body_of(i, 100), keys=[f"key{i}"]) for i in range(20)]
    # Record 5 as a 4.9.8 broker would have written its retry copy.
    v = acked[5]
    props = stale_crc_properties(b"KEYS\x01key5")
    body = body_of(5, 100)[: v.wrote_bytes - 91 - len(TOPIC) - len(props)]
    rec = encode_record(TOPIC.encode(), body, phy=v.wrote_offset, queue_offset=v.queue_offset,
                        properties=props)
    assert len(rec) == v.wrote_bytes
    with open(segment(path, v.wrote_offset), "r+b") as f:
        f.seek(v.wrote_offset)
        f.write(rec)
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as s:
        more = [s.put(TOPIC, body_of(i, 100), keys=[f"key{i}"]) for i in range(20, 30)]
        m = s.look_message_by_offset(v.wrote_offset)
        assert m is not None and m.body == body and m.keys == ["key5"]
        assert "__CRC32#" not in m.properties
        g = s.get_message("g", TOPIC, 0, 0, 64)
        assert g.status is GetStatus.FOUND and g.damaged == 0 and len(g.messages) == 30
        for r in more:
            check_trailer(read_record(path, r))
    r = CliRunner().invoke(cli_main, ["verify", str(path), "--json"])
    assert r.exit_code == 0, r.output
    # The records written with the property are checked after a reopen.
    flip_property_bytes(path, more[3], 2)
    with MessageStore(StoreConfig(store_path=str(path), **SMALL), read_only=True) as s:
        with pytest.raises(CorruptedError):
            s.look_message_by_offset(more[3].wrote_offset)
        assert s.look_message_by_offset(v.wrote_offset) is not None


def crc_ranges(path: Path) -> list[tuple[int, int]]:
    """The property-CRC ranges block of the checkpoint (docs/format.md §11)."""
    raw = (path / "checkpoint").read_bytes()
    block = raw[3072:]
    assert block[:8] == b"RSPCRC01"
    n = struct.unpack_from(">i", block, 8)[0]
    crc = struct.unpack_from(">I", block, 12)[0]
    assert crc == zlib.crc32(block[:12] + block[16:16 + 16 * n])
    return [struct.unpack_from(">qq", block, 16 + 16 * i) for i in range(n)]


def test_ranges_follow_who_wrote_what(tmp_path: Path) -> None:
    """rocketstore, then a writer without the property (as a broker), then
    rocketstore again: two ranges; only records inside them are checked."""
    path = tmp_path / "s"

    def write(n: int, first: int, **kw: Any) -> list[PutResult]:
        with MessageStore(StoreConfig(store_path=str(path), **SMALL, **kw)) as s:
            return [s.put(TOPIC, body_of(i, 50), keys=[f"key{i}"])
                    for i in range(first, first + n)]

    a = write(10, 0)
    end_a = a[-1].wrote_offset + a[-1].wrote_bytes
    assert crc_ranges(path) == [(0, end_a)]
    # Reopened where it ended: the same range goes on.
    a += write(5, 10)
    end_a = a[-1].wrote_offset + a[-1].wrote_bytes
    assert crc_ranges(path) == [(0, end_a)]
    b = write(10, 15, enabled_append_prop_crc=False)
    c = write(10, 25)
    end_c = c[-1].wrote_offset + c[-1].wrote_bytes
    assert crc_ranges(path) == [(0, end_a), (c[0].wrote_offset, end_c)]
    assert b[0].wrote_offset == end_a and c[0].wrote_offset > end_a
    for r in (a[3], b[3], c[3]):
        flip_property_bytes(path, r, 3)
    with MessageStore(StoreConfig(store_path=str(path), **SMALL), read_only=True) as s:
        for r in (a[3], c[3]):
            with pytest.raises(CorruptedError, match=f"offset {r.wrote_offset}"):
                s.look_message_by_offset(r.wrote_offset)
        # Outside the ranges the structural checks alone apply.
        m = s.look_message_by_offset(b[3].wrote_offset)
        assert m is not None and m.body == body_of(18, 50)
        offset, served, damaged = 0, 0, 0
        while offset < 35:
            g = s.get_message("g", TOPIC, 0, offset, 16)
            served += len(g.messages)
            damaged += g.damaged
            offset = g.next_begin_offset
        assert (served, damaged) == (33, 2)


def test_arrow_reads_skip_damaged_properties_and_hide_the_property(tmp_path: Path) -> None:
    import pyarrow as pa

    path = tmp_path / "s"
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as s:
        acked = [s.put(TOPIC, body_of(i, 50), tags=f"t{i}", properties={"prop": str(i)})
                 for i in range(10)]
    flip_property_bytes(path, acked[4], 2)
    # The CRC check at open would stop the scan at the damage; without it the
    # store reads on, and the Arrow reads check each record themselves.
    cfg = StoreConfig(store_path=str(path), check_crc_on_recover=False, **SMALL)
    with MessageStore(cfg, read_only=True) as ro:
        for stream in (ro._arrow_stream(TOPIC, 0), ro._arrow_stream()):
            table = pa.RecordBatchReader.from_stream(stream).read_all()
            offsets = table.column("commit_log_offset").to_pylist()
            assert offsets == [r.wrote_offset for i, r in enumerate(acked) if i != 4]
            assert stream.skipped_corrupt == 1
            props = [dict(p) for p in table.column("properties").to_pylist()]
            assert props == [{"prop": str(i), "TAGS": f"t{i}"} for i in range(10) if i != 4]
