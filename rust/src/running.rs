//! The store's running state (RocketMQ's `RunningFlags`): every reason puts
//! are refused is one bit of one atomic word, plus the reason of the first
//! failure, written once.
//!
//! ```text
//!  bit  0 NOT_READABLE              (kept as in RocketMQ; nothing sets it: reads are never refused)
//!  bit  1 NOT_WRITEABLE             poisoned by a caller or a panicking service
//!  bit  2 WRITE_LOGICS_QUEUE_ERROR  dispatch to a consume queue failed
//!  bit  3 WRITE_INDEX_FILE_ERROR    dispatch to (or flushing of) the index failed
//!  bit  4 DISK_FULL                 set and cleared by the clean service
//!  bit  5 FLUSH_FAILED              an msync/fsync failed (ours: RocketMQ logs and goes on)
//! ```
//! Every bit but DISK_FULL is sticky: after a failed flush a later one may
//! succeed without the pages the kernel dropped, so the store never becomes
//! writeable again in this process. The put path asks [`RunningFlags::is_writeable`]:
//! one atomic load. The reasons are read only to explain a refusal.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

/// One flag of the running state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Flag {
    /// Reads are refused.
    NotReadable = 1,
    /// Puts are refused for good (poisoned).
    NotWriteable = 1 << 1,
    /// Dispatch to a consume queue failed.
    WriteLogicsQueueError = 1 << 2,
    /// Dispatch to the index failed.
    WriteIndexFileError = 1 << 3,
    /// Disk usage is above the warning level.
    DiskFull = 1 << 4,
    /// A flush failed.
    FlushFailed = 1 << 5,
}

impl Flag {
    /// Every flag, in bit order.
    pub const ALL: [Flag; 6] = [
        Flag::NotReadable,
        Flag::NotWriteable,
        Flag::WriteLogicsQueueError,
        Flag::WriteIndexFileError,
        Flag::DiskFull,
        Flag::FlushFailed,
    ];

    /// RocketMQ's name of the flag (ours for FLUSH_FAILED).
    pub fn name(self) -> &'static str {
        match self {
            Flag::NotReadable => "NOT_READABLE",
            Flag::NotWriteable => "NOT_WRITEABLE",
            Flag::WriteLogicsQueueError => "WRITE_LOGICS_QUEUE_ERROR",
            Flag::WriteIndexFileError => "WRITE_INDEX_FILE_ERROR",
            Flag::DiskFull => "DISK_FULL",
            Flag::FlushFailed => "FLUSH_FAILED",
        }
    }

    #[inline]
    fn bit(self) -> u32 {
        self as u32
    }
}

/// Bits that refuse puts.
const NOT_WRITEABLE_MASK: u32 = Flag::NotWriteable as u32
    | Flag::WriteLogicsQueueError as u32
    | Flag::WriteIndexFileError as u32
    | Flag::DiskFull as u32
    | Flag::FlushFailed as u32;

/// Sticky failure bits (all but DISK_FULL and NOT_READABLE).
const POISON_MASK: u32 = NOT_WRITEABLE_MASK & !(Flag::DiskFull as u32);

/// The running state of one store (shared by the store and its services).
#[derive(Debug, Default)]
pub struct RunningFlags {
    bits: AtomicU32,
    /// The first failure: its flag and why. Written once, before its bit is
    /// published, so a reader that sees a failure bit finds a reason.
    first: OnceLock<(Flag, String)>,
    /// Why the disk is full (the clean service's last word).
    disk_full_reason: Mutex<String>,
}

impl RunningFlags {
    /// A state with no flag set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The raw bits (RocketMQ's `getFlagBits`).
    #[inline]
    pub fn bits(&self) -> u32 {
        self.bits.load(Ordering::Acquire)
    }

    /// True when `flag` is set.
    #[inline]
    pub fn is_set(&self, flag: Flag) -> bool {
        self.bits() & flag.bit() != 0
    }

    /// True when puts are taken: no failure, disk not full (one load).
    #[inline]
    pub fn is_writeable(&self) -> bool {
        self.bits() & NOT_WRITEABLE_MASK == 0
    }

    /// True once a sticky failure was recorded.
    #[inline]
    pub fn is_poisoned(&self) -> bool {
        self.bits() & POISON_MASK != 0
    }

