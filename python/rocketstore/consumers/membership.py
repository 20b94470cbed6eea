"""Consumer group membership: the members of a group on a topic share its
queues, each queue owned by one member at a time (``docs/format.md``,
§13.2).

A thin, typed face of the engine's :class:`rocketstore._native.GroupMember`:
the engine keeps the group's files (``config/consumerGroups/<name>/``), runs
the heartbeat thread and hands queues over; this module names the files
(the folder is named as the group's lock, :func:`group_lock_path`) and
turns the engine's plain values into typed ones.

What a consumer does with a :class:`Membership`:

* at each poll: :meth:`Membership.polled`, :meth:`Membership.set_queues`
  with the topic's queue ids, then :meth:`Membership.changes`: for the
  queues to revoke, commit their positions, call ``on_revoke`` and
  :meth:`Membership.release` them; for the assigned ones read their
  committed offsets and call ``on_assign``;
* after a read: drop the messages of a queue whose
  :meth:`Membership.lease_left` is below the margin;
* at a commit, under the offsets lock: :meth:`Membership.check_owner` with
  the epoch the queue had when it was read (raises
  :class:`~rocketstore.errors.FencedError`);
* at close: :meth:`Membership.leave`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from rocketstore import _native
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.consumers.offsets import group_lock_path

__all__ = [
    "GroupMembers",
    "Lease",
    "MemberInfo",
    "Membership",
    "QueueOwner",
    "Strategy",
    "group_dir_path",
    "groups_dir",
]

#: How a member takes its share of the queues: RocketMQ's
#: ``AllocateMessageQueueAveragely`` (``average``), its
#: ``AllocateMessageQueueAveragelyByCircle`` (``circle``), or exactly the
#: queues it names (``fixed``).
Strategy = Literal["average", "circle", "fixed"]


def groups_dir(config_dir: str | os.PathLike[str]) -> str:
    """``config/consumerGroups``: one folder per group and topic."""
    return os.path.join(os.fspath(config_dir), _native.CONSUMER_GROUPS_DIR)


def group_dir_path(config_dir: str | os.PathLike[str], group: str, topic: str) -> str:
    """The membership folder of ``group`` on ``topic``: named as the group's
    lock file (:func:`~rocketstore.consumers.offsets.group_lock_path`),
    without its suffix."""
    lock = os.path.basename(group_lock_path(config_dir, OffsetKey(topic, group)))
    return os.path.join(groups_dir(config_dir), lock[: -len(_native.LOCK_SUFFIX)])


class Lease(NamedTuple):
    """A queue the member owns: the owner epoch its commits must carry, and
    the seconds its lease has left."""

    epoch: int
    lease_left: float


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A member as the group's state records it."""

    id: str
    pid: int
    host: str
    #: When it joined, wall-clock milliseconds since the epoch.
    since_ms: int
    #: Seconds since its last heartbeat.
    heartbeat_age_s: float
    #: Its process lives (it holds its member lock).
    alive: bool
    strategy: Strategy
    #: The queues a fixed member names.
    fixed: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class QueueOwner:
    """One queue's owner as the group's state records it."""

    queue: int
    owner: str | None
    owner_pid: int | None
    #: +1 at every change of owner.
    epoch: int
    #: Seconds left on the owner's lease (0.0 when it ended).
    lease_left_s: float
    #: The owner is asked to give it up.
    revoking: bool


@dataclass(frozen=True, slots=True)
class GroupMembers:
    """A group's members and the owner of each of its queues."""

    group: str
    topic: str
    generation: int
    members: tuple[MemberInfo, ...]
    queues: dict[int, QueueOwner]


def _description(raw: dict[str, Any]) -> GroupMembers:
    members = tuple(
        MemberInfo(id=m["id"], pid=m["pid"], host=m["host"], since_ms=m["since_ms"],
                   heartbeat_age_s=m["heartbeat_age_s"], alive=m["alive"],
                   strategy=m["strategy"], fixed=tuple(m["fixed"]))
        for m in raw["members"])
    queues = {
        q: QueueOwner(queue=q, owner=o["owner"], owner_pid=o["owner_pid"], epoch=o["epoch"],
                      lease_left_s=o["lease_left_s"], revoking=o["revoking"])
        for q, o in raw["queues"].items()}
    return GroupMembers(group=raw["group"], topic=raw["topic"], generation=raw["generation"],
                        members=members, queues=queues)


