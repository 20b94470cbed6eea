//! Scanning the CommitLog from a file on: the recovery scan (a torn tail
//! ends the log; damage in durable data is refused or skipped, see
//! `damage.rs`), replaying a recovered range, and rebuilding the
//! queue-offset table from the records visited.

use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::log::mapped_file::MappedFile;
use crate::log::message::{
    find_next_valid_record, is_readable_topic_bytes, parse_record, parse_valid_record, prop_crc_ok,
    sysflag, valid_record_size_with, Parsed, RecordCrc, RecordView, MAX_TOPIC_LEN_V2,
};

use super::older_log::BeforeDamage;
use super::{CommitLog, Damage, DamagePolicy, DurableBound, QueueOffsetTable};

/// What a scan of the CommitLog found.
#[derive(Debug, Clone, Default)]
pub struct ScanReport {
    /// Offset just past the last valid record.
    pub end_offset: u64,
    /// CommitLog files the scan read.
    pub files_scanned: usize,
    /// Bytes the scan read.
    pub bytes_scanned: u64,
    /// Valid records found.
    pub records: u64,
    /// Why the scan stopped, when it stopped before the end of the last file.
    pub stop_reason: Option<String>,
    /// Damaged ranges inside durable data that the scan skipped (or, with
    /// `end == offset`, that ended the log because nothing intact follows).
    pub damaged: Vec<Damage>,
}

/// Where the next valid record after the invalid data at `pos` of file
/// `index` starts: later in that file, or in a later file.
/// A record in `prop_ranges` must also carry a matching property CRC.
fn find_resume_point(
    files: &[Arc<MappedFile>],
    index: usize,
    pos: usize,
    check_crc: bool,
    prop_ranges: &[(u64, u64)],
) -> Option<(usize, usize)> {
    let next_in = |g: &MappedFile, mut from: usize| loop {
        let p = find_next_valid_record(g.raw(), from, g.file_from_offset(), check_crc)?;
        let at = g.file_from_offset() + p as u64;
        if !crate::checkpoint::in_ranges(prop_ranges, at)
            || crate::log::message::record_prop_crc_ok(&g.raw()[p..])
        {
            return Some(p);
        }
        from = p + 1;
    };
    if let Some(p) = next_in(&files[index], pos + 1) {
        return Some((index, p));
    }
    files
        .iter()
        .enumerate()
        .skip(index + 1)
        .find_map(|(i, g)| next_in(g, 0).map(|p| (i, p)))
}

/// Invalid data a scan met: in file `index` of the scanned files, at
/// `pos`, and why.
#[derive(Debug, Clone, Copy)]
struct Invalid {
    index: usize,
    pos: usize,
    reason: &'static str,
}

/// How a scan judges invalid data: the CRC it checks, the ranges written
/// with the property CRC, and which damage it accepts.
#[derive(Debug, Clone, Copy)]
struct ScanRules<'a> {
    check_crc: bool,
    prop_ranges: &'a [(u64, u64)],
    policy: &'a DamagePolicy,
}

impl CommitLog {
    /// Scans records from the start of file `start_index`, calling `visit`
    /// for each valid record ([`parse_valid_record`]), and stops at the first
    /// invalid one or at the end of the last file.
    pub fn scan(
        &self,
        start_index: usize,
        check_crc: bool,
        mut visit: impl FnMut(u64, &RecordView, &[u8]),
    ) -> ScanReport {
        // Without a damage policy the scan has nothing to refuse: no error.
        self.scan_inner(start_index, check_crc, None, Some(&mut visit))
            .unwrap_or_default()
    }

    /// The recovery scan: like [`CommitLog::scan`], but invalid data that
    /// valid, durable records follow is damage, not a torn tail (see
    /// [`DamagePolicy`]): it is refused (`CorruptedError` naming file and
    /// offset; nothing has been written) or skipped and reported.
    pub fn scan_for_recovery(
        &self,
        start_index: usize,
        check_crc: bool,
        policy: &DamagePolicy,
    ) -> Result<ScanReport> {
        self.scan_inner::<fn(u64, &RecordView, &[u8])>(start_index, check_crc, Some(policy), None)
    }

