"""A :class:`~rocketstore.config.StoreConfig` as RocketMQ properties.

RocketMQ's key of a field is its name in camelCase, except for the names in
``_JAVA_NAME_OVERRIDES``; reading also accepts ``Mapped`` for RocketMQ's
``Maped`` and our snake_case names. Values are text: booleans ``true`` /
``false``, integers, floats, enum member names, ``ip:port``.
"""

from __future__ import annotations

import enum
import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from rocketstore.config._checks import FieldKind, Kind, is_ip_literal

_log = logging.getLogger("rocketstore")

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


def java_names(fields: Iterable[str]) -> dict[str, str]:
    """RocketMQ's property key of each field."""
    return {name: _JAVA_NAME_OVERRIDES.get(name, _snake_to_camel(name)) for name in fields}


def parse_host(text: str) -> tuple[str, int]:
    """``ip:port``, ``[ipv6]:port`` or a bare IPv6 literal followed by ``:port``."""
    text = text.strip()
    match = re.fullmatch(r"\[([^\]]+)\]:(\d+)", text) or re.fullmatch(r"([^:]+):(\d+)", text)
    if match is None:
        # a bare IPv6 literal with the port after the last colon
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or not is_ip_literal(host):
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
            raise ValueError(f"expected one of {', '.join(enum_cls.__members__)}") from None

    return convert


_TEXT_CONVERTERS: Final[dict[Kind, Callable[[str], object]]] = {
    Kind.BOOL: _text_to_bool,
    Kind.INT: _text_to_int,
    Kind.OPT_INT: _text_to_int,
    Kind.FLOAT: _text_to_float,
    Kind.STR: str,
    Kind.OPT_STR: str,
    Kind.HOST: parse_host,
}


def _converter_for(kind: FieldKind) -> Callable[[str], object]:
    if isinstance(kind, Kind):
        return _TEXT_CONVERTERS[kind]
    return _text_to_enum(kind)


def _percent_to_fraction(value: object) -> object:
    """A disk ratio given as RocketMQ 5.x integer percent (> 1) becomes a fraction."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1:
        return value / 100
    return value


def _convert(origin: str, key: str, kind: FieldKind, raw: object, name: str) -> Any:
    """Convert one property value for field ``name`` (ValueError names ``key``)."""
    if isinstance(raw, str):
        text = raw.strip()
        if text == "" and kind in (Kind.OPT_INT, Kind.OPT_STR):
            return None
        try:
            value = _converter_for(kind)(text)
        except ValueError as exc:
            raise ValueError(f"{origin}: {key}={raw!r}: {exc} (field {name})") from None
    else:
        value = raw  # already typed (a mapping of values): the constructor checks it
    if name in _RATIO_FIELDS:
        value = _percent_to_fraction(value)
    return value


def format_value(value: object) -> str:
    """A field value as property text (what :func:`read_values` reads back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, tuple):
        host, port = value
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(value)


@dataclass
class Read:
    """The field values read from properties, and the broker keys that give ``store_host``."""

    values: dict[str, Any] = field(default_factory=dict)
    broker_ip: str | None = None
    listen_port: int | None = None


def read_values(
    origin: str,
    items: Iterable[tuple[str, object]],
    kinds: dict[str, FieldKind],
    key_to_field: dict[str, str],
) -> Read:
    """Convert the properties that are store options (keys of ``key_to_field``,
    their ``Mapped`` spelling, or field names); keep ``brokerIP1`` and
    ``listenPort``; log the other keys at debug level."""
    out = Read()
    for raw_key, raw_value in items:
        key = raw_key.strip()
        name = key_to_field.get(key)
        if name is None:
            candidate = _camel_to_snake(key)
            if candidate in kinds:
                name = candidate
        if name is None:
            if key == "brokerIP1" and isinstance(raw_value, str):
                out.broker_ip = raw_value.strip()
            elif key == "listenPort":
                out.listen_port = _convert(origin, key, Kind.INT, raw_value, "listen_port")
            else:
                _log.debug("%s: ignoring %r: not a store option", origin, key)
            continue
        out.values[name] = _convert(origin, key, kinds[name], raw_value, name)
    return out
