"""A Kafka-style consumer over one topic of a :class:`~rocketstore.MessageStore`.

``store.consumer(group, topic)`` makes one. Consumers of one group and topic
(threads or processes) share the topic's queues, each queue read by one of
them (:mod:`~rocketstore.consumers.ownership`; ``exclusive=True``: one
consumer reads them all). It keeps a *position* per queue it owns — the
next offset to read, as in Kafka — and stores it in the group's committed
offsets (``consumerOffset.json``) when you call
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
import inspect
import logging
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from rocketstore.consumers import arrow_poll as _arrow_poll
from rocketstore.consumers import rebalance as _rebalance
from rocketstore.consumers._contract import ArrowResultLike, ConsumerStore, GetResultLike
from rocketstore.consumers.committer import Committer, check_offset, offsets_arg
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.consumers.ownership import (
    Listener,
    Strategy,
    check_group_args,
    take_ownership,
)
from rocketstore.enums import GetStatus
from rocketstore.errors import StoreClosedError, StoreError

if TYPE_CHECKING:
    from rocketstore._native import MessageExt

__all__ = ["ArrowResultLike", "Consumer", "ConsumerStore", "GetResultLike", "Listener",
           "StartPosition", "Strategy"]

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
    """Reads its share of the queues of ``topic`` for consumer group ``group``.

    Made by ``store.consumer(group, topic, start="earliest", tags=None,
    auto_commit=True, auto_commit_interval=5.0, exclusive=False,
    queues=None, strategy="average", on_assign=None, on_revoke=None,
    max_poll_interval=300.0)``; the arguments are the same here after
    ``store``.

    Args:
        store: the store to read (anything implementing :class:`ConsumerStore`).
        group: the consumer group; its committed offsets are shared by every
            consumer of the group on this store.
        topic: the topic to read.
        start: where a queue starts when the group has no committed offset for
            it: ``"earliest"`` (the queue's min offset) or ``"latest"`` (its
            max offset when the queue is assigned, i.e. only messages
            written from then on). Queues that appear *after* the consumer was
            created always start at their min offset: all their messages are
            newer than the consumer.
        tags: deliver only messages whose tag is one of these (exact match;
            ``None`` or ``["*"]`` = every message).
        auto_commit: commit as the Kafka clients do (on by default): each
            :meth:`poll` (and each fetch of the iterator) first commits, once
            ``auto_commit_interval`` seconds have passed since the last
            auto-commit, the positions that earlier polls returned — never
            the messages it is about to return; a queue's position before
            the queue goes to another member; and :meth:`close` commits
            durably. There is no timer thread: a consumer that is not
            polled does not commit. ``auto_commit=False``: only
            :meth:`commit` commits (``on_revoke`` is the place to commit a
            queue that goes). A member of a shared group auto-commits
            durably, so after a crash its queues' new owners redeliver at
            most ``auto_commit_interval`` of messages (and one poll); an
            exclusive consumer's auto-commits are written with the store's
            offsets, at most 5 s later.
        auto_commit_interval: seconds between auto-commits in :meth:`poll`
            (Kafka's ``auto.commit.interval.ms``; default 5).
        exclusive: ``True``: this consumer reads every queue and no other
            consumer of the group and topic may open meanwhile (it holds
            the group's lock, ``docs/format.md``, §13.1;
            :class:`~rocketstore.ConsumerGroupBusyError` while shared
            members or another exclusive consumer hold it). ``False`` (the
            default): it joins the group's shared membership (§13.2).
        queues: the queue ids this member takes, whatever the others do
            (refused with :class:`~rocketstore.ConsumerGroupBusyError` if
            another member named one of them); members without ``queues``
            share the rest.
        strategy: how members without ``queues`` share the queues:
            ``"average"`` (RocketMQ's ``AllocateMessageQueueAveragely``:
            consecutive ranges) or ``"circle"`` (``...AveragelyByCircle``:
            every n-th queue).
        on_assign: called with the sorted queue ids this consumer gained,
            after their positions are set (a ``seek`` there works), before
            the poll reads them.
        on_revoke: called with the sorted queue ids this consumer gives up,
            after their positions were auto-committed and before they are
            released (a ``commit`` there still works); also with queues it
            lost because its lease lapsed (a frozen process), whose
            commits are refused.
        max_poll_interval: seconds between polls after which the member
            leaves the group (a stuck handler; Kafka's
            ``max.poll.interval.ms``); its next poll joins again.

    Positions are Kafka's: ``position(q)`` is the offset of the next message
    :meth:`poll` will return from queue ``q``, and :meth:`commit` stores these
    next offsets (RocketMQ's consumerOffset semantics too). A group with a
    committed offset for a queue resumes there.

    A shared member owns queues through leases its heartbeat thread renews
    (``StoreConfig.consumer_heartbeat_interval``); a member whose process
    dies loses them at once, one that stops heartbeating after
    ``consumer_session_timeout``. Membership changes take effect at a poll
    (:meth:`poll`, :meth:`poll_arrow`, iteration) and :meth:`assignment`:
    revoked queues are committed and released first, then assigned ones
    start at their committed offset. A poll returns a queue's messages
    only while its lease has at least one heartbeat interval left, checked
    after the read; a commit names each queue's ownership and is refused
    with :class:`~rocketstore.FencedError` once another member owns it.

    A read-only store's consumers commit to ``consumerOffset.json`` as the
    writer's do (merged under the file's lock, ``docs/format.md``, §13.1).
    On a store opened ``read_only=True, no_write=True`` nothing is written:
    only ``exclusive=True`` consumers are allowed (a member must write its
    membership), taking no lock; :meth:`commit` keeps the positions in
    memory (see :meth:`committed`; it warns once that nothing is
    persisted), and they are lost with the consumer.

    Example::

        consumer = store.consumer("group-a", "orders")
        batch = consumer.poll(timeout=1.0)          # [] after 1 s without data
        consumer.assignment()                       # the queues it owns now
        consumer.seek(0, 10)                        # re-read queue 0 from 10 (if owned)
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
        exclusive: bool = False,
        queues: Iterable[int] | None = None,
        strategy: Strategy = "average",
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
        max_poll_interval: float = 300.0,
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
        fixed = check_group_args(exclusive=exclusive, queues=queues, strategy=strategy,
                                 on_assign=on_assign, on_revoke=on_revoke,
                                 max_poll_interval=max_poll_interval)
        self._store = store
        self._group = group
        self._topic = topic
        self._closed = True  # until the group is held
        self._start = start
        self._tags: list[str] | None = None if tags is None else list(tags)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        # Coroutine listeners: the asyncio consumer's polls apply the changes.
        self._auto_apply = not any(inspect.iscoroutinefunction(fn)
                                   for fn in (on_assign, on_revoke))
        self._own = take_ownership(store, group, topic, exclusive=exclusive, queues=fixed,
                                   strategy=strategy, max_poll_interval=max_poll_interval)
        self._commits = Committer(store, group, topic, auto_commit=auto_commit,
                                  auto_commit_interval=auto_commit_interval,
                                  durable_auto_commit=self._own.shared)
        self._closed = False
        try:
            self._init_positions()
        except BaseException:
            self._mark_closed()
            raise

    def _init_positions(self) -> None:
        store = self._store
        # Next offset to deliver, per owned queue; also the assignment's key set.
        self._positions: dict[int, int] = {}
        # Next offset to fetch; differs from _positions while messages of the
        # queue sit in _buffer (fetched, not yet handed out by iteration).
        self._fetch_pos: dict[int, int] = {}
        self._buffer: collections.deque[tuple[int, MessageExt]] = collections.deque()
        self._buffered: dict[int, int] = {}
        self._assignment: list[int] = []
        self._rr = 0
        self._skipped = 0
        # Damaged records the pulls passed over (see `damaged`).
        self._damaged = 0
        # The topic's queue ids as the ownership last saw them, the dispatch
        # seq they were read at, and ids a fill found changed (applied next).
        self._known_ids: list[int] | None = None
        self._new_ids: list[int] | None = None
        self._assign_seq: int | None = store.dispatch_seq
        self._applying = False
        ids = store.queue_ids(self._topic)
        # "latest" applies to the queues that exist now.
        self._initial_ids = frozenset(ids)
        if self._auto_apply:
            self._sync_membership(ids)
        else:
            self._new_ids = ids  # the first poll applies them


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

    # -- assignment (the membership's changes: rebalance.py) --------------------

    _topic_ids = _rebalance.topic_ids
    _sync_membership = _rebalance.sync_membership
    _take_changes = _rebalance.take_changes
    _apply = _rebalance.apply
    _revoke_begin = _rebalance.revoke_begin
    _revoke_end = _rebalance.revoke_end
    _assign = _rebalance.assign
    _drop_queues = _rebalance.drop_queues
    _drop_lapsed = _rebalance.drop_lapsed

    def assignment(self) -> list[int]:
        """Queue ids this consumer owns now (sorted), after applying what
        changed in the group (as a poll does first: listeners run)."""
        self._check_open()
        if self._auto_apply:
            self._sync_membership()
        return list(self._assignment)

    def _check_queue(self, queue_id: int) -> None:
        if queue_id not in self._positions:
            if self._auto_apply:
                self._sync_membership()
            if queue_id not in self._positions:
                known = self._known_ids or ()
                why = ("is owned by another member of the group" if queue_id in known
                       else "does not exist")
                raise ValueError(f"queue {queue_id} of topic {self._topic!r} {why} "
                                 f"(assignment: {self._assignment})")

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
        if self._own.shared and queues:
            lapsed = self._own.lapsed(queues)
            if lapsed:  # nothing of theirs could be returned: not read at all
                queues = [q for q in queues if q not in lapsed]
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
        buffer holds messages, False when ``timeout`` passed, or earlier when
        the topic's queues or the group's membership changed (the poll
        applies the change, then fills again).
        """
        if self._buffered:
            return True
        self._check_store()
        store = self._store
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        # Read the seq *before* fetching: a message dispatched after the fetch
        # then changes it, and the wait returns at once (no lost wakeup).
        seq = store.dispatch_seq
        own = self._own
        # A member looks at its membership at least every margin seconds.
        cap = own.margin if own.shared else None
        while True:
            if seq != self._assign_seq:
                self._assign_seq = seq
                ids = store.queue_ids(self._topic)
                if ids != self._known_ids:
                    self._new_ids = ids  # new queues: the poll applies them
                    return False
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
                if cap is not None and (remaining is None or remaining > cap):
                    remaining = cap
                new_seq = yield (seq, remaining)
                if new_seq is not None and new_seq != seq:  # something became visible
                    seq = new_seq
                    break
                # unchanged: the wait timed out (or woke early); nothing to fetch
                if cap is not None and own.due():
                    return False  # queues come or go: the poll applies that first

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
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            self._poll_start()
            if self._fill(self._left(deadline), max_messages):
                self._drop_lapsed()
                if self._buffer:
                    return self._deliver(max_messages)
            if self._left(deadline) == 0.0:
                return []

    def _poll_start(self) -> None:
        """A poll's first steps: count it, apply membership changes, auto-commit."""
        self._own.polled()
        self._sync_membership()
        self._maybe_auto_commit()

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        """Seconds left until ``deadline`` (never below 0; None: no deadline)."""
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    poll_arrow = _arrow_poll.poll_arrow
    _arrow_pull = _arrow_poll.arrow_pull
    _arrow_result = _arrow_poll.arrow_result

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
        if self._own.shared:
            self._drop_lapsed()  # fetched a while ago: the lease is checked again
        while not self._buffer:
            if self._closed:
                raise StopIteration
            try:
                self._poll_start()
                if self._fill(None, _ITER_BATCH):
                    self._drop_lapsed()
            except StoreClosedError:
                raise StopIteration from None
        return self._deliver(1)[0]

    # -- positions ----------------------------------------------------------------

    def position(self, queue_id: int) -> int:
        """The offset of the next message :meth:`poll` returns from ``queue_id``.

        Raises:
            ValueError: the queue does not exist (yet), or another member
                of the group owns it.
        """
        self._check_open()
        self._check_queue(queue_id)
        return self._positions[queue_id]

    def positions(self) -> dict[int, int]:
        """``{queue_id: next offset}`` for every queue this consumer owns."""
        self._check_open()
        if self._auto_apply:
            self._sync_membership()
        return dict(self._positions)

    def seek(self, queue_id: int, offset: int) -> None:
        """Make ``offset`` the next offset read from ``queue_id``.

        An offset outside the queue is corrected by the next poll (to the min
        offset if below it, to the end if beyond it). Messages of the queue
        fetched but not yet returned are dropped.

        Raises:
            ValueError: the queue does not exist, another member owns it,
                or ``offset < 0``.
        """
        self._check_open()
        check_offset("offset", offset)
        self._check_queue(queue_id)
        if self._buffered.pop(queue_id, 0):
            self._buffer = collections.deque(e for e in self._buffer if e[0] != queue_id)
        self._positions[queue_id] = self._fetch_pos[queue_id] = offset

    def _queues(self, queue_ids: Iterable[int] | None) -> list[int]:
        if queue_ids is None:
            if self._auto_apply:
                self._sync_membership()
            return list(self._assignment)
        return list(queue_ids)

    def seek_to_beginning(self, queue_ids: Iterable[int] | None = None) -> None:
        """Seek the queues (default: all it owns) to their min offset."""
        self._check_open()
        for q in self._queues(queue_ids):
            self.seek(q, self._store.get_min_offset_in_queue(self._topic, q))

    def seek_to_end(self, queue_ids: Iterable[int] | None = None) -> None:
        """Seek the queues (default: all it owns) to their max offset (only new messages)."""
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

        A member of a shared group commits a queue only while it owns it:
        the check runs under the offsets file's lock, before anything is
        written (``docs/format.md``, §13.2).

        On a ``SLAVE`` store the offsets are its master's (``docs/format.md``
        §21.7): ``commit()`` raises; auto-commits keep the positions in
        this consumer only.

        Raises:
            SlaveOffsetsError: the store is a ``SLAVE``; nothing is recorded.
            FencedError: another member owns one of the queues now (this
                member's lease lapsed, or it never owned it); nothing of
                this commit is written.
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
        self._commits.commit(todo, sync=sync, explicit=explicit, fence=self._own.fence)

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
        if not self._own.held:
            raise StoreClosedError(f"the store was shut down while consumer {self._group!r} "
                                   "was open, which released its group; open a new consumer")

    def close(self) -> None:
        """Close the consumer; idempotent.

        With ``auto_commit`` (the default) the positions are committed first,
        durably (``commit(sync=True)``), unless the store was shut down
        since (which released the group: another consumer may hold it by
        now); otherwise uncommitted positions are dropped. Commits made with
        ``sync=False`` are written before the group is let go. Then
        ``on_revoke`` gets the queues it owned, and a member leaves the
        group (its queues go to the others at once). A close
        interrupted by ``KeyboardInterrupt`` (Ctrl-C) leaves the consumer
        open: call it again to commit and close.
        """
        if self._closed:
            return
        try:
            gone = self._close_commit(None)
            self._settle()
            if gone:
                _rebalance.call_listener(self._on_revoke, "on_revoke", gone)
        except Exception:
            self._mark_closed()
            raise
        # An interrupt (KeyboardInterrupt, SystemExit) leaves the consumer
        # open, so a later close() commits; otherwise it is closed now.
        self._mark_closed()

    _close_commit = _rebalance.close_commit

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
        if hasattr(self, "_own"):
            self._own.close()

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
        state = "closed" if self._closed else f"queues {self._assignment}"
        return f"Consumer(group={self._group!r}, topic={self._topic!r}, {state})"
