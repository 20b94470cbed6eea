"""The retention service: deletes expired files (``docs/format.md`` §16).

Every ``clean_resource_interval`` ms one round decides *what* and *when*
and hands the engine its decision whole, as one ``RetentionPolicy``; the
engine's steps do the file work with the GIL released:

1. Disk usage of the CommitLog and ConsumeQueue partitions (the injectable
   ``disk_usage`` probe, RocketMQ's ``getDiskPartitionSpaceUsedPercent``).
   Above ``disk_space_warning_level_ratio`` (0.90) puts are refused with
   ``SERVICE_NOT_AVAILABLE`` and ``store.running_flags`` says DISK_FULL until
   a later round finds usage at or below it again. Above
   ``disk_space_clean_forcibly_ratio`` (0.85) files are deleted at once,
   whatever their age (when ``clean_file_forcibly_enable``).
2. CommitLog files older than ``file_reserved_time`` hours are deleted when
   the local hour (of the injectable ``clock``) is in ``delete_when``, when
   usage is above ``disk_max_used_space_ratio`` percent, or on a manual round
   (``store.delete_expired_files``). At most ``delete_file_batch_max`` files
   a round, ``delete_commit_log_files_interval`` ms apart, oldest first,
   never the file being written, never a file behind one that is not
   expired. A file's age is its mtime, which the store sets to the store
   time of the file's last message when the file fills.
3. With ``max_store_size_bytes`` set, the oldest CommitLog files are also
   deleted, whatever their age, until the CommitLog's data fits the cap
   (Kafka's ``retention.bytes``; the queues and index are small beside it).
4. When the CommitLog min offset moved: ConsumeQueue files wholly below it
   (then every queue's min offset is corrected) and index files below it.
5. A consumer group whose committed offset fell below a queue's new min
   offset lost messages it never read: the round logs a warning naming the
   group and the count.

Deleting unlinks a file at once; a reader still holding it (a pull copying a
record out) keeps the mapping until it lets go, so deletion never crashes a
reader.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping

from rocketstore._checks import I64_MAX
from rocketstore._native import NativeStore, RetentionPolicy
from rocketstore.config.store_config import StoreConfig
from rocketstore.consumers.offset_table import OffsetTable
from rocketstore.services.base import ServiceThread

__all__ = ["RetentionReport", "RetentionService", "disk_usage_ratio"]

log = logging.getLogger("rocketstore")

#: ``now_ms()``: the service's clock, milliseconds since the epoch.
Clock = Callable[[], int]
#: ``disk_usage(path)``: used fraction of the partition holding ``path``
#: (0..1), or a negative number when it cannot be read.
DiskUsageProbe = Callable[[str], float]
#: ``offsets()``: the committed consumer offsets now.
OffsetSource = Callable[[], OffsetTable]

_HOUR_MS = 3_600_000


def _reserved_ms(hours: float) -> int:
    """``file_reserved_time`` (hours, maybe fractional) in whole ms, at most a Java long."""
    return min(round(hours * _HOUR_MS), I64_MAX)


def disk_usage_ratio(path: str) -> float:
    """Used fraction of the partition holding ``path``, RocketMQ's way.

    ``used = total - free``; ratio ``= ceil(used * 100 / (used + available)) / 100``
    (space reserved for root counts as used). ``-1.0`` when it cannot be read.
    """
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    free = st.f_bfree * st.f_frsize
    available = st.f_bavail * st.f_frsize
    used = total - free
    if used + available <= 0:
        return -1.0
    return math.ceil(used * 100 / (used + available)) / 100


class _StoreGone(Exception):
    """The store behind the service was dropped or closed."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass(frozen=True)
class RetentionReport:
    """What one retention round did."""

    #: CommitLog files deleted.
    commit_log_files: int = 0
    #: ConsumeQueue files deleted.
    consume_queue_files: int = 0
    #: Index files deleted.
    index_files: int = 0
    #: Disk usage seen by the round (None for a manual round).
    disk_ratio: float | None = None
    #: Why files were eligible: "manual", "time", "disk", "size" (None: nothing ran).
    reasons: tuple[str, ...] = ()
    #: ``{group: messages}`` deleted before the group consumed them.
    lost: Mapping[str, int] = dataclasses.field(default_factory=dict)


