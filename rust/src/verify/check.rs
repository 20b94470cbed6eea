//! The verification's driver: one pass over the CommitLog in `[start, end)`,
//! checking each record and the queue units and index entries pointing at
//! it (see the rules in `mod.rs`).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Result, StoreError};
use crate::log::message::{body_crc, compressed_body_problem, parse_valid_record, sysflag, Parsed};

use super::coverage::Coverage;
use super::files::{segment_name, CommitLog};
use super::pointers::Pointers;
use super::sources::{consume_queue_sources, index_sources};
use super::{Scope, VerifyReport, COMPRESSION_TYPE_MASK, PROGRESS_STEP, ZLIB_TYPES};

/// Verifies the store at `root`: CommitLog records in `scope`, and every
/// ConsumeQueue unit and index entry against them. `topics`: topics the
/// store's topic config lists, whose records must have units even when
/// none of their queue directories is left. `progress` counts CommitLog
/// bytes scanned so far (for a progress bar on another thread).
///
/// One pass: the queue units and index entries are merged into CommitLog
/// order (each queue and each index file is written in that order), and
/// each is checked when the scan reaches the offset it points at, against
/// the record the scan has just parsed and checked. A unit or entry that
/// points at no record start the scan reached, or that comes out of order
/// in its file, is checked on its own by reading the CommitLog at its
/// offset, so its finding is the same either way.
pub fn verify_store(
    root: &Path,
    segment: u64,
    scope: Scope,
    (hash_slot_num, index_num): (usize, usize),
    topics: &[String],
    progress: &AtomicU64,
) -> Result<VerifyReport> {
    let Scope {
        start,
        end,
        complete,
    } = scope;
    if segment == 0 {
        return Err(StoreError::InvalidArgument(
            "segment size must be positive".into(),
        ));
    }
    let end = end.max(start);
    let log = CommitLog::open(root, segment, start, end, complete)?;
    let mut report = VerifyReport::default();
    let (mut names, mut sources) = consume_queue_sources(root)?;
    for t in topics {
        if !names.topics.contains(t) {
            names.topics.push(t.clone());
        }
    }
    let index = index_sources(root, hash_slot_num, index_num, complete, &mut report)?;
    names.index_files = index.names.index_files;
    sources.extend(index.sources);
    // With index files but none of the geometry, the files are reported;
    // the records are checked against the index only when it can be read.
    let index_end = if index.present { index.end } else { None };
    let coverage = Coverage::new(&names, index_end);
    let mut pointers = Pointers::new(names, sources, coverage, &log, &mut report);
    scan_commit_log(&log, &mut report, progress, &mut pointers);
    pointers.finish(&log, &mut report);
    if let Some(e) = pointers.failed.take() {
        return Err(e);
    }
    progress.store(end - start, Ordering::Relaxed);
    Ok(report)
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub(super) fn scan_commit_log(
    log: &CommitLog,
    report: &mut VerifyReport,
    progress: &AtomicU64,
    pointers: &mut Pointers,
) {
    let (start, end, segment) = (log.start, log.end, log.segment);
    let mut off = start;
    let mut published = start;
    while off < end {
        if off - published >= PROGRESS_STEP {
            progress.store(off - start, Ordering::Relaxed);
            published = off;
        }
        let base = off - off % segment;
        let next_file = (base + segment).min(end);
        let Some(map) = log.files.get(&base) else {
            report.problems.push((
                Some(off),
                format!("segment file {} is missing", segment_name(base)),
            ));
            off = next_file;
            continue;
        };
        let pos = (off - base) as usize;
        let limit = (map.len() as u64).min(end - base) as usize;
        let buf = match map.get(pos..limit) {
            Some(b) if b.len() >= 8 || limit as u64 == end - base => b,
            _ => {
                report.problems.push((
                    Some(off),
                    format!("segment file {} ends early", segment_name(base)),
                ));
                off = next_file;
                continue;
            }
        };
        match parse_valid_record(buf, off, false) {
            Parsed::Record(v) => {
                // The view's ranges lie inside `buf` (the parser checked them).
                let rec = buf.get(..v.total_size).unwrap_or_default();
                let body = rec.get(v.body.clone()).unwrap_or_default();
                let crc = body_crc(body);
                if crc != v.body_crc {
                    report.problems.push((
                        Some(off),
                        format!("body CRC mismatch (stored {}, computed {crc})", v.body_crc),
                    ));
                } else if crate::checkpoint::in_ranges(&log.prop_crc, off)
                    && !crate::log::message::prop_crc_ok(rec, &v.properties)
                {
                    report.problems.push((
                        Some(off),
                        format!(
                            "{} (the record lies in a range written with it)",
                            crate::log::commitlog::PROP_CRC_MISMATCH
                        ),
                    ));
                } else if v.sys_flag & sysflag::COMPRESSED != 0
                    && ZLIB_TYPES.contains(&((v.sys_flag & COMPRESSION_TYPE_MASK) >> 8))
                {
                    if let Some(why) = compressed_body_problem(body) {
                        report.problems.push((Some(off), why));
                    }
                }
                report.records += 1;
                report.bytes += v.total_size as u64;
                pointers.check_record(off, &v, rec, log, report);
                off += v.total_size as u64;
            }
            Parsed::Blank => off = next_file,
            Parsed::End { reason } => {
                report.problems.push((Some(off), reason.to_string()));
                let data = map.get(..limit).unwrap_or_default();
                off = match crate::log::message::find_next_valid_record(data, pos + 1, base, true) {
                    Some(i) => base + i as u64,
                    None => next_file,
                };
            }
        }
    }
}
