"""``rocketstore groups`` with shared members: owners beside the lag, the
members table, ``--expire`` of a member killed with SIGKILL, and
``--reset-offsets`` refused while a member lives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from helpers.paths import HELPERS
from rocketstore import MessageStore, StoreConfig
from rocketstore.cli import main

TOPIC = "orders"
CFG: dict[str, Any] = {"mapped_file_size_commit_log": 1 << 20,
                       "mapped_file_size_consume_queue": 20 * 100,
                       "max_hash_slot_num": 64, "max_index_num": 256,
                       "consumer_heartbeat_interval": 0.2, "consumer_session_timeout": 1.0}


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False, terminal_width=200)


def listing(path: str) -> dict[str, Any]:
    result = run("groups", path, "--json")
    assert result.exit_code == 0, result.output
    (g,) = json.loads(result.stdout)
    return dict(g)


def test_groups_lists_members_and_owners_and_expires_a_killed_one(
        store_path: str, tmp_path: Path) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as store:
        for i in range(8):
            assert store.put(TOPIC, b"m%d" % i, i % 4).ok
    worker = subprocess.Popen(
        [sys.executable, str(HELPERS / "group_worker.py"), store_path, json.dumps(CFG), "g",
         TOPIC, "w", str(tmp_path / "log.jsonl")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        g = listing(store_path)
        (member,) = g["members"]
        assert (member["pid"], member["alive"], member["queues"]) == (worker.pid, True,
                                                                      [0, 1, 2, 3])
        assert member["heartbeat_age"] < 1.0
        assert {q["owner"] for q in g["queues"]} == {member["member_id"]}
        text = run("groups", store_path).output
        # The owner column and the members table name the member's pid and id.
        assert text.count(str(worker.pid)) >= 2 and "members" in text
        assert member["member_id"].rsplit("-", 1)[-1] in text
        reset = run("groups", store_path, "--group", "g", "--topic", TOPIC,
                    "--reset-offsets", "--to-earliest")
        assert reset.exit_code == 2 and "held by another open consumer" in reset.output
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        (dead,) = listing(store_path)["members"]
        assert dead["member_id"] == member["member_id"] and not dead["alive"]
        expired = run("groups", store_path, "--expire", "--json")
        assert expired.exit_code == 0, expired.output
        removed = [m for ids in json.loads(expired.stdout).values() for m in ids]
        assert member["member_id"] in removed
        # Gone: the group had no committed offsets, so nothing is listed now.
        assert json.loads(run("groups", store_path, "--json").stdout) == []
        assert run("groups", store_path, "--expire").output.strip() == "no dead member found"
        # No member left: a reset goes through.
        reset = run("groups", store_path, "--group", "g", "--topic", TOPIC,
                    "--reset-offsets", "--to-earliest")
        assert reset.exit_code == 0, reset.output
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait(timeout=30)
        for stream in (worker.stdin, worker.stdout):
            if stream is not None:
                stream.close()
