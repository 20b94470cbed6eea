"""The asyncio consumer: a :class:`~rocketstore.consumers.consumer.Consumer`
whose waits never block the event loop.

Made by ``store.async_consumer(group, topic)``::

    async def pipeline(store: MessageStore) -> None:
        async with store.async_consumer("group-a", "orders") as consumer:
            async for msg in consumer:        # ends when the store shuts down
                await handle(msg)

Its pulls run in the store's pull threads and its commits in the put
threads; its waits for new messages hold no thread of either pool (the
store's wake-up watcher resolves them; see :mod:`rocketstore.aio`).
Membership changes are applied at the start of each poll as the blocking
consumer's are (:mod:`~rocketstore.consumers.rebalance`), with their
commits in a store thread; ``on_assign`` and ``on_revoke`` may be
coroutine functions, awaited there.

An async consumer, like a :class:`~rocketstore.consumers.consumer.Consumer`, is used
by one task at a time for reading; ``commit()`` may be awaited from another
task (it commits the positions as they are when it is called).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from rocketstore.aio import _set_result, _Waiter
from rocketstore.consumers.consumer import _PULL_BATCH, _Pull
from rocketstore.errors import StoreClosedError

if TYPE_CHECKING:
    import pyarrow

    from rocketstore._native import MessageExt
    from rocketstore.aio import StoreThreads
    from rocketstore.consumers.consumer import Consumer
    from rocketstore.consumers.ownership import Changes, Listener

__all__ = ["AsyncConsumer"]

log = logging.getLogger("rocketstore")

# Messages a consumer's iteration fetches at a time (as the blocking one).
_ITER_BATCH = 100

_START = object()

#: A consumer's fill as :meth:`Consumer._fill_steps` gives it.
_Steps = Generator[tuple[int, float | None] | None, int | None, bool]


def _advance(steps: _Steps, value: object) -> tuple[bool, Any]:
    """Resume a fill with ``value``: ``(True, result)`` when it ended,
    ``(False, what it waits for)`` otherwise."""
    try:
        return False, next(steps) if value is _START else steps.send(cast("int | None", value))
    except StopIteration as done:
        return True, done.value


async def _call(listener: Listener | None, queues: list[int]) -> None:
    """Call a listener; await what a coroutine function returns."""
    if listener is not None:
        result = listener(list(queues))
        if inspect.isawaitable(result):
            await result


def _retrieve(task: asyncio.Future[Any]) -> None:
    """The error of a step whose poll was cancelled is not reported (the
    next poll meets it again)."""
    if not task.cancelled():
        task.exception()


class AsyncConsumer:
    """The asyncio face of a :class:`~rocketstore.consumers.consumer.Consumer`.

    Made by ``store.async_consumer(group, topic, start="earliest",
    tags=None, auto_commit=True, auto_commit_interval=5.0, exclusive=False,
    queues=None, strategy="average", on_assign=None, on_revoke=None,
    max_poll_interval=300.0)``; it reads, commits, shares the group's
    queues and resumes exactly as ``store.consumer(...)`` does (the same
    arguments, positions and committed offsets), but its waits never block
    the event loop, and its listeners may be coroutine functions.

    Example::

        async with store.async_consumer("group-a", "orders") as consumer:
            batch = await consumer.poll(timeout=1.0, max_messages=100)
            async for msg in consumer:         # forever, one message at a time
                await handle(msg)
                await consumer.commit()        # durable when it returns

    ``position``, ``positions``, ``seek``, ``seek_to_beginning``,
    ``seek_to_end``, ``assignment`` and ``committed`` wait for nothing and
    are plain methods, as on the blocking consumer (with a coroutine
    listener they show the queues as the last poll left them).
    """

    def __init__(self, threads: StoreThreads, consumer: Consumer) -> None:
        self._threads = threads
        self._c = consumer
        self._waiting: set[_Waiter] = set()
        self._closing = False
        # The last fill step handed to a store thread (see _advance).
        self._step: asyncio.Future[tuple[bool, Any]] | None = None
        # The membership changes a poll applies (see _poll_start).
        self._changing: asyncio.Future[None] | None = None

    # -- what the blocking consumer has -----------------------------------------

    @property
    def group(self) -> str:
        return self._c.group

    @property
    def topic(self) -> str:
        return self._c.topic

    @property
    def tags(self) -> list[str] | None:
        return self._c.tags

    @property
    def closed(self) -> bool:
        return self._c.closed

    @property
    def skipped(self) -> int:
        """See :attr:`Consumer.skipped <rocketstore.consumers.consumer.Consumer.skipped>`."""
        return self._c.skipped

    @property
    def damaged(self) -> int:
        """See :attr:`Consumer.damaged <rocketstore.consumers.consumer.Consumer.damaged>`."""
        return self._c.damaged

    def assignment(self) -> list[int]:
        """Queue ids this consumer reads (sorted); grows when queues appear."""
        return self._c.assignment()

    def position(self, queue_id: int) -> int:
        """The offset of the next message :meth:`poll` returns from ``queue_id``."""
        return self._c.position(queue_id)

    def positions(self) -> dict[int, int]:
        """``{queue_id: next offset}`` for every assigned queue."""
        return self._c.positions()

    def seek(self, queue_id: int, offset: int) -> None:
        """Make ``offset`` the next offset read from ``queue_id``."""
        self._c.seek(queue_id, offset)
        self._seek_again([queue_id])

    def seek_to_beginning(self, queue_ids: Iterable[int] | None = None) -> None:
        """Seek the queues (default: all) to their min offset."""
        self._c._check_open()
        queues = self._c._queues(queue_ids)
        self._c.seek_to_beginning(queues)
        self._seek_again(queues)

    def seek_to_end(self, queue_ids: Iterable[int] | None = None) -> None:
        """Seek the queues (default: all) to their max offset (only new messages)."""
        self._c._check_open()
        queues = self._c._queues(queue_ids)
        self._c.seek_to_end(queues)
        self._seek_again(queues)

    def _seek_again(self, queues: Iterable[int]) -> None:
        """A pull that a cancelled poll left running would undo a seek when it
        ends (it fetches from the old offset): seek again then, before the
        next poll (which waits for that pull) reads."""
        step, c = self._step, self._c
        if step is None or step.done():
            return
        to = {q: c.position(q) for q in queues}

        def again(_: object) -> None:
            if not c.closed:
                for q, offset in to.items():
                    c.seek(q, offset)
        step.add_done_callback(again)

    def committed(self, queue_id: int) -> int:
        """The group's committed next offset for ``queue_id``; -1 if none."""
        return self._c.committed(queue_id)

    # -- reading ----------------------------------------------------------------

    async def poll(self, timeout: float | None = 1.0,
                   max_messages: int = 100) -> list[MessageExt]:
        """Up to ``max_messages`` messages, as soon as any is available.

        As :meth:`Consumer.poll <rocketstore.consumers.consumer.Consumer.poll>`, but
        the wait lets the loop run other tasks; an empty list after
        ``timeout`` seconds (``None``: no limit) or when :meth:`close` is
        called meanwhile. Cancelling the task cancels the wait only: no
        message is lost (positions move when messages are returned).

        Raises:
            StoreClosedError: the store was shut down (also while waiting).
            ValueError: the consumer is closed, or ``max_messages < 1``.
        """
        c = self._c
        c._check_open()
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            await self._poll_start()
            if await self._fill(c._left(deadline), max_messages) and not self._closing:
                c._drop_lapsed()
                if c._buffer:
                    return c._deliver(max_messages)
            if self._closing or c._left(deadline) == 0.0:
                return []

    async def _poll_start(self) -> None:
        """A poll's first steps, as the blocking consumer's: count it, apply
        membership changes (listeners awaited), auto-commit. The changes are
        applied by a task of their own that a cancelled poll leaves to
        finish (the next poll waits for it, :meth:`_settle`): a hand-over is
        never left half done."""
        c = self._c
        await self._settle()
        c._own.polled()
        if not c._applying:
            task = asyncio.ensure_future(self._membership())
            task.add_done_callback(_retrieve)
            self._changing = task
            await asyncio.shield(task)
        await self._maybe_auto_commit()

    async def _membership(self) -> None:
        """Take the membership's changes and apply them."""
        c = self._c
        c._applying = True
        try:
            ids = c._topic_ids()
            if ids is None:  # no file I/O: on the loop
                changes = c._take_changes()
            else:  # new queue ids: the member may heartbeat now (file I/O)
                changes = await self._threads.run(c._take_changes, ids, _pool="pull")
            if changes:
                await self._apply(changes)
        finally:
            c._applying = False

    async def _apply(self, changes: Changes) -> None:
        """:meth:`Consumer._apply` with its commits and releases in a store thread."""
        c, run = self._c, self._threads.run
        gone = await run(c._revoke_begin, changes)
        if gone:
            try:
                await _call(c._on_revoke, gone)
            finally:
                await run(c._revoke_end, changes)
        if changes.assigned:
            await run(c._assign, changes.assigned, _pool="pull")
            await _call(c._on_assign, changes.assigned)

    def __aiter__(self) -> AsyncConsumer:
        """``async for msg in consumer``: one message at a time, forever.

        Stops (without error) when the store shuts down or the consumer is
        closed; positions move one message at a time, as when iterating a
        blocking consumer.
        """
        return self

    async def __anext__(self) -> MessageExt:
        c = self._c
        if c.closed or self._closing:
            raise StopAsyncIteration
        # A pull a cancelled poll left running may still be filling the buffer.
        await self._settle()
        c._drop_lapsed()  # fetched a while ago: the lease is checked again
        while not c._buffer:
            try:
                await self._poll_start()
                filled = await self._fill(None, _ITER_BATCH)
            except StoreClosedError:
                raise StopAsyncIteration from None
            if c.closed or self._closing:
                raise StopAsyncIteration
            if filled:
                c._drop_lapsed()
        return c._deliver(1)[0]

    async def poll_arrow(
        self,
        timeout: float | None = 1.0,
        max_messages: int = 1024,
        columns: Sequence[str] | None = None,
        zero_copy: bool = False,
    ) -> pyarrow.RecordBatch:
        """Up to ``max_messages`` messages as one Arrow record batch (needs ``pyarrow``).

        As :meth:`Consumer.poll_arrow <rocketstore.consumers.consumer.Consumer.poll_arrow>`,
        waiting as :meth:`poll` does: a batch of 0 rows after ``timeout``
        seconds, or when :meth:`close` is called meanwhile. Cancelled, it
        returns nothing and the positions stay where they were.

        Raises:
            StoreClosedError: the store was shut down (also while waiting).
            ValueError: the consumer is closed, ``max_messages < 1``, or an
                unknown column.
        """
        c = self._c
        c._check_open()
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            # A step a cancelled poll left running fills the buffer this drops:
            # it ends first (_poll_start settles it), so nothing it fetched is
            # counted as delivered here.
            await self._poll_start()
            pull, batches = c._arrow_pull(columns, zero_copy)
            try:
                filled = await self._fill(c._left(deadline), max_messages, pull, max_messages)
                c._drop_lapsed(batches)
            except BaseException:
                # Nothing is returned: the positions stay before these rows.
                self._after_step(c._unbuffer)
                raise
            if not filled or self._closing:
                c._unbuffer()
                batches = []
            if batches or self._closing or c._left(deadline) == 0.0:
                return c._arrow_result(batches, columns, zero_copy)

    async def _fill(self, timeout: float | None, budget: int, pull: _Pull | None = None,
                    share_cap: int = _PULL_BATCH) -> bool:
        """The consumer's fill: its pulls in a store thread, its waits on the
        loop. False on timeout or close."""
        await self._settle()
        steps = self._c._fill_steps(timeout, budget, pull, share_cap)
        done, step = await self._advance(steps, _START)
        while not done:
            if self._closing:
                return False  # close() was called meanwhile
            sent = None if step is None else await self._wait(*step)
            if self._closing:
                return False
            done, step = await self._advance(steps, sent)
        return bool(step)

    async def _advance(self, steps: _Steps, value: object) -> tuple[bool, Any]:
        """One step of a fill (pulls: reads that may fault pages in from disk)
        in a store thread. A cancelled caller leaves the step to finish: the
        next fill waits for it (:meth:`_settle`), so one thread at a time
        touches the consumer, and what it fetched is delivered next."""
        task = asyncio.ensure_future(self._threads.run(_advance, steps, value, _pool="pull"))
        task.add_done_callback(_retrieve)
        self._step = task
        return await asyncio.shield(task)

    async def _settle(self) -> None:
        """Until the step (or the membership changes) a cancelled poll left
        running has finished."""
        for task in (self._changing, self._step):
            if task is not None and not task.done():
                await asyncio.wait([task])

    def _after_step(self, fn: Callable[[], None]) -> None:
        """``fn()`` now, or once the step a cancelled poll left running ends."""
        step = self._step
        if step is not None and not step.done():
            step.add_done_callback(lambda _: fn())
        else:
            fn()

    async def _wait(self, seq: int, timeout: float | None) -> int:
        """Wait until ``dispatch_seq != seq`` (or ``timeout``); the seq then."""
        watcher = self._threads.watcher()
        w = watcher.register(seq)
        self._waiting.add(w)
        try:
            if timeout is None:
                return await w.fut
            try:
                async with asyncio.timeout(timeout):
                    return await w.fut
            except TimeoutError:
                return seq
        finally:
            self._waiting.discard(w)
            watcher.unregister(w)

    # -- committing ---------------------------------------------------------------

    async def commit(self, offsets: Mapping[int, int] | None = None, *,
                     sync: bool = True) -> None:
        """Store next offsets as the group's committed offsets.

        As :meth:`Consumer.commit <rocketstore.consumers.consumer.Consumer.commit>`
        (``sync=True``: durable when it returns), run in a store thread.
        ``offsets`` defaults to the positions when it is called.
        """
        c = self._c
        c._check_open()
        todo = c.positions() if offsets is None else offsets
        await self._threads.run(c.commit, todo, sync=sync)

    async def _maybe_auto_commit(self) -> None:
        c = self._c
        if c._auto_commit_due():
            await self._threads.run(c._auto_commit_now, dict(c._positions))

    # -- lifecycle ------------------------------------------------------------------

    async def close(self) -> None:
        """Close the consumer; idempotent.

        As :meth:`Consumer.close <rocketstore.consumers.consumer.Consumer.close>`:
        with ``auto_commit`` the positions are committed durably first (in
        a store thread). A poll waiting in another task returns ``[]`` and
        an ``async for`` ends. Cancelled while committing, the consumer
        stays open: close it again.
        """
        c = self._c
        if c.closed:
            return
        self._closing = True
        for w in list(self._waiting):
            _set_result(w.fut, w.seq)
        try:
            if c._commits.auto_commit:
                gone = await self._threads.run(c._close_commit, dict(c._positions))
            else:
                gone = c._close_commit(None)  # commits nothing: no thread needed
            if c._commits.unsynced:  # pending commits, written before the group goes
                await self._threads.run(c._settle)
            if gone:
                await _call(c._on_revoke, gone)
        except StoreClosedError:
            log.info("consumer %s: store already shut down; positions not committed", c.group)
        except Exception:
            c._mark_closed()
            raise
        except BaseException:
            self._closing = False  # interrupted: still open, close again
            raise
        c._mark_closed()

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return "Async" + repr(self._c)

