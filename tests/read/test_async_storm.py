"""asyncio consumers under attack: cancellation storms, shutdown while many
polls wait on two loops, and a loop closed with its consumer still open.

A hang fails the test through the guard (``asyncio.wait_for``) or a
subprocess timeout; no wall time is asserted.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.presets import SMALL
from rocketstore import MessageStore, StoreClosedError
from rocketstore.consumers import AsyncConsumer

pytestmark = pytest.mark.filterwarnings("ignore::rocketstore.UnknownTopicWarning")

GUARD = 120.0
QUEUES = 4


def _run(coro: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, GUARD)
    return asyncio.run(guarded())


async def _storm(store: MessageStore, c: AsyncConsumer, total: int, seed: int,
                 mode: str) -> list[tuple[int, int, bytes]]:
    """Put ``total`` messages while polls (``mode``: ``poll``, ``poll_arrow``
    or ``mixed``, either at random) are cancelled at random moments; every
    ``(queue id, queue offset, body)`` a poll returned."""
    rng = random.Random(seed)
    got: list[tuple[int, int, bytes]] = []

    async def produce() -> None:
        for i in range(total):
            assert (await store.aput("t", b"m%d" % i, i % QUEUES)).ok
            if rng.random() < 0.3:
                await asyncio.sleep(rng.random() / 500)

    producer = asyncio.create_task(produce())
    while len(got) < total:
        n = rng.randrange(1, 20)
        arrow = mode == "poll_arrow" or (mode == "mixed" and rng.random() < 0.5)
        if arrow:
            task: asyncio.Task[Any] = asyncio.create_task(
                c.poll_arrow(timeout=rng.choice([None, 0.001, 0.05]), max_messages=n,
                             columns=["queue_id", "queue_offset", "body"]))
        else:
            task = asyncio.create_task(
                c.poll(timeout=rng.choice([None, 0.001, 0.05]), max_messages=n))
        for _ in range(rng.randrange(0, 4)):
            await asyncio.sleep(0)
        if rng.random() < 0.15:
            await asyncio.sleep(rng.random() / 1000)
        if rng.random() < 0.6:
            task.cancel()
        try:
            result = await task
        except asyncio.CancelledError:
            continue
        if arrow:
            rows = result.to_pylist()
            got += [(r["queue_id"], r["queue_offset"], r["body"]) for r in rows]
        else:
            got += [(m.queue_id, m.queue_offset, m.body) for m in result]
    await producer
    return got


@pytest.mark.parametrize("mode", ["poll", "poll_arrow", "mixed"])
def test_cancellation_storm_delivers_every_message_exactly_once(
        open_store: Any, mode: str) -> None:
    if mode != "poll":
        pytest.importorskip("pyarrow")
    store = open_store(**SMALL)
    total = 600

    async def main() -> None:
        async with store.async_consumer("g", "t", auto_commit=False) as c:
            got = await _storm(store, c, total, seed=len(mode), mode=mode)
            assert sorted(b for _, _, b in got) == sorted(b"m%d" % i for i in range(total))
            for q in range(QUEUES):  # in queue order, no gap, no repeat
                offsets = [off for qid, off, _ in got if qid == q]
                assert offsets == list(range(total // QUEUES)), q
            assert c.positions() == {q: total // QUEUES for q in range(QUEUES)}
            # Nothing more is delivered, and no waiter is left behind.
            assert await c.poll(timeout=0.01) == []
            assert not c._waiting
            await c.commit()
        async with store.async_consumer("g", "t") as again:
            assert again.positions() == {q: total // QUEUES for q in range(QUEUES)}

    _run(main())


def test_shutdown_while_many_polls_wait_on_two_loops(open_store: Any) -> None:
    store = open_store(**SMALL)
    store.put("t", b"first")
    results: dict[str, list[str]] = {}
    ready = [threading.Event(), threading.Event()]

    def loop(name: str, ev: threading.Event) -> None:
        async def main() -> None:
            consumers = [store.async_consumer(f"{name}{i}", "t") for i in range(8)]
            for c in consumers:  # drain, so the next polls wait
                assert [m.body for m in await c.poll(timeout=1.0)] == [b"first"]
            polls = [asyncio.create_task(c.poll(timeout=None)) for c in consumers]
            polls += [asyncio.create_task(c.poll(timeout=None)) for c in consumers]
            while sum(len(c._waiting) for c in consumers) < len(polls):
                await asyncio.sleep(0.001)
            ev.set()
            outcomes = await asyncio.gather(*polls, return_exceptions=True)
            results[name] = [type(o).__name__ for o in outcomes]
        _run(main())

    threads = [threading.Thread(target=loop, args=(n, e)) for n, e in zip("ab", ready, strict=True)]
    for t in threads:
        t.start()
    for ev in ready:
        assert ev.wait(GUARD)
    store.shutdown()
    for t in threads:
        t.join(GUARD)
        assert not t.is_alive(), "a poll hung after shutdown"
    # Two polls of one consumer may share a wait; every one ends, none with a
    # message (none was put), the waiting ones with StoreClosedError.
    for name in "ab":
        assert len(results[name]) == 16
        assert set(results[name]) <= {StoreClosedError.__name__, "list"}, results[name]
        assert StoreClosedError.__name__ in results[name]


LOOP_CLOSED = r"""
import asyncio, json, sys
from rocketstore import MessageStore, StoreConfig
store = MessageStore(StoreConfig(store_path=sys.argv[1], **json.loads(sys.argv[2]))).start()
store.put("t", b"m0")
loop = asyncio.new_event_loop()
c = loop.run_until_complete(asyncio.sleep(0, store.async_consumer("g", "t")))

