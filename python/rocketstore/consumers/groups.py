"""Consumer groups of a store: committed offsets, lag, members, reset and delete.

:meth:`MessageStore.consumer_groups` (and ``rocketstore groups PATH``) list
every group of ``config/consumerOffset.json`` (and every group with shared
members, ``config/consumerGroups/``) with, per topic and queue, the
committed offset, the queue's min and max (end) offsets, the lag and the
member that owns the queue, and the group's members
(:mod:`~rocketstore.consumers.group_members`).
:meth:`MessageStore.reset_consumer_group` and
:meth:`MessageStore.delete_consumer_group` change the file under its lock
(``docs/format.md``, §13.1), refusing while an open consumer of the group
holds it (:class:`~rocketstore.ConsumerGroupBusyError`).
"""

from __future__ import annotations

import datetime
import threading
import warnings
import weakref
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rocketstore._checks import I64_MAX, ms_arg
from rocketstore.config.files import StrPath
from rocketstore.consumers.group_members import GroupMemberInfo, GroupView, group_members
from rocketstore.consumers.offset_table import OffsetKey, OffsetTable, check_group, check_topic
from rocketstore.consumers.offsets import ConsumerGroupLock
from rocketstore.errors import ReadOnlyStoreError, SlaveOffsetsError

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["GroupLag", "GroupLocks", "GroupMemberInfo", "QueueLag", "ResetTarget",
           "consumer_groups", "delete_consumer_group", "hold_consumer_group",
           "reset_consumer_group"]

#: Where :meth:`MessageStore.reset_consumer_group` moves a group's offsets:
#: ``"earliest"`` (each queue's min offset), ``"latest"`` (its max offset),
#: an ``int`` queue offset (clamped into ``[min, max]`` per queue) or a
#: ``datetime`` (the first message stored at or after it; the max offset if
#: none).
ResetTarget = Literal["earliest", "latest"] | int | datetime.datetime

# How long a reset or delete waits for a group lock a look holds for a moment.
_RESET_PATIENCE = 0.2


@dataclass(frozen=True)
class QueueLag:
    """One queue of a group: where it is and how far behind.

    ``committed`` is the next offset the group reads (``None``: the group
    committed nothing for this queue; its consumer starts at the min offset).
    ``lag`` counts the messages still stored that the group has not consumed:
    ``max_offset - max(committed, min_offset)`` (``max_offset - min_offset``
    without a commit), never below 0. ``owner`` is the id of the shared
    member that owns the queue now (None: no member owns it).
    """

    topic: str
    queue_id: int
    committed: int | None
    min_offset: int
    max_offset: int
    lag: int
    owner: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "queue_id": self.queue_id, "committed": self.committed,
                "min_offset": self.min_offset, "max_offset": self.max_offset, "lag": self.lag,
                "owner": self.owner}


@dataclass(frozen=True)
class GroupLag:
    """A consumer group: its queues (every queue of each topic it committed
    on or has members on, by topic and queue id), its total lag, the topics
    an open consumer of the group holds now (in any process), and its
    shared members (by topic, then id). ``problems`` says what could not
    be read (a damaged membership state, naming the file)."""

    group: str
    queues: tuple[QueueLag, ...]
    active_topics: tuple[str, ...]
    members: tuple[GroupMemberInfo, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def lag(self) -> int:
        """Sum of the queues' lag."""
        return sum(q.lag for q in self.queues)

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({q.topic for q in self.queues}))

    @property
    def active(self) -> bool:
        """True while an open consumer of the group holds one of its topics."""
        return bool(self.active_topics)

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "lag": self.lag, "active": self.active,
                "active_topics": list(self.active_topics),
                "members": [m.as_dict() for m in self.members],
                "problems": list(self.problems),
                "queues": [q.as_dict() for q in self.queues]}


def _queue_lag(store: MessageStore, topic: str, qid: int, committed: int | None,
               owner: str | None = None) -> QueueLag:
    lo = store.get_min_offset_in_queue(topic, qid)
    hi = store.get_max_offset_in_queue(topic, qid)
    start = lo if committed is None else max(committed, lo)
    return QueueLag(topic, qid, committed, lo, hi, max(0, hi - start), owner)