    /// The scan. Without a visitor each valid record is only measured
    /// ([`valid_record_size_with`]: the same rules, no field decoded for nobody).
    fn scan_inner<F: FnMut(u64, &RecordView, &[u8])>(
        &self,
        start_index: usize,
        check_crc: bool,
        policy: Option<&DamagePolicy>,
        mut visit: Option<&mut F>,
    ) -> Result<ScanReport> {
        let files = self.mfq.files();
        let mut rep = ScanReport::default();
        let prop_ranges = self.prop_ranges_checked(check_crc);
        // A record in those ranges is checked by its property CRC alone: it
        // covers the body and the stored body CRC, so a match proves both as
        // written and the body CRC is not computed a second time.
        let in_prop = |at: u64| crate::checkpoint::in_ranges(&prop_ranges, at);
        let Some(first) = files.get(start_index) else {
            rep.end_offset = files.first().map(|f| f.file_from_offset()).unwrap_or(0);
            return Ok(rep);
        };
        rep.end_offset = first.file_from_offset();
        let mut before = BeforeDamage::new(first.file_from_offset());
        let mut i = start_index;
        let mut pos = 0usize;
        while let Some(f) = files.get(i) {
            if pos == 0 {
                rep.files_scanned += 1;
            }
            let data = f.raw();
            let from = f.file_from_offset();
            let began = pos;
            let mut reached_blank = false;
            let mut resume = None;
            loop {
                let at = from + pos as u64;
                let prop = in_prop(at);
                let (body_crc, record_crc) = crc_checks(check_crc, prop);
                let parsed = match visit.as_mut() {
                    Some(_) => match parse_valid_record(&data[pos..], at, body_crc) {
                        Parsed::Record(v)
                            if prop
                                && !prop_crc_ok(&data[pos..pos + v.total_size], &v.properties) =>
                        {
                            Parsed::End {
                                reason: super::PROP_CRC_MISMATCH,
                            }
                        }
                        p => p,
                    },
                    None => match valid_record_size_with(&data[pos..], at, record_crc) {
                        Ok(n) => {
                            before.last_record = Some(at);
                            pos += n;
                            rep.records += 1;
                            continue;
                        }
                        Err(n) => n.into(),
                    },
                };

                match parsed {
                    Parsed::Record(v) => {
                        let rec = &data[pos..pos + v.total_size];
                        if let Some(visit) = visit.as_mut() {
                            visit(from + pos as u64, &v, rec);
                        }
                        before.last_record = Some(at);
                        pos += v.total_size;
                        rep.records += 1;
                    }
                    Parsed::Blank => {
                        reached_blank = true;
                        break;
                    }
                    Parsed::End { reason } => {
                        if let Some(p) = policy {
                            let found = Invalid {
                                index: i,
                                pos,
                                reason,
                            };
                            let rules = ScanRules {
                                check_crc,
                                prop_ranges: &prop_ranges,
                                policy: p,
                            };
                            resume =
                                self.judge_invalid(&files, found, &rules, &mut before, &mut rep)?;
                        }
                        if resume.is_none() && data[pos..].iter().take(8).any(|&b| b != 0) {
                            rep.stop_reason =
                                Some(format!("{reason} at offset {}", from + pos as u64));
                        }
                        break;
                    }
                }
            }
            rep.bytes_scanned += (pos - began) as u64;
            if let Some((ni, npos)) = resume {
                i = ni;
                pos = npos;
                continue;
            }
            if reached_blank {
                rep.end_offset = from + f.file_size() as u64;
                if i + 1 == files.len() {
                    // The log ends with a full file: the next put creates a new one.
                    break;
                }
                i += 1;
                pos = 0;
                continue;
            }
            rep.end_offset = from + pos as u64;
            break;
        }
        Ok(rep)
    }

    /// Invalid data at `pos` of file `index`: a torn tail (`Ok(None)`: the
    /// scan ends here) or damage in durable data, which is refused or
    /// skipped (`Ok(Some((file, pos)))`: where the next valid record is).
    fn judge_invalid(
        &self,
        files: &[Arc<MappedFile>],
        found: Invalid,
        rules: &ScanRules<'_>,
        before: &mut BeforeDamage,
        rep: &mut ScanReport,
    ) -> Result<Option<(usize, usize)>> {
        let Invalid { index, pos, reason } = found;
        let ScanRules {
            check_crc,
            prop_ranges,
            policy,
        } = *rules;
        let f = &files[index];
        let at = f.file_from_offset() + pos as u64;
        let known = policy.known.iter().any(|&(s, e)| s <= at && at < e);
        if let DurableBound::Mark(m) = policy.bound {
            if at >= m && !known {
                // Past the durable mark: a torn tail, whatever follows.
                return Ok(None);
            }
        }
        let next = find_resume_point(files, index, pos, check_crc, prop_ranges);
        let next_offset = next.map(|(i, p)| files[i].file_from_offset() + p as u64);
        let durable = known
            || match policy.bound {
                DurableBound::Mark(m) => at < m,
                DurableBound::Timestamp(ts) => {
                    ts > 0
                        && next.is_some_and(|(i, p)| {
                            matches!(parse_record(&files[i].raw()[p..], false),
                                Parsed::Record(v) if v.store_timestamp <= ts)
                        })
                }
            };
        if !durable {
            return Ok(None);
        }
        let Some(end) = next_offset else {
            // Nothing intact follows: cutting here zeroes no intact record
            // (docs/format.md §15.1: only damage that valid records follow is refused), but
            // the report says that durable data ended the log.
            log::warn!(
                "invalid data at CommitLog offset {at} in {} lies inside durable data ({reason}) \
                 and no intact record follows: the log ends there",
                f.path().display()
            );
            rep.damaged.push(Damage {
                offset: at,
                end: at,
                file: f.path().to_path_buf(),
                reason: format!("{reason}; no intact record follows"),
            });
            return Ok(None);
        };
        if !known && !policy.skip {
            return Err(StoreError::corrupted(
                f.path(),
                pos as u64,
                format!(
                    "damaged record at CommitLog offset {at} ({reason}) inside durable data, \
                     intact records resume at {end}; open with on_corruption=\"skip\" or run \
                     `rocketstore repair` to skip it"
                ),
            ));
        }
        if !known {
            if let Some(why) = self.older_log_resumes(at, end, before, policy, &rep.damaged) {
                // The intact records after the damage belong to an older
                // log a cut left behind: the log ends here, as RocketMQ's
                // recovery ends it (docs/format.md, "A store a RocketMQ
                // broker cut and appended to").
                log::warn!(
                    "invalid data at CommitLog offset {at} in {} ({reason}) ends the log: \
                     the intact records resuming at {end} are older than the records \
                     before it ({why})",
                    f.path().display()
                );
                rep.damaged.push(Damage {
                    offset: at,
                    end: at,
                    file: f.path().to_path_buf(),
                    reason: format!(
                        "{reason}; the intact records after it belong to an older log ({why})"
                    ),
                });
                return Ok(None);
            }
        }
        log::warn!(
            "skipping damaged CommitLog bytes [{at}, {end}) in {} ({reason})",
            f.path().display()
        );
        rep.damaged.push(Damage {
            offset: at,
            end,
            file: f.path().to_path_buf(),
            reason: reason.to_string(),
        });
        Ok(next)
    }

