"""The exception hierarchy. Every engine error surfaces as one of these.

``StoreError`` is the root. I/O failures from the operating system are raised
as :class:`OSError` (with ``errno`` set, so ``FileNotFoundError`` and friends
work: a missing store opened read-only is a ``FileNotFoundError``); bad
arguments from the caller, and only those, as :class:`ValueError` /
:class:`TypeError`. Damaged files (a gap between segments, a misaligned or
wrong-length segment, a bad record) are :class:`CorruptedError`; a broken
engine invariant is an :class:`InternalError`, a bug to report.
"""

from __future__ import annotations

__all__ = [
    "ConfigMismatchError",
    "CorruptedError",
    "InternalError",
    "PoisonedError",
    "ReadOnlyStoreError",
    "RecoveryOrderError",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
]


class StoreError(Exception):
    """Base class of rocketstore's own errors."""


class CorruptedError(StoreError):
    """Bytes on disk do not form a valid structure (the message names file and offset)."""


class ConfigMismatchError(StoreError, ValueError):
    """The files on disk disagree with the configuration or with each other."""


class StoreLockedError(StoreError):
    """Another writer, in this or another process, holds the store's lock."""


class StoreClosedError(StoreError):
    """The store is not started, or was shut down."""


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
