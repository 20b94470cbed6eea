"""``MessageStore``: the public face of a store directory.

A store is a directory laid out as RocketMQ's broker lays it out (CommitLog
segments, consume queues, index files, checkpoint). ``MessageStore`` opens it,
takes the single-writer lock, recovers, and serves puts and reads. The hot
paths (encoding, appending, reading) run in the Rust engine; this class
orchestrates.

Every public method is defined in this class body or in its native base
``MessageStoreBase``. Where the work belongs to one of the Python parts, the
part's module defines the method as a function of the store, with its text,
and the class body binds it by name (``stats = _stats.stats``): no Python
base class, no wrapper frame. A part's state is an object the store holds
(``_threads``, ``_commits``, ``_groups``, ``_stats``).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from rocketstore import _arrow_pull, _checks, _native, _store_reads, aio
from rocketstore import stats as _stats
from rocketstore._checks import ms_arg as _ms_arg
from rocketstore._lifecycle import close_store, disarm, open_store, persist_config
from rocketstore._native import (
    MessageExt,
    MessageStoreBase,
    NativeStore,
)
from rocketstore._store_reads import UnknownTopics
from rocketstore.aio import StoreThreads
from rocketstore.config.files import TopicConfigs
from rocketstore.config.store_config import BrokerRole, StoreConfig
from rocketstore.consumers import group_members, groups, store_commits
from rocketstore.consumers.async_consumer import AsyncConsumer
from rocketstore.consumers.consumer import Consumer, Listener, Strategy
from rocketstore.consumers.groups import GroupLocks
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.consumers.offsets import ConsumerOffsets
from rocketstore.consumers.store_commits import OffsetCommits
from rocketstore.errors import ReadOnlyStoreError, StoreClosedError
from rocketstore.services.recovery import RecoveryReport
from rocketstore.stats import StatsSampler

if TYPE_CHECKING:

    from rocketstore.services.base import ServiceThread
    from rocketstore.services.dispatch import DispatchService
    from rocketstore.services.retention import RetentionService

__all__ = ["MessageStore", "RecoveryReport"]


def _as_config(config: StoreConfig | str | os.PathLike[str]) -> StoreConfig:
    if isinstance(config, StoreConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return StoreConfig(store_path=os.fspath(config))
    raise TypeError(f"config must be a StoreConfig or a path, not {type(config).__name__}")


class MessageStore(MessageStoreBase):
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
        create: make a store in a directory that holds other files and no
            store (no ``commitlog/``, ``consumequeue/``, ``index/``, ``config/``,
            ``checkpoint``), which a writer refuses otherwise (NotAStoreError,
            nothing written); an empty or missing directory needs no ``create``.

    Use it as a context manager (``with MessageStore(cfg) as store:``), or
    call :meth:`start` and :meth:`shutdown` yourself. Nothing touches the
    disk before :meth:`start`.

    The per-message methods (``put``, ``put_message``, ``put_messages``,
    ``put_batch``, ``look_message_by_offset``, ``get_max_offset_in_queue``,
    ``get_min_offset_in_queue``, ``get_message``, ``query_message``) are
    those of the native base class ``MessageStoreBase``: a put is one native
    call, with no Python frame in between (``get_message`` and
    ``query_message`` are defined in :mod:`rocketstore._store_reads`; the
    native methods are their fast paths).
    Before :meth:`start`, after :meth:`shutdown` and in a forked child,
    every method raises :class:`StoreClosedError`. For asyncio,
    ``aput``, ``aput_message``, ``aput_messages``, ``aput_batch`` and
    :meth:`async_consumer` never block the event loop (see
    :mod:`rocketstore.aio`).

    Every public method is defined in this class body or on
    ``MessageStoreBase``. Those whose work belongs to a Python part are
    functions of the part's module bound here by name: the asyncio puts
    (:mod:`rocketstore.aio`), the committed offsets
    (:mod:`rocketstore.consumers.store_commits`), the consumer groups
    (:mod:`rocketstore.consumers.groups`), ``stats`` (:mod:`rocketstore.stats`)
    and the reads the package adds to the engine's
    (:mod:`rocketstore._store_reads` and the Arrow pull). Opening and closing
    are :mod:`rocketstore._lifecycle`.

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
    # Opened by ``rocketstore rejoin``: recovery ends the CommitLog here.
    _cut_at: int | None = None

    def __init__(
        self,
        config: StoreConfig | str | os.PathLike[str],
        *,
        read_only: bool = False,
        wait_for_writer: bool = False,
        no_write: bool = False,
        create: bool = False,
    ) -> None:
        self._config = _as_config(config)
        _checks.check_open_mode(read_only=read_only, wait_for_writer=wait_for_writer,
                                no_write=no_write, create=create)
        self._read_only = read_only
        self._no_write = bool(no_write)
        self._wait_for_writer, self._create = wait_for_writer, bool(create)
        self._native: NativeStore | None = None
        self._dispatch: DispatchService | None = None
        self._retention: RetentionService | None = None
        # Python services (ServiceThread subclasses) started after recovery,
        # stopped in reverse order before dispatch and flush stop.
        self._services: list[ServiceThread] = []
        self._commits = OffsetCommits(
            ConsumerOffsets(self._config.config_dir / ConsumerOffsets.FILE_NAME))
        self._topic_configs = TopicConfigs(self._config.config_dir / _native.TOPICS_FILE)
        self._recovery: RecoveryReport | None = None
        self._closed_reason = "store is not started; call start() or use `with`"
        self._pid = os.getpid()
        self._unknown = UnknownTopics(self._config.store_path)
        self._init_parts()

    def _init_parts(self) -> None:
        """The Python parts: each holds its own state and refers to the
        store weakly (or is handed it per call), so a dropped store goes."""
        ref = weakref.ref(self)

        def native() -> NativeStore:
            store = ref()
            if store is None:
                raise StoreClosedError("store is closed")
            return store._n

        self._threads = StoreThreads(native)
        self._groups = GroupLocks()
        self._stats = StatsSampler()

    # -- lifecycle (_lifecycle.py) -----------------------------------------

    def start(self) -> MessageStore:
        """Lock, load and recover the store; returns ``self``.

        Raises:
            NotAStoreError: no store there for a read-only open (see
                ``wait_for_writer``), other files for a writer (see ``create``).
            StoreLockedError: another writer holds the store.
            ConfigMismatchError: the files disagree with the configuration.
            CorruptedError: a file is damaged beyond what recovery repairs.
        """
        if self._native is None or self._native.closed:
            open_store(self)
        return self

    def shutdown(self) -> None:
        """Dispatch what is left, flush, persist offsets and close.

        Idempotent; later calls raise :class:`StoreClosedError`. Same as
        :meth:`close`. A close interrupted by ``KeyboardInterrupt`` (Ctrl-C)
        or ``SystemExit`` before the engine closed leaves the store open:
        call it again to finish (nothing committed is dropped).
        """
        close_store(self)

    def close(self) -> None:
        """Close the store: the same as :meth:`shutdown` (as files and sockets are closed)."""
        self.shutdown()

    def _service_failed(self, reason: str) -> None:
        """A Python service died: refuse puts from now on, keeping the reason."""
        n = self._native
        if n is not None and not n.closed:
            n.poison(reason)

    def _disarm(self, why: str) -> None:
        """Make every call raise StoreClosedError (after fork in the child)."""
        disarm(self, why)

    def __enter__(self) -> MessageStore:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    async def __aenter__(self) -> MessageStore:
        """``async with MessageStore(cfg) as store:``: :meth:`start` in a
        thread (recovery of a big store takes a while)."""
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """:meth:`shutdown` in a thread (it dispatches, flushes and joins
        the store's threads); the loop runs on meanwhile."""
        await asyncio.to_thread(self.shutdown)

    def __reduce__(self) -> tuple[Any, ...]:
        # A handle never survives pickling: the copy reopens by path.
        return (MessageStore, (self._config,), {"_read_only": self._read_only,
                                                "_wait_for_writer": self._wait_for_writer,
                                                "_no_write": self._no_write,
                                                "_create": self._create})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._read_only = state["_read_only"]
        self._wait_for_writer = state.get("_wait_for_writer", False)
        self._no_write = state.get("_no_write", False)
        self._create = state.get("_create", False)

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

    @property
    def _offsets(self) -> ConsumerOffsets:
        return self._commits.offsets

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

    def _offsets_refusal(self) -> str | None:
        """Why consumer offsets may not be committed here: a SLAVE's are its master's."""
        if self._config.broker_role is BrokerRole.SLAVE:
            return ("this store is a SLAVE: its consumer offsets are its master's, replaced "
                    "by each offsets sync (docs/format.md §21.7); commit on the master")
        return None

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
    def ha_port(self) -> int | None:
        """The port a master listens on for slaves (None: not listening).

        Set ``ha_listen_port=0`` to have a free port picked; see docs/format.md §21.
        """
        return self._n.ha_port

    @property
    def ha_offsets_port(self) -> int | None:
        """The port a master serves its consumer and delay offsets on (None: not serving).

        ``ha_offsets_port`` (default: the HA port + 1; 0 picks a free port); see
        docs/format.md §21.7.
        """
        return self._n.ha_offsets_port

    def ha_status(self) -> dict[str, Any]:
        """Replication's state now.

        Always ``role``. A master: ``port`` and ``slaves``, one dict per connected
        slave (``address``, ``acked_offset``, ``lag_bytes``, ``lag_seconds``). A
        slave: ``master_address``, ``connected``, ``applied_offset`` (its CommitLog
        end), ``lag_bytes`` and ``lag_seconds`` behind the master's last frame,
        ``error`` (why replication stopped or the connection last closed),
        ``stopped``, ``verified`` and ``diverged`` (its bytes were found equal to
        the master's on connecting, or not: docs/format.md §21.4), and
        ``needs_reseed`` (its end is below the master's first file: §21.8).
        """
        return self._n.ha_status()

    def promote(self) -> dict[str, Any]:
        """Turn this running ``SLAVE`` into an ``ASYNC_MASTER`` (failover by hand).

        Replication from the master stops; the CommitLog is cut at the end of
        its last complete record, the partial record after it (a frame's end
        inside a record) saved to ``ha/tail-<offset>``; puts are taken from
        there, delayed delivery starts from ``config/delayOffset.json``, and
        the store listens for slaves when ``ha_listen_port`` is set. Consumers
        keep reading. The promotion outlives the store's configuration: a
        later open as a ``SLAVE`` opens as an ``ASYNC_MASTER`` (the marker
        ``ha/promoted``) until ``rocketstore rejoin`` or ``rocketstore
        reseed`` makes it a slave again (docs/format.md §21.8).

        Returns ``{"offset", "tail_file", "tail_bytes", "port"}``: where the
        CommitLog continues, the side file (None when nothing was cut), its
        size, the port listened on.

        Raises:
            ValueError: the store is not a ``SLAVE`` (or was opened read-only).
        """
        from rocketstore.services.failover import promote_store

        return promote_store(self)

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
        """Run one manual round of the retention service; returns CommitLog files deleted.

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
        if self._read_only or self._retention is None:
            raise ReadOnlyStoreError("cannot delete files of a read-only store")
        return self._retention.run_round(manual=True, force=force).commit_log_files

    def flush(self) -> int:
        """Force everything written to disk; returns the flushed CommitLog offset."""
        n = self._n
        off = n.flush()
        if not self._read_only:
            persist_config(self)
        elif not self._no_write:
            self._commits.persist(n, read_only=True, fold=True)
        return off

    # -- asyncio puts (aio.py) ---------------------------------------------

    aput = aio.aput
    aput_message = aio.aput_message
    aput_messages = aio.aput_messages
    aput_batch = aio.aput_batch

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
                      stacklevel: int = 3, subscription: bool = False) -> bool:
        """See :meth:`UnknownTopics.warn` (True if ``topic``/``queue_id`` is
        unknown); ``subscription``: a consumer's, which a writer's store does
        not warn of unless the topic looks misspelt."""
        return self._unknown.warn(self._n, topic, queue_id, stacklevel + 1,
                                  writer_subscription=subscription and not self._read_only)

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

    # -- Arrow reads (_store_reads.py, _arrow_pull.py) ----------------------

    read_arrow = _store_reads.read_arrow
    _arrow_stream = _store_reads.arrow_stream
    get_arrow = _arrow_pull.get_arrow

    # -- stats (stats.py) --------------------------------------------------

    stats = _stats.stats

    # -- committed offsets (consumers/store_commits.py) --------------------

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

    commit_offsets = store_commits.commit_offsets
    _commit_fenced = store_commits.commit_fenced
    query_offset = store_commits.query_offset
    persist_offsets = store_commits.persist_offsets

    # -- consumers (consumers/) --------------------------------------------

    def consumer(
        self,
        group: str,
        topic: str,
        *,
        start: Literal["earliest", "latest"] = "earliest",
        tags: Sequence[str] | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        exclusive: bool = False,
        queues: Sequence[int] | None = None,
        strategy: Strategy = "average",
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
        max_poll_interval: float = 300.0,
    ) -> Consumer:
        """A Kafka-style consumer of ``topic`` for ``group``: a member of the
        group, sharing the topic's queues with the group's other consumers
        (threads or processes; ``exclusive=True``: every queue, alone).

        A new group starts at each queue's min offset (``start="latest"``: at
        the end); a group with committed offsets resumes there. With
        ``auto_commit`` (the default, as in the Kafka clients) ``poll()``
        commits what earlier polls returned every ``auto_commit_interval``
        seconds, a queue's position before it goes to another member, and
        ``close()`` commits durably. ``queues``, ``strategy``,
        ``on_assign``, ``on_revoke`` and ``max_poll_interval`` shape the
        membership; see :class:`Consumer` and docs/format.md §13.2.

        Raises:
            ConsumerGroupBusyError: ``exclusive=True`` while another consumer
                of the group holds the topic (exclusive or shared), a shared
                one while an exclusive one does, or ``queues`` naming a
                queue another member named.
            ReadOnlyStoreError: a shared consumer of a ``no_write`` store
                (which writes no membership; use ``exclusive=True``).
            TypeError / ValueError: a name :meth:`OffsetKey.of
                <rocketstore.consumers.offset_table.OffsetKey.of>` refuses (empty, a
                topic with ``@``), or ``topic`` breaks the topic rule
                (letters, digits and ``% | _ -``, at most 127 bytes) and the
                store holds no such topic, so the consumer could never
                receive anything.

        A topic the store does not hold yet is accepted (the consumer picks
        up its queues when they appear). A read-only store warns of it
        (:class:`~rocketstore.UnknownTopicWarning`, naming the known
        topics); a store opened for writing, which makes the topic on its
        first put, warns only when the name looks like a misspelling of a
        topic it holds ("did you mean 'orders'?"), so a service may start
        its consumers before its first put.
        """
        return self._make_consumer(group, topic, start, tags, auto_commit=auto_commit,
                                   auto_commit_interval=auto_commit_interval,
                                   exclusive=exclusive, queues=queues, strategy=strategy,
                                   on_assign=on_assign, on_revoke=on_revoke,
                                   max_poll_interval=max_poll_interval)

    def async_consumer(
        self,
        group: str,
        topic: str,
        *,
        start: Literal["earliest", "latest"] = "earliest",
        tags: Sequence[str] | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        exclusive: bool = False,
        queues: Sequence[int] | None = None,
        strategy: Strategy = "average",
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
        max_poll_interval: float = 300.0,
    ) -> AsyncConsumer:
        """An :class:`~rocketstore.consumers.AsyncConsumer` of ``topic`` for
        ``group``: :meth:`consumer` whose waits never block the event loop
        (``on_assign`` and ``on_revoke`` may be coroutine functions).

        The arguments, errors and warnings are those of :meth:`consumer`.
        """
        c = self._make_consumer(group, topic, start, tags, auto_commit=auto_commit,
                                auto_commit_interval=auto_commit_interval,
                                exclusive=exclusive, queues=queues, strategy=strategy,
                                on_assign=on_assign, on_revoke=on_revoke,
                                max_poll_interval=max_poll_interval)
        return AsyncConsumer(self._threads, c)

    def _make_consumer(self, group: str, topic: str, start: Literal["earliest", "latest"],
                       tags: Sequence[str] | None, **kw: Any) -> Consumer:
        # The names rule, then the read rule: a name that fails the put rule
        # is refused unless the store holds that topic (raises ValueError).
        self._n.get_max_offset_in_queue(OffsetKey.of(group, topic).topic, 0)
        self._warn_unknown(topic, stacklevel=4, subscription=True)  # names consumer()'s caller
        return Consumer(self, group, topic, start=start, tags=tags, **kw)

    # -- consumer groups (consumers/groups.py) -----------------------------

    consumer_groups = groups.consumer_groups
    reset_consumer_group = groups.reset_consumer_group
    delete_consumer_group = groups.delete_consumer_group
    hold_consumer_group = groups.hold_consumer_group
    join_consumer_group = group_members.join_consumer_group


# `MessageStoreBase.get_message` and `.query_message` are the fast paths of
# the Python functions (the usual call in one native call; every other call
# to the function).
_native._install_read_methods(_store_reads.get_message, _store_reads.query_message)
