"""Which queues of its topic a consumer reads, and for how long it may.

A :class:`~rocketstore.consumers.consumer.Consumer` reads the queues its
*ownership* gives it:

* :class:`WholeTopic`: every queue of the topic. An ``exclusive=True``
  consumer (it holds the group's lock alone, ``docs/format.md``, §13.1), a
  consumer of a ``no_write`` store (which takes no lock) and one of a store
  without consumer groups.
* :class:`GroupShare`: the queues a member of the group owns now
  (``docs/format.md``, §13.2). The member's heartbeat thread moves queues
  between members; the consumer applies what changed at its next poll:
  queues it must give up (*revoked*: it commits their positions, then
  releases them), queues it lost (*lost*: its lease lapsed, another member
  may own them now; nothing of them may be returned or committed), and
  queues it gained (*assigned*).

Both answer the same questions, so the consumer has one code path:
:meth:`update` (what changed), :meth:`lapsed` (which queues' messages must
not be returned: their lease has less than the margin left),
:meth:`release`, :meth:`close`, and :attr:`fence` (what a commit must pass,
under the offsets lock).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rocketstore._checks import I32_MAX
from rocketstore.errors import ReadOnlyStoreError, StoreError

if TYPE_CHECKING:
    from rocketstore.consumers.offsets import ConsumerGroupLock

__all__ = ["Changes", "GroupShare", "Listener", "MemberHandle", "Strategy", "WholeTopic",
           "check_group_args", "take_ownership"]

log = logging.getLogger("rocketstore")

#: A commit's check of the queues it writes (raises ``FencedError``).
Fence = Callable[[list[int]], None]
#: How the members without fixed queues share the others (RocketMQ's
#: ``AllocateMessageQueueAveragely`` and ``...AveragelyByCircle``).
Strategy = Literal["average", "circle"]
#: ``on_assign`` / ``on_revoke``: called with sorted queue ids (the asyncio
#: consumer also awaits a coroutine function's result).
Listener = Callable[[list[int]], "Awaitable[None] | None"]


@dataclass
class Changes:
    """What changed in a consumer's queues since the last :meth:`update`."""

    #: Queues gained: the consumer starts them at their committed offset.
    assigned: list[int] = field(default_factory=list)
    #: Queues still owned that the consumer must give up (commit, then release).
    revoked: list[int] = field(default_factory=list)
    #: Queues no longer owned (the lease lapsed): dropped without a commit.
    lost: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.assigned or self.revoked or self.lost)


