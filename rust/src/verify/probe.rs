//! Probes that need no open store: the index geometry (hash slots and
//! entries per file) a store was written with, read from its index files,
//! and whether a writer holds the store's lock.

use std::fs::File;
use std::path::Path;

use crate::error::{Result, StoreError};
use crate::index::index_file::{
    DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM, HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE,
};
use crate::paths;

use super::files::{be_i32, map_file, numbered_files};

/// `(max_hash_slot_num, max_index_num)` from one index file's content.
///
/// The header holds the entry count `c` and the CommitLog offset of the
/// last key; that key's entry (number `c - 1`) holds the same offset, its
/// hash slot points back at it, and entry 0 is unused (zeros). Every
/// occurrence of the offset's bytes is tried as that entry; `None` if the
/// file holds fewer than one key or nothing fits.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub fn index_file_geometry(data: &[u8]) -> Option<(usize, usize)> {
    let size = data.len();
    if size <= INDEX_HEADER_SIZE {
        return None;
    }
    let end_phy: [u8; 8] = data.get(24..32)?.try_into().ok()?;
    let count = be_i32(data, 36)?;
    if count < 2 || end_phy == [0u8; 8] {
        return None;
    }
    let last = (count - 1) as usize;
    // Entry `last` holds the offset at `INDEX_HEADER_SIZE + slots * 4 +
    // last * 20 + 4` with at least one slot: only those positions (4 apart
    // from the first one) can be it.
    let mut from = last
        .checked_mul(INDEX_ENTRY_SIZE)?
        .checked_add(INDEX_HEADER_SIZE + HASH_SLOT_SIZE + 4)?;
    while let Some(found) = find_aligned(data, end_phy, from, HASH_SLOT_SIZE) {
        from = found + HASH_SLOT_SIZE;
        let Some(entry) = found.checked_sub(4) else {
            continue;
        };
        let Some(slots_bytes) = entry
            .checked_sub(INDEX_HEADER_SIZE)
            .and_then(|x| x.checked_sub(last.checked_mul(INDEX_ENTRY_SIZE)?))
        else {
            continue;
        };
        if slots_bytes == 0 || slots_bytes % HASH_SLOT_SIZE != 0 {
            continue;
        }
        let slots = slots_bytes / HASH_SLOT_SIZE;
        let rest = size - INDEX_HEADER_SIZE - slots_bytes;
        if rest % INDEX_ENTRY_SIZE != 0 || rest / INDEX_ENTRY_SIZE < count as usize {
            continue;
        }
        let Some(key_hash) = be_i32(data, entry) else {
            continue;
        };
        let first = INDEX_HEADER_SIZE + slots_bytes;
        if key_hash < 0 {
            continue;
        }
        let slot = INDEX_HEADER_SIZE + (key_hash as usize % slots) * HASH_SLOT_SIZE;
        let first_zero = data
            .get(first..first + INDEX_ENTRY_SIZE)
            .is_some_and(|e| e.iter().all(|&b| b == 0));
        if first_zero && be_i32(data, slot).map(|s| s as i64) == Some(last as i64) {
            return Some((slots, rest / INDEX_ENTRY_SIZE));
        }
    }
    None
}

/// The first position `from + k * step` at which `needle` lies in `hay`.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub(super) fn find_aligned(hay: &[u8], needle: [u8; 8], from: usize, step: usize) -> Option<usize> {
    let last = hay.len().checked_sub(needle.len())?;
    (from..=last)
        .step_by(step)
        .find(|&at| hay.get(at..at + 8).is_some_and(|w| w == needle))
}

/// The index geometry `(max_hash_slot_num, max_index_num)` to open the
/// store at `root` with so that its index files are used. Given values
/// win; a missing one follows from the files' size and content. `None` for
/// a value that cannot be told (the caller's default applies).
pub fn detect_index_geometry(
    root: &Path,
    slots: Option<usize>,
    num: Option<usize>,
) -> Result<(Option<usize>, Option<usize>)> {
    if slots.is_some() && num.is_some() {
        return Ok((slots, num));
    }
    let mut files = Vec::new();
    for (_, path) in numbered_files(&paths::index_dir(root))? {
        let len = std::fs::metadata(&path)
            .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
            .len() as usize;
        files.push((path, len));
    }
    let Some(size) = files.iter().map(|f| f.1).max() else {
        return Ok((slots, num));
    };
    let rest = size.saturating_sub(INDEX_HEADER_SIZE);
    if let Some(s) = slots {
        let left = rest.checked_sub(s.saturating_mul(HASH_SLOT_SIZE));
        return Ok(match left {
            Some(l) if l % INDEX_ENTRY_SIZE == 0 && l / INDEX_ENTRY_SIZE >= 2 => {
                (slots, Some(l / INDEX_ENTRY_SIZE))
            }
            _ => (slots, num),
        });
    }
    if let Some(n) = num {
        let left = rest.checked_sub(n.saturating_mul(INDEX_ENTRY_SIZE));
        return Ok(match left {
            Some(l) if l % HASH_SLOT_SIZE == 0 && l / HASH_SLOT_SIZE >= 1 => {
                (Some(l / HASH_SLOT_SIZE), num)
            }
            _ => (slots, num),
        });
    }
    if crate::index::index_file::index_file_size(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM)
        == Some(size)
    {
        return Ok((None, None));
    }
    for (path, len) in &files {
        if *len != size {
            continue;
        }
        if let Some(m) = map_file(path)? {
            if let Some((s, n)) = index_file_geometry(&m) {
                return Ok((Some(s), Some(n)));
            }
        }
    }
    // No key in any file: any geometry of the right size reads them (as
    // empty); RocketMQ's 1:4 ratio of slots to entries.
    let unit = HASH_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE;
    if rest % unit == 0 && rest / unit >= 1 {
        let s = rest / unit;
        return Ok((Some(s), Some(4 * s)));
    }
    Ok((None, None))
}

/// Whether a writer holds the lock of the store at `root` (`None` if that
/// cannot be told). Asks with `F_OFD_GETLK`, which reports a conflicting
/// lock without taking one, so a writer starting at the same moment is
/// never disturbed.
pub fn writer_running(root: &Path) -> Option<bool> {
    use std::os::fd::AsRawFd;
    let path = paths::lock_file(root);
    if !path.exists() {
        return Some(false);
    }
    let file = File::open(&path).ok()?;
    // SAFETY: zero is a valid `flock` value; the fields are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    // SAFETY: valid descriptor and a properly initialised `flock`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc != 0 {
        return None;
    }
    Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}
