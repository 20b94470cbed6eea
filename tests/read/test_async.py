"""asyncio: ``store.async_consumer`` and ``store.aput*`` never block the loop.

Each test runs its coroutine with ``asyncio.run`` under a generous guard
(``GUARD`` seconds): a wait that hangs fails the test instead of the run.
Speed is never asserted as a wall time: a wake-up is proven by the message
it returns, a free loop by a ticker task that ran while a call waited.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from helpers.presets import SMALL
from rocketstore import (
    FlushDiskType,
    InvalidMessageError,
    Message,
    MessageRefusedError,
    MessageStore,
    PutStatus,
    StoreClosedError,
    StoreConfig,
)
from rocketstore.aio import PUT_THREADS, DispatchWatcher
from rocketstore.consumers import AsyncConsumer

# A read-only store's consumers made before their topic's first put warn of
# the unknown topic.
pytestmark = pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")

T = TypeVar("T")
OpenStore = Callable[..., MessageStore]

#: Seconds any one test's coroutine may take before it counts as hung.
GUARD = 60.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def guarded() -> T:
        return await asyncio.wait_for(coro, GUARD)
    return asyncio.run(guarded())


def wakeup_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rocketstore-async-wakeup"]


async def until(cond: Callable[[], bool]) -> None:
    """Let the loop run until ``cond()`` holds (the test's guard bounds it)."""
    while not cond():
        await asyncio.sleep(0.001)


async def waiting(c: AsyncConsumer) -> None:
    """Until a poll of ``c`` waits for new messages."""
    await until(lambda: bool(c._waiting))


class Ticker:
    """A task counting its turns: proof that the loop ran other work."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    def stop(self) -> None:
        self._task.cancel()


def test_other_tasks_run_while_a_poll_waits(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    store.put("t", b"old")

    async def main() -> None:
        c = store.async_consumer("g", "t", start="latest")
        ticker = Ticker()
        # Nothing arrives: the poll waits out its 0.5 s; a poll that held the
        # loop would leave the ticker at 0 (it reads the count at once).
        assert await c.poll(timeout=0.5) == []
        ticks = ticker.ticks
        assert ticks >= 3, ticks
        # The ticker itself puts after 10 turns: the poll returns that
        # message only if the loop ran while it waited (else it times out).
        async def put_after_ticks() -> None:
            await until(lambda: ticker.ticks >= ticks + 10)
            await store.aput("t", b"from the ticker")
        putter = asyncio.create_task(put_after_ticks())
        got = await c.poll(timeout=GUARD / 2)
        assert [m.body for m in got] == [b"from the ticker"]
        await putter
        ticker.stop()
        await c.close()

    run(main())


def test_poll_is_woken_by_a_put_from_another_thread(open_store: OpenStore) -> None:
    store = open_store(**SMALL)

    async def main() -> None:
        async with store.async_consumer("g", "t") as c:
            poll = asyncio.create_task(c.poll(timeout=GUARD / 2))
            await waiting(c)
            t = threading.Thread(target=store.put, args=("t", b"from a thread"))
            t.start()
            got = await poll
            t.join()
            assert [m.body for m in got] == [b"from a thread"]
            # And by a put of another task, through the same wake-up.
            poll = asyncio.create_task(c.poll(timeout=GUARD / 2))
            await waiting(c)
            r = await store.aput("t", b"from a task", tags="x")
            assert r.status is PutStatus.PUT_OK
            [m] = await poll
            assert (m.body, m.tags, m.queue_offset) == (b"from a task", "x", 1)

    run(main())


def test_cancelled_poll_leaves_no_waiter_and_loses_nothing(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    store.put("t", b"m0")

    async def main() -> None:
        async with store.async_consumer("g", "t") as c:
            assert [m.body for m in await c.poll(timeout=1.0)] == [b"m0"]
            poll = asyncio.create_task(c.poll(timeout=None))
            await waiting(c)
            watcher = store._threads.watcher()
            assert watcher._waiters and wakeup_threads()
            poll.cancel()
            with pytest.raises(asyncio.CancelledError):
                await poll
            assert not c._waiting and not watcher._waiters
            # The wake-up thread ends once nobody waits (after one idle wait).
            await until(lambda: not wakeup_threads() and watcher.thread is None)
            # Nothing was lost, and the next poll waits and wakes again.
            poll = asyncio.create_task(c.poll(timeout=GUARD / 2))
            await waiting(c)
            await store.aput("t", b"m1")
            assert [m.body for m in await poll] == [b"m1"]
            assert c.position(0) == 2

    run(main())


def test_shutdown_while_a_poll_waits_raises_store_closed(open_store: OpenStore) -> None:
    store = open_store(**SMALL)

    async def main() -> None:
        c = store.async_consumer("g", "t", auto_commit=False)
        poll = asyncio.create_task(c.poll(timeout=None))
        await waiting(c)
        # Shut down from another thread, as a service's signal handler might.
        await asyncio.to_thread(store.shutdown)
        with pytest.raises(StoreClosedError):
            await poll
        with pytest.raises(StoreClosedError):
            await c.poll(timeout=0)
        with pytest.raises(StoreClosedError):
            await store.aput("t", b"late")
        await c.close()  # after the store: no error, nothing to commit
        await until(lambda: not wakeup_threads())

    run(main())


def test_async_for_ends_when_the_store_shuts_down(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    store.put_batch("t", [b"a", b"b"])

    async def main() -> list[bytes]:
        seen: list[bytes] = []

        async def consume() -> None:
            async for msg in store.async_consumer("g", "t"):
                seen.append(msg.body)

        task = asyncio.create_task(consume())
        await until(lambda: len(seen) == 2)
        await asyncio.sleep(0.05)  # the loop now waits for more
        store.shutdown()           # on the loop's own thread
        await task                 # ends without error
        return seen

    assert run(main()) == [b"a", b"b"]


def test_close_while_a_poll_waits_returns_empty(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    store.put("t", b"m0")

    async def main() -> None:
        c = store.async_consumer("g", "t")
        assert len(await c.poll(timeout=1.0)) == 1
        poll = asyncio.create_task(c.poll(timeout=None))
        await waiting(c)
        await c.close()
        assert await poll == []
        assert c.closed
        with pytest.raises(ValueError, match="closed"):
            await c.poll(timeout=0)
        # close() committed the position durably.
        assert store.query_offset("g", "t", 0) == 1

    run(main())


def test_commit_is_durable_and_a_new_consumer_resumes(
    open_store: OpenStore, store_path: str
) -> None:
    store = open_store(**SMALL)
    store.put_batch("t", [b"%d" % i for i in range(10)])

    async def main() -> None:
        c = store.async_consumer("g", "t", auto_commit=False)
        got = await c.poll(timeout=1.0, max_messages=4)
        assert [m.queue_offset for m in got] == [0, 1, 2, 3]
        await c.commit()
        await c.close()

    run(main())
    store.shutdown()
    store = open_store(**SMALL)
    assert store.query_offset("g", "t", 0) == 4

    async def resume() -> list[int]:
        async with store.async_consumer("g", "t") as c:
            return [m.queue_offset for m in await c.poll(timeout=1.0)]

    assert run(resume()) == list(range(4, 10))


def test_auto_commit_commits_what_earlier_polls_returned(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    store.put_batch("t", [b"a", b"b", b"c"])

    async def main() -> None:
        c = store.async_consumer("g", "t", auto_commit_interval=0)
        assert len(await c.poll(timeout=1.0)) == 3
        # Each poll commits first, never what it is about to return.
        assert store.query_offset("g", "t", 0) == 0
        assert await c.poll(timeout=0) == []
        assert store.query_offset("g", "t", 0) == 3
        store.put("t", b"d")
        async for msg in c:  # iteration auto-commits too
            assert msg.body == b"d"
            break
        assert store.query_offset("g", "t", 0) == 3
        await c.close()
        assert store.query_offset("g", "t", 0) == 4

    run(main())


def test_async_with_starts_and_shuts_down_the_store(store_path: str) -> None:
    store = MessageStore(StoreConfig(store_path=store_path, **SMALL))

    async def main() -> None:
        async with store as s:
            assert s is store and not store.running_flags
            await s.aput("t", b"kept")
        assert "CLOSED" in store.running_flags
        with pytest.raises(StoreClosedError):
            await store.aput("t", b"late")

    run(main())
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as again:
        assert again.get_message("g", "t", 0, 0).messages[0].body == b"kept"


def test_async_puts(open_store: OpenStore) -> None:
    store = open_store(**SMALL)

    async def main() -> None:
        bodies = [b"order %d" % i for i in range(1000)]
        r = await store.aput_batch("orders", bodies, 0, keys=[f"k{i}" for i in range(1000)],
                                   return_offsets=True)
        assert r.ok and r.count == 1000 and r.queue_offset == 0
        # An iterator of bodies is taken too; batches from many tasks at once.
        rs = await asyncio.gather(*(store.aput_batch("orders", (b"x" for _ in range(10)), 1)
                                    for _ in range(8)))
        assert all(b.ok and b.count == 10 for b in rs)
        assert sorted(b.queue_offset for b in rs) == list(range(0, 80, 10))
        results = await store.aput_messages([Message("orders", b"m", queue_id=2),
                                             Message("audit", b"n")])
        assert [x.status for x in results] == [PutStatus.PUT_OK] * 2
        one = await store.aput_message(Message("orders", b"one", queue_id=2, tags="t"))
        assert one.queue_offset == 1
        async with store.async_consumer("g", "orders") as c:
            got: list[bytes] = []
            while len(got) < 1082:
                batch = await c.poll(timeout=5.0, max_messages=500)
                assert batch, f"only {len(got)} of 1082"
                got.extend(m.body for m in batch)
        assert sorted(got) == sorted([*bodies, *[b"x"] * 80, b"m", b"one"])
        [hit] = store.query_message("orders", "k999")
        assert hit.body == b"order 999"

    run(main())


def test_sync_flush_put_waits_off_the_loop(open_store: OpenStore, hold: Any) -> None:
    store = open_store(**SMALL, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                       sync_flush_timeout=int(GUARD * 1000))
    hold(True)  # a stalled disk: a SYNC_FLUSH put waits until it is released

    async def main() -> None:
        put = asyncio.create_task(store.aput("t", b"durable"))
        ticker = Ticker()
        # The loop keeps running while the put waits for the disk.
        await until(lambda: ticker.ticks >= 10 or put.done())
        assert not put.done() and ticker.ticks >= 10
        hold(False)
        r = await put
        assert r.status is PutStatus.PUT_OK and store.flushed_offset >= r.wrote_offset
        ticker.stop()

    run(main())


WRITER = r"""
import json, sys, time
from rocketstore import MessageStore, StoreConfig
store = MessageStore(StoreConfig(store_path=sys.argv[1], **json.loads(sys.argv[3]))).start()
print("started", flush=True)
sys.stdin.readline()
for i in range(int(sys.argv[2])):
    store.put("t", b"m%d" % i, i % 2)
    if i % 10 == 9:
        time.sleep(0.01)
sys.stdin.readline()
store.shutdown()
"""


def test_read_only_process_consumes_with_asyncio(store_path: str, tmp_path: Path) -> None:
    n = 200
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    with subprocess.Popen([sys.executable, str(script), store_path, str(n), json.dumps(SMALL)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as writer:
        assert writer.stdin is not None and writer.stdout is not None
        stdin = writer.stdin
        try:
            assert writer.stdout.readline().strip() == "started"
            # The same segment sizes: the writer has created no CommitLog file yet.
            reader = MessageStore(StoreConfig(store_path=store_path, **SMALL),
                                  read_only=True).start()

            async def main() -> list[tuple[int, bytes]]:
                c = reader.async_consumer("g", "t")
                ticker = Ticker()

                async def go() -> None:
                    # The writer starts once the ticker ran while the poll waited.
                    await until(lambda: bool(c._waiting) and ticker.ticks >= 5)
                    stdin.write("go\n")
                    stdin.flush()

                starter = asyncio.create_task(go())
                got: list[tuple[int, bytes]] = []
                while len(got) < n:
                    batch = await c.poll(timeout=GUARD / 2)
                    assert batch, f"only {len(got)} of {n}"
                    got.extend((m.queue_id, m.body) for m in batch)
                await starter
                ticker.stop()
                # A read-only process commits durably too (config/consumerOffset.json).
                await c.commit()
                assert [reader.query_offset("g", "t", q) for q in (0, 1)] == [n // 2] * 2
                await c.close()
                return got

            try:
                got = run(main())
            finally:
                reader.shutdown()
            stdin.write("done\n")
            stdin.flush()
            assert writer.wait(GUARD) == 0
        finally:
            if writer.poll() is None:
                writer.kill()
    for q in (0, 1):
        assert [b for qid, b in got if qid == q] == [b"m%d" % i for i in range(q, n, 2)]


@pytest.fixture
def hold() -> Any:
    """``hold(True)`` stalls the flush services (nothing reaches the disk)."""
    from helpers.fault_fixtures import has_fail_points
    from helpers.presets import FAILPOINTS_MISSING
    from rocketstore import _native

    if not has_fail_points():
        pytest.fail(FAILPOINTS_MISSING, pytrace=False)

    def arm(on: bool) -> None:
        assert _native._set_fail_point("flush_hold", 1 if on else 0)

    try:
        yield arm
    finally:
        _native._set_fail_point("flush_hold", 0)


def test_one_put_wakes_consumers_on_two_loops(open_store: OpenStore) -> None:
    """Two threads, each with its own loop, wait on one store's wake-up thread."""
    store = open_store(**SMALL)
    got: dict[str, list[bytes]] = {}
    consumers: dict[str, AsyncConsumer] = {}

    def reader(group: str) -> None:
        async def main() -> None:
            async with store.async_consumer(group, "t") as c:
                consumers[group] = c
                got[group] = [m.body for m in await c.poll(timeout=GUARD / 2)]
        run(main())

    run(until(lambda: not wakeup_threads()))  # those of earlier tests' stores ended
    threads = [threading.Thread(target=reader, args=(g,)) for g in ("a", "b")]
    for t in threads:
        t.start()
    run(until(lambda: len(consumers) == 2 and all(c._waiting for c in consumers.values())))
    assert len(wakeup_threads()) == 1  # one per store, whatever the number of loops
    store.put("t", b"for both")
    for t in threads:
        t.join(GUARD)
    assert got == {"a": [b"for both"], "b": [b"for both"]}


EXIT_WHILE_WAITING = r"""
import asyncio, json, sys, threading
from rocketstore import MessageStore, StoreConfig
store = MessageStore(StoreConfig(store_path=sys.argv[1], **json.loads(sys.argv[2]))).start()
c = store.async_consumer("g", "t")
waiting = threading.Event()

async def main():
    poll = asyncio.ensure_future(c.poll(timeout=None))
    while not c._waiting:
        await asyncio.sleep(0.001)
    waiting.set()
    await poll

threading.Thread(target=asyncio.run, args=(main(),), daemon=True).start()
waiting.wait()
print("waiting", flush=True)
"""


def test_interpreter_exits_while_a_poll_waits(store_path: str, tmp_path: Path) -> None:
    script = tmp_path / "exit.py"
    script.write_text(EXIT_WHILE_WAITING)
    # The main thread ends with the poll still waiting (the store is not
    # shut down): the process ends cleanly instead of hanging or aborting.
    r = subprocess.run([sys.executable, "-W", "ignore::UserWarning", str(script), store_path,
                        json.dumps(SMALL)], capture_output=True, text=True, timeout=GUARD)
    assert (r.returncode, r.stdout) == (0, "waiting\n"), r.stderr


class RacingNative:
    """An engine store whose first wait times out just as a new message lands
    and a task starts waiting for the message after it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.dispatch_seq = 5
        self.loop = loop
        self.watcher: DispatchWatcher | None = None
        self.first: Any = None
        self.registered: list[Any] = []
        self.waits = 0

    def wait_for_dispatch(self, seen: int, timeout: float) -> int:
        self.waits += 1
        if self.waits == 1:
            self.dispatch_seq = 6  # lands after the wait gave up

            async def register() -> None:
                assert self.watcher is not None
                self.watcher.unregister(self.first)  # its task was cancelled
                self.registered.append(self.watcher.register(6))

            asyncio.run_coroutine_threadsafe(register(), self.loop).result(GUARD)
            return seen  # the wait saw nothing: the thread is idle now
        threading.Event().wait(timeout)
        return self.dispatch_seq


def test_a_waiter_that_comes_in_as_the_thread_goes_idle_is_not_lost() -> None:
    async def main() -> None:
        native = RacingNative(asyncio.get_running_loop())
        watcher = native.watcher = DispatchWatcher(native)  # type: ignore[arg-type]
        native.first = watcher.register(5)  # starts the thread, which waits on 5
        await until(lambda: bool(native.registered))
        # The thread finds the new waiter (seq 6) after an idle wait: it
        # must not stop without waking it, or the task would wait forever.
        [late] = native.registered
        assert await late.fut in (5, 6)

    run(main())


def test_poll_arrow_waits_on_the_loop(open_store: OpenStore) -> None:
    pytest.importorskip("pyarrow")
    store = open_store(**SMALL)
    store.put_batch("t", [b"a", b"b"])

    async def main() -> None:
        async with store.async_consumer("g", "t", auto_commit=False) as c:
            batch = await c.poll_arrow(timeout=1.0, columns=["queue_offset", "body"])
            assert batch.to_pydict() == {"queue_offset": [0, 1], "body": [b"a", b"b"]}
            assert (await c.poll_arrow(timeout=0)).num_rows == 0
            # A waiting poll is woken by a put, and the ticker ran meanwhile.
            ticker = Ticker()
            poll = asyncio.create_task(c.poll_arrow(timeout=GUARD / 2, columns=["body"]))
            await until(lambda: bool(c._waiting) and ticker.ticks >= 3)
            await store.aput("t", b"c")
            assert (await poll).column("body").to_pylist() == [b"c"]
            # Cancelled while waiting: nothing moves, the next poll works.
            poll = asyncio.create_task(c.poll_arrow(timeout=None))
            await waiting(c)
            poll.cancel()
            with pytest.raises(asyncio.CancelledError):
                await poll
            assert c.position(0) == 3
            store.put("t", b"d")
            assert (await c.poll_arrow(timeout=GUARD / 2, columns=["body"])).num_rows == 1
            ticker.stop()

    run(main())


def test_refused_async_puts_raise_as_the_blocking_ones_do(open_store: OpenStore) -> None:
    store = open_store(**SMALL)

    async def main() -> None:
        # A topic with a dot breaks the topic rule: refused, nothing stored.
        with pytest.raises(InvalidMessageError) as e:
            await store.aput("bad.topic", b"x")
        assert isinstance(e.value, ValueError)
        assert e.value.status is PutStatus.MESSAGE_ILLEGAL
        r = await store.aput("bad.topic", b"x", check=False)
        assert r.status is PutStatus.MESSAGE_ILLEGAL
        with pytest.raises(MessageRefusedError):
            await store.aput_batch("t", [b"ok", b"ok"], tags=["x" * 70_000, None])
        b = await store.aput_batch("t", [b"ok", b"ok"], tags=["x" * 70_000, None], check=False)
        assert not b.ok
        with pytest.raises(MessageRefusedError):
            await store.aput_message(Message("bad.topic", b"x"))
        # put_messages stores the acceptable ones, then raises naming the others.
        with pytest.raises(MessageRefusedError) as refused:
            await store.aput_messages([Message("t", b"good"), Message("bad.topic", b"x")])
        assert list(refused.value.refused) == [1]
        assert refused.value.refused[1].status is PutStatus.MESSAGE_ILLEGAL
        rs = await store.aput_messages([Message("t", b"good 2"), Message("bad.topic", b"x")],
                                       check=False)
        assert [x.status for x in rs] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL]
        assert store.get_max_offset_in_queue("t", 0) == 2  # the two good ones only

    run(main())


def test_polls_cancelled_mid_pull_lose_and_repeat_nothing(open_store: OpenStore) -> None:
    """Pulls run in a store thread: a poll cancelled while its pull runs
    leaves the pull to finish, and the next poll delivers what it fetched."""
    pytest.importorskip("pyarrow")
    store = open_store(**SMALL)
    store.put_batch("t", [b"%d" % i for i in range(300)])

    async def main() -> list[bytes]:
        got: list[bytes] = []
        async with store.async_consumer("g", "t") as c:
            for i in range(30):
                poll = asyncio.create_task(
                    c.poll(timeout=0.5, max_messages=7) if i % 2
                    else c.poll_arrow(timeout=0.5, max_messages=7, columns=["body"]))
                for _ in range(i % 4):
                    await asyncio.sleep(0)
                poll.cancel()
                try:
                    r = await poll
                except asyncio.CancelledError:
                    continue
                got.extend(m.body for m in r) if isinstance(r, list) else got.extend(
                    r.column("body").to_pylist())
            while len(got) < 300:
                batch = await c.poll(timeout=GUARD / 2)
                assert batch, f"only {len(got)} of 300"
                got.extend(m.body for m in batch)
        return got

    assert run(main()) == [b"%d" % i for i in range(300)]


def test_pulls_do_not_queue_behind_puts_waiting_for_the_disk(
    open_store: OpenStore, hold: Any
) -> None:
    store = open_store(**SMALL, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                       sync_flush_timeout=int(GUARD * 1000))
    store.put("t", b"on disk")
    hold(True)

    async def main() -> None:
        # More puts than put threads, all waiting for the stalled disk.
        puts = [asyncio.create_task(store.aput("t", b"held")) for _ in range(PUT_THREADS + 4)]
        await asyncio.sleep(0.05)
        async with store.async_consumer("g", "t", auto_commit=False) as c:
            got = await c.poll(timeout=GUARD / 2)
            assert [m.body for m in got] == [b"on disk"]
        assert not any(p.done() for p in puts)
        hold(False)
        assert all(r.status is PutStatus.PUT_OK for r in await asyncio.gather(*puts))

    run(main())
