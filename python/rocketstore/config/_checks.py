"""Validation of a :class:`~rocketstore.config.StoreConfig`.

A field's *kind* follows from its type hint (:func:`kind_of`); each kind has
one type check (:func:`checker_for`), which may normalize the value (a path
to ``str``, a list to a tuple, an enum member name to the member). The range
checks run after every type check, in named steps (:func:`check_ranges`), and
the two strings with a grammar have one parser each here
(:func:`parse_delete_when`; the delay levels are the engine's grammar).
"""

from __future__ import annotations

import datetime
import enum
import ipaddress
import math
import os
import re
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from rocketstore import _native
from rocketstore._checks import I32_MAX, I64_MAX

if TYPE_CHECKING:
    from rocketstore.config.store_config import StoreConfig

#: Smallest CommitLog segment: a minimal record (91 bytes) plus the 8-byte end-of-file blank.
MIN_MAPPED_FILE_SIZE_COMMIT_LOG: Final[int] = (
    _native.MIN_RECORD_SIZE + _native.END_FILE_MIN_BLANK_LENGTH
)

_MAX_PORT: Final = 65535
#: Longest consumer heartbeat interval or session timeout, seconds (one day).
_MAX_CONSUMER_SECONDS: Final = 86_400.0
_LAST_HOUR: Final = 23

#: Fields that also accept an :class:`os.PathLike` (stored as ``str``).
PATH_FIELDS: Final = frozenset({"store_path", "store_path_commit_log"})


class Kind(enum.Enum):
    """The type of a field that is not an enum."""

    INT = "int"
    OPT_INT = "int | None"
    BOOL = "bool"
    FLOAT = "float"
    STR = "str"
    OPT_STR = "str | None"
    HOST = "tuple[str, int]"


#: A field's kind: one of :class:`Kind`, or the enum class it holds.
FieldKind = Kind | type[enum.Enum]


def kind_of(hint: object) -> FieldKind:
    """The kind of a field whose type hint is ``hint``."""
    table: list[tuple[object, Kind]] = [
        (bool, Kind.BOOL),
        (int, Kind.INT),
        (float, Kind.FLOAT),
        (str, Kind.STR),
        (int | None, Kind.OPT_INT),
        (str | None, Kind.OPT_STR),
        (tuple[str, int], Kind.HOST),
    ]
    for candidate, kind in table:
        if hint == candidate:
            return kind
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    raise AssertionError(f"StoreConfig: unsupported field type {hint!r}")


def bad(name: str, value: object, why: str) -> typing.NoReturn:
    """Raise the ``ValueError`` of a field value out of its range or grammar."""
    raise ValueError(f"{name}={value!r}: {why}")


def in_range(name: str, value: int, low: int, high: int, note: str = "") -> None:
    """``value`` must be in ``[low, high]`` (``high`` >= I64_MAX: no upper bound)."""
    if not low <= value <= high:
        why = f"must be >= {low}" if high >= I64_MAX else f"must be in [{low}, {high}]"
        bad(name, value, f"{why} {note}".rstrip())


# --------------------------------------------------------------------------
# type checks

Checker = Callable[[str, object], object]


def _expected(name: str, value: object, expected: str) -> typing.NoReturn:
    raise TypeError(f"{name}={value!r}: expected {expected}, got {type(value).__name__}")


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
            bad(name, value, "must be finite")
        return float(value)
    _expected(name, value, "a float")


def _check_str(name: str, value: object) -> object:
    if name in PATH_FIELDS and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        return value
    _expected(name, value, "a str")


def _check_host(name: str, value: object) -> object:
    if isinstance(value, (tuple, list)):
        return tuple(value)
    _expected(name, value, "a (host, port) tuple")


