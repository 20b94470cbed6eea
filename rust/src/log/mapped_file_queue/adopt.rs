//! A read-only queue follows the files another process makes: it adopts
//! them, and takes the segment size from the first one when it holds none
//! (docs/format.md "Segment sizes on open").

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{list_segment_files, MappedFileQueue};
use crate::error::{Result, StoreError};
use crate::log::mapped_file::MappedFile;

impl MappedFileQueue {
    /// Lets a read-only queue that holds no file yet take the segment size
    /// from the first file it adopts, if that file's length is a non-zero
    /// multiple of `unit` (1 accepts any non-zero length).
    pub fn adopt_size_from_files(&self, unit: usize) {
        if !self.writable {
            self.size_unit.store(unit.max(1), Ordering::Relaxed);
        }
    }

    fn adopts_size(&self) -> bool {
        self.size_unit.load(Ordering::Relaxed) != 0
    }

    fn legal_size(&self, len: u64) -> bool {
        let unit = self.size_unit.load(Ordering::Relaxed).max(1) as u64;
        len > 0 && len % unit == 0
    }

    /// Logs a file [`MappedFileQueue::adopt_new_files`] refuses, once per
    /// file and length.
    fn warn_refused(&self, path: &Path, len: u64, why: &str) {
        let mut last = self.last_refused.lock();
        if last.as_ref() != Some(&(path.to_path_buf(), len)) {
            log::warn!("not mapping {} ({len} bytes): {why}", path.display());
            *last = Some((path.to_path_buf(), len));
        }
    }

    /// Re-lists the directory and appends the files another process created
    /// after the current last file (or, for an empty queue, from the first
    /// file found): only consecutive files of exactly the segment size are
    /// taken, with positions 0; a file still being created (short) stops the
    /// scan and is picked up by a later call. A read-only queue that holds no
    /// file yet and was told to ([`MappedFileQueue::adopt_size_from_files`])
    /// takes the segment size from the first file it finds (the writer's
    /// files decide, docs/format.md "Segment sizes on open"), if that length
    /// is a legal one: not 0 and a multiple of the queue's unit. A file refused is logged and
    /// never mapped. Returns how many were added.
    pub fn adopt_new_files(&self) -> Result<usize> {
        self.adopt_new_files_upto(usize::MAX)
    }

    /// [`MappedFileQueue::adopt_new_files`], adding at most `limit` files.
    pub fn adopt_new_files_upto(&self, limit: usize) -> Result<usize> {
        let mut size = self.file_size() as u64;
        let mut next = self.last_file().map(|f| f.file_from_offset() + size);
        let mut added = 0;
        for (off, path) in list_segment_files(&self.dir)? {
            if added >= limit {
                break;
            }
            match next {
                Some(n) if off < n => continue,
                Some(n) if off != n => break,
                None if off % size != 0 && !self.adopts_size() => break,
                _ => {}
            }
            let len = match std::fs::metadata(&path) {
                Ok(m) => m.len(),
                // Deleted since the listing (retention): with no file known
                // yet, the files after it are the queue's.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && next.is_none() => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => return Err(StoreError::io(format!("stat {}", path.display()), e)),
            };
            if next.is_none() && self.adopts_size() && len != size {
                if !self.legal_size(len) {
                    self.warn_refused(&path, len, "it is not a legal segment length");
                    break;
                }
                if off % len != 0 {
                    self.warn_refused(&path, len, "its offset is not a multiple of its length");
                    break;
                }
                log::info!(
                    "{}: taking the segment size {len} from {} (configured {size})",
                    self.dir.display(),
                    path.display()
                );
                self.file_size.store(len as usize, Ordering::Release);
                size = len;
            }
            if next.is_none() && off % size != 0 {
                self.warn_refused(
                    &path,
                    len,
                    "its offset is not a multiple of the segment size",
                );
                break;
            }
            if len != size {
                if len != 0 {
                    self.warn_refused(
                        &path,
                        len,
                        &format!("its siblings are {size} bytes (still being created?)"),
                    );
                }
                break;
            }
            let mf = Arc::new(
                MappedFile::open(&path, off, self.file_size(), self.writable)?
                    .with_reserve(self.reserve),
            );
            mf.set_positions(0);
            let mut files = self.files.write();
            match files.last() {
                Some(l) if l.file_from_offset() + size != off => break,
                _ => files.push(mf),
            }
            added += 1;
            next = Some(off + size);
        }
        Ok(added)
    }
}
