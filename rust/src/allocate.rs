//! Keeping page faults off the put path.
//!
//! A fresh CommitLog page faults on its first write; on a virtual machine
//! that costs several microseconds, more than the whole put. The
//! [`Prefaulter`] thread stays a window ahead of the write position and
//! prefaults those pages with `MADV_POPULATE_WRITE`, which maps them writable
//! without touching their contents, so it can never race with the writer.
//! (RocketMQ's `warmMappedFile` writes zeros over a whole new file instead,
//! which is only safe before the file is handed to the writer.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

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
            if upto < target {
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
