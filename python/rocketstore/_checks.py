"""Argument checks shared by the public classes (Java int/long ranges)."""

from __future__ import annotations

import datetime
from typing import overload

#: Largest Java int (queue ids) and Java long (offsets).
I32_MAX = 2**31 - 1
I64_MAX = 2**63 - 1


def int_arg(name: str, value: object, lo: int, hi: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in ``[lo, hi]``; else TypeError/ValueError,
    in the engine's words (``queue_id must be int, not bool``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} is out of range: {value} is over {hi}")
    return value


def count_arg(name: str, value: object) -> int:
    """``value`` if it is an int (not a bool) above 0; else TypeError/ValueError,
    in the engine's words (``max_msg_nums must be > 0, got 0``)."""
    int_arg(name, value, -(2**63))
    assert isinstance(value, int)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


@overload
def ms_arg(value: None) -> None: ...
@overload
def ms_arg(value: int | datetime.datetime) -> int: ...
def ms_arg(value: int | datetime.datetime | None) -> int | None:
    """A time in ms since the epoch: a ``datetime`` becomes its ms (a naive one
    is local time, as ``datetime.timestamp()`` reads it); anything else is
    passed on for the engine to check."""
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.astimezone()
        return (aware - _EPOCH) // _MS
    return value
