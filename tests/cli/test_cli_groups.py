"""``rocketstore groups``: the lag table, ``--json``, reset and delete."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from helpers.store_util import diff_snapshots, snapshot
from rocketstore import MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.config.files import loads_fastjson

CFG: dict[str, Any] = {"mapped_file_size_commit_log": 64 * 1024,
                       "mapped_file_size_consume_queue": 20 * 100,
                       "max_hash_slot_num": 64, "max_index_num": 256}


def run(args: Sequence[str]) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def run_json(args: Sequence[str]) -> Any:
    result = run([*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _file(path: Path) -> dict[str, dict[int, int]]:
    doc = loads_fastjson((path / "config" / "consumerOffset.json").read_text())
    table = doc["offsetTable"]
    assert isinstance(table, dict)
    return table


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, int]:
    """A closed store: topic T, queue 0 with 10 messages (the second five stored
    later than the first five), queue 1 with 4; groups g (committed 2 and 1) and
    h (committed 10 on queue 0). Returns the path and the store time of message 5."""
    path = tmp_path / "store"
    with MessageStore(StoreConfig(store_path=str(path), **CFG)) as s:
        for i in range(5):
            assert s.put("T", b"a%d" % i, 0).ok
        time.sleep(0.02)
        for i in range(5, 10):
            assert s.put("T", b"a%d" % i, 0).ok
        for i in range(4):
            assert s.put("T", b"b%d" % i, 1).ok
        s.commit_offsets("g", "T", {0: 2, 1: 1})
        s.commit_offsets("h", "T", {0: 10})
        s.persist_offsets()
        t5 = s.get_message_store_timestamp("T", 0, 5)
        assert t5 > s.get_message_store_timestamp("T", 0, 4)
    return path, t5


def test_groups_prints_the_lag_table_and_json(store: tuple[Path, int]) -> None:
    path, _ = store
    before = snapshot(path)
    got = run_json(["groups", str(path)])
    assert got == [
        {"group": "g", "lag": 8 + 3, "active": False, "active_topics": [], "members": [],
         "problems": [], "queues": [
            {"topic": "T", "queue_id": 0, "committed": 2, "min_offset": 0, "max_offset": 10,
             "lag": 8, "owner": None},
            {"topic": "T", "queue_id": 1, "committed": 1, "min_offset": 0, "max_offset": 4,
             "lag": 3, "owner": None}]},
        {"group": "h", "lag": 4, "active": False, "active_topics": [], "members": [],
         "problems": [], "queues": [
            {"topic": "T", "queue_id": 0, "committed": 10, "min_offset": 0, "max_offset": 10,
             "lag": 0, "owner": None},
            {"topic": "T", "queue_id": 1, "committed": None, "min_offset": 0, "max_offset": 4,
             "lag": 4, "owner": None}]},
    ]
    assert [g["group"] for g in run_json(["groups", str(path), "--group", "h"])] == ["h"]
    text = run(["groups", str(path)])
    assert text.exit_code == 0, text.output
    for word in ("group", "committed", "end offset", "lag"):
        assert word in text.stdout
    rows = [line.split() for line in text.stdout.splitlines() if line.strip("│ ").startswith("g ")]
    assert [r for r in rows if "8" in r], text.stdout  # g's queue 0 shows lag 8
    assert diff_snapshots(before, snapshot(path)) == []  # looking writes nothing


def test_groups_on_a_store_without_groups(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with MessageStore(StoreConfig(store_path=str(path), **CFG)) as s:
        assert s.put("T", b"x").ok
    r = run(["groups", str(path)])
    assert r.exit_code == 0
    assert "no consumer group" in r.stdout
    assert run_json(["groups", str(path)]) == []
    assert not (path / "config" / "consumerOffset.json").exists()


@pytest.mark.parametrize(
    ("how", "want"),
    [
        (["--to-earliest"], {0: 0, 1: 0}),
        (["--to-latest"], {0: 10, 1: 4}),
        (["--to-offset", "7"], {0: 7, 1: 4}),  # kept within [min, max] per queue
    ],
)
def test_groups_reset_offsets(store: tuple[Path, int], how: list[str],
                              want: dict[int, int]) -> None:
    path, _ = store
    got = run_json(["groups", str(path), "--group", "g", "--reset-offsets", *how])
    assert got["queues"] == [{"topic": "T", "queue_id": q, "old": old, "new": want[q]}
                             for q, old in ((0, 2), (1, 1))]
    assert _file(path) == {"T@g": want, "T@h": {0: 10}}  # h untouched


def test_groups_reset_to_a_time(store: tuple[Path, int]) -> None:
    path, t5 = store
    r = run(["groups", str(path), "-g", "h", "--reset-offsets", "--to-datetime", str(t5)])
    assert r.exit_code == 0, r.output
    assert "reset" in r.stdout
    # queue 0: the first message stored at or after t5 is offset 5; queue 1's
    # messages were all stored after t5 (offset 0).
    assert _file(path)["T@h"] == {0: 5, 1: 0}
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t5 / 1000 + 3600))
    r = run(["groups", str(path), "-g", "h", "--reset-offsets", "--to-datetime", iso])
    assert r.exit_code == 0, r.output
    assert _file(path)["T@h"] == {0: 10, 1: 4}  # nothing stored after: the end


def test_groups_reset_dry_run_writes_nothing(store: tuple[Path, int]) -> None:
    path, _ = store
    before = snapshot(path)
    got = run_json(["groups", str(path), "-g", "g", "--reset-offsets", "--to-latest",
                    "--dry-run"])
    assert got["dry_run"] is True
    assert [(q["old"], q["new"]) for q in got["queues"]] == [(2, 10), (1, 4)]
    assert diff_snapshots(before, snapshot(path)) == []


def test_groups_reset_a_new_group_needs_a_topic(store: tuple[Path, int]) -> None:
    path, _ = store
    r = run(["groups", str(path), "-g", "new", "--reset-offsets", "--to-latest"])
    assert r.exit_code == 2
    assert "name the topic" in r.output
    r = run(["groups", str(path), "-g", "new", "--topic", "T", "--reset-offsets",
             "--to-latest"])
    assert r.exit_code == 0, r.output
    assert _file(path)["T@new"] == {0: 10, 1: 4}


def test_groups_delete(store: tuple[Path, int]) -> None:
    path, _ = store
    got = run_json(["groups", str(path), "--group", "g", "--delete"])
    assert got == {"group": "g", "deleted_topics": ["T"]}
    assert _file(path) == {"T@h": {0: 10}}
    r = run(["groups", str(path), "--group", "g", "--delete"])
    assert r.exit_code == 0 and "no committed offsets" in r.stdout


def test_groups_refuses_while_a_consumer_of_the_group_is_open(store: tuple[Path, int]) -> None:
    path, _ = store
    before = _file(path)
    with MessageStore(StoreConfig(store_path=str(path), **CFG)) as s, s.consumer("g", "T"):
        assert run_json(["groups", str(path), "-g", "g"])[0]["active_topics"] == ["T"]
        for args in (["--reset-offsets", "--to-earliest"], ["--delete"]):
            r = run(["groups", str(path), "-g", "g", *args])
            assert r.exit_code == 2, r.output
            assert "held by another open consumer" in r.output
        assert _file(path) == before
        # Another group is free to change.
        assert run(["groups", str(path), "-g", "h", "--delete"]).exit_code == 0
    assert "T@h" not in _file(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-g", "g", "--reset-offsets"], "exactly one of"),
        (["-g", "g", "--reset-offsets", "--to-earliest", "--to-latest"], "exactly one of"),
        (["--reset-offsets", "--to-earliest"], "needs --group"),
        (["--delete"], "needs --group"),
        (["-g", "g", "--to-latest"], "go with --reset-offsets"),
        (["-g", "g", "--delete", "--reset-offsets", "--to-latest"], "not both"),
        (["-g", "g", "--reset-offsets", "--to-offset", "-1"], "-1"),
        (["-g", "g", "--reset-offsets", "--to-datetime", "yesterday"], "yesterday"),
    ],
)
def test_groups_bad_arguments_change_nothing(store: tuple[Path, int], args: list[str],
                                             message: str) -> None:
    path, _ = store
    before = snapshot(path)
    r = run(["groups", str(path), *args])
    assert r.exit_code == 2
    assert message in r.output
    assert diff_snapshots(before, snapshot(path)) == []


def test_info_lists_the_consumer_groups(store: tuple[Path, int]) -> None:
    path, _ = store
    info = run_json(["info", str(path)])
    assert [(g["group"], g["lag"]) for g in info["consumer_groups"]] == [("g", 11), ("h", 4)]
    assert info["consumer_groups"] == run_json(["groups", str(path)])
    text = run(["info", str(path)])
    assert text.exit_code == 0, text.output
    assert "g (lag 11), h (lag 4)" in text.stdout


def test_groups_reset_reaches_a_running_writer(store: tuple[Path, int]) -> None:
    """A reset made by the command while the writer runs: the writer's next
    consumer of the group starts at the reset offsets, and the writer's later
    writes of the file keep them."""
    path, _ = store
    with MessageStore(StoreConfig(store_path=str(path), **CFG)) as w:
        with w.consumer("g", "T") as c:
            assert len(c.poll(timeout=1, max_messages=100)) == 11  # 8 + 3 left
        assert [w.query_offset("g", "T", q) for q in (0, 1)] == [10, 4]
        r = run(["groups", str(path), "-g", "g", "--reset-offsets", "--to-offset", "1"])
        assert r.exit_code == 0, r.output
        assert [w.query_offset("g", "T", q) for q in (0, 1)] == [1, 1]
        with w.consumer("g", "T", auto_commit=False) as c:
            assert c.positions() == {0: 1, 1: 1}
            c.commit({0: 3}, sync=True)
        w.commit_offsets("h", "T", {1: 2})
    assert _file(path) == {"T@g": {0: 3, 1: 1}, "T@h": {0: 10, 1: 2}}
