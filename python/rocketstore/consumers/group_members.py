"""A consumer group's members as a store sees them: joining, listing, expiring.

Shared members of ``group`` on ``topic`` find each other through
``config/consumerGroups/<name>/`` (``docs/format.md``, §13.2); the engine
keeps the state there and heartbeats from its own thread
(:mod:`~rocketstore.consumers.membership`). This module is the store's side:

* :func:`join_consumer_group` (bound in :class:`~rocketstore.MessageStore`):
  a consumer joins; the store leaves for it at shutdown (:class:`HeldMember`);
* :func:`group_members`: members and queue owners of every group, for
  ``store.consumer_groups()`` and ``rocketstore groups``;
* :func:`expire_members`: removes dead members (``rocketstore groups
  --expire``), rebuilding a state file that cannot be read.
"""

from __future__ import annotations

import datetime
import os
import threading
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketstore import _native
from rocketstore.config.files import StrPath
from rocketstore.consumers.membership import Lease, Membership, groups_dir
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.errors import CorruptedError

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["GroupMemberInfo", "GroupView", "HeldMember", "expire_members", "group_members",
           "join_consumer_group"]


@dataclass(frozen=True)
class GroupMemberInfo:
    """A member of a consumer group on a topic, as ``consumer_groups()`` lists it.

    ``heartbeat_age`` is seconds since its last heartbeat; ``alive`` is
    False for a member whose process ended (its lock is free) until the
    next member's heartbeat or ``rocketstore groups --expire`` removes it.
    ``queues`` are those it owns now.
    """

    topic: str
    member_id: str
    pid: int
    host: str
    since: datetime.datetime
    heartbeat_age: float
    alive: bool
    queues: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "member_id": self.member_id, "pid": self.pid,
                "host": self.host, "since": self.since.isoformat(),
                "heartbeat_age": round(self.heartbeat_age, 3), "alive": self.alive,
                "queues": list(self.queues)}


@dataclass(frozen=True)
class GroupView:
    """One group's membership on one topic: its members and queue owners,
    or why it could not be read (``problem``)."""

    group: str
    topic: str
    members: tuple[GroupMemberInfo, ...]
    owners: dict[int, str | None]
    problem: str | None = None


def _view(raw: dict[str, Any], group: str, topic: str) -> GroupView:
    owners: dict[int, str | None] = {int(q): o["owner"] for q, o in raw["queues"].items()}
    members = tuple(
        GroupMemberInfo(
            topic=topic, member_id=m["id"], pid=int(m["pid"]), host=m["host"],
            since=datetime.datetime.fromtimestamp(m["since_ms"] / 1000, tz=datetime.UTC),
            heartbeat_age=float(m["heartbeat_age_s"]), alive=bool(m["alive"]),
            queues=tuple(sorted(q for q, o in owners.items() if o == m["id"])))
        for m in raw["members"])
    return GroupView(group, topic, members, owners)


def group_members(config_dir: StrPath) -> list[GroupView]:
    """Every membership folder's group, topic, members and owners. A state
    that cannot be read gives a view with its ``problem`` (the engine's
    message names the file and how to rebuild it), named after its folder."""
    root = groups_dir(config_dir)
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        path = os.path.join(root, name)
        if not os.path.isdir(path):
            continue
        try:
            raw = _native.GroupMember.describe(path)
        except (CorruptedError, OSError) as e:
            topic, _sep, group = urllib.parse.unquote(name).partition(
                _native.TOPIC_GROUP_SEPARATOR)
            out.append(GroupView(group or name, topic, (), {}, str(e)))
            continue
        if raw["group"] and raw["topic"]:
            out.append(_view(raw, raw["group"], raw["topic"]))
    return out


def expire_members(config_dir: StrPath) -> dict[str, list[str]]:
    """Remove the dead members of every group (``{folder name: removed ids}``);
    a state file that cannot be read is rebuilt (its live members join
    again at their next heartbeat)."""
    root = groups_dir(config_dir)
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return {name: list(_native.GroupMember.expire(os.path.join(root, name)))
            for name in names if os.path.isdir(os.path.join(root, name))}


class HeldMember:
    """A consumer's membership, held by its store: :meth:`leave` runs at the
    consumer's close, or at the store's shutdown (:meth:`release`) for a
    consumer still open. The other methods are the membership's."""

    def __init__(self, membership: Membership) -> None:
        self._m = membership
        self._left = False
        self._lock = threading.Lock()

    @property
    def member(self) -> HeldMember:
        return self

    @property
    def held(self) -> bool:
        """False once the member left."""
        return not self._left

    @property
    def member_id(self) -> str:
        return self._m.member_id

    @property
    def error(self) -> str | None:
        return self._m.error

    def set_queues(self, ids: list[int]) -> None:
        self._m.set_queues(ids)

    def polled(self) -> None:
        self._m.polled()

    def owned(self) -> dict[int, Lease]:
        return self._m.owned()

    def changes(self) -> tuple[list[int], list[int]]:
        return self._m.changes()

    def give_up(self, queues: list[int]) -> None:
        """Release ``queues`` (reported to revoke) to their next owner."""
        self._m.release(queues)

    def lease_left(self, queue: int) -> float:
        return self._m.lease_left(queue)

    def heartbeat_now(self) -> None:
        self._m.heartbeat_now()

    def check_owners(self, epochs: dict[int, int]) -> None:
        self._m.check_owners(epochs)

    def leave(self) -> None:
        """Leave the group (idempotent): its queues go to the others at once."""
        with self._lock:
            if self._left:
                return
            self._left = True
        self._m.leave()

    release = leave

    def __repr__(self) -> str:
        return f"HeldMember({self._m!r}, left={self._left})"


def join_consumer_group(store: MessageStore, group: str, topic: str, *, strategy: str,
                        queues: list[int] | None, max_poll_interval: float) -> HeldMember:
    """Join ``group``'s shared membership on ``topic`` (``Consumer`` calls
    this); the store leaves for the member at shutdown. The offsets are
    re-read once it joined.

    Raises:
        ConsumerGroupBusyError: an ``exclusive=True`` consumer holds the
            group, or another member named one of ``queues``.
        CorruptedError: the group's state file cannot be read (the message
            says how to rebuild it).
        TypeError / ValueError: a name :meth:`OffsetKey.of
            <rocketstore.consumers.offset_table.OffsetKey.of>` refuses.
    """
    store._n  # noqa: B018 - raises StoreClosedError when closed
    OffsetKey.of(group, topic)
    cfg = store.config
    membership = Membership.join(
        cfg.config_dir, group, topic, strategy="fixed" if queues else strategy,  # type: ignore[arg-type]
        queues=queues, heartbeat_interval=cfg.consumer_heartbeat_interval,
        session_timeout=cfg.consumer_session_timeout, max_poll_interval=max_poll_interval)
    held = HeldMember(membership)
    store._groups.add(held)
    store._offsets.refresh(force=True)
    return held
