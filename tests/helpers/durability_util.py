"""Helpers shared by ``tests/durability/`` and the crash writer subprocess.

Every message of the durability tests is derived from its sequence number:
topic ``D``, queue ``seq % 4``, key ``k-<seq>``, body :func:`body_for` (which
also names the writer's round, so a stale record of an earlier round that
resurfaces after a later crash is caught). A checker therefore knows, for any
record it reads back, exactly what it must contain.

This module is imported both as ``helpers.durability_util`` (tests) and as
``durability_util`` (``crash_writer.py`` run as a script), so it imports
nothing from the test tree.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketstore import FlushDiskType, GetStatus, MessageExt, MessageStore, StoreConfig

TOPIC = "D"
QUEUES = 4
#: Small segments: the default sizes reserve 1 GiB per CommitLog file.
SMALL_CFG: dict[str, Any] = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 500,
    "max_hash_slot_num": 100,
    "max_index_num": 2000,
}
CL_FILE = SMALL_CFG["mapped_file_size_commit_log"]
CQ_FILE = SMALL_CFG["mapped_file_size_consume_queue"]
WRITER = Path(__file__).with_name("crash_writer.py")


def key_for(seq: int) -> str:
    return f"k-{seq}"


def body_for(seq: int, rnd: int = 1) -> bytes:
    """Deterministic body of message ``seq`` written in round ``rnd`` (8..~600 bytes)."""
    return f"r{rnd}s{seq};".encode() * (1 + (seq * 7919) % 50)


def seq_of(m: MessageExt) -> int:
    keys = [k for k in m.keys if k.startswith("k-")]
    assert len(keys) == 1, f"unexpected keys {m.keys!r}"
    return int(keys[0][2:])


def config(path: str | os.PathLike[str], flush: str = "async", **extra: Any) -> StoreConfig:
    ftype = FlushDiskType.SYNC_FLUSH if flush == "sync" else FlushDiskType.ASYNC_FLUSH
    return StoreConfig(store_path=os.fspath(path), flush_disk_type=ftype, **{**SMALL_CFG, **extra})


@dataclasses.dataclass(frozen=True)
class Ack:
    """One acknowledged put, as the writer printed (or a test recorded) it."""

    seq: int
    wrote_offset: int
    queue_id: int
    queue_offset: int
    msg_id: str
    wrote_bytes: int = 0


def wait_dispatched(store: MessageStore, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() != 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"dispatch {store.dispatch_behind_bytes()} bytes behind")
        time.sleep(0.002)


# -- the kill -9 writer --------------------------------------------------------------------


def parse_ack(line: str) -> Ack:
    """An acknowledgement line of a writer: ``seq wrote_offset queue_id queue_offset
    msg_id wrote_bytes``."""
    seq, off, qid, qoff, msg_id, nbytes = line.split()
    return Ack(int(seq), int(off), int(qid), int(qoff), msg_id, int(nbytes))


# -- checking a recovered store ------------------------------------------------------------


def read_queue(store: MessageStore, queue_id: int) -> list[MessageExt]:
    """Every message of ``TOPIC``/``queue_id`` from offset 0 to the max, checking that
    the offsets are dense (each pull continues exactly where the last one ended)."""
    assert store.get_min_offset_in_queue(TOPIC, queue_id) == 0
    max_off = store.get_max_offset_in_queue(TOPIC, queue_id)
    out: list[MessageExt] = []
    while len(out) < max_off:
        off = len(out)
        r = store.get_message("g", TOPIC, queue_id, off, 32)
        assert r.status is GetStatus.FOUND, (queue_id, off, max_off, r.status)
        assert r.messages, (queue_id, off)
        for m in r.messages:
            assert m.queue_offset == len(out), (queue_id, m.queue_offset, len(out))
            out.append(m)
        assert r.next_begin_offset == len(out)
    if max_off:
        end = store.get_message("g", TOPIC, queue_id, max_off, 32)
        assert end.status is GetStatus.OFFSET_OVERFLOW_ONE, end.status
        assert not end.messages
    return out


def check_message(m: MessageExt, round_of: Callable[[int], int]) -> int:
    """A returned message is intact: body, queue and key all match its seq."""
    seq = seq_of(m)
    assert m.topic == TOPIC
    assert m.queue_id == seq % QUEUES, (seq, m.queue_id)
    assert m.body == body_for(seq, round_of(seq)), f"corrupt or stale body for seq {seq}"
    return seq


def check_store(
    store: MessageStore,
    acks: list[Ack],
    round_of: Callable[[int], int] = lambda s: 1,
    *,
    query_keys: bool = True,
) -> int:
    """Checks a recovered store against what a single sequential writer acknowledged.

    * every message readable through the consume queues is intact, the queues
      are dense from 0, and together they hold exactly seqs ``0..n-1`` (the
      CommitLog is a prefix of what was written), in CommitLog order;
    * every acknowledged message is there (by id, by queue offset, by key);
    Returns ``n``.
    """
    by_seq: dict[int, MessageExt] = {}
    for q in range(QUEUES):
        prev = -1
        for m in read_queue(store, q):
            seq = check_message(m, round_of)
            assert seq > prev, f"queue {q}: seq {seq} after {prev}"
            prev = seq
            assert seq not in by_seq, f"seq {seq} twice"
            by_seq[seq] = m
    n = len(by_seq)
    if sorted(by_seq) != list(range(n)):
        missing = sorted(set(range(max(by_seq) + 1)) - set(by_seq))
        queues = {q: store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
        raise AssertionError(
            f"the recovered log is not a prefix of the writes: {len(missing)} seqs missing "
            f"below {max(by_seq)} (e.g. {missing[:8]}); queue max offsets {queues}; "
            f"recovery {store.recovery_report}"
        )
    offsets = [by_seq[s].commit_log_offset for s in range(n)]
    assert offsets == sorted(offsets), "CommitLog order differs from write order"
    for a in acks:
        assert a.seq < n, f"acknowledged seq {a.seq} lost (only {n} messages recovered)"
        m = by_seq[a.seq]
        assert (m.commit_log_offset, m.queue_id, m.queue_offset) == (
            a.wrote_offset,
            a.queue_id,
            a.queue_offset,
        ), a
        assert m.msg_id == a.msg_id
        byid = store.look_message_by_id(a.msg_id)
        assert byid is not None and byid.body == m.body
    if query_keys:
        for seq in range(n):
            found = store.query_message(TOPIC, key_for(seq))
            assert [x.commit_log_offset for x in found] == [by_seq[seq].commit_log_offset], (
                f"query_message({key_for(seq)!r}) -> {found}"
            )
    return n
