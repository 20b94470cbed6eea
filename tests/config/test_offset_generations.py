"""Key generations (docs/format.md §13.1): a reset or delete gives the key a
new generation, recorded in the journal (§13.3); a write drops pending
entries of an older generation instead of undoing the reset, also after the
json was rewritten; commits made after the reset are written."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstore.consumers.offset_table import OffsetKey, OffsetTable
from rocketstore.consumers.offsets import ConsumerOffsets

KEY = OffsetKey("T", "g")


def _reset(offsets: ConsumerOffsets, to: int) -> None:
    def change(table: OffsetTable) -> None:
        table.replace(KEY, {0: to})

    offsets.update(change, drop=[KEY])


def test_pending_from_before_a_reset_is_dropped_and_later_commits_are_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "consumerOffset.json"
    a, operator = ConsumerOffsets.load(path), ConsumerOffsets.load(path)
    a.commit("g", "T", 0, 30)
    assert a.persist()
    a.commit("g", "T", 0, 60)  # pending in a
    _reset(operator, 0)  # another process resets the group (json rewritten too)
    with caplog.at_level("WARNING", logger="rocketstore"):
        assert a.persist(fold=True) is False  # the stale entry is dropped: nothing to write
    assert "before a reset or delete" in caplog.text and "{0: 60}" in caplog.text
    assert ConsumerOffsets.load(path).offsets("g", "T") == {0: 0}
    a.commit("g", "T", 0, 5)  # made after the reset: written
    assert a.persist()
    assert ConsumerOffsets.load(path).offsets("g", "T") == {0: 5}


def test_generations_outlive_a_rewrite_of_the_json(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    a, operator = ConsumerOffsets.load(path), ConsumerOffsets.load(path)
    a.commit("g", "T", 0, 60)  # pending, generation 0
    operator.update(lambda table: table.pop(KEY), drop=[KEY])  # delete
    b = ConsumerOffsets.load(path)
    b.commit("h", "T", 0, 1)
    assert b.persist(fold=True)  # the json rewritten; the generation kept
    assert (tmp_path / "consumerOffset.journal").exists()
    a.persist(fold=True)
    assert ConsumerOffsets.load(path).table().as_dict() == {("T", "h"): {0: 1}}
