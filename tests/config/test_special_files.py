"""Special files in place of the offsets' files (docs/format.md §13, §13.1):
a FIFO, or a symlink to /dev/zero, is refused with an error naming it, never
opened for a read that blocks or never ends; one foreign entry of
consumerOffset.json does not hide the other groups. Each case runs in a
child process with a timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.read_util import SMALL
from helpers.store_util import offset_table
from rocketstore import MessageStore, StoreConfig
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.consumers.offsets import group_lock_path

CHILD = textwrap.dedent("""
    import json, sys, warnings
    from click.testing import CliRunner
    from rocketstore import MessageStore, StoreConfig
    from rocketstore.cli import main
    path, what = sys.argv[1], sys.argv[2]
    cfg = StoreConfig(store_path=path, **json.loads(sys.argv[3]))
    def report(e):
        print(type(e).__name__, " ".join(str(e).split()), flush=True)
    if what == "open":
        for read_only in (False, True):
            try:
                MessageStore(cfg, read_only=read_only).start().shutdown()
                print("opened", flush=True)
            except Exception as e:
                report(e)
    elif what == "consumer":
        store = MessageStore(cfg).start()
        try:
            store.consumer("g", "T").close()
            print("opened", flush=True)
        except Exception as e:
            report(e)
        store.shutdown()
    else:
        r = CliRunner().invoke(main, ["groups", path, "--json"])
        print("exit", r.exit_code, " ".join(r.output.split()), flush=True)
""")


def _run(store_path: str, what: str) -> list[str]:
    p = subprocess.run([sys.executable, "-c", CHILD, store_path, what, json.dumps(SMALL)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.splitlines()


def _store(store_path: str) -> Path:
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as store:
        assert store.put("T", b"x", 0).ok
        store.commit_offset("g", "T", 0, 1)
        store.commit_offset("h", "T", 0, 1)
    return Path(store_path) / "config"


@pytest.mark.parametrize("name", ["consumerOffset.json", "consumerOffset.journal"])
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_offsets_file_that_is_not_a_regular_file_is_refused(
        store_path: str, name: str, kind: str) -> None:
    config = _store(store_path)
    target = config / name
    target.unlink(missing_ok=True)
    for bak in config.glob(name + ".bak"):
        bak.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    writer, reader = _run(store_path, "open")
    for line in (writer, reader):
        assert "not a regular file" in line and name in line, line
    [cli] = _run(store_path, "groups")
    assert cli.startswith("exit 2") and "not a regular file" in cli, cli


def test_fifo_in_place_of_a_lock_file_is_refused(store_path: str) -> None:
    config = _store(store_path)
    group_lock = Path(group_lock_path(config, OffsetKey("T", "g")))
    group_lock.parent.mkdir(parents=True, exist_ok=True)
    group_lock.unlink(missing_ok=True)
    os.mkfifo(group_lock)
    [cli] = _run(store_path, "groups")  # lists both groups, says what it cannot tell
    assert cli.startswith("exit 0"), cli
    assert "cannot tell whether a consumer of group 'g'" in cli and '"group": "h"' in cli, cli
    [consumer] = _run(store_path, "consumer")
    assert consumer.startswith("OSError") and "not a regular file" in consumer, consumer
    offsets_lock = config / "consumerOffset.lock"
    offsets_lock.unlink(missing_ok=True)
    os.mkfifo(offsets_lock)
    store = MessageStore(StoreConfig(store_path=store_path, **SMALL)).start()
    store.commit_offset("g", "T", 0, 0)
    with pytest.raises(OSError, match=r"consumerOffset\.lock: not a regular file"):
        store.persist_offsets()
    offsets_lock.unlink()
    store.shutdown()  # the commit was kept, and is written now
    assert offset_table(store_path)["T@g"] == {0: 0}


def test_one_foreign_entry_does_not_hide_the_other_groups(store_path: str) -> None:
    config = _store(store_path)
    table = config / "consumerOffset.json"
    text = table.read_text().replace('"offsetTable":{', '"offsetTable":{"../../x@y":{0:5},', 1)
    table.write_text(text)
    [cli] = _run(store_path, "groups")
    assert cli.startswith("exit 0"), cli
    assert "'../../x@y' is left out" in cli, cli
    assert '"group": "g"' in cli and '"group": "h"' in cli, cli