async def main():
    assert [m.body for m in await c.poll(timeout=1.0)] == [b"m0"]
    poll = asyncio.ensure_future(c.poll(timeout=None))
    while not c._waiting:
        await asyncio.sleep(0.001)
    return poll

poll = loop.run_until_complete(main())
loop.close()  # the poll still waits, the consumer is open
store.put("t", b"m1")  # wakes a waiter whose loop is closed
print("closed", flush=True)
if sys.argv[3] == "shutdown":
    store.shutdown()
    print("shut", flush=True)
"""


@pytest.mark.parametrize("end", ["exit", "shutdown"])
def test_loop_closed_with_its_consumer_open_does_not_hang(
        store_path: str, tmp_path: Path, end: str) -> None:
    script = tmp_path / "loop_closed.py"
    script.write_text(LOOP_CLOSED)
    r = subprocess.run([sys.executable, "-W", "ignore::UserWarning", str(script), store_path,
                        json.dumps(SMALL), end], capture_output=True, text=True, timeout=GUARD)
    expected = "closed\n" + ("shut\n" if end == "shutdown" else "")
    assert (r.returncode, r.stdout) == (0, expected), r.stderr
    assert "Traceback" not in r.stderr, r.stderr


async def _cancel_a_poll_in_its_pull(
    c: AsyncConsumer, held: Callable[[int, int, int], Any], entered: threading.Event
) -> None:
    """Routes ``c``'s pulls through ``held``, starts a poll and cancels it
    once ``entered`` says its pull is under way (``held`` then still runs)."""
    c._c._pull_messages = held  # type: ignore[method-assign]
    poll = asyncio.create_task(c.poll(timeout=None, max_messages=2))
    await asyncio.to_thread(entered.wait, GUARD)
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll


def test_seek_after_a_cancelled_poll_whose_pull_still_runs(open_store: Any) -> None:
    """A poll cancelled while its pull runs in a store thread, then a seek:
    the pull ending later must not undo the seek (the next poll reads from
    the sought offset)."""
    store = open_store(**SMALL)
    store.put_batch("t", [b"m%d" % i for i in range(8)])

    async def main() -> list[bytes]:
        async with store.async_consumer("g", "t", auto_commit=False) as c:
            assert len(await c.poll(timeout=1, max_messages=4)) == 4
            entered, gate = threading.Event(), threading.Event()
            pull = c._c._pull_messages

            def held(q: int, pos: int, n: int) -> Any:
                entered.set()
                gate.wait(GUARD)  # the pull is under way when the poll is cancelled
                return pull(q, pos, n)

            await _cancel_a_poll_in_its_pull(c, held, entered)
            c.seek(0, 1)
            c._c._pull_messages = pull  # type: ignore[method-assign]
            gate.set()
            return [m.body for m in await c.poll(timeout=1, max_messages=100)]

    assert _run(main()) == [b"m%d" % i for i in range(1, 8)]


def test_async_for_after_a_cancelled_poll_whose_pull_still_runs(open_store: Any) -> None:
    """``async for`` right after a poll was cancelled during its pull, taking
    messages the pull buffered before the pull has finished: every message
    comes once, in order, and the positions end where they should."""
    store = open_store(**SMALL)
    store.put_batch("t", [b"m%d" % i for i in range(8)])

    async def main() -> list[bytes]:
        async with store.async_consumer("g", "t", auto_commit=False) as c:
            got = [m.body for m in await c.poll(timeout=1, max_messages=2)]
            entered, gate = threading.Event(), threading.Event()
            pull = c._c._pull_messages

            def held(q: int, pos: int, n: int) -> Any:
                r = pull(q, pos, n)  # buffered; the fetch has not finished
                entered.set()
                gate.wait(GUARD)
                return r

            await _cancel_a_poll_in_its_pull(c, held, entered)
            c._c._pull_messages = pull  # type: ignore[method-assign]
            it = aiter(c)

            async def two() -> list[bytes]:
                return [(await anext(it)).body, (await anext(it)).body]

            first = asyncio.create_task(two())
            await asyncio.sleep(0.01)
            gate.set()
            got += await first
            while len(got) < 8:
                got.append((await anext(it)).body)
            assert await c.poll(timeout=0.01) == []
            assert c.position(0) == 8
            return got

    assert _run(main()) == [b"m%d" % i for i in range(8)]
