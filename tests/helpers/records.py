"""A CommitLog record encoder for crash images (docs/format.md §3.1, §3.2).

Tests use it to write records the store itself never writes (illegal topics,
negative queue ids or offsets, V2 records with long topics) into the files of
a closed store.
"""

from __future__ import annotations

import struct
import time
import zlib

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB


def encode_record(
    topic: bytes,
    body: bytes,
    *,
    phy: int,
    queue_id: int = 0,
    queue_offset: int = 0,
    properties: bytes = b"",
    v2: bool = False,
    store_timestamp: int | None = None,
) -> bytes:
    """One record with IPv4 hosts, its body CRC and PHYSICALOFFSET = ``phy``."""
    ts = int(time.time() * 1000) if store_timestamp is None else store_timestamp
    topic_len = struct.pack(">h", len(topic)) if v2 else struct.pack(">b", len(topic))
    tail = (
        struct.pack(">i", len(body))
        + body
        + topic_len
        + topic
        + struct.pack(">h", len(properties))
        + properties
    )
    head_len = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8
    total = head_len + len(tail)
    head = struct.pack(
        ">iIiiiqqiq8sq8siq",
        total,
        MAGIC_V2 if v2 else MAGIC_V1,
        zlib.crc32(body) & 0x7FFFFFFF,
        queue_id,
        0,
        queue_offset,
        phy,
        0,
        ts,
        bytes([127, 0, 0, 1]) + struct.pack(">i", 4242),
        ts,
        bytes([127, 0, 0, 1]) + struct.pack(">i", 10911),
        0,
        0,
    )
    assert len(head) == head_len
    return head + tail
