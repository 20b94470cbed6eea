"""Store settings and message bodies shared by the tests.

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
#: The engine's fault-injection points (cargo feature ``failpoints``).
POINTS = ("msync", "create_file", "map_new_file", "cq_put", "flush_hold", "reserve", "mlock",
          "pause_cq_flush", "pause_commitlog_flush", "pause_index_flush", "pause_dispatch_step",
          "index_msync",
          "create_cq_file", "create_index_file", "allocate_file")
#: Fail points that make the next round of a background service panic.
PANIC_POINTS = tuple(
    f"panic_{s}"
    for s in ("flush", "group_commit", "commit", "cq_flush", "dispatch", "allocate", "prefault",
              "index_flush", "clock")
)
#: Why a fault test fails on an engine built without them.
FAILPOINTS_MISSING = (
    "this build of rocketstore._native lacks the `failpoints` cargo feature, which the "
    "fault-injection tests need; rebuild the test install with the README's test command: "
    "pip install -e '.[test]' --config-settings=build-args='--features python,failpoints'"
)


def body_of(i: int, size: int = 100) -> bytes:
    """Message ``i``'s body: ``m<i>-`` padded with ``x`` to ``size`` bytes."""
    return (b"m%05d-" % i).ljust(size, b"x")
