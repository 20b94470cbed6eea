"""A consumer group's members as a store sees them: joining, listing, expiring.

Shared members of ``group`` on ``topic`` find each other through
``config/consumerGroups/<name>/`` (``docs/format.md``, §13.2; ``<name>`` is
the group lock's name, :func:`group_dir`). The engine's
:class:`~rocketstore._native.GroupMember` keeps the state there and
heartbeats from its own thread; this module is the store's side:

* :func:`join_consumer_group` (bound in :class:`~rocketstore.MessageStore`):
  a consumer joins; the store leaves for it at shutdown (:class:`HeldMember`);
* :func:`describe_members`: members and queue owners of one group and topic,
  for ``store.consumer_groups()`` and ``rocketstore groups``;
* :func:`expire_members`: removes dead members (``rocketstore groups
  --expire``), rebuilding a state file that cannot be read.
"""

from __future__ import annotations

import datetime
import os
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketstore import _native
from rocketstore.config.files import StrPath
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.consumers.offsets import group_lock_path

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["GroupMemberInfo", "HeldMember", "describe_members", "expire_members", "group_dir",
           "group_dirs", "join_consumer_group"]

#: The folder under ``config/`` that holds every group's membership.
GROUPS_DIR = "consumerGroups"


def group_dir(config_dir: StrPath, key: OffsetKey) -> str:
    """``config/consumerGroups/<name>``: the membership of ``key``'s group on its
    topic, named as its lock file (``config/consumerLocks/<name>.lock``)."""
    name = os.path.basename(group_lock_path(config_dir, key))
    name = name.removesuffix(_native.LOCK_SUFFIX)
    return os.path.join(os.fspath(config_dir), GROUPS_DIR, name)


def group_dirs(config_dir: StrPath) -> Iterator[tuple[OffsetKey | None, str]]:
    """Every membership folder, with the key its name spells (None for a
    name that is a hash: the state inside names the group)."""
    root = os.path.join(os.fspath(config_dir), GROUPS_DIR)
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        path = os.path.join(root, name)
        if not os.path.isdir(path):
            continue
        text = urllib.parse.unquote(name)
        topic, sep, group = text.partition(_native.TOPIC_GROUP_SEPARATOR)
        yield (OffsetKey(topic, group) if sep and topic and group else None), path


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


def describe_members(config_dir: StrPath, group: str, topic: str,
                     ) -> tuple[list[GroupMemberInfo], dict[int, str | None]]:
    """The members of ``group`` on ``topic`` and each known queue's owner
    (a member id, None when free); empty when the group has no membership.

    Raises:
        CorruptedError: the state file cannot be read (the message says how
            to rebuild it); the committed offsets are untouched.
    """
    path = group_dir(config_dir, OffsetKey(topic, group))
    if not os.path.isdir(path):
        return [], {}
    state = _native.GroupMember.describe(path)
    owners: dict[int, str | None] = {int(q): v.get("owner")
                                     for q, v in state.get("queues", {}).items()}
    members = []
    for m in state.get("members", []):
        mid = str(m["id"])
        members.append(GroupMemberInfo(
            topic=topic, member_id=mid, pid=int(m["pid"]), host=str(m["host"]),
            since=datetime.datetime.fromtimestamp(int(m["since_ms"]) / 1000, tz=datetime.UTC),
            heartbeat_age=float(m["heartbeat_age_s"]), alive=bool(m["alive"]),
            queues=tuple(sorted(q for q, o in owners.items() if o == mid))))
    return members, owners


def expire_members(config_dir: StrPath) -> dict[str, list[str]]:
    """Remove the dead members of every group (``{folder: removed ids}``);
    a state file that cannot be read is rebuilt empty (its members join
    again at their next heartbeat)."""
    out: dict[str, list[str]] = {}
    for _key, path in group_dirs(config_dir):
        out[path] = list(_native.GroupMember.expire(path))
    return out


class HeldMember:
    """A consumer's membership in its group, held by its store.

    Delegates to the engine's member; :meth:`release` leaves the group (the
    consumer's close, or the store's shutdown for a consumer still open).
    """

    def __init__(self, member: Any, path: str) -> None:
        self._m = member
        self.path = path
        self._left = False
        self._lock = threading.Lock()

    @property
    def member(self) -> HeldMember:
        return self

    @property
    def held(self) -> bool:
        return not self._left

    @property
    def member_id(self) -> str:
        return str(self._m.member_id)

    @property
    def error(self) -> str | None:
        err: str | None = self._m.error
        return err

    def set_queues(self, ids: list[int]) -> None:
        self._m.set_queues(ids)

    def polled(self) -> None:
        self._m.polled()

    def owned(self) -> dict[int, tuple[int, float]]:
        owned: dict[int, tuple[int, float]] = self._m.owned()
        return owned

    def changes(self) -> tuple[list[int], list[int]]:
        changes: tuple[list[int], list[int]] = self._m.changes()
        return changes

    def release(self, queues: list[int] | None = None) -> None:
        """``queues``: give them up; None: leave the group (idempotent)."""
        if queues is not None:
            self._m.release(queues)
            return
        with self._lock:
            if self._left:
                return
            self._left = True
        self._m.leave()

    def lease_left(self, queue: int) -> float:
        left: float = self._m.lease_left(queue)
        return left

    def heartbeat_now(self) -> None:
        self._m.heartbeat_now()

    def check_owner(self, queue: int, epoch: int) -> None:
        _native.GroupMember.check_owner(self.path, queue, self.member_id, epoch)

    def leave(self) -> None:
        self.release()


def join_consumer_group(store: MessageStore, group: str, topic: str, *, strategy: str,
                        queues: list[int] | None, max_poll_interval: float) -> HeldMember:
    """Join ``group``'s shared membership on ``topic`` (``Consumer`` calls
    this); the store leaves for the member at shutdown. The offsets are
    re-read once it joined.

    Raises:
        ConsumerGroupBusyError: an ``exclusive=True`` consumer holds the
            group, or another member named one of ``queues``.
        ReadOnlyStoreError: the store was opened ``no_write=True``.
        TypeError / ValueError: a name :meth:`OffsetKey.of
            <rocketstore.consumers.offset_table.OffsetKey.of>` refuses.
    """
    store._n  # noqa: B018 - raises StoreClosedError when closed
    key = OffsetKey.of(group, topic)
    cfg = store.config
    path = group_dir(cfg.config_dir, key)
    member = _native.GroupMember.join(
        path, group_lock_path(cfg.config_dir, key), group, topic, strategy=strategy,
        queues=queues, heartbeat_interval=cfg.consumer_heartbeat_interval,
        session_timeout=cfg.consumer_session_timeout, max_poll_interval=max_poll_interval)
    held = HeldMember(member, path)
    store._groups.add(held)
    store._offsets.refresh(force=True)
    return held
