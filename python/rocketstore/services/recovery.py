"""Recovery: bring a store back to a consistent state when it is opened.

Opening the engine store (``NativeStore``) takes the writer lock and maps the
files; it changes nothing else on disk. :meth:`RecoveryService.recover` then
runs the engine's recovery steps in order, as RocketMQ 4.9.8's
``DefaultMessageStore.recover()`` does (recover the consume queues, recover
the CommitLog normally or abnormally, rebuild the topic queue table), with
the steps this store adds. The engine enforces the order: a step called out
of order raises :class:`~rocketstore.errors.RecoveryOrderError`, and the
store refuses puts and reads until the last step ran. Each step returns a
typed report (a class of ``rocketstore._native``).

1. File sizes: a newest file shorter than its segment size (a crash while it
   was created) is extended with zeros, and so is a consume-queue file
   missing or short between files (its units are rebuilt in step 5); a
   missing checkpoint is created.
2. Damage rule: the checkpoint's durable mark (what was flushed) tells a
   torn tail from damage. Invalid data past it is a torn tail, cut and
   zeroed, so a later crash can never bring a stale record back. Invalid
   data inside durable data that intact records follow is damage: the open
   refuses with ``CorruptedError`` and changes nothing, unless damaged
   records are to be skipped (``on_corruption="skip"``, ``rocketstore
   repair``).
3. The CommitLog scan — from its third-last file after a clean stop
   ("normal"), or, when the abort file says the last writer died
   ("abnormal"), from the file the checkpoint points at. RocketMQ recovers
   the consume queues first; here the CommitLog is judged first, so that a
   refused open has written nothing and the queues' units can be checked
   against the recovered end.
4. The consume queues: units pointing past the recovered end go; holes
   between good units — in any file, found by a cheap check of every file
   older than the ones checked unit by unit — are rebuilt from the
   CommitLog between their good neighbours (step 5); a hole at a queue's
   front from the CommitLog's first retained record.
6. Truncation of the CommitLog and the queues past the end.
7. The index: index files newer than the index checkpoint (after a crash)
   or holding entries past the end are destroyed and rebuilt from the oldest
   destroyed file's first offset, so no key is lost.
8. Re-dispatch: after a crash every valid record scanned goes to the queues
   and the index again; then what the queues miss.
9. Stored consumer offsets are clamped to the recovered queue ends.
10. The queue-offset table (RocketMQ's ``recoverTopicQueueTable``) and the
    durable mark at the recovered end: the store is recovered.

A read-only open runs the same steps; the engine writes nothing there: it
finds the same ends, judges queue units as a writer's recovery does and
holds a hole's rebuilt units in memory, so it serves what a read-write
open with ``on_corruption="skip"`` of the directory keeps. The scans run in
the engine (docs/format.md §15) with the GIL released.
"""

from __future__ import annotations

import logging

from rocketstore._native import NativeStore, RecoveryMode, RecoveryReport
from rocketstore.consumers.offsets import ConsumerOffsets

__all__ = ["RecoveryMode", "RecoveryReport", "RecoveryService"]

log = logging.getLogger("rocketstore")


class RecoveryService:
    """Runs recovery for one opened (locked, mapped) native store."""

    def __init__(self, native: NativeStore) -> None:
        self._native = native

    def recover(
        self,
        check_crc: bool,
        skip_damaged: bool = False,
        consumer_offsets: ConsumerOffsets | None = None,
        *,
        whole: bool = False,
    ) -> RecoveryReport:
        """Recover and return the report; logs a warning when anything was repaired.

        Damage inside durable data raises :class:`CorruptedError` (nothing
        changed) unless ``skip_damaged``; then it is skipped and reported.
        ``consumer_offsets`` above their queue's recovered end are lowered
        and the table is written (a writer's recovery). ``whole`` scans the
        CommitLog from its first file in either mode (a repair), so damage in
        files an ordinary recovery does not scan is found too.
        """
        store = self._native
        store.check_file_sizes()
        store.judge_damage(skip_damaged)
        if whole:
            store.scan_whole_commit_log(check_crc)
        elif store.recovery_mode == RecoveryMode.NORMAL:
            store.scan_commit_log_normally(check_crc)
        else:
            store.scan_commit_log_abnormally(check_crc)
        store.recover_consume_queues()
        store.rebuild_queue_holes()
        store.truncate()
        store.rebuild_index()
        store.redispatch()
        self.clamp_consumer_offsets(consumer_offsets)
        store.rebuild_queue_offset_table()
        report = store.recovery_report()
        self._log(report)
        return report

    def clamp_consumer_offsets(self, offsets: ConsumerOffsets | None) -> int:
        """The consumer-offset step: lower stored offsets above their queue's end.

        After recovery cut a queue (a torn tail, lost queue pages), an offset
        committed above its end would make the group skip the messages new
        puts write at those offsets. The engine finds them (queues the store
        holds only); the file is lowered at once, under its lock, as every
        writer of it does (``docs/format.md``, §13.1). Returns how many
        offsets were lowered.
        """
        rows = [] if offsets is None else offsets.table().rows()
        lowered = self._native.clamp_consumer_offsets(rows).lowered
        if offsets is None or not lowered:
            return len(lowered)
        ends = {(topic, qid): new for topic, _group, qid, _old, new in lowered}
        keep = 1 << 62  # an end no offset reaches: the offset stays
        for key, qid, old, new in offsets.clamp(lambda topic, qid: ends.get((topic, qid), keep)):
            log.warning(
                "recovery: consumer offset of %s queue %d lowered from %d to the queue end %d",
                key.text,
                qid,
                old,
                new,
            )
        return len(lowered)

    @staticmethod
    def _log(report: RecoveryReport) -> None:
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
        if report.mode == RecoveryMode.ABNORMAL or report.bytes_truncated or report.stop_reason:
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
