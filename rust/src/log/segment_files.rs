//! A segmented directory's files on disk, before anything is mapped: the
//! 20-digit segment names in offset order and the segment size they agree on
//! (docs/format.md "Segment sizes on open").

use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};

/// The file size found in `dir`, if it holds any segment file. Only the
/// newest file may be shorter than the others; all others must agree.
pub fn detect_file_size(dir: &Path) -> Result<Option<usize>> {
    detect_size(dir, false)
}

/// [`detect_file_size`] for a queue loaded with
/// [`crate::log::mapped_file_queue::MappedFileQueue::load_tolerating_gaps`]: a file between files that is
/// shorter than the largest is a damaged file recovery rebuilds, not a
/// different geometry.
pub fn detect_file_size_tolerating_short(dir: &Path) -> Result<Option<usize>> {
    detect_size(dir, true)
}

fn detect_size(dir: &Path, short_ok: bool) -> Result<Option<usize>> {
    let names = list_segment_files(dir)?;
    if names.is_empty() {
        return Ok(None);
    }
    let mut sizes = Vec::with_capacity(names.len());
    for (_, p) in &names {
        let len = std::fs::metadata(p)
            .map_err(|e| StoreError::io(format!("stat {}", p.display()), e))?
            .len();
        sizes.push((len as usize, p.clone()));
    }
    let considered = if sizes.len() > 1 {
        &sizes[..sizes.len() - 1]
    } else {
        &sizes[..]
    };
    // Every file but the newest has the segment size; one shorter than the
    // largest is damaged (truncated), not a different geometry.
    let size = considered.iter().map(|(s, _)| *s).max().unwrap_or(0);
    if let Some((other, p)) = considered
        .iter()
        .find(|(s, _)| *s != size && !(short_ok && *s < size))
    {
        return Err(StoreError::corrupted(
            p,
            *other as u64,
            format!(
                "file is {other} bytes but the other files of {} are {size}; refusing to map it",
                dir.display()
            ),
        ));
    }
    if size == 0 && sizes.len() == 1 {
        // A lone empty file: a crash right after creating it; the size is unknown.
        return Ok(None);
    }
    if size == 0 {
        return Err(StoreError::corrupted(
            &considered[0].1,
            0,
            "file is empty while newer files follow; cannot infer the file size",
        ));
    }
    if sizes.len() > 1 && sizes[sizes.len() - 1].0 > size {
        let p = &sizes[sizes.len() - 1].1;
        return Err(StoreError::corrupted(
            p,
            size as u64,
            format!(
                "file is larger than the other files of {} ({size} bytes)",
                dir.display()
            ),
        ));
    }
    Ok(Some(size))
}

/// Segment files of `dir` (20-digit names) sorted by offset.
pub fn list_segment_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = list_dir(dir, |name, path| {
        if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
            name.parse::<u64>().ok().map(|off| (off, path))
        } else {
            None
        }
    })?;
    out.sort_by_key(|(o, _)| *o);
    Ok(out)
}

/// What `pick` keeps of the entries of `dir` (its name as UTF-8 and its
/// path), in directory order; no entries when `dir` does not exist.
pub fn list_dir<T>(dir: &Path, mut pick: impl FnMut(&str, PathBuf) -> Option<T>) -> Result<Vec<T>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(format!("list {}", dir.display()), e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| StoreError::io(format!("list {}", dir.display()), e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(t) = pick(name, ent.path()) {
            out.push(t);
        }
    }
    Ok(out)
}
