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

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from rocketstore.consumers.offset_table import OffsetKey, OffsetTable
from rocketstore.consumers.offsets import ConsumerOffsets
from rocketstore.errors import ReadOnlyStoreError

if TYPE_CHECKING:
    from rocketstore._native import NativeStore
    from rocketstore.store import MessageStore

__all__ = ["OFFSETS_PERSIST_INTERVAL", "OffsetCommits", "commit_offsets", "persist_offsets",
           "query_offset"]

#: Seconds between writes of consumerOffset.json triggered by ``sync=False``
#: commits (RocketMQ's ``flushConsumerOffsetInterval``).
OFFSETS_PERSIST_INTERVAL = 5.0


class OffsetCommits:
    """The committed offsets of one open store and the time of their last write."""

    def __init__(self, offsets: ConsumerOffsets) -> None:
        self.offsets = offsets
        self.persisted_at = time.monotonic()

    def persist(self, n: NativeStore, read_only: bool) -> bool:
        """Write consumerOffset.json if it changed, after making the messages
        below the offsets written durable (no persisted offset ever points
        past data a power loss could take back). Concurrent callers share
        writes: a commit made while a write is under way goes in the next.
        """
        if read_only:
            # A reader cannot flush the writer's CommitLog; after a power
            # loss the writer's recovery lowers offsets past the queue ends.
            self.persisted_at = time.monotonic()
            return self.offsets.persist()

        def flush_below(table: OffsetTable) -> None:
            n.flush_for_offsets(table.rows())

        # The interval runs from the moment the table is taken: the write
        # holds every commit made before it, however long the flush takes.
        self.persisted_at = time.monotonic()
        return self.offsets.persist(flush_below)

    def maybe_persist(self, n: NativeStore, read_only: bool) -> None:
        """Persist committed offsets if ``OFFSETS_PERSIST_INTERVAL`` passed since the last write."""
        if (time.monotonic() - self.persisted_at >= OFFSETS_PERSIST_INTERVAL
                and self.offsets.dirty):
            self.persist(n, read_only)


# -- the store's methods (bound by name in MessageStore) ---------------------


def commit_offsets(store: MessageStore, group: str, topic: str,
                   offsets: Mapping[int, int], *,
                   fence: Callable[[list[int]], None] | None = None) -> None:
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
        FencedError: ``fence`` refused the queues (a consumer group
            member that does not own them now): nothing is recorded.
    """
    n = store._n
    if store.no_write:
        raise ReadOnlyStoreError("cannot commit offsets in a store opened no_write=True")
    # The names rule, then the read rule: a name that breaks the topic
    # rule is refused unless the store holds that topic (ValueError).
    n.get_max_offset_in_queue(OffsetKey.of(group, topic).topic, 0)
    commits = store._commits
    if fence is not None:
        fence(sorted(offsets))
    commits.offsets.commit_many(group, topic, offsets)
    commits.maybe_persist(n, store.read_only)


def query_offset(store: MessageStore, group: str, topic: str, queue_id: int) -> int:
    """The committed next offset of ``group`` in the queue (-1 when unknown).

    Sees what other processes wrote to ``consumerOffset.json`` (one
    ``stat`` of the file per call), with this process's own commits on top.
    """
    store._n  # noqa: B018 - raises StoreClosedError when closed
    offsets = store._commits.offsets
    offsets.refresh()
    return offsets.query(group, topic, queue_id)


def persist_offsets(store: MessageStore) -> None:
    """Make the committed offsets durable now.

    First the CommitLog is flushed up to the messages below the committed
    offsets (in every flush mode; under ``SYNC_FLUSH`` they already are),
    then ``config/consumerOffset.json`` is written atomically (temporary
    file, fsync, rename, fsync of the directory), under
    ``config/consumerOffset.lock``, merged with what other processes
    wrote (``docs/format.md``, §13.1). Concurrent calls share writes.
    Nothing is written when nothing changed, or on a ``no_write`` store.
    A read-only store writes the file without the flush (it cannot flush
    the writer's CommitLog).

    Raises:
        PoisonedError: the CommitLog cannot be flushed (the file is not written).
        TimeoutError: the flush did not complete within ``sync_flush_timeout``
            (SYNC_FLUSH) or the disk took nothing (the file is not written).
    """
    n = store._n
    if not store.no_write:
        store._commits.persist(n, store.read_only)
