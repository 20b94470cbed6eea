"""Tests for rocketstore.config.files: fastjson shape, .tmp/.bak protocol, managers."""

from __future__ import annotations

import enum
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore.config.files import (
    TopicConfigs,
    atomic_write,
    dumps_fastjson,
    load_with_backup,
    loads_fastjson,
)
from rocketstore.consumers.offset_table import OffsetKey, OffsetTable
from rocketstore.consumers.offsets import ConsumerOffsets
from rocketstore.errors import CorruptedError

# What RocketMQ (fastjson prettyFormat) writes, keys sorted.
CONSUMER_OFFSET_JSON = (
    "{\n"
    '\t"offsetTable":{\n'
    '\t\t"%RETRY%groupA@groupA":{0:0\n'
    "\t\t},\n"
    '\t\t"TopicTest@groupA":{0:12,1:5\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)

TOPICS_JSON = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":2,\n'
    '\t\t"timestamp":1700000000002\n'
    "\t},\n"
    '\t"topicConfigTable":{\n'
    '\t\t"TopicTest":{\n'
    '\t\t\t"order":false,\n'
    '\t\t\t"perm":6,\n'
    '\t\t\t"readQueueNums":16,\n'
    '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
    '\t\t\t"topicName":"TopicTest",\n'
    '\t\t\t"topicSysFlag":0,\n'
    '\t\t\t"writeQueueNums":16\n'
    "\t\t},\n"
    '\t\t"orders":{\n'
    '\t\t\t"order":false,\n'
    '\t\t\t"perm":6,\n'
    '\t\t\t"readQueueNums":20,\n'
    '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
    '\t\t\t"topicName":"orders",\n'
    '\t\t\t"topicSysFlag":0,\n'
    '\t\t\t"writeQueueNums":20\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)


def clock_from(start: int) -> Any:
    ticks = iter(range(start, start + 1_000_000))
    return lambda: next(ticks)


# -- writer ------------------------------------------------------------------------


def test_dumps_consumer_offsets_exact_text() -> None:
    table = {"TopicTest@groupA": {1: 5, 0: 12}, "%RETRY%groupA@groupA": {0: 0}}
    assert dumps_fastjson({"offsetTable": table}) == CONSUMER_OFFSET_JSON


def test_dumps_scalars_lists_and_empty_containers() -> None:
    class Kind(enum.Enum):
        SINGLE_TAG = 0

    obj = {"s": 'a"b\\c\n\u00e9', "t": True, "f": False, "n": None, "e": Kind.SINGLE_TAG,
           "l": [1, [], {}], "x": 1.5, "m": {}}
    assert dumps_fastjson(obj) == (
        "{\n"
        '\t"e":"SINGLE_TAG",\n'
        '\t"f":false,\n'
        '\t"l":[\n\t\t1,\n\t\t[],\n\t\t{}\n\t],\n'
        '\t"m":{},\n'
        '\t"n":null,\n'
        '\t"s":"a\\"b\\\\c\\n\u00e9",\n'
        '\t"t":true,\n'
        '\t"x":1.5\n'
        "}"
    )
    assert dumps_fastjson({}) == "{}"
    assert dumps_fastjson([]) == "[]"
    assert dumps_fastjson(7) == "7"


def test_dumps_key_order_int_keys_first_then_java_string_order() -> None:
    text = dumps_fastjson({"b": 1, 10: 1, "B": 1, 2: 1, "\U0001f600": 1, "\uffff": 1})
    # ints numerically; strings by UTF-16 code unit: surrogate pair (D83D) < FFFF
    assert text == '{2:1,10:1,\n\t"B":1,\n\t"b":1,\n\t"\U0001f600":1,\n\t"\uffff":1\n}'


def test_dumps_nested_int_keyed_maps_are_laid_out_the_same_way() -> None:
    assert dumps_fastjson({"a": {1: {0: 1}}}) == '{\n\t"a":{1:{0:1\n\t\t}\n\t}\n}'


@pytest.mark.parametrize("bad", [{1.5: 1}, {True: 1}, {(1,): 1}, {"a": {1, 2}}, {"a": b"x"}])
def test_dumps_refuses_unsupported_types(bad: Any) -> None:
    with pytest.raises(TypeError):
        dumps_fastjson(bad)


def test_dumps_refuses_nan() -> None:
    with pytest.raises(ValueError):
        dumps_fastjson({"a": float("nan")})


# -- reader ------------------------------------------------------------------------


def test_loads_unquoted_and_quoted_keys() -> None:
    assert loads_fastjson(CONSUMER_OFFSET_JSON) == {
        "offsetTable": {"TopicTest@groupA": {0: 12, 1: 5}, "%RETRY%groupA@groupA": {0: 0}}
    }
    assert loads_fastjson('{ 0 : 12 , "1":5, -3:1}') == {0: 12, "1": 5, -3: 1}


def test_loads_leaves_string_contents_alone() -> None:
    text = '{"k{0:1}":"v {1:2, \\"x\\":3}", 7:"\\u00e9\\n"}'
    assert loads_fastjson(text) == {"k{0:1}": 'v {1:2, "x":3}', 7: "\u00e9\n"}


def test_loads_standard_json_like_json_module() -> None:
    text = '{"a":[1,2.5,-3e2,true,false,null,"s",{}],"b":{"c":[]}}'
    assert loads_fastjson(text) == json.loads(text)
    # same answers through the tolerant path (an unquoted key forces it)
    assert loads_fastjson(text[:-1] + ',1:0}') == {**json.loads(text), 1: 0}


@pytest.mark.parametrize(
    "bad",
    ["", "{", "{a:1}", '{"a":1,}', '{"a":1} x', '{1 2}', '{"a":NaN}', '{0:NaN}',
     '{0:"unterminated}', "[1,]", "{0:01}", '{0:"\\q"}', "{0:tru}"],
)
def test_loads_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        loads_fastjson(bad)


_keys = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=8))
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12))
_values = st.recursive(
    _scalars,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(_keys, kids, max_size=4)),
    max_leaves=20,
)


