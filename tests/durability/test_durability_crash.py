"""Durability across process death (kill -9 of a writer subprocess).

* SYNC_FLUSH acknowledges a put only once group commit flushed it: the flushed
  offset covers the record at every acknowledgement (single puts, batches,
  concurrent producers).
* A SYNC_FLUSH or ASYNC_FLUSH writer killed with SIGKILL at a random moment:
  after reopening (abnormal recovery) every acknowledged message is there and
  intact, the log is a prefix of what was written, the queues are dense from
  0, every key is found, and the store takes new puts right at the end.
* Crashing twice (kill, recover-and-write, kill again): both rounds'
  acknowledged messages survive and no record cut by the first recovery ever
  comes back (docs/format.md §14: truncation zeroes).

kill -9 keeps the page cache, so it cannot show what a power loss loses; that
is ``test_durability_images.py``. Heavier repetitions are marked ``slow``.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.durability_util import (
    CL_FILE,
    QUEUES,
    TOPIC,
    WRITER,
    Ack,
    body_for,
    check_store,
    config,
    key_for,
    parse_ack,
    wait_dispatched,
)
from helpers.killed_child import run_then_kill
from rocketstore import GetStatus, Message, MessageStore, PutResult, PutStatus

# -- SYNC_FLUSH: the acknowledgement invariant ----------------------------------------------


def _assert_acked_flushed(store: MessageStore, r: PutResult) -> None:
    assert r.status is PutStatus.PUT_OK, r.status
    end = r.wrote_offset + r.wrote_bytes
    flushed = store.flushed_offset
    assert flushed >= end, f"acknowledged record ends at {end} but flushed_offset is {flushed}"


def test_sync_ack_implies_flushed(tmp_path: Path) -> None:
    rng = random.Random(1)
    with MessageStore(config(tmp_path / "s", "sync")) as store:
        seq = 0
        while store.max_phy_offset < 4 * CL_FILE:  # cross several files (and END_OF_FILE blanks)
            kind = rng.random()
            if kind < 0.4:
                rs = [store.put(TOPIC, body_for(seq), seq % QUEUES, keys=key_for(seq))]
            elif kind < 0.7:
                rs = [
                    store.put_message(
                        Message(TOPIC, body_for(seq), seq % QUEUES, keys=key_for(seq))
                    )
                ]
            else:
                n = rng.randint(1, 12)
                rs = store.put_messages(
                    [
                        Message(TOPIC, body_for(s), s % QUEUES, keys=key_for(s))
                        for s in range(seq, seq + n)
                    ]
                )
                assert len(rs) == n
            # Checked right at the acknowledgement, before anything else runs.
            for r in rs:
                _assert_acked_flushed(store, r)
            seq += len(rs)
        wait_dispatched(store)
        check_store(store, [])


def test_sync_ack_implies_flushed_concurrent_producers(tmp_path: Path) -> None:
    """Group commit with several producers: each one's acknowledgement is covered."""
    errors: list[str] = []
    with MessageStore(config(tmp_path / "s", "sync")) as store:

        def produce(t: int) -> None:
            try:
                for i in range(150):
                    if i % 10 == 9:
                        rs = store.put_messages(
                            [Message(f"C{t}", b"b%d" % j * 20, j % 2) for j in range(5)]
                        )
                    else:
                        rs = [store.put(f"C{t}", b"p%d" % i * (i % 40 + 1), i % 2)]
                    for r in rs:
                        _assert_acked_flushed(store, r)
            except AssertionError as e:  # pragma: no cover - reported below
                errors.append(f"producer {t}: {e}")

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert not errors, errors[:3]
        assert store.max_phy_offset > CL_FILE


# -- kill -9 of a writer subprocess -------------------------------------------------------


@dataclasses.dataclass
class KilledRun:
    ready: str  # the writer's READY line: "READY <mode> <messages present> <max_phy>"
    acks: list[Ack]

    @property
    def start_seq(self) -> int:
        return int(self.ready.split()[2])


