"""Model test of the store's durability (a hypothesis state machine).

A :class:`RuleBasedStateMachine` drives one store through puts, batches,
pulls, flushes, clean restarts, simulated crashes (``kill -9`` in-process:
no final flush, the abort file stays, the page cache keeps the data), key
queries and consumer-offset commits, and compares everything it reads with a
plain list model:

* every acknowledged message stays readable, byte for byte, at its CommitLog
  offset and at its queue offset, across restarts and crashes;
* each queue's max offset equals the model's length;
* ``get_message`` answers FOUND / OFFSET_OVERFLOW_ONE / OFFSET_OVERFLOW_BADLY /
  NO_MESSAGE_IN_QUEUE exactly as the model predicts (docs/format.md §18.3);
* key queries find exactly the messages carrying the key (also after a crash:
  no key is lost to an abnormal exit);
* committed consumer offsets survive a clean restart (and a crash, once
  flushed);
* a power loss (a crash that also zeroes the CommitLog past the flushed
  offset) loses no SYNC_FLUSH acknowledgement, and loses exactly the
  unflushed suffix under ASYNC_FLUSH.

Each example runs in a fresh temporary directory with small segments, so
CommitLog files roll often.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from helpers.presets import SMALL
from helpers.read_util import wait_dispatched
from rocketstore import FlushDiskType, GetStatus, Message, MessageStore, PutStatus, StoreConfig

CQ_UNITS_PER_FILE = 500

TOPICS = ("orders", "audit")
QUEUES = (0, 1, 2)
GROUPS = ("g1", "g2")
KEYS = ("k0", "k1", "k2", "k3", "k4")

topics = st.sampled_from(TOPICS)
queue_ids = st.sampled_from(QUEUES)
bodies = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=500, max_size=3000),
)
key_lists = st.one_of(
    st.none(), st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)
)
messages = st.tuples(topics, queue_ids, bodies, key_lists)


class Stored:
    """One acknowledged message as the model remembers it."""

    __slots__ = ("body", "keys", "phy", "queue_id", "queue_offset", "size", "topic")

    def __init__(
        self, topic: str, queue_id: int, body: bytes, keys: list[str] | None, r: Any
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.body = body
        self.keys = keys or []
        self.phy = r.wrote_offset
        self.size = r.wrote_bytes
        self.queue_offset = r.queue_offset


def zero_commit_log_from(commit_log_dir: Any, offset: int) -> None:
    """Zeroes every CommitLog byte at or after ``offset`` (file sizes kept)."""
    d = Path(commit_log_dir)
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        start, size = int(p.name), p.stat().st_size
        if start + size <= offset:
            continue
        at = max(0, offset - start)
        with open(p, "r+b") as f:
            f.seek(at)
            f.write(bytes(size - at))
            f.flush()


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.path = tempfile.mkdtemp(prefix="rs-model-")
        self.store: MessageStore | None = None
        self.cfg: StoreConfig | None = None
        self.queues: dict[tuple[str, int], list[Stored]] = {}
        self.committed: dict[tuple[str, str, int], int] = {}
        self.persisted: dict[tuple[str, str, int], int] = {}

    # -- helpers -------------------------------------------------------------

    @property
    def s(self) -> MessageStore:
        assert self.store is not None
        return self.store

    def _open(self, expect_mode: str | None) -> None:
        assert self.cfg is not None
        self.store = MessageStore(self.cfg).start()
        report = self.store.recovery_report
        assert report is not None
        if expect_mode is not None:
            assert report.mode == expect_mode, report
        assert self.store.is_writeable, self.store.running_flags

    def _record(self, topic: str, qid: int, body: bytes, keys: list[str] | None, r: Any) -> None:
        assert r.status is PutStatus.PUT_OK, r.status
        q = self.queues.setdefault((topic, qid), [])
        assert r.queue_offset == len(q), (topic, qid, r.queue_offset, len(q))
        q.append(Stored(topic, qid, body, keys, r))

    def _check_message(self, m: Any, want: Stored) -> None:
        assert m is not None, f"message at {want.phy} is gone"
        assert m.body == want.body
        assert m.topic == want.topic
        assert m.queue_id == want.queue_id
        assert m.queue_offset == want.queue_offset
        assert m.commit_log_offset == want.phy
        assert m.store_size == want.size
        assert m.keys == want.keys

    # -- rules -----------------------------------------------------------------

    @initialize(sync=st.booleans())
    def open_store(self, sync: bool) -> None:
        self.cfg = StoreConfig(
            store_path=self.path,
            flush_disk_type=FlushDiskType.SYNC_FLUSH if sync else FlushDiskType.ASYNC_FLUSH,
            **SMALL,
        )
        self._open("normal")

    @rule(msg=messages)
    def put(self, msg: tuple[str, int, bytes, list[str] | None]) -> None:
        topic, qid, body, keys = msg
        r = self.s.put(topic, body, queue_id=qid, keys=keys)
        self._record(topic, qid, body, keys, r)

    @rule(batch=st.lists(messages, min_size=1, max_size=6))
    def put_messages(self, batch: list[tuple[str, int, bytes, list[str] | None]]) -> None:
        rs = self.s.put_messages(
            [Message(topic, body, queue_id=qid, keys=keys) for topic, qid, body, keys in batch]
        )
        assert len(rs) == len(batch)
        last_end = -1
        for (topic, qid, body, keys), r in zip(batch, rs, strict=True):
            # In order, one after the other.
            assert r.wrote_offset >= last_end
            last_end = r.wrote_offset + r.wrote_bytes
            self._record(topic, qid, body, keys, r)

    @rule(
        topic=topics,
        qid=queue_ids,
        delta=st.integers(-40, 3),
        max_msgs=st.integers(1, 32),
    )
    def get(self, topic: str, qid: int, delta: int, max_msgs: int) -> None:
        """Pull at an offset around the queue end (delta < 0: inside the queue)."""
        q = self.queues.get((topic, qid), [])
        n = len(q)
        offset = max(0, n + delta)
        wait_dispatched(self.s)
        g = self.s.get_message("grp", topic, qid, offset, max_msgs)
        if n == 0:
            assert g.status is GetStatus.NO_MESSAGE_IN_QUEUE, g.status
            assert g.messages == []
            return
        assert g.max_offset == n
        assert g.min_offset == 0
        if offset == n:
            assert g.status is GetStatus.OFFSET_OVERFLOW_ONE, g.status
            assert g.next_begin_offset == offset
            assert g.messages == []
        elif offset > n:
            assert g.status is GetStatus.OFFSET_OVERFLOW_BADLY, g.status
            assert g.next_begin_offset == n
            assert g.messages == []
        else:
            assert g.status is GetStatus.FOUND, g.status
            # A pull never crosses a ConsumeQueue file boundary (docs/format.md §18.2).
            in_file = CQ_UNITS_PER_FILE - offset % CQ_UNITS_PER_FILE
            want = q[offset : offset + min(max_msgs, in_file)]
            assert len(g.messages) == len(want)
            for m, w in zip(g.messages, want, strict=True):
                self._check_message(m, w)
            assert g.next_begin_offset == offset + len(want)

    @rule(topic=topics, key=st.sampled_from(KEYS))
    def query_by_key(self, topic: str, key: str) -> None:
        wait_dispatched(self.s)
        want = sorted(
            (m for (t, _), q in self.queues.items() if t == topic for m in q if key in m.keys),
            key=lambda m: m.phy,
        )
        got = self.s.query_message(topic, key, 64)
        if len(want) <= 32:
            assert [m.commit_log_offset for m in got] == [m.phy for m in want]
        else:
            # More than one index round can hold: whatever comes back is genuine.
            by_phy = {m.phy: m for m in want}
            assert got, "key query found nothing"
            assert all(m.commit_log_offset in by_phy for m in got)
        by_phy = {m.phy: m for m in want}
        for m in got:
            self._check_message(m, by_phy[m.commit_log_offset])

    @rule(group=st.sampled_from(GROUPS), topic=topics, qid=queue_ids, data=st.data())
    def commit_offset(self, group: str, topic: str, qid: int, data: st.DataObject) -> None:
        n = len(self.queues.get((topic, qid), []))
        off = data.draw(st.integers(0, n), label="next_offset")
        self.s.commit_offset(group, topic, qid, off)
        self.committed[(group, topic, qid)] = off

    @rule()
    def flush(self) -> None:
        off = self.s.flush()
        assert off == self.s.max_phy_offset
        assert self.s.flushed_offset == self.s.max_phy_offset
        self.persisted = dict(self.committed)

    @rule()
    def restart(self) -> None:
        self.s.shutdown()
        self.persisted = dict(self.committed)
        self._open("normal")

    @rule()
    def crash(self) -> None:
        native = self.s._native
        assert native is not None
        native._simulate_crash()
        self.store = None
        # Offsets committed since the last flush/shutdown were only in memory.
        self.committed = dict(self.persisted)
        self._open("abnormal")

    @rule()
    def power_loss(self) -> None:
        """A crash that also loses what never reached the disk.

        The CommitLog bytes past the flushed offset (read just before the
        crash; the flush threads may have gone further, which only makes
        the loss bigger than necessary) are zeroed, as after a power cut.
        SYNC_FLUSH acknowledged nothing past it, so nothing acknowledged is
        lost; ASYNC_FLUSH loses the unflushed suffix, and recovery must cut
        the queues and the index back consistently.
        """
        assert self.cfg is not None
        flushed = self.s.flushed_offset
        native = self.s._native
        assert native is not None
        native._simulate_crash()
        self.store = None
        zero_commit_log_from(self.cfg.commit_log_dir, flushed)
        lost = [m for q in self.queues.values() for m in q if m.phy + m.size > flushed]
        if self.cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            assert not lost, f"SYNC_FLUSH acknowledged {len(lost)} messages past {flushed}"
        for key, q in self.queues.items():
            self.queues[key] = [m for m in q if m.phy + m.size <= flushed]
        self.committed = dict(self.persisted)
        self._open("abnormal")

    @precondition(lambda self: self.store is not None)
    @rule()
    def read_everything(self) -> None:
        """Every acknowledged message, through a pull of its whole queue."""
        wait_dispatched(self.s)
        for (topic, qid), q in self.queues.items():
            offset = 0
            while offset < len(q):
                g = self.s.get_message("all", topic, qid, offset, 32)
                assert g.status is GetStatus.FOUND, (topic, qid, offset, g.status)
                assert g.messages
                for m in g.messages:
                    self._check_message(m, q[m.queue_offset])
                offset = g.next_begin_offset

    # -- invariants ------------------------------------------------------------

    @invariant()
    def max_offsets_match_model(self) -> None:
        if self.store is None:
            return
        wait_dispatched(self.s)
        for topic in TOPICS:
            for qid in QUEUES:
                n = len(self.queues.get((topic, qid), []))
                assert self.s.get_max_offset_in_queue(topic, qid) == n, (topic, qid)
                assert self.s.get_min_offset_in_queue(topic, qid) == 0

    @invariant()
    def every_message_reads_back(self) -> None:
        if self.store is None:
            return
        for q in self.queues.values():
            for want in q:
                self._check_message(self.s.look_message_by_offset(want.phy), want)

    @invariant()
    def committed_offsets(self) -> None:
        if self.store is None:
            return
        for (group, topic, qid), off in self.committed.items():
            assert self.s.query_offset(group, topic, qid) == off

    def teardown(self) -> None:
        try:
            if self.store is not None:
                self.store.shutdown()
        finally:
            shutil.rmtree(self.path, ignore_errors=True)


# The model reads topics and queues before their first put (and after a
# reopen): those reads return nothing, as the model expects, and warn
# UnknownTopicWarning, which is not what this test checks.
pytestmark = pytest.mark.filterwarnings("ignore::rocketstore.errors.UnknownTopicWarning")

_COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}

TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=25, stateful_step_count=30, **_COMMON)


class SlowStoreModel(StoreModel):
    pass


# 400 examples: about 11 minutes on a busy 2-core machine, past the default timeout.
TestStoreModelSlow = pytest.mark.timeout(1800)(pytest.mark.slow(SlowStoreModel.TestCase))
TestStoreModelSlow.settings = settings(max_examples=400, stateful_step_count=100, **_COMMON)
