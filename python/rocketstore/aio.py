"""asyncio: puts that never block the event loop, and an async consumer.

Every :class:`~rocketstore.MessageStore` has them (this module's
:class:`AsyncStore` is a base class of it)::

    async with MessageStore(cfg) as store:    # start() and shutdown() in a thread
        ...

    async def handler(store: MessageStore) -> None:
        r = await store.aput("orders", b"order #42", tags="paid")
        await store.aput_batch("orders", [b"a", b"b"])

    async def pipeline(store: MessageStore) -> None:
        async with store.async_consumer("group-a", "orders") as consumer:
            async for msg in consumer:        # ends when the store shuts down
                await handle(msg)

How the loop stays free:

- Puts (``aput``, ``aput_message``, ``aput_messages``, ``aput_batch``) run
  in a small pool of threads per store, so a put waiting for the disk
  (``SYNC_FLUSH``), a big batch, or a put waiting for a new CommitLog file
  never holds the loop. Awaiting one put after the other keeps their order;
  puts started together (``asyncio.gather``) are stored in any order, as
  puts from several threads are.
- A consumer's pulls run in a second small pool of threads (reading a
  backlog that is not in the page cache faults it in from disk), one poll's
  pulls after the other, never queued behind puts. Its waits for new
  messages hold no thread of either pool: in the writer's process one
  thread per store sleeps in the dispatcher's wake-up (the engine's
  ``wait_for_dispatch``, GIL released) and wakes the waiting loops at once;
  in a read-only process that thread re-reads the queue ends every 5 ms.
  Commits that write ``consumerOffset.json`` (``commit()``, auto-commits,
  ``close()``) run in the put pool.

An async consumer, like a :class:`~rocketstore.consumers.consumer.Consumer`, is used
by one task at a time for reading; ``commit()`` may be awaited from another
task (it commits the positions as they are when it is called).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from rocketstore.consumers.consumer import _PULL_BATCH, _Pull
from rocketstore.errors import StoreClosedError

if TYPE_CHECKING:
    import pyarrow

    from rocketstore._native import (
        BatchPutResult,
        Message,
        MessageExt,
        NativeStore,
        PutResult,
        _BytesLike,
    )
    from rocketstore.consumers.consumer import Consumer
    from rocketstore.store import MessageStore

__all__ = ["AsyncConsumer", "AsyncStore"]

log = logging.getLogger("rocketstore")

_T = TypeVar("_T")

#: Threads per store that run async puts and commits. Under SYNC_FLUSH each
#: waits for the disk, and puts waiting together share one flush: more
#: threads, bigger groups. Made as they are needed.
PUT_THREADS = 16

#: Threads per store that run async consumers' pulls: apart from the put
#: threads, so consumers never queue behind puts waiting for the disk.
PULL_THREADS = 4

_POOLS = {"put": PUT_THREADS, "pull": PULL_THREADS}

#: Seconds the wake-up thread waits in one engine call. It ends after a wait
#: this long in which nothing became visible and no loop waited.
_IDLE_SLICE = 0.5

# Messages a consumer's iteration fetches at a time (as the blocking one).
_ITER_BATCH = 100

# Set when the interpreter exits: wake-up threads end instead of calling the
# engine again (whose waits return at once from then on).
_exiting = False


def _at_exit() -> None:
    global _exiting
    _exiting = True


atexit.register(_at_exit)


class _Waiter:
    """One wait of one task: resolved with the new ``dispatch_seq`` on its loop."""

    __slots__ = ("fut", "loop", "seq")

    def __init__(self, loop: asyncio.AbstractEventLoop, seq: int) -> None:
        self.loop = loop
        self.fut: asyncio.Future[int] = loop.create_future()
        self.seq = seq


def _set_result(fut: asyncio.Future[int], value: int) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future[int], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _call_in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass  # the loop is closed: nobody waits there any more


def _resolve_all(futs: list[asyncio.Future[int]], value: int) -> None:
    for fut in futs:
        _set_result(fut, value)


def _wake(waiters: Iterable[_Waiter], value: int) -> None:
    """Resolve ``waiters`` with ``value``: one call into each of their loops."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[int]]] = {}
    for w in waiters:
        by_loop.setdefault(w.loop, []).append(w.fut)
    for loop, futs in by_loop.items():
        _call_in_loop(loop, _resolve_all, futs, value)