class MemberHandle(Protocol):
    """A member as a share uses it
    (:class:`~rocketstore.consumers.group_members.HeldMember`)."""

    @property
    def member_id(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def held(self) -> bool:
        """False once the member left (its consumer's close, the store's shutdown)."""
        ...
    def set_queues(self, ids: list[int], /) -> None: ...
    def polled(self) -> None: ...
    def owned(self) -> Mapping[int, tuple[int, float]]: ...
    def changes(self) -> tuple[list[int], list[int]]: ...
    def give_up(self, queues: list[int], /) -> None: ...
    def lease_left(self, queue: int, /) -> float: ...
    def heartbeat_now(self) -> None: ...
    def check_owners(self, epochs: dict[int, int], /) -> None: ...
    def leave(self) -> None: ...


def check_group_args(*, exclusive: object, queues: Iterable[int] | None, strategy: object,
                     on_assign: object, on_revoke: object,
                     max_poll_interval: object) -> list[int] | None:
    """Check the membership arguments of ``store.consumer``; the fixed queues, sorted."""
    if not isinstance(exclusive, bool):
        raise TypeError(f"exclusive must be a bool, not {type(exclusive).__name__}")
    if strategy not in ("average", "circle"):
        raise ValueError(f"strategy must be 'average' or 'circle', not {strategy!r}")
    for name, fn in (("on_assign", on_assign), ("on_revoke", on_revoke)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be callable (it gets a list of queue ids), "
                            f"not {type(fn).__name__}")
    if isinstance(max_poll_interval, bool) or not isinstance(max_poll_interval, (int, float)):
        raise TypeError("max_poll_interval must be a number of seconds, "
                        f"not {type(max_poll_interval).__name__}")
    if not (max_poll_interval > 0 and math.isfinite(max_poll_interval)):
        raise ValueError(f"max_poll_interval must be > 0 seconds, got {max_poll_interval}")
    if queues is None:
        return None
    if isinstance(queues, (str, bytes)) or not isinstance(queues, Iterable):
        raise TypeError(f"queues must be a list of queue ids, not {type(queues).__name__}")
    fixed = list(queues)
    for q in fixed:
        if isinstance(q, bool) or not isinstance(q, int):
            raise TypeError(f"queues must hold queue ids (int), not {type(q).__name__}")
        if not 0 <= q <= I32_MAX:
            raise ValueError(f"queue id {q} is not in [0, {I32_MAX}]")
    if not fixed or len(set(fixed)) != len(fixed):
        raise ValueError(f"queues must name at least one queue, each once (got {fixed})")
    if exclusive:
        raise ValueError("an exclusive consumer reads every queue: give queues=... to a "
                         "shared one (exclusive=False)")
    return sorted(fixed)


def take_ownership(store: Any, group: str, topic: str, *, exclusive: bool,
                   queues: list[int] | None, strategy: str,
                   max_poll_interval: float) -> WholeTopic | GroupShare:
    """Hold the group for a new consumer: its lock (``exclusive``) or a membership.

    A store without consumer groups (no ``join_consumer_group``) gives the
    whole topic; a ``no_write`` store too, for an exclusive consumer, and
    refuses a shared one: membership is written to the store's ``config/``.

    Raises:
        ConsumerGroupBusyError: the group is held the other way (exclusive
            or shared), or another member named one of ``queues``.
        ReadOnlyStoreError: a shared consumer of a ``no_write`` store.
    """
    join = getattr(store, "join_consumer_group", None)
    if getattr(store, "no_write", False):
        if not exclusive:
            raise ReadOnlyStoreError(
                f"consumer group {group!r} on topic {topic!r}: a store opened no_write=True "
                "writes nothing, so its consumer cannot join the group's shared membership "
                "(config/consumerGroups/); pass exclusive=True to read every queue, with "
                "commits kept in memory")
        return WholeTopic(None)
    if exclusive or join is None:
        hold = getattr(store, "hold_consumer_group", None)
        return WholeTopic(None if hold is None else hold(group, topic))
    member: MemberHandle = join(group, topic, strategy=strategy, queues=queues,
                                max_poll_interval=max_poll_interval)
    return GroupShare(member, store.config.consumer_heartbeat_interval)


class WholeTopic:
    """Every queue of the topic, for as long as the consumer is open.

    ``lock``: the group's exclusive lock (``exclusive=True``), or None (a
    ``no_write`` store, or a store without groups).
    """

    shared = False
    fence: Fence | None = None
    margin = 0.0

    def __init__(self, lock: ConsumerGroupLock | None) -> None:
        self._lock = lock
        self._seen: set[int] = set()

    @property
    def held(self) -> bool:
        """False once the store's shutdown released the group."""
        return self._lock is None or self._lock.held

    def update(self, ids: Iterable[int] | None) -> Changes:
        """``ids``: the topic's queue ids when they may have changed (else None)."""
        if ids is None:
            return Changes()
        new = [q for q in ids if q not in self._seen]
        self._seen.update(new)
        return Changes(assigned=new)

    def polled(self) -> None:
        """A poll happened (a member counts them; here nothing to do)."""

    def due(self) -> bool:
        """True when queues come or go (never for the whole topic)."""
        return False

    def lapsed(self, queues: Iterable[int]) -> list[int]:
        """Queues of ``queues`` whose messages may not be returned: none."""
        return []

    def release(self, queues: list[int]) -> None:
        """Give up ``queues`` (never asked of a whole-topic consumer)."""

    def close(self) -> None:
        """Release the group's lock (idempotent)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    @property
    def description(self) -> str:
        return "every queue"

    #: Why the ownership failed last (a member's heartbeat error).
    error: str | None = None


class GroupShare:
    """The queues a member of a shared group owns, and their leases.

    ``margin``: seconds of lease a queue must have left for its messages to
    be returned (the heartbeat interval): a process frozen after the check
    returns them before another member may read the queue.
    """

    shared = True

    def __init__(self, member: MemberHandle, margin: float) -> None:
        self.member = member
        self.margin = margin
        # Queue -> the owner epoch this consumer read it under (its commits carry it).
        self._mine: dict[int, int] = {}
        # Queue -> monotonic time its lease is known to last until.
        self._until: dict[int, float] = {}
        # What due() took from the member and update() has not applied yet.
        self._gained: list[int] = []
        self._to_revoke: list[int] = []
        self._ids: list[int] | None = None
        self._closed = False

    @property
    def held(self) -> bool:
        """False once the member left (the consumer closed, or the store shut down)."""
        return not self._closed and self.member.held

    def _take(self) -> tuple[list[int], list[int]]:
        gained, to_revoke = self.member.changes()
        if gained:
            self._gained.extend(gained)
        if to_revoke:
            self._to_revoke.extend(to_revoke)
        return self._gained, self._to_revoke

    def _see(self, ids: list[int]) -> None:
        """Tell the member the topic's queue ids; a new one gets an owner now."""
        ids = sorted(ids)
        if ids == self._ids:
            return
        grew = self._ids is None or not set(ids) <= set(self._ids)
        self._ids = ids
        self.member.set_queues(ids)
        if grew:
            try:
                self.member.heartbeat_now()
            except (StoreError, OSError) as e:  # its leases lapse; reading goes on
                log.warning("consumer group member %s: heartbeat failed: %s",
                            self.member.member_id, e)

    def update(self, ids: Iterable[int] | None) -> Changes:
        """Apply what the member's heartbeats changed (and the topic's new queues).

        The member reports queues gained and queues to give up (revoked:
        the lease still runs, so they are committed, then released; lost:
        the lease ended or another member took them). A queue reported in
        both came back under a new epoch (lost, then assigned), or was
        assigned and asked back before it was read (given up).
        """
        if ids is not None:
            self._see(list(ids))
        gained, to_revoke = self._take()
        now = time.monotonic()
        mine = self._mine
        if not (gained or to_revoke
                or any(now + self.margin >= t for t in self._until.values())):
            return Changes()
        self._gained, self._to_revoke = [], []
        member = self.member
        owned = member.owned()
        revoked, lost = [], []
        back = []
        for q in sorted(set(to_revoke)):
            if q not in mine:
                if q not in owned and member.lease_left(q) > 0:
                    back.append(q)  # gained and asked back before it was read
                continue
            if q not in gained and member.lease_left(q) > 0:
                revoked.append(q)  # given up at release, after its commit
            else:
                lost.append(q)
                del mine[q]
                self._until.pop(q, None)
        # A queue the member stopped listing without saying so is lost too.
        for q in sorted(set(mine) - set(owned) - set(revoked)):
            lost.append(q)
            del mine[q]
            self._until.pop(q, None)
        if back:
            member.give_up(back)
        assigned = []
        for q in sorted(set(gained)):
            if q in owned and q not in mine:
                mine[q] = owned[q][0]
                assigned.append(q)
        for q, (_epoch, left) in owned.items():
            self._until[q] = now + left
        return Changes(assigned=assigned, revoked=revoked, lost=sorted(lost))

    def polled(self) -> None:
        self.member.polled()

    def due(self) -> bool:
        """True when the member gained or must give up queues since the last
        :meth:`update` (a fill ends early so the poll applies it)."""
        gained, to_revoke = self._take()
        return bool(gained or to_revoke)

    def lapsed(self, queues: Iterable[int]) -> list[int]:
        """Queues of ``queues`` whose lease has less than the margin left."""
        out = []
        now = time.monotonic()
        for q in queues:
            until = self._until.get(q)
            if until is not None and now + self.margin < until:
                continue
            left = self.member.lease_left(q) if q in self._mine else 0.0
            self._until[q] = now + left
            if left < self.margin:
                out.append(q)
        return out

    def release(self, queues: list[int]) -> None:
        """Give revoked ``queues`` up (after their positions were committed)."""
        for q in queues:
            self._mine.pop(q, None)
            self._until.pop(q, None)
        if queues:
            self.member.give_up(queues)

    def fence(self, queues: list[int]) -> None:
        """Raise ``FencedError`` unless this member owns every queue of
        ``queues`` under the epoch it read it with, its lease running
        (called under the offsets lock, before they are written)."""
        self.member.check_owners({q: self._mine.get(q, 0) for q in queues})

    def close(self) -> None:
        """Leave the group (idempotent): every queue is released."""
        if not self._closed:
            self._closed = True
            self._mine.clear()
            self._until.clear()
            self.member.leave()

    @property
    def description(self) -> str:
        return f"member {self.member.member_id}"

    @property
    def error(self) -> str | None:
        """Why the member's last heartbeat failed (None: it did not)."""
        return self.member.error
