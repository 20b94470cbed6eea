"""``MessageStore``: the public face of a store directory.

A store is a directory laid out as RocketMQ's broker lays it out (CommitLog
segments, consume queues, index files, checkpoint). ``MessageStore`` opens it,
takes the single-writer lock, recovers, and serves puts and reads. The hot
paths (encoding, appending, reading) run in the Rust engine; this class
orchestrates.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import weakref
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

from rocketstore._native import Message, MessageExt, NativeStore, PutResult
from rocketstore.config import FlushDiskType, StoreConfig
from rocketstore.errors import StoreClosedError

__all__ = ["MessageStore", "RecoveryReport"]

log = logging.getLogger("rocketstore")


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the store found and repaired.

    Attributes:
        mode: how the CommitLog end was found (``"scan"``).
        files_scanned: CommitLog files read.
        bytes_scanned: bytes of valid records read.
        records: valid records found.
        end_offset: physical offset just past the last valid record.
        bytes_truncated: bytes cut (and zeroed) after the valid end.
        stop_reason: why the scan stopped before the end of written data, if it did.
    """

    mode: str
    files_scanned: int
    bytes_scanned: int
    records: int
    end_offset: int
    bytes_truncated: int
    stop_reason: str | None


# Live stores, so a forked child can disarm the handles it inherited.
_LIVE: weakref.WeakSet[MessageStore] = weakref.WeakSet()

# Methods bound straight to the native store once started: a put then costs
# one native call, not a Python frame plus a native call (measured: the frame
# roughly doubles the cost of a small put).
_FAST_METHODS = ("put", "put_message", "put_messages", "look_message_by_offset")


def _after_fork_in_child() -> None:
    for store in list(_LIVE):
        store._disarm("store handles do not survive fork(); open the store again")


os.register_at_fork(after_in_child=_after_fork_in_child)


def _closed_method(why: str) -> Any:
    def closed(*args: Any, **kwargs: Any) -> Any:
        raise StoreClosedError(why)

    return closed