    /// With the CRC checks, the ranges whose records must carry a matching
    /// property CRC (those written with it); none without.
    fn prop_ranges_checked(&self, check_crc: bool) -> Vec<(u64, u64)> {
        if check_crc {
            self.prop_crc_ranges()
        } else {
            Vec::new()
        }
    }

    /// Replays the records of `[from, until)`, jumping over the `damaged`
    /// ranges a recovery scan found (the records were validated by it);
    /// `visit_damaged` gets each damaged range's start and length and, when
    /// its header still reads as a record of that length, the record.
    pub fn replay(
        &self,
        from: u64,
        until: u64,
        damaged: &[(u64, u64)],
        mut visit: impl FnMut(u64, &RecordView, &[u8]) -> Result<()>,
        mut visit_damaged: impl FnMut(u64, Option<(&RecordView, &[u8])>) -> Result<()>,
    ) -> Result<()> {
        let mut at = from;
        while at < until {
            let Some(f) = self.mfq.find_by_offset(at, false) else {
                break;
            };
            let base = f.file_from_offset();
            let data = f.raw();
            let pos = (at - base) as usize;
            if let Some(&(_, e)) = damaged.iter().find(|&&(s, e)| s == at && e > s) {
                let len = (e - at) as usize;
                let view = match data.get(pos..).map(|d| parse_record(d, false)) {
                    Some(Parsed::Record(v))
                        if v.total_size == len
                            && v.physical_offset == at as i64
                            && is_readable_topic_bytes(
                                &data[pos..][v.topic.clone()],
                                MAX_TOPIC_LEN_V2,
                            )
                            && v.queue_id >= 0
                            && v.queue_offset >= 0 =>
                    {
                        Some(v)
                    }
                    _ => None,
                };
                visit_damaged(at, view.as_ref().map(|v| (v, &data[pos..pos + len])))?;
                at = e;
                continue;
            }
            match parse_valid_record(&data[pos..], at, false) {
                Parsed::Record(v) => {
                    visit(at, &v, &data[pos..pos + v.total_size])?;
                    at += v.total_size as u64;
                }
                Parsed::Blank => at = self.roll_next_file(at),
                Parsed::End { .. } => break,
            }
        }
        Ok(())
    }

    /// Magic and store timestamp of the first record of file `index`.
    pub fn first_record_of_file(&self, index: usize) -> Option<(i32, i64)> {
        let f = self.mfq.files().get(index)?.clone();
        match parse_record(f.raw(), false) {
            Parsed::Record(v) => Some((v.magic, v.store_timestamp)),
            _ => None,
        }
    }
}

/// The CRC checks a record gets (the body CRC for a parse, and the check
/// for a measure): with the CRC checks, its property CRC alone inside the
/// property-CRC ranges (`prop`), else its body CRC; none without.
fn crc_checks(check_crc: bool, prop: bool) -> (bool, RecordCrc) {
    match (check_crc, prop) {
        (false, _) => (false, RecordCrc::None),
        (true, false) => (true, RecordCrc::Body),
        (true, true) => (false, RecordCrc::Prop),
    }
}

/// Rebuilds the queue-offset table from a record as a scan visits it.
pub fn account_record(table: &mut QueueOffsetTable, v: &RecordView, rec: &[u8]) {
    let tran = v.sys_flag & sysflag::TRANSACTION_TYPE_MASK;
    if tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT {
        let topic = String::from_utf8_lossy(&rec[v.topic.clone()]);
        table.raise(&topic, v.queue_id, v.queue_offset + 1);
    }
}
