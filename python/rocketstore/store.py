"""``MessageStore``: the public face of a store directory.

A store is a directory laid out as RocketMQ's broker lays it out (CommitLog
segments, consume queues, index files, checkpoint). ``MessageStore`` opens it,
takes the single-writer lock, recovers, and serves puts and reads. The hot
paths (encoding, appending, reading) run in the Rust engine; this class
orchestrates.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import time
import weakref
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from rocketstore import _native
from rocketstore._checks import ms_arg as _ms_arg
from rocketstore._logging import ensure_log_pump, pump_now
from rocketstore._native import (
    GetMessageResult,
    MessageExt,
    MessageStoreBase,
    NativeStore,
)
from rocketstore._store_reads import ArrowReads, UnknownTopics
from rocketstore.aio import AsyncStore
from rocketstore.config.files import TopicConfigs
from rocketstore.config.store_config import StoreConfig
from rocketstore.consumers.groups import ConsumerGroupAdmin
from rocketstore.consumers.offsets import ConsumerOffsets
from rocketstore.enums import GetStatus
from rocketstore.errors import ReadOnlyStoreError, StoreClosedError
from rocketstore.services.base import ServiceThread
from rocketstore.services.clean import CleanService
from rocketstore.services.recovery import RecoveryReport, RecoveryService
from rocketstore.services.reput import ReputService
from rocketstore.services.schedule import ScheduleService
from rocketstore.stats import StatsView

if TYPE_CHECKING:

    from rocketstore.consumers.consumer import Consumer

__all__ = ["MessageStore", "RecoveryReport"]

log = logging.getLogger("rocketstore")


#: Seconds between writes of consumerOffset.json triggered by ``sync=False``
#: commits (RocketMQ's ``flushConsumerOffsetInterval``).
OFFSETS_PERSIST_INTERVAL = 5.0



# Live stores, so a forked child can disarm the handles it inherited.
_LIVE: weakref.WeakSet[MessageStore] = weakref.WeakSet()

_FORKED_REASON = "store handles do not survive fork(); open the store again"


def _after_fork_in_child() -> None:
    # The child's copy of the engine store is closed already (the engine
    # notices the fork, and closed the child's copy of the lock descriptor
    # at fork); dropping it here touches no file and joins no thread.
    for store in list(_LIVE):
        store._disarm(_FORKED_REASON)


os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    """Keep daemon threads out of the GIL once the interpreter finalizes.

    CPython ends a thread that takes the GIL back during finalization with
    ``pthread_exit``, whose forced unwind must not cross Rust frames (the
    process would abort). From here on, an engine call that released the GIL
    never takes it back (the thread waits for the process to end), and new
    calls keep the GIL; threads already taking it back are let through first.
    """
    _native._begin_exit()


atexit.register(_at_exit)


def _as_config(config: StoreConfig | str | os.PathLike[str]) -> StoreConfig:
    if isinstance(config, StoreConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return StoreConfig(store_path=os.fspath(config))
    raise TypeError(f"config must be a StoreConfig or a path, not {type(config).__name__}")


class MessageStore(MessageStoreBase, ArrowReads, AsyncStore, StatsView, ConsumerGroupAdmin):
    """A RocketMQ-compatible message store.

    Args:
        config: a :class:`StoreConfig`, or just the store directory.
        read_only: open without taking the writer lock; never writes a
            CommitLog, consume queue or index byte and never repairs
            anything, so it can read a store that another process is
            writing. Its consumers commit to ``config/consumerOffset.json``
            (and hold ``config/consumerLocks/``), safely alongside the writer
            and other readers (``docs/format.md``, §13.1); that is all it
            writes. A directory that holds no store (or does not exist) is
            refused with :class:`NotAStoreError` (a ``FileNotFoundError``)
            when the store starts.
        no_write: with ``read_only``, write nothing at all, not even
            consumer offsets or locks (for a RocketMQ broker's live store,
            whose broker rewrites ``consumerOffset.json`` from its own
            memory): consumers keep their commits in memory, and
            :meth:`commit_offset` raises :class:`ReadOnlyStoreError`.
        wait_for_writer: with ``read_only``, open an existing directory that
            holds no store yet as an empty store instead, and follow the
            writer once it starts there (its messages show up as it writes).

    Use it as a context manager (``with MessageStore(cfg) as store:``), or
    call :meth:`start` and :meth:`shutdown` yourself. Nothing touches the
    disk before :meth:`start`.

    The per-message methods (``put``, ``put_message``, ``put_messages``,
    ``put_batch``, ``look_message_by_offset``, ``get_max_offset_in_queue``,
    ``get_min_offset_in_queue``) are those of the native base class
    ``MessageStoreBase``: a put is one native call, with no Python frame in
    between. Before :meth:`start`, after :meth:`shutdown` and in a forked
    child, every method raises :class:`StoreClosedError`. For asyncio,
    ``aput``, ``aput_message``, ``aput_messages``, ``aput_batch`` and
    :meth:`async_consumer` never block the event loop (see
    :mod:`rocketstore.aio`).

    >>> import tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> cfg = StoreConfig(store_path=tmp.name, mapped_file_size_commit_log=64 * 1024,
    ...                   max_hash_slot_num=64, max_index_num=256)  # small files
    >>> store = MessageStore(cfg).start()
    >>> store.put("orders", b"x").queue_offset
    0
    >>> store.shutdown()
    >>> tmp.cleanup()
    """

    # Opened by ``rocketstore repair``: recovery scans the CommitLog from its
    # first file, and index files of the wrong size are rebuilt, not refused.
    _repair = False

    def __init__(
        self,
        config: StoreConfig | str | os.PathLike[str],
        *,
        read_only: bool = False,
        wait_for_writer: bool = False,
        no_write: bool = False,
    ) -> None:
        self._config = _as_config(config)
        if wait_for_writer and not read_only:
            raise ValueError("wait_for_writer=True needs read_only=True "
                             "(a writer creates the store)")
        if no_write and not read_only:
            raise ValueError("no_write=True needs read_only=True (a writer writes)")
        self._read_only = read_only
        self._no_write = bool(no_write)
        self._wait_for_writer = wait_for_writer
        self._native: NativeStore | None = None
        self._reput: ReputService | None = None
        self._clean: CleanService | None = None
        # Python services (ServiceThread subclasses) started after recovery,
        # stopped in reverse order before dispatch and flush stop.
        self._services: list[ServiceThread] = []
        self._offsets = ConsumerOffsets(self._config.config_dir / ConsumerOffsets.FILE_NAME)
        self._topic_configs = TopicConfigs(self._config.config_dir / _native.TOPICS_FILE)
        self._recovery: RecoveryReport | None = None
        self._offsets_persisted_at = time.monotonic()
        self._closed_reason = "store is not started; call start() or use `with`"
        self._pid = os.getpid()
        self._unknown = UnknownTopics(self._config.store_path)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> MessageStore:
        """Lock, load and recover the store; returns ``self``.

        Raises:
            NotAStoreError: a read-only open found no store there (see
                ``wait_for_writer``).
            StoreLockedError: another writer holds the store.
            ConfigMismatchError: the files disagree with the configuration.
            CorruptedError: a file is damaged beyond what recovery repairs.
        """
        if self._native is not None and not self._native.closed:
            return self
        self._pid = os.getpid()
        cfg = self._config
        ensure_log_pump()
        if not self._read_only:
            os.makedirs(cfg.store_path, exist_ok=True)
        # The engine reads the config object itself (field by field).
        native = NativeStore(cfg, self._read_only, repair=self._repair,
                             wait_for_writer=self._wait_for_writer)
        try:
            offsets = ConsumerOffsets.load(cfg.config_dir / ConsumerOffsets.FILE_NAME)
            report = RecoveryService(native).recover(
                cfg.check_crc_on_recover,
                cfg.on_corruption == "skip",
                consumer_offsets=None if self._read_only else offsets,
                whole=self._repair,
            )
            topic_configs = TopicConfigs.load(cfg.config_dir / _native.TOPICS_FILE)
            if not self._read_only:
                # Flush threads first: the abort file they create marks the
                # store as running from here on.
                native.start_flush()
        except BaseException:
            native.shutdown()
            pump_now()
            raise
        pump_now()
        self._config = cfg.replace(
            mapped_file_size_commit_log=native.commit_log_file_size,
            mapped_file_size_consume_queue=native.consume_queue_file_size,
        )
        self._recovery = report
        self._native = native
        self._reput = ReputService(native)
        self._offsets = offsets
        self._topic_configs = topic_configs
        if not self._read_only:
            try:
                # A service may refuse to start (an unreadable progress file).
                services = self._make_services()
            except BaseException:
                native.shutdown()
                pump_now()
                raise
            self._reput.start()
            for service in services:
                service.start()
                self._services.append(service)
        self._attach(native)
        _LIVE.add(self)
        self._stats_reset()
        return self

    def _make_services(self) -> list[ServiceThread]:
        """The Python services a writer runs (dispatch runs in the engine)."""
        # The service refers to the store weakly: a running thread must not
        # keep a dropped store (and its engine store) alive.
        ref = weakref.ref(self)

        def native() -> NativeStore | None:
            store = ref()
            return None if store is None else store._native

        def offsets() -> dict[str, dict[int, int]]:
            store = ref()
            return {} if store is None else store._offsets.current()

        def failed(reason: str) -> None:
            store = ref()
            if store is not None:
                store._service_failed(reason)

        self._clean = CleanService(native, self._config, offsets=offsets, on_failure=failed)
        return [self._clean, ScheduleService.for_store(self)]

    def _service_failed(self, reason: str) -> None:
        """A Python service died: refuse puts from now on, keeping the reason."""
        n = self._native
        if n is not None and not n.closed:
            n.poison(reason)

    def _disarm(self, why: str) -> None:
        """Make every call raise StoreClosedError (after fork in the child)."""
        self._native = None
        self._reput = None
        self._services = []  # their threads are the parent's
        self._closed_reason = why
        self._detach(why)
        self._aio_close(why, forked=True)

    def shutdown(self) -> None:
        """Dispatch what is left, flush, persist offsets and close.

        Idempotent; later calls raise :class:`StoreClosedError`. Same as
        :meth:`close`. A close interrupted by ``KeyboardInterrupt`` (Ctrl-C)
        or ``SystemExit`` before the engine closed leaves the store open:
        call it again to finish (nothing committed is dropped).
        """
        n = self._native
        if n is None or n.closed:
            return
        if os.getpid() != self._pid:
            # A copy in a forked child (whatever forked it): the files, the
            # threads and the config files are the parent's; touch nothing.
            self._disarm(_FORKED_REASON)
            return
        try:
            while self._services:
                # Removed once stopped: an interrupted close stops it again.
                self._services[-1].shutdown()
                self._services.pop()
            if self._reput is not None:
                self._reput.shutdown()
            if not self._read_only:
                if n.poison_reason is None:
                    # Dispatch what is left first, so topics.json lists every topic.
                    n.drain_dispatch()
                self._persist_config()
            elif not self._no_write:
                self._offsets.persist()
        except Exception:
            self._close_native(n)
            raise
        except BaseException:
            # Interrupted (KeyboardInterrupt, SystemExit): the engine store
            # stays open, so a later close() does what is left (offsets and
            # topics committed so far are written then) instead of returning.
            pump_now()
            raise
        self._close_native(n)

    def _close_native(self, n: NativeStore) -> None:
        try:
            n.shutdown()
        finally:
            pump_now()
            # Async waits and puts, and open consumers' groups, end with the engine store.
            self._aio_close("store is closed")
            self._release_consumer_groups()

    def close(self) -> None:
        """Close the store: the same as :meth:`shutdown` (as files and sockets are closed)."""
        self.shutdown()

    def _persist_config(self) -> None:
        n = self._n
        for topic in n.topics():
            for qid in n.queue_ids(topic):
                self._topic_configs.ensure(topic, qid)
        self._topic_configs.persist()
        self._persist_offsets()

    def _persist_offsets(self) -> bool:
        """Write consumerOffset.json if it changed, after making the messages
        below the offsets written durable (no persisted offset ever points
        past data a power loss could take back). Concurrent callers share
        writes: a commit made while a write is under way goes in the next.
        """
        n = self._n
        if self._read_only:
            # A reader cannot flush the writer's CommitLog; after a power
            # loss the writer's recovery lowers offsets past the queue ends.
            self._offsets_persisted_at = time.monotonic()
            return self._offsets.persist()

        def flush_below(table: dict[str, dict[int, int]]) -> None:
            entries = [
                (key.split("@", 1)[0], qid, off)
                for key, queues in table.items()
                for qid, off in queues.items()
            ]
            n.flush_for_offsets(entries)

        # The interval runs from the moment the table is taken: the write
        # holds every commit made before it, however long the flush takes.
        self._offsets_persisted_at = time.monotonic()
        return self._offsets.persist(flush_below)

    def _maybe_persist_offsets(self) -> None:
        """Persist committed offsets if ``OFFSETS_PERSIST_INTERVAL`` passed since the last write."""
        if (time.monotonic() - self._offsets_persisted_at >= OFFSETS_PERSIST_INTERVAL
                and self._offsets.dirty):
            self._persist_offsets()

    def __enter__(self) -> MessageStore:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    def __reduce__(self) -> tuple[Any, ...]:
        # A handle never survives pickling: the copy reopens by path.
        return (MessageStore, (self._config,), {"_read_only": self._read_only,
                                                "_wait_for_writer": self._wait_for_writer,
                                                "_no_write": self._no_write})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._read_only = state["_read_only"]
        self._wait_for_writer = state.get("_wait_for_writer", False)
        self._no_write = state.get("_no_write", False)

    def __repr__(self) -> str:
        state = "closed" if self._native is None or self._native.closed else "open"
        ro = ", read_only" if self._read_only else ""
        ro += ", no_write" if self._no_write else ""
        return f"MessageStore({self._config.store_path!r}{ro}, {state})"

    @property
    def _n(self) -> NativeStore:
        n = self._native
        if n is None:
            raise StoreClosedError(self._closed_reason)
        if n.closed:
            raise StoreClosedError("store is closed")
        return n

    # -- properties --------------------------------------------------------

    @property
    def config(self) -> StoreConfig:
        """The resolved configuration (segment sizes as found on disk)."""
        return self._config

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def no_write(self) -> bool:
        """True when opened ``read_only=True, no_write=True``: nothing is written."""
        return self._no_write

    @property
    def offsets_writable(self) -> bool:
        """True when commits reach ``config/consumerOffset.json`` (not ``no_write``)."""
        return not self._no_write

    @property
    def recovery_report(self) -> RecoveryReport | None:
        """What :meth:`start` found and repaired."""
        return self._recovery

    @property
    def max_phy_offset(self) -> int:
        """CommitLog offset just past the last written record."""
        return self._n.max_phy_offset

    @property
    def min_phy_offset(self) -> int:
        """CommitLog offset of the first byte held (-1 when empty)."""
        return self._n.min_phy_offset

    @property
    def flushed_offset(self) -> int:
        """CommitLog bytes known to be on disk."""
        return self._n.flushed_offset

    @property
    def is_writeable(self) -> bool:
        """False when puts are refused (read-only, closed, or poisoned)."""
        n = self._native
        return (n is not None and not n.closed and not self._read_only
                and n.poison_reason is None and n.disk_full_reason is None)

    @property
    def running_flags(self) -> list[str]:
        """Why puts are refused, if they are, and what waits for a resource.

        ``CLOSED`` and ``READ_ONLY``, then the engine's running flags by
        name (RocketMQ's ``RunningFlags``); the first failure's flag and
        ``DISK_FULL`` carry their reason (``"NAME: reason"``), and
        ``RESOURCE_WAIT`` what cannot create or map a file for want of a
        resource and retries (puts are still taken; it goes by itself).
        """
        n = self._native
        flags: list[str] = []
        if n is None or n.closed:
            flags.append("CLOSED")
        if self._read_only:
            flags.append("READ_ONLY")
        if n is not None:
            flags.extend(n.running_flags)
        return flags

    # -- writes ------------------------------------------------------------

    def delete_expired_files(self, force: bool = False) -> int:
        """Run one manual round of the clean service; returns CommitLog files deleted.

        Deletes up to ``delete_file_batch_max`` of the oldest CommitLog files
        older than ``file_reserved_time`` hours (by mtime, which the store sets
        to the store time of a file's last message when it fills), never the
        file being written, then the ConsumeQueue and index files wholly below
        the new CommitLog min offset. ``force=True`` ignores age (RocketMQ's
        clean-immediately). The disk watermarks and ``max_store_size_bytes``
        belong to the periodic rounds (every ``clean_resource_interval`` ms).

        Raises:
            ReadOnlyStoreError: the store was opened read-only.
        """
        self._n  # noqa: B018 - raises StoreClosedError when closed
        if self._read_only or self._clean is None:
            raise ReadOnlyStoreError("cannot delete files of a read-only store")
        return self._clean.clean(manual=True, force=force).commit_log_files

    def flush(self) -> int:
        """Force everything written to disk; returns the flushed CommitLog offset."""
        off = self._n.flush()
        if not self._read_only:
            self._persist_config()
        elif not self._no_write:
            self._persist_offsets()
        return off

    # -- reads -------------------------------------------------------------

    def look_message_by_id(self, msg_id: str) -> MessageExt | None:
        """The message with offset message id ``msg_id`` (as in :attr:`PutResult.msg_id`).

        Raises:
            CorruptedError: the record is damaged (see :meth:`look_message_by_offset`).
        """
        return self._n.look_message_by_id(msg_id)

    def queue_offset_table(self) -> dict[tuple[str, int], int]:
        """Next queue offset of every ``(topic, queue_id)`` written so far."""
        return self._n.queue_offset_table()

    # -- consume queues ----------------------------------------------------

    def _warn_unknown(self, topic: str, queue_id: int | None = None, *,
                      stacklevel: int = 3) -> bool:
        """See :meth:`UnknownTopics.warn` (True if ``topic``/``queue_id`` is unknown)."""
        return self._unknown.warn(self._n, topic, queue_id, stacklevel + 1)

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        tags: Sequence[str] | str | None = None,
    ) -> GetMessageResult:
        """Pull up to ``max_msg_nums`` messages of ``topic``/``queue_id`` from ``offset``.

        One pull is capped as in RocketMQ (``isTheBatchFull``): at most
        ``max_transfer_count_on_message_in_memory`` (32) messages and
        ``max_transfer_bytes_on_message_in_memory`` (256 KiB) for recent
        messages, ``..._in_disk`` (8, 64 KiB) for older ones; so
        ``get_message(..., 200)`` returns 32 by default. Pull again from
        ``next_begin_offset``, raise those fields, or use a consumer or
        :meth:`read_arrow`.

        ``tags`` filters exactly by tag (``None`` or ``["*"]``: every message; a
        string is a RocketMQ expression ``"a || b"``). The result's
        ``next_begin_offset`` is where the next pull starts. ``group`` names the
        consumer group (kept for RocketMQ's signature; offsets are committed
        with :meth:`commit_offset`).

        Statuses: ``FOUND``, ``NO_MATCHED_MESSAGE`` (nothing passed the tag
        filter), ``MESSAGE_WAS_REMOVING`` (the CommitLog file behind the units
        expired), ``OFFSET_FOUND_NULL`` (no unit readable at ``offset``),
        ``OFFSET_OVERFLOW_BADLY``/``OFFSET_OVERFLOW_ONE``/``OFFSET_TOO_SMALL``,
        ``NO_MESSAGE_IN_QUEUE``. ``NO_MATCHED_LOGIC_QUEUE`` never occurs: an
        unknown topic or queue reads as an empty one (nothing is created on
        disk), with an :class:`~rocketstore.UnknownTopicWarning` naming the
        topics (or queues) the store holds.
        ``OFFSET_FOUND_NULL`` with ``next_begin_offset == offset`` means the
        message there is not readable yet: pull again.

        Every message's body CRC is checked: a damaged record is skipped,
        counted in the result's ``damaged`` and logged once; it is never
        served, and ``next_begin_offset`` moves past it (offsets stay dense).
        Offsets whose messages retention deleted (below the min offset, or
        units pointing into a deleted CommitLog file, also inside a ``FOUND``
        pull) are counted in ``skipped``: without a tag filter, a pull that
        moves forward has ``next_begin_offset - offset == len(messages) +
        skipped + damaged``.

        On a read-only store, a pull that reaches the end of what this
        process knows of the queue first picks up what the writer appended.

        Raises:
            ValueError: ``topic`` breaks the topic rule (letters, digits and
                ``% | _ -``, at most 127 bytes) and the store holds no such
                topic; or a negative ``queue_id``, ``max_msg_nums < 1``.
        """
        tag_list: list[str] | None
        if tags is None:
            tag_list = None
        elif isinstance(tags, str):
            tag_list = [t.strip() for t in tags.split("||")]
        else:
            tag_list = list(tags)
        result = self._n.get_message(topic, queue_id, offset, max_msg_nums, tag_list)
        if result.status is GetStatus.NO_MESSAGE_IN_QUEUE:
            self._warn_unknown(topic, queue_id)
        return result

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        """CommitLog offset of the message at ``cq_offset`` (0 when none)."""
        return self._n.get_commit_log_offset_in_queue(topic, queue_id, cq_offset)

    def get_offset_in_queue_by_time(
        self, topic: str, queue_id: int, timestamp: int | datetime.datetime
    ) -> int:
        """Logical offset of the message stored nearest to ``timestamp``.

        ``timestamp`` is ms since the epoch, or a ``datetime`` (a naive one
        is local time, as ``datetime.timestamp()`` reads it).
        """
        return self._n.get_offset_in_queue_by_time(topic, queue_id, _ms_arg(timestamp))

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's first message (-1 when none)."""
        return self._n.get_earliest_message_time(topic, queue_id)

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        """Store time of the message at ``cq_offset`` (-1 when none)."""
        return self._n.get_message_store_timestamp(topic, queue_id, cq_offset)

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp: int | datetime.datetime = 0,
        end_timestamp: int | datetime.datetime | None = None,
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose UNIQ_KEY or KEYS contain ``key``, ascending by offset.

        Only messages really carrying the key are returned (index hash
        collisions are filtered out); at most ``min(max_num, max_msgs_num_batch)``.

        The window is the messages' store time in ``[begin_timestamp,
        end_timestamp]``, both included, exact to the millisecond (``None``:
        no end). The bounds are ms since the epoch, or ``datetime`` objects (a
        naive one is local time, as ``datetime.timestamp()`` reads it). The
        index keeps whole seconds, so the search looks up to a second before
        ``begin_timestamp`` and each record's own store time decides; the
        ``max_num`` entries the index hands out may include such neighbours
        (they are dropped, not replaced).

        Raises:
            CorruptedError: a record the index points at is damaged (the
                message names file and offset).
        """
        found = self._n.query_message(topic, key, max_num, _ms_arg(begin_timestamp),
                                      _ms_arg(end_timestamp))
        if not found:
            self._warn_unknown(topic)
        return found

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` that exist, sorted."""
        return self._n.queue_ids(topic)

    def topics(self, *, include_system: bool = False) -> list[str]:
        """Topics that have at least one consume queue, sorted.

        System topics (``SCHEDULE_TOPIC_XXXX``, where delayed messages wait,
        ``RMQ_SYS_*``, ...) are left out unless ``include_system``.
        """
        topics = self._n.topics()
        if include_system:
            return topics
        return [t for t in topics if not _native.is_system_topic(t)]

    def dispatch_behind_bytes(self) -> int:
        """CommitLog bytes not yet in the consume queues and index (a
        read-only store measures its files, see :meth:`stats`)."""
        return self._n.dispatch_behind_bytes()

    @property
    def dispatch_seq(self) -> int:
        """Changes whenever new messages become visible to readers."""
        return self._n.dispatch_seq

    def wait_for_dispatch(self, seq: int, timeout: float | None = None) -> int:
        """Block until :attr:`dispatch_seq` differs from ``seq`` or ``timeout`` passes.

        The writer's process is woken by the dispatcher; a read-only store
        re-reads the queue ends every few milliseconds. Returns the new value.
        """
        return self._n.wait_for_dispatch(seq, timeout)

    def refresh(self) -> bool:
        """Read-only stores: pick up what the writer appended (True if anything new)."""
        return self._n.refresh()

    # -- consumer groups ---------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """Record ``next_offset`` as the next message ``group`` reads from the queue.

        Kept in memory, and written to ``config/consumerOffset.json`` by the
        first commit made 5 seconds or more after the last write (RocketMQ's
        ``flushConsumerOffsetInterval``), and by :meth:`persist_offsets`,
        :meth:`flush` and :meth:`shutdown`. To make a commit durable at once,
        call :meth:`persist_offsets` (``Consumer.commit()`` does). A
        read-only store commits too (into the same file, merged under its
        lock; ``docs/format.md``, §13.1), unless opened ``no_write=True``.
        """
        self.commit_offsets(group, topic, {queue_id: next_offset})

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Record ``{queue_id: next_offset}`` of ``group`` for several queues at once.

        As :meth:`commit_offset`, for all the queues together: every entry is
        checked first (a bad one records nothing), and a write of
        ``config/consumerOffset.json`` that this commit triggers (or that runs
        meanwhile) holds all of them or none. ``Consumer`` commits this way.

        Raises:
            ValueError / TypeError: an empty group or topic, a topic with
                ``@`` or one that breaks the topic rule (letters, digits and
                ``% | _ -``, at most 127 bytes) and the store does not hold,
                a queue id outside ``[0, 2**31 - 1]`` or an offset outside
                ``[0, 2**63 - 1]`` or not an int.
            ReadOnlyStoreError: the store was opened ``no_write=True``.
        """
        n = self._n
        if self._no_write:
            raise ReadOnlyStoreError("cannot commit offsets in a store opened no_write=True")
        if isinstance(topic, str) and topic and "@" not in topic:
            # The read rule: a name that breaks the topic rule is refused
            # unless the store holds that topic (raises ValueError).
            n.get_max_offset_in_queue(topic, 0)
        self._offsets.commit_many(group, topic, offsets)
        self._maybe_persist_offsets()

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset of ``group`` in the queue (-1 when unknown).

        Sees what other processes wrote to ``consumerOffset.json`` (one
        ``stat`` of the file per call), with this process's own commits on top.
        """
        self._n  # noqa: B018 - raises StoreClosedError when closed
        self._offsets.refresh()
        return self._offsets.query(group, topic, queue_id)

    def persist_offsets(self) -> None:
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
        self._n  # noqa: B018
        if not self._no_write:
            self._persist_offsets()

    def consumer(
        self,
        group: str,
        topic: str,
        *,
        start: Literal["earliest", "latest"] = "earliest",
        tags: Sequence[str] | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
    ) -> Consumer:
        """A Kafka-style consumer of every queue of ``topic`` for ``group``.

        A new group starts at each queue's min offset (``start="latest"``: at
        the end); a group with committed offsets resumes there. With
        ``auto_commit`` (the default, as in the Kafka clients) ``poll()``
        commits what earlier polls returned every ``auto_commit_interval``
        seconds, and ``close()`` commits durably; see :class:`Consumer`.

        Raises:
            ValueError: ``topic`` breaks the topic rule (letters, digits and
                ``% | _ -``, at most 127 bytes) and the store holds no such
                topic, so the consumer could never receive anything.

        A topic the store does not hold yet is accepted (the consumer picks
        up its queues when they appear), with an
        :class:`~rocketstore.UnknownTopicWarning` naming the known topics.
        """
        from rocketstore.consumers.consumer import Consumer

        # The read rule: a name that fails the put rule is refused unless the
        # store holds that topic (raises ValueError).
        self._n.get_max_offset_in_queue(topic, 0)
        self._warn_unknown(topic)
        return Consumer(self, group, topic, start=start, tags=tags, auto_commit=auto_commit,
                        auto_commit_interval=auto_commit_interval)
