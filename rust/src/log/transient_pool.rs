//! RocketMQ's transient store pool: off-heap write buffers that CommitLog
//! appends go to until a commit copies them into the mapped file, so the
//! put path never touches the page cache.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::sync::Mutex;

use crate::log::mapped_file::WriteBuffer;

/// RocketMQ's `TransientStorePool`: off-heap write buffers, one per CommitLog
/// file being written, so appends never touch the page cache until a commit
/// copies them in. Buffers are allocated on first use (up to `count`) and
/// locked in memory when the RLIMIT_MEMLOCK allows.
#[derive(Debug)]
pub struct TransientStorePool {
    buffer_size: usize,
    count: usize,
    created: AtomicUsize,
    free: Mutex<Vec<Arc<WriteBuffer>>>,
}

impl TransientStorePool {
    /// A pool of `count` buffers of `buffer_size` bytes (allocated on first use).
    pub fn new(count: usize, buffer_size: usize) -> Self {
        Self {
            buffer_size,
            count,
            created: AtomicUsize::new(0),
            free: Mutex::new(Vec::new()),
        }
    }

    /// A free buffer, or `None` when all `count` buffers are in use.
    pub fn borrow(&self) -> Option<Arc<WriteBuffer>> {
        if let Some(b) = self.free.lock().pop() {
            return Some(b);
        }
        let n = self.created.fetch_add(1, Ordering::AcqRel);
        if n >= self.count {
            self.created.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        match WriteBuffer::new(self.buffer_size) {
            Some(b) => Some(Arc::new(b)),
            None => {
                self.created.fetch_sub(1, Ordering::AcqRel);
                None
            }
        }
    }

    /// Returns a buffer whose file was committed in full.
    pub fn give_back(&self, buffer: Arc<WriteBuffer>) {
        buffer.clear();
        self.free.lock().push(buffer);
    }

    /// Buffers not in use (allocated or not yet allocated).
    pub fn available(&self) -> usize {
        self.free.lock().len()
            + self
                .count
                .saturating_sub(self.created.load(Ordering::Acquire))
    }
}