class DispatchWatcher:
    """Wakes asyncio tasks waiting for new messages of one engine store.

    One thread per store, only while tasks wait (and for ``_IDLE_SLICE``
    after), blocks in the engine's ``wait_for_dispatch`` with the GIL
    released and hands each change of ``dispatch_seq`` to the waiting loops
    with ``call_soon_threadsafe``. Why a thread and not a descriptor the
    dispatcher writes (an eventfd under ``loop.add_reader``): the engine
    already wakes waiters through its condition variable the moment a batch
    becomes visible, so the wake-up is as prompt; one thread serves every
    loop and consumer of the store (a descriptor is read once, by one
    loop); a read-only store waits the same way (its engine wait re-reads
    the files every 5 ms); and the dispatcher, the engine and fork handling
    stay as they are.
    """

    def __init__(self, native: NativeStore) -> None:
        self._native = native
        self._lock = threading.Lock()
        self._waiters: set[_Waiter] = set()
        self._thread: threading.Thread | None = None
        self._closed: str | None = None

    @property
    def native(self) -> NativeStore:
        return self._native

    def register(self, seq: int) -> _Waiter:
        """A waiter on the running loop, resolved once ``dispatch_seq != seq``.

        Raises:
            StoreClosedError: the store is shut down.
        """
        loop = asyncio.get_running_loop()
        w = _Waiter(loop, seq)
        # The loop reads the seq itself: a change that happened before the
        # thread waits is seen here, one after it wakes the thread.
        now = self._native.dispatch_seq
        if now != seq:
            w.fut.set_result(now)
            return w
        with self._lock:
            if self._closed is not None:
                raise StoreClosedError(self._closed)
            self._waiters.add(w)
            if self._thread is None:
                t = threading.Thread(target=self._run, name="rocketstore-async-wakeup",
                                     daemon=True)
                self._thread = t
                t.start()
        return w

    def unregister(self, w: _Waiter) -> None:
        with self._lock:
            self._waiters.discard(w)

    def close(self, reason: str) -> None:
        """Fail every waiter (and later registrations) with :class:`StoreClosedError`."""
        with self._lock:
            self._closed = reason
            waiters, self._waiters = self._waiters, set()
        for w in waiters:
            _call_in_loop(w.loop, _set_exception, w.fut, StoreClosedError(reason))

    @property
    def thread(self) -> threading.Thread | None:
        """The wake-up thread, while it runs."""
        return self._thread

    def _run(self) -> None:
        native = self._native
        try:
            seen = native.dispatch_seq
        except BaseException as e:  # handed to the waiters
            self._fail(e)
            return
        idle = False
        while True:
            with self._lock:
                ready = [w for w in self._waiters if w.seq != seen]
                self._waiters.difference_update(ready)
                stop = (idle and not self._waiters) or self._closed is not None or _exiting
                if stop:
                    self._thread = None
            # Woken even when the thread stops: a waiter that came in with a
            # newer seq than this thread saw looks again (and waits anew).
            if ready:
                _wake(ready, seen)
            if stop:
                return
            try:
                new = native.wait_for_dispatch(seen, _IDLE_SLICE)
            except BaseException as e:  # handed to the waiters
                self._fail(e)
                return
            idle = new == seen
            seen = new

    def _fail(self, exc: BaseException) -> None:
        """The engine wait raised: hand the error to every waiter, and stop.

        A closed store stays closed (later waits raise at once); after any
        other error the next wait starts a new thread (and tries again).
        """
        with self._lock:
            waiters, self._waiters = self._waiters, set()
            if isinstance(exc, StoreClosedError):
                self._closed = str(exc) or "store is closed"
            self._thread = None
        for w in waiters:
            _call_in_loop(w.loop, _set_exception, w.fut, exc)


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


def _retrieve(task: asyncio.Future[Any]) -> None:
    """The error of a step whose poll was cancelled is not reported (the
    next poll meets it again)."""
    if not task.cancelled():
        task.exception()


