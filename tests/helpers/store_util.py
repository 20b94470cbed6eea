"""Helpers shared by the tests that read or damage a store's files."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import struct
from pathlib import Path

from rocketstore.config.files import loads_fastjson

#: Fixed V1 record overhead with IPv4 born and store hosts (docs/format.md §3.1).
RECORD_OVERHEAD_V4 = 91
#: Extra bytes per IPv6 host (16-byte address instead of 4).
IPV6_EXTRA = 12
BLANK_MAGIC = 0xCBD43194
#: Where a record's body starts, with IPv4 born and store hosts (docs/format.md §3.1).
BODY_AT = 88


def props_bytes(props: dict[str, str]) -> bytes:
    """Serialized properties as RocketMQ writes them (``k\\x01v\\x02k\\x01v``)."""
    return b"\x02".join(k.encode() + b"\x01" + v.encode() for k, v in props.items())


def record_len(
    topic: str,
    body: bytes,
    props: dict[str, str] | None = None,
    *,
    ipv6_hosts: int = 0,
    prop_crc: bool = True,
) -> int:
    """Length of a V1 CommitLog record (docs/format.md §3.1); with
    ``prop_crc`` (the store's default) the property CRC's 20 bytes, and a
    separator before them when other properties precede (§6.1)."""
    raw = props_bytes(props or {})
    return (
        RECORD_OVERHEAD_V4
        + IPV6_EXTRA * ipv6_hosts
        + len(body)
        + len(topic.encode())
        + len(raw)
        + ((20 + (1 if raw else 0)) if prop_crc else 0)
    )


def expected_msg_id(store_host: tuple[str, int], phy_offset: int) -> str:
    """Offset message id: store ip ‖ port (int) ‖ offset (long), upper-case hex."""
    ip = ipaddress.ip_address(store_host[0]).packed
    return (ip + struct.pack(">iq", store_host[1], phy_offset)).hex().upper()


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def segment_path(store_path: str | os.PathLike[str], start: int) -> Path:
    """Path of the CommitLog segment file starting at ``start``."""
    return Path(store_path) / "commitlog" / f"{start:020d}"


def flip_bits(path: str | os.PathLike[str], at: int, mask: int) -> None:
    """XORs the byte at position ``at`` of the file ``path`` with ``mask``."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ mask]))


def flip_commitlog_bits(
    store_path: str | os.PathLike[str], offset: int, seg: int, mask: int
) -> None:
    """XORs the CommitLog byte at physical ``offset`` (files of ``seg``
    bytes) with ``mask``: damage that a record's CRC catches."""
    at = offset % seg
    flip_bits(segment_path(store_path, offset - at), at, mask)


def offset_table(store_path: str | os.PathLike[str]) -> dict[str, dict[int, int]]:
    """The committed offsets on disk: ``config/consumerOffset.json`` with its
    journal replayed (docs/format.md §13.3), ``{"topic@group": {queue_id:
    offset}}``. A store folds the journal into the json at close: then this
    equals :func:`offset_json_table`."""
    from rocketstore.consumers.offsets import ConsumerOffsets

    path = Path(store_path) / "config" / "consumerOffset.json"
    table = ConsumerOffsets.load(path).table()
    return {key.text: queues for key, queues in table.as_dict().items()}


def offset_json_table(store_path: str | os.PathLike[str]) -> dict[str, dict[int, int]]:
    """The ``offsetTable`` of the store's ``config/consumerOffset.json`` alone
    (docs/format.md §13), what a RocketMQ broker reads:
    ``{"topic@group": {queue_id: offset}}``."""
    text = (Path(store_path) / "config" / "consumerOffset.json").read_text()
    table = loads_fastjson(text)["offsetTable"]
    assert isinstance(table, dict)
    return table


def commitlog_files(store_path: str | os.PathLike[str]) -> list[str]:
    d = Path(store_path) / "commitlog"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def snapshot(root: str | os.PathLike[str], *, mtimes: bool = True) -> dict[str, tuple[object, ...]]:
    """Every file and directory under ``root``: size, content hash and (optionally) mtime."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            rel = os.path.relpath(os.path.join(dirpath, d), root)
            out[rel + "/"] = ("dir",)
        for f in filenames:
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            entry: tuple[object, ...] = (st.st_size, digest)
            if mtimes:
                entry += (st.st_mtime_ns,)
            out[os.path.relpath(p, root)] = entry
    return out


def diff_snapshots(
    before: dict[str, tuple[object, ...]], after: dict[str, tuple[object, ...]]
) -> list[str]:
    """Names of entries added, removed or changed."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def age_files(root: str | os.PathLike[str], when: int = 1_000_000_000) -> None:
    """Sets every file's atime/mtime under ``root`` to ``when`` (seconds, long ago), so
    any later write shows in a snapshot however coarse the file-system clock is."""
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            os.utime(os.path.join(dirpath, f), (when, when))
