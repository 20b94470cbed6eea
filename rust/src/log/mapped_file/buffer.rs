//! The transient store pool's off-heap [`WriteBuffer`]: appends go there
//! and a commit copies them into the mapping.

/// An off-heap write buffer of the transient store pool, locked in memory
/// when the RLIMIT_MEMLOCK allows it.
#[derive(Debug)]
pub struct WriteBuffer {
    pub(super) ptr: *mut u8,
    len: usize,
    _owner: Box<[u8]>,
    locked: bool,
}

// SAFETY: the buffer is plain memory; the owning MappedFile's write lock
// orders writes, and the committer reads only bytes below the published
// write position, which the writer never touches again.
unsafe impl Send for WriteBuffer {}
// SAFETY: see above.
unsafe impl Sync for WriteBuffer {}

impl WriteBuffer {
    /// Allocates `len` zeroed bytes and tries to `mlock` them (a failure is
    /// logged, not fatal). `None` when the memory cannot be had (an
    /// address-space limit): the caller writes the file directly instead of
    /// aborting the process.
    pub fn new(len: usize) -> Option<Self> {
        let mut v: Vec<u8> = Vec::new();
        if let Err(e) = v.try_reserve_exact(len) {
            log::warn!("cannot allocate a {len}-byte transient store buffer: {e}");
            return None;
        }
        v.resize(len, 0);
        let mut owner = v.into_boxed_slice();
        let ptr = owner.as_mut_ptr();
        // SAFETY: `ptr` points at `len` bytes we own.
        let locked = unsafe { libc::mlock(ptr as *const libc::c_void, len) } == 0;
        if !locked {
            log::warn!(
                "cannot lock a {len}-byte transient store buffer in memory ({}); continuing unlocked",
                std::io::Error::last_os_error()
            );
        }
        Some(Self {
            ptr,
            len,
            _owner: owner,
            locked,
        })
    }

    /// Length of the buffer in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the buffer is locked in memory.
    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// Zeroes the buffer before it is reused for another file.
    pub fn clear(&self) {
        // SAFETY: called only when no file holds the buffer (the pool owns it).
        unsafe { std::ptr::write_bytes(self.ptr, 0, self.len) };
    }
}

impl Drop for WriteBuffer {
    fn drop(&mut self) {
        if self.locked {
            // SAFETY: unlocking the range we locked.
            unsafe { libc::munlock(self.ptr as *const libc::c_void, self.len) };
        }
    }
}
