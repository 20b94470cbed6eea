"""Store configuration: RocketMQ's ``MessageStoreConfig`` as a frozen dataclass.

Every option of RocketMQ 4.9.8's ``MessageStoreConfig`` (and the few 5.x-only
ones rocketstore supports) is a field of :class:`StoreConfig`, named in
snake_case, with RocketMQ's default and RocketMQ's unit (milliseconds, hours,
percent, 4 KiB pages).  Three naming rules differ from a plain translation:

* the root directory is ``store_path`` (RocketMQ's ``storePathRootDir``);
* RocketMQ's misspelling ``Maped`` is spelled ``mapped``
  (``warmMapedFileEnable`` -> ``warm_mapped_file_enable``);
* the two disk ratios are fractions (``disk_space_warning_level_ratio=0.90``),
  not RocketMQ 5.x's integer percent.

``store_host`` is our addition: the address written into every record's
STOREHOST field (RocketMQ takes it from the broker's ``brokerIP1`` and
``listenPort``).

A config is validated when it is made, so a bad value is a ``ValueError``
(or ``TypeError`` for a value of the wrong type) before anything touches the
disk::

    >>> cfg = StoreConfig(store_path="/tmp/store", mapped_file_size_consume_queue=128)
    >>> cfg.mapped_file_size_consume_queue          # rounded up to whole 20-byte units
    140
    >>> cfg.delay_level_table()[5]                  # level 5 is "1m"
    60000
    >>> cfg.replace(flush_disk_type=FlushDiskType.SYNC_FLUSH).flush_disk_type.name
    'SYNC_FLUSH'

:meth:`StoreConfig.from_properties` reads a RocketMQ ``broker.conf`` (Java
properties, camelCase keys) and ignores the keys that are not store options.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Self

from rocketstore import _native
from rocketstore.config._checks import (
    HOUR_FIELDS,
    MIN_MAPPED_FILE_SIZE_COMMIT_LOG,
    Checker,
    FieldKind,
    check_hours,
    check_ranges,
    checker_for,
    is_ip_literal,
    kind_of,
    parse_delay_levels,
    parse_delete_when,
    whole_hours,
)
from rocketstore.config._properties import format_value, java_names, read_values
from rocketstore.formats.properties import read_properties

__all__ = [
    "CQ_STORE_UNIT_SIZE",
    "DEFAULT_MAPPED_FILE_SIZE_COMMIT_LOG",
    "DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE",
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "DEFAULT_STORE_HOST",
    "MIN_MAPPED_FILE_SIZE_COMMIT_LOG",
    "BrokerRole",
    "FlushDiskType",
    "StoreConfig",
]

_log = logging.getLogger("rocketstore")

# The format's sizes and the defaults the engine owns come from the engine.
#: Size of one ConsumeQueue unit: commitlog offset (8) + size (4) + tagsCode (8).
CQ_STORE_UNIT_SIZE: Final[int] = _native.CQ_STORE_UNIT_SIZE
#: CommitLog segment size of a new store when ``mapped_file_size_commit_log`` is None.
DEFAULT_MAPPED_FILE_SIZE_COMMIT_LOG: Final[int] = _native.DEFAULT_MAPPED_FILE_SIZE_COMMIT_LOG
#: ConsumeQueue segment size of a new store when ``mapped_file_size_consume_queue`` is None.
DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE: Final[int] = _native.DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE
#: Default STOREHOST of records written by this store (RocketMQ's default listen port).
DEFAULT_STORE_HOST: Final[tuple[str, int]] = ("127.0.0.1", 10911)
#: Where a master listens for slaves unless told otherwise (docs/format.md §21.1).
_HA_LISTEN_ADDRESS: Final[str] = "127.0.0.1"
#: RocketMQ's default ``messageDelayLevel`` (18 levels).
DEFAULT_MESSAGE_DELAY_LEVEL: Final[str] = _native.DEFAULT_MESSAGE_DELAY_LEVEL


#: Fields accepted for compatibility with RocketMQ's ``MessageStoreConfig`` that
#: change nothing here, and why (replication, DLedger and 5.x-only settings
#: among them). Setting one to a non-default value logs a warning once.
_INERT: Final[dict[str, str]] = {
    "enable_consume_queue_ext": "the ConsumeQueue extension is not written",
    "mapped_file_size_consume_queue_ext": "the ConsumeQueue extension is not written",
    "bit_map_length_consume_queue_ext": "the ConsumeQueue extension is not written",
    "flush_commit_log_timed": (
        "the flush thread always waits on "
        "a timed condition that puts can wake"
    ),
    "put_message_timeout": "5.x setting; the put wait follows sync_flush_timeout",
    "destroy_mapped_file_interval_forcibly": (
        "a deleted file is unmapped when its "
        "last reader lets go (reference count), never forcibly"
    ),
    "redelete_hanged_file_interval": (
        "deletion unlinks a file at once, so no "
        "file hangs; a failed deletion is retried every round"
    ),
    "disk_fall_recorded": "broker statistics are not kept",
    "write_without_mmap": "5.x setting; files are always memory-mapped",
    "mapped_file_swap_enable": "5.x setting; files stay mapped while in the queue",
    "store_type": "5.x setting; there is one store implementation",
    "default_query_max_num": "a broker-side default; query_message's max_num defaults to 32",
    "put_msg_index_hight_water": "puts are not flow-controlled by the dispatch backlog",
    "use_reentrant_lock_when_put_message": "puts always take one mutex",
    "max_topic_length": "5.x setting; topics are limited to 127 bytes (4.9.8 rule)",
    "auto_message_version_on_topic_len": "5.x setting; records are always written as V1",
    "force_verify_prop_crc": (
        "5.x setting; the property CRC is checked in the CommitLog ranges "
        "written with it and never demanded elsewhere"
    ),
    "max_filter_message_size": "5.x setting; there is no server-side filter",
    "enable_running_flags_in_flush": "5.x setting",
    "max_recovery_commitlog_files": "5.x setting; recovery scans as 4.9.8 does",
    "offset_check_in_slave": "pulls on a slave are not checked against a master's offsets",
    "duplication_enable": "re-dispatch below a confirm offset is not implemented",
}
_WARNED_INERT: set[str] = set()


class FlushDiskType(enum.Enum):
    """How a put waits for the disk (RocketMQ ``FlushDiskType``)."""

    #: Acknowledge once the record is in the page cache; a flush thread syncs periodically.
    ASYNC_FLUSH = "ASYNC_FLUSH"
    #: Acknowledge after the record is synced (group commit; ``sync_flush_timeout``).
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    """Replication role of the store (RocketMQ ``BrokerRole``)."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclasses.dataclass(frozen=True, slots=True)
class StoreConfig:
    """Configuration of a message store (RocketMQ ``MessageStoreConfig``).

    Every field is keyword-friendly and has RocketMQ's default; the comment on
    each field gives its unit.  "ms" is milliseconds, "pages" are 4 KiB OS
    pages.  An unknown keyword is a ``TypeError``; a value of the wrong type is
    a ``TypeError``; a value out of range is a ``ValueError`` naming the field
    and the value.

    ``store_path`` and ``store_path_commit_log`` also accept an
    :class:`os.PathLike` and store it as ``str``; ``store_host`` also accepts
    a list and stores it as a tuple; the enum fields also accept their member
    names (``"SYNC_FLUSH"``).

    ``mapped_file_size_consume_queue`` is rounded up to a multiple of 20 (as
    RocketMQ's getter does); ``disk_max_used_space_ratio`` is kept as given and
    clamped to [10, 95] by :attr:`effective_disk_max_used_space_ratio` (as
    RocketMQ's getter does).
    """

    # --- paths and identity -------------------------------------------------
    #: Root directory of the store (RocketMQ ``storePathRootDir``, ``${user.home}/store``).
    store_path: str = dataclasses.field(
        default_factory=lambda: os.path.expanduser("~/store")
    )
    #: CommitLog directory; None means ``store_path/commitlog``. One path only.
    store_path_commit_log: str | None = None
    #: (IPv4/IPv6 literal, port) written as STOREHOST into every record (our addition).
    store_host: tuple[str, int] = DEFAULT_STORE_HOST

    # --- segment sizes (bytes) ----------------------------------------------
    #: CommitLog file size in bytes; None: 1 GiB for a new store, else taken from the files.
    mapped_file_size_commit_log: int | None = None
    #: ConsumeQueue file size in bytes, rounded up to x20; None: 6,000,000 for a new store.
    mapped_file_size_consume_queue: int | None = None
    #: Whether the ConsumeQueue extension (``consumequeue_ext``) is written.
    #: *Inert*: no effect in rocketstore (warns once when set).
    enable_consume_queue_ext: bool = False
    #: ConsumeQueueExt file size in bytes (48 MiB).
    #: *Inert*: no effect in rocketstore (warns once when set).
    mapped_file_size_consume_queue_ext: int = 48 * 1024 * 1024
    #: Length of the ConsumeQueueExt filter bitmap, in bits.
    #: *Inert*: no effect in rocketstore (warns once when set).
    bit_map_length_consume_queue_ext: int = 64

    # --- CommitLog flush and commit -----------------------------------------
    #: How puts wait for the disk.
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    #: Async flush period of the CommitLog, ms.
    flush_interval_commit_log: int = 500
    #: Dirty pages (4 KiB) needed before an async CommitLog flush.
    flush_commit_log_least_pages: int = 4
    #: Period after which the CommitLog is flushed whatever is dirty (flush(0)), ms.
    flush_commit_log_thorough_interval: int = 10_000
    #: True: the flush thread sleeps a fixed period; False: it can be woken by puts.
    #: *Inert*: no effect in rocketstore (warns once when set).
    flush_commit_log_timed: bool = True
    #: Commit period of the transient store pool (write buffer -> file channel), ms.
    commit_interval_commit_log: int = 200
    #: Dirty pages (4 KiB) needed before a transient-pool commit.
    commit_commit_log_least_pages: int = 4
    #: Period after which the transient pool commits whatever is dirty, ms.
    commit_commit_log_thorough_interval: int = 200
    #: Deadline of a SYNC_FLUSH group commit, ms (then FLUSH_DISK_TIMEOUT).
    sync_flush_timeout: int = 5000
    #: Deadline of a SYNC_MASTER replica ack, ms (then FLUSH_SLAVE_TIMEOUT).
    slave_timeout: int = 3000
    #: 5.x config for the put wait; unused by the put path (see ``put_result_wait_timeout``), ms.
    #: *Inert*: no effect in rocketstore (warns once when set).
    put_message_timeout: int = 8000

    # --- ConsumeQueue flush -------------------------------------------------
    #: Flush period of the ConsumeQueues, ms.
    flush_interval_consume_queue: int = 1000
    #: Dirty pages (4 KiB) needed before a ConsumeQueue flush.
    flush_consume_queue_least_pages: int = 2
    #: Period of a thorough ConsumeQueue flush, which also persists the checkpoint, ms.
    flush_consume_queue_thorough_interval: int = 60_000

    # --- retention ----------------------------------------------------------
    #: Age after which a CommitLog file may be deleted, hours: an int, a float
    #: (``0.5`` is 30 minutes) or a ``datetime.timedelta``. Whole hours read
    #: back as an ``int``; ``to_properties`` writes whole hours, rounded up
    #: (RocketMQ reads an int).
    file_reserved_time: float = 72
    #: Hours of the day (``"a;b"``, 0..23) at which expired files are deleted.
    delete_when: str = "04"
    #: Disk usage (percent) above which files are deleted early; clamped to [10, 95].
    disk_max_used_space_ratio: int = 75
    #: Disk usage (fraction) at which the store warns and refuses puts.
    disk_space_warning_level_ratio: float = 0.90
    #: Disk usage (fraction) at which files are deleted immediately.
    disk_space_clean_forcibly_ratio: float = 0.85
    #: Whether a full disk allows deleting files before ``delete_when``.
    clean_file_forcibly_enable: bool = True
    #: Pause between two CommitLog file deletions, ms.
    delete_commit_log_files_interval: int = 100
    #: Pause between two ConsumeQueue file deletions, ms.
    delete_consume_queue_files_interval: int = 100
    #: RocketMQ: time after which a deleted file still referenced is released forcibly, ms.
    #: *Inert*: no effect in rocketstore (warns once when set).
    destroy_mapped_file_interval_forcibly: int = 120_000
    #: Period for retrying the deletion of a file that failed to delete, ms.
    #: *Inert*: no effect in rocketstore (warns once when set).
    redelete_hanged_file_interval: int = 120_000
    #: Period of a retention round, ms (RocketMQ's clean task).
    clean_resource_interval: int = 10_000
    #: Most files deleted in one retention round (4.9.8 constant; 5.x ``deleteFileBatchMax``).
    delete_file_batch_max: int = 10
    #: Whether a disk-full transition is recorded (logged) when it happens.
    #: *Inert*: no effect in rocketstore (warns once when set).
    disk_fall_recorded: bool = True
    #: Cap on the CommitLog's data, bytes (our addition, Kafka's ``retention.bytes``):
    #: the periodic retention round deletes the oldest files, whatever their age, until
    #: the data fits. None: no cap.
    max_store_size_bytes: int | None = None

    # --- write buffers and warm-up ------------------------------------------
    #: Write through an off-heap buffer pool (effective only with ASYNC_FLUSH, not SLAVE).
    transient_store_pool_enable: bool = False
    #: Number of buffers (each one CommitLog segment) in the transient pool.
    transient_store_pool_size: int = 5
    #: Fail a put at once when no pool buffer is free instead of waiting.
    fast_fail_if_no_buffer_in_store_pool: bool = False
    #: Make each next CommitLog file ahead in the background and warm it
    #: before it is written: reserve all of it, write every page (so a
    #: SYNC_FLUSH write never pays for allocating blocks), lock it in memory
    #: (mlock; a failure is logged once) until the writer leaves it. Off:
    #: a roll creates the file, and blocks are reserved in 64 MiB chunks
    #: ahead of the writer.
    warm_mapped_file_enable: bool = False
    #: Pages (4 KiB) between flushes while warming a file (4096 = 16 MiB; 0: once at the end).
    flush_least_pages_when_warm_mapped_file: int = 1024 // 4 * 16
    #: 5.x: write without mmap (file channel writes).
    #: *Inert*: no effect in rocketstore (warns once when set).
    write_without_mmap: bool = False
    #: 5.x: allow unmapping cold files to save address space.
    #: *Inert*: no effect in rocketstore (warns once when set).
    mapped_file_swap_enable: bool = True
    #: 5.x: message store implementation name.
    #: *Inert*: no effect in rocketstore (warns once when set).
    store_type: str = "default"

    # --- index --------------------------------------------------------------
    #: Hash slots per IndexFile (index geometry).
    max_hash_slot_num: int = _native.DEFAULT_HASH_SLOT_NUM
    #: Entries per IndexFile (index geometry).
    max_index_num: int = _native.DEFAULT_INDEX_NUM
    #: Whether message keys are indexed.
    message_index_enable: bool = True
    #: Recovery also respects the index checkpoint timestamp (RocketMQ ``messageIndexSafe``);
    #: on by default here so that no key is lost to an abnormal exit (RocketMQ: off).
    message_index_safe: bool = True
    #: Cap on messages returned by one key query.
    max_msgs_num_batch: int = 64
    #: Default number of messages returned by a key query.
    #: *Inert*: no effect in rocketstore (warns once when set).
    default_query_max_num: int = 32

    # --- put limits and checks ----------------------------------------------
    #: Largest message body, bytes.
    max_message_size: int = 1024 * 1024 * 4
    #: Check each record's body CRC during recovery (our default: True).
    check_crc_on_recover: bool = True
    #: What a read-write open does with damage inside durable CommitLog data
    #: (invalid bytes that intact, durable records follow; our addition):
    #: ``"refuse"`` raises :class:`CorruptedError` and changes nothing;
    #: ``"skip"`` keeps every intact record, skips the damaged ones (pulls
    #: skip and count them) and lists them in the recovery report.
    on_corruption: str = "refuse"
    #: Ms a put may hold the CommitLog lock before the page cache counts as busy.
    os_page_cache_busy_time_out_mills: int = 1000
    #: Dispatch backlog (messages) above which puts are flow-controlled.
    #: *Inert*: no effect in rocketstore (warns once when set).
    put_msg_index_hight_water: int = 600_000
    #: Lock puts with a reentrant lock (True) or a spin lock (False).
    #: *Inert*: no effect in rocketstore (warns once when set).
    use_reentrant_lock_when_put_message: bool = True
    #: 5.x: topic length limit in bytes (deprecated in 5.x).
    #: *Inert*: no effect in rocketstore (warns once when set).
    max_topic_length: int = 127
    #: 5.x: write V2 records automatically when a topic is longer than 127 bytes.
    #: *Inert*: no effect in rocketstore (warns once when set).
    auto_message_version_on_topic_len: bool = True
    #: 5.x: end every record written with the property ``__CRC32#``, the
    #: CRC32 of the record's other bytes (our default: True; RocketMQ's:
    #: False). Records in CommitLog ranges written with it are checked on
    #: every read, ``verify`` and recovery: damaged properties are damage.
    enabled_append_prop_crc: bool = True
    #: 5.x: refuse records whose property CRC is missing or wrong.
    #: *Inert*: rocketstore checks it wherever the checkpoint says it was
    #: written, never elsewhere (warns once when set).
    force_verify_prop_crc: bool = False
    #: 5.x: largest message a server-side filter evaluates, bytes.
    #: *Inert*: no effect in rocketstore (warns once when set).
    max_filter_message_size: int = 16_000
    #: 5.x: check the store's running flags in the flush services.
    #: *Inert*: no effect in rocketstore (warns once when set).
    enable_running_flags_in_flush: bool = False

    # --- reads --------------------------------------------------------------
    #: Byte limit of one pull when the messages are in memory.
    max_transfer_bytes_on_message_in_memory: int = 1024 * 256
    #: Message limit of one pull when the messages are in memory.
    max_transfer_count_on_message_in_memory: int = 32
    #: Byte limit of one pull when the messages are on disk.
    max_transfer_bytes_on_message_in_disk: int = 1024 * 64
    #: Message limit of one pull when the messages are on disk.
    max_transfer_count_on_message_in_disk: int = 8
    #: Share of physical memory (percent) counted as "in memory" for the limits above.
    access_message_in_memory_max_ratio: int = 40

    # --- consumer groups (our addition) --------------------------------------
    #: Seconds between a consumer group member's heartbeats (its background
    #: thread renews its queue leases; ``docs/format.md``, §13.2).
    consumer_heartbeat_interval: float = 3.0
    #: Seconds without a heartbeat after which a member loses its queues
    #: (a frozen or stuck process; a dead one loses them at once). More
    #: than ``consumer_heartbeat_interval``.
    consumer_session_timeout: float = 10.0

    # --- delay and recovery -------------------------------------------------
    #: Delay levels: whitespace-separated ``<n><s|m|h|d>`` tokens; level 1 is the first.
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    #: Period at which delay offsets (``config/delayOffset.json``) are persisted, ms.
    flush_delay_offset_interval: int = 10_000
    #: 5.x: most CommitLog files scanned by a normal recovery.
    #: *Inert*: no effect in rocketstore (warns once when set).
    max_recovery_commitlog_files: int = 30

    # --- replication (docs/format.md §21) ---------------------
    #: Replication role: a master serves its CommitLog to slaves (a SYNC_MASTER put
    #: waits for one); a SLAVE copies its master's CommitLog and refuses puts.
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    #: Address a master listens on for slaves (loopback; RocketMQ binds every interface).
    ha_listen_address: str = _HA_LISTEN_ADDRESS
    #: Port a master listens on (RocketMQ's is 10912); None: no listener; 0 picks a free
    #: one (read it back as ``store.ha_port``).
    ha_listen_port: int | None = None
    #: ``host:port`` of the master a SLAVE follows (None: it follows none yet).
    ha_master_address: str | None = None
    #: Comma-separated addresses or networks (``10.0.0.5,10.1.0.0/16``) a master serves;
    #: empty: every address that reaches the listener.
    ha_allowed_slaves: str = ""
    #: A master sends an empty frame after this long without one; a slave reports at
    #: least this often, ms.
    ha_send_heartbeat_interval: int = 5000
    #: A connection with nothing received for this long is closed, ms.
    ha_housekeeping_interval: int = 20000
    #: Largest frame a master sends, bytes.
    ha_transfer_batch_size: int = 32768
    #: A SYNC_MASTER put is SLAVE_NOT_AVAILABLE when the best slave is this many bytes
    #: behind, bytes.
    ha_slave_fallbehind_max: int = 268435456
    #: A new slave (reporting offset 0) starts at the master's first CommitLog file
    #: instead of its last one (RocketMQ's rule).
    ha_new_slave_from_first_file: bool = False
    #: Port a master serves its consumer and delay offsets on for rocketstore slaves
    #: (docs/format.md §21.7); None: the HA port + 1 (a free one beside a free HA
    #: port); 0 picks a free one (read it back as ``store.ha_offsets_port``).
    ha_offsets_port: int | None = None
    #: ``host:port`` a SLAVE fetches its master's offsets from; None: the host of
    #: ``ha_master_address``, its port + 1.
    ha_offsets_master_address: str | None = None
    #: How often a SLAVE fetches its master's offsets (and a master renews what it
    #: serves), ms.
    ha_offsets_interval: int = 3000
    #: Slave checks pull offsets against its own store.
    #: *Inert*: no effect in rocketstore (warns once when set).
    offset_check_in_slave: bool = False
    #: Allow re-dispatch of CommitLog entries below the confirm offset (duplication).
    #: *Inert*: no effect in rocketstore (warns once when set).
    duplication_enable: bool = False

    # ------------------------------------------------------------------------
    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            checked = _TYPE_CHECKS[f.name](f.name, value)
            if checked is not value:
                object.__setattr__(self, f.name, checked)
        check_ranges(self)
        self._warn_inert()

    def _warn_inert(self) -> None:
        """Log once per field (per process) that a non-default inert field does nothing."""
        for name, why in _INERT.items():
            if name in _WARNED_INERT or getattr(self, name) == _DEFAULTS[name]:
                continue
            _WARNED_INERT.add(name)
            _log.warning(
                "StoreConfig.%s=%r has no effect in rocketstore: %s",
                name,
                getattr(self, name),
                why,
            )

    # --- resolved values ----------------------------------------------------
    @property
    def effective_disk_max_used_space_ratio(self) -> int:
        """``disk_max_used_space_ratio`` clamped to [10, 95] percent, as RocketMQ reads it."""
        return min(max(self.disk_max_used_space_ratio, 10), 95)

    @property
    def effective_mapped_file_size_commit_log(self) -> int:
        """CommitLog segment size for a new store (bytes)."""
        if self.mapped_file_size_commit_log is None:
            return DEFAULT_MAPPED_FILE_SIZE_COMMIT_LOG
        return self.mapped_file_size_commit_log

    @property
    def effective_mapped_file_size_consume_queue(self) -> int:
        """ConsumeQueue segment size for a new store (bytes, a multiple of 20)."""
        if self.mapped_file_size_consume_queue is None:
            return DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE
        return self.mapped_file_size_consume_queue

    @property
    def effective_transient_store_pool_enable(self) -> bool:
        """Whether the transient pool is used: enabled, ASYNC_FLUSH and not a SLAVE."""
        return _native.transient_pool_in_use(
            self.transient_store_pool_enable,
            self.flush_disk_type.name,
            self.broker_role is BrokerRole.SLAVE,
        )

    @property
    def put_result_wait_timeout(self) -> int:
        """How long a put waits for its flush/replica result, ms.

        ``max(sync_flush_timeout, slave_timeout) + 5000``, as in RocketMQ; on timeout
        the put answers UNKNOWN_ERROR.
        """
        return max(self.sync_flush_timeout, self.slave_timeout) + 5000

    @property
    def delete_when_hours(self) -> frozenset[int]:
        """The hours of the day (0..23) named by ``delete_when``."""
        return frozenset(parse_delete_when(self.delete_when))

    def delay_level_table(self) -> dict[int, int]:
        """Delay levels as ``{level: milliseconds}``, level 1 first.

        >>> StoreConfig(message_delay_level="1s 2m 1h").delay_level_table()
        {1: 1000, 2: 120000, 3: 3600000}
        """
        return {
            i: ms
            for i, ms in enumerate(parse_delay_levels(self.message_delay_level), 1)
        }

    @property
    def max_delay_level(self) -> int:
        """The highest delay level (the number of levels in ``message_delay_level``)."""
        return len(parse_delay_levels(self.message_delay_level))

    # --- layout (docs/format.md §1) -----------------------------
    @property
    def root_dir(self) -> Path:
        """``store_path`` as a :class:`~pathlib.Path`."""
        return Path(self.store_path)

    @property
    def commit_log_dir(self) -> Path:
        """CommitLog directory: ``store_path_commit_log`` or ``store_path/commitlog``."""
        if self.store_path_commit_log is not None:
            return Path(self.store_path_commit_log)
        return self.root_dir / _native.COMMIT_LOG_DIR

    @property
    def consume_queue_dir(self) -> Path:
        """``store_path/consumequeue`` (holds ``<topic>/<queueId>/``)."""
        return self.root_dir / _native.CONSUME_QUEUE_DIR

    @property
    def consume_queue_ext_dir(self) -> Path:
        """``store_path/consumequeue_ext`` (used when ``enable_consume_queue_ext``)."""
        return self.root_dir / _native.CONSUME_QUEUE_EXT_DIR

    @property
    def index_dir(self) -> Path:
        """``store_path/index``."""
        return self.root_dir / _native.INDEX_DIR

    @property
    def config_dir(self) -> Path:
        """``store_path/config`` (topics.json, consumerOffset.json, ...)."""
        return self.root_dir / _native.CONFIG_DIR

    @property
    def checkpoint_path(self) -> Path:
        """``store_path/checkpoint`` (4096 bytes)."""
        return self.root_dir / _native.CHECKPOINT_FILE

    @property
    def abort_path(self) -> Path:
        """``store_path/abort`` (exists while a writer runs)."""
        return self.root_dir / _native.ABORT_FILE

    @property
    def lock_path(self) -> Path:
        """``store_path/lock`` (single-writer lock)."""
        return self.root_dir / _native.LOCK_FILE

    # --- copying and conversion ---------------------------------------------
    def replace(self, **changes: Any) -> Self:
        """Return a copy with ``changes`` applied, validated like a new config.

        >>> StoreConfig().replace(file_reserved_time=48).file_reserved_time
        48
        """
        return dataclasses.replace(self, **changes)

    def to_properties(self) -> dict[str, str]:
        """The config as RocketMQ properties: camelCase keys, string values.

        Keys are RocketMQ's own names (``storePathRootDir``,
        ``warmMapedFileEnable``, ...); ``store_host`` is ``storeHost`` as
        ``ip:port`` (``[ip6]:port``); the disk ratios are written as fractions;
        fields that are None are omitted.  ``from_properties`` reads it back,
        except fractions of an hour: ``file_reserved_time`` is written in
        whole hours, rounded up, since RocketMQ reads an int there (a broker
        would ignore ``0.5`` and keep its default).
        """
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name in HOUR_FIELDS:
                value = whole_hours(value)
            out[_JAVA_NAMES[f.name]] = format_value(value)
        return out

    @classmethod
    def from_properties(
        cls,
        source: str | os.PathLike[str] | Mapping[str, object],
        **overrides: Any,
    ) -> Self:
        """Read a RocketMQ ``broker.conf`` (a path) or a mapping of properties.

        Keys are RocketMQ's camelCase names (``flushDiskType``,
        ``storePathRootDir``, ``warmMapedFileEnable`` or ``warmMappedFileEnable``)
        or our snake_case field names.  String values are converted to the
        field's type: booleans from ``true``/``false`` (any case), integers,
        floats, enums by member name, ``storeHost`` from ``ip:port``.  The two
        disk ratios may be RocketMQ's integer percent (``90``) or a fraction
        (``0.9``); values above 1 are divided by 100.  If there is no
        ``storeHost``, ``brokerIP1`` (when an IP literal) and ``listenPort``
        give ``store_host``, as in a RocketMQ broker.  Other keys are ignored
        and logged at debug level on the ``rocketstore`` logger.

        ``overrides`` are field values (typed, snake_case) applied last.

        A value that cannot be converted is a ``ValueError`` naming the key.
        """
        if isinstance(source, Mapping):
            origin = "properties"
            items: list[tuple[str, object]] = [(str(k), v) for k, v in source.items()]
        else:
            origin = os.fspath(source)
            items = list(read_properties(Path(origin)).items())

        read = read_values(origin, items, _FIELD_KINDS, _KEY_TO_FIELD)
        values = read.values
        if "store_host" not in values and (
            read.broker_ip is not None or read.listen_port is not None
        ):
            host, port = DEFAULT_STORE_HOST
            if read.broker_ip is not None:
                if is_ip_literal(read.broker_ip):
                    host = read.broker_ip
                else:
                    _log.debug(
                        "%s: brokerIP1=%r is not an IP literal; store_host keeps %r",
                        origin,
                        read.broker_ip,
                        host,
                    )
            if read.listen_port is not None:
                port = read.listen_port
            values["store_host"] = (host, port)
        if "ha_listen_port" in values and "ha_listen_address" not in values:
            _log.warning(
                "%s: haListenPort=%s: a RocketMQ broker listens for slaves on every "
                "interface; rocketstore listens on %s only (set ha_listen_address to "
                "listen wider)",
                origin,
                values["ha_listen_port"],
                _HA_LISTEN_ADDRESS,
            )

        values.update(overrides)
        try:
            return cls(**values)
        except ValueError as exc:
            raise ValueError(f"{origin}: {exc}") from exc


