"""Bad input at put time: MESSAGE_ILLEGAL refusals (``InvalidMessageError``,
a ``ValueError``; the status with ``check=False``) that write nothing, and
TypeError/ValueError for wrong arguments (docs/format.md §14, §17.1)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from helpers.store_util import commitlog_files, record_len
from rocketstore import InvalidMessageError, Message, MessageStore, PutStatus

OpenStore = Callable[..., MessageStore]
SEG = 4096

BAD_TOPICS = ["../x", "a/b", "", "a" * 128, "a b", "é", "a\x00b", "..", "topic\n"]


def refusal(put: Callable[[], object]) -> PutStatus:
    """The status of a put that must be refused as the caller's fault."""
    with pytest.raises(InvalidMessageError) as raised:
        put()
    assert isinstance(raised.value, ValueError)
    return raised.value.status


def assert_nothing_written(store: MessageStore, store_path: str, max_before: int = 0) -> None:
    assert store.max_phy_offset == max_before
    if max_before == 0:
        assert commitlog_files(store_path) == []


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_illegal_topic_in_empty_store(open_store: OpenStore, store_path: str, topic: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    assert refusal(lambda: store.put(topic, b"x")) is PutStatus.MESSAGE_ILLEGAL
    r = store.put(topic, b"x", check=False)
    assert r.status is PutStatus.MESSAGE_ILLEGAL
    assert not r.ok
    assert r.msg_id == ""  # nothing written: no message id
    assert r.reason is not None and "topic" in r.reason
    assert refusal(lambda: store.put_message(Message(topic, b"x"))) is PutStatus.MESSAGE_ILLEGAL
    msgs = [Message(topic, b"x"), Message(topic, b"y", tags="t")]
    assert refusal(lambda: store.put_messages(msgs)) is PutStatus.MESSAGE_ILLEGAL
    rs = store.put_messages(msgs, check=False)
    assert [x.status for x in rs] == [PutStatus.MESSAGE_ILLEGAL] * 2
    assert_nothing_written(store, store_path)
    assert store.queue_offset_table() == {}


def test_legal_topics(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    for topic in ["a" * 127, "%RETRY%group-1", "A|b_c-9", "x"]:
        r = store.put(topic, b"x")
        assert r.status is PutStatus.PUT_OK, topic
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.topic == topic


@pytest.mark.parametrize("body", ["text", None, 5, [1, 2]])
def test_body_must_be_bytes_like(open_store: OpenStore, store_path: str, body: Any) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    with pytest.raises(TypeError, match="body must be a bytes-like object"):
        store.put("T", body)
    with pytest.raises(TypeError, match="body must be a bytes-like object"):
        Message("T", body)
    assert_nothing_written(store, store_path)


def test_negative_queue_id(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    with pytest.raises(ValueError):
        store.put("T", b"x", queue_id=-1)
    with pytest.raises(ValueError):
        Message("T", b"x", queue_id=-1)
    assert_nothing_written(store, store_path)


def test_body_larger_than_max_message_size(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG, max_message_size=1024)
    assert refusal(lambda: store.put("T", b"x" * 1025)) is PutStatus.MESSAGE_ILLEGAL
    assert refusal(lambda: store.put_message(Message("T", b"x" * 1025))) is (
        PutStatus.MESSAGE_ILLEGAL
    )
    assert_nothing_written(store, store_path)
    r = store.put("T", b"x" * 1024)  # the limit itself is fine
    assert r.status is PutStatus.PUT_OK


@pytest.mark.parametrize(
    "kwargs",
    [
        {"properties": {"": "v"}},
        {"properties": {"k": ""}},
        {"properties": {"k": "a\x01b"}},
        {"properties": {"k": "a\x02b"}},
        {"properties": {"k\x01": "v"}},
        {"properties": {"k\x02": "v"}},
        {"keys": ["has space"]},
        {"keys": ["ok", "bad key"]},
        {"tags": "a\x01b"},
        {"properties": {"ok": "v", "bad": "\x01"}},
    ],
    ids=lambda kw: repr(kw),
)
def test_illegal_properties(open_store: OpenStore, store_path: str, kwargs: dict[str, Any]) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    assert refusal(lambda: store.put("T", b"x", **kwargs)) is PutStatus.MESSAGE_ILLEGAL
    assert refusal(lambda: store.put_message(Message("T", b"x", **kwargs))) is (
        PutStatus.MESSAGE_ILLEGAL
    )
    assert refusal(lambda: store.put_messages([Message("T", b"x", **kwargs)])) is (
        PutStatus.MESSAGE_ILLEGAL
    )
    assert_nothing_written(store, store_path)
    assert store.queue_offset_table() == {}


def test_properties_size_limit(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=1 << 20)
    # 32767 bytes of serialized properties are fine, one more is not; the
    # property CRC's 21 bytes count (as in RocketMQ 5.x).
    fits = {"k": "v" * (32767 - 2 - 21)}
    r = store.put("T", b"", properties=fits)
    assert r.status is PutStatus.PUT_OK
    assert r.wrote_bytes == record_len("T", b"", fits)
    r = store.put("T", b"", properties={"k": "v" * (32767 - 2 - 20)}, check=False)
    assert r.status is PutStatus.PROPERTIES_SIZE_EXCEEDED, r.status
    assert "property CRC" in (r.reason or ""), r.reason
    # Also the caller's fault: an InvalidMessageError (a ValueError).
    assert refusal(lambda: store.put("T", b"", properties={"k": "v" * (32767 - 2 - 20)})) is (
        PutStatus.PROPERTIES_SIZE_EXCEEDED
    )
    r = store.put("T", b"", properties={"k": "v" * (32767 - 1)}, check=False)
    # Over 32767 Java chars: refused up front, as the broker's message check does.
    assert r.status is PutStatus.MESSAGE_ILLEGAL, r.status
    assert "32768 characters" in (r.reason or ""), r.reason
    # Over 32767 UTF-8 bytes but not Java chars: PROPERTIES_SIZE_EXCEEDED (docs/format.md §17.1).
    r = store.put("T", b"", properties={"k": "é" * 20000}, check=False)
    assert r.status is PutStatus.PROPERTIES_SIZE_EXCEEDED


def test_tags_and_tags_property_together(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    with pytest.raises(ValueError):
        store.put("T", b"x", tags="a", properties={"TAGS": "b"})
    with pytest.raises(ValueError):
        Message("T", b"x", tags="a", properties={"TAGS": "b"})
    with pytest.raises(ValueError):
        store.put("T", b"x", keys=["a"], properties={"KEYS": "b"})
    assert_nothing_written(store, store_path)
    # Either one alone is fine and gives the same record.
    r1 = store.put("T", b"x", tags="a")
    r2 = store.put("T", b"x", properties={"TAGS": "a"})
    m1, m2 = (
        store.look_message_by_offset(r1.wrote_offset),
        store.look_message_by_offset(r2.wrote_offset),
    )
    assert m1 is not None and m2 is not None
    assert m1.tags == m2.tags == "a"
    assert m1.tags_code == m2.tags_code


def test_record_too_large_for_segment(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=1024)
    assert refusal(lambda: store.put("T", b"x" * 2000)) is PutStatus.MESSAGE_ILLEGAL
    assert refusal(lambda: store.put_message(Message("T", b"x" * 2000))) is (
        PutStatus.MESSAGE_ILLEGAL
    )
    assert_nothing_written(store, store_path)
    # Also when a file already exists: nothing written, no file wasted.
    r = store.put("T", b"small")
    assert r.ok
    assert refusal(lambda: store.put("T", b"x" * 2000)) is PutStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == r.wrote_bytes
    assert len(commitlog_files(store_path)) == 1


def test_put_messages_skips_rejected_ones(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG, max_message_size=512)
    msgs = [
        Message("T", b"m0", queue_id=1),
        Message("bad/topic", b"m1", queue_id=1),
        Message("T", b"m2", queue_id=1),
        Message("T", b"m3", queue_id=1, properties={"k": "\x01"}),
        Message("T", b"m4", queue_id=1, tags="t"),
        Message("T", b"x" * 513, queue_id=1),
        Message("U", b"m6", queue_id=0),
        Message("T", b"m7", queue_id=1),
    ]
    with pytest.raises(InvalidMessageError) as raised:
        store.put_messages(msgs)
    rs = raised.value.result
    assert isinstance(rs, list)
    assert sorted(raised.value.refused) == [1, 3, 5]
    for i in (1, 3, 5):
        assert f"message {i}: MESSAGE_ILLEGAL" in str(raised.value)
    ok = PutStatus.PUT_OK
    illegal = PutStatus.MESSAGE_ILLEGAL
    assert [r.status for r in rs] == [ok, illegal, ok, illegal, ok, illegal, ok, ok]
    written = [(r, m) for r, m in zip(rs, msgs, strict=True) if r.ok]
    assert [r.queue_offset for r, m in written if m.topic == "T"] == [0, 1, 2, 3]
    assert [r.queue_offset for r, m in written if m.topic == "U"] == [0]
    for prev, cur in itertools.pairwise(written):
        assert cur[0].wrote_offset == prev[0].wrote_offset + prev[0].wrote_bytes
    for r, m in written:
        got = store.look_message_by_offset(r.wrote_offset)
        assert got is not None and got.body == m.body and got.queue_offset == r.queue_offset
    for r in rs:
        if not r.ok:
            assert r.msg_id == "" and r.reason
    assert store.max_phy_offset == sum(r.wrote_bytes for r, _ in written)
    assert store.queue_offset_table() == {("T", 1): 4, ("U", 0): 1}


def test_put_messages_rejects_non_messages(open_store: OpenStore, store_path: str) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    with pytest.raises(TypeError):
        store.put_messages([Message("T", b"x"), ("T", b"y")])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        store.put_message(("T", b"x"))  # type: ignore[arg-type]
    assert_nothing_written(store, store_path)
    assert store.put_messages([]) == []


class _Reversed(list[str]):
    """A list that iterates its own way (backwards)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        return reversed(list(self.copy()))


@pytest.mark.parametrize(("keys", "stored"), [
    (["a", "", "b"], ["a", "b"]),
    (("a", "b"), ["a", "b"]),
    ("a", ["a"]),
    (iter(["a", "b"]), ["a", "b"]),
    ((k for k in ("a", "b")), ["a", "b"]),
    (_Reversed(["a", "b"]), ["b", "a"]),
    ([], []),
])
def test_keys_of_every_kind_store_the_same(open_store: Any, keys: Any,
                                           stored: list[str]) -> None:
    """A list or tuple of keys (read by index), a str, any other iterable,
    and a list subclass iterating its own way, all store their keys in the
    order they give them."""
    store = open_store()
    r = store.put("T", b"x", keys=keys)
    (m,) = store.get_message("g", "T", 0, r.queue_offset, 1).messages
    assert m.keys == stored


@pytest.mark.parametrize("keys", [["a", 1], ("a", None), [b"a"]])
def test_a_key_that_is_not_a_str_is_a_type_error(open_store: Any, keys: Any) -> None:
    store = open_store()
    with pytest.raises(TypeError, match="each key must be str, not"):
        store.put("T", b"x", keys=keys)
    assert store.put("T", b"y").wrote_offset == 0, "nothing was written"
