"""One put rule, one refusal: the same bad message gets the same status and
the same reason whether it is put alone (``put``, ``put_message``), in a
batch (``put_batch``, whose reason names the message's index first) or
appended as an Arrow row (the Spark writer's path), and the Arrow check
that runs before a Spark write's first append. The engine keeps every
put rule in one place; this pins that the puts use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rocketstore import InvalidMessageError, Message, MessageStore, PutStatus

OpenStore = Callable[..., MessageStore]
SEG = 4096
MAX = 1024

# (put arguments of one message, the status it gets)
BAD: list[tuple[dict[str, Any], PutStatus]] = [
    ({"body": b"x" * (MAX + 1)}, PutStatus.MESSAGE_ILLEGAL),
    ({"tags": ""}, PutStatus.MESSAGE_ILLEGAL),
    ({"tags": "a\x01b"}, PutStatus.MESSAGE_ILLEGAL),
    ({"keys": ["has space"]}, PutStatus.MESSAGE_ILLEGAL),
    ({"keys": ["a\x02b"]}, PutStatus.MESSAGE_ILLEGAL),
    ({"properties": {"": "v"}}, PutStatus.MESSAGE_ILLEGAL),
    ({"properties": {"k": ""}}, PutStatus.MESSAGE_ILLEGAL),
    ({"properties": {"k": "a\x02b"}}, PutStatus.MESSAGE_ILLEGAL),
    ({"properties": {"__CRC32#": "1"}}, PutStatus.MESSAGE_ILLEGAL),
    ({"properties": {"DELAY": "soon"}}, PutStatus.MESSAGE_ILLEGAL),
    # Over 32,767 characters: MESSAGE_ILLEGAL; under it in characters but
    # over it in bytes: PROPERTIES_SIZE_EXCEEDED (RocketMQ's two checks).
    ({"properties": {"k": "v" * 40000}}, PutStatus.MESSAGE_ILLEGAL),
    ({"properties": {"k": "é" * 20000}}, PutStatus.PROPERTIES_SIZE_EXCEEDED),
    # A body within max_message_size whose record a segment cannot hold.
    ({"body": b"x" * (SEG - 40), "max_message_size": SEG}, PutStatus.MESSAGE_ILLEGAL),
]

# Rules of the topic and queue, which a batch shares: its reason names no index.
BAD_TOPIC: list[tuple[str, PutStatus]] = [
    ("orders.v1", PutStatus.MESSAGE_ILLEGAL),
    ("", PutStatus.MESSAGE_ILLEGAL),
    ("a" * 128, PutStatus.MESSAGE_ILLEGAL),
    ("a b", PutStatus.MESSAGE_ILLEGAL),
    ("a\ud800", PutStatus.MESSAGE_ILLEGAL),  # a lone surrogate: no UTF-8 text
]


def _ids(case: tuple[Any, ...]) -> str:
    return repr(case)[:40]


@pytest.mark.parametrize(("case", "status"), BAD, ids=_ids)
def test_a_bad_message_is_refused_alike_alone_and_in_a_batch(
    open_store: OpenStore, case: dict[str, Any], status: PutStatus,
) -> None:
    kw = dict(case)
    store = open_store(mapped_file_size_commit_log=SEG,
                       max_message_size=kw.pop("max_message_size", MAX))
    body = kw.pop("body", b"x")
    alone = store.put("T", body, **kw, check=False)
    assert alone.status is status, alone.reason
    assert alone.reason
    as_message = store.put_message(Message("T", body, **kw), check=False)
    assert (as_message.status, as_message.reason) == (status, alone.reason)
    # The bad message second, after a good one: its index leads the reason.
    batch = store.put_batch("T", [b"ok", body], **{k: [None, v] for k, v in kw.items()},
                            check=False)
    assert (batch.status, batch.reason) == (status, f"message 1: {alone.reason}")
    assert batch.count == 0
    assert store.max_phy_offset == 0


@pytest.mark.parametrize(("topic", "status"), BAD_TOPIC, ids=_ids)
def test_a_bad_topic_is_refused_alike_alone_and_in_a_batch(
    open_store: OpenStore, topic: str, status: PutStatus,
) -> None:
    store = open_store(mapped_file_size_commit_log=SEG, max_message_size=MAX)
    alone = store.put(topic, b"x", check=False)
    assert alone.status is status and alone.reason
    batch = store.put_batch(topic, [b"x", b"y"], check=False)
    assert (batch.status, batch.reason) == (status, alone.reason)
    # Raised, both are the same refusal.
    with pytest.raises(InvalidMessageError) as one:
        store.put(topic, b"x")
    with pytest.raises(InvalidMessageError) as many:
        store.put_batch(topic, [b"x", b"y"])
    assert one.value.reason == many.value.reason == alone.reason
    assert store.max_phy_offset == 0


def _arrow_reader(topic: str, body: bytes, kw: dict[str, Any]) -> Any:
    pa = pytest.importorskip("pyarrow")
    columns: dict[str, Any] = {"topic": [topic], "body": [body]}
    if "tags" in kw:
        columns["tags"] = [kw["tags"]]
    if "keys" in kw:
        columns["keys"] = [kw["keys"]]
    if "properties" in kw:
        columns["properties"] = pa.array([list(kw["properties"].items())],
                                         type=pa.map_(pa.string(), pa.string()))
    table = pa.table(columns)
    return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())


# An Arrow string column holds UTF-8 text only: no empty topic (the writer
# refuses the column), no lone surrogate (pyarrow cannot encode one).
ARROW_BAD = BAD + [
    ({"topic": topic}, status) for topic, status in BAD_TOPIC
    if topic and "\ud800" not in topic
]


@pytest.mark.parametrize(("case", "status"), ARROW_BAD, ids=_ids)
def test_a_bad_arrow_row_is_refused_as_a_put_alone_is(
    open_store: OpenStore, case: dict[str, Any], status: PutStatus,
) -> None:
    kw = dict(case)
    store = open_store(mapped_file_size_commit_log=SEG,
                       max_message_size=kw.pop("max_message_size", MAX))
    topic = kw.pop("topic", "T")
    body = kw.pop("body", b"x")
    alone = store.put(topic, body, **kw, check=False)
    assert alone.status is status and alone.reason
    # The check a Spark write runs before its first append finds the same.
    checked = store._n.check_arrow(_arrow_reader(topic, body, kw))
    assert checked == (0, (0, status.value, alone.reason))
    appended = store._n.put_arrow(_arrow_reader(topic, body, kw))
    assert appended == (0, (0, status.value, alone.reason), None)
    assert store.max_phy_offset == 0


# Values that only look like the store's own names: a key, tags or a
# property value holding `__CRC32#` or `DELAY` is a plain value.
LOOK_ALIKE: list[dict[str, Any]] = [
    {"keys": ["a__CRC32#b"]},
    {"tags": "__CRC32#"},
    {"properties": {"p": "__CRC32#1"}},
    {"properties": {"p": "DELAY"}, "keys": ["DELAY"]},
]


@pytest.mark.parametrize("case", LOOK_ALIKE, ids=_ids)
def test_a_look_alike_value_is_stored_alike_alone_and_in_a_batch(
    open_store: OpenStore, case: dict[str, Any],
) -> None:
    store = open_store()
    alone = store.put("T", b"x", **case)
    batch = store.put_batch("T", [b"x"], **{k: [v] for k, v in case.items()})
    assert alone.ok and batch.ok
    a, b = store.get_message("g", "T", 0, 0, 2).messages
    assert (a.tags, a.keys, a.properties) == (b.tags, b.keys, b.properties)
    assert a.topic == b.topic == "T" and "DELAY" not in a.properties
