//! The store's running state (RocketMQ's `RunningFlags`): every reason puts
//! are refused is one bit of one atomic word, plus the reason of the first
//! failure, written once.
//!
//! ```text
//!  bit  0 NOT_READABLE              (kept as in RocketMQ; nothing sets it: reads are never refused)
//!  bit  1 NOT_WRITEABLE             poisoned by a caller or a panicking service
//!  bit  2 WRITE_LOGICS_QUEUE_ERROR  dispatch to a consume queue failed
//!  bit  3 WRITE_INDEX_FILE_ERROR    dispatch to (or flushing of) the index failed
//!  bit  4 DISK_FULL                 set and cleared by the retention service
//!  bit  5 FLUSH_FAILED              an msync/fsync failed (ours: RocketMQ logs and goes on)
//!  bit  6 RESOURCE_WAIT             ours: a service waits for memory, descriptors or disk
//!                                   space to create or map a file, and retries (puts are taken)
//! ```
//! Every bit but DISK_FULL and RESOURCE_WAIT is sticky: after a failed flush
//! a later one may succeed without the pages the kernel dropped, so the store
//! never becomes writeable again in this process. RESOURCE_WAIT is set while
//! at least one service (dispatch, allocation) retries a file it could not
//! create or map for want of a resource ([`is_transient_resource`]), each
//! with its reason, and cleared by the service once it succeeds. The put path asks [`RunningFlags::is_writeable`]:
//! one atomic load. The reasons are read only to explain a refusal.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::sync::Mutex;

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
    /// A service waits for a resource to create or map a file (puts are taken).
    ResourceWait = 1 << 6,
}

impl Flag {
    /// Every flag, in bit order.
    pub const ALL: [Flag; 7] = [
        Flag::NotReadable,
        Flag::NotWriteable,
        Flag::WriteLogicsQueueError,
        Flag::WriteIndexFileError,
        Flag::DiskFull,
        Flag::FlushFailed,
        Flag::ResourceWait,
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
            Flag::ResourceWait => "RESOURCE_WAIT",
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

/// Sticky failure bits (all but DISK_FULL, RESOURCE_WAIT and NOT_READABLE).
const POISON_MASK: u32 = NOT_WRITEABLE_MASK & !(Flag::DiskFull as u32);

/// The running state of one store (shared by the store and its services).
#[derive(Debug, Default)]
pub struct RunningFlags {
    bits: AtomicU32,
    /// The first failure: its flag and why. Written once, before its bit is
    /// published, so a reader that sees a failure bit finds a reason.
    first: OnceLock<(Flag, String)>,
    /// Why the disk is full (the retention service's last word).
    disk_full_reason: Mutex<String>,
    /// The services waiting for a resource, each with its reason.
    waiting: Mutex<Vec<(&'static str, String)>>,
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

    /// Records that service `who` waits for a resource (`Some(why)`) or no
    /// longer does (`None`); RESOURCE_WAIT is set while any service waits.
    /// Returns whether `who` waited before.
    pub fn set_waiting(&self, who: &'static str, why: Option<String>) -> bool {
        let mut w = self.waiting.lock();
        let before = w.iter().position(|(n, _)| *n == who);
        match (why, before) {
            (Some(why), Some(i)) => w[i].1 = why,
            (Some(why), None) => w.push((who, why)),
            (None, Some(i)) => {
                w.remove(i);
            }
            (None, None) => {}
        }
        let bit = Flag::ResourceWait.bit();
        if w.is_empty() {
            self.bits.fetch_and(!bit, Ordering::AcqRel);
        } else {
            self.bits.fetch_or(bit, Ordering::AcqRel);
        }
        before.is_some()
    }

    /// What waits for a resource and why (`"who: why; ..."`), while
    /// RESOURCE_WAIT is set.
    pub fn waiting_reason(&self) -> Option<String> {
        let w = self.waiting.lock();
        (!w.is_empty()).then(|| {
            w.iter()
                .map(|(who, why)| format!("{who}: {why}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
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
    /// (`"NAME: reason"`), as DISK_FULL carries the retention service's.
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
                (Flag::ResourceWait, _) => match self.waiting_reason() {
                    Some(why) => format!("RESOURCE_WAIT: {why}"),
                    None => "RESOURCE_WAIT".to_owned(),
                },
                (f, Some((ff, why))) if *ff == f => format!("{}: {why}", f.name()),
                (f, _) => f.name().to_owned(),
            })
            .collect()
    }
}

/// The errnos of a resource that may come back by itself: memory or address
/// space (`ENOMEM`, `EAGAIN`), descriptors (`EMFILE`, `ENFILE`) and disk
/// space (`ENOSPC`, `EDQUOT`).
pub const TRANSIENT_ERRNOS: [i32; 6] = [
    libc::ENOMEM,
    libc::EAGAIN,
    libc::EMFILE,
    libc::ENFILE,
    libc::ENOSPC,
    libc::EDQUOT,
];

/// True for an I/O error whose cause may go away by itself
/// ([`TRANSIENT_ERRNOS`]). Creating or mapping a file (dispatch, index
/// building, allocation) that fails so is retried, not a failure of the
/// store; a failed msync/fsync of written data never is (see the module
/// documentation), nor is any other errno (`EIO`) or damage.
pub fn is_transient_resource(e: &crate::error::StoreError) -> bool {
    matches!(e, crate::error::StoreError::Io { source, .. }
        if source.raw_os_error().is_some_and(|n| TRANSIENT_ERRNOS.contains(&n)))
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
    fn resource_waits_come_and_go_without_refusing_puts() {
        let r = RunningFlags::new();
        assert!(!r.set_waiting("dispatch", Some("mmap x: ENOMEM".into())));
        assert!(!r.set_waiting("allocate", Some("mmap y: ENOMEM".into())));
        assert!(r.is_writeable() && !r.is_poisoned());
        assert!(r.is_set(Flag::ResourceWait));
        assert_eq!(
            r.describe(),
            vec!["RESOURCE_WAIT: dispatch: mmap x: ENOMEM; allocate: mmap y: ENOMEM"]
        );
        assert!(r.set_waiting("dispatch", None));
        assert_eq!(
            r.describe(),
            vec!["RESOURCE_WAIT: allocate: mmap y: ENOMEM"]
        );
        r.set_waiting("allocate", None);
        assert!(!r.is_set(Flag::ResourceWait) && r.describe().is_empty());
        use crate::error::StoreError;
        let io = |n| StoreError::io("mmap f", std::io::Error::from_raw_os_error(n));
        assert!(is_transient_resource(&io(libc::ENOMEM)));
        assert!(is_transient_resource(&io(libc::EMFILE)));
        assert!(!is_transient_resource(&io(libc::EIO)));
        assert!(!is_transient_resource(&StoreError::corrupted("f", 0, "x")));
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
        r.fail(Flag::NotWriteable, "retention service failed");
        r.set_disk_full(true, "x");
        r.set_disk_full(false, "");
        assert!(!r.is_writeable());
        assert_eq!(
            r.describe(),
            vec!["NOT_WRITEABLE: retention service failed"]
        );
    }
}
