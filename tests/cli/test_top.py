"""``rocketstore top PATH``: a live view of a store another process writes."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rocketstore import MessageStore, StoreConfig
from rocketstore.cli import main

SMALL = {"mapped_file_size_commit_log": 256 * 1024, "max_hash_slot_num": 64,
         "max_index_num": 256}

# Puts into 3 queues, a few hundred a second, until its stdin closes.
WRITER = r"""
import json, select, sys, time
from rocketstore import MessageStore, StoreConfig

store = MessageStore(StoreConfig(store_path=sys.argv[1], **json.loads(sys.argv[2]))).start()
for i in range(30):
    store.put("orders", b"o" * 64, queue_id=i % 3)
while store.dispatch_behind_bytes():
    time.sleep(0.002)
print("started", flush=True)
i = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    r = store.put("orders", b"o" * 64, queue_id=i % 3)
    i += 1
    if i % 30 == 0:  # group "g" consumes queue 0, a few messages behind
        store.commit_offset("g", "orders", 0, max(r.queue_offset - 3, 0))
        store.persist_offsets()
    time.sleep(0.002)
store.shutdown()
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rocketstore.cli", *args]


@pytest.fixture
def written(tmp_path: Path) -> Iterator[Path]:
    """A store a subprocess keeps writing while the test runs."""
    path = tmp_path / "store"
    with subprocess.Popen([sys.executable, "-c", WRITER, str(path), json.dumps(SMALL)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline().strip() == "started"
            yield path
            proc.stdin.write("stop\n")
            proc.stdin.flush()
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_top_json_counts_rise_on_a_store_written_by_another_process(written: Path) -> None:
    result = subprocess.run(_cli("top", str(written), "--iterations", "2", "--interval", "0.5",
                                 "--json"), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    frames = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(frames) == 2
    first, second = frames
    totals = [sum(q["max_offset"] for q in f["queues"]) for f in frames]
    assert 30 < totals[0] < totals[1]
    assert second["max_phy_offset"] > first["max_phy_offset"]
    for f in frames:
        assert f["read_only"] and f["writer_running"] is True
        # Only the writer's process has these: None, never 0.
        assert f["put_messages_total"] is None and f["flush_behind_bytes"] is None
        assert f["put_messages_per_s"] > 0 and f["interval_s"] > 0
        assert f["queue_messages_total"] == sum(q["max_offset"] - q["min_offset"]
                                                for q in f["queues"])
    # The second frame's rate is the growth of the queue ends over its interval.
    assert second["put_messages_per_s"] == pytest.approx(
        (totals[1] - totals[0]) / second["interval_s"])
    per_queue = {(q["topic"], q["queue_id"]): q["put_messages_per_s"] for q in second["queues"]}
    assert set(per_queue) == {("orders", 0), ("orders", 1), ("orders", 2)}
    assert sum(per_queue.values()) == pytest.approx(second["put_messages_per_s"])
    # The consumer group's lag, from the offsets the writer persists.
    commits = []
    for f in frames:
        [group] = f["groups"]
        assert group["group"] == "g"
        [q0] = [q for q in group["queues"] if q["queue_id"] == 0]
        assert q0["lag"] == q0["max_offset"] - q0["committed"] >= 3
        commits.append(q0["committed"])
    assert commits[0] < commits[1]
    [q0] = [q for q in second["groups"][0]["queues"] if q["queue_id"] == 0]
    assert q0["committed_per_s"] == pytest.approx((commits[1] - commits[0])
                                                  / second["interval_s"])


def _messages_shown(text: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"^messages\s+([\d,]+) in", text, re.M)]


def test_top_view_twice_shows_rising_counts(written: Path) -> None:
    result = subprocess.run(_cli("top", str(written), "--iterations", "2", "--interval", "0.5"),
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("rocketstore top") == 2
    shown = _messages_shown(out)
    assert len(shown) == 2 and 30 < shown[0] < shown[1], out
    assert re.search(r"^put\s+[\d,.]+ msg/s", out, re.M), out
    assert "dispatch behind" in out and "flush behind" in out and "disk" in out
    assert "known to the writer's process only" in out
    assert "writer           running" in out
    assert re.search(r"orders\s+│\s+[012] ", out), out
    assert re.search(r"consumer groups \(1\), lag [\d,]+ message", out), out
    assert re.search(r"│ g\s+│ orders\s+│\s+0 │", out), out


def test_top_once_on_a_stopped_store(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as s:
        for i in range(12):
            s.put("t", b"x", queue_id=i % 2)
    result = run("top", str(path), "--once", "--interval", "0.05", "--json")
    assert result.exit_code == 0, result.output
    [frame] = [json.loads(line) for line in result.stdout.splitlines()]
    assert frame["writer_running"] is False
    assert [(q["topic"], q["queue_id"], q["max_offset"], q["put_messages_per_s"])
            for q in frame["queues"]] == [("t", 0, 6, 0.0), ("t", 1, 6, 0.0)]
    assert frame["groups"] == []
    human = run("top", str(path), "--once", "--interval", "0.05")
    assert human.exit_code == 0, human.output
    assert "Ctrl-C" not in human.stdout
    assert _messages_shown(human.stdout) == [12]
    assert "no consumer groups" in human.stdout
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as s:
        s.commit_offsets("late", "t", {0: 2, 1: 6})
    [frame] = [json.loads(line) for line in run(
        "top", str(path), "--once", "--interval", "0.05", "--json").stdout.splitlines()]
    [group] = frame["groups"]
    assert (group["group"], group["lag"]) == ("late", 4)
    assert [(q["queue_id"], q["committed"], q["lag"], q["committed_per_s"])
            for q in group["queues"]] == [(0, 2, 4, 0.0), (1, 6, 0, 0.0)]


def test_top_refuses_bad_arguments(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = run("top", str(tmp_path / "empty"), "--once")
    assert r.exit_code == 2 and "not a store" in r.output
    path = tmp_path / "s"
    MessageStore(StoreConfig(store_path=str(path), **SMALL)).start().shutdown()
    r = run("top", str(path), "--once", "--iterations", "3")
    assert r.exit_code == 2 and "--once" in r.output
    r = run("top", str(path), "--interval", "0")
    assert r.exit_code == 2


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} not seen in {seen[-2000:]!r}")
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_ctrl_c_exits_0_from_a_pipe(written: Path) -> None:
    with subprocess.Popen(_cli("top", str(written), "--interval", "0.2"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            _read_until(proc.stdout.fileno(), b"rocketstore top", 60)
            assert proc.poll() is None  # refreshing until interrupted
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
            assert b"Traceback" not in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()


def test_ctrl_c_on_a_terminal_exits_0_and_restores_it(written: Path) -> None:
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    env.pop("NO_COLOR", None)
    try:
        with subprocess.Popen(_cli("top", str(written), "--interval", "0.2"), stdin=follower,
                              stdout=follower, stderr=follower, env=env,
                              start_new_session=True) as proc:
            os.close(follower)
            follower = -1
            try:
                # The alternate screen is entered, then the view drawn in it.
                seen = _read_until(leader, b"\x1b[?1049h", 60)
                seen += _read_until(leader, b"msg/s", 60)
                proc.send_signal(signal.SIGINT)
                assert proc.wait(timeout=30) == 0
                seen += _read_until(leader, b"\x1b[?1049l", 10)
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    # The terminal is given back: the alternate screen left, the cursor shown.
    tail = seen[seen.rindex(b"\x1b[?1049h"):]
    assert b"\x1b[?1049l" in tail and b"\x1b[?25h" in tail
    assert b"Traceback" not in seen


def test_top_at_80_columns_keeps_every_group_header_whole(tmp_path: Path) -> None:
    """In an 80-column terminal the lag table's headers are not cut (rich
    cut "committed" and "committed/s" both to "committ…"): long group and
    topic names fold instead, and every row is there."""
    path = tmp_path / "s"
    topic, group = "orders-eu-west-1-priority", "billing-service-reconciliation"
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as s:
        for i in range(12):
            s.put(topic, b"x", queue_id=i % 2)
        s.commit_offsets(group, topic, {0: 2, 1: 6})
    result = subprocess.run(_cli("top", str(path), "--once", "--interval", "0.05"),
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert max(len(line) for line in out.splitlines()) <= 80, out
    lag = out[out.index("consumer groups (1)"):]
    header = next(line for line in lag.splitlines() if "group" in line and "┃" in line)
    cells = [c.strip() for c in header.strip("┃ ").split("┃")]
    assert cells == ["group", "topic", "queue", "committed", "end", "lag", "consumed/s",
                     "consumer"], header
    assert "…" not in lag
    # The names fold: both rows are there with their numbers.
    rows = [line for line in lag.splitlines() if re.search(r"│\s+[01] │", line)]
    assert [re.findall(r"│\s+([\d.,]+) ", r)[:4] for r in rows] == [
        ["0", "2", "6", "4"], ["1", "6", "6", "0"]], lag
    body = [line.split("│") for line in lag.splitlines() if line.startswith("│")]
    assert "".join(c[1].strip() for c in body) == group * 2
    assert "".join(c[2].strip() for c in body) == topic * 2
