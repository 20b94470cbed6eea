"""Consumers of a shared group in one process (``docs/format.md``, §13.2):
the queues split between them, listeners in order at the hand-over,
commits before a queue moves, exclusive and fixed refusals, 64 members on
8 queues, and a state file that cannot be read."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rocketstore import (
    ConsumerGroupBusyError,
    CorruptedError,
    FencedError,
    MessageStore,
    StoreClosedError,
    StoreConfig,
)
from rocketstore.cli import main
from rocketstore.consumers.consumer import Consumer
from rocketstore.consumers.membership import group_dir_path

TOPIC = "orders"
QUEUES = 8
BEAT, TIMEOUT = 0.1, 1.0
CFG: dict[str, Any] = {"mapped_file_size_commit_log": 1 << 20,
                       "mapped_file_size_consume_queue": 20 * 1000,
                       "max_hash_slot_num": 64, "max_index_num": 256,
                       "consumer_heartbeat_interval": BEAT,
                       "consumer_session_timeout": TIMEOUT}


@pytest.fixture
def store(store_path: str) -> Iterator[MessageStore]:
    """A writer with 8 queues of 10 messages each."""
    with MessageStore(StoreConfig(store_path=store_path, **CFG)) as s:
        for i in range(10 * QUEUES):
            assert s.put(TOPIC, b"m%d" % i, i % QUEUES).ok
        deadline = time.monotonic() + 5
        while s.dispatch_behind_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.005)
        yield s


def until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.01)


def settle(*consumers: Consumer, timeout: float = 10.0) -> list[tuple[int, int]]:
    """Poll every consumer until their assignments cover the queues, each
    with its share; the (queue, offset) of the messages the polls returned."""
    got: list[tuple[int, int]] = []

    def done() -> bool:
        for c in consumers:
            got.extend((m.queue_id, m.queue_offset) for m in c.poll(timeout=0))
        owned = [q for c in consumers for q in c.assignment()]
        fair = QUEUES // len(consumers)
        return (sorted(owned) == list(range(QUEUES))
                and all(len(c.assignment()) >= fair for c in consumers))

    until(done, "the queues split between the members", timeout)
    return got


def test_two_consumers_split_the_queues_and_read_each_message_once(
        store: MessageStore) -> None:
    a = store.consumer("g", TOPIC)
    assert a.assignment() == list(range(QUEUES))  # alone: every queue at once
    b = store.consumer("g", TOPIC)
    seen = settle(a, b)
    assert len(a.assignment()) == len(b.assignment()) == QUEUES // 2
    until(lambda: bool(seen.extend((m.queue_id, m.queue_offset)
                                   for c in (a, b) for m in c.poll(timeout=0.05)))
          or len(seen) >= 10 * QUEUES, "every message read")
    assert sorted(seen) == [(q, o) for q in range(QUEUES) for o in range(10)]
    a.close()
    until(lambda: b.poll(timeout=0) == [] and b.assignment() == list(range(QUEUES)),
          "a clean leave hands the queues over")
    assert b.positions() == {q: 10 for q in range(QUEUES)}  # a's close committed
    b.close()


def test_listeners_run_in_order_and_commit_before_the_hand_over(store: MessageStore) -> None:
    events: list[tuple[str, str, list[int], dict[int, int]]] = []

    def listen(name: str, what: str) -> Callable[[list[int]], None]:
        def call(queues: list[int]) -> None:
            committed = {q: store.query_offset("g", TOPIC, q) for q in queues}
            events.append((name, what, queues, committed))
        return call

    a = store.consumer("g", TOPIC, on_assign=listen("a", "assign"),
                       on_revoke=listen("a", "revoke"), strategy="circle")
    assert events == [("a", "assign", list(range(QUEUES)), {q: -1 for q in range(QUEUES)})]
    until(lambda: len(a.poll(timeout=0.05, max_messages=1000)) == 0
          and sum(a.positions().values()) == 10 * QUEUES, "a read everything")
    events.clear()
    b = store.consumer("g", TOPIC, on_assign=listen("b", "assign"),
                       on_revoke=listen("b", "revoke"), strategy="circle")
    settle(a, b)
    (rev,) = [e for e in events if e[1] == "revoke"]
    (got,) = [e for e in events if e[1] == "assign"]
    assert rev[0] == "a" and got[0] == "b" and events.index(rev) < events.index(got)
    assert rev[2] == got[2] == b.assignment()
    assert len(rev[2]) == QUEUES // 2
    # a's positions were durable before on_revoke ran; b starts there.
    assert rev[3] == {q: 10 for q in rev[2]}
    assert got[3] == rev[3] and b.positions() == rev[3]
    # circle: every other queue
    assert a.assignment() == [q for q in range(QUEUES) if q not in b.assignment()]
    events.clear()
    b.close()  # on_revoke with what it owned, after its commit
    assert events == [("b", "revoke", got[2], {q: 10 for q in got[2]})]
    a.close()


def test_async_consumer_awaits_coroutine_listeners(store: MessageStore) -> None:
    seen: list[tuple[str, list[int]]] = []

    async def on_assign(queues: list[int]) -> None:
        await asyncio.sleep(0)
        seen.append(("assign", queues))

    async def on_revoke(queues: list[int]) -> None:
        seen.append(("revoke", queues))

    async def main() -> None:
        async with store.async_consumer("g", TOPIC, on_assign=on_assign,
                                        on_revoke=on_revoke) as c:
            got = await c.poll(timeout=1, max_messages=1000)
            assert seen == [("assign", list(range(QUEUES)))]
            assert len(got) > 0 and c.assignment() == list(range(QUEUES))
        assert seen[-1] == ("revoke", list(range(QUEUES)))

    asyncio.run(main())


def test_exclusive_and_shared_consumers_refuse_each_other(store: MessageStore) -> None:
    shared = store.consumer("g", TOPIC)
    with pytest.raises(ConsumerGroupBusyError):
        store.consumer("g", TOPIC, exclusive=True)
    with pytest.raises(ConsumerGroupBusyError):
        store.reset_consumer_group("g", "earliest", topic=TOPIC)
    shared.close()
    alone = store.consumer("g", TOPIC, exclusive=True)
    assert alone.assignment() == list(range(QUEUES))
    with pytest.raises(ConsumerGroupBusyError):
        store.consumer("g", TOPIC)
    with pytest.raises(ConsumerGroupBusyError):
        store.consumer("g", TOPIC, exclusive=True)
    alone.close()
    store.consumer("g", TOPIC).close()  # free again
    with pytest.raises(ValueError, match="exclusive consumer reads every queue"):
        store.consumer("g", TOPIC, exclusive=True, queues=[1])


def test_fixed_queues_are_taken_and_a_conflict_is_refused(store: MessageStore) -> None:
    fixed = store.consumer("g", TOPIC, queues=[6, 1])
    assert fixed.assignment() == [1, 6]
    with pytest.raises(ConsumerGroupBusyError, match=f"pid {os.getpid()}"):
        store.consumer("g", TOPIC, queues=[2, 6])
    other = store.consumer("g", TOPIC)
    until(spread_over([fixed, other]), "the queues covered")
    assert fixed.assignment() == [1, 6]
    assert other.assignment() == [0, 2, 3, 4, 5, 7]
    with pytest.raises(ValueError, match="owned by another member"):
        other.seek(1, 0)
    with pytest.raises(FencedError, match="queue 1 "):
        other.commit({1: 3})  # not its queue: nothing written
    assert store.query_offset("g", TOPIC, 1) == -1
    for bad, error in (([], ValueError), ([1, 1], ValueError), ([-1], ValueError),
                       (["1"], TypeError), ("1", TypeError)):
        with pytest.raises(error):
            store.consumer("g", TOPIC, queues=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strategy"):
        store.consumer("g", TOPIC, strategy="random")  # type: ignore[arg-type]
    other.close()
    fixed.close()


def test_64_members_on_8_queues_idle_members_hold_nothing(store: MessageStore) -> None:
    members = [store.consumer("g", TOPIC) for _ in range(64)]
    got: set[tuple[int, int]] = set()
    try:
        def spread() -> bool:
            for c in members:
                got.update((m.queue_id, m.queue_offset) for m in c.poll(timeout=0))
            sizes = [len(c.assignment()) for c in members]
            return sorted(sizes) == [0] * 56 + [1] * 8
        until(spread, "one queue each for 8 members, none for 56", timeout=30)
        owned = sorted(q for c in members for q in c.assignment())
        assert owned == list(range(QUEUES))
        idle = [c for c in members if not c.assignment()]
        assert all(c.poll(timeout=0) == [] for c in idle)
        got.update((m.queue_id, m.queue_offset) for c in members if c.assignment()
                   for m in c.poll(timeout=0.2, max_messages=1000))
        assert got == {(q, o) for q in range(QUEUES) for o in range(10)}
        # Owners leave: idle members take their queues over.
        for c in [c for c in members if c.assignment()]:
            c.close()
        members = [c for c in members if not c.closed]
        until(spread_over(members), "the queues moved to idle members", timeout=30)
    finally:
        for c in members:
            c.close()


def spread_over(members: list[Consumer]) -> Callable[[], bool]:
    def check() -> bool:
        for c in members:
            c.poll(timeout=0)
        return sorted(q for c in members for q in c.assignment()) == list(range(QUEUES))
    return check


def test_an_unreadable_state_is_a_clear_error_and_expire_repairs_it(
        store: MessageStore, store_path: str) -> None:
    c = store.consumer("g", TOPIC, auto_commit=False)
    c.poll(timeout=1, max_messages=1000)
    c.commit({q: 5 for q in range(QUEUES)})
    state = Path(group_dir_path(store.config.config_dir, "g", TOPIC)) / "state"
    assert state.is_file()
    for damage in ("garbage", "fifo"):
        if damage == "garbage":
            state.write_bytes(b"\x00not a state\xff" * 10)
        else:
            state.unlink()
            os.mkfifo(state)  # a read would hang: never opened
        # The member's heartbeats fail: its leases lapse, it returns nothing.
        until(lambda: c.poll(timeout=0) == [] and c.assignment() == [],
              "the member's queues lapse")
        with pytest.raises((FencedError, CorruptedError)):  # never written
            c.commit({0: 9})
        with pytest.raises((CorruptedError, OSError), match="state"):
            store.consumer("g", TOPIC)
        listed = CliRunner().invoke(main, ["groups", store_path, "--json"],
                                    catch_exceptions=False)
        assert listed.exit_code == 0, listed.output
        (g,) = [g for g in json.loads(listed.stdout) if g["group"] == "g"]
        assert g["problems"] and "state" in g["problems"][0]
        assert [q["committed"] for q in g["queues"]] == [5] * QUEUES  # untouched
        fixed = CliRunner().invoke(main, ["groups", store_path, "--expire"],
                                   catch_exceptions=False)
        assert fixed.exit_code == 0, fixed.output
        assert state.is_file()
        # Repaired: the member owns its queues again and resumes at the commits.
        got: list[tuple[int, int]] = []

        def back(got: list[tuple[int, int]] = got) -> bool:
            got.extend((m.queue_id, m.queue_offset)
                       for m in c.poll(timeout=0.05, max_messages=1000))
            return len(got) >= 5 * QUEUES

        until(back, "the member is back")
        assert sorted(got) == [(q, o) for q in range(QUEUES) for o in range(5, 10)]
        c.seek_to_beginning()
        c.commit({q: 5 for q in range(QUEUES)})  # the same start for the next damage
    c.close()


def test_a_member_that_stops_polling_leaves_and_comes_back(store: MessageStore) -> None:
    """Past ``max_poll_interval`` without a poll a member leaves: the others
    take its queues; its next poll joins again, without what it lost."""
    idle = store.consumer("g", TOPIC, max_poll_interval=0.5)
    busy = store.consumer("g", TOPIC)
    settle(idle, busy)
    gone = idle.assignment()
    until(lambda: busy.poll(timeout=0.05) is not None and len(busy.assignment()) == QUEUES,
          "the busy member took the idle one's queues")
    revoked: list[list[int]] = []
    idle._on_revoke = revoked.append  # listen from now on
    until(lambda: idle.poll(timeout=0.05) is not None and bool(revoked),
          "the idle member learns it lost its queues")
    assert sorted(q for qs in revoked for q in qs) == gone
    settle(idle, busy)  # back in the group: the queues split again
    idle.close()
    busy.close()


def test_shutdown_makes_the_store_s_members_leave(store_path: str) -> None:
    cfg = StoreConfig(store_path=store_path, **CFG)
    first = MessageStore(cfg).start()
    for q in range(QUEUES):
        first.put(TOPIC, b"x", q)
    old = first.consumer("g", TOPIC)
    with MessageStore(cfg, read_only=True) as other:
        c = other.consumer("g", TOPIC)
        settle(old, c)
        first.shutdown()  # the member leaves with its store: its queues move at once
        until(lambda: c.poll(timeout=0.05) is not None and c.assignment() == list(range(QUEUES)),
              "the other member took every queue", timeout=5 * BEAT + 2)
        with pytest.raises(StoreClosedError):
            old.poll(timeout=0)
        old.close()  # writes nothing
        c.close()


def test_messages_read_while_the_lease_ran_out_are_not_returned(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease is checked after the read: a poll whose first pull outlasts
    the leases (here the member's heartbeats are blocked meanwhile, as for a
    frozen process) returns nothing, though every queue was read after the
    check made before the pulls; the positions stay, and everything is read
    once the member owns the queues again."""
    from rocketstore._native import FileLock

    c = store.consumer("g", TOPIC, auto_commit=False)
    assert c.assignment() == list(range(QUEUES))
    state_lock = Path(group_dir_path(store.config.config_dir, "g", TOPIC)) / "state.lock"
    real = store.get_message
    stalled: list[int] = []

    def slow_pull(group: str, topic: str, queue_id: int, *args: Any) -> Any:
        if queue_id == 0 and not stalled:
            stalled.append(queue_id)
            held = FileLock.acquire(str(state_lock), True)  # no heartbeat renews a lease
            try:
                time.sleep(TIMEOUT + BEAT)
            finally:
                assert held is not None
                held.release()
        return real(group, topic, queue_id, *args)

    monkeypatch.setattr(store, "get_message", slow_pull)
    got = c.poll(timeout=0, max_messages=1000)
    assert stalled == [0]
    assert got == []
    assert all(c.position(q) == 0 for q in c.assignment())
    monkeypatch.undo()
    seen: set[tuple[int, int]] = set()

    def again(seen: set[tuple[int, int]] = seen) -> bool:
        seen.update((m.queue_id, m.queue_offset) for m in c.poll(timeout=0.05, max_messages=1000))
        return len(seen) == 10 * QUEUES

    until(again, "every message read once the member owns the queues again")
    c.close()


def test_the_poll_after_a_new_queue_s_first_put_returns_it(tmp_path: Path) -> None:
    """A shared consumer's poll that sees the topic gain a queue heartbeats
    itself and reads the queue at once: a heartbeat of the member's thread
    (woken because the topic's queues changed) starting before the poll
    took its changes must not hide the queue. Runs of fresh stores, a few
    seconds at most."""
    deadline = time.monotonic() + 3
    runs = 0
    while runs < 8 or (runs < 60 and time.monotonic() < deadline):
        cfg = StoreConfig(store_path=str(tmp_path / f"s{runs}"), **CFG)
        with MessageStore(cfg) as s:
            c = s.consumer("g", "fresh", auto_commit=False)
            for q in range(6):
                assert s.put("fresh", b"q%d" % q, queue_id=q).ok
                got = [(m.queue_id, m.body) for m in c.poll(timeout=0)]
                assert got == [(q, b"q%d" % q)], f"run {runs}: queue {q} not returned"
                assert c.assignment() == list(range(q + 1))
            c.close()
        runs += 1