class AsyncConsumer:
    """The asyncio face of a :class:`~rocketstore.consumers.consumer.Consumer`.

    Made by ``store.async_consumer(group, topic, start="earliest",
    tags=None, auto_commit=True, auto_commit_interval=5.0)``; it reads,
    commits and resumes exactly as ``store.consumer(...)`` does (the same
    arguments, positions and committed offsets), but its waits never block
    the event loop.

    Example::

        async with store.async_consumer("group-a", "orders") as consumer:
            batch = await consumer.poll(timeout=1.0, max_messages=100)
            async for msg in consumer:         # forever, one message at a time
                await handle(msg)
                await consumer.commit()        # durable when it returns

    ``position``, ``positions``, ``seek``, ``seek_to_beginning``,
    ``seek_to_end``, ``assignment`` and ``committed`` wait for nothing and
    are plain methods, as on the blocking consumer.
    """

    def __init__(self, store: AsyncStore, consumer: Consumer) -> None:
        self._store = store
        self._c = consumer
        self._waiting: set[_Waiter] = set()
        self._closing = False
        # The last fill step handed to a store thread (see _advance).
        self._step: asyncio.Future[tuple[bool, Any]] | None = None

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
        await self._maybe_auto_commit()
        if await self._fill(timeout, max_messages) and not self._closing:
            return c._deliver(max_messages)
        return []

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
        if not c._buffer:
            try:
                await self._maybe_auto_commit()
                if not await self._fill(None, _ITER_BATCH):
                    raise StopAsyncIteration
            except StoreClosedError:
                raise StopAsyncIteration from None
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
        await self._maybe_auto_commit()
        # A step a cancelled poll left running fills the buffer this drops:
        # it ends first, so nothing it fetched is counted as delivered here.
        await self._settle()
        pull, batches = c._arrow_pull(columns, zero_copy)
        try:
            filled = await self._fill(timeout, max_messages, pull, max_messages)
        except BaseException:
            # Nothing is returned: the positions stay before these rows.
            self._after_step(c._unbuffer)
            raise
        if not filled or self._closing:
            c._unbuffer()
            batches = []
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
        task = asyncio.ensure_future(self._store._off_loop(_advance, steps, value,
                                                           _pool="pull"))
        task.add_done_callback(_retrieve)
        self._step = task
        return await asyncio.shield(task)

    async def _settle(self) -> None:
        """Until the step a cancelled poll left running has finished."""
        step = self._step
        if step is not None and not step.done():
            await asyncio.wait([step])

    def _after_step(self, fn: Callable[[], None]) -> None:
        """``fn()`` now, or once the step a cancelled poll left running ends."""
        step = self._step
        if step is not None and not step.done():
            step.add_done_callback(lambda _: fn())
        else:
            fn()

    async def _wait(self, seq: int, timeout: float | None) -> int:
        """Wait until ``dispatch_seq != seq`` (or ``timeout``); the seq then."""
        watcher = self._store._dispatch_watcher()
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
        await self._store._off_loop(c.commit, todo, sync=sync)

    async def _maybe_auto_commit(self) -> None:
        c = self._c
        if c._auto_commit_due():
            await self._store._off_loop(c._auto_commit_now, dict(c._positions))

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
            if c._auto_commit:
                await self._store._off_loop(c._close_commit, dict(c._positions))
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