def _as_config(config: StoreConfig | str | os.PathLike[str]) -> StoreConfig:
    if isinstance(config, StoreConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return StoreConfig(store_path=os.fspath(config))
    raise TypeError(f"config must be a StoreConfig or a path, not {type(config).__name__}")


class MessageStore:
    """A RocketMQ-compatible message store.

    Args:
        config: a :class:`StoreConfig`, or just the store directory.
        read_only: open without taking the writer lock; never writes a byte
            and never repairs anything, so it can read a store that another
            process is writing.

    Use it as a context manager (``with MessageStore(cfg) as store:``), or
    call :meth:`start` and :meth:`shutdown` yourself. Nothing touches the
    disk before :meth:`start`.

    >>> import tempfile
    >>> store = MessageStore(tempfile.mkdtemp()).start()
    >>> store.put("orders", b"x").queue_offset
    0
    >>> store.shutdown()
    """

    def __init__(
        self, config: StoreConfig | str | os.PathLike[str], *, read_only: bool = False
    ) -> None:
        self._config = _as_config(config)
        self._read_only = read_only
        self._native: NativeStore | None = None
        self._recovery: RecoveryReport | None = None
        self._closed_reason = "store is not started; call start() or use `with`"

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> MessageStore:
        """Lock, load and recover the store; returns ``self``.

        Raises:
            StoreLockedError: another writer holds the store.
            ConfigMismatchError: the files disagree with the configuration.
            CorruptedError: a file is damaged beyond what recovery repairs.
        """
        if self._native is not None and not self._native.closed:
            return self
        cfg = self._config
        if not self._read_only:
            os.makedirs(cfg.store_path, exist_ok=True)
        native = NativeStore(
            cfg.store_path,
            str(cfg.commit_log_dir),
            cfg.mapped_file_size_commit_log,
            cfg.max_message_size,
            cfg.store_host,
            cfg.message_delay_level,
            cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            self._read_only,
        )
        try:
            report = RecoveryReport(**native.recover(cfg.check_crc_on_recover))
        except BaseException:
            native.shutdown()
            raise
        if report.bytes_truncated or report.stop_reason:
            log.warning(
                "recovered %s: valid data ends at %d, %d bytes truncated (%s)",
                cfg.store_path,
                report.end_offset,
                report.bytes_truncated,
                report.stop_reason or "torn tail",
            )
        else:
            log.info("opened %s: %d records, end %d", cfg.store_path, report.records,
                     report.end_offset)
        self._config = cfg.replace(mapped_file_size_commit_log=native.commit_log_file_size)
        self._recovery = report
        self._native = native
        for name in _FAST_METHODS:
            self.__dict__[name] = getattr(native, name)
        _LIVE.add(self)
        return self

    def _disarm(self, why: str) -> None:
        """Make every call raise StoreClosedError (after fork in the child)."""
        self._native = None
        self._closed_reason = why
        for name in _FAST_METHODS:
            self.__dict__[name] = _closed_method(why)

    def shutdown(self) -> None:
        """Flush and close. Idempotent; later calls raise :class:`StoreClosedError`."""
        if self._native is not None:
            self._native.shutdown()

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
        return (MessageStore, (self._config,), {"_read_only": self._read_only})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._read_only = state["_read_only"]

    def __repr__(self) -> str:
        state = "closed" if self._native is None or self._native.closed else "open"
        ro = ", read_only" if self._read_only else ""
        return f"MessageStore({self._config.store_path!r}{ro}, {state})"

    @property
    def _n(self) -> NativeStore:
        n = self._native
        if n is None:
            raise StoreClosedError(self._closed_reason)
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
                and n.poison_reason is None)

    @property
    def running_flags(self) -> list[str]:
        """Why puts are refused, if they are (empty when writeable)."""
        n = self._native
        flags: list[str] = []
        if n is None or n.closed:
            flags.append("CLOSED")
        if self._read_only:
            flags.append("READ_ONLY")
        if n is not None and n.poison_reason is not None:
            flags.append(f"NOT_WRITEABLE: {n.poison_reason}")
        return flags

    # -- writes ------------------------------------------------------------

    def put_message(self, msg: Message) -> PutResult:
        """Append one message; returns its :class:`PutResult`.

        A rejected message (illegal topic, too large, ...) gets its status and
        nothing is written.
        """
        return self._n.put_message(msg)

    def put_messages(self, msgs: Sequence[Message] | Iterable[Message]) -> list[PutResult]:
        """Append messages in order under one lock and one flush wait.

        Messages may go to any topics and queues; a rejected message gets its
        status and is skipped, the others are written.
        """
        return self._n.put_messages(msgs)

    def put(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        tags: str | None = None,
        keys: Sequence[str] | str | None = None,
        properties: dict[str, str] | None = None,
        delay_level: int = 0,
        flag: int = 0,
        born_timestamp: int | None = None,
        born_host: tuple[str, int] | None = None,
        sys_flag: int = 0,
    ) -> PutResult:
        """Append one message given as arguments (the fast path: no ``Message``)."""
        return self._n.put(topic, body, queue_id, tags, keys, properties, delay_level, flag,
                           born_timestamp, born_host, sys_flag)

    def flush(self) -> int:
        """Force everything written to disk; returns the flushed CommitLog offset."""
        return self._n.flush()

    # -- reads -------------------------------------------------------------

    def look_message_by_offset(self, phy_offset: int) -> MessageExt | None:
        """The message whose record starts at CommitLog offset ``phy_offset``."""
        return self._n.look_message_by_offset(phy_offset)

    def look_message_by_id(self, msg_id: str) -> MessageExt | None:
        """The message with offset message id ``msg_id`` (as in :attr:`PutResult.msg_id`)."""
        return self._n.look_message_by_id(msg_id)

    def queue_offset_table(self) -> dict[tuple[str, int], int]:
        """Next queue offset of every ``(topic, queue_id)`` written so far."""
        return self._n.queue_offset_table()