class Membership:
    """This process's membership in ``group`` on ``topic`` (one per consumer).

    Made by :meth:`join`; :meth:`leave` (or garbage collection) ends it. It
    does not survive ``fork()``: in a forked child every method raises
    :class:`~rocketstore.StoreClosedError`.
    """

    __slots__ = ("_member", "group", "group_dir", "topic")

    def __init__(self, member: _native.GroupMember, group_dir: str, group: str,
                 topic: str) -> None:
        """Wraps a joined native member (use :meth:`join`)."""
        self._member = member
        self.group_dir = group_dir
        self.group = group
        self.topic = topic

    @classmethod
    def join(cls, config_dir: str | os.PathLike[str], group: str, topic: str, *,
             strategy: Strategy = "average", queues: list[int] | None = None,
             heartbeat_interval: float = 3.0, session_timeout: float = 10.0,
             max_poll_interval: float = 300.0) -> Membership:
        """Joins ``group`` on ``topic`` (a store's ``config`` folder).

        Takes a shared hold on the group's lock and a member lock, runs one
        heartbeat (free queues are this member's at once) and starts the
        heartbeat thread ``rocketstore-group``. ``queues`` makes a fixed
        member, which takes exactly those queues.

        Raises:
            ConsumerGroupBusyError: an exclusive consumer (or a reset of the
                group's offsets) holds the group, or another live fixed
                member names one of ``queues`` (the message names its pid).
            CorruptedError: the group's state file is garbage (the message
                says how to rebuild it: ``rocketstore groups STORE --expire``).
            ValueError: a bad strategy, queue id or timing (the heartbeat
                interval must be below the session timeout).
        """
        group_dir = group_dir_path(config_dir, group, topic)
        lock_path = group_lock_path(config_dir, OffsetKey(topic, group))
        member = _native.GroupMember.join(
            group_dir, lock_path, group, topic, strategy=strategy, queues=queues,
            heartbeat_interval=heartbeat_interval, session_timeout=session_timeout,
            max_poll_interval=max_poll_interval)
        return cls(member, group_dir, group, topic)

    @property
    def member_id(self) -> str:
        """``<host>-<pid>-<random>``; a new one after the member was dropped
        (frozen past its session timeout) and came back."""
        return self._member.member_id

    @property
    def error(self) -> str | None:
        """Why the last heartbeat failed (its leases then lapse), or None."""
        return self._member.error

    @property
    def left(self) -> bool:
        """True once :meth:`leave` ran."""
        return self._member.left

    def set_queues(self, ids: list[int]) -> None:
        """The topic's queue ids this member sees (the group shares the union)."""
        self._member.set_queues(ids)

    def polled(self) -> None:
        """A poll happened: ``max_poll_interval`` counts from now, and a member
        that left for want of polls joins again."""
        self._member.polled()

    def owned(self) -> dict[int, Lease]:
        """The queues to read now: those :meth:`changes` reported assigned,
        not revoked since, with their lease running. Call :meth:`changes`
        first at each poll: a queue it has not reported is not listed."""
        return {q: Lease(e, left) for q, (e, left) in self._member.owned().items()}

    def changes(self) -> tuple[list[int], list[int]]:
        """``(assigned, to_revoke)`` since the last call, each sorted.

        ``to_revoke`` holds queues to give up (commit, ``on_revoke``, then
        :meth:`release`) and queues already lost (lease ended or taken: their
        commit is refused). A queue is in both when it came back under a new
        epoch (revoke first, then assign), or when it was assigned and taken
        back since the last call.
        """
        return self._member.changes()

    def release(self, queues: list[int]) -> None:
        """Gives up queues reported in ``to_revoke``; the state is written at
        once, so their new owner has them within its next heartbeat."""
        self._member.release(queues)

    def lease_left(self, queue: int) -> float:
        """Seconds left on this member's lease of ``queue`` (0.0: none)."""
        return self._member.lease_left(queue)

    def heartbeat_now(self) -> None:
        """One heartbeat in the caller's thread (raises what a failed one
        records in :attr:`error`). What it changed is held for the next
        :meth:`changes`, also when the heartbeat thread's next heartbeat
        starts first."""
        self._member.heartbeat_now()

    def check_owner(self, queue: int, epoch: int) -> None:
        """Refuses a commit of ``queue`` read under ``epoch`` unless this member
        still owns it at that epoch with its lease running.

        Raises:
            FencedError: the message names the queue, its owner now (id and
                pid) and the owner's epoch.
        """
        _native.GroupMember.check_owner(self.group_dir, queue, self.member_id, epoch)

    def check_owners(self, epochs: dict[int, int]) -> None:
        """:meth:`check_owner` for several queues (queue -> epoch read under),
        with one read of the group's state.

        Raises:
            FencedError: for the first queue refused.
        """
        _native.GroupMember.check_owners(self.group_dir, self.member_id, epochs)

    def leave(self) -> None:
        """Leaves the group: its queues go to the others at once, the
        heartbeat thread stops, the locks are released (idempotent)."""
        self._member.leave()

    def __enter__(self) -> Membership:
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()

    def __repr__(self) -> str:
        return f"Membership({self.group!r}, {self.topic!r}, {self._member!r})"

    @staticmethod
    def describe(config_dir: str | os.PathLike[str], group: str, topic: str) -> GroupMembers:
        """The members of ``group`` on ``topic`` and each queue's owner.

        Raises:
            CorruptedError: the state file is garbage.
        """
        raw = _native.GroupMember.describe(group_dir_path(config_dir, group, topic))
        return _description(raw)

    @staticmethod
    def describe_all(config_dir: str | os.PathLike[str]) -> list[GroupMembers]:
        """Every group folder's description, by folder name; a folder whose
        state is missing is left out (a garbage one raises)."""
        root = groups_dir(config_dir)
        try:
            names = sorted(os.listdir(root))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            raw = _native.GroupMember.describe(os.path.join(root, name))
            if raw["group"] or raw["topic"] or raw["members"]:
                out.append(_description(raw))
        return out

    @staticmethod
    def expire(config_dir: str | os.PathLike[str], group: str, topic: str) -> list[str]:
        """Removes the dead members of ``group`` on ``topic`` (their process
        ended, or they are past their session timeout or poll deadline),
        hands their queues on, and rebuilds a state that cannot be read.
        Returns the member ids removed."""
        return _native.GroupMember.expire(group_dir_path(config_dir, group, topic))