class AsyncStore:
    """The asyncio methods of :class:`~rocketstore.MessageStore` (a base class of it)."""

    _aio_lock = threading.Lock()
    _aio_pools: dict[str, concurrent.futures.ThreadPoolExecutor] | None = None
    _aio_watcher: DispatchWatcher | None = None

    # -- plumbing -----------------------------------------------------------------

    def _dispatch_watcher(self) -> DispatchWatcher:
        """The wake-up watcher of the open engine store (made on first use)."""
        n = cast("MessageStore", self)._n
        with AsyncStore._aio_lock:
            w = self._aio_watcher
            if w is None or w.native is not n:
                w = self._aio_watcher = DispatchWatcher(n)
            return w

    async def _off_loop(self, fn: Callable[..., _T], /, *args: Any,
                        _pool: str = "put", **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)`` in one of the store's threads (of pool
        ``_pool``: ``"put"``, also for commits, or ``"pull"``)."""
        cast("MessageStore", self)._n  # noqa: B018 - raises StoreClosedError when closed
        with AsyncStore._aio_lock:
            pools = self._aio_pools
            if pools is None:
                pools = self._aio_pools = {}
            pool = pools.get(_pool)
            if pool is None:
                pool = pools[_pool] = concurrent.futures.ThreadPoolExecutor(
                    max_workers=_POOLS[_pool], thread_name_prefix=f"rocketstore-async-{_pool}")
        call = functools.partial(fn, *args, **kwargs)
        try:
            fut = asyncio.get_running_loop().run_in_executor(pool, call)
        except RuntimeError:  # the pool was shut down with the store meanwhile
            raise StoreClosedError("store is closed") from None
        return await fut

    def _aio_close(self, reason: str, *, forked: bool = False) -> None:
        """The store closed: fail waiting consumers, let the put threads end.

        Puts already handed to a thread finish (or raise
        :class:`StoreClosedError`); in a forked child the threads are the
        parent's, and nothing is joined.
        """
        with AsyncStore._aio_lock:
            pools, self._aio_pools = self._aio_pools, None
            watcher, self._aio_watcher = self._aio_watcher, None
        if watcher is not None and not forked:
            watcher.close(reason)
        if pools is not None and not forked:
            for pool in pools.values():
                pool.shutdown(wait=False)

    # -- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> MessageStore:
        """``async with MessageStore(cfg) as store:``: :meth:`start` in a
        thread (recovery of a big store takes a while)."""
        store = cast("MessageStore", self)
        return await asyncio.to_thread(store.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """:meth:`shutdown` in a thread (it dispatches, flushes and joins
        the store's threads); the loop runs on meanwhile."""
        await asyncio.to_thread(cast("MessageStore", self).shutdown)

    # -- puts ---------------------------------------------------------------------

    async def aput(
        self,
        topic: str,
        body: _BytesLike,
        queue_id: int = 0,
        tags: str | None = None,
        keys: Sequence[str] | str | None = None,
        properties: dict[str, str] | None = None,
        delay_level: int = 0,
        flag: int = 0,
        born_timestamp: int | None = None,
        born_host: tuple[str, int] | None = None,
        sys_flag: int = 0,
        *,
        check: bool = True,
    ) -> PutResult:
        """:meth:`put` in a store thread: the loop runs on while it waits.

        Same arguments, result and errors as ``put``: a refused put raises
        :class:`~rocketstore.MessageRefusedError` (``check=False``: returns
        the result with its status), a put stored but not confirmed on disk
        :class:`~rocketstore.StoredNotFlushedError`. The body must not
        change until the put returns. Cancelling the awaiting task does not
        cancel the put: it may still be stored.
        """
        return await self._off_loop(
            cast("MessageStore", self).put, topic, body, queue_id, tags, keys, properties,
            delay_level, flag, born_timestamp, born_host, sys_flag, check=check)

    async def aput_message(self, msg: Message, *, check: bool = True) -> PutResult:
        """:meth:`put_message` in a store thread (see :meth:`aput`)."""
        return await self._off_loop(cast("MessageStore", self).put_message, msg, check=check)

    async def aput_messages(
        self, msgs: Sequence[Message] | Iterable[Message], *, check: bool = True
    ) -> list[PutResult]:
        """:meth:`put_messages` in a store thread (see :meth:`aput`): every
        acceptable message is stored, then one
        :class:`~rocketstore.MessageRefusedError` names the refused ones
        (``check=False``: the results are returned).

        An iterator is read to the end on the loop first.
        """
        if not isinstance(msgs, Sequence):
            msgs = list(msgs)
        return await self._off_loop(cast("MessageStore", self).put_messages, msgs,
                                    check=check)

    async def aput_batch(
        self,
        topic: str,
        bodies: Iterable[bytes | bytearray | memoryview],
        queue_id: int = 0,
        *,
        keys: Sequence[Sequence[str] | str | None] | None = None,
        tags: Sequence[str | None] | None = None,
        properties: Sequence[dict[str, str] | None] | None = None,
        return_offsets: bool = False,
        check: bool = True,
    ) -> BatchPutResult:
        """:meth:`put_batch` in a store thread (see :meth:`aput`): all or nothing,
        one result; a refused batch raises :class:`~rocketstore.MessageRefusedError`
        unless ``check=False``. An iterator of bodies is read to the end on
        the loop first."""
        if not isinstance(bodies, Sequence):
            bodies = list(bodies)
        return await self._off_loop(
            cast("MessageStore", self).put_batch, topic, bodies, queue_id, keys=keys, tags=tags,
            properties=properties, return_offsets=return_offsets, check=check)

    # -- consumers ----------------------------------------------------------------

    def async_consumer(
        self,
        group: str,
        topic: str,
        *,
        start: Literal["earliest", "latest"] = "earliest",
        tags: Sequence[str] | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
    ) -> AsyncConsumer:
        """An :class:`AsyncConsumer` of every queue of ``topic`` for ``group``.

        The arguments, errors and warnings are those of :meth:`consumer`.
        """
        from rocketstore.consumers.consumer import Consumer

        store = cast("MessageStore", self)
        # As consumer(): the read rule (a name that fails the put rule is
        # refused unless the store holds it), and the unknown-topic warning
        # (pointing at the caller).
        store._n.get_max_offset_in_queue(topic, 0)
        store._warn_unknown(topic)
        c = Consumer(store, group, topic, start=start, tags=tags, auto_commit=auto_commit,
                     auto_commit_interval=auto_commit_interval)
        return AsyncConsumer(self, c)
