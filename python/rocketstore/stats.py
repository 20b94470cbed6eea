"""Runtime statistics of a store: :class:`StoreStats`, what
:meth:`MessageStore.stats() <rocketstore.MessageStore.stats>` returns.

The store's answer to RocketMQ's ``getRuntimeInfo``: how many messages were
put and pulled and at what rate, how far dispatch (CommitLog to consume
queues) and the flush are behind, how full the disk is, the running flags,
and every queue's ends.

Counting costs the put path nothing measurable: the engine keeps the
counters (relaxed atomics, added to by the holder of the put lock); one
:meth:`~rocketstore.MessageStore.stats` call reads them all with the queue
ends.

**Rates** are measured between two samples: by default between this call
and the previous ``stats()`` call on the same store object (the first call:
since the store was opened), or against any earlier sample passed as
``since``. A live view calls ``stats()`` once per refresh and shows the
rates of the last interval.

**From another process** (a store opened with ``read_only=True``) only what
the files tell is known: the queue ends, the CommitLog's end, the dispatch
lag measured on the files, the disk. The put rates are then measured on
the files too (messages: the growth of the queue ends; bytes: the growth
of the CommitLog), and the fields only the writer's process has are
``None`` (never 0): ``put_messages_total``, ``put_bytes_total``,
``flushed_offset`` and ``flush_behind_bytes``. The running flags are the
reader's own (``READ_ONLY``); ``writer_running`` says whether a writer holds
the store.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocketstore import _native
from rocketstore._native import NativeStore, RuntimeSample
from rocketstore.services.ha_status import read_status
from rocketstore.services.retention import disk_usage_ratio

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["QueueStats", "StatsSampler", "StoreStats", "stats"]


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStats:
    """One consume queue's ends at the time of a sample."""

    #: The topic.
    topic: str
    #: The queue id.
    queue_id: int
    #: The first logical offset the queue holds (retention moves it up).
    min_offset: int
    #: One past the last logical offset: the next message's offset.
    max_offset: int

    @property
    def messages(self) -> int:
        """Messages the queue holds (``max_offset - min_offset``)."""
        return max(self.max_offset - self.min_offset, 0)


