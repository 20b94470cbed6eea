"""The exception hierarchy. Every engine error surfaces as one of these.

``StoreError`` is the root. I/O failures from the operating system are raised
as :class:`OSError` (with ``errno`` set, so ``FileNotFoundError`` and friends
work); a read-only open of a directory that holds no store (or does not
exist) is a :class:`NotAStoreError`, also a ``FileNotFoundError``; bad
arguments from the caller, and only those, as :class:`ValueError` /
:class:`TypeError`. Damaged files (a gap between segments, a misaligned or
wrong-length segment, a bad record) are :class:`CorruptedError`; a broken
engine invariant is an :class:`InternalError`, a bug to report.

A put that stores nothing raises :class:`MessageRefusedError` (its
``status``, ``reason`` and ``result``); when the caller's message broke a
rule (``MESSAGE_ILLEGAL``, ``PROPERTIES_SIZE_EXCEEDED``) it is an
:class:`InvalidMessageError`, also a ``ValueError``. A put that stored the
message but could not confirm it on disk in time (``FLUSH_DISK_TIMEOUT``)
raises :class:`StoredNotFlushedError`, which is *not* a refusal: putting the
message again would store it twice. ``check=False`` on a put returns the
result with its status instead of raising.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from rocketstore._native import BatchPutResult, PutResult
    from rocketstore.enums import PutStatus

__all__ = [
    "ConfigMismatchError",
    "ConsumerGroupBusyError",
    "CorruptedError",
    "FencedError",
    "InternalError",
    "InvalidMessageError",
    "MessageRefusedError",
    "NotAStoreError",
    "PoisonedError",
    "ReadOnlyStoreError",
    "RecoveryOrderError",
    "SlaveOffsetsError",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
    "StoredNotFlushedError",
    "UnknownTopicWarning",
]


class StoreError(Exception):
    """Base class of rocketstore's own errors."""


class CorruptedError(StoreError):
    """Bytes on disk do not form a valid structure (the message names file and offset)."""


class ConfigMismatchError(StoreError, ValueError):
    """The files on disk disagree with the configuration or with each other."""


class StoreLockedError(StoreError):
    """Another writer, in this or another process, holds the store's lock."""


class ConsumerGroupBusyError(StoreError):
    """Another open consumer (in this or another process) holds the consumer
    group on that topic: a second consumer, or a reset or delete of the
    group's offsets, is refused until it closes (``docs/format.md``, §13.1)."""


class FencedError(ConsumerGroupBusyError):
    """A consumer group member lost a queue: its lease lapsed (a freeze, a
    full disk, no heartbeat within the session timeout) or another member
    owns the queue now. A commit of that queue's position is refused, and
    the message names the queue, its current owner (id and pid) and the
    owner's epoch (``docs/format.md``, §13.2)."""


class StoreClosedError(StoreError):
    """The store is not started, or was shut down."""