def _kill_run(tmp_path: Path, flush: str, seed: int, rnd: int = 1) -> KilledRun:
    """Starts ``crash_writer.py`` on ``tmp_path/store``, lets it acknowledge puts
    for a random moment after it is ready, then SIGKILLs it. A line printed is an
    acknowledgement; a partial last line is ignored."""
    delay = random.Random(seed).uniform(0.05, 0.4)
    run = run_then_kill(
        [WRITER, tmp_path / "store", flush, str(rnd), str(seed)],
        stderr_path=tmp_path / f"writer{rnd}.err",
        marker=b"READY",
        marker_timeout=60,
        run_for=delay,
    )
    ready_lines = [ln for ln in run.complete if ln.startswith("READY")]
    assert ready_lines, f"writer never got ready (rc={run.returncode}):\n{run.stderr}"
    bad = [ln for ln in run.complete if ln.startswith(("ERR", "BAD"))]
    assert not bad, f"writer reported: {bad[:5]}\n{run.stderr}"
    assert run.returncode == -9, f"writer was not killed (rc={run.returncode}):\n{run.stderr}"
    acks = [parse_ack(ln) for ln in run.complete if ln[0].isdigit()]
    return KilledRun(ready_lines[0].strip(), acks)


def _check_reopened(
    tmp_path: Path, flush: str, acks: list[Ack], round_of: Callable[[int], int] = lambda s: 1
) -> int:
    with MessageStore(config(tmp_path / "store", flush)) as store:
        report = store.recovery_report
        assert report is not None and report.mode == "abnormal"
        assert report.end_offset == store.max_phy_offset
        n = check_store(store, acks, round_of)
        # The store takes new puts right at the recovered end, continuing every queue.
        table = store.queue_offset_table()
        end = store.max_phy_offset
        r = store.put(TOPIC, body_for(n, 9), n % QUEUES, keys=key_for(n))
        assert r.ok
        if end % CL_FILE + r.wrote_bytes + 8 <= CL_FILE:
            assert r.wrote_offset == end
        else:  # did not fit: the rest of the file became a blank, next file
            assert r.wrote_offset == end - end % CL_FILE + CL_FILE
        assert r.queue_offset == table.get((TOPIC, n % QUEUES), 0)
        wait_dispatched(store)
        got = store.get_message("g", TOPIC, n % QUEUES, r.queue_offset, 1)
        assert got.status is GetStatus.FOUND and got.messages[0].body == body_for(n, 9)
    return n


def _run_sync(tmp_path: Path, seed: int) -> None:
    run = _kill_run(tmp_path, "sync", seed)
    assert run.ready.startswith("READY normal 0 ")
    n = _check_reopened(tmp_path, "sync", run.acks)
    assert n >= len(run.acks)
    # A SYNC writer acknowledges one put (or batch) at a time: at most one
    # batch (<= 8 messages) was written but not yet acknowledged.
    assert n - len(run.acks) <= 8


@pytest.mark.parametrize("seed", range(20))
def test_kill9_sync_flush_keeps_every_acknowledged_message(tmp_path: Path, seed: int) -> None:
    _run_sync(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1100))
def test_kill9_sync_flush_many(tmp_path: Path, seed: int) -> None:
    _run_sync(tmp_path, seed)


def _run_async(tmp_path: Path, seed: int) -> None:
    run = _kill_run(tmp_path, "async", seed)
    # Process death keeps the page cache: even unflushed acknowledged messages survive.
    n = _check_reopened(tmp_path, "async", run.acks)
    assert n >= len(run.acks)


@pytest.mark.parametrize("seed", range(100, 106))
def test_kill9_async_flush_recovers_consistent_prefix(tmp_path: Path, seed: int) -> None:
    _run_async(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2000, 2040))
def test_kill9_async_flush_many(tmp_path: Path, seed: int) -> None:
    _run_async(tmp_path, seed)


# -- crashing twice ---------------------------------------------------------------------------