class RetentionService(ServiceThread):
    """Deletes expired CommitLog, ConsumeQueue and index files.

    Args:
        native: Returns the engine store (a writer), or None once the store
            is gone; the service then stops. A callable, not the store, so
            the service never keeps a dropped store alive.
        config: The store's resolved configuration.
        offsets: Returns the committed consumer offsets (an
            :class:`~rocketstore.consumers.offset_table.OffsetTable`), for the warning
            about groups that lose unconsumed messages.
        clock: ``now_ms()``; defaults to the wall clock. Tests pass their own
            so that files age without waiting hours.
        disk_usage: ``disk_usage(path) -> fraction``; defaults to
            :func:`disk_usage_ratio`.
        on_failure: See :class:`ServiceThread`.
    """

    name = "retention"

    def __init__(
        self,
        native: Callable[[], NativeStore | None],
        config: StoreConfig,
        *,
        offsets: OffsetSource | None = None,
        clock: Clock | None = None,
        disk_usage: DiskUsageProbe | None = None,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(interval=config.clean_resource_interval / 1000, on_failure=on_failure)
        self._get_native = native
        self._config = config
        self._offsets = offsets
        self.clock: Clock = clock or _now_ms
        self.disk_usage: DiskUsageProbe = disk_usage or disk_usage_ratio
        self._round_lock = threading.Lock()
        # CommitLog min offset the queues were last trimmed for.
        self._last_min = -1
        self._delete_hours = config.delete_when_hours
        self._last_error: str | None = None
        self.last_report: RetentionReport | None = None

    # -- the rounds ---------------------------------------------------------

    @property
    def _native(self) -> NativeStore:
        native = self._get_native()
        if native is None or native.closed:
            raise _StoreGone
        return native

    def run_once(self) -> None:
        try:
            self.run_round()
        except _StoreGone:
            self._stop.set()  # the store was dropped or closed: nothing to delete
        except OSError as exc:
            # A file that cannot be deleted loses no data: say so once per
            # distinct error and try again next round (RocketMQ retries too).
            msg = f"retention service: {exc}"
            if msg != self._last_error:
                log.warning("%s; retrying every round", msg)
                self._last_error = msg
        else:
            self._last_error = None

    def run_round(self, *, manual: bool = False, force: bool = False) -> RetentionReport:
        """Run one round now (serialised with the periodic rounds).

        A manual round (``store.delete_expired_files``) judges by age only, or
        deletes regardless of age with ``force``; the disk watermarks and the
        size cap belong to the periodic rounds.
        """
        with self._round_lock:
            report = self._round(manual=manual, force=force)
        self.last_report = report
        return report

    def _round(self, *, manual: bool, force: bool) -> RetentionReport:
        cfg, native = self._config, self._native
        now = self.clock()
        reasons: list[str] = []
        immediately = force
        ratio: float | None = None
        if manual:
            reasons.append("manual")
        else:
            ratio, at_once = self._check_disk()
            if ratio < 0 or ratio > cfg.effective_disk_max_used_space_ratio / 100:
                reasons.append("disk")
            if time.localtime(now / 1000).tm_hour in self._delete_hours:
                reasons.append("time")
            immediately = at_once and cfg.clean_file_forcibly_enable
        before = self._queue_mins()
        batch = cfg.delete_file_batch_max
        deleted = 0
        if reasons:
            policy = self._policy(now, immediately=immediately, max_files=batch)
            deleted = native.delete_expired_commit_log(policy).deleted
        over = 0 if manual else self._files_over_cap()
        if over > 0 and deleted < batch:
            reasons.append("size")
            # Over the size cap the oldest files go whatever their age.
            policy = self._policy(now, immediately=True, max_files=min(over, batch - deleted))
            deleted += native.delete_expired_commit_log(policy).deleted
        cq_files = index_files = 0
        lost: dict[str, int] = {}
        min_phy = native.min_phy_offset
        if min_phy > self._last_min:
            queues = native.delete_expired_queues(
                min_phy, cfg.delete_consume_queue_files_interval
            )
            cq_files, index_files = queues.consume_queue_files, queues.index_files
            self._last_min = min_phy
            lost = self._lost(before)
        if deleted and not manual:
            # Files went: usage may have fallen below the warning level.
            self._check_disk()
        return RetentionReport(
            commit_log_files=deleted,
            consume_queue_files=cq_files,
            index_files=index_files,
            disk_ratio=ratio,
            reasons=tuple(reasons) if deleted else (),
            lost=lost,
        )

    def _policy(self, now: int, *, immediately: bool, max_files: int) -> RetentionPolicy:
        """What one CommitLog step of this round may delete (the engine's rules)."""
        cfg = self._config
        return RetentionPolicy(
            now_ms=now,
            reserved_ms=_reserved_ms(cfg.file_reserved_time),
            max_files=max_files,
            immediately=immediately,
            interval_ms=cfg.delete_commit_log_files_interval,
        )

    # -- disk usage -----------------------------------------------------------

    def _check_disk(self) -> tuple[float, bool]:
        """Probe disk usage, set or clear DISK_FULL; returns (ratio, delete at once)."""
        cfg, native = self._config, self._native
        paths = [str(cfg.commit_log_dir), str(cfg.consume_queue_dir)]
        ratios = [self.disk_usage(p if os.path.exists(p) else cfg.store_path) for p in paths]
        ratio = -1.0 if any(r < 0 for r in ratios) else max(ratios)
        warn, forcibly = cfg.disk_space_warning_level_ratio, cfg.disk_space_clean_forcibly_ratio
        if ratio > warn:
            why = (
                f"disk usage {ratio:.0%} is above disk_space_warning_level_ratio "
                f"({warn:.0%}); puts are refused until expired files are deleted"
            )
            if not native.set_disk_full(why):
                log.error("%s", why)
            return ratio, True
        if native.set_disk_full(None):
            log.warning("disk usage fell to %.0f%%; puts are accepted again", ratio * 100)
        return ratio, ratio > forcibly

    def _files_over_cap(self) -> int:
        """CommitLog files to delete so its data fits ``max_store_size_bytes``."""
        cap = self._config.max_store_size_bytes
        if cap is None:
            return 0
        native = self._native
        low = native.min_phy_offset
        if low < 0:
            return 0
        excess = native.max_phy_offset - low - cap
        if excess <= 0:
            return 0
        return -(-excess // native.commit_log_file_size)

    # -- consumers that lose messages -------------------------------------------

    def _queue_mins(self) -> dict[tuple[str, int], int]:
        if self._offsets is None:
            return {}
        mins: dict[tuple[str, int], int] = {}
        for topic, _group, qid, _offset in self._offsets().rows():
            if (topic, qid) not in mins:
                try:
                    mins[topic, qid] = self._native.get_min_offset_in_queue(topic, qid)
                except ValueError:
                    # A name the store refuses to read (the offsets file
                    # came from elsewhere): it has no messages to lose.
                    continue
        return mins

    def _lost(self, before: Mapping[tuple[str, int], int]) -> dict[str, int]:
        """Warn about groups whose unconsumed messages this round deleted."""
        if self._offsets is None or not before:
            return {}
        lost: dict[str, int] = {}
        where: dict[str, list[str]] = {}
        for topic, group, qid, committed in self._offsets().rows():
            old = before.get((topic, qid))
            if old is None:
                continue
            new = self._native.get_min_offset_in_queue(topic, qid)
            n = new - max(committed, old)
            if n > 0:
                lost[group] = lost.get(group, 0) + n
                where.setdefault(group, []).append(f"{topic}/{qid}")
        for group, n in sorted(lost.items()):
            log.warning(
                "retention deleted %d message(s) that consumer group %s had not consumed (%s)",
                n,
                group,
                ", ".join(where[group]),
            )
        return lost
