"""asyncio for a store: the threads that keep the event loop free.

:class:`StoreThreads` is the part of a :class:`~rocketstore.MessageStore`
behind its asyncio methods (``aput``, ``aput_message``, ``aput_messages``,
``aput_batch``, ``async with``, ``aclose``) and behind its async consumers
(:mod:`rocketstore.consumers.async_consumer`)::

    async with MessageStore(cfg) as store:    # start() and shutdown() in a thread
        r = await store.aput("orders", b"order #42", tags="paid")
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
  thread per store (:class:`DispatchWatcher`) sleeps in the dispatcher's
  wake-up (the engine's ``wait_for_dispatch``, GIL released) and wakes the
  waiting loops at once; in a read-only process that thread re-reads the
  queue ends every 5 ms. Commits that write ``consumerOffset.json``
  (``commit()``, auto-commits, ``close()``) run in the put pool.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rocketstore.errors import StoreClosedError

if TYPE_CHECKING:
    from rocketstore._native import (
        BatchPutResult,
        Message,
        NativeStore,
        PutResult,
        _BytesLike,
    )
    from rocketstore.store import MessageStore

__all__ = ["PULL_THREADS", "PUT_THREADS", "DispatchWatcher", "StoreThreads", "aput", "aput_batch",
           "aput_message", "aput_messages"]

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


class StoreThreads:
    """The asyncio part of one store: its thread pools (made on first use)
    and the wake-up watcher of its open engine store.

    ``native`` returns the open engine store, or raises
    :class:`StoreClosedError` (the store refers to it weakly, so this part
    keeps no dropped store alive).
    """

    _lock = threading.Lock()

    def __init__(self, native: Callable[[], NativeStore]) -> None:
        self._native = native
        self._pools: dict[str, concurrent.futures.ThreadPoolExecutor] | None = None
        self._watcher: DispatchWatcher | None = None

    def watcher(self) -> DispatchWatcher:
        """The wake-up watcher of the open engine store (made on first use)."""
        n = self._native()
        with StoreThreads._lock:
            w = self._watcher
            if w is None or w.native is not n:
                w = self._watcher = DispatchWatcher(n)
            return w

    async def run(self, fn: Callable[..., _T], /, *args: Any,
                  _pool: str = "put", **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)`` in one of the store's threads (of pool
        ``_pool``: ``"put"``, also for commits, or ``"pull"``)."""
        self._native()  # raises StoreClosedError when closed
        with StoreThreads._lock:
            pools = self._pools
            if pools is None:
                pools = self._pools = {}
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

    def close(self, reason: str, *, forked: bool = False) -> None:
        """The store closed: fail waiting consumers, let the put threads end.

        Puts already handed to a thread finish (or raise
        :class:`StoreClosedError`); in a forked child the threads are the
        parent's, and nothing is joined.
        """
        with StoreThreads._lock:
            pools, self._pools = self._pools, None
            watcher, self._watcher = self._watcher, None
        if watcher is not None and not forked:
            watcher.close(reason)
        if pools is not None and not forked:
            for pool in pools.values():
                pool.shutdown(wait=False)


# -- the store's asyncio puts (bound by name in MessageStore) -----------------


async def aput(
    store: MessageStore,
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
    return await store._threads.run(
        store.put, topic, body, queue_id, tags, keys, properties,
        delay_level, flag, born_timestamp, born_host, sys_flag, check=check)


async def aput_message(store: MessageStore, msg: Message, *, check: bool = True) -> PutResult:
    """:meth:`put_message` in a store thread (see :meth:`aput`)."""
    return await store._threads.run(store.put_message, msg, check=check)


async def aput_messages(
    store: MessageStore, msgs: Sequence[Message] | Iterable[Message], *, check: bool = True
) -> list[PutResult]:
    """:meth:`put_messages` in a store thread (see :meth:`aput`): every
    acceptable message is stored, then one
    :class:`~rocketstore.MessageRefusedError` names the refused ones
    (``check=False``: the results are returned).

    An iterator is read to the end on the loop first.
    """
    if not isinstance(msgs, Sequence):
        msgs = list(msgs)
    return await store._threads.run(store.put_messages, msgs, check=check)


async def aput_batch(
    store: MessageStore,
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
    return await store._threads.run(
        store.put_batch, topic, bodies, queue_id, keys=keys, tags=tags,
        properties=properties, return_offsets=return_offsets, check=check)
