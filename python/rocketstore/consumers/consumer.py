"""A Kafka-style consumer over one topic of a :class:`~rocketstore.MessageStore`.

``store.consumer(group, topic)`` makes one. It owns every queue of the topic
(there is no group rebalancing: a group's consumer reads all queues), keeps a
*position* per queue — the next offset to read, as in Kafka — and stores it in
the group's committed offsets (``consumerOffset.json``) when you call
:meth:`Consumer.commit` (durable when it returns), and, as Kafka clients do
by default, every ``auto_commit_interval`` seconds inside :meth:`Consumer.poll`
and in :meth:`Consumer.close`.

Example::

    with MessageStore(cfg) as store, store.consumer("group-a", "orders") as consumer:
        while running:
            for msg in consumer.poll(timeout=1.0, max_messages=100):
                handle(msg.queue_id, msg.queue_offset, msg.body)
            consumer.commit()          # at-least-once: durable when it returns

    # or block forever, one message at a time (ends when the store shuts down):
    for msg in store.consumer("group-b", "orders", tags=["paid"]):
        handle(msg)

Waiting never busy-polls: the consumer sleeps in the store's
``wait_for_dispatch`` until the dispatcher makes new messages visible (a
read-only store wakes it by re-reading queue ends; see the README).

A consumer is not thread-safe: use it from one thread at a time (as Kafka's).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from rocketstore._arrow_pull import concat_batches, empty_batch
from rocketstore.consumers._contract import ArrowResultLike, ConsumerStore, GetResultLike
from rocketstore.consumers.committer import Committer, check_offset, offsets_arg
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.enums import GetStatus
from rocketstore.errors import StoreClosedError, StoreError

if TYPE_CHECKING:
    import pyarrow

    from rocketstore._native import MessageExt
    from rocketstore.consumers.offsets import ConsumerGroupLock

__all__ = ["ArrowResultLike", "Consumer", "ConsumerStore", "GetResultLike", "StartPosition"]

#: Where a queue without a committed offset starts (see :class:`Consumer`).
StartPosition = Literal["earliest", "latest"]

log = logging.getLogger("rocketstore")

# Messages asked of one queue per turn (RocketMQ's default pull batch), so a
# deep queue cannot fill a whole poll while others wait.
_PULL_BATCH = 32
# Turns over the queues within one fetch; bounds a fetch even if a (buggy)
# store kept moving a position back and forth.
_MAX_ROUNDS = 64
# Messages buffered per fetch when iterating.
_ITER_BATCH = 100

# A pull of one queue: (queue_id, offset, max messages) -> (result, messages buffered).
_Pull = Callable[[int, int, int], tuple[Any, int]]

# Statuses after which the position moves to next_begin_offset without any
# message: the data there expired, was filtered out, or the offset was invalid.
_CORRECTIONS = {
    GetStatus.OFFSET_TOO_SMALL: "below the queue's min offset (expired)",
    GetStatus.OFFSET_OVERFLOW_BADLY: "beyond the queue's max offset",
    GetStatus.OFFSET_FOUND_NULL: "in no consume queue file",
    GetStatus.MESSAGE_WAS_REMOVING: "in a CommitLog file being deleted",
    GetStatus.NO_MESSAGE_IN_QUEUE: "in a queue that holds no message",
}


class Consumer:
    """Reads every queue of ``topic`` for consumer group ``group``.

    Made by ``store.consumer(group, topic, start="earliest", tags=None,
    auto_commit=True, auto_commit_interval=5.0)``; the arguments are the
    same here after ``store``.

    Args:
        store: the store to read (anything implementing :class:`ConsumerStore`).
        group: the consumer group; its committed offsets are shared by every
            consumer of the group on this store.
        topic: the topic to read.
        start: where a queue starts when the group has no committed offset for
            it: ``"earliest"`` (the queue's min offset) or ``"latest"`` (its
            max offset when the consumer is created, i.e. only messages
            written from now on). Queues that appear *after* the consumer was
            created always start at their min offset: all their messages are
            newer than the consumer.
        tags: deliver only messages whose tag is one of these (exact match;
            ``None`` or ``["*"]`` = every message).
        auto_commit: commit as the Kafka clients do (on by default): each
            :meth:`poll` (and each fetch of the iterator) first commits, once
            ``auto_commit_interval`` seconds have passed since the last
            auto-commit, the positions that earlier polls returned — never
            the messages it is about to return — with ``sync=False``; and
            :meth:`close` (leaving a ``with`` block) commits durably. There is
            no timer thread: a consumer that is not polled does not commit.
            ``auto_commit=False``: only :meth:`commit` commits.
            An auto-commit records every queue together, and the offsets
            file holds them together: after a crash each queue redelivers
            at most what was delivered in the last ``auto_commit_interval``
            plus the store's 5 s between offset writes (and one poll).
        auto_commit_interval: seconds between auto-commits in :meth:`poll`
            (Kafka's ``auto.commit.interval.ms``; default 5).

    Positions are Kafka's: ``position(q)`` is the offset of the next message
    :meth:`poll` will return from queue ``q``, and :meth:`commit` stores these
    next offsets (RocketMQ's consumerOffset semantics too). A group with a
    committed offset for a queue resumes there.

    One consumer per group and topic at a time: while open, a consumer holds
    the group's lock for the topic (``config/consumerLocks/``, across
    processes; the kernel drops it if the process dies), and a second one
    is refused with :class:`~rocketstore.ConsumerGroupBusyError`.

    A read-only store's consumers commit to ``consumerOffset.json`` as the
    writer's do (merged under the file's lock, ``docs/format.md``, §13.1).
    On a store opened ``read_only=True, no_write=True`` nothing is written:
    :meth:`commit` keeps the positions in memory (see :meth:`committed`; it
    warns once that nothing is persisted), and they are lost with the
    consumer.

    Example::

        consumer = store.consumer("group-a", "orders")
        batch = consumer.poll(timeout=1.0)          # [] after 1 s without data
        consumer.position(0)                        # next offset of queue 0
        consumer.seek(0, 10)                        # re-read queue 0 from 10
        consumer.commit()                           # on disk: group-a resumes here
        consumer.close()
    """

    def __init__(
        self,
        store: ConsumerStore,
        group: str,
        topic: str,
        start: StartPosition = "earliest",
        *,
        tags: Iterable[str] | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
    ) -> None:
        OffsetKey.of(group, topic)  # the names rule of every call
        if start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest' or 'latest', not {start!r}")
        if isinstance(tags, str):
            raise TypeError("tags must be a list of tags, not a str (use [tag])")
        if (not isinstance(auto_commit_interval, (int, float))
                or isinstance(auto_commit_interval, bool)):
            raise TypeError("auto_commit_interval must be a number of seconds, "
                            f"not {type(auto_commit_interval).__name__}")
        if not auto_commit_interval >= 0:
            raise ValueError(f"auto_commit_interval must be >= 0, got {auto_commit_interval}")
        self._store = store
        self._group = group
        self._topic = topic
        self._closed = True  # until the group is held
        hold = getattr(store, "hold_consumer_group", None)
        self._group_lock: ConsumerGroupLock | None = (
            None if hold is None else hold(group, topic))
        self._start = start
        self._tags: list[str] | None = None if tags is None else list(tags)
        self._commits = Committer(store, group, topic, auto_commit=auto_commit,
                                  auto_commit_interval=auto_commit_interval)
        self._closed = False
        try:
            self._init_positions()
        except BaseException:
            self._mark_closed()
            raise

    def _init_positions(self) -> None:
        store = self._store
        # Next offset to deliver, per queue; also the assignment's key set.
        self._positions: dict[int, int] = {}
        # Next offset to fetch; differs from _positions while messages of the
        # queue sit in _buffer (fetched, not yet handed out by iteration).
        self._fetch_pos: dict[int, int] = {}
        self._buffer: collections.deque[tuple[int, MessageExt]] = collections.deque()
        self._buffered: dict[int, int] = {}
        self._assignment: list[int] = []
        self._assign_seq: int | None = None
        self._rr = 0
        self._skipped = 0
        # Damaged records the pulls passed over (see `damaged`).
        self._damaged = 0
        self._refresh(store.dispatch_seq, initial=True)

    # -- properties -----------------------------------------------------------

    @property
    def group(self) -> str:
        return self._group

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def tags(self) -> list[str] | None:
        return None if self._tags is None else list(self._tags)

    @property
    def skipped(self) -> int:
        """Messages retention deleted before this consumer read them.

        When retention deleted messages at or after this consumer's position
        (a queue's min offset passed it, or a pull met units whose CommitLog
        file is gone), reading continues after them; every such offset is
        counted here (each pull's ``skipped``) and logged naming the group.
        So, without a tag filter, the offsets a queue's position moved past
        are exactly the messages delivered + ``skipped`` + ``damaged``.
        (Not ``lag``: in Kafka that means messages not read yet.)
        """
        return self._skipped

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def damaged(self) -> int:
        """Messages this consumer skipped because their record is damaged.

        A damaged record (body CRC or size fields wrong, or in a range that
        recovery skipped, see ``StoreConfig.on_corruption``) is never
        delivered; the position moves past it and the store logs it once.
        """
        return self._damaged

    # -- assignment -------------------------------------------------------------

    def _refresh(self, seq: int, *, initial: bool = False) -> None:
        """Pick up queues of the topic that appeared (new queues need a message)."""
        store, group, topic = self._store, self._group, self._topic
        ids = store.queue_ids(topic)
        self._assign_seq = seq
        added = False
        for q in ids:
            if q in self._positions:
                continue
            committed = store.query_offset(group, topic, q)
            if committed >= 0:
                pos = committed
                self._commits.committed[q] = committed
            elif initial and self._start == "latest":
                pos = store.get_max_offset_in_queue(topic, q)
            else:
                pos = store.get_min_offset_in_queue(topic, q)
            self._positions[q] = self._fetch_pos[q] = pos
            added = True
            if not initial:
                log.debug("consumer %s: new queue %s/%d at offset %d", group, topic, q, pos)
        if added:
            self._assignment = sorted(self._positions)

    def _maybe_refresh(self) -> None:
        seq = self._store.dispatch_seq
        if seq != self._assign_seq:
            self._refresh(seq)

    def assignment(self) -> list[int]:
        """Queue ids this consumer reads (sorted); grows when queues appear."""
        self._check_open()
        self._maybe_refresh()
        return list(self._assignment)

    def _check_queue(self, queue_id: int) -> None:
        if queue_id not in self._positions:
            self._maybe_refresh()
            if queue_id not in self._positions:
                raise ValueError(
                    f"queue {queue_id} of topic {self._topic!r} does not exist "
                    f"(assignment: {self._assignment})"
                )

    # -- reading ----------------------------------------------------------------

    def _pull_messages(self, q: int, pos: int, n: int) -> tuple[GetResultLike, int]:
        """One ``get_message`` of queue ``q``; its messages join the buffer."""
        r = self._store.get_message(self._group, self._topic, q, pos, n, self._tags)
        msgs = r.messages
        if msgs:
            buf = self._buffer
            for m in msgs:
                buf.append((q, m))
            self._buffered[q] = self._buffered.get(q, 0) + len(msgs)
        return r, len(msgs)

    def _fetch(self, budget: int, pull: _Pull | None = None, share_cap: int = _PULL_BATCH) -> bool:
        """Buffer up to ``budget`` messages, turn by turn over the queues.

        Each round gives every queue still in play an equal share of what is
        left of the budget (at most ``share_cap``); a queue stays in play
        while it yields messages or its position moves. ``pull(q, pos, n)``
        reads and buffers (default: :meth:`_pull_messages`) and returns the
        pull's result and how many messages it buffered. Returns True if
        anything moved (messages buffered or a position corrected), False
        when every queue is caught up.
        """
        queues = self._assignment
        n = len(queues)
        if n == 0:
            return False
        if pull is None:
            pull = self._pull_messages
        start = self._rr % n
        self._rr = start + 1
        active = queues[start:] + queues[:start]
        group, topic = self._group, self._topic
        progressed = False
        rounds = 0
        while active and budget > 0 and rounds < _MAX_ROUNDS:
            rounds += 1
            share = min(share_cap, -(-budget // len(active)))  # ceil
            again: list[int] = []
            for q in active:
                if budget <= 0:
                    break
                pos = self._fetch_pos[q]
                r, got = pull(q, pos, min(budget, share))
                nxt = r.next_begin_offset
                damaged = r.damaged
                if damaged:
                    self._damaged += damaged
                skipped = r.skipped
                if skipped:
                    # Retention deleted these before the group read them.
                    self._skipped += skipped
                    log.warning("consumer group %s: %s/%d messages %d..%d were deleted "
                                "by retention before they were consumed; skipping %d",
                                group, topic, q, pos, pos + skipped - 1, skipped)
                if got:
                    budget -= got
                elif nxt == pos:
                    continue  # caught up (OFFSET_OVERFLOW_ONE) or nothing to do
                elif not skipped:
                    why = _CORRECTIONS.get(r.status)
                    if why is not None:
                        log.info("consumer %s: %s/%d offset %d is %s; moving to %d",
                                 group, topic, q, pos, why, nxt)
                self._fetch_pos[q] = nxt
                if not self._buffered.get(q):
                    self._positions[q] = nxt
                progressed = True
                again.append(q)
            active = again
        return progressed

    def _fill(self, timeout: float | None, budget: int, pull: _Pull | None = None,
              share_cap: int = _PULL_BATCH) -> bool:
        """Fetch until the buffer holds messages or ``timeout`` passes; True if it does.

        ``pull`` and ``share_cap``: as in :meth:`_fetch`.
        """
        steps = self._fill_steps(timeout, budget, pull, share_cap)
        wait = self._store.wait_for_dispatch
        try:
            step = next(steps)
            while True:
                step = steps.send(None if step is None else wait(*step))
        except StopIteration as done:
            return bool(done.value)

    def _fill_steps(self, timeout: float | None, budget: int, pull: _Pull | None = None,
                    share_cap: int = _PULL_BATCH,
                    ) -> Generator[tuple[int, float | None] | None, int | None, bool]:
        """:meth:`_fill` without its waits, for the blocking and the asyncio consumer.

        Yields ``(seq, remaining)`` when it must wait until the store's
        ``dispatch_seq`` differs from ``seq`` (``remaining`` seconds at most,
        ``None``: forever), and expects the current seq back; yields ``None``
        before fetching again at once (entries were skipped), expecting
        ``None`` back (a chance to let other work run). Returns True when the
        buffer holds messages, False when ``timeout`` passed.
        """
        if self._buffered:
            return True
        self._check_store()
        store = self._store
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        # Read the seq *before* fetching: a message dispatched after the fetch
        # then changes it, and the wait returns at once (no lost wakeup).
        seq = store.dispatch_seq
        while True:
            if seq != self._assign_seq:
                self._refresh(seq)
            progressed = self._fetch(budget, pull, share_cap)
            if self._buffered:
                return True
            while True:
                remaining: float | None = None
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                if progressed:  # skipped filtered/expired entries: look again now
                    yield None
                    seq = store.dispatch_seq
                    break
                new_seq = yield (seq, remaining)
                if new_seq is not None and new_seq != seq:  # something became visible
                    seq = new_seq
                    break
                # unchanged: the wait timed out (or woke early); nothing to fetch

    def _deliver(self, limit: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        buf, buffered, positions = self._buffer, self._buffered, self._positions
        while buf and len(out) < limit:
            q, m = buf.popleft()
            out.append(m)
            left = buffered[q] - 1
            if left:
                buffered[q] = left
                positions[q] = m.queue_offset + 1
            else:
                del buffered[q]
                positions[q] = self._fetch_pos[q]
        return out

    def poll(self, timeout: float | None = 1.0, max_messages: int = 100) -> list[MessageExt]:
        """Up to ``max_messages`` messages, as soon as any is available.

        Blocks (no busy polling) until a message is available or ``timeout``
        seconds pass (``None`` = forever, ``0`` = don't wait), then returns
        them — an empty list on timeout. Queues take turns: in each turn every
        queue with data gets an equal share of ``max_messages`` (at most 32
        per turn), and each poll starts its turns one queue further, so no
        queue starves. Within a queue, messages come in offset order.

        Positions move past the returned messages (and past entries skipped
        by the tag filter, or expired: the consumer follows the store's
        ``next_begin_offset`` on ``OFFSET_TOO_SMALL``, ``OFFSET_OVERFLOW_BADLY``,
        ``NO_MATCHED_MESSAGE``, ``OFFSET_FOUND_NULL``, ``MESSAGE_WAS_REMOVING``).
        Queues that appeared since the last call are read too.

        With ``auto_commit``, a poll made ``auto_commit_interval`` seconds or
        more after the last auto-commit first commits the current positions
        (what earlier polls returned), with ``sync=False``.

        Raises:
            StoreClosedError: the store was shut down.
            ValueError: the consumer is closed, or ``max_messages < 1``.
        """
        self._check_open()
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        self._maybe_auto_commit()
        if self._fill(timeout, max_messages):
            return self._deliver(max_messages)
        return []

    def poll_arrow(
        self,
        timeout: float | None = 1.0,
        max_messages: int = 1024,
        columns: Sequence[str] | None = None,
        zero_copy: bool = False,
    ) -> pyarrow.RecordBatch:
        """Up to ``max_messages`` messages as one Arrow record batch (needs ``pyarrow``).

        :meth:`poll` without a Python object per message: the same waiting,
        queue turns, positions, tag filter, auto-commit, and ``skipped`` /
        ``damaged`` accounting (the same code), each queue read with the
        store's :meth:`~rocketstore.MessageStore.get_arrow` (``columns`` and
        ``zero_copy`` as there). In each turn every queue with data gets an
        equal share of what is left of ``max_messages``; the batch holds the
        queues' rows one queue after another, each queue's in offset order.
        Returns a batch of 0 rows on timeout. Positions move past every row
        returned: :meth:`commit` afterwards commits the whole batch.

        Messages fetched for iteration (``for msg in consumer``) but not yet
        yielded are dropped and read again by this poll.

        Raises:
            StoreClosedError: the store was shut down.
            ValueError: the consumer is closed, ``max_messages < 1``, or an
                unknown column.
        """
        self._check_open()
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        self._maybe_auto_commit()
        pull, batches = self._arrow_pull(columns, zero_copy)
        try:
            self._fill(timeout, max_messages, pull, max_messages)
        except BaseException:
            # Nothing is returned: the positions stay before these rows.
            self._unbuffer()
            raise
        return self._arrow_result(batches, columns, zero_copy)

    def _arrow_pull(self, columns: Sequence[str] | None,
                    zero_copy: bool) -> tuple[_Pull, list[pyarrow.RecordBatch]]:
        """For :meth:`poll_arrow`: a pull that gathers batches, and the list it fills."""
        self._unbuffer()
        store, topic, tags = self._store, self._topic, self._tags
        batches: list[pyarrow.RecordBatch] = []

        def pull(q: int, pos: int, n: int) -> tuple[ArrowResultLike, int]:
            r = store.get_arrow(topic, q, pos, n, columns, zero_copy, tags=tags)
            rows = r.batch.num_rows
            if rows:
                batches.append(r.batch)
                self._buffered[q] = self._buffered.get(q, 0) + rows
            return r, rows

        return pull, batches

    def _arrow_result(self, batches: list[pyarrow.RecordBatch], columns: Sequence[str] | None,
                      zero_copy: bool) -> pyarrow.RecordBatch:
        """For :meth:`poll_arrow`: the rows fetched as one batch; positions move past them."""
        for q in self._buffered:
            self._positions[q] = self._fetch_pos[q]
        self._buffered.clear()
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return empty_batch(columns, zero_copy)
        return concat_batches(batches)

    def _unbuffer(self) -> None:
        """Drop messages fetched but not delivered; they are fetched again."""
        for q in self._buffered:
            self._fetch_pos[q] = self._positions[q]
        self._buffered.clear()
        self._buffer.clear()

    def __iter__(self) -> Iterator[MessageExt]:
        """Yield messages one by one, forever, blocking while there are none.

        Stops (without error) when the store shuts down or the consumer is
        closed. Positions move one message at a time, so ``commit()`` inside
        the loop commits exactly what the loop has seen.
        """
        return self

    def __next__(self) -> MessageExt:
        if not self._buffer:
            if self._closed:
                raise StopIteration
            try:
                self._maybe_auto_commit()
                self._fill(None, _ITER_BATCH)
            except StoreClosedError:
                raise StopIteration from None
        return self._deliver(1)[0]

    # -- positions ----------------------------------------------------------------

    def position(self, queue_id: int) -> int:
        """The offset of the next message :meth:`poll` returns from ``queue_id``.

        Raises:
            ValueError: the queue does not exist (yet).
        """
        self._check_open()
        self._check_queue(queue_id)
        return self._positions[queue_id]

    def positions(self) -> dict[int, int]:
        """``{queue_id: next offset}`` for every assigned queue."""
        self._check_open()
        self._maybe_refresh()
        return dict(self._positions)

    def seek(self, queue_id: int, offset: int) -> None:
        """Make ``offset`` the next offset read from ``queue_id``.

        An offset outside the queue is corrected by the next poll (to the min
        offset if below it, to the end if beyond it). Messages of the queue
        fetched but not yet returned are dropped.

        Raises:
            ValueError: the queue does not exist, or ``offset < 0``.
        """
        self._check_open()
        check_offset("offset", offset)
        self._check_queue(queue_id)
        if self._buffered.pop(queue_id, 0):
            self._buffer = collections.deque(e for e in self._buffer if e[0] != queue_id)
        self._positions[queue_id] = self._fetch_pos[queue_id] = offset

    def _queues(self, queue_ids: Iterable[int] | None) -> list[int]:
        if queue_ids is None:
            self._maybe_refresh()
            return list(self._assignment)
        return list(queue_ids)

    def seek_to_beginning(self, queue_ids: Iterable[int] | None = None) -> None:
        """Seek the queues (default: all) to their min offset."""
        self._check_open()
        for q in self._queues(queue_ids):
            self.seek(q, self._store.get_min_offset_in_queue(self._topic, q))

    def seek_to_end(self, queue_ids: Iterable[int] | None = None) -> None:
        """Seek the queues (default: all) to their max offset (only new messages)."""
        self._check_open()
        for q in self._queues(queue_ids):
            self.seek(q, self._store.get_max_offset_in_queue(self._topic, q))

    # -- committing -----------------------------------------------------------------

    def commit(self, offsets: Mapping[int, int] | None = None, *, sync: bool = True) -> None:
        """Store next offsets as the group's committed offsets.

        ``offsets`` defaults to :meth:`positions`; pass ``{queue_id: offset}``
        to commit other values. Goes through ``store.commit_offset``.

        ``sync=True`` (default): durable when it returns — the CommitLog is
        flushed up to the committed messages, then the offsets are appended
        to ``consumerOffset.journal`` and synced (commits made concurrently
        share one write; ``docs/format.md``, §13.3), so a crash right after
        ``commit()`` redelivers nothing.
        ``sync=False``: kept in memory and written by the first commit or
        auto-commit made 5 seconds or more after the last write, and at
        flush, close and shutdown.

        On a ``no_write`` store the offsets are kept in this consumer only;
        the first commit warns that nothing is persisted.

        Raises:
            StoreClosedError: the store was shut down.
            ValueError: the consumer is closed, or a negative offset/queue id.
            PoisonedError: the store is poisoned: the CommitLog cannot be
                flushed (the offsets file is not written).
            TimeoutError: the flush did not complete (a stalled disk; the
                offsets file is not written).
        """
        self._check_open()
        self._commit(offsets, sync=sync, explicit=True)

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit_due():
            self._auto_commit_now(None)

    def _auto_commit_due(self) -> bool:
        """True (and the interval restarts) when an auto-commit is due now."""
        return self._commits.auto_commit_due()

    def _auto_commit_now(self, offsets: Mapping[int, int] | None) -> None:
        """Commit ``offsets`` (default: the positions) as an auto-commit does."""
        try:
            self._commit(offsets, sync=False, explicit=False)
        except StoreClosedError:
            raise
        except (StoreError, OSError) as e:
            # The offsets are committed in memory; writing them failed
            # (a poisoned store). Reading goes on, as it does for the store.
            log.warning("consumer %s: auto-commit could not persist offsets: %s",
                        self._group, e)

    def _commit(self, offsets: Mapping[int, int] | None, *, sync: bool, explicit: bool) -> None:
        self._check_store()
        todo = dict(self._positions) if offsets is None else offsets_arg(offsets)
        self._commits.commit(todo, sync=sync, explicit=explicit)

    def committed(self, queue_id: int) -> int:
        """The group's committed next offset for ``queue_id``; -1 if none.

        Read from the store (so it reflects what other processes wrote); on
        a ``no_write`` store, what this consumer committed (or what the file
        held when the queue was assigned).
        """
        self._check_open()
        return self._commits.committed_offset(queue_id)

    # -- lifecycle ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the consumer is closed")

    def _check_store(self) -> None:
        """Raise when the store's shutdown released the group (held by another by now)."""
        if self._group_lock is not None and not self._group_lock.held:
            raise StoreClosedError(f"the store was shut down while consumer {self._group!r} "
                                   "was open, which released its group; open a new consumer")

    def close(self) -> None:
        """Close the consumer; idempotent.

        With ``auto_commit`` (the default) the positions are committed first,
        durably (``commit(sync=True)``), unless the store was shut down
        since (which released the group: another consumer may hold it by
        now); otherwise uncommitted positions are dropped. Commits made with
        ``sync=False`` are written before the group is let go. A close
        interrupted by ``KeyboardInterrupt`` (Ctrl-C) leaves the consumer
        open: call it again to commit and close.
        """
        if self._closed:
            return
        try:
            self._close_commit(None)
            self._settle()
        except Exception:
            self._mark_closed()
            raise
        # An interrupt (KeyboardInterrupt, SystemExit) leaves the consumer
        # open, so a later close() commits; otherwise it is closed now.
        self._mark_closed()

    def _close_commit(self, offsets: Mapping[int, int] | None) -> None:
        """What :meth:`close` commits (``offsets``, default the positions), durably."""
        if self._commits.auto_commit:
            try:
                self._commit(offsets, sync=True, explicit=False)
            except StoreClosedError:
                log.info("consumer %s: store already shut down; positions not committed",
                         self._group)

    def _settle(self) -> None:
        """Write pending ``commit(sync=False)`` commits while the group is held."""
        try:
            self._check_store()
        except StoreClosedError:
            return
        self._commits.settle()

    def _mark_closed(self) -> None:
        self._closed = True
        if hasattr(self, "_buffer"):
            self._buffer.clear()
            self._buffered.clear()
        lock, self._group_lock = self._group_lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._assignment)} queues"
        return f"Consumer(group={self._group!r}, topic={self._topic!r}, {state})"
