"""What a :class:`~rocketstore.consumers.consumer.Consumer` commits, when,
and where.

A commit stores next offsets (Kafka's and RocketMQ's meaning) through the
store's ``commit_offsets`` — every queue in one call, so a write of
``consumerOffset.json`` holds them together — and, when ``sync``, makes
them durable with ``persist_offsets``. A store that writes no offsets
(``read_only`` with ``no_write=True``) keeps them in this consumer only, and
the first explicit commit warns so. On a ``SLAVE`` store, whose offsets are
its master's (``docs/format.md`` §21.7), an explicit commit raises
:class:`~rocketstore.SlaveOffsetsError` and auto-commits keep the
positions in this consumer only. Auto-commits are due every
``auto_commit_interval`` seconds, checked by the consumer's polls (there is
no timer thread).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping

from rocketstore._checks import I32_MAX, I64_MAX
from rocketstore.config.files import _check_int
from rocketstore.consumers._contract import ConsumerStore
from rocketstore.consumers.offsets import Fence
from rocketstore.errors import ReadOnlyStoreError, SlaveOffsetsError

__all__ = ["Committer", "check_offset", "offsets_arg"]


def check_offset(name: str, value: object) -> int:
    """Queue ids are Java ints and offsets Java longs in the files."""
    return _check_int(name, value, maximum=I32_MAX if name == "queue_id" else I64_MAX)


def offsets_arg(offsets: object) -> dict[int, int]:
    """``{queue_id: offset}`` as a commit takes it, every entry checked."""
    if not isinstance(offsets, Mapping):
        raise TypeError("offsets must be a mapping {queue_id: offset}, "
                        f"not {type(offsets).__name__}")
    return {check_offset("queue_id", q): check_offset("offset", off)
            for q, off in offsets.items()}


class Committer:
    """The commits of one consumer of ``group`` on ``topic``."""

    def __init__(self, store: ConsumerStore, group: str, topic: str, *, auto_commit: bool,
                 auto_commit_interval: float, durable_auto_commit: bool = False) -> None:
        self._store = store
        self._group = group
        self._topic = topic
        self.auto_commit = auto_commit
        self.auto_commit_interval = float(auto_commit_interval)
        # A group member's auto-commits are durable: its queues' next owner,
        # after a crash, starts at the last one.
        self.durable_auto_commit = durable_auto_commit
        self.last_auto_commit = time.monotonic()
        # Committed offsets known here (all that a read-only store has).
        self.committed: dict[int, int] = {}
        self._warned_read_only = False
        # A commit(sync=False) made since the last durable one.
        self._unsynced = False

    def writable(self) -> bool:
        """True when commits reach the offsets file."""
        return bool(getattr(self._store, "offsets_writable", not self._store.read_only))

    def auto_commit_due(self) -> bool:
        """True (and the interval restarts) when an auto-commit is due now."""
        if not self.auto_commit:
            return False
        now = time.monotonic()
        if now - self.last_auto_commit >= self.auto_commit_interval:
            self.last_auto_commit = now
            return True
        return False

    def commit(self, todo: dict[int, int], *, sync: bool, explicit: bool,
               fence: Fence | None = None) -> None:
        """Commit ``todo`` (checked ``{queue_id: next offset}``); durable when ``sync``.

        ``explicit``: the user's ``commit()`` (warns once on a store that
        writes no offsets), not an auto-commit or the one of ``close()``.
        ``fence`` (``ConsumerOffsets.commit_many``): checked under the
        offsets lock before the entries are written; a sync commit raises
        its refusal, a later write drops refused entries with a warning.
        """
        store, group, topic = self._store, self._group, self._topic
        refusal = getattr(store, "_offsets_refusal", lambda: None)()
        if refusal is not None:
            if explicit:
                raise SlaveOffsetsError(f"cannot commit offsets: {refusal}")
            self.committed.update(todo)
            return
        writable = self.writable()
        if not explicit and self.durable_auto_commit:
            sync = True
        fenced = getattr(store, "_commit_fenced", None) if fence is not None else None
        if writable and todo:
            # Every queue in one call: a write of the offsets file that this
            # commit triggers holds all the queues, not just the first.
            try:
                if fenced is not None:
                    fenced(group, topic, todo, fence, sync=sync)
                else:
                    store.commit_offsets(group, topic, todo)
            except ReadOnlyStoreError:
                writable = False
        self.committed.update(todo)
        if writable and sync and fenced is None:
            store.persist_offsets()
        if writable:
            self._unsynced = not sync
        elif not writable and explicit and not self._warned_read_only:
            self._warned_read_only = True
            warnings.warn(
                f"consumer {group!r} reads a store that writes no offsets (read_only with "
                "no_write=True): committed offsets are kept in memory by this consumer "
                "only, nothing is persisted",
                RuntimeWarning,
                stacklevel=4,
            )

    @property
    def unsynced(self) -> bool:
        """True when a ``commit(sync=False)`` was made since the last durable commit."""
        return self._unsynced

    def settle(self) -> None:
        """Write the commits a ``commit(sync=False)`` left pending, before
        the consumer lets go of its group (``docs/format.md``, §13.1): once
        it has, a reset or delete of the group may come, and they must not
        undo it."""
        if self._unsynced and self.writable():
            self._store.persist_offsets()
            self._unsynced = False

    def committed_offset(self, queue_id: int) -> int:
        """The group's committed next offset for ``queue_id`` (-1 if none)."""
        if not self.writable():
            return self.committed.get(queue_id, -1)
        return self._store.query_offset(self._group, self._topic, queue_id)
