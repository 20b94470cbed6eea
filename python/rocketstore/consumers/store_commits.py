"""A store's committed offsets: commits in memory, written on a schedule.

:class:`OffsetCommits` is the part of a :class:`~rocketstore.MessageStore`
behind ``commit_offset``, ``commit_offsets``, ``query_offset`` and
``persist_offsets`` (the functions below, bound by name in the class body,
with their text): the table of :class:`ConsumerOffsets`
(``config/consumerOffset.json``, ``docs/format.md``, §13), the time of its
last write, and the rule that no written offset points past data a power
loss could take back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from rocketstore.consumers.offset_table import OffsetKey, OffsetTable
from rocketstore.consumers.offsets import ConsumerOffsets, Fence
from rocketstore.errors import ReadOnlyStoreError, SlaveOffsetsError, StoreError
from rocketstore.services.base import ServiceThread

if TYPE_CHECKING:
    from rocketstore._native import NativeStore
    from rocketstore.store import MessageStore

__all__ = ["OFFSETS_PERSIST_INTERVAL", "OffsetCommits", "OffsetsFoldService", "commit_fenced",
           "commit_offsets", "persist_offsets", "query_offset"]

log = logging.getLogger("rocketstore")

#: Seconds between writes of consumerOffset.json triggered by ``sync=False``
#: commits (RocketMQ's ``flushConsumerOffsetInterval``).
OFFSETS_PERSIST_INTERVAL = 5.0


class OffsetCommits:
    """The committed offsets of one open store and the time of their last write."""

    def __init__(self, offsets: ConsumerOffsets) -> None:
        self.offsets = offsets
        self.persisted_at = time.monotonic()

    def persist(self, n: NativeStore, read_only: bool, *,
                strict: OffsetKey | None = None, fold: bool = False) -> bool:
        """Append the pending commits to the offsets journal (durable), after
        making the messages below those offsets written durable (no
        persisted offset ever points past data a power loss could take
        back); ``fold``: then rewrite consumerOffset.json. Concurrent callers
        share writes: a commit made while a write is under way goes in the
        next.
        """
        if read_only:
            # A reader cannot flush the writer's CommitLog; after a power
            # loss the writer's recovery lowers offsets past the queue ends.
            self.persisted_at = time.monotonic()
            return self.offsets.persist(strict=strict, fold=fold)

        def flush_below(table: OffsetTable) -> None:
            n.flush_for_offsets(table.rows())

        # The interval runs from the moment the table is taken: the write
        # holds every commit made before it, however long the flush takes.
        self.persisted_at = time.monotonic()
        return self.offsets.persist(flush_below, strict=strict, fold=fold)

    def maybe_persist(self, n: NativeStore, read_only: bool) -> None:
        """Persist committed offsets if ``OFFSETS_PERSIST_INTERVAL`` passed
        since the last write; rewrite consumerOffset.json if it is that old
        and the journal holds records (``docs/format.md``, §13.3)."""
        if (time.monotonic() - self.persisted_at >= OFFSETS_PERSIST_INTERVAL
                and self.offsets.dirty):
            self.persist(n, read_only)
        try:
            self.offsets.fold_if_due(OFFSETS_PERSIST_INTERVAL)
        except (OSError, StoreError) as e:
            # The commits are durable in the journal; the rewrite is tried again.
            log.warning("cannot rewrite %s now: %s", self.offsets.path, e)


class OffsetsFoldService(ServiceThread):
    """Rewrites ``consumerOffset.json`` from its journal once it is
    ``OFFSETS_PERSIST_INTERVAL`` old (thread ``rocketstore-offsets``,
    ``docs/format.md``, §13.3), so a broker reading the json sees offsets at
    most that old even while no commit comes. A failed rewrite is logged
    and tried again (the commits are durable in the journal)."""

    name = "offsets"

    def __init__(self, offsets: Callable[[], ConsumerOffsets | None],
                 native: Callable[[], NativeStore | None]) -> None:
        super().__init__(interval=1.0)
        self._offsets = offsets
        self._native = native

    def run_once(self) -> None:
        offsets = self._offsets()
        n = self._native()
        if offsets is None or n is None or n.closed:
            # The store was dropped, closed or crashed: its thread ends (a
            # dropped store would otherwise leave one looping for ever).
            self._stop.set()
            return
        try:
            offsets.fold_if_due(OFFSETS_PERSIST_INTERVAL)
        except (OSError, StoreError) as e:
            log.warning("cannot rewrite %s now: %s", offsets.path, e)


# -- the store's methods (bound by name in MessageStore) ---------------------


def commit_offsets(store: MessageStore, group: str, topic: str,
                   offsets: Mapping[int, int]) -> None:
    """Record ``{queue_id: next_offset}`` of ``group`` for several queues at once.

    As :meth:`commit_offset`, for all the queues together: every entry is
    checked first (a bad one records nothing), and a write of
    ``config/consumerOffset.json`` that this commit triggers (or that runs
    meanwhile) holds all of them or none. ``Consumer`` commits this way.

    Raises:
        ValueError / TypeError: a name :meth:`OffsetKey.of
            <rocketstore.consumers.offset_table.OffsetKey.of>` refuses (empty, a
            topic with ``@``), a topic that breaks the topic rule
            (letters, digits and ``% | _ -``, at most 127 bytes) and the
            store does not hold, a queue id outside ``[0, 2**31 - 1]``
            or an offset outside ``[0, 2**63 - 1]`` or not an int.
        ReadOnlyStoreError: the store was opened ``no_write=True``.
        SlaveOffsetsError: the store is a ``SLAVE`` (its offsets are its
            master's, docs/format.md §21.7).
    """
    commit_fenced(store, group, topic, offsets, None, sync=False)


def commit_fenced(store: MessageStore, group: str, topic: str, offsets: Mapping[int, int],
                  fence: Fence | None, *, sync: bool) -> None:
    """:func:`commit_offsets` with a fence (``ConsumerOffsets.commit_many``),
    written now when ``sync`` (then a refusal of the fence is raised, and
    the refused entries are not recorded)."""
    n = store._n
    if store.no_write:
        raise ReadOnlyStoreError("cannot commit offsets in a store opened no_write=True")
    refusal = store._offsets_refusal()
    if refusal is not None:
        raise SlaveOffsetsError(f"cannot commit offsets: {refusal}")
    # The names rule, then the read rule: a name that breaks the topic
    # rule is refused unless the store holds that topic (ValueError).
    key = OffsetKey.of(group, topic)
    n.get_max_offset_in_queue(key.topic, 0)
    commits = store._commits
    commits.offsets.commit_many(group, topic, offsets, fence=fence)
    if sync:
        commits.persist(n, store.read_only, strict=key)
    # Also after a durable commit: the json is rewritten once it is due.
    commits.maybe_persist(n, store.read_only)


def query_offset(store: MessageStore, group: str, topic: str, queue_id: int) -> int:
    """The committed next offset of ``group`` in the queue (-1 when unknown).

    Sees what other processes committed (a ``stat`` of
    ``consumerOffset.json`` and of its journal per call, and the journal's
    new records; ``docs/format.md``, §13.3), with this process's own
    commits on top. When the files cannot be read now, the last view.
    """
    store._n  # noqa: B018 - raises StoreClosedError when closed
    offsets = store._commits.offsets
    offsets.catch_up()
    return offsets.query(group, topic, queue_id)


def persist_offsets(store: MessageStore) -> None:
    """Make the committed offsets durable now.

    First the CommitLog is flushed up to the messages below the committed
    offsets (in every flush mode; under ``SYNC_FLUSH`` they already are),
    then the commits are appended to ``config/consumerOffset.journal``
    and synced (``docs/format.md``, §13.3), under
    ``config/consumerOffset.lock``, beside what other processes wrote
    (§13.1); ``consumerOffset.json`` itself is rewritten from the journal
    at ``flush()``, close and at least every 5 s. Concurrent calls share
    writes. Nothing is written when nothing changed, or on a ``no_write``
    store. A read-only store writes without the flush (it cannot flush
    the writer's CommitLog).

    Raises:
        PoisonedError: the CommitLog cannot be flushed (the file is not written).
        TimeoutError: the flush did not complete within ``sync_flush_timeout``
            (SYNC_FLUSH) or the disk took nothing (the file is not written);
            or another process held ``consumerOffset.lock`` past
            ``OFFSETS_LOCK_TIMEOUT`` (10 s; the message names its pid).
    """
    n = store._n
    if not store.no_write:
        store._commits.persist(n, store.read_only)