def _describe(store: MessageStore, table: OffsetTable) -> list[GroupLag]:
    """Every group of ``table`` or with members, with its lag, sorted by group
    name. An entry that names no possible topic (written by another tool) is
    left out with a warning naming it, as is a group lock file that cannot
    be asked."""
    by_group = table.by_group()
    config_dir = store.config.config_dir
    views: dict[tuple[str, str], GroupView] = {}
    problems: dict[str, list[str]] = {}
    for found in group_members(config_dir):
        if found.problem is not None:
            by_group.setdefault(found.group, {})
            problems.setdefault(found.group, []).append(found.problem)
        elif found.members:  # a folder whose members all left lists nothing
            by_group.setdefault(found.group, {}).setdefault(found.topic, {})
            views[(found.group, found.topic)] = found
    known = set(store.topics(include_system=True))
    out = []
    for group in sorted(by_group):
        rows: list[QueueLag] = []
        active: list[str] = []
        members: list[GroupMemberInfo] = []
        left_out = 0
        for topic in sorted(by_group[group]):
            committed = by_group[group][topic]
            view = views.get((group, topic))
            owners = {} if view is None else view.owners
            try:
                held = set(store.queue_ids(topic)) if topic in known else set()
                rows.extend(_queue_lag(store, topic, qid, committed.get(qid), owners.get(qid))
                            for qid in sorted(held | set(committed)))
            except ValueError as e:
                warnings.warn(f"consumerOffset.json entry {OffsetKey(topic, group).text!r} is "
                              f"left out: {e}", RuntimeWarning, stacklevel=3)
                left_out += 1
                continue
            members.extend(() if view is None else view.members)
            if _in_use(config_dir, group, topic):
                active.append(topic)
        if left_out < len(by_group[group]) or group in problems:
            out.append(GroupLag(group, tuple(rows), tuple(active), tuple(members),
                                tuple(problems.get(group, ()))))
    return out


def _in_use(config_dir: StrPath, group: str, topic: str) -> bool:
    """:meth:`ConsumerGroupLock.in_use`; False with a warning when the lock
    file cannot be asked (not a regular file, unreadable)."""
    try:
        return ConsumerGroupLock.in_use(config_dir, group, topic)
    except OSError as e:
        warnings.warn(f"cannot tell whether a consumer of group {group!r} on topic {topic!r} "
                      f"is open: {e}", RuntimeWarning, stacklevel=4)
        return False


def _offset_at(store: MessageStore, topic: str, qid: int, ms: int, lo: int, hi: int) -> int:
    """The first offset in ``[lo, hi]`` whose message was stored at or after ``ms``."""
    if hi <= lo:
        return hi
    off = min(max(store.get_offset_in_queue_by_time(topic, qid, ms), lo), hi)

    def stamp(o: int) -> int:
        return store.get_message_store_timestamp(topic, qid, o)

    # The lookup answers with the message *nearest* to ms: step to the first at or after it.
    while off < hi and 0 <= stamp(off) < ms:
        off += 1
    while off > lo and stamp(off - 1) >= ms:
        off -= 1
    return off


def _target(store: MessageStore, to: ResetTarget) -> Callable[[str, int], int]:
    """``(topic, queue_id) -> new offset`` for ``to``; checks ``to`` first."""
    if isinstance(to, datetime.datetime):
        ms = ms_arg(to)
    elif isinstance(to, bool) or not isinstance(to, (int, str)):
        raise TypeError("to must be 'earliest', 'latest', an offset (int) or a datetime, "
                        f"not {type(to).__name__}")
    elif isinstance(to, str) and to not in ("earliest", "latest"):
        raise ValueError(f"to must be 'earliest', 'latest', an offset or a datetime, not {to!r}")
    elif isinstance(to, int) and not 0 <= to <= I64_MAX:
        raise ValueError(f"offset must be in [0, {I64_MAX}], got {to}")

    def new(topic: str, qid: int) -> int:
        lo = store.get_min_offset_in_queue(topic, qid)
        hi = store.get_max_offset_in_queue(topic, qid)
        if to == "earliest":
            return lo
        if to == "latest":
            return hi
        if isinstance(to, datetime.datetime):
            return _offset_at(store, topic, qid, ms, lo, hi)
        assert isinstance(to, int)
        return min(max(to, lo), hi)

    return new


