"""The consumer offset table (``rocketstore.consumers.offset_table``): its key, its
names rule and its ``consumerOffset.json`` document (docs/format.md §13)."""

from __future__ import annotations

import pytest

from rocketstore import _native
from rocketstore.consumers.offset_table import (
    SEPARATOR,
    OffsetKey,
    OffsetTable,
    check_group,
    check_topic,
)

#: A broker's file, as RocketMQ 4.9.8 writes it (docs/format.md §13).
BROKER_FILE = (
    '{\n\t"offsetTable":{\n'
    '\t\t"%RETRY%groupA@groupA":{0:0\n\t\t},\n'
    '\t\t"TopicTest@groupA":{0:12,1:5\n\t\t}\n'
    "\t}\n}"
)


def test_the_separator_is_the_engines() -> None:
    assert SEPARATOR == _native.TOPIC_GROUP_SEPARATOR == "@"


def test_a_key_is_spelled_topic_at_group_and_split_at_the_first_separator() -> None:
    key = OffsetKey.of("group@eu", "orders")
    assert (key.topic, key.group) == ("orders", "group@eu")
    assert key.text == "orders@group@eu"
    assert OffsetKey.parse(key.text) == key
    assert OffsetKey.parse("T@") == ("T", "")  # a file may hold one; the API never writes it
    for bad in ("no separator", 7, None):
        with pytest.raises(ValueError, match="is not 'topic@group'"):
            OffsetKey.parse(bad)


def test_the_names_rule() -> None:
    assert check_group("a@b") == "a@b"
    assert check_topic("%RETRY%g") == "%RETRY%g"
    with pytest.raises(ValueError, match=r"^group must not be empty$"):
        check_group("")
    with pytest.raises(TypeError, match=r"^topic must be str, not int$"):
        check_topic(1)
    with pytest.raises(ValueError, match=r"^topic must not contain '@': 'a@b'$"):
        OffsetKey.of("g", "a@b")


def test_a_broker_file_reads_and_writes_back_byte_for_byte() -> None:
    table = OffsetTable.from_json(BROKER_FILE)
    assert table.as_dict() == {("TopicTest", "groupA"): {0: 12, 1: 5},
                               ("%RETRY%groupA", "groupA"): {0: 0}}
    assert table.to_json() == BROKER_FILE
    # The order entries were made in does not reach the file.
    again = OffsetTable()
    again.set(OffsetKey("TopicTest", "groupA"), 1, 5)
    again.set(OffsetKey("%RETRY%groupA", "groupA"), 0, 0)
    again.set(OffsetKey("TopicTest", "groupA"), 0, 12)
    assert again == table
    assert again.to_json() == BROKER_FILE


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[]", "the document is not a JSON object"),
        ('{"offsetTable":[]}', "offsetTable is not an object"),
        ('{"offsetTable":{"T":{0:1}}}', "key 'T' is not 'topic@group'"),
        ('{"offsetTable":{"T@g":[]}}', "'T@g' is not an object"),
        ('{"offsetTable":{"T@g":{0:-1}}}', "'T@g'"),
    ],
)
def test_a_file_that_is_no_offset_table_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"consumer offsets: .*{why.replace('[', '.')}"):
        OffsetTable.from_json(text)


def test_rows_are_what_the_engine_takes() -> None:
    table = OffsetTable({("T", "g"): {0: 3, 1: 4}, ("S", "a@b"): {2: 5}})
    assert sorted(table.rows()) == [("S", "a@b", 2, 5), ("T", "g", 0, 3), ("T", "g", 1, 4)]
    assert table.topics_of("g") == ["T"]
    assert table.by_group() == {"g": {"T": {0: 3, 1: 4}}, "a@b": {"S": {2: 5}}}


def test_overlay_discard_and_lower() -> None:
    key = OffsetKey("T", "g")
    base = OffsetTable({key: {0: 1, 1: 2}, ("U", "g"): {}})
    top = OffsetTable({key: {1: 9}})
    merged = base.overlay(top)
    assert merged.as_dict() == {key: {0: 1, 1: 9}, ("U", "g"): {}}
    assert base.query(key, 1) == 2  # overlay copies
    merged.drop_empty()
    assert merged.keys() == [key]
    pending = OffsetTable({key: {0: 1, 1: 7}})
    pending.discard_same(OffsetTable({key: {0: 1, 1: 6}}))
    assert pending.as_dict() == {key: {1: 7}}  # committed again since: stays
    pending.discard_same(OffsetTable({key: {1: 7}}))
    assert len(pending) == 0 and not pending
    lowered = merged.lower(lambda topic, qid: 5 if qid == 1 else 1 << 62)
    assert lowered == [(key, 1, 9, 5)]
    assert merged.offsets(key) == {0: 1, 1: 5}
    assert merged.query(key, 7) == -1 and merged.query(OffsetKey("X", "g"), 0) == -1