@dataclasses.dataclass(frozen=True)
class StoreStats:
    """One sample of a store's running state (see :meth:`MessageStore.stats`).

    Totals count from the moment the store object was opened (``start()``),
    in the process that holds it. Rates are per second over
    ``interval_s``, the time since the sample they are measured against
    (``None`` when there is none to measure against, or a total went
    backwards: a writer that recovered a shorter log).

    Fields only the writer's process has are ``None`` in a store opened
    ``read_only=True``: ``put_messages_total``, ``put_bytes_total``,
    ``flushed_offset``, ``flush_behind_bytes``.
    """

    #: When the sample was taken: ms since the epoch (wall clock).
    sample_time_ms: int
    #: When the sample was taken: ``time.monotonic()`` seconds (for intervals).
    monotonic_s: float
    #: Seconds between the sample the rates are measured against and this one.
    interval_s: float | None
    #: True when sampled by a read-only store (another process writes).
    read_only: bool
    #: Whether a writer holds the store (True in the writer's own process;
    #: None when the lock file cannot be read).
    writer_running: bool | None

    #: Messages stored since open: every record appended by ``put``,
    #: ``put_message``, ``put_messages``, ``put_batch`` and delayed
    #: delivery (RocketMQ's ``putMessageTimesTotal``). None from a reader.
    put_messages_total: int | None
    #: CommitLog bytes those messages took (``putMessageSizeTotal``). None
    #: from a reader.
    put_bytes_total: int | None
    #: Messages stored per second. A reader measures the growth of the
    #: queue ends (messages dispatched), which trails the writer's count by
    #: the dispatch lag.
    put_messages_per_s: float | None
    #: CommitLog bytes stored per second. A reader measures the growth of
    #: the CommitLog's end (which also counts the blank that ends a full file).
    put_bytes_per_s: float | None

    #: Pulls (``get_message`` and ``get_arrow`` calls, also a consumer's
    #: polls) served by this store object since open, in this process (a
    #: reader counts its own).
    get_calls_total: int
    #: ... of which returned no message (``getMessageTimesTotalMiss``).
    get_misses_total: int
    #: Messages those pulls returned (``getMessageTransferedMsgCount``).
    get_messages_total: int
    #: Messages pulled per second (this process's pulls).
    get_messages_per_s: float | None
    #: Pulls per second (this process's pulls).
    get_calls_per_s: float | None

    #: Start of the CommitLog's first file (-1 when it holds none).
    min_phy_offset: int
    #: End of the CommitLog: where the next record goes.
    max_phy_offset: int
    #: End of what is known to be on disk (fsynced). None from a reader.
    flushed_offset: int | None
    #: CommitLog bytes written but not yet forced to disk
    #: (``max_phy_offset - flushed_offset``). None from a reader.
    flush_behind_bytes: int | None
    #: CommitLog bytes not yet in the consume queues (RocketMQ's
    #: ``dispatchBehindBytes``). A reader measures it on the files: the
    #: CommitLog's end less the furthest record a consume queue points past.
    dispatch_behind_bytes: int

    #: Used fraction (0..1) of the filesystem holding the CommitLog, as the
    #: retention service measures it (RocketMQ's ``commitLogDiskRatio``; space
    #: reserved for root counts as used). None when it cannot be read.
    disk_used_ratio: float | None
    #: Size of that filesystem, in bytes (None when it cannot be read).
    disk_total_bytes: int | None
    #: Bytes of that filesystem available to this user (None likewise).
    disk_available_bytes: int | None
    #: Sum of the sizes of the store's files (CommitLog, consume queues,
    #: index, checkpoint, config): preallocated files count in full.
    store_size_bytes: int
    #: Disk space those files take (allocated blocks; less than
    #: ``store_size_bytes`` while preallocated files are sparse).
    store_allocated_bytes: int

    #: Why puts are refused, if they are, and what waits for a resource
    #: (``MessageStore.running_flags``: ``READ_ONLY``, ``DISK_FULL: ...``,
    #: ...). Empty when the store takes puts and nothing waits.
    running_flags: tuple[str, ...]
    #: True when puts are taken (a writer, open, not poisoned, disk not full).
    writeable: bool
    #: True while this process's dispatch thread runs (always False in a reader).
    dispatch_running: bool

    #: Every consume queue's ends (system topics included), by topic and queue id.
    queues: tuple[QueueStats, ...]

    #: Replication's state (``MessageStore.ha_status()``: the role, a master's
    #: slaves and their lag, a slave's master, lag and errors, the offsets sync;
    #: docs/format.md §21.6). In a reader, which cannot see the writer's
    #: connections, what the running writer last wrote to ``config/haStatus.json``
    #: (with ``as_of``, seconds since the epoch); None without one.
    replication: dict[str, Any] | None = None

    @property
    def queue_messages_total(self) -> int:
        """Messages the consume queues hold (sum of ``max_offset - min_offset``)."""
        return sum(q.messages for q in self.queues)

    @property
    def queue_end_total(self) -> int:
        """Sum of the queues' max offsets: messages dispatched since each
        queue began (a reader's put rate is measured on it)."""
        return sum(q.max_offset for q in self.queues)


# -- sampling ------------------------------------------------------------------------


