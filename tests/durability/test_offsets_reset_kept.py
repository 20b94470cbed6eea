"""An operator's reset or delete is never undone by commits another process
made before it and writes after it (docs/format.md §13.1): a closing
consumer writes its pending commits before it lets go of the group, and a
write drops pending entries of a key reset or deleted since they were
committed (the key's generation changed)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import rocketstore.consumers.store_commits as commits_module
from helpers.paths import HELPERS
from helpers.read_util import SMALL
from helpers.store_util import offset_json_table, offset_table
from rocketstore import MessageStore
from rocketstore.cli import main

CHILD = str(HELPERS / "offsets_undo_child.py")


def _start(store_path: str, how: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, CHILD, store_path, how], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        raise AssertionError(f"child: {line!r} {child.communicate(timeout=30)[1][-3000:]}")
    # A consumer's close wrote its pending commit before it let go of the
    # group; a plain commit_offset(sync=False) is still pending.
    assert offset_table(store_path) == {"T@g": {0: 60 if how == "consumer" else 30}}
    return child


def _finish(child: subprocess.Popen[str]) -> None:
    out, err = child.communicate("go\n", timeout=60)
    assert child.returncode == 0 and "closed" in out, err[-3000:]


@pytest.mark.parametrize("how", ["consumer", "commit_offset"])
def test_a_reset_is_not_undone_by_a_closing_writer(store_path: str, how: str) -> None:
    child = _start(store_path, how)
    try:
        result = CliRunner().invoke(main, ["groups", store_path, "--group", "g",
                                           "--reset-offsets", "--to-earliest", "--topic", "T"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
    finally:
        _finish(child)
    assert offset_table(store_path) == {"T@g": {0: 0}}
    assert offset_json_table(store_path) == {"T@g": {0: 0}}  # what a broker reads, too


@pytest.mark.parametrize("how", ["consumer", "commit_offset"])
def test_a_deleted_group_does_not_come_back(store_path: str, how: str) -> None:
    child = _start(store_path, how)
    try:
        result = CliRunner().invoke(main, ["groups", store_path, "--group", "g", "--delete"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
    finally:
        _finish(child)
    assert "T@g" not in offset_table(store_path)
    assert "T@g" not in offset_json_table(store_path)
    assert Path(store_path, "config", "consumerOffset.json").exists()


def test_a_closing_consumer_writes_its_pending_commits(
        open_store: Callable[..., MessageStore], store_path: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sync and asyncio consumers alike: ``commit(sync=False)`` then
    ``close()`` leaves the commit on disk, before the group is let go."""
    monkeypatch.setattr(commits_module, "OFFSETS_PERSIST_INTERVAL", 3600.0)
    store = open_store(**SMALL)
    for i in range(3):
        assert store.put("T", b"m%d" % i, 0).ok
    consumer = store.consumer("g", "T", auto_commit=False)
    assert len(consumer.poll(timeout=5.0)) == 3
    consumer.commit(sync=False)
    assert "T@g" not in offset_table(store_path)  # pending
    consumer.close()
    assert offset_table(store_path)["T@g"] == {0: 3}

    async def main() -> None:
        consumer = store.async_consumer("a", "T", auto_commit=False)
        assert len(await consumer.poll(timeout=5.0)) == 3
        await consumer.commit(sync=False)
        assert "T@a" not in offset_table(store_path)
        await consumer.close()

    asyncio.run(main())
    assert offset_table(store_path)["T@a"] == {0: 3}
