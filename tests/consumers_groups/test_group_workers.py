"""Shared consumer groups over worker processes (``docs/format.md``, §13.2).

Workers (``helpers/group_worker.py``) open the store read-only while this
process writes; they are killed with SIGKILL, frozen with SIGSTOP, and
leave cleanly. Each logs its ownership changes (``on_assign`` /
``on_revoke``) and every message its polls returned, with CLOCK_MONOTONIC
times, so the tests check the hand-overs from the outside: no two members
own a queue at once, nothing produced is lost, and duplicates come only
from a killed member's last auto-commit interval.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from helpers.freeze import freeze_outside_state_lock
from helpers.paths import HELPERS
from rocketstore import MessageStore, StoreConfig
from rocketstore.consumers.membership import group_dir_path

WORKER = HELPERS / "group_worker.py"
TOPIC = "orders"
QUEUES = 8
#: Short membership intervals (the defaults are 3 s and 10 s).
BEAT, TIMEOUT = 0.2, 1.0
AUTO_COMMIT = 0.3
CFG: dict[str, Any] = {"mapped_file_size_commit_log": 1 << 20,
                       "mapped_file_size_consume_queue": 20 * 4000,
                       "max_hash_slot_num": 256, "max_index_num": 1024,
                       "consumer_heartbeat_interval": BEAT,
                       "consumer_session_timeout": TIMEOUT}


class Worker:
    """One worker process and its command pipe."""

    def __init__(self, store_path: str, name: str, log: Path, **options: Any) -> None:
        self.name = name
        self.killed_at: float | None = None
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), store_path, json.dumps(CFG), "g", TOPIC, name,
             str(log), json.dumps(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def line(self) -> str:
        assert self.proc.stdout is not None
        got = self.proc.stdout.readline()
        if not got:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"worker {self.name} ended: {err[-2000:]}")
        return got.strip()

    def expect(self, what: str) -> str:
        got = self.line()
        assert got.startswith(what), (self.name, got)
        return got

    def send(self, cmd: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.killed_at = time.monotonic()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """A clean close (commits, leaves the group)."""
        self.send("stop")
        self.expect("closed")
        assert self.proc.wait(timeout=30) == 0

    def reap(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def read_log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def intervals(events: list[dict[str, Any]], ends: dict[str, float],
              ) -> dict[int, list[tuple[str, float, float]]]:
    """Per queue, the (member, from, to) ownership intervals the listeners
    logged; an interval still open ends at ``ends[member]`` (its kill, or
    the end of the run)."""
    out: dict[int, list[tuple[str, float, float]]] = defaultdict(list)
    start: dict[tuple[str, int], float] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        for q in e.get("q", []):
            key = (e["m"], q)
            if e["ev"] == "assign":
                assert key not in start, f"{key} assigned twice without a revoke"
                start[key] = e["t"]
            elif e["ev"] == "revoke":
                out[q].append((e["m"], start.pop(key), e["t"]))
    for (m, q), t in start.items():
        out[q].append((m, t, ends[m]))
    return out


def assert_no_overlap(owned: dict[int, list[tuple[str, float, float]]]) -> None:
    for q, spans in owned.items():
        spans = sorted(spans, key=lambda s: s[1])
        for (m1, _a, end), (m2, start, _b) in itertools.pairwise(spans):
            assert end <= start, f"queue {q}: {m1} owned it until {end}, {m2} from {start}"


def _produce(store: MessageStore, stop: threading.Event, sent: list[tuple[int, int]]) -> None:
    i = 0
    while not stop.is_set():
        q = i % QUEUES
        r = store.put(TOPIC, b"m%d" % i, q)
        assert r.ok
        sent.append((q, r.queue_offset))
        i += 1
        if i % QUEUES == 0:
            time.sleep(0.01)


def test_workers_share_queues_through_kills_joins_and_a_clean_leave(
        store_path: str, tmp_path: Path) -> None:
    """Four workers on eight queues while a producer puts: two are killed
    with SIGKILL at random times, two new ones join, one leaves cleanly.
    Ownership intervals never overlap on a queue, every message is
    delivered, and duplicates come only from a killed worker's messages of
    its last auto-commit interval (plus one poll)."""
    rng = random.Random(os.getpid())
    log = tmp_path / "events.jsonl"
    cfg = StoreConfig(store_path=store_path, **CFG)
    sent: list[tuple[int, int]] = []
    workers: list[Worker] = []
    stop = threading.Event()
    with MessageStore(cfg) as store:
        for q in range(QUEUES):  # every queue exists before the workers start
            sent.append((q, store.put(TOPIC, b"first", q).queue_offset))
        try:
            workers = [Worker(store_path, f"w{i}", log, auto_commit_interval=AUTO_COMMIT)
                       for i in range(4)]
            for w in workers:
                w.expect("ready")
            producer = threading.Thread(target=_produce, args=(store, stop, sent))
            producer.start()
            t0 = time.monotonic()
            for victim, delay in zip(rng.sample(workers, 2),
                                     sorted(rng.uniform(0.5, 2.5) for _ in range(2)),
                                     strict=True):
                time.sleep(max(0.0, t0 + delay - time.monotonic()))
                victim.kill()
            time.sleep(0.5)
            newcomers = [Worker(store_path, f"n{i}", log, auto_commit_interval=AUTO_COMMIT)
                         for i in range(2)]
            workers += newcomers
            for w in newcomers:
                w.expect("ready")
            time.sleep(1.0)
            leaver = next(w for w in workers if w.killed_at is None)
            leaver.stop()
            time.sleep(0.5)
            stop.set()
            producer.join()
            expected = set(sent)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                got = {(q, o) for e in read_log(log) if e["ev"] == "got" for q, o in e["msgs"]}
                if expected <= got:
                    break
                time.sleep(0.2)
            for w in workers:
                if w.killed_at is None and w is not leaver:
                    w.stop()
        finally:
            stop.set()
            for w in workers:
                w.reap()
    end = time.monotonic()
    events = read_log(log)
    ends = {w.name: (w.killed_at or end) for w in workers}
    assert_no_overlap(intervals(events, ends))
    delivered: dict[tuple[int, int], list[tuple[str, float]]] = defaultdict(list)
    for e in events:
        if e["ev"] == "got":
            for q, o in e["msgs"]:
                delivered[(q, o)].append((e["m"], e["t"]))
    missing = set(sent) - set(delivered)
    assert not missing, f"{len(missing)} of {len(sent)} messages never delivered"
    # Every delivery happened while its member owned the queue.
    owned = intervals(events, ends)
    for (q, _o), deliveries in delivered.items():
        for m, t in deliveries:
            assert any(mm == m and a <= t <= b for mm, a, b in owned[q]), (q, m, t)
    # Duplicates: first delivered by a killed worker within its last
    # auto-commit interval (plus one poll) before the kill.
    killed = {w.name: w.killed_at for w in workers if w.killed_at is not None}
    slack = AUTO_COMMIT + 0.5
    dups = {k: d for k, d in delivered.items() if len(d) > 1}
    for key, deliveries in dups.items():
        first_m, first_t = min(deliveries, key=lambda d: d[1])
        assert first_m in killed, f"{key} delivered twice, first by {first_m} (not killed)"
        kill_t = killed[first_m]
        assert kill_t - slack <= first_t <= kill_t, (key, first_m, first_t, kill_t)
    assert len(dups) < len(sent) // 2
    # The scenario happened: the killed workers owned queues when they died,
    # which others took over; the newcomers got queues; the leaver closed.
    for name, kill_t in killed.items():
        held = [q for q, spans in owned.items() for m, a, b in spans
                if m == name and a <= kill_t and b == kill_t]
        assert held, f"{name} owned nothing when it was killed"
        for q in held:
            assert any(a >= kill_t for m, a, _b in owned[q] if m != name), (name, q)
    assigned = {e["m"] for e in events if e["ev"] == "assign" and e["q"]}
    assert {"n0", "n1"} <= assigned
    assert [e["m"] for e in events if e["ev"] == "closed"].count(leaver.name) == 1


def test_a_frozen_member_loses_its_queues_and_its_commit_is_fenced(
        store_path: str, tmp_path: Path) -> None:
    """SIGSTOP past the session timeout, then SIGCONT: the other member
    took the queues; the resumed member's commit raises FencedError naming
    a queue and its new owner, and its next poll returns nothing from the
    queues it lost (unless they come back to it, announced by on_assign)."""
    log = tmp_path / "events.jsonl"
    cfg = StoreConfig(store_path=store_path, **CFG)
    with MessageStore(cfg) as store:
        for i in range(4 * QUEUES):
            assert store.put(TOPIC, b"m%d" % i, i % QUEUES).ok
        a = Worker(store_path, "a", log, auto_commit_interval=AUTO_COMMIT)
        b = Worker(store_path, "b", log, auto_commit_interval=AUTO_COMMIT)
        try:
            a.expect("ready")
            b.expect("ready")
            deadline = time.monotonic() + 10
            while True:  # both own their share, and a read its queues
                a.send("poll")
                state = json.loads(a.expect("{"))
                if len(state["assignment"]) == QUEUES // 2 and not state["msgs"]:
                    break
                assert time.monotonic() < deadline, state
            before = set(state["assignment"])
            a.send("pause")
            a.expect("paused")
            freeze_outside_state_lock(
                a.proc.pid, group_dir_path(Path(store_path) / "config", "g", TOPIC))
            try:
                time.sleep(TIMEOUT * 2.5)
                for i in range(2 * QUEUES):  # new messages on every queue
                    assert store.put(TOPIC, b"late%d" % i, i % QUEUES).ok
                time.sleep(BEAT * 3)  # b picked up the frozen member's queues
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            a.send("commit")
            answer = a.line()
            assert answer.startswith("fenced "), answer
            assert "now belongs to member" in answer and "pid" in answer, answer
            a.send("poll")
            state = json.loads(a.expect("{"))
            regained = {q for e in state["events"] if e["ev"] == "assign" for q in e["q"]}
            lost = {q for e in state["events"] if e["ev"] == "revoke" for q in e["q"]}
            assert before <= lost, (before, state["events"])
            assert all(q in regained or q not in before for q, _o in state["msgs"]), state
            b.stop()
            a.stop()
        finally:
            a.reap()
            b.reap()
    # Nothing was lost: b delivered every late message of a's old queues.
    got = {(q, o) for e in read_log(log) if e["ev"] == "got" for q, o in e["msgs"]}
    for q in before:
        assert {(q, o) for o in range(4, 6)} <= got