    /// Records a failure: sets `flag` (sticky) and keeps `why` if it is the
    /// first failure. Returns true if this was the first failure.
    pub fn fail(&self, flag: Flag, why: impl Into<String>) -> bool {
        debug_assert!(flag.bit() & POISON_MASK != 0, "{flag:?} is not a failure");
        let first = self.first.set((flag, why.into())).is_ok();
        self.bits.fetch_or(flag.bit(), Ordering::AcqRel);
        first
    }

    /// Why puts are refused for good: the first failure's reason.
    pub fn poison_reason(&self) -> Option<String> {
        if self.is_poisoned() {
            self.first.get().map(|(_, why)| why.clone())
        } else {
            None
        }
    }

    /// The first failure as `"FLAG: reason"` (for errors that refuse work).
    pub fn first_failure(&self) -> Option<String> {
        if self.is_poisoned() {
            self.first
                .get()
                .map(|(f, why)| format!("{}: {why}", f.name()))
        } else {
            None
        }
    }

    /// The first failure's reason when `flag` is set.
    pub fn reason_if(&self, flag: Flag) -> Option<String> {
        if self.is_set(flag) {
            self.first.get().map(|(_, why)| why.clone())
        } else {
            None
        }
    }

    /// Sets (with its reason) or clears DISK_FULL. Returns whether it was set.
    pub fn set_disk_full(&self, full: bool, reason: &str) -> bool {
        let bit = Flag::DiskFull.bit();
        let before = if full {
            *self.disk_full_reason.lock() = reason.to_owned();
            self.bits.fetch_or(bit, Ordering::AcqRel)
        } else {
            self.bits.fetch_and(!bit, Ordering::AcqRel)
        };
        before & bit != 0
    }

    /// Why the disk is full, while DISK_FULL is set.
    pub fn disk_full_reason(&self) -> Option<String> {
        self.is_set(Flag::DiskFull)
            .then(|| self.disk_full_reason.lock().clone())
    }

    /// Why a put is refused now (`None`: it is not).
    pub fn refusal(&self) -> Option<String> {
        if self.is_writeable() {
            return None;
        }
        if let Some(why) = self.poison_reason() {
            return Some(format!("the store is not writeable: {why}"));
        }
        self.disk_full_reason()
            .map(|why| format!("the disk is full: {why}"))
    }

    /// The set flags by name; the first failure's flag carries its reason
    /// (`"NAME: reason"`), as DISK_FULL carries the clean service's.
    pub fn describe(&self) -> Vec<String> {
        let bits = self.bits();
        let first = self.first.get();
        Flag::ALL
            .iter()
            .filter(|f| bits & f.bit() != 0)
            .map(|&f| match (f, first) {
                (Flag::DiskFull, _) => {
                    format!("DISK_FULL: {}", self.disk_full_reason.lock())
                }
                (f, Some((ff, why))) if *ff == f => format!("{}: {why}", f.name()),
                (f, _) => f.name().to_owned(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_failure_wins_and_stays() {
        let r = RunningFlags::new();
        assert!(r.is_writeable() && !r.is_poisoned() && r.describe().is_empty());
        assert!(r.fail(Flag::FlushFailed, "fsync: EIO"));
        assert!(!r.fail(Flag::WriteLogicsQueueError, "later"));
        assert!(!r.is_writeable());
        assert_eq!(r.poison_reason().as_deref(), Some("fsync: EIO"));
        assert_eq!(
            r.describe(),
            vec!["WRITE_LOGICS_QUEUE_ERROR", "FLUSH_FAILED: fsync: EIO"]
        );
        assert_eq!(r.reason_if(Flag::WriteIndexFileError), None);
        assert_eq!(
            r.refusal().as_deref(),
            Some("the store is not writeable: fsync: EIO")
        );
    }

    #[test]
    fn disk_full_comes_and_goes() {
        let r = RunningFlags::new();
        assert!(!r.set_disk_full(true, "95% used"));
        assert!(!r.is_writeable() && !r.is_poisoned());
        assert_eq!(r.describe(), vec!["DISK_FULL: 95% used"]);
        assert_eq!(r.refusal().as_deref(), Some("the disk is full: 95% used"));
        assert!(r.set_disk_full(false, ""));
        assert!(r.is_writeable() && r.disk_full_reason().is_none());
        // A failure is not cleared with the disk.
        r.fail(Flag::NotWriteable, "clean service failed");
        r.set_disk_full(true, "x");
        r.set_disk_full(false, "");
        assert!(!r.is_writeable());
        assert_eq!(r.describe(), vec!["NOT_WRITEABLE: clean service failed"]);
    }
}
