//! A store's lifecycle after open: starting and stopping the flush and
//! dispatch threads, forced flushes, the retention service's steps, shutdown,
//! abandon (a simulated kill) and drop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Store;
use crate::error::{Result, StoreError};
use crate::paths;
use crate::services::retention::RetentionPolicy;
use crate::services::service_thread::STOP_TIMEOUT;

impl Store {
    /// Starts the flush threads and creates the abort file (writer only).
    pub fn start_flush(&self) -> Result<()> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(());
        }
        self.flusher
            .start()
            .map_err(|e| StoreError::io("start the flush threads", e))?;
        let abort = paths::abort_file(&self.opts.root);
        std::fs::File::create(&abort)
            .and_then(|f| f.sync_all())
            .map_err(|e| StoreError::io(format!("create {}", abort.display()), e))?;
        crate::paths::sync_dir(&self.opts.root)
    }

    /// Starts the dispatch thread (writer only).
    pub fn start_dispatch(&self) -> Result<()> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(());
        }
        let mut t = self.dispatch_thread.lock();
        if t.is_none() {
            let thread = self
                .dispatcher
                .start_thread()
                .map_err(|e| StoreError::io("start the dispatch thread", e))?;
            *t = Some(thread);
        }
        Ok(())
    }

    /// Stops the dispatch thread (its current step completes). Nothing to
    /// stop in a forked child (the thread is the parent's).
    pub fn stop_dispatch(&self) {
        self.stop_dispatch_within(STOP_TIMEOUT);
    }

    /// As [`Store::stop_dispatch`], waiting at most `timeout` for the
    /// thread; false if it did not end (it is then left behind, logged).
    pub fn stop_dispatch_within(&self, timeout: Duration) -> bool {
        if self.is_forked_copy() {
            return true;
        }
        // Taken out first: the lock is not held while the thread is joined.
        let thread = self.dispatch_thread.lock().take();
        match thread {
            Some(t) => t.stop(timeout),
            None => true,
        }
    }

    /// True while the dispatch thread runs (not once it died).
    pub fn dispatch_running(&self) -> bool {
        self.dispatch_thread
            .lock()
            .as_ref()
            .is_some_and(|t| t.is_running())
    }

    /// One CommitLog step of the retention service: deletes what `policy`
    /// lets go (see [`crate::services::retention`]).
    pub fn delete_expired_commit_log(
        &self,
        policy: &RetentionPolicy,
    ) -> Result<crate::services::retention::CommitLogRetention> {
        self.check_open()?;
        if self.opts.read_only {
            return Err(StoreError::ReadOnly);
        }
        crate::services::retention::delete_expired_commit_log(
            &self.commitlog,
            policy,
            self.dispatcher.dispatch_from(),
        )
    }

    /// The queue step of the retention service: ConsumeQueue and index files
    /// wholly below CommitLog offset `min_phy`.
    pub fn delete_expired_queues(
        &self,
        min_phy: i64,
        interval: Duration,
    ) -> Result<crate::services::retention::QueueRetention> {
        self.check_open()?;
        if self.opts.read_only {
            return Err(StoreError::ReadOnly);
        }
        Ok(crate::services::retention::delete_expired_queues(
            &self.cqs,
            self.index.as_deref(),
            min_phy,
            interval,
        ))
    }

    /// Forces the CommitLog (not the queues) to disk and returns the flushed
    /// offset: what the schedule service does before it records progress,
    /// so saved progress never runs ahead of durable copies. Refused once the
    /// store is poisoned: after a failed flush a later fsync may succeed
    /// without the lost pages.
    pub fn flush_commit_log(&self) -> Result<u64> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(self.commitlog.flushed_offset());
        }
        if let Some(why) = self.flags.first_failure() {
            return Err(StoreError::Poisoned(why));
        }
        self.commitlog.queue().commit(0);
        self.commitlog
            .flush_all()
            .inspect_err(|e| self.poison(format!("CommitLog flush failed: {e}")))
    }

    /// Forces everything written to disk (after dispatching what is
    /// pending, so queues and index are flushed too); returns the flushed
    /// CommitLog offset.
    pub fn flush(&self) -> Result<u64> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(self.commitlog.flushed_offset());
        }
        if let Some(why) = self.flags.first_failure() {
            return Err(StoreError::Poisoned(why));
        }
        match self.drain_dispatch() {
            // Dispatch waits for a resource (memory, descriptors, disk
            // space) to create a queue or index file: what is written is
            // still flushed, and the caller learns that the queues are
            // behind; nothing failed for good, so nothing is poisoned.
            Err(e) if crate::running::is_transient_resource(&e) => {
                self.flusher
                    .final_flush()
                    .inspect_err(|e| self.poison(format!("flush failed: {e}")))?;
                Err(e)
            }
            r => r
                .and_then(|_| self.flusher.final_flush())
                .map(|_| self.commitlog.flushed_offset())
                .inspect_err(|e| self.poison(format!("flush failed: {e}"))),
        }
    }

    /// Stops dispatch (after dispatching what is left) and the flush threads,
    /// flushes everything, removes the abort file when the stop is clean
    /// (writeable, nothing left to dispatch), and releases the lock and every
    /// file (descriptors and mappings are gone when this returns, unless a
    /// concurrent reader still holds a file). Later calls fail with
    /// [`StoreError::Closed`]. In a forked child it only marks the store
    /// closed: the files, the abort file and the threads are the parent's.
    pub fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) || self.is_forked_copy() {
            return Ok(());
        }
        self.stop_ha();
        let prefaulter = self.prefaulter.lock().take();
        if let Some(mut p) = prefaulter {
            p.stop();
        }
        let mut result = Ok(());
        if !self.opts.read_only && !self.recovered.load(Ordering::Acquire) {
            // Recovery did not complete (refused or failed): write nothing.
            self.stop_dispatch();
            self.flusher.abandon();
        } else if !self.opts.read_only {
            self.stop_dispatch();
            if !self.flags.is_poisoned() {
                result = self.drain_all();
            }
            let flushed = self.flusher.shutdown();
            if result.is_ok() {
                result = flushed;
            }
            let clean =
                result.is_ok() && !self.flags.is_poisoned() && self.dispatcher.behind_bytes() == 0;
            if clean {
                let abort = paths::abort_file(&self.opts.root);
                match std::fs::remove_file(&abort) {
                    Ok(()) => result = crate::paths::sync_dir(&self.opts.root),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        result = Err(StoreError::io(format!("remove {}", abort.display()), e))
                    }
                }
            }
        }
        // Files made ahead and never used go: a clean store holds none.
        if let Some(a) = &self.allocator {
            a.stop(true);
        }
        // Release the files and the writer lock even when the final flush failed.
        self.release_files();
        result
    }

    /// Lets go of every file: mappings, descriptors, the checkpoint and,
    /// last, the writer lock. Background threads are stopped by then.
    fn release_files(&self) {
        self.commitlog.queue().set_allocator(None);
        self.commitlog.release();
        self.cqs.release();
        if let Some(index) = &self.index {
            index.release();
        }
        self.checkpoint.close();
        self.lock.lock().take();
    }

    /// Commits transient-pool buffers and dispatches everything written, so
    /// the queues and index are complete (before a clean stop, or before
    /// the config files that list topics are written).
    pub fn drain_dispatch(&self) -> Result<()> {
        self.check_open()?;
        self.drain_all()
    }

    fn drain_all(&self) -> Result<()> {
        self.commitlog.queue().commit(0);
        if self.opts.flush.sync_flush() {
            // Dispatch follows the flushed offset: flush what is written first.
            self.flusher.flush_to(self.commitlog.max_offset())?;
        }
        self.dispatcher.drain()
    }

    /// Stops like a killed process would (for tests): threads stop, nothing
    /// more is dispatched or flushed, the abort file stays, the lock is
    /// released. What was written stays in the page cache, as after kill -9.
    pub fn abandon(&self) {
        if self.closed.swap(true, Ordering::AcqRel) || self.is_forked_copy() {
            return;
        }
        self.stop_ha();
        let prefaulter = self.prefaulter.lock().take();
        if let Some(mut p) = prefaulter {
            p.stop();
        }
        self.stop_dispatch();
        self.flusher.abandon();
        if let Some(a) = &self.allocator {
            a.stop(false);
        }
        self.release_files();
    }
}

