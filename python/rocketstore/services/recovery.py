"""Recovery: bring a store back to a consistent state when it is opened.

The order follows RocketMQ: consume queues first, then the
CommitLog — from its third-last file after a clean stop ("normal"), or, when
the abort file says the last writer died ("abnormal"), from the file the
checkpoint points at, re-dispatching every valid record to the queues and the
index. Whatever lies past the last valid record is cut and zeroed, so a later
crash can never bring a stale record back; index files newer than the index
checkpoint are rebuilt from the oldest destroyed file's first offset, so no
key is lost. The scans run in the engine; this service runs them in order and
reports what they did.
"""

from __future__ import annotations

import dataclasses
import logging

from rocketstore._native import NativeStore

__all__ = ["RecoveryReport", "RecoveryService"]

log = logging.getLogger("rocketstore")


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the store found and repaired.

    Attributes:
        mode: ``"normal"`` (the last writer stopped cleanly) or ``"abnormal"``
            (it crashed: the abort file was left behind).
        files_scanned: CommitLog files read. After a clean stop recovery
            reads only the last three files, after a crash from the file
            the checkpoint points at: not the whole store.
        bytes_scanned: bytes of valid records read.
        records_scanned: valid records read by that scan: the records of the
            files scanned, not the number of records (or messages) in the
            store. ``records`` is the older name of this field.
        end_offset: CommitLog offset just past the last valid record.
        bytes_truncated: non-zero bytes cut (and zeroed) after the valid end.
        stop_reason: why the scan stopped before the end of written data, if it did.
        consume_queues: consume queues loaded.
        redispatched_records: records dispatched to queues and index during recovery.
        index_redispatch_from: CommitLog offset the index was rebuilt from, if any.
        index_redispatched_records: records re-indexed from there.
    """

    mode: str
    files_scanned: int
    bytes_scanned: int
    records_scanned: int
    end_offset: int
    bytes_truncated: int
    stop_reason: str | None
    consume_queues: int = 0
    redispatched_records: int = 0
    index_redispatch_from: int | None = None
    index_redispatched_records: int = 0

    @property
    def records(self) -> int:
        """Older name of :attr:`records_scanned` (records read by the scan)."""
        return self.records_scanned


class RecoveryService:
    """Runs recovery for one opened (locked, loaded) native store."""

    def __init__(self, native: NativeStore) -> None:
        self._native = native

    def recover(self, check_crc: bool) -> RecoveryReport:
        """Recover and return the report; logs a warning when anything was repaired."""
        found = self._native.recover(check_crc)
        found["records_scanned"] = found.pop("records")
        report = RecoveryReport(**found)
        if report.mode == "abnormal" or report.bytes_truncated or report.stop_reason:
            log.warning(
                "recovery (%s): valid data ends at %d; %d bytes truncated%s; "
                "%d records re-dispatched",
                report.mode,
                report.end_offset,
                report.bytes_truncated,
                f" ({report.stop_reason})" if report.stop_reason else "",
                report.redispatched_records,
            )
        else:
            log.info(
                "recovery (%s): %d files scanned (%d records), valid data ends at %d",
                report.mode,
                report.files_scanned,
                report.records_scanned,
                report.end_offset,
            )
        return report
