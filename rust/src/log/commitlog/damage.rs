//! Damage in durable CommitLog data: where durable data ends (the durable
//! mark or the checkpoint's timestamp), the policy a recovery scan follows,
//! and the damaged ranges recovery skipped, which reads skip too.

use std::path::PathBuf;

use super::CommitLog;

/// Where durable CommitLog data ends, to tell damage from a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableBound {
    /// The durable mark: every byte below this offset was flushed.
    Mark(u64),
    /// No mark (a store written by RocketMQ or an older rocketstore):
    /// records stored at or before this time (the checkpoint's
    /// physicMsgTimestamp) were flushed.
    Timestamp(i64),
}

/// How a recovery scan treats invalid data that intact durable records follow.
#[derive(Debug, Clone)]
pub struct DamagePolicy {
    /// Where durable data ends: damage below it is not a torn tail.
    pub bound: DurableBound,
    /// Skip (and report) damaged records instead of refusing the open.
    pub skip: bool,
    /// Ranges skipped by an earlier recovery (the durable mark lists them):
    /// always skipped.
    pub known: Vec<(u64, u64)>,
}

impl DamagePolicy {
    /// The durable mark, if the policy judges by one.
    pub fn bound_mark(&self) -> Option<u64> {
        match self.bound {
            DurableBound::Mark(m) => Some(m),
            DurableBound::Timestamp(_) => None,
        }
    }
}

/// A damaged CommitLog range a recovery scan skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// CommitLog offset of the damaged record.
    pub offset: u64,
    /// Where intact data resumes.
    pub end: u64,
    /// The CommitLog file holding the damaged record.
    pub file: PathBuf,
    /// Why the record is invalid.
    pub reason: String,
}
impl CommitLog {
    /// Remembers the damaged ranges recovery skipped (pulls skip and count
    /// the units pointing into them).
    pub fn set_damaged(&self, ranges: Vec<(u64, u64)>) {
        let mut d = self.damaged.write();
        self.has_damage
            .store(!ranges.is_empty(), std::sync::atomic::Ordering::Release);
        *d = ranges;
    }

    /// End of the damaged range holding `phy`, if one does.
    #[inline]
    pub fn damaged_range_end(&self, phy: u64) -> Option<u64> {
        if !self.has_damage.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.damaged
            .read()
            .iter()
            .find(|&&(s, e)| s <= phy && phy < e)
            .map(|&(_, e)| e)
    }

    /// Sets the ranges whose records must carry a matching property CRC
    /// (ascending; `u64::MAX` ends the running writer's own).
    pub fn set_prop_crc_ranges(&self, ranges: Vec<(u64, u64)>) {
        *self.prop_crc_ranges.write() = ranges;
    }

    /// The ranges whose records must carry a matching property CRC.
    pub fn prop_crc_ranges(&self) -> Vec<(u64, u64)> {
        self.prop_crc_ranges.read().clone()
    }

    /// True when the record at `phy` must carry a matching property CRC.
    #[inline]
    pub fn needs_prop_crc(&self, phy: u64) -> bool {
        crate::checkpoint::in_ranges(&self.prop_crc_ranges.read(), phy)
    }

    /// The damaged ranges recovery skipped.
    pub fn damaged(&self) -> Vec<(u64, u64)> {
        self.damaged.read().clone()
    }

    /// True when `phy` lies in a damaged range recovery skipped.
    #[inline]
    pub fn is_damaged(&self, phy: i64) -> bool {
        u64::try_from(phy).is_ok_and(|p| self.damaged_range_end(p).is_some())
    }
}