class NotAStoreError(StoreError, FileNotFoundError):
    """A read-only open found no store: the directory does not exist, or holds
    none of a store's entries (``commitlog/``, ``consumequeue/``, ``index/``,
    ``checkpoint``, ``config/``, ...). ``errno`` is ``ENOENT``.

    ``MessageStore(cfg, read_only=True, wait_for_writer=True)`` opens an
    existing directory that holds no store yet as an empty store that follows
    the writer once it starts.
    """


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a store opened with ``read_only=True``."""


class SlaveOffsetsError(ReadOnlyStoreError):
    """A commit (or reset, or delete) of consumer offsets on a ``SLAVE`` store.

    A slave's consumer offsets are its master's, replaced by each sync
    (``docs/format.md`` §21.7): commit on the master. Consumers on a slave
    read as anywhere, starting from the synced offsets; their auto-commits
    keep the positions in the consumer only.
    """


class RecoveryOrderError(StoreError):
    """A recovery step was called out of order, or the store was used before
    its recovery finished (the engine enforces RocketMQ's recovery order)."""


class PoisonedError(StoreError):
    """A write or flush failed; the store refuses writes until reopened."""


class InternalError(StoreError):
    """An engine invariant does not hold: a bug in rocketstore (please report it).

    Never caused by the caller's input or by the files on disk.
    """


class UnknownTopicWarning(UserWarning):
    """A read named a topic, or a queue of a topic, that the store does not
    hold (yet): it returns nothing. The message names the topic and the topics
    (or queues) the store does hold. Issued once per store, topic and queue.

    Not an error: a topic appears with its first message, so a reader (a
    read-only follower above all) may ask before the writer wrote it. Turn it
    into one with ``warnings.simplefilter("error", UnknownTopicWarning)``.

    When it fires: every one-shot read (``get_message``, ``get_arrow``,
    ``read_arrow``, ``query_message``) of what the store does not hold, and
    ``store.consumer(...)`` / ``async_consumer(...)`` of a read-only store.
    A consumer of a store opened for writing (a service that starts its
    consumers before its first put, which makes the topic) is not warned
    of, unless its topic looks like a misspelling of a topic the store
    holds: then the warning says which (``did you mean 'orders'?``).
    """


#: What a put returned: one message's result, a batch's, or ``put_messages``'s list.
PutOutcome = Union["PutResult", "BatchPutResult", "list[PutResult]"]


class _PutError(StoreError):
    """A put's outcome as an exception: the status, the reason and the result."""

    status: PutStatus
    reason: str | None
    result: PutOutcome

    def __init__(self, message: str, status: PutStatus, reason: str | None,
                 result: PutOutcome) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.result = result

    def __reduce__(self) -> tuple[object, ...]:
        # Results are engine objects that do not pickle: a copy keeps the rest.
        return (type(self), (str(self), self.status, self.reason, []))


class MessageRefusedError(_PutError):
    """A put stored nothing: ``status`` (a :class:`~rocketstore.PutStatus`)
    says why, ``reason`` in a sentence, ``result`` is the put's result.

    Raised by ``put``, ``put_message`` and ``put_batch`` (the whole batch was
    refused: nothing of it is stored) unless they are called with
    ``check=False``. Refusals caused by the message itself are an
    :class:`InvalidMessageError`; the others come from the store's state
    (``SERVICE_NOT_AVAILABLE``: read-only, poisoned or disk full;
    ``CREATE_MAPPED_FILE_FAILED``: no CommitLog file could be made;
    ``OS_PAGE_CACHE_BUSY``: the put lock was held too long) and a later put
    may succeed.

    ``put_messages`` writes every acceptable message, then raises one error
    naming each refused message: ``refused`` maps their indexes to their
    results and ``result`` is the list of every result (in order). For the
    other puts ``refused`` is empty.
    """

    refused: dict[int, PutResult]

    def __init__(self, message: str, status: PutStatus, reason: str | None,
                 result: PutOutcome, refused: dict[int, PutResult] | None = None) -> None:
        super().__init__(message, status, reason, result)
        self.refused = {} if refused is None else refused


class InvalidMessageError(MessageRefusedError, ValueError):
    """A put refused because of the message the caller gave
    (``MESSAGE_ILLEGAL``: a field breaks a rule, the ``reason`` names it;
    ``PROPERTIES_SIZE_EXCEEDED``). Also a ``ValueError``: putting the same
    message again is refused again."""


class StoredNotFlushedError(_PutError):
    """The message (or the whole batch) IS stored, but was not confirmed on
    disk within ``sync_flush_timeout`` (``SYNC_FLUSH``; status
    ``FLUSH_DISK_TIMEOUT``), or on a ``SYNC_MASTER`` not confirmed by a slave
    (``FLUSH_SLAVE_TIMEOUT`` after ``slave_timeout``; ``SLAVE_NOT_AVAILABLE``
    when no slave is connected or the best one is ``ha_slave_fallbehind_max``
    behind). Do not put it again: that stores it twice.

    ``result`` carries its offsets, as for a successful put. The flush goes on
    in the background; a power loss before it completes may lose the message.
    Not a :class:`MessageRefusedError`.
    """


#: Statuses of a put that stored the message without confirming the flush.
_STORED_STATUSES = frozenset({"FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"})
#: Refusals caused by the caller's message.
_INVALID_STATUSES = frozenset({"MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED"})


def _refusal_class(status: PutStatus) -> type[MessageRefusedError]:
    return InvalidMessageError if status.name in _INVALID_STATUSES else MessageRefusedError


def _confirmed_where(status: PutStatus) -> str:
    """What a stored status did not confirm: the disk, or a slave."""
    return "on disk" if status.name == "FLUSH_DISK_TIMEOUT" else "by a slave"


def _put_error(result: PutResult | BatchPutResult) -> StoreError:
    """The exception for one put's or one batch's result that is not ``PUT_OK``
    (the engine calls this, only then)."""
    status = result.status
    reason = result.reason
    why = f" ({reason})" if reason else ""
    count: int | None = getattr(result, "count", None)  # a batch's result
    batch = count is not None
    if status.name in _STORED_STATUSES:
        what = (f"batch of {count} messages stored from CommitLog offset "
                if batch else "message stored at CommitLog offset ")
        return StoredNotFlushedError(
            f"{what}{result.wrote_offset} (queue offset {result.queue_offset}) but not "
            f"confirmed {_confirmed_where(status)} in time: {status.name}{why}; it is "
            "stored, do not put it again", status, reason, result)
    what = "batch refused, nothing stored" if batch else "message refused, nothing stored"
    return _refusal_class(status)(f"{what}: {status.name}{why}", status, reason, result)


def _put_messages_error(results: Sequence[PutResult]) -> StoreError:
    """The one exception for ``put_messages`` results of which some are not
    ``PUT_OK`` (the engine calls this, only then)."""
    results = list(results)
    refused = {i: r for i, r in enumerate(results) if not r.ok
               and r.status.name not in _STORED_STATUSES}
    unflushed = [i for i, r in enumerate(results) if r.status.name in _STORED_STATUSES]
    late = (f"; {len(unflushed)} stored but not confirmed on disk in time "
            f"(FLUSH_DISK_TIMEOUT), do not put them again") if unflushed else ""
    if not refused:
        first = results[unflushed[0]]
        return StoredNotFlushedError(
            f"all {len(results)} messages stored{late}", first.status, first.reason, results)
    first_i = next(iter(refused))
    first = refused[first_i]
    each = "; ".join(f"message {i}: {r.status.name}" + (f" ({r.reason})" if r.reason else "")
                     for i, r in refused.items())
    invalid = all(r.status.name in _INVALID_STATUSES for r in refused.values())
    cls = InvalidMessageError if invalid else MessageRefusedError
    if len(refused) == len(results):
        what = f"all {len(results)} messages refused, nothing stored"
    else:
        what = f"{len(refused)} of {len(results)} messages refused, the others are stored"
    return cls(f"{what}{late}: {each}", first.status, each, results, refused)