@given(st.dictionaries(_keys, _values, max_size=6))
def test_round_trip(obj: dict[Any, Any]) -> None:
    assert loads_fastjson(dumps_fastjson(obj)) == obj


# -- .tmp / .bak -------------------------------------------------------------------


def test_atomic_write_rotates_backup(tmp_path: Path) -> None:
    path = tmp_path / "config" / "x.json"  # parent created on demand
    atomic_write(path, "one")
    assert path.read_text() == "one"
    assert not Path(f"{path}.bak").exists()
    atomic_write(path, "two")
    assert path.read_text() == "two"
    assert Path(f"{path}.bak").read_text() == "one"
    atomic_write(str(path), "three")
    assert Path(f"{path}.bak").read_text() == "two"
    assert not Path(f"{path}.tmp").exists()


def test_atomic_write_never_backs_up_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    atomic_write(path, "old")
    atomic_write(path, "good")
    assert Path(f"{path}.bak").read_text() == "old"
    path.write_text("")  # e.g. a broker crashed while writing it
    atomic_write(path, "new")
    assert Path(f"{path}.bak").read_text() == "old"


def test_load_with_backup(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    bak = Path(f"{path}.bak")
    assert load_with_backup(path) is None
    bak.write_text('{"from":"bak"}')
    assert load_with_backup(path) == '{"from":"bak"}'  # main missing
    path.write_text("")
    assert load_with_backup(path) == '{"from":"bak"}'  # main empty
    path.write_text('{"from":')
    assert load_with_backup(path) == '{"from":"bak"}'  # main unparseable
    path.write_bytes(b'{"a":"\xff"}')
    assert load_with_backup(path) == '{"from":"bak"}'  # main not UTF-8
    path.write_text('{"from":"main"}')
    assert load_with_backup(path) == '{"from":"main"}'


def test_load_with_backup_custom_parse_and_both_bad(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    Path(f"{path}.bak").write_text("12")

    def must_be_int(text: str) -> object:
        return int(text)

    assert load_with_backup(path, parse=must_be_int) == "12"
    path.write_text("{")
    Path(f"{path}.bak").write_text("[")
    with pytest.raises(CorruptedError) as e:
        load_with_backup(path)
    assert "x.json.bak" in str(e.value)
    path.write_text("")  # empty main, broken backup: still an error, not a fresh store
    with pytest.raises(CorruptedError):
        load_with_backup(path)


# -- consumerOffset.json -------------------------------------------------------------


def _on_disk(path: Path) -> dict[OffsetKey, dict[int, int]]:
    """The offset table in the file (or its backup), by (topic, group)."""
    return ConsumerOffsets.load(path).table().as_dict()


def test_consumer_offsets_commit_query_persist_exact(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    offsets = ConsumerOffsets.load(path)
    assert offsets.query("groupA", "TopicTest", 0) == -1
    assert not offsets.dirty
    assert offsets.persist() is False
    assert not path.exists()
    offsets.commit("groupA", "TopicTest", 1, 5)
    offsets.commit("groupA", "TopicTest", 0, 12)
    offsets.commit("groupA", "%RETRY%groupA", 0, 0)
    assert offsets.dirty
    assert offsets.query("groupA", "TopicTest", 0) == 12
    assert offsets.query("groupA", "TopicTest", 7) == -1
    assert offsets.query("groupB", "TopicTest", 0) == -1
    assert offsets.offsets("groupA", "TopicTest") == {0: 12, 1: 5}
    assert offsets.persist(fold=True) is True
    assert path.read_text() == CONSUMER_OFFSET_JSON
    assert offsets.to_json() == CONSUMER_OFFSET_JSON
    assert offsets.persist() is False  # unchanged
    offsets.commit("groupA", "TopicTest", 0, 12)  # same value: no change
    assert offsets.persist() is False
    again = ConsumerOffsets.load(path)
    assert again.table() == offsets.table()


def test_consumer_offsets_bak_holds_previous_content(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsets(path)
    offsets.commit("g", "T", 0, 1)
    offsets.persist(fold=True)
    first = path.read_text()
    offsets.commit("g", "T", 0, 2)
    offsets.persist(fold=True)
    assert Path(f"{path}.bak").read_text() == first
    assert path.read_text() == '{\n\t"offsetTable":{\n\t\t"T@g":{0:2\n\t\t}\n\t}\n}'


def test_consumer_offsets_corrupted_file_falls_back_to_bak(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsets(path)
    offsets.commit("g", "T", 0, 1)
    offsets.persist(fold=True)
    offsets.commit("g", "T", 0, 2)
    offsets.persist(fold=True)
    path.write_text('{\n\t"offsetTable":{\n\t\t"T@g":{0:')  # torn write
    assert ConsumerOffsets.load(path).query("g", "T", 0) == 1
    path.write_text('{"offsetTable":{"T@g":{"zero":1}}}')  # parses, wrong shape
    assert ConsumerOffsets.load(path).query("g", "T", 0) == 1


def test_consumer_offsets_empty_file_is_read_as_missing_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An empty file (a write never leaves one: damage) is not taken silently
    for "no offsets": the backup is read, and either way a warning names it."""
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsets(path)
    offsets.commit("g", "T", 0, 1)
    offsets.persist(fold=True)
    offsets.commit("h", "T", 0, 2)
    offsets.persist(fold=True)
    path.write_bytes(b"")
    with caplog.at_level("WARNING", logger="rocketstore"):
        assert _on_disk(path) == {("T", "g"): {0: 1}}  # the backup
    assert f"{path} is empty" in caplog.text
    caplog.clear()
    Path(f"{path}.bak").unlink()
    with caplog.at_level("WARNING", logger="rocketstore"):
        assert _on_disk(path) == {}
    assert f"{path} is empty" in caplog.text


def test_consumer_offsets_reads_quoted_keys_and_ignores_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text(
        '{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1},'
        '"offsetTable":{"TopicTest@g":{"0":250,"1":251,2:252}},"pullOffsetTable":{}}'
    )
    offsets = ConsumerOffsets.load(path)
    assert offsets.table().as_dict() == {("TopicTest", "g"): {0: 250, 1: 251, 2: 252}}
    offsets.commit("g", "TopicTest", 0, 251)
    offsets.persist(fold=True)
    assert loads_fastjson(path.read_text()) == {
        "offsetTable": {"TopicTest@g": {0: 251, 1: 251, 2: 252}}
    }


def test_consumer_offsets_empty_document(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text("{}")
    assert _on_disk(path) == {}


def test_consumer_offsets_table_is_a_copy(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(tmp_path / "c.json", OffsetTable({("T", "g"): {0: 1}}))
    t = offsets.table()
    t.set(OffsetKey("T", "g"), 0, 99)
    assert offsets.query("g", "T", 0) == 1


@pytest.mark.parametrize(
    ("args", "exc"),
    [
        (("", "T", 0, 0), ValueError),
        (("g", "", 0, 0), ValueError),
        (("g", "a@b", 0, 0), ValueError),
        (("g", "T", -1, 0), ValueError),
        (("g", "T", 0, -1), ValueError),
        (("g", "T", 0, 1.0), TypeError),
        (("g", "T", True, 0), TypeError),
        ((None, "T", 0, 0), TypeError),
    ],
)
def test_consumer_offsets_commit_validation(tmp_path: Path, args: Any, exc: type) -> None:
    with pytest.raises(exc):
        ConsumerOffsets(tmp_path / "c.json").commit(*args)


def test_consumer_offsets_concurrent_commits_and_persists(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    offsets = ConsumerOffsets(path)

    def worker(q: int) -> None:
        for i in range(200):
            offsets.commit("g", "T", q, i)
            if i % 50 == 0:
                offsets.persist()

    threads = [threading.Thread(target=worker, args=(q,)) for q in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    offsets.persist()
    assert not offsets.dirty
    assert ConsumerOffsets.load(path).offsets("g", "T") == {q: 199 for q in range(4)}


# -- topics.json ---------------------------------------------------------------------


def test_topic_configs_exact_text(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    topics = TopicConfigs.load(path, clock=clock_from(1700000000000))
    assert topics.data_version == {"counter": 0, "timestamp": 1700000000000}
    assert topics.persist() is False  # nothing changed
    assert topics.ensure("TopicTest", 3) is True
    assert topics.ensure("TopicTest", 15) is False
    assert topics.ensure("orders", 19) is True  # max(16, 19 + 1)
    assert topics.persist() is True
    assert path.read_text() == TOPICS_JSON
    assert topics.persist() is False
    again = TopicConfigs.load(path)
    assert again.topics() == topics.topics()
    assert again.data_version == {"counter": 2, "timestamp": 1700000000002}


def test_topic_configs_grow_queue_nums_and_bump_version(tmp_path: Path) -> None:
    topics = TopicConfigs(tmp_path / "t.json", clock=clock_from(10))
    topics.ensure("T", 0)
    assert topics.topics()["T"]["readQueueNums"] == 16
    assert topics.ensure("T", 16) is True
    cfg = topics.topics()["T"]
    assert (cfg["readQueueNums"], cfg["writeQueueNums"]) == (17, 17)
    assert topics.data_version == {"counter": 2, "timestamp": 12}


def test_topic_configs_keep_unknown_fields_of_a_broker_file(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    broker = {
        "dataVersion": {"counter": 5, "stateVersion": 0, "timestamp": 1682946169710},
        "topicConfigTable": {
            "TopicTest": {"attributes": {}, "order": False, "perm": 6, "readQueueNums": 4,
                          "topicFilterType": "SINGLE_TAG", "topicName": "TopicTest",
                          "topicSysFlag": 0, "writeQueueNums": 4},
        },
        "mappingDataVersion": {"counter": 0, "timestamp": 1},
    }
    path.write_text(json.dumps(broker))
    topics = TopicConfigs.load(path, clock=lambda: 1700000000000)
    assert topics.ensure("TopicTest", 3) is False  # 4 queues already
    assert topics.ensure("TopicTest", 4) is True
    topics.persist()
    doc = loads_fastjson(path.read_text())
    assert doc["mappingDataVersion"] == {"counter": 0, "timestamp": 1}
    assert doc["dataVersion"] == {"counter": 6, "stateVersion": 0, "timestamp": 1700000000000}
    assert doc["topicConfigTable"]["TopicTest"]["attributes"] == {}
    assert doc["topicConfigTable"]["TopicTest"]["readQueueNums"] == 5


def test_topic_configs_corrupted_file_falls_back_to_bak(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = TopicConfigs(path, clock=clock_from(1))
    topics.ensure("A", 0)
    topics.persist()
    topics.ensure("B", 0)
    topics.persist()
    path.write_text('{"topicConfigTable":[]}')
    assert set(TopicConfigs.load(path).topics()) == {"A"}
    os.remove(f"{path}.bak")
    with pytest.raises(CorruptedError):
        TopicConfigs.load(path)


def test_topic_configs_validation(tmp_path: Path) -> None:
    topics = TopicConfigs(tmp_path / "t.json")
    with pytest.raises(ValueError):
        topics.ensure("", 0)
    with pytest.raises(ValueError):
        topics.ensure("T", -1)
    with pytest.raises(TypeError):
        topics.ensure("T", "0")  # type: ignore[arg-type]


def test_consumer_offsets_two_writers_keep_each_others_entries(tmp_path: Path) -> None:
    """Two tables on one file (as two processes): each write carries only its
    own commits; everything else is taken from the file under the lock."""
    path = tmp_path / "config" / "consumerOffset.json"
    a, b = ConsumerOffsets.load(path), ConsumerOffsets.load(path)
    a.commit("ga", "T", 0, 5)
    assert a.persist()
    b.commit("gb", "T", 1, 7)
    assert b.persist()  # b never read ga's entry before: kept anyway
    assert _on_disk(path) == {("T", "ga"): {0: 5}, ("T", "gb"): {1: 7}}
    a.commit("ga", "T", 0, 6)
    assert a.persist()  # a's older view of gb does not overwrite it
    assert _on_disk(path) == {("T", "ga"): {0: 6}, ("T", "gb"): {1: 7}}
    assert a.query("gb", "T", 1) == 7  # each write also reads the others' entries
    assert b.query("ga", "T", 0) == 5
    assert b.refresh() and b.query("ga", "T", 0) == 6
    assert not b.refresh()  # unchanged since


def test_consumer_offsets_update_keeps_pending_and_drops_named(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    a, other = ConsumerOffsets(path), ConsumerOffsets(path)
    other.commit_many("g", "T", {0: 1, 1: 2})
    other.commit("h", "T", 0, 3)
    other.persist()
    a.commit("g", "T", 0, 9)  # pending in a, not written yet
    a.commit("k", "T", 0, 4)
    def remove_h(table: OffsetTable) -> dict[int, int]:
        removed = table.offsets(OffsetKey("T", "h"))
        assert table.pop(OffsetKey("T", "h"))
        return removed

    assert a.update(remove_h, drop=[OffsetKey("T", "k")]) == {0: 3}
    assert _on_disk(path) == {("T", "g"): {0: 1, 1: 2}}  # pending not written
    assert a.table().as_dict() == {("T", "g"): {0: 9, 1: 2}}  # ... but shown on top; k dropped
    assert a.persist()
    assert _on_disk(path) == {("T", "g"): {0: 9, 1: 2}}


def test_consumer_offsets_clamp_lowers_the_file_under_its_lock(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    w = ConsumerOffsets(path)
    w.commit_many("g", "T", {0: 50, 1: 3})
    w.persist()
    other = ConsumerOffsets(path)
    other.commit("r", "T", 0, 40)
    other.persist()  # a reader's commit after the writer loaded the file
    lowered = w.clamp(lambda topic, qid: 10 if qid == 0 else 1 << 62)
    assert sorted(lowered) == [(("T", "g"), 0, 50, 10), (("T", "r"), 0, 40, 10)]
    assert _on_disk(path) == {("T", "g"): {0: 10, 1: 3}, ("T", "r"): {0: 10}}


def test_consumer_offsets_current_rereads_and_keeps_the_last_view_of_a_bad_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "consumerOffset.json"
    mine, other = ConsumerOffsets.load(path), ConsumerOffsets(path)
    other.commit("r", "T", 0, 4)
    other.persist()
    assert mine.current().as_dict() == {("T", "r"): {0: 4}}  # another process's commit
    path.write_text("{not json")
    Path(f"{path}.bak").write_text("{nor this")
    assert mine.current().as_dict() == {("T", "r"): {0: 4}}
    assert "cannot re-read" in caplog.text
