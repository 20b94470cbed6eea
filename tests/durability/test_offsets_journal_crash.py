"""The offsets journal under crashes (docs/format.md §13.3): a process killed
with SIGKILL while it appends a record or while it rewrites
consumerOffset.json from the journal loses no commit it reported durable,
and leaves no torn state: the json always parses, a half-written record at
the journal's end is ignored and then cut off, and a rewrite cut between
the new json and the new journal changes nothing that was committed."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.offsets_child import CFG
from helpers.paths import HELPERS
from helpers.store_util import offset_json_table, offset_table
from rocketstore import MessageStore, StoreConfig
from rocketstore.consumers.offsets import ConsumerOffsets

CHILD = HELPERS / "offsets_loop_child.py"


def _kill_after(store_path: str, fold_every: str, commits: int) -> int:
    """Run a committing loop, SIGKILL it once it reported ``commits``
    durable commits (or a few more); the last commit it reported."""
    proc = subprocess.Popen([sys.executable, str(CHILD), store_path, "reader", "loop", "0",
                             fold_every], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        last = 0
        for line in proc.stdout:
            if line.startswith("c "):
                last = int(line.split()[1])
                if last >= commits:
                    break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdin.close()
        proc.stdout.close()
    return last


@pytest.mark.parametrize(("fold_every", "seed"), [("0", 11), ("3600", 12)])
def test_killed_while_appending_or_folding_loses_no_durable_commit(
        store_path: str, fold_every: str, seed: int) -> None:
    """``fold_every`` 0: every commit is appended, then folded into the json
    (kills land in both); 3600: only appended."""
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as store:
        for i in range(400):
            assert store.put("T", b"m%d" % i, i % 4).ok
    rng = random.Random(seed)
    last = 0
    for _ in range(5):
        last = _kill_after(store_path, fold_every, rng.randrange(5, 80))
        table = offset_table(store_path)  # json + journal: every reported commit
        assert table["T@loop"][0] >= last and table["T@loop"][1] >= last
        json_table = offset_json_table(store_path)  # parses: never torn
        assert json_table.get("T@loop", {0: 0})[0] <= table["T@loop"][0]
    with MessageStore(StoreConfig(store_path=store_path, **CFG)):
        pass  # a clean close folds the journal
    assert offset_json_table(store_path) == offset_table(store_path)
    assert offset_table(store_path)["T@loop"][0] >= last


def _journal(store_path: str) -> Path:
    return Path(store_path) / "config" / "consumerOffset.journal"


def test_a_torn_record_at_the_end_is_ignored_then_cut(store_path: str) -> None:
    path = Path(store_path) / "config" / "consumerOffset.json"
    writer = ConsumerOffsets.load(path)
    writer.commit("g", "T", 0, 5)
    assert writer.persist()
    whole = _journal(store_path).read_bytes()
    writer.commit("g", "T", 0, 6)
    assert writer.persist()
    record = _journal(store_path).read_bytes()[len(whole):]
    with _journal(store_path).open("r+b") as f:  # as a kill in the middle of the append
        f.truncate(len(whole) + len(record) // 2)
    reader = ConsumerOffsets.load(path)
    assert reader.query("g", "T", 0) == 5  # the torn record is not there
    other = ConsumerOffsets.load(path)
    other.commit("h", "T", 0, 1)
    assert other.persist()  # under the lock: cuts the torn tail, then appends
    again = ConsumerOffsets.load(path)
    assert again.table().as_dict() == {("T", "g"): {0: 5}, ("T", "h"): {0: 1}}
    assert reader.refresh() and reader.query("h", "T", 0) == 1


def test_a_fold_cut_between_the_json_and_the_journal_changes_nothing(store_path: str) -> None:
    path = Path(store_path) / "config" / "consumerOffset.json"
    offsets = ConsumerOffsets.load(path)
    offsets.commit("g", "T", 0, 1)
    assert offsets.persist(fold=True)  # the json, and no journal
    offsets.commit_many("g", "T", {0: 2, 1: 3})
    offsets.commit("h", "T", 0, 4)
    assert offsets.persist()
    old_journal = _journal(store_path).read_bytes()
    assert offsets.persist(fold=True)  # json rewritten, journal dropped
    assert not _journal(store_path).exists()
    _journal(store_path).write_bytes(old_journal)  # as a kill before the journal went
    view = ConsumerOffsets.load(path)
    expected = {("T", "g"): {0: 2, 1: 3}, ("T", "h"): {0: 4}}
    assert view.table().as_dict() == expected
    view.commit("g", "T", 0, 9)
    assert view.persist()  # a new journal continues the new json
    assert ConsumerOffsets.load(path).offsets("g", "T") == {0: 9, 1: 3}


def test_a_journal_of_another_json_is_not_replayed_over_it(
        store_path: str, caplog: pytest.LogCaptureFixture) -> None:
    """The json rewritten by another tool (a broker) after a crash: the
    journal does not continue it, so its entries are not replayed over it."""
    path = Path(store_path) / "config" / "consumerOffset.json"
    offsets = ConsumerOffsets.load(path)
    offsets.commit("g", "T", 0, 7)
    assert offsets.persist(fold=True)
    offsets.commit("g", "T", 0, 8)
    assert offsets.persist()
    shutil.copy(path, f"{path}.bak")  # as a broker's rewrite leaves it (MixAll.string2File)
    path.write_text('{"offsetTable":{"T@g":{0:3}}}')
    with caplog.at_level("WARNING", logger="rocketstore"):
        assert ConsumerOffsets.load(path).offsets("g", "T") == {0: 3}
    assert "does not continue" in caplog.text
