"""A consumer's side of its group's membership changes.

The functions here are methods of :class:`~rocketstore.consumers.consumer.Consumer`
(bound by name in its class body). A poll starts by applying what changed
in the queues the consumer owns (:mod:`~rocketstore.consumers.ownership`),
in this order (``docs/format.md``, §13.2):

1. *lost* queues (the lease lapsed: another member may own them) are
   dropped, with their fetched messages, and never committed;
2. *revoked* queues (still owned, asked back) have their positions
   auto-committed durably, ``on_revoke`` gets them (with the lost ones),
   then they are released to the next owner;
3. *assigned* queues start at their committed offset (the previous owner
   committed before it released them), else by the start rule, and
   ``on_assign`` gets them.

After each read, the fetched messages of a queue whose lease has less than
the margin left are dropped and its fetch position goes back
(:func:`drop_lapsed`): a process frozen after that check returns them while
it still owns the queue.
"""

from __future__ import annotations

import collections
import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from rocketstore.consumers.ownership import Changes, Listener
from rocketstore.errors import FencedError, StoreClosedError

if TYPE_CHECKING:
    from rocketstore.consumers.consumer import Consumer

__all__ = ["apply", "assign", "call_listener", "close_commit", "drop_lapsed", "drop_queues",
           "revoke_begin", "revoke_end", "sync_membership", "take_changes", "topic_ids"]

log = logging.getLogger("rocketstore")


def call_listener(listener: Listener | None, name: str, queues: list[int]) -> None:
    """Call a blocking consumer's listener; a coroutine function belongs to
    the asyncio consumer (its coroutine is closed, never left pending)."""
    if listener is None:
        return
    result = listener(queues)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError(f"{name} returned an awaitable: a coroutine function listener "
                        "needs store.async_consumer(...)")


def topic_ids(self: Consumer) -> list[int] | None:
    """The topic's queue ids when they changed since the ownership saw them."""
    ids, self._new_ids = self._new_ids, None
    seq = self._store.dispatch_seq
    if ids is None and seq != self._assign_seq:
        ids = self._store.queue_ids(self._topic)
    self._assign_seq = seq
    return None if ids is None or ids == self._known_ids else ids


def sync_membership(self: Consumer, ids: list[int] | None = None) -> None:
    """Apply what changed in this consumer's queues (a poll's first step)."""
    if self._applying:
        return  # a listener's own calls
    changes = self._take_changes(ids)
    if changes:
        self._applying = True
        try:
            self._apply(changes)
        finally:
            self._applying = False


def take_changes(self: Consumer, ids: list[int] | None = None) -> Changes:
    """What the ownership changed (``ids``: the topic's queue ids, if known)."""
    if ids is None:
        ids = self._topic_ids()
    changes = self._own.update(ids)
    if ids is not None:
        self._known_ids = ids
    return changes


def apply(self: Consumer, changes: Changes) -> None:
    """Revoked and lost queues go (on_revoke), then assigned ones come (on_assign)."""
    gone = self._revoke_begin(changes)
    if gone:
        try:
            call_listener(self._on_revoke, "on_revoke", gone)
        finally:
            self._revoke_end(changes)
    if changes.assigned:
        self._assign(changes.assigned)
        call_listener(self._on_assign, "on_assign", list(changes.assigned))


def revoke_begin(self: Consumer, changes: Changes) -> list[int]:
    """Drop the lost queues, auto-commit the revoked ones durably; the
    queues ``on_revoke`` gets."""
    if changes.lost:
        self._drop_queues(changes.lost)
        log.warning("consumer group %s: %s lost queues %s of %s (its lease lapsed: "
                    "the process stalled or its heartbeats failed%s); their messages "
                    "since the last commit go to the next owner", self._group,
                    self._own.description, changes.lost, self._topic,
                    f": {self._own.error}" if self._own.error else "")
    if changes.revoked and self._commits.auto_commit:
        todo = {q: self._positions[q] for q in changes.revoked if q in self._positions}
        try:
            self._commit(todo, sync=True, explicit=False)
        except FencedError as e:
            log.warning("consumer group %s: the positions of revoked queues were "
                        "not committed: %s", self._group, e)
    return sorted(changes.lost + changes.revoked)


def revoke_end(self: Consumer, changes: Changes) -> None:
    """Give the revoked queues up."""
    if changes.revoked:
        self._drop_queues(changes.revoked)
        self._own.release(changes.revoked)


def assign(self: Consumer, queues: list[int]) -> None:
    """Start ``queues`` at their committed offset, else by the start rule."""
    store, group, topic = self._store, self._group, self._topic
    for q in queues:
        committed = store.query_offset(group, topic, q)
        if committed >= 0:
            pos = committed
            self._commits.committed[q] = committed
        elif self._start == "latest" and q in self._initial_ids:
            pos = store.get_max_offset_in_queue(topic, q)
        else:
            pos = store.get_min_offset_in_queue(topic, q)
        self._positions[q] = self._fetch_pos[q] = pos
        log.debug("consumer %s: queue %s/%d at offset %d", group, topic, q, pos)
    self._assignment = sorted(self._positions)


def drop_queues(self: Consumer, queues: Iterable[int]) -> None:
    """Forget ``queues`` and their fetched messages."""
    for q in queues:
        self._positions.pop(q, None)
        self._fetch_pos.pop(q, None)
        if self._buffered.pop(q, 0):
            self._buffer = collections.deque(e for e in self._buffer if e[0] != q)
    self._assignment = sorted(self._positions)


def drop_lapsed(self: Consumer, batches: list[tuple[int, object]] | None = None) -> None:
    """After a read: drop the fetched messages of every queue whose lease has
    less than the margin left; their fetch positions go back."""
    if not self._own.shared or not self._buffered:
        return
    lapsed = self._own.lapsed(list(self._buffered))
    if not lapsed:
        return
    for q in lapsed:
        del self._buffered[q]
        self._fetch_pos[q] = self._positions[q]
    gone = set(lapsed)
    self._buffer = collections.deque(e for e in self._buffer if e[0] not in gone)
    if batches is not None:
        batches[:] = [b for b in batches if b[0] not in gone]
    log.info("consumer group %s: lease of queues %s of %s too short to return their "
             "messages", self._group, lapsed, self._topic)


def close_commit(self: Consumer, offsets: Mapping[int, int] | None) -> list[int]:
    """What :meth:`close` commits (``offsets``, default the positions),
    durably; returns the queues ``on_revoke`` gets."""
    if self._own.shared and self._own.held:
        lost = self._take_changes().lost  # not committed, never returned again
        self._drop_queues(lost)
        gone = sorted(set(self._assignment) | set(lost))
        if offsets is not None:
            offsets = {q: off for q, off in offsets.items() if q in self._positions}
    else:
        gone = list(self._assignment)
    if self._commits.auto_commit:
        try:
            self._commit(offsets, sync=True, explicit=False)
        except StoreClosedError:
            log.info("consumer %s: store already shut down; positions not committed",
                     self._group)
        except FencedError as e:
            log.warning("consumer group %s: positions not committed at close: %s",
                        self._group, e)
    return gone
