"""Consumer group membership across processes (``docs/format.md``, §13.2):
members in two processes split a topic's queues; a member killed with
SIGKILL loses its queues at once (its lock dies with it); a member frozen
with SIGSTOP past its session timeout loses them, and its commit is fenced;
a garbage state is a clear error that ``expire`` repairs; a member handle
does not survive ``fork()``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.freeze import freeze_outside_state_lock
from helpers.killed_child import LineChild
from helpers.paths import REPO
from rocketstore import ConsumerGroupBusyError, CorruptedError, FencedError, StoreClosedError
from rocketstore._native import FileLock, GroupMember
from rocketstore.consumers.membership import Lease, Membership, group_dir_path
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.consumers.offsets import group_lock_path

CHILD = REPO / "tests" / "helpers" / "group_member_child.py"
BEAT, TIMEOUT = 0.1, 1.5
ALL = set(range(8))


class Member(LineChild):
    """A member process: its ``OWNED`` lines as (time, {queue: epoch})."""

    def __init__(self, config_dir: Path, stderr: Path) -> None:
        self.id = ""
        self.history: list[tuple[float, dict[int, int]]] = []
        self.lock = threading.Lock()
        with open(stderr, "w") as err:
            super().__init__([CHILD, config_dir, str(BEAT), str(TIMEOUT)], stderr=err)

    def take(self, line: str) -> bool:
        words = line.split()
        if words[:1] == ["READY"]:
            self.id = words[1]
            return False
        if words[:1] != ["OWNED"]:
            return False
        owned = dict(tuple(map(int, p.split(":"))) for p in words[3].split(",")) \
            if len(words) > 3 else {}
        with self.lock:
            self.history.append((float(words[2]), owned))
        return True

    @property
    def owned(self) -> dict[int, int]:
        with self.lock:
            return dict(self.history[-1][1]) if self.history else {}

    def ready(self) -> None:
        line = self.next_event(30)
        assert line and line.startswith("READY"), line


def _reads(m: Membership) -> dict[int, Lease]:
    """What a consumer reads at a poll: its changes taken, then ``owned()``."""
    m.changes()
    return m.owned()


def _wait(what: str, limit: float, check: object) -> float:
    t0 = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - t0 < limit, f"{what}: not within {limit} s"
        time.sleep(0.01)
    return time.monotonic() - t0


@pytest.fixture
def members(tmp_path: Path) -> Iterator[list[Member]]:
    made: list[Member] = []
    yield made
    for m in made:
        m.kill()


def _start(tmp_path: Path, made: list[Member]) -> Member:
    m = Member(tmp_path / "config", tmp_path / f"child{len(made)}.err")
    made.append(m)
    m.ready()
    return m


def test_two_processes_split_eight_queues(tmp_path: Path, members: list[Member]) -> None:
    a = _start(tmp_path, members)
    _wait("the first member owns all", 5, lambda: set(a.owned) == ALL)
    b = _start(tmp_path, members)
    # Within two heartbeat intervals of b's join, plus the poll loop's step.
    took = _wait("a split 4/4", 5, lambda: len(a.owned) == 4 and len(b.owned) == 4)
    assert took < 2 * BEAT + 0.5, took
    assert set(a.owned) | set(b.owned) == ALL
    assert not set(a.owned) & set(b.owned)
    # Every queue that moved did so under a new epoch.
    moved = set(b.owned)
    assert all(b.owned[q] == 2 for q in moved), b.owned


def test_a_killed_member_loses_its_queues_within_a_heartbeat(
    tmp_path: Path, members: list[Member]
) -> None:
    a = _start(tmp_path, members)
    b = _start(tmp_path, members)
    _wait("split", 5, lambda: len(a.owned) == 4 and len(b.owned) == 4)
    os.kill(a.proc.pid, signal.SIGKILL)
    t0 = time.monotonic()
    a.wait()
    _wait("b owns all", 5, lambda: set(b.owned) == ALL)
    took = time.monotonic() - t0
    # Its lock died with it: no wait for its leases, which run at least
    # TIMEOUT - BEAT after the kill.
    assert took < TIMEOUT - BEAT - 0.3, f"took {took:.2f} s; the leases ran {TIMEOUT} s"
    # The dead member's lock file is gone from the group's folder.
    members_dir = Path(group_dir_path(tmp_path / "config", "g", "t")) / "members"
    _wait("its lock file is removed", 2, lambda: not (members_dir / f"{a.id}.lock").exists())


def test_a_frozen_member_loses_its_queues_and_is_fenced(
    tmp_path: Path, members: list[Member]
) -> None:
    a = _start(tmp_path, members)
    b = _start(tmp_path, members)
    _wait("split", 5, lambda: len(a.owned) == 4 and len(b.owned) == 4)
    a_owned, a_id = a.owned, a.id
    group_dir = group_dir_path(tmp_path / "config", "g", "t")
    freeze_outside_state_lock(a.proc.pid, group_dir)
    stopped = time.monotonic()
    try:
        # Its lease is respected: nobody takes its queues before it ends.
        _wait("b owns all", 5, lambda: set(b.owned) == ALL)
        assert time.monotonic() - stopped >= TIMEOUT - BEAT - 0.05
        for q, epoch in a_owned.items():
            with pytest.raises(FencedError, match=f"queue {q} of topic 't'") as ei:
                GroupMember.check_owner(group_dir, q, a_id, epoch)
            assert b.id in str(ei.value) and f"pid {b.proc.pid}" in str(ei.value)
        taken_at = b.history[-1][0]
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    # Resumed: its first change is to own nothing (its leases lapsed), long
    # after b took them; it comes back under a new id and gets its share.
    _wait("a's first line after the resume", 5,
          lambda: any(t > stopped for t, _ in a.history))
    first_after = next(owned for t, owned in a.history if t > stopped)
    assert first_after == {}, first_after
    _wait("split again", 5, lambda: len(a.owned) == 4 and len(b.owned) == 4)
    last_a_line = next(line for line in reversed(a.history) if line[1])
    assert last_a_line[0] > taken_at


def test_describe_shows_a_dead_member_and_expire_removes_it(
    tmp_path: Path, members: list[Member]
) -> None:
    config = tmp_path / "config"
    a = _start(tmp_path, members)
    _wait("a owns all", 5, lambda: set(a.owned) == ALL)
    d = Membership.describe(config, "g", "t")
    assert (d.group, d.topic) == ("g", "t")
    (info,) = d.members
    assert (info.id, info.pid, info.alive, info.strategy) == (a.id, a.proc.pid, True, "average")
    assert info.heartbeat_age_s < TIMEOUT and info.since_ms > 0
    assert {q.owner_pid for q in d.queues.values()} == {a.proc.pid}
    os.kill(a.proc.pid, signal.SIGKILL)
    a.wait()
    # No member is left to notice: the state still names it, not alive.
    (info,) = Membership.describe(config, "g", "t").members
    assert not info.alive
    assert Membership.expire(config, "g", "t") == [a.id]
    d = Membership.describe(config, "g", "t")
    assert d.members == () and all(q.owner is None for q in d.queues.values())
    assert Membership.describe_all(config) == [d]
    assert os.listdir(Path(group_dir_path(config, "g", "t")) / "members") == []


def test_a_member_that_stops_polling_leaves_until_it_polls(tmp_path: Path) -> None:
    config = tmp_path / "config"
    with Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT,
                         max_poll_interval=0.3) as m:
        m.set_queues(list(range(8)))
        m.heartbeat_now()
        assert set(_reads(m)) == ALL
        _wait("it leaves", 5, lambda: not _reads(m))
        assert m.error is not None and "max_poll_interval" in m.error
        assert Membership.describe(config, "g", "t").members == ()
        m.polled()
        _wait("back at its poll", 5, lambda: set(_reads(m)) == ALL)
        assert m.error is None


def test_a_clean_leave_hands_over_at_once(tmp_path: Path, members: list[Member]) -> None:
    a = _start(tmp_path, members)
    b = _start(tmp_path, members)
    _wait("split", 5, lambda: len(a.owned) == 4 and len(b.owned) == 4)
    a.proc.send_signal(signal.SIGTERM)
    assert a.next_event(10) == "LEFT\n"
    took = _wait("b owns all", 5, lambda: set(b.owned) == ALL)
    assert took < 2 * BEAT + 0.3, took


def test_the_fence_accepts_only_the_owner_at_its_epoch(tmp_path: Path) -> None:
    config = tmp_path / "config"
    a = Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT)
    try:
        a.set_queues(list(range(4)))
        a.heartbeat_now()
        epochs = {q: lease.epoch for q, lease in _reads(a).items()}
        assert epochs == {0: 1, 1: 1, 2: 1, 3: 1}
        a.check_owners(epochs)
        for q in epochs:
            a.check_owner(q, 1)
        with pytest.raises(FencedError, match=r"queue 2 .*since epoch 1"):
            a.check_owners({0: 1, 2: 7})
        with pytest.raises(FencedError, match=r"queue 9 of topic 't' .*has no owner"):
            a.check_owner(9, 1)
        with pytest.raises(FencedError, match=f"member {a.member_id} \\(pid {os.getpid()}\\)"):
            GroupMember.check_owner(a.group_dir, 1, "someone-else", 1)
    finally:
        a.leave()
    with pytest.raises(FencedError, match="no owner"):
        a.check_owner(0, 1)


def test_a_garbage_state_is_a_clear_error_and_expire_rebuilds_it(tmp_path: Path) -> None:
    config = tmp_path / "config"
    m = Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT)
    try:
        m.set_queues(list(range(8)))
        m.heartbeat_now()
        assert set(_reads(m)) == ALL
        state = Path(m.group_dir) / "state"
        state.write_bytes(b"\x00garbage\n" * 10)
        with pytest.raises(CorruptedError, match=r"--expire") as ei:
            m.heartbeat_now()
        assert str(state) in str(ei.value)
        with pytest.raises(CorruptedError):
            Membership.describe(config, "g", "t")
        with pytest.raises(CorruptedError):
            Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT)
        assert m.error is not None and "state" in m.error
        # Its leases lapse: nothing is read from a queue it may have lost.
        _wait("leases lapse", 3 * TIMEOUT, lambda: not _reads(m))
        Membership.expire(config, "g", "t")
        _wait("owns all again", 5 * TIMEOUT, lambda: set(_reads(m)) == ALL)
        assert m.error is None
        d = Membership.describe(config, "g", "t")
        assert [i.id for i in d.members] == [m.member_id]
    finally:
        m.leave()


def test_an_unreadable_state_names_the_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    config = tmp_path / "config"
    m = Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT)
    try:
        state = Path(m.group_dir) / "state"
        state.chmod(0)
        with pytest.raises(PermissionError, match="state"):
            m.heartbeat_now()
        Membership.expire(config, "g", "t")  # replaces it
        m.heartbeat_now()
    finally:
        m.leave()


def test_a_fifo_in_place_of_the_state_is_an_error_not_a_hang(tmp_path: Path) -> None:
    config = tmp_path / "config"
    with Membership.join(config, "g", "t", heartbeat_interval=BEAT,
                         session_timeout=TIMEOUT) as m:
        state = Path(m.group_dir) / "state"
        state.unlink()
        os.mkfifo(state)
        with pytest.raises(CorruptedError, match="not a regular file"):
            m.heartbeat_now()
        with pytest.raises(CorruptedError, match="not a regular file"):
            Membership.describe(config, "g", "t")
        Membership.expire(config, "g", "t")
        assert state.is_file()
        m.heartbeat_now()
    assert m.left
    assert Membership.describe(config, "g", "t").members == ()


def test_an_exclusive_consumer_and_members_refuse_each_other(tmp_path: Path) -> None:
    config = tmp_path / "config"
    lock_path = group_lock_path(config, OffsetKey("t", "g"))
    exclusive = FileLock.acquire(lock_path, False)
    assert exclusive is not None
    with pytest.raises(ConsumerGroupBusyError, match="exclusive"):
        Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT)
    exclusive.release()
    m = Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT)
    n = Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT)
    assert FileLock.acquire(lock_path, False) is None, "members hold the group"
    assert FileLock.is_held(lock_path)
    m.leave()
    n.leave()
    again = FileLock.acquire(lock_path, False)
    assert again is not None
    again.release()


def test_fixed_members_refuse_a_queue_twice(tmp_path: Path) -> None:
    config = tmp_path / "config"
    f = Membership.join(config, "g", "t", queues=[1, 2], heartbeat_interval=BEAT,
                        session_timeout=TIMEOUT)
    try:
        with pytest.raises(ConsumerGroupBusyError, match=f"pid {os.getpid()}"):
            Membership.join(config, "g", "t", queues=[2, 5], heartbeat_interval=BEAT,
                            session_timeout=TIMEOUT)
        avg = Membership.join(config, "g", "t", heartbeat_interval=BEAT,
                              session_timeout=TIMEOUT)
        try:
            for m in (f, avg):
                m.set_queues(list(range(4)))
            f.heartbeat_now()
            avg.heartbeat_now()
            assert sorted(_reads(f)) == [1, 2]
            assert sorted(_reads(avg)) == [0, 3]
        finally:
            avg.leave()
    finally:
        f.leave()


def test_bad_arguments_are_value_errors(tmp_path: Path) -> None:
    config = tmp_path / "config"
    with pytest.raises(ValueError, match="strategy"):
        Membership.join(config, "g", "t", strategy="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session timeout"):
        Membership.join(config, "g", "t", heartbeat_interval=1.0, session_timeout=0.5)
    with pytest.raises(ValueError, match="queue id"):
        Membership.join(config, "g", "t", queues=[-1])
    with pytest.raises(ValueError, match="queues"):
        Membership.join(config, "g", "t", strategy="fixed")


def test_a_member_handle_does_not_survive_fork(tmp_path: Path) -> None:
    config = tmp_path / "config"
    m = Membership.join(config, "g", "t", heartbeat_interval=BEAT, session_timeout=TIMEOUT)
    try:
        m.set_queues(list(range(8)))
        m.heartbeat_now()
        code = subprocess.run(
            [sys.executable, "-c", _FORK_CHILD, str(config)], timeout=60).returncode
        assert code == 0
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            status = 1
            try:
                try:
                    m.owned()
                except StoreClosedError as e:
                    status = 0 if "fork" in str(e) else 2
                del m
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The child's exit dropped neither the parent's member lock nor its
        # hold on the group.
        d = Membership.describe(config, "g", "t")
        assert [i.alive for i in d.members] == [True]
        assert FileLock.acquire(group_lock_path(config, OffsetKey("t", "g")), False) is None
        m.heartbeat_now()
        assert set(_reads(m)) == ALL
    finally:
        m.leave()


#: Not a member in another process: the fence refuses it.
_FORK_CHILD = """
import sys
from rocketstore import FencedError
from rocketstore.consumers.membership import group_dir_path
from rocketstore._native import GroupMember
try:
    GroupMember.check_owner(group_dir_path(sys.argv[1], "g", "t"), 0, "someone-else", 1)
except FencedError:
    sys.exit(0)
sys.exit(1)
"""


def test_the_consumer_s_heartbeat_hands_it_a_new_queue_at_once(tmp_path: Path) -> None:
    """After ``set_queues`` grew (it wakes the heartbeat thread) and the
    consumer's own ``heartbeat_now``, ``changes()`` reports the new queue,
    whenever the thread's heartbeat starts. A few seconds at most."""
    with Membership.join(tmp_path / "config", "g", "t", heartbeat_interval=BEAT,
                         session_timeout=TIMEOUT) as m:
        deadline = time.monotonic() + 2
        n = 0
        while n < 50 or (n < 400 and time.monotonic() < deadline):
            m.set_queues(list(range(n + 1)))
            m.heartbeat_now()
            assert m.changes() == ([n], []), f"queue {n}"
            n += 1
        assert set(m.owned()) == set(range(n))
