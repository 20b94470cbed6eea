"""Damaged config files: a clear CorruptedError naming the file, nothing written.

Deep nesting and numbers outside a Java int/long in ``consumerOffset.json``,
``delayOffset.json`` and ``topics.json`` must not surface as RecursionError or
OverflowError (or crash the interpreter): each case opens the store in a
subprocess and reports what it raised.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig

SMALL = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 2000,
         "max_hash_slot_num": 64, "max_index_num": 256}

DEEP = 400_000


def _deep(inner: str) -> str:
    return "[" * DEEP + inner + "]" * DEEP


TOPIC = ('{"order":false,"perm":6,"readQueueNums":NUMS,"topicFilterType":"SINGLE_TAG",'
         '"topicName":"T","topicSysFlag":0,"writeQueueNums":16}')


def _offsets(table: str) -> str:
    return '{"offsetTable":' + table + "}"


CASES = {
    # file name -> {case: content}
    "consumerOffset.json": {
        "deep": _offsets('{"T@g":{0:' + _deep("1") + "}}"),
        "deep_object": _offsets('{"a":' * DEEP + "1" + "}" * DEEP),
        "huge_offset": _offsets('{"T@g":{0:' + str(10**30) + "}}"),
        "long_offset": _offsets('{"T@g":{0:' + str(2**63) + "}}"),
        "negative_offset": _offsets('{"T@g":{0:-5}}'),
        "huge_queue": _offsets('{"T@g":{' + str(2**40) + ":1}}"),
        "huge_queue_quoted": _offsets('{"T@g":{"' + str(2**40) + '":1}}'),
    },
    "delayOffset.json": {
        "deep": _offsets("{1:" + _deep("1") + "}"),
        "huge_offset": _offsets("{1:" + str(10**30) + "}"),
        "huge_level": _offsets("{" + str(2**40) + ":1}"),
    },
    "topics.json": {
        "deep": '{"topicConfigTable":{"T":' + _deep("1") + "}}",
        "huge_queue_nums": '{"topicConfigTable":{"T":'
                           + TOPIC.replace("NUMS", str(10**30)) + "}}",
        "huge_counter": '{"dataVersion":{"counter":' + str(10**30)
                        + ',"timestamp":0},"topicConfigTable":{}}',
    },
}

PARAMS = [(name, case) for name, cases in CASES.items() for case in cases]

CHILD = textwrap.dedent("""
    import sys
    from rocketstore import MessageStore, StoreConfig, CorruptedError
    cfg = StoreConfig(store_path=sys.argv[1], mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=2000, max_hash_slot_num=64,
                      max_index_num=256)
    for read_only in (False, True):
        try:
            MessageStore(cfg, read_only=read_only).start().shutdown()
            print("opened")
        except CorruptedError as e:
            print("CorruptedError", str(e)[:300].replace("\\n", " "))
        except BaseException as e:
            print("other", type(e).__name__, str(e)[:300])
""")


def _digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("name", "case"), PARAMS)
def test_damaged_config_file_is_refused_by_name(tmp_path: Path, name: str, case: str) -> None:
    path = tmp_path / "store"
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as store:
        for i in range(4):
            store.put("T", b"x", queue_id=i % 2)
        store.commit_offset("g", "T", 0, 1)
    (path / "config" / name).write_text(CASES[name][case])
    for stale in (path / "config").glob(name + ".bak"):
        stale.unlink()  # the backup would be loaded instead
    before = _digest(path)
    p = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    writer, reader = p.stdout.splitlines()
    assert writer.startswith("CorruptedError") and name in writer, writer
    if name == "delayOffset.json":
        # Delayed delivery is the writer's work: a read-only store never reads it.
        assert reader == "opened", reader
    else:
        assert reader.startswith("CorruptedError") and name in reader, reader
    after = _digest(path)
    assert after == before


def test_json_reader_refuses_deep_nesting_with_a_value_error() -> None:
    from rocketstore.formats.fastjson import loads_fastjson

    for text in (_deep("1"), "{" + '"a":{' * DEEP + "}" * DEEP + "}", "{0:" + _deep("") + "}"):
        with pytest.raises(ValueError, match="nested"):
            loads_fastjson(text)
    assert json.loads("[[1]]") == loads_fastjson("[[1]]")
