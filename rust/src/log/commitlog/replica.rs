//! A slave's write: bytes copied from its master appended at the end of
//! the CommitLog as they are (RocketMQ's `appendData`), never encoded here.

use super::CommitLog;
use crate::error::{Result, StoreError};

impl CommitLog {
    /// Appends `data`, copied from a master's CommitLog at `start`, under
    /// the put lock. `start` must be this log's end, or for an empty log
    /// the start of a segment (the first file is made there); `data` must
    /// fit the segment holding `start`. Nothing is written when a check
    /// fails.
    pub fn append_replica(&self, start: u64, data: &[u8]) -> Result<()> {
        let _st = self.put.lock();
        let size = self.file_size() as u64;
        let empty = self.mfq.is_empty();
        if empty {
            if start % size != 0 {
                return Err(StoreError::internal(format!(
                    "replicated bytes at {start} for an empty CommitLog do not start \
                     a segment of {size} bytes"
                )));
            }
        } else if start != self.mfq.max_offset() {
            return Err(StoreError::internal(format!(
                "replicated bytes at {start}, but the CommitLog ends at {}",
                self.mfq.max_offset()
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        if start % size + data.len() as u64 > size {
            return Err(StoreError::internal(format!(
                "{} replicated bytes at {start} cross the end of a {size}-byte segment",
                data.len()
            )));
        }
        let f = self.mfq.last_file_or_create(start)?;
        let at = f.file_from_offset() + f.wrote_position() as u64;
        if at != start {
            return Err(StoreError::internal(format!(
                "replicated bytes at {start}, but the file takes bytes at {at}"
            )));
        }
        // Written with `pwrite`: catch-up fills whole fresh pages, which a
        // store through the mapping would first zero.
        f.append_copy(data)?;
        if empty {
            self.mfq.set_flushed_where(start);
        }
        Ok(())
    }
}