def _check_names(group: object, topic: object) -> None:
    """The names rule of every call (:meth:`OffsetKey.of`); ``topic`` None: every topic."""
    check_group(group)
    if topic is not None:
        check_topic(topic)


def _topics_of(table: OffsetTable, group: str, topic: str | None) -> list[str]:
    if topic is None:
        return table.topics_of(group)
    return [topic]


def _hold(store: MessageStore, group: str, topics: list[str]) -> ExitStack:
    """The group's consumer locks of ``topics``, held until the stack closes.

    Raises:
        ConsumerGroupBusyError: an open consumer holds one of them.
    """
    stack = ExitStack()
    try:
        for topic in topics:
            lock = ConsumerGroupLock(store.config.config_dir, group, topic)
            lock.acquire(_RESET_PATIENCE)
            stack.callback(lock.release)
    except BaseException:
        stack.close()
        raise
    return stack


def _reset(store: MessageStore, group: str, to: ResetTarget, topic: str | None,
          dry_run: bool) -> dict[tuple[str, int], tuple[int | None, int]]:
    """:func:`reset_consumer_group`."""
    _check_names(group, topic)
    new_offset = _target(store, to)
    offsets = store._offsets
    offsets.refresh(force=True)
    topics = _topics_of(offsets.table(), group, topic)
    if not topics:
        raise ValueError(f"consumer group {group!r} has no committed offsets: name the topic "
                         "to reset it on")

    def plan(table: OffsetTable) -> dict[tuple[str, int], tuple[int | None, int]]:
        changes: dict[tuple[str, int], tuple[int | None, int]] = {}
        for t in topics:
            key = OffsetKey(t, group)
            queues = table.offsets(key)
            for qid in sorted(set(store.queue_ids(t)) | set(queues)):
                changes[(t, qid)] = (queues.get(qid), new_offset(t, qid))
            if not dry_run:
                table.replace(key, {qid: new for (tt, qid), (_old, new) in changes.items()
                                    if tt == t})
        return changes

    if dry_run:
        return plan(offsets.table())
    with _hold(store, group, topics):
        return offsets.update(plan, drop=[OffsetKey(t, group) for t in topics])


def _delete(store: MessageStore, group: str, topic: str | None) -> list[str]:
    """:func:`delete_consumer_group`."""
    _check_names(group, topic)
    offsets = store._offsets
    offsets.refresh(force=True)
    topics = _topics_of(offsets.table(), group, topic)
    keys = [OffsetKey(t, group) for t in topics]

    def remove(table: OffsetTable) -> list[str]:
        return [key.topic for key in keys if table.pop(key)]

    with _hold(store, group, topics):
        return offsets.update(remove, drop=keys)


_HELD_LOCK = threading.Lock()


class _Held(Protocol):
    """A group lock or a membership: released at the store's shutdown."""

    def release(self) -> None: ...


class GroupLocks:
    """The group locks and memberships one :class:`~rocketstore.MessageStore`'s
    open consumers hold (released at shutdown: a member leaves)."""

    def __init__(self) -> None:
        self._held: weakref.WeakSet[_Held] | None = None

    def add(self, lock: _Held) -> None:
        with _HELD_LOCK:
            if self._held is None:
                self._held = weakref.WeakSet()
            self._held.add(lock)

    def release(self) -> None:
        """Release the group locks of this store's consumers still open, and
        leave their groups (at shutdown): they can commit nothing more, and
        another consumer may take the groups or their queues."""
        with _HELD_LOCK:
            held, self._held = self._held, None
        for lock in list(held or ()):
            lock.release()


# -- the store's methods (bound by name in MessageStore) ---------------------


