"""Recovery: bring a store back to a consistent state when it is opened.

The CommitLog is judged first, before anything is written — from its
third-last file after a clean stop ("normal"), or, when the abort file says
the last writer died ("abnormal"), from the file the checkpoint points at.
Invalid data past the durable mark (the checkpoint's record of what was
flushed) is a torn tail: cut and zeroed, so a later crash can never bring a
stale record back. Invalid data inside durable data that intact records
follow is damage: the open refuses with ``CorruptedError`` and changes
nothing, unless damaged records are to be skipped (``on_corruption="skip"``,
``rocketstore repair``). Then the consume queues: units pointing past the
recovered end go, holes are rebuilt from the CommitLog between their good
neighbours; an abnormal recovery re-dispatches every valid record to the
queues and the index; index files newer than the index checkpoint are
rebuilt from the oldest destroyed file's first offset, so no key is lost.
Stored consumer offsets are finally clamped to the recovered queue ends. The
scans run in the engine (docs/format.md §15); this service runs them in order
and reports what they did.
"""
from __future__ import annotations

import dataclasses
import logging

from rocketstore._native import NativeStore
from rocketstore.config_files import ConsumerOffsets

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
        damaged: damaged CommitLog ranges inside durable data that were
            skipped, as ``(offset, resume_offset, file, reason)``; a range
            with ``resume_offset == offset`` ended the log (nothing intact
            followed it).
        durable_mark: the durable CommitLog offset recovery judged damage by,
            or ``None`` when the checkpoint had no mark (its
            physicMsgTimestamp was used).
        consumer_offsets_clamped: stored consumer offsets that pointed past
            their queue's recovered end and were lowered to it.
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
    damaged: tuple[tuple[int, int, str, str], ...] = ()
    durable_mark: int | None = None
    consumer_offsets_clamped: int = 0

    @property
    def records(self) -> int:
        """Older name of :attr:`records_scanned` (records read by the scan)."""
        return self.records_scanned


class RecoveryService:
    """Runs recovery for one opened (locked, loaded) native store."""

    def __init__(self, native: NativeStore) -> None:
        self._native = native

    def recover(self, check_crc: bool, skip_damaged: bool = False) -> RecoveryReport:
        """Recover and return the report; logs a warning when anything was repaired.

        Damage inside durable data raises :class:`CorruptedError` (nothing
        changed) unless ``skip_damaged``; then it is skipped and reported.
        """
        found = self._native.recover(check_crc, skip_damaged)
        found["records_scanned"] = found.pop("records")
        found["damaged"] = tuple(tuple(d) for d in found["damaged"])
        report = RecoveryReport(**found)
        for offset, resume, file, reason in report.damaged:
            log.warning(
                "recovery: damaged CommitLog data at offset %d in %s (%s); %s",
                offset,
                file,
                reason,
                f"skipped, intact records resume at {resume}"
                if resume > offset
                else "nothing intact follows it",
            )
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

    def clamp_consumer_offsets(self, offsets: ConsumerOffsets) -> int:
        """Lower stored consumer offsets above their queue's recovered end.

        After recovery cut a queue (a torn tail, lost queue pages), an offset
        committed above its end would make the group skip the messages new
        puts write at those offsets. The lowered table is written at once.
        Returns how many offsets were lowered.
        """
        native = self._native
        keep = 1 << 62  # an end no offset reaches: the offset stays

        def end_of(topic: str, queue_id: int) -> int:
            # Only queues the store holds are clamped; an offset of a queue
            # without a consume queue (none written yet) is left as it is.
            try:
                if queue_id not in native.queue_ids(topic):
                    return keep
                return native.get_max_offset_in_queue(topic, queue_id)
            except (ValueError, OverflowError, TypeError):
                return keep

        lowered = offsets.clamp(end_of)
        for key, qid, old, new in lowered:
            log.warning(
                "recovery: consumer offset of %s queue %d lowered from %d to the queue end %d",
                key,
                qid,
                old,
                new,
            )
        if lowered:
            offsets.persist()
        return len(lowered)
