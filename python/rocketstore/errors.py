"""The exception hierarchy. Every engine error surfaces as one of these.

``StoreError`` is the root. I/O failures from the operating system are raised
as :class:`OSError` (with ``errno`` set, so ``FileNotFoundError`` and friends
work); a read-only open of a directory that holds no store (or does not
exist) is a :class:`NotAStoreError`, also a ``FileNotFoundError``; bad
arguments from the caller, and only those, as :class:`ValueError` /
:class:`TypeError`. Damaged files (a gap between segments, a misaligned or
wrong-length segment, a bad record) are :class:`CorruptedError`; a broken
engine invariant is an :class:`InternalError`, a bug to report.
"""

from __future__ import annotations

__all__ = [
    "ConfigMismatchError",
    "ConsumerGroupBusyError",
    "CorruptedError",
    "InternalError",
    "NotAStoreError",
    "PoisonedError",
    "ReadOnlyStoreError",
    "RecoveryOrderError",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
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
    """
