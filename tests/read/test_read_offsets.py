"""Consumer offsets (``commit_offset``/``query_offset``) and the config
files (docs/format.md §13)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.read_util import SMALL, listing, wait_dispatched
from helpers.store_util import diff_snapshots, offset_table, snapshot
from rocketstore import MessageStore, ReadOnlyStoreError, StoreClosedError, StoreConfig
from rocketstore.config.files import loads_fastjson

OpenStore = Callable[..., MessageStore]


def _offsets_file(store_path: str) -> Path:
    return Path(store_path) / "config" / "consumerOffset.json"


def test_commit_and_query(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    assert store.query_offset("gA", "T", 0) == -1
    store.commit_offset("gA", "T", 0, 12)
    store.commit_offset("gA", "T", 1, 5)
    assert store.query_offset("gA", "T", 0) == 12
    assert store.query_offset("gA", "T", 1) == 5
    assert store.query_offset("gA", "T", 2) == -1  # unknown queue
    assert store.query_offset("gB", "T", 0) == -1  # unknown group
    assert store.query_offset("gA", "U", 0) == -1  # unknown topic
    store.commit_offset("gA", "T", 0, 3)  # moving back is allowed (a reset)
    assert store.query_offset("gA", "T", 0) == 3
    store.commit_offset("gA", "T", 0, 0)
    assert store.query_offset("gA", "T", 0) == 0


def test_commit_validation(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    with pytest.raises(ValueError):
        store.commit_offset("gA", "T", -1, 0)
    with pytest.raises(ValueError):
        store.commit_offset("gA", "T", 0, -5)
    with pytest.raises(ValueError):
        store.commit_offset("", "T", 0, 1)
    with pytest.raises(ValueError):
        store.commit_offset("gA", "a@b", 0, 1)
    assert store.query_offset("gA", "T", 0) == -1


def test_offsets_survive_restart(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL)
    store.commit_offset("gA", "T", 0, 12)
    store.commit_offset("gA", "T", 7, 99)
    store.commit_offset("gB", "T", 0, 1)
    store.shutdown()
    with pytest.raises(StoreClosedError):
        store.commit_offset("gA", "T", 0, 1)
    with pytest.raises(StoreClosedError):
        store.query_offset("gA", "T", 0)
    for read_only in (False, True):
        s = open_store(read_only=read_only, **SMALL)
        assert s.query_offset("gA", "T", 0) == 12
        assert s.query_offset("gA", "T", 7) == 99
        assert s.query_offset("gB", "T", 0) == 1
        assert s.query_offset("gB", "T", 7) == -1
        s.shutdown()


def test_consumer_offset_json_has_fastjson_shape(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL)
    store.commit_offset("gA", "TopicTest", 1, 5)
    store.commit_offset("gA", "TopicTest", 0, 12)
    store.commit_offset("gB", "Abc", 3, 7)
    store.commit_offset("gA", "TopicTest", 10, 2)
    store.shutdown()
    text = _offsets_file(store_path).read_text("utf-8")
    assert text == (
        "{\n"
        '\t"offsetTable":{\n'
        '\t\t"Abc@gB":{3:7\n'
        "\t\t},\n"
        '\t\t"TopicTest@gA":{0:12,1:5,10:2\n'
        "\t\t}\n"
        "\t}\n"
        "}"
    )
    assert re.search(r'"TopicTest@gA":\{0:\d+', text)
    assert '"0"' not in text  # integer keys are not quoted
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # it is fastjson, not strict JSON
    assert loads_fastjson(text) == {
        "offsetTable": {"Abc@gB": {3: 7}, "TopicTest@gA": {0: 12, 1: 5, 10: 2}}
    }


def test_persist_offsets_journals_and_flush_writes_the_file_while_running(
    open_store: OpenStore, store_path: str
) -> None:
    store = open_store(**SMALL)
    store.commit_offset("g", "T", 0, 4)
    store.persist_offsets()  # durable in the journal (docs/format.md §13.3)
    assert offset_table(store_path) == {"T@g": {0: 4}}
    assert not _offsets_file(store_path).exists()
    store.flush()  # folded into the json
    assert loads_fastjson(_offsets_file(store_path).read_text()) == {"offsetTable": {"T@g": {0: 4}}}
    store.commit_offset("g", "T", 0, 9)
    store.flush()
    assert loads_fastjson(_offsets_file(store_path).read_text()) == {"offsetTable": {"T@g": {0: 9}}}


def test_quoted_queue_ids_are_read(open_store: OpenStore, store_path: str) -> None:
    cfg = Path(store_path) / "config"
    cfg.mkdir(parents=True)
    (cfg / "consumerOffset.json").write_text(
        '{"offsetTable":{"T@g":{"0":12,"3":4},"U@g":{1:2}}}', "utf-8"
    )
    store = open_store(**SMALL)
    assert store.query_offset("g", "T", 0) == 12
    assert store.query_offset("g", "T", 3) == 4
    assert store.query_offset("g", "U", 1) == 2


def test_topics_json(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL)
    for topic, qid in [("T", 0), ("T", 3), ("Big", 20)]:
        assert store.put(topic, b"x", qid).ok
    wait_dispatched(store)
    store.shutdown()
    path = Path(store_path) / "config" / "topics.json"
    text = path.read_text("utf-8")
    assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":')
    doc = json.loads(text)  # string keys only: standard JSON
    assert set(doc) >= {"dataVersion", "topicConfigTable"}
    assert doc["dataVersion"]["counter"] >= 1
    table = doc["topicConfigTable"]
    assert set(table) == {"T", "Big"}
    want_nums = {"T": 16, "Big": 21}
    for name, cfg in table.items():
        assert cfg["topicName"] == name
        assert cfg["perm"] == 6
        assert cfg["readQueueNums"] == cfg["writeQueueNums"] == want_nums[name]
        assert cfg["order"] is False
        assert cfg["topicFilterType"] == "SINGLE_TAG"
        assert cfg["topicSysFlag"] == 0
        assert list(cfg) == sorted(cfg)  # fastjson sorts bean fields
    assert list(table) == sorted(table)


def test_no_write_store_cannot_commit_and_writes_nothing(
    open_store: OpenStore, store_path: str
) -> None:
    w = open_store(**SMALL)
    assert w.put("T", b"x", 0).ok
    w.commit_offset("g", "T", 0, 1)
    w.shutdown()
    before = snapshot(store_path)
    with pytest.raises(ValueError, match="needs read_only=True"):
        MessageStore(StoreConfig(store_path=store_path, **SMALL), no_write=True)
    ro = MessageStore(StoreConfig(store_path=store_path, **SMALL), read_only=True,
                      no_write=True).start()
    assert ro.no_write and not ro.offsets_writable
    with pytest.raises(ReadOnlyStoreError):
        ro.commit_offset("g", "T", 0, 5)
    with pytest.raises(ReadOnlyStoreError):
        ro.delete_consumer_group("g")
    with pytest.raises(ReadOnlyStoreError):
        ro.reset_consumer_group("g", "earliest")
    assert ro.reset_consumer_group("g", "earliest", dry_run=True) == {("T", 0): (1, 0)}
    assert ro.query_offset("g", "T", 0) == 1
    ro.persist_offsets()  # a no-op on a no_write store
    ro.flush()
    # A member of a shared group writes its membership: refused, saying what works.
    with pytest.raises(ReadOnlyStoreError, match=r"cannot join.*pass exclusive=True"):
        ro.consumer("g", "T")
    with pytest.raises(ReadOnlyStoreError, match="cannot join"):
        ro.async_consumer("g", "T", queues=[0])
    c = ro.consumer("g", "T", exclusive=True)
    assert c.position(0) == 1
    c.seek(0, 0)
    with pytest.warns(RuntimeWarning, match="nothing is persisted"):
        c.commit()  # kept in memory only
    assert c.committed(0) == 0
    c.close()
    ro.shutdown()
    assert diff_snapshots(before, snapshot(store_path)) == []


def test_fresh_store_writes_no_offset_file_without_commits(
    open_store: OpenStore, store_path: str
) -> None:
    store = open_store(**SMALL)
    assert store.put("T", b"x", 0).ok
    store.shutdown()
    assert "config/consumerOffset.json" not in listing(store_path)
