//! Arrow buffers over a mapped file's bytes, for zero-copy reads.
//!
//! ```text
//!  mapping  [.... record | record | record ....]
//!                  ^------- Buffer -------^      owner: Arc<MappedFile>
//! ```
//! A [`Buffer`] made here points into the mapping and owns a reference to
//! the [`MappedFile`]: the mapping lives until the buffer and every array
//! sharing it are dropped (through the Arrow C data interface: until the
//! consumer calls the array's release callback). Deleting the file (which
//! only unlinks it, see [`MappedFile::destroy`]) or closing the store lets
//! go of the store's own reference, never of this one; the file's disk
//! blocks stay in use until the last buffer is released.
//!
//! The store never shrinks a file it has mapped, and never rewrites bytes
//! below a file's read position while the store is open (recovery, which
//! may cut a tail, runs before any read), so a buffer's bytes stay the
//! records that were checked. A file shrunk by another process would make
//! reads of the pages past its new end raise SIGBUS; nothing in the store
//! does that.

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_buffer::Buffer;

use super::MappedFile;

/// The owner a mapped buffer holds: the file, so its mapping stays.
struct Pinned(#[allow(dead_code)] Arc<MappedFile>);

// The file is only kept alive here, never touched: an unwinding panic
// cannot observe it half-changed.
impl std::panic::RefUnwindSafe for Pinned {}

impl MappedFile {
    /// A buffer over bytes `[from, to)` of the file, holding the mapping
    /// until the buffer (and every slice or array sharing it) is dropped;
    /// `None` when the range is not inside the file.
    pub fn arrow_buffer(self: &Arc<Self>, from: usize, to: usize) -> Option<Buffer> {
        let bytes = self.raw().get(from..to)?;
        let ptr = NonNull::new(bytes.as_ptr().cast_mut())?;
        let owner: Arc<dyn arrow_buffer::alloc::Allocation> = Arc::new(Pinned(self.clone()));
        // SAFETY: `ptr..ptr + len` lies inside the mapping (checked by
        // `get` above), and `owner` keeps the mapping alive as long as the
        // buffer: the mapping is unmapped only when the last `Arc` of the
        // file drops. The bytes are read, never written, through the buffer.
        Some(unsafe { Buffer::from_custom_allocation(ptr, bytes.len(), owner) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_keeps_a_deleted_file_mapped_and_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000");
        let f = Arc::new(MappedFile::create(&path, 0, 1 << 16).unwrap());
        let msg = b"hello, mapped world";
        f.append(|tail, _| {
            tail[..msg.len()].copy_from_slice(msg);
            (msg.len(), ())
        })
        .unwrap();
        let buf = f.arrow_buffer(7, 13).unwrap();
        assert!(f.arrow_buffer(0, (1 << 16) + 1).is_none());
        f.destroy().unwrap();
        assert!(!path.exists());
        drop(f);
        assert_eq!(buf.as_slice(), b"mapped");
    }
}
