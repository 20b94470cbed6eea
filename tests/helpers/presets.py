"""Store settings shared by the durability tests.

Small segments everywhere: the default sizes reserve 1 GiB per CommitLog file.
"""

from __future__ import annotations

from typing import Any

SEG = 64 * 1024
SMALL: dict[str, Any] = {
    "mapped_file_size_commit_log": SEG,
    "mapped_file_size_consume_queue": 20 * 500,
    "max_hash_slot_num": 100,
    "max_index_num": 2000,
}
#: Background flushes every 50 ms, thorough every 100 ms.
FAST_FLUSH: dict[str, Any] = {
    "flush_interval_commit_log": 50,
    "flush_commit_log_thorough_interval": 100,
    "flush_interval_consume_queue": 50,
    "flush_consume_queue_thorough_interval": 100,
}
#: The engine's fault-injection points.
POINTS = ("msync", "create_file", "cq_put", "flush_hold")
