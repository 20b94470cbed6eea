"""Put and read back through the public API: every MessageExt field, IPv6 hosts,
Java tag hashes, delay conversion (docs/format.md §3.1, §5-§8, §17.3)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from helpers.store_util import expected_msg_id, java_string_hash, record_len
from rocketstore import Message, MessageExt, MessageStore, PutResult, PutStatus
from rocketstore._native import body_crc
from rocketstore._native import java_string_hash as native_java_hash
from rocketstore._native import tags_code as native_tags_code

OpenStore = Callable[..., MessageStore]
SEG = 4096
MSG_ID_V4 = re.compile(r"^[0-9A-F]{32}$")


def check_ext(
    store: MessageStore,
    m: MessageExt,
    r: PutResult,
    *,
    topic: str,
    body: bytes,
    queue_id: int,
    tags: str | None,
    keys: list[str],
    props: dict[str, str],
    flag: int,
    born_ts: tuple[int, int],
    born_host: tuple[str, int],
    store_ts: tuple[int, int],
) -> None:
    """Asserts every field of ``m`` against what was put and what the put returned."""
    assert m.topic == topic
    assert m.queue_id == queue_id
    assert m.queue_offset == r.queue_offset
    assert m.commit_log_offset == r.wrote_offset
    assert m.store_size == r.wrote_bytes
    assert m.body == body
    assert m.stored_body == body
    assert m.body_crc == body_crc(body)
    assert m.flag == flag
    assert m.sys_flag == 0
    assert m.tags == tags
    assert m.keys == keys
    expected_props = dict(props)
    if tags is not None:
        expected_props["TAGS"] = tags
    if keys:
        expected_props["KEYS"] = " ".join(keys)
    assert m.properties == expected_props
    assert born_ts[0] <= m.born_timestamp <= born_ts[1]
    assert m.born_host == born_host
    assert store_ts[0] <= m.store_timestamp <= store_ts[1]
    assert m.store_timestamp == r.store_timestamp
    assert m.store_host == store.config.store_host
    assert m.reconsume_times == 0
    assert m.prepared_transaction_offset == 0
    assert m.msg_id == r.msg_id
    assert r.msg_id is not None and MSG_ID_V4.match(r.msg_id)
    assert r.msg_id == expected_msg_id(store.config.store_host, r.wrote_offset)
    assert len(m.record_bytes()) == m.store_size


def test_round_trip_every_field(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    assert store.config.store_host == ("127.0.0.1", 10911)
    cases: list[tuple[PutResult, dict[str, object]]] = []

    # 1. put(): explicit born timestamp and host, tags, keys, properties, flag.
    t0 = int(time.time() * 1000)
    r = store.put(
        "orders",
        b"hello",
        3,
        tags="paid",
        keys=["k1", "k2"],
        properties={"p": "q", "x": "y z"},
        flag=7,
        born_timestamp=1_700_000_000_000,
        born_host=("10.0.0.1", 54321),
    )
    t1 = int(time.time() * 1000)
    assert r.status is PutStatus.PUT_OK and r.ok
    assert (r.wrote_offset, r.queue_offset) == (0, 0)
    assert r.wrote_bytes == record_len(
        "orders", b"hello", {"p": "q", "x": "y z", "TAGS": "paid", "KEYS": "k1 k2"}
    )
    cases.append(
        (
            r,
            dict(
                topic="orders",
                body=b"hello",
                queue_id=3,
                tags="paid",
                keys=["k1", "k2"],
                props={"p": "q", "x": "y z"},
                flag=7,
                born_ts=(1_700_000_000_000, 1_700_000_000_000),
                born_host=("10.0.0.1", 54321),
                store_ts=(t0, t1),
            ),
        )
    )

    # 2. put_message(): defaults (born timestamp = now, born host 127.0.0.1:0), empty body.
    t0 = int(time.time() * 1000)
    r = store.put_message(Message(topic="orders", body=b"", queue_id=3))
    t1 = int(time.time() * 1000)
    assert r.status is PutStatus.PUT_OK
    assert r.wrote_offset == cases[0][0].wrote_offset + cases[0][0].wrote_bytes
    assert r.queue_offset == 1
    assert r.wrote_bytes == record_len("orders", b"")
    cases.append(
        (
            r,
            dict(
                topic="orders",
                body=b"",
                queue_id=3,
                tags=None,
                keys=[],
                props={},
                flag=0,
                born_ts=(t0, t1),
                born_host=("127.0.0.1", 0),
                store_ts=(t0, t1),
            ),
        )
    )

    # 3. put_messages(): several topics/queues, non-ASCII body and tags, keys as str.
    batch = [
        Message(
            "orders",
            bytes(range(256)),
            queue_id=3,
            tags="中文",
            keys="only",
            born_host=("192.168.1.2", 1),
        ),
        Message("payments", b"\x00" * 300, queue_id=0, properties={"k": "v"}, flag=-1),
        Message("orders", "héllo".encode(), queue_id=1, keys=["a", "b", "c"]),
    ]
    t0 = int(time.time() * 1000)
    rs = store.put_messages(batch)
    t1 = int(time.time() * 1000)
    assert [x.status for x in rs] == [PutStatus.PUT_OK] * 3
    assert [x.queue_offset for x in rs] == [2, 0, 0]
    for prev, cur in zip([cases[1][0], *rs], rs, strict=False):
        assert cur.wrote_offset == prev.wrote_offset + prev.wrote_bytes
    cases += [
        (
            rs[0],
            dict(
                topic="orders",
                body=bytes(range(256)),
                queue_id=3,
                tags="中文",
                keys=["only"],
                props={},
                flag=0,
                born_ts=(t0, t1),
                born_host=("192.168.1.2", 1),
                store_ts=(t0, t1),
            ),
        ),
        (
            rs[1],
            dict(
                topic="payments",
                body=b"\x00" * 300,
                queue_id=0,
                tags=None,
                keys=[],
                props={"k": "v"},
                flag=-1,
                born_ts=(t0, t1),
                born_host=("127.0.0.1", 0),
                store_ts=(t0, t1),
            ),
        ),
        (
            rs[2],
            dict(
                topic="orders",
                body="héllo".encode(),
                queue_id=1,
                tags=None,
                keys=["a", "b", "c"],
                props={},
                flag=0,
                born_ts=(t0, t1),
                born_host=("127.0.0.1", 0),
                store_ts=(t0, t1),
            ),
        ),
    ]

    # Enough further messages to roll over several 4 KiB segments.
    for i in range(40):
        r = store.put("bulk", bytes([i]) * (200 + i), queue_id=i % 2, tags=f"t{i}")
        assert r.status is PutStatus.PUT_OK
        cases.append(
            (
                r,
                dict(
                    topic="bulk",
                    body=bytes([i]) * (200 + i),
                    queue_id=i % 2,
                    tags=f"t{i}",
                    keys=[],
                    props={},
                    flag=0,
                    born_ts=(0, 2**62),
                    born_host=("127.0.0.1", 0),
                    store_ts=(r.store_timestamp, r.store_timestamp),
                ),
            )
        )
    assert store.max_phy_offset > 2 * SEG

    for r, want in cases:
        by_offset = store.look_message_by_offset(r.wrote_offset)
        assert by_offset is not None
        check_ext(store, by_offset, r, **want)  # type: ignore[arg-type]
        assert r.msg_id is not None
        by_id = store.look_message_by_id(r.msg_id)
        assert by_id is not None
        check_ext(store, by_id, r, **want)  # type: ignore[arg-type]
        assert by_id.record_bytes() == by_offset.record_bytes()

    assert store.queue_offset_table() == {
        ("orders", 3): 3,
        ("orders", 1): 1,
        ("payments", 0): 1,
        ("bulk", 0): 20,
        ("bulk", 1): 20,
    }


def test_look_up_misses(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    r = store.put("T", b"abc")
    assert store.look_message_by_offset(r.wrote_offset + 1) is None  # not a record start
    assert store.look_message_by_offset(store.max_phy_offset) is None
    assert store.look_message_by_offset(10 * SEG) is None
    assert store.look_message_by_offset(-1) is None
    # Right offset, different store host: not this store's message.
    assert store.look_message_by_id(expected_msg_id(("10.1.1.1", 10911), 0)) is None
    with pytest.raises(ValueError):
        store.look_message_by_id("not-a-msg-id")


def test_ipv6_hosts(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG, store_host=("::1", 10911))
    rs = [
        store.put("v6", b"body-%d" % i, born_host=("2001:db8::1", 1234), tags="x") for i in range(3)
    ]
    r4 = store.put("v6", b"v4 born", born_host=("10.0.0.7", 99))
    for r in [*rs, r4]:
        assert r.status is PutStatus.PUT_OK
        assert r.msg_id is not None and re.fullmatch(r"[0-9A-F]{56}", r.msg_id)
        assert r.msg_id == expected_msg_id(("::1", 10911), r.wrote_offset)
    assert rs[0].wrote_bytes == record_len("v6", b"body-0", {"TAGS": "x"}, ipv6_hosts=2)
    assert r4.wrote_bytes == record_len("v6", b"v4 born", ipv6_hosts=1)

    def check(s: MessageStore) -> None:
        for i, r in enumerate(rs):
            assert r.msg_id is not None
            m = s.look_message_by_id(r.msg_id)
            assert m is not None
            assert m.sys_flag & 0x10 and m.sys_flag & 0x20
            assert m.born_host == ("2001:db8::1", 1234)
            assert m.store_host == ("::1", 10911)
            assert m.body == b"body-%d" % i
            assert m.msg_id == r.msg_id
            assert m.commit_log_offset == r.wrote_offset
        assert r4.msg_id is not None
        m = s.look_message_by_id(r4.msg_id)
        assert m is not None
        assert m.sys_flag & 0x30 == 0x20
        assert m.born_host == ("10.0.0.7", 99)

    check(store)
    store.shutdown()
    # The IPv6 records survive a reopen (recovery must parse the 20-byte host form).
    check(open_store(path=store_path, store_host=("::1", 10911)))


#: Every attribute of ``MessageExt`` (its methods aside).
EXT_ATTRS = sorted(a for a in vars(MessageExt) if not a.startswith("_") and a != "record_bytes")


def test_message_ext_reads_agree(open_store: OpenStore) -> None:
    """A message reads the same from a pull (records sharing one buffer),
    a lookup by id or offset (its own copy) and a query by key, for each
    pair of host IP versions (the fields after the born host move)."""
    store = open_store(mapped_file_size_commit_log=1 << 20, store_host=("::1", 10911))
    hosts = [("2001:db8::1", 1234), ("10.0.0.7", 99)]
    rs = [store.put("mixed", f"body-{i}".encode(), 0, tags=f"t{i}", keys=[f"k{i}"],
                    born_host=hosts[i % 2], flag=i) for i in range(6)]
    store.flush()
    pulled = store.get_message("g", "mixed", 0, 0, 32).messages
    assert len(pulled) == len(rs)
    for i, (m, r) in enumerate(zip(pulled, rs, strict=True)):
        assert r.msg_id is not None
        others = [store.look_message_by_id(r.msg_id), store.look_message_by_offset(r.wrote_offset),
                  *store.query_message("mixed", f"k{i}")]
        want = {a: getattr(m, a) for a in EXT_ATTRS}
        assert want["born_host"] == hosts[i % 2] and want["flag"] == i
        assert want["store_timestamp"] == r.store_timestamp
        for o in others:
            assert o is not None
            assert {a: getattr(o, a) for a in EXT_ATTRS} == want
            assert repr(o) == repr(m)
            assert o.record_bytes() == m.record_bytes()


def test_message_ext_attributes_refuse_other_objects(open_store: OpenStore) -> None:
    """The attributes are descriptors of the class: each has a docstring and
    refuses to read an object of another type."""
    store = open_store(mapped_file_size_commit_log=SEG)
    r = store.put("T", b"abc", 0)
    m = store.look_message_by_offset(r.wrote_offset)
    assert len(EXT_ATTRS) == 21
    for a in EXT_ATTRS:
        d = vars(MessageExt)[a]
        assert d.__doc__, a
        assert d.__get__(m, MessageExt) == getattr(m, a)
        for other in (object(), r, b"abc"):
            with pytest.raises(TypeError):
                d.__get__(other, type(other))
        with pytest.raises(AttributeError):
            setattr(m, a, 1)


def test_java_string_hash_known_values() -> None:
    assert native_java_hash("中文") == 646394
    assert native_java_hash("TagA") == 2598919
    assert native_java_hash("TAG1") == 2567159
    assert native_java_hash("polygenelubricants") == -2147483648
    assert native_java_hash("") == 0
    for s in ["中文", "TagA", "polygenelubricants", "Aa", "BB"]:
        assert java_string_hash(s) == native_java_hash(s)
    assert native_java_hash("Aa") == native_java_hash("BB")


@pytest.mark.parametrize("s", ["😀", "a😀b", "🎉🎉🎉🎉🎉🎉🎉🎉", "𝄞 clef ü"])
def test_java_string_hash_over_utf16_surrogates(s: str) -> None:
    expected = java_string_hash(s)
    assert native_java_hash(s) == expected
    assert native_tags_code(s) == expected
    # Hashing code points instead of UTF-16 units would give something else.
    naive = 0
    for ch in s:
        naive = (31 * naive + ord(ch)) & 0xFFFFFFFF
    naive = naive - (1 << 32) if naive >= 1 << 31 else naive
    assert expected != naive


def test_tags_code_of_stored_messages(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    for tags, code in [
        ("中文", 646394),
        ("TagA", 2598919),
        ("polygenelubricants", -2147483648),
        ("😀x", java_string_hash("😀x")),
        ("A||B", java_string_hash("A||B")),
        (None, 0),
    ]:
        r = store.put("T", b"x", tags=tags)
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None
        assert m.tags == tags
        assert m.tags_code == code
    assert native_tags_code(None) == 0
    assert native_tags_code("") == 0


def test_delay_level_goes_to_schedule_topic(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    r = store.put("T", b"later", queue_id=5, delay_level=3, tags="tg", keys=["k"])
    assert r.status is PutStatus.PUT_OK
    assert r.queue_offset == 0
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None
    assert m.topic == "SCHEDULE_TOPIC_XXXX"
    assert m.queue_id == 2
    assert m.properties == {
        "TAGS": "tg",
        "KEYS": "k",
        "DELAY": "3",
        "REAL_TOPIC": "T",
        "REAL_QID": "5",
    }
    assert m.tags == "tg" and m.keys == ["k"]
    assert m.body == b"later"

    r2 = store.put_message(Message("T", b"again", queue_id=5, delay_level=3))
    m2 = store.look_message_by_offset(r2.wrote_offset)
    assert m2 is not None
    assert (m2.topic, m2.queue_id, m2.queue_offset) == ("SCHEDULE_TOPIC_XXXX", 2, 1)
    assert m2.properties == {"DELAY": "3", "REAL_TOPIC": "T", "REAL_QID": "5"}

    # A DELAY property behaves like delay_level=.
    r3 = store.put("T", b"prop", queue_id=5, properties={"DELAY": "3"})
    m3 = store.look_message_by_offset(r3.wrote_offset)
    assert m3 is not None
    assert (m3.topic, m3.queue_id, m3.queue_offset) == ("SCHEDULE_TOPIC_XXXX", 2, 2)
    assert m3.properties["REAL_TOPIC"] == "T" and m3.properties["REAL_QID"] == "5"

    table = store.queue_offset_table()
    assert table[("SCHEDULE_TOPIC_XXXX", 2)] == 3
    assert ("T", 5) not in table

    # delay_level and a DELAY property together are a contradiction.
    with pytest.raises(ValueError):
        store.put("T", b"x", delay_level=2, properties={"DELAY": "3"})


def test_delay_level_above_max_is_clamped(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    r = store.put("T", b"x", queue_id=1, delay_level=99)
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None
    assert (m.topic, m.queue_id) == ("SCHEDULE_TOPIC_XXXX", 17)
    assert m.properties["REAL_QID"] == "1"