def _enum_checker(enum_cls: type[enum.Enum]) -> Checker:
    def check(name: str, value: object) -> object:
        if isinstance(value, enum_cls):
            return value
        if isinstance(value, str):
            try:
                return enum_cls[value]
            except KeyError:
                bad(name, value, f"must be one of {', '.join(enum_cls.__members__)}")
        _expected(name, value, f"a {enum_cls.__name__}")

    return check


def _optional(checker: Checker) -> Checker:
    def check(name: str, value: object) -> object:
        return None if value is None else checker(name, value)

    return check


_TYPE_CHECKERS: Final[dict[Kind, Checker]] = {
    Kind.BOOL: _check_bool,
    Kind.INT: _check_int,
    Kind.OPT_INT: _optional(_check_int),
    Kind.FLOAT: _check_float,
    Kind.STR: _check_str,
    Kind.OPT_STR: _optional(_check_str),
    Kind.HOST: _check_host,
}


#: Fields counted in hours: they also take fractions of an hour and a
#: ``datetime.timedelta``.
HOUR_FIELDS: Final = ("file_reserved_time",)


def check_hours(name: str, value: object) -> object:
    """An age in hours: an int, a float or a ``datetime.timedelta``.

    Whole hours are kept as an ``int`` (``2.0`` and ``timedelta(hours=2)``
    become ``2``), fractions as a ``float`` (``timedelta(minutes=30)`` is
    ``0.5``).
    """
    if isinstance(value, datetime.timedelta):
        hours: float = value / datetime.timedelta(hours=1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        hours = value
    else:
        _expected(name, value, "hours as an int, a float or a datetime.timedelta")
    if not math.isfinite(hours):
        bad(name, value, "must be finite")
    if isinstance(hours, float) and hours.is_integer():
        return int(hours)
    return hours


def whole_hours(value: float) -> int:
    """``value`` hours as RocketMQ reads them (an int): fractions round up, so a
    broker keeps files at least as long as asked."""
    return math.ceil(value)


def checker_for(kind: FieldKind) -> Checker:
    """The type check of a field of ``kind``: returns the value, normalized where allowed."""
    if isinstance(kind, Kind):
        return _TYPE_CHECKERS[kind]
    return _enum_checker(kind)


# --------------------------------------------------------------------------
# the strings with a grammar


def is_ip_literal(host: str) -> bool:
    """True for an IPv4 or IPv6 address literal."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _check_store_host(value: object) -> None:
    if not isinstance(value, tuple) or len(value) != 2:
        bad("store_host", value, "must be a (host, port) tuple")
    host, port = value
    if not isinstance(host, str):
        raise TypeError(f"store_host={value!r}: the host must be a str")
    if not isinstance(port, int) or isinstance(port, bool):
        raise TypeError(f"store_host={value!r}: the port must be an int")
    if not is_ip_literal(host):
        bad("store_host", value, f"{host!r} is not an IPv4 or IPv6 address literal")
    if not 0 <= port <= _MAX_PORT:
        bad("store_host", value, f"port {port} is not in [0, 65535]")


def parse_delete_when(text: str) -> list[int]:
    """The hours of the day named by ``delete_when`` (``"a;b"``, each 0..23)."""
    hours: list[int] = []
    for part in text.split(";"):
        token = part.strip()
        if not re.fullmatch(r"\d{1,2}", token) or int(token) > _LAST_HOUR:
            bad(
                "delete_when",
                text,
                f"must be ';'-separated hours 0..23 (bad part {token!r})",
            )
        hours.append(int(token))
    return hours


def parse_delay_levels(text: str) -> list[int]:
    """Milliseconds per delay level (level 1 first): the engine's grammar."""
    try:
        return _native.parse_delay_levels(text)
    except ValueError as exc:
        bad("message_delay_level", text, str(exc))


# --------------------------------------------------------------------------
# range checks, in the order a config is checked


def check_ranges(cfg: StoreConfig) -> None:
    """Check every field's range (after the type checks); the first offence raises.

    Rounds ``mapped_file_size_consume_queue`` up to whole units on the way.
    """
    _check_paths_and_host(cfg)
    _check_segment_sizes(cfg)
    _check_periods_and_counts(cfg)
    _check_index_geometry(cfg)
    _check_ratios_and_ports(cfg)
    # strings with a grammar
    parse_delete_when(cfg.delete_when)
    parse_delay_levels(cfg.message_delay_level)


def _check_paths_and_host(cfg: StoreConfig) -> None:
    if not cfg.store_path:
        bad("store_path", cfg.store_path, "must be a non-empty path")
    if cfg.store_path_commit_log is not None:
        if not cfg.store_path_commit_log:
            bad(
                "store_path_commit_log",
                cfg.store_path_commit_log,
                "must be a non-empty path or None",
            )
        if "," in cfg.store_path_commit_log:
            bad(
                "store_path_commit_log",
                cfg.store_path_commit_log,
                "multi-path CommitLogs (',' separated) are not supported",
            )
    _check_store_host(cfg.store_host)
    if cfg.on_corruption not in ("refuse", "skip"):
        bad("on_corruption", cfg.on_corruption, 'must be "refuse" or "skip"')


def _check_segment_sizes(cfg: StoreConfig) -> None:
    if cfg.mapped_file_size_commit_log is not None:
        in_range(
            "mapped_file_size_commit_log",
            cfg.mapped_file_size_commit_log,
            MIN_MAPPED_FILE_SIZE_COMMIT_LOG,
            I32_MAX,
            f"(a minimal {_native.MIN_RECORD_SIZE}-byte record plus the "
            f"{_native.END_FILE_MIN_BLANK_LENGTH}-byte blank must fit)",
        )
    if cfg.mapped_file_size_consume_queue is not None:
        size = cfg.mapped_file_size_consume_queue
        in_range("mapped_file_size_consume_queue", size, 1, I32_MAX)
        unit = _native.CQ_STORE_UNIT_SIZE
        rounded = -(-size // unit) * unit
        if rounded > I32_MAX:
            bad(
                "mapped_file_size_consume_queue",
                size,
                f"rounds up to {rounded}, above {I32_MAX}",
            )
        object.__setattr__(cfg, "mapped_file_size_consume_queue", rounded)
    in_range(
        "mapped_file_size_consume_queue_ext",
        cfg.mapped_file_size_consume_queue_ext,
        1,
        I32_MAX,
    )
    in_range(
        "bit_map_length_consume_queue_ext",
        cfg.bit_map_length_consume_queue_ext,
        0,
        I32_MAX,
    )


#: Periods the services sleep for: must be positive.
_PERIODS: Final = (
    "flush_interval_commit_log",
    "commit_interval_commit_log",
    "flush_interval_consume_queue",
    "clean_resource_interval",
    "flush_delay_offset_interval",
    "sync_flush_timeout",
    "slave_timeout",
    "ha_send_heartbeat_interval",
    "ha_housekeeping_interval",
    "ha_offsets_interval",
    "put_message_timeout",
    "os_page_cache_busy_time_out_mills",
)
#: Page counts, pauses and ages where zero means "no threshold".
_THRESHOLDS: Final = (
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
)
#: Counts and limits that must allow at least one (Java ints).
_COUNTS: Final = (
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
)


def _check_periods_and_counts(cfg: StoreConfig) -> None:
    for name in _PERIODS:
        in_range(name, getattr(cfg, name), 1, I64_MAX)
    for name in _THRESHOLDS:
        in_range(name, getattr(cfg, name), 0, I64_MAX)
    for name in _COUNTS:
        in_range(name, getattr(cfg, name), 1, I32_MAX)
    if cfg.max_store_size_bytes is not None:
        in_range("max_store_size_bytes", cfg.max_store_size_bytes, 1, I64_MAX)
    _check_consumer_intervals(cfg)


def _check_consumer_intervals(cfg: StoreConfig) -> None:
    """A member heartbeats more often than its session times out (§13.2)."""
    beat, timeout = cfg.consumer_heartbeat_interval, cfg.consumer_session_timeout
    for name, value in (("consumer_heartbeat_interval", beat),
                        ("consumer_session_timeout", timeout)):
        if not 0.0 < value <= _MAX_CONSUMER_SECONDS:
            bad(name, value, f"must be in (0, {_MAX_CONSUMER_SECONDS:g}] seconds")
    if not beat < timeout:
        bad("consumer_heartbeat_interval", beat,
            f"must be less than consumer_session_timeout ({timeout:g}): a member "
            "would lose its queues between two heartbeats")


def _check_index_geometry(cfg: StoreConfig) -> None:
    # the IndexFile's size is a Java int
    in_range("max_hash_slot_num", cfg.max_hash_slot_num, 1, I32_MAX)
    in_range("max_index_num", cfg.max_index_num, 1, I32_MAX)
    if _native.index_file_size(cfg.max_hash_slot_num, cfg.max_index_num) is None:
        index_size = (
            _native.INDEX_HEADER_SIZE
            + cfg.max_hash_slot_num * _native.INDEX_HASH_SLOT_SIZE
            + cfg.max_index_num * _native.INDEX_ENTRY_SIZE
        )
        raise ValueError(
            f"max_hash_slot_num={cfg.max_hash_slot_num!r}, "
            f"max_index_num={cfg.max_index_num!r}: IndexFile size {index_size} "
            f"exceeds {I32_MAX} bytes"
        )


def _check_ratios_and_ports(cfg: StoreConfig) -> None:
    in_range(
        "disk_max_used_space_ratio",
        cfg.disk_max_used_space_ratio,
        -I32_MAX - 1,
        I32_MAX,
    )  # any Java int; clamped by the property
    for name in (
        "disk_space_warning_level_ratio",
        "disk_space_clean_forcibly_ratio",
    ):
        ratio = getattr(cfg, name)
        if not (0.0 < ratio <= 1.0):
            bad(name, ratio, "must be a fraction in (0, 1]")
    in_range(
        "access_message_in_memory_max_ratio",
        cfg.access_message_in_memory_max_ratio,
        0,
        100,
    )
    _check_ha(cfg)
    if not cfg.store_type:
        bad("store_type", cfg.store_type, "must be non-empty")


def _check_ha(cfg: StoreConfig) -> None:
    if cfg.ha_listen_port is not None:
        in_range("ha_listen_port", cfg.ha_listen_port, 0, _MAX_PORT)
    if cfg.ha_offsets_port is not None:
        in_range("ha_offsets_port", cfg.ha_offsets_port, 0, _MAX_PORT)
    elif cfg.ha_listen_port == _MAX_PORT:
        bad("ha_offsets_port", None, f"must be set when ha_listen_port is {_MAX_PORT} "
            "(the default is the HA port + 1)")
    if not is_ip_literal(cfg.ha_listen_address):
        bad("ha_listen_address", cfg.ha_listen_address, "must be an IP address")
    in_range("ha_transfer_batch_size", cfg.ha_transfer_batch_size, 1, 4 << 20)
    in_range("ha_slave_fallbehind_max", cfg.ha_slave_fallbehind_max, 1, I64_MAX)
    for item in (s.strip() for s in cfg.ha_allowed_slaves.split(",")):
        if item and not _is_network(item):
            bad("ha_allowed_slaves", cfg.ha_allowed_slaves,
                f"{item!r} is not an address or network")
    for name in ("ha_master_address", "ha_offsets_master_address"):
        master = getattr(cfg, name)
        if master is not None:
            host, sep, port = master.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) <= _MAX_PORT:
                bad(name, master, 'must be "host:port"')


def _is_network(item: str) -> bool:
    try:
        ipaddress.ip_network(item, strict=False)
    except ValueError:
        return False
    return True