def consumer_groups(store: MessageStore) -> list[GroupLag]:
    """Every consumer group with committed offsets, and its lag per queue.

    Per group (sorted by name): every queue of each topic it committed
    on or has shared members on, with the committed offset, the queue's
    min and max (end) offsets, the lag and the member owning it (see
    :class:`~rocketstore.QueueLag`), the topics an open consumer of the
    group holds now, in any process, and the members (pid, host, since,
    heartbeat age, alive, queues; see
    :class:`~rocketstore.consumers.groups.GroupMemberInfo`). Read from
    ``config/consumerOffset.json`` with this process's own commits not yet
    written on top, and from ``config/consumerGroups/`` (a state that
    cannot be read is named in the group's ``problems``); a read-only
    store first picks up the writer's new messages.
    """
    n = store._n
    if store.read_only:
        n.refresh()
    store._offsets.refresh(force=True)
    return _describe(store, store._offsets.table())


def reset_consumer_group(
    store: MessageStore, group: str, to: ResetTarget, *, topic: str | None = None,
    dry_run: bool = False,
) -> dict[tuple[str, int], tuple[int | None, int]]:
    """Move ``group``'s committed offsets (as ``kafka-consumer-groups --reset-offsets``).

    ``to`` is ``"earliest"`` (each queue's min offset), ``"latest"`` (its
    max offset), an ``int`` offset (clamped into each queue's
    ``[min, max]``) or a ``datetime`` (the first message stored at or
    after it). Every queue of ``topic`` (default: of every topic the
    group committed on) gets an offset. Written at once under the
    file's lock; ``dry_run`` writes nothing. Returns ``{(topic,
    queue_id): (old or None, new)}``.

    Raises:
        ConsumerGroupBusyError: an open consumer of the group holds one of
            the topics (in any process; a live member of the shared group,
            frozen ones included); nothing is written.
        ValueError / TypeError: a name :meth:`OffsetKey.of
            <rocketstore.consumers.offset_table.OffsetKey.of>` refuses (as every
            call naming a group or topic), a bad ``to``, or a group
            without committed offsets and no ``topic``.
        ReadOnlyStoreError: the store was opened ``no_write=True``.
        SlaveOffsetsError: the store is a ``SLAVE`` (its offsets are its
            master's, docs/format.md §21.7).
    """
    _check_offsets_writable(store, dry_run)
    return _reset(store, group, to, topic, dry_run)


def delete_consumer_group(store: MessageStore, group: str, *,
                          topic: str | None = None) -> list[str]:
    """Remove ``group``'s committed offsets (of ``topic``, default every
    topic) from ``config/consumerOffset.json``; returns the topics removed.

    Raises:
        ConsumerGroupBusyError: an open consumer of the group holds one of
            the topics (in any process); nothing is written.
        ValueError / TypeError: a name :meth:`OffsetKey.of
            <rocketstore.consumers.offset_table.OffsetKey.of>` refuses.
        ReadOnlyStoreError: the store was opened ``no_write=True``.
        SlaveOffsetsError: the store is a ``SLAVE``.
    """
    _check_offsets_writable(store, False)
    return _delete(store, group, topic)


def hold_consumer_group(store: MessageStore, group: str, topic: str) -> ConsumerGroupLock | None:
    """Take the lock an open ``exclusive=True`` consumer of ``group`` on
    ``topic`` holds (``Consumer`` calls this); None on a ``no_write``
    store, which takes no lock. The offsets are re-read once it is held.

    Raises:
        ConsumerGroupBusyError: another open consumer holds it (an
            exclusive one, or members of the shared group).
        TypeError / ValueError: a name :meth:`OffsetKey.of
            <rocketstore.consumers.offset_table.OffsetKey.of>` refuses.
    """
    store._n  # noqa: B018 - raises StoreClosedError when closed
    OffsetKey.of(group, topic)
    if store.no_write:
        return None
    lock = ConsumerGroupLock(store.config.config_dir, group, topic).acquire()
    store._groups.add(lock)
    store._offsets.refresh(force=True)
    return lock


def _check_offsets_writable(store: MessageStore, dry_run: bool) -> None:
    store._n  # noqa: B018 - raises StoreClosedError when closed
    if store.no_write and not dry_run:
        raise ReadOnlyStoreError("cannot change offsets in a store opened no_write=True")
    refusal = store._offsets_refusal()
    if refusal is not None and not dry_run:
        raise SlaveOffsetsError(f"cannot change offsets: {refusal}")
