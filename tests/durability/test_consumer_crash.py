"""A consumer with auto-commit, killed with SIGKILL at random moments.

Auto-commit commits every queue's position together and one write of
``consumerOffset.json`` carries them all, so after a kill every queue
restarts at most ``auto_commit_interval + offsets persist interval`` (plus
the time between two polls) behind what was delivered, and never past it.
"""

from __future__ import annotations

import itertools
import random
import signal
from pathlib import Path

from helpers.autocommit_child import CFG
from helpers.killed_child import run_then_kill
from helpers.paths import HELPERS
from rocketstore import MessageStore, StoreConfig

HELPER = HELPERS / "autocommit_child.py"
QUEUES = 4
PER_QUEUE = 10000
AUTO_COMMIT_INTERVAL = 0.3
PERSIST_INTERVAL = 0.4


def _parse(log: Path) -> tuple[list[float], list[tuple[float, dict[int, int]]]]:
    polls: list[float] = []
    deliveries: list[tuple[float, dict[int, int]]] = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        try:
            if parts[0] == "P" and len(parts) == 2:
                polls.append(float(parts[1]))
            elif parts[0] == "D" and len(parts) >= 3:
                nxt = {int(q): int(n) for q, n in (p.split(":") for p in parts[2:])}
                deliveries.append((float(parts[1]), nxt))
        except ValueError:  # a torn last line
            continue
    return polls, deliveries


def _positions_at(deliveries: list[tuple[float, dict[int, int]]], t: float,
                  start: dict[int, int]) -> dict[int, int]:
    pos = dict(start)
    for when, nxt in deliveries:
        if when <= t:
            for q, n in nxt.items():
                pos[q] = max(pos[q], n)
    return pos


def _committed(path: str) -> dict[int, int]:
    with MessageStore(StoreConfig(store_path=path, **CFG)) as store:
        return {q: max(store.query_offset("g", "T", q), 0) for q in range(QUEUES)}


def test_kill_during_auto_commit_loses_at_most_one_interval_per_queue(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    with MessageStore(StoreConfig(store_path=path, **CFG)) as store:
        for q in range(QUEUES):
            assert store.put_batch("T", [b"m%06d" % i for i in range(PER_QUEUE)], q).ok
    rng = random.Random(0xC0FFEE)
    start = {q: 0 for q in range(QUEUES)}
    meaningful = 0  # kills where every queue had deliveries older than the bound
    for iteration in range(8):
        if meaningful == 4:
            break
        log = tmp_path / f"deliveries-{iteration}.log"
        run = run_then_kill(
            [HELPER, path, str(log), str(AUTO_COMMIT_INTERVAL), str(PERSIST_INTERVAL)],
            stderr_path=tmp_path / f"child-{iteration}.err",
            marker=b"ready",
            marker_timeout=600,  # bounded by the test's timeout
            run_for=rng.uniform(1.5, 3.0),
        )
        assert run.first_line.strip() == "ready", (run.first_line, run.stderr)
        assert run.returncode == -signal.SIGKILL and run.killed_at is not None
        killed_at = run.killed_at
        polls, deliveries = _parse(log)
        # Time between two poll starts (an auto-commit and its write happen
        # inside a poll), including the poll the kill interrupted.
        gaps = [b - a for a, b in itertools.pairwise(polls)]
        gaps.append(killed_at - polls[-1])
        slack = 2 * max(gaps)
        bound_at = killed_at - AUTO_COMMIT_INTERVAL - PERSIST_INTERVAL - slack
        at_kill = _positions_at(deliveries, killed_at, start)
        floor = _positions_at(deliveries, bound_at, start)
        # Count the kills where the check below can fail: every queue had
        # deliveries before the bound (on a loaded machine the polls, and so
        # the slack, can stretch past the whole run).
        meaningful += all(floor[q] > start[q] for q in range(QUEUES))
        restart = _committed(path)
        for q in range(QUEUES):
            assert floor[q] <= restart[q] <= at_kill[q], (
                f"iteration {iteration} queue {q}: restarts at {restart[q]}, delivered "
                f"{at_kill[q]} at the kill and {floor[q]} by {killed_at - bound_at:.2f} s "
                f"before it; committed {restart}"
            )
        start = restart
    assert meaningful >= 2, f"only {meaningful} kill(s) came late enough to check the bound"