def _run_twice(tmp_path: Path, flush: str, seed: int) -> None:
    first = _kill_run(tmp_path, flush, seed, rnd=1)
    # The second writer recovers the crashed store itself, writes, and is killed too.
    second = _kill_run(tmp_path, flush, seed + 7, rnd=2)
    assert second.ready.split()[1] == "abnormal", second.ready
    n1 = second.start_seq
    assert all(a.seq < n1 for a in first.acks), "round 1 lost an acknowledged message"
    assert all(a.seq >= n1 for a in second.acks)
    # A record of round 1 cut by the first recovery would come back with a round-1 body.
    n = _check_reopened(tmp_path, flush, first.acks + second.acks, lambda s: 1 if s < n1 else 2)
    assert n >= n1 + len(second.acks)


@pytest.mark.parametrize("flush", ["sync", "async"])
@pytest.mark.parametrize("seed", range(200, 202))
def test_kill9_twice(tmp_path: Path, flush: str, seed: int) -> None:
    _run_twice(tmp_path, flush, seed)


@pytest.mark.slow
@pytest.mark.parametrize("flush", ["sync", "async"])
@pytest.mark.parametrize("seed", range(3000, 3015))
def test_kill9_twice_many(tmp_path: Path, flush: str, seed: int) -> None:
    _run_twice(tmp_path, flush, seed)


def _put_round(store: MessageStore, seqs: range, rnd: int) -> list[Ack]:
    acks = []
    for s in seqs:
        r = store.put(TOPIC, body_for(s, rnd), s % QUEUES, keys=key_for(s))
        assert r.ok
        acks.append(
            Ack(s, r.wrote_offset, s % QUEUES, r.queue_offset, r.msg_id or "", r.wrote_bytes)
        )
    return acks


def _commitlog_write(store_path: Path, phy: int, data: bytes) -> None:
    f = store_path / "commitlog" / f"{phy - phy % CL_FILE:020d}"
    with open(f, "r+b") as fh:
        fh.seek(phy % CL_FILE)
        fh.write(data)


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_crash_twice_cut_records_never_come_back(tmp_path: Path, flush: str) -> None:
    """A hole in the tail makes recovery cut the valid records behind it. They
    must be zeroed: round 2 rewrites the hole with a record of exactly the same
    size, so after a second crash the scan reaches the old records' offsets —
    where only zeros may be found."""
    path = tmp_path / "store"
    store = MessageStore(config(path, flush)).start()
    acks = _put_round(store, range(300), 1)
    wait_dispatched(store)
    store._native._simulate_crash()  # type: ignore[union-attr]
    del store
    hole = acks[290]
    # A torn record: what kill -9 in the middle of its copy leaves behind.
    _commitlog_write(path, hole.wrote_offset + 20, b"\0" * (hole.wrote_bytes - 20))

    store = MessageStore(config(path, flush)).start()
    rep = store.recovery_report
    assert rep is not None and rep.mode == "abnormal"
    assert rep.end_offset == hole.wrote_offset
    assert rep.bytes_truncated > 0
    check_store(store, acks[:290])
    for a in acks[290:]:
        assert store.look_message_by_offset(a.wrote_offset) is None
        assert store.query_message(TOPIC, key_for(a.seq)) == []
    # Same seq, same body length: ends exactly where the cut record 291 started.
    redo = _put_round(store, range(290, 291), 2)
    assert redo[0].wrote_offset == hole.wrote_offset
    assert redo[0].wrote_offset + redo[0].wrote_bytes == acks[291].wrote_offset
    if flush == "async":
        store.flush()
    store._native._simulate_crash()  # type: ignore[union-attr]
    del store

    with MessageStore(config(path, flush)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "abnormal"
        assert rep.end_offset == acks[291].wrote_offset, "cut records came back"
        n = check_store(store, acks[:290] + redo, lambda s: 2 if s == 290 else 1)
        assert n == 291
        assert store.look_message_by_offset(acks[291].wrote_offset) is None
