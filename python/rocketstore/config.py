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
import ipaddress
import logging
import math
import os
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Self

from rocketstore import _native
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
#: Smallest CommitLog segment: a minimal record (91 bytes) plus the 8-byte end-of-file blank.
MIN_MAPPED_FILE_SIZE_COMMIT_LOG: Final[int] = (
    _native.MIN_RECORD_SIZE + _native.END_FILE_MIN_BLANK_LENGTH
)
#: Default STOREHOST of records written by this store (RocketMQ's default listen port).
DEFAULT_STORE_HOST: Final[tuple[str, int]] = ("127.0.0.1", 10911)
#: RocketMQ's default ``messageDelayLevel`` (18 levels).
DEFAULT_MESSAGE_DELAY_LEVEL: Final[str] = _native.DEFAULT_MESSAGE_DELAY_LEVEL

_INT32_MAX: Final = 2**31 - 1  # Java int: file sizes and in-file positions
_INT64_MAX: Final = 2**63 - 1  # Java long
_MAX_PORT: Final = 65535
_LAST_HOUR: Final = 23


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
    "slave_timeout": "replication (HA) is not implemented",
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
    "ha_listen_port": "replication (HA) is not implemented",
    "offset_check_in_slave": "replication (HA) is not implemented",
    "duplication_enable": "replication (HA) is not implemented",
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
    #: *Inert*: no effect in rocketstore (warns once when set).
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

    # --- expiry -------------------------------------------------------------
    #: Age after which a CommitLog file may be deleted, hours.
    file_reserved_time: int = 72
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
    #: Period of the clean (expiry) task, ms.
    clean_resource_interval: int = 10_000
    #: Most files deleted in one clean pass (4.9.8 constant; 5.x ``deleteFileBatchMax``).
    delete_file_batch_max: int = 10
    #: Whether a disk-full transition is recorded (logged) when it happens.
    #: *Inert*: no effect in rocketstore (warns once when set).
    disk_fall_recorded: bool = True
    #: Cap on the CommitLog's data, bytes (our addition, Kafka's ``retention.bytes``):
    #: the periodic clean round deletes the oldest files, whatever their age, until
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
    max_hash_slot_num: int = 5_000_000
    #: Entries per IndexFile (index geometry).
    max_index_num: int = 20_000_000
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

    # --- delay and recovery -------------------------------------------------
    #: Delay levels: whitespace-separated ``<n><s|m|h|d>`` tokens; level 1 is the first.
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    #: Period at which delay offsets (``config/delayOffset.json``) are persisted, ms.
    flush_delay_offset_interval: int = 10_000
    #: 5.x: most CommitLog files scanned by a normal recovery.
    #: *Inert*: no effect in rocketstore (warns once when set).
    max_recovery_commitlog_files: int = 30

    # --- replication --------------------------------------------------------
    #: Replication role. Replication is not implemented; the role's one effect here is
    #: RocketMQ's: a SLAVE never uses the transient store pool.
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    #: HA listen port.
    #: *Inert*: no effect in rocketstore (warns once when set).
    ha_listen_port: int = 10912
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
            checked = _check_type(f.name, _FIELD_KINDS[f.name], value)
            if checked is not value:
                object.__setattr__(self, f.name, checked)
        self._check_ranges()
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

    def _check_ranges(self) -> None:
        # paths
        if not self.store_path:
            _bad("store_path", self.store_path, "must be a non-empty path")
        if self.store_path_commit_log is not None:
            if not self.store_path_commit_log:
                _bad(
                    "store_path_commit_log",
                    self.store_path_commit_log,
                    "must be a non-empty path or None",
                )
            if "," in self.store_path_commit_log:
                _bad(
                    "store_path_commit_log",
                    self.store_path_commit_log,
                    "multi-path CommitLogs (',' separated) are not supported",
                )
        _check_store_host(self.store_host)
        if self.on_corruption not in ("refuse", "skip"):
            _bad("on_corruption", self.on_corruption, 'must be "refuse" or "skip"')

        # segment sizes
        if self.mapped_file_size_commit_log is not None:
            _in_range(
                "mapped_file_size_commit_log",
                self.mapped_file_size_commit_log,
                MIN_MAPPED_FILE_SIZE_COMMIT_LOG,
                _INT32_MAX,
                "(a minimal 91-byte record plus the 8-byte blank must fit)",
            )
        if self.mapped_file_size_consume_queue is not None:
            size = self.mapped_file_size_consume_queue
            _in_range("mapped_file_size_consume_queue", size, 1, _INT32_MAX)
            rounded = -(-size // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
            if rounded > _INT32_MAX:
                _bad(
                    "mapped_file_size_consume_queue",
                    size,
                    f"rounds up to {rounded}, above {_INT32_MAX}",
                )
            object.__setattr__(self, "mapped_file_size_consume_queue", rounded)
        _in_range(
            "mapped_file_size_consume_queue_ext",
            self.mapped_file_size_consume_queue_ext,
            1,
            _INT32_MAX,
        )
        _in_range(
            "bit_map_length_consume_queue_ext",
            self.bit_map_length_consume_queue_ext,
            0,
            _INT32_MAX,
        )

        # periods the services sleep for: must be positive
        for name in (
            "flush_interval_commit_log",
            "commit_interval_commit_log",
            "flush_interval_consume_queue",
            "clean_resource_interval",
            "flush_delay_offset_interval",
            "sync_flush_timeout",
            "slave_timeout",
            "put_message_timeout",
            "os_page_cache_busy_time_out_mills",
        ):
            _in_range(name, getattr(self, name), 1, _INT64_MAX)
        # page counts, pauses and ages where zero means "no threshold"
        for name in (
            "flush_commit_log_least_pages",
            "flush_commit_log_thorough_interval",
            "commit_commit_log_least_pages",
            "commit_commit_log_thorough_interval",
            "flush_consume_queue_least_pages",
            "flush_consume_queue_thorough_interval",
            "file_reserved_time",
            "delete_commit_log_files_interval",
            "delete_consume_queue_files_interval",
            "destroy_mapped_file_interval_forcibly",
            "redelete_hanged_file_interval",
            "flush_least_pages_when_warm_mapped_file",
        ):
            _in_range(name, getattr(self, name), 0, _INT64_MAX)
        # counts and limits that must allow at least one
        for name in (
            "delete_file_batch_max",
            "transient_store_pool_size",
            "max_msgs_num_batch",
            "default_query_max_num",
            "max_message_size",
            "put_msg_index_hight_water",
            "max_topic_length",
            "max_filter_message_size",
            "max_transfer_bytes_on_message_in_memory",
            "max_transfer_count_on_message_in_memory",
            "max_transfer_bytes_on_message_in_disk",
            "max_transfer_count_on_message_in_disk",
            "max_recovery_commitlog_files",
        ):
            _in_range(name, getattr(self, name), 1, _INT32_MAX)

        if self.max_store_size_bytes is not None:
            _in_range("max_store_size_bytes", self.max_store_size_bytes, 1, _INT64_MAX)

        # index geometry: the file size is a Java int
        _in_range("max_hash_slot_num", self.max_hash_slot_num, 1, _INT32_MAX)
        _in_range("max_index_num", self.max_index_num, 1, _INT32_MAX)
        if _native.index_file_size(self.max_hash_slot_num, self.max_index_num) is None:
            index_size = (
                _native.INDEX_HEADER_SIZE
                + self.max_hash_slot_num * _native.INDEX_HASH_SLOT_SIZE
                + self.max_index_num * _native.INDEX_ENTRY_SIZE
            )
            raise ValueError(
                f"max_hash_slot_num={self.max_hash_slot_num!r}, "
                f"max_index_num={self.max_index_num!r}: IndexFile size {index_size} "
                f"exceeds {_INT32_MAX} bytes"
            )

        # ratios and percentages
        _in_range(
            "disk_max_used_space_ratio",
            self.disk_max_used_space_ratio,
            -_INT32_MAX - 1,
            _INT32_MAX,
        )  # any Java int; clamped by the property
        for name in (
            "disk_space_warning_level_ratio",
            "disk_space_clean_forcibly_ratio",
        ):
            ratio = getattr(self, name)
            if not (0.0 < ratio <= 1.0):
                _bad(name, ratio, "must be a fraction in (0, 1]")
        _in_range(
            "access_message_in_memory_max_ratio",
            self.access_message_in_memory_max_ratio,
            0,
            100,
        )

        _in_range("ha_listen_port", self.ha_listen_port, 0, _MAX_PORT)
        if not self.store_type:
            _bad("store_type", self.store_type, "must be non-empty")

        # strings with a grammar
        _parse_delete_when(self.delete_when)
        _parse_delay_levels(self.message_delay_level)

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
        return (
            self.transient_store_pool_enable
            and self.flush_disk_type is FlushDiskType.ASYNC_FLUSH
            and self.broker_role is not BrokerRole.SLAVE
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
        return frozenset(_parse_delete_when(self.delete_when))

    def delay_level_table(self) -> dict[int, int]:
        """Delay levels as ``{level: milliseconds}``, level 1 first.

        >>> StoreConfig(message_delay_level="1s 2m 1h").delay_level_table()
        {1: 1000, 2: 120000, 3: 3600000}
        """
        return {
            i: ms
            for i, ms in enumerate(_parse_delay_levels(self.message_delay_level), 1)
        }

    @property
    def max_delay_level(self) -> int:
        """The highest delay level (the number of levels in ``message_delay_level``)."""
        return len(_parse_delay_levels(self.message_delay_level))

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
        fields that are None are omitted.  ``from_properties`` reads it back.
        """
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[_JAVA_NAMES[f.name]] = _format_value(value)
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

        values: dict[str, Any] = {}
        broker_ip: str | None = None
        listen_port: int | None = None
        for raw_key, raw_value in items:
            key = raw_key.strip()
            name = _field_for_key(key)
            if name is None:
                if key == "brokerIP1" and isinstance(raw_value, str):
                    broker_ip = raw_value.strip()
                elif key == "listenPort":
                    listen_port = _convert(
                        origin, key, _Kind.INT, raw_value, "listen_port"
                    )
                else:
                    _log.debug("%s: ignoring %r: not a store option", origin, key)
                continue
            values[name] = _convert(origin, key, _FIELD_KINDS[name], raw_value, name)

        if "store_host" not in values and (
            broker_ip is not None or listen_port is not None
        ):
            host, port = DEFAULT_STORE_HOST
            if broker_ip is not None:
                if _is_ip_literal(broker_ip):
                    host = broker_ip
                else:
                    _log.debug(
                        "%s: brokerIP1=%r is not an IP literal; store_host keeps %r",
                        origin,
                        broker_ip,
                        host,
                    )
            if listen_port is not None:
                port = listen_port
            values["store_host"] = (host, port)

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


# --------------------------------------------------------------------------
# field kinds and type checks


class _Kind(enum.Enum):
    INT = "int"
    OPT_INT = "int | None"
    BOOL = "bool"
    FLOAT = "float"
    STR = "str"
    OPT_STR = "str | None"
    FLUSH_DISK_TYPE = "FlushDiskType"
    BROKER_ROLE = "BrokerRole"
    HOST = "tuple[str, int]"


def _kind_of(hint: object) -> _Kind:
    table: list[tuple[object, _Kind]] = [
        (bool, _Kind.BOOL),
        (int, _Kind.INT),
        (float, _Kind.FLOAT),
        (str, _Kind.STR),
        (int | None, _Kind.OPT_INT),
        (str | None, _Kind.OPT_STR),
        (FlushDiskType, _Kind.FLUSH_DISK_TYPE),
        (BrokerRole, _Kind.BROKER_ROLE),
        (tuple[str, int], _Kind.HOST),
    ]
    for candidate, kind in table:
        if hint == candidate:
            return kind
    raise AssertionError(f"StoreConfig: unsupported field type {hint!r}")


def _bad(name: str, value: object, why: str) -> typing.NoReturn:
    raise ValueError(f"{name}={value!r}: {why}")


def _in_range(name: str, value: int, low: int, high: int, note: str = "") -> None:
    if not low <= value <= high:
        why = (
            f"must be >= {low}" if high >= _INT64_MAX else f"must be in [{low}, {high}]"
        )
        _bad(name, value, f"{why} {note}".rstrip())


_Checker = Callable[[str, object], object]


def _expected(name: str, value: object, expected: str) -> typing.NoReturn:
    raise TypeError(
        f"{name}={value!r}: expected {expected}, got {type(value).__name__}"
    )


def _check_bool(name: str, value: object) -> object:
    if isinstance(value, bool):
        return value
    _expected(name, value, "a bool")


def _check_int(name: str, value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    _expected(name, value, "an int")


def _check_float(name: str, value: object) -> object:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            _bad(name, value, "must be finite")
        return float(value)
    _expected(name, value, "a float")


def _check_str(name: str, value: object) -> object:
    if name in _PATH_FIELDS and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        return value
    _expected(name, value, "a str")


def _check_host(name: str, value: object) -> object:
    if isinstance(value, (tuple, list)):
        return tuple(value)
    _expected(name, value, "a (host, port) tuple")


def _enum_checker(enum_cls: type[enum.Enum]) -> _Checker:
    def check(name: str, value: object) -> object:
        if isinstance(value, enum_cls):
            return value
        if isinstance(value, str):
            try:
                return enum_cls[value]
            except KeyError:
                _bad(name, value, f"must be one of {', '.join(enum_cls.__members__)}")
        _expected(name, value, f"a {enum_cls.__name__}")

    return check


def _optional(checker: _Checker) -> _Checker:
    def check(name: str, value: object) -> object:
        return None if value is None else checker(name, value)

    return check


_TYPE_CHECKERS: Final[dict[_Kind, _Checker]] = {
    _Kind.BOOL: _check_bool,
    _Kind.INT: _check_int,
    _Kind.OPT_INT: _optional(_check_int),
    _Kind.FLOAT: _check_float,
    _Kind.STR: _check_str,
    _Kind.OPT_STR: _optional(_check_str),
    _Kind.FLUSH_DISK_TYPE: _enum_checker(FlushDiskType),
    _Kind.BROKER_ROLE: _enum_checker(BrokerRole),
    _Kind.HOST: _check_host,
}


def _check_type(name: str, kind: _Kind, value: object) -> object:
    """Check ``value`` against the field kind; return it (normalized where allowed)."""
    return _TYPE_CHECKERS[kind](name, value)


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _check_store_host(value: object) -> None:
    if not isinstance(value, tuple) or len(value) != 2:
        _bad("store_host", value, "must be a (host, port) tuple")
    host, port = value
    if not isinstance(host, str):
        raise TypeError(f"store_host={value!r}: the host must be a str")
    if not isinstance(port, int) or isinstance(port, bool):
        raise TypeError(f"store_host={value!r}: the port must be an int")
    if not _is_ip_literal(host):
        _bad("store_host", value, f"{host!r} is not an IPv4 or IPv6 address literal")
    if not 0 <= port <= _MAX_PORT:
        _bad("store_host", value, f"port {port} is not in [0, 65535]")


def _parse_delete_when(text: str) -> list[int]:
    hours: list[int] = []
    for part in text.split(";"):
        token = part.strip()
        if not re.fullmatch(r"\d{1,2}", token) or int(token) > _LAST_HOUR:
            _bad(
                "delete_when",
                text,
                f"must be ';'-separated hours 0..23 (bad part {token!r})",
            )
        hours.append(int(token))
    return hours


def _parse_delay_levels(text: str) -> list[int]:
    # The engine's grammar (the engine parses the same string at open).
    try:
        return _native.parse_delay_levels(text)
    except ValueError as exc:
        _bad("message_delay_level", text, str(exc))


# --------------------------------------------------------------------------
# properties: key names, value conversion, file reading

# RocketMQ names that camelCase -> snake_case (plus Maped -> mapped) does not give.
_JAVA_NAME_OVERRIDES: Final = {
    "store_path": "storePathRootDir",
    "warm_mapped_file_enable": "warmMapedFileEnable",
    "flush_least_pages_when_warm_mapped_file": "flushLeastPagesWhenWarmMapedFile",
    "destroy_mapped_file_interval_forcibly": "destroyMapedFileIntervalForcibly",
    "check_crc_on_recover": "checkCRCOnRecover",
    "enabled_append_prop_crc": "enabledAppendPropCRC",
    "force_verify_prop_crc": "forceVerifyPropCRC",
}
_PATH_FIELDS: Final = frozenset({"store_path", "store_path_commit_log"})
_RATIO_FIELDS: Final = frozenset(
    {"disk_space_warning_level_ratio", "disk_space_clean_forcibly_ratio"}
)


def _snake_to_camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def _camel_to_snake(key: str) -> str:
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", key)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return "_".join("mapped" if part == "maped" else part for part in s.split("_"))


def _field_for_key(key: str) -> str | None:
    name = _KEY_TO_FIELD.get(key)
    if name is None:
        candidate = _camel_to_snake(key)
        if candidate in _FIELD_KINDS:
            name = candidate
    return name


def _parse_host(text: str) -> tuple[str, int]:
    text = text.strip()
    match = re.fullmatch(r"\[([^\]]+)\]:(\d+)", text) or re.fullmatch(
        r"([^:]+):(\d+)", text
    )
    if match is None:
        # a bare IPv6 literal with the port after the last colon
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or not _is_ip_literal(host):
            raise ValueError("expected ip:port or [ipv6]:port")
        return host, int(port)
    return match.group(1), int(match.group(2))


def _text_to_int(text: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ValueError("expected an integer")
    return int(text)


def _text_to_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError("expected true or false")
    return lowered == "true"


def _text_to_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    return number


def _text_to_enum(enum_cls: type[enum.Enum]) -> Callable[[str], object]:
    def convert(text: str) -> object:
        try:
            return enum_cls[text.upper()]
        except KeyError:
            raise ValueError(
                f"expected one of {', '.join(enum_cls.__members__)}"
            ) from None

    return convert


_TEXT_CONVERTERS: Final[dict[_Kind, Callable[[str], object]]] = {
    _Kind.BOOL: _text_to_bool,
    _Kind.INT: _text_to_int,
    _Kind.OPT_INT: _text_to_int,
    _Kind.FLOAT: _text_to_float,
    _Kind.STR: str,
    _Kind.OPT_STR: str,
    _Kind.FLUSH_DISK_TYPE: _text_to_enum(FlushDiskType),
    _Kind.BROKER_ROLE: _text_to_enum(BrokerRole),
    _Kind.HOST: _parse_host,
}


def _percent_to_fraction(value: object) -> object:
    """A disk ratio given as RocketMQ 5.x integer percent (> 1) becomes a fraction."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1:
        return value / 100
    return value


def _convert(origin: str, key: str, kind: _Kind, raw: object, name: str) -> Any:
    """Convert one property value for field ``name`` (ValueError names ``key``)."""
    if isinstance(raw, str):
        text = raw.strip()
        if text == "" and kind in (_Kind.OPT_INT, _Kind.OPT_STR):
            return None
        try:
            value = _TEXT_CONVERTERS[kind](text)
        except ValueError as exc:
            raise ValueError(f"{origin}: {key}={raw!r}: {exc} (field {name})") from None
    else:
        value = raw  # already typed (a mapping of values): the constructor checks it
    if name in _RATIO_FIELDS:
        value = _percent_to_fraction(value)
    return value


def _format_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, tuple):
        host, port = value
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(value)


# Built once the class exists: field -> kind, field -> RocketMQ key, key -> field.
_FIELD_KINDS: Final[dict[str, _Kind]] = {
    name: _kind_of(hint) for name, hint in typing.get_type_hints(StoreConfig).items()
}
_JAVA_NAMES: Final[dict[str, str]] = {
    name: _JAVA_NAME_OVERRIDES.get(name, _snake_to_camel(name)) for name in _FIELD_KINDS
}
_KEY_TO_FIELD: Final[dict[str, str]] = {
    java: name for name, java in _JAVA_NAMES.items()
}

#: Default value of every field (for the inert-field warning).
_DEFAULTS: Final[dict[str, object]] = {
    f.name: f.default for f in dataclasses.fields(StoreConfig) if f.name in _INERT
}