def _refuse_setattr(self: StoreConfig, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delattr(self: StoreConfig, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


# A frozen slots dataclass refuses a field with FrozenInstanceError but, on
# Python 3.11, an unknown name with an unrelated TypeError from super() (the
# generated method refers to the class before slots replaced it). Every name
# is refused the same way.
StoreConfig.__setattr__ = _refuse_setattr  # type: ignore[method-assign,assignment]
StoreConfig.__delattr__ = _refuse_delattr  # type: ignore[method-assign,assignment]


# Built once the class exists: field -> kind, field -> RocketMQ key, key -> field.
_FIELD_KINDS: Final[dict[str, FieldKind]] = {
    name: kind_of(hint) for name, hint in typing.get_type_hints(StoreConfig).items()
}
_TYPE_CHECKS: Final[dict[str, Checker]] = {
    name: check_hours if name in HOUR_FIELDS else checker_for(kind)
    for name, kind in _FIELD_KINDS.items()
}
_JAVA_NAMES: Final[dict[str, str]] = java_names(_FIELD_KINDS)
_KEY_TO_FIELD: Final[dict[str, str]] = {java: name for name, java in _JAVA_NAMES.items()}

#: Default value of every field (for the inert-field warning).
_DEFAULTS: Final[dict[str, object]] = {
    f.name: f.default for f in dataclasses.fields(StoreConfig) if f.name in _INERT
}