def _file_sizes(root: Path) -> tuple[int, int]:
    """(apparent, allocated) bytes of the files under ``root``; files that
    vanish meanwhile (retention) are skipped."""
    size = allocated = 0
    stack = [str(root)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        size += st.st_size
                        allocated += st.st_blocks * 512
                except OSError:
                    continue
    return size, allocated


def _disk(path: Path) -> tuple[float | None, int | None, int | None]:
    """(used ratio, total bytes, available bytes) of the filesystem at ``path``."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None, None
    ratio = disk_usage_ratio(str(path))
    return (None if ratio < 0 else ratio, st.f_blocks * st.f_frsize,
            st.f_bavail * st.f_frsize)


def _rate(new: int | None, old: int | None, seconds: float | None) -> float | None:
    if new is None or old is None or seconds is None or seconds <= 0 or new < old:
        return None
    return (new - old) / seconds


def sample(
    native: NativeStore,
    *,
    store_path: Path,
    commit_log_dir: Path,
    read_only: bool,
    writeable: bool,
    running_flags: list[str],
    since: StoreStats | None,
    disk: bool = True,
) -> StoreStats:
    """Take one sample (``MessageStore.stats`` calls it). A read-only store
    is refreshed first; ``disk=False`` skips the filesystem (a baseline)."""
    if read_only:
        native.refresh()
    raw: RuntimeSample = native.runtime_stats()
    mono = time.monotonic()
    now_ms = time.time_ns() // 1_000_000
    queues = tuple(QueueStats(t, q, lo, hi) for t, q, lo, hi in raw.queues)
    if disk:
        where = commit_log_dir if commit_log_dir.exists() else store_path
        ratio, total, available = _disk(where)
        size, allocated = _file_sizes(store_path)
        if not commit_log_dir.is_relative_to(store_path):
            more = _file_sizes(commit_log_dir)
            size, allocated = size + more[0], allocated + more[1]
    else:
        ratio = total = available = None
        size = allocated = 0
    interval = None if since is None else mono - since.monotonic_s
    end_total = sum(q.max_offset for q in queues)
    if read_only:
        put_msgs_rate = _rate(end_total, None if since is None else since.queue_end_total,
                              interval)
        put_bytes_rate = _rate(raw.max_phy_offset,
                               None if since is None else since.max_phy_offset, interval)
        writer = _native.writer_running(str(store_path))
    else:
        put_msgs_rate = _rate(raw.put_messages,
                              None if since is None else since.put_messages_total, interval)
        put_bytes_rate = _rate(raw.put_bytes,
                               None if since is None else since.put_bytes_total, interval)
        writer = True
    flushed = raw.flushed_offset
    return StoreStats(
        sample_time_ms=now_ms,
        monotonic_s=mono,
        interval_s=interval,
        read_only=read_only,
        writer_running=writer,
        put_messages_total=raw.put_messages,
        put_bytes_total=raw.put_bytes,
        put_messages_per_s=put_msgs_rate,
        put_bytes_per_s=put_bytes_rate,
        get_calls_total=raw.get_calls,
        get_misses_total=raw.get_misses,
        get_messages_total=raw.get_messages,
        get_messages_per_s=_rate(raw.get_messages,
                                 None if since is None else since.get_messages_total, interval),
        get_calls_per_s=_rate(raw.get_calls,
                              None if since is None else since.get_calls_total, interval),
        min_phy_offset=raw.min_phy_offset,
        max_phy_offset=raw.max_phy_offset,
        flushed_offset=flushed,
        flush_behind_bytes=None if flushed is None else max(raw.max_phy_offset - flushed, 0),
        dispatch_behind_bytes=raw.dispatch_behind_bytes,
        disk_used_ratio=ratio,
        disk_total_bytes=total,
        disk_available_bytes=available,
        store_size_bytes=size,
        store_allocated_bytes=allocated,
        running_flags=tuple(running_flags),
        writeable=writeable,
        dispatch_running=raw.dispatch_running,
        queues=queues,
        replication=(native.ha_status() if not read_only
                     else read_status(store_path / "config") if writer else None),
    )


class StatsSampler:
    """The ``stats()`` part of one :class:`~rocketstore.MessageStore`: the
    sample the next call measures its rates against."""

    def __init__(self) -> None:
        self.last: StoreStats | None = None

    def reset(self, store: MessageStore) -> None:
        """The baseline of the first ``stats()`` call: the store just opened."""
        self.last = None
        self.last = _sample(store, None, disk=False)


def stats(store: MessageStore, since: StoreStats | None = None) -> StoreStats:
    """One sample of the store's running state (RocketMQ's ``getRuntimeInfo``).

    Put and pull counts and rates, dispatch and flush lag in bytes, disk
    usage, the running flags and every queue's min/max offsets; see
    :class:`~rocketstore.StoreStats` for each field and its unit.

    Rates are measured against ``since`` (an earlier sample of this
    store), by default against the previous ``stats()`` call on this
    store object (the first call: against the moment it was opened).
    Every call becomes the default baseline of the next one, so a
    view refreshing once a second shows the rates of the last second.

    The sample waits for nothing: the queue ends are what dispatch has
    made visible so far (``dispatch_behind_bytes`` says how much is left).
    A read-only store first picks up what the writer appended
    (``refresh()``) and tells only what the files tell: the fields
    only the writer's process has are None (``put_messages_total``,
    ``put_bytes_total``, ``flushed_offset``, ``flush_behind_bytes``),
    and its put rates are measured on the files (the growth of the queue
    ends and of the CommitLog).

    Raises:
        TypeError: ``since`` is not a ``StoreStats``.
        StoreClosedError: the store is not open.

    >>> import tempfile
    >>> from rocketstore import MessageStore, StoreConfig
    >>> with tempfile.TemporaryDirectory() as path:
    ...     cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=64 * 1024,
    ...                       max_hash_slot_num=64, max_index_num=256)  # small files
    ...     with MessageStore(cfg) as store:
    ...         r = store.put("orders", b"x")
    ...         s = store.stats()
    >>> s.put_messages_total, s.put_bytes_total == r.wrote_bytes, s.flush_behind_bytes >= 0
    (1, True, True)
    """
    if since is not None and not isinstance(since, StoreStats):
        raise TypeError(f"since must be a StoreStats, not {type(since).__name__}")
    part = store._stats
    s = _sample(store, since or part.last, disk=True)
    part.last = s
    return s


def _sample(store: MessageStore, since: StoreStats | None, *, disk: bool) -> StoreStats:
    cfg = store.config
    return sample(store._n, store_path=Path(cfg.store_path),
                  commit_log_dir=Path(cfg.commit_log_dir), read_only=store.read_only,
                  writeable=store.is_writeable, running_flags=store.running_flags,
                  since=since, disk=disk)