impl Drop for Store {
    /// A store dropped without `shutdown` (a forgotten handle) is shut down
    /// here: background threads stop, everything is flushed and the lock is
    /// released. Failures are logged; the abort file then stays and the next
    /// open recovers as after a crash.
    ///
    /// A copy in a forked child is leaked instead: its threads do not exist
    /// in the child (joining them would hang), and flushing, writing the
    /// checkpoint or removing the abort file would change the parent's
    /// store under it. The lock's descriptor was closed at fork.
    fn drop(&mut self) {
        if self.is_forked_copy() {
            // `get_mut`: no lock is taken (a vanished thread may hold one).
            std::mem::forget(self.prefaulter.get_mut().take());
            std::mem::forget(self.dispatch_thread.get_mut().take());
            if let Some(a) = &self.allocator {
                a.forget_thread();
                std::mem::forget(Arc::clone(a));
            }
            std::mem::forget(Arc::clone(&self.flusher));
            std::mem::forget(Arc::clone(&self.dispatcher));
            std::mem::forget(self.index.clone());
            std::mem::forget(Arc::clone(&self.cqs));
            std::mem::forget(Arc::clone(&self.commitlog));
            std::mem::forget(Arc::clone(&self.checkpoint));
            return;
        }
        if !self.closed.load(Ordering::Acquire) {
            if let Err(e) = self.shutdown() {
                log::error!("shutting down a dropped store failed: {e}");
            }
        }
    }
}
