//! Keeping page faults off the put path.
//!
//! A fresh CommitLog page faults on its first write; on a virtual machine
//! that costs several microseconds, more than the whole put. The
//! [`Prefaulter`] thread stays a window ahead of the write position and
//! prefaults those pages with `MADV_POPULATE_WRITE`, which maps them writable
//! without touching their contents, so it can never race with the writer.
//! (RocketMQ's `warmMappedFile` writes zeros over a whole new file instead,
//! which is only safe before the file is handed to the writer.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::mapped_file::WriteBuffer;
use crate::mapped_file_queue::MappedFileQueue;

/// Bytes kept prefaulted ahead of the write position.
pub const DEFAULT_WINDOW: usize = 32 << 20;

struct Shared {
    stop: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

/// Background thread prefaulting the CommitLog ahead of the writer.
pub struct Prefaulter {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Prefaulter {
    /// Starts the thread over `queue`.
    pub fn start(queue: Arc<MappedFileQueue>, window: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("rocketstore-prefault".into())
            .spawn(move || run(&s, &queue, window))?;
        Ok(Self {
            shared,
            handle: Some(handle),
        })
    }

    /// Stops and joins the thread.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _g = self.shared.lock.lock();
            self.shared.wake.notify_all();
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Prefaulter {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(shared: &Shared, queue: &MappedFileQueue, window: usize) {
    // (file start, prefaulted up to)
    let mut done: Option<(u64, usize)> = None;
    let step = 4 << 20;
    while !shared.stop.load(Ordering::Acquire) {
        let mut worked = false;
        if let Some(f) = queue.last_file() {
            let from = f.file_from_offset();
            let mut upto = match done {
                Some((start, upto)) if start == from => upto,
                _ => 0,
            };
            let wrote = f.wrote_position();
            let target = (wrote + window).min(f.file_size());
            upto = upto.max(wrote);
            // Work in large steps only: chasing every few appended bytes would
            // turn this thread into a busy loop of tiny madvise calls.
            if upto < target && (target - upto >= step / 2 || target == f.file_size()) {
                let end = (upto + step).min(target);
                if !f.prefault(upto, end) {
                    return; // kernel without MADV_POPULATE_WRITE: nothing to do
                }
                upto = end;
                worked = true;
            }
            done = Some((from, upto));
        }
        if !worked {
            let mut g = shared.lock.lock();
            if !shared.stop.load(Ordering::Acquire) {
                shared.wake.wait_for(&mut g, Duration::from_millis(2));
            }
        }
    }
}

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
