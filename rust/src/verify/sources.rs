//! The pointer sources: one per ConsumeQueue (its files mapped) and one
//! per index file.

use std::path::Path;

use crate::error::{Result, StoreError};
use crate::index::index_file::{HASH_SLOT_SIZE, INDEX_HEADER_SIZE};
use crate::paths;

use super::files::{be_i32, map_file, numbered_files, numbered_files_dirs};
use super::pointers::{Names, Source};
use super::VerifyReport;

/// One source per queue, with its files mapped.
pub(super) fn consume_queue_sources(root: &Path) -> Result<(Names, Vec<Source>)> {
    let mut names = Names::default();
    let mut sources = Vec::new();
    let cq_root = paths::consume_queue_dir(root);
    let topics = match std::fs::read_dir(&cq_root) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((names, sources)),
        Err(e) => return Err(StoreError::io(format!("list {}", cq_root.display()), e)),
    };
    let mut topic_dirs: Vec<_> = topics.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    topic_dirs.sort();
    for topic_dir in topic_dirs {
        let Some(topic) = topic_dir
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
        else {
            continue;
        };
        if !topic_dir.is_dir() {
            continue;
        }
        let t = names.topics.len();
        names.topics.push(topic);
        for (queue_id, queue_dir) in numbered_files_dirs(&topic_dir)? {
            sources.push(Source::Queue {
                topic: t,
                queue_id,
                files: numbered_files(&queue_dir)?,
                file: 0,
                map: None,
                unit: 0,
            });
        }
    }
    Ok((names, sources))
}

/// One source per index file of the expected size; files of another size
/// are reported.
pub(super) fn index_sources(
    root: &Path,
    slots: usize,
    num: usize,
    report: &mut VerifyReport,
) -> Result<(Names, Vec<Source>)> {
    let Some(size) = crate::index::index_file::index_file_size(slots, num) else {
        return Err(StoreError::InvalidArgument(
            "index geometry too large".into(),
        ));
    };
    let mut names = Names::default();
    let mut sources = Vec::new();
    for (_, path) in numbered_files(&paths::index_dir(root))? {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(map) = map_file(&path)? else {
            continue;
        };
        if map.len() != size {
            report.problems.push((
                None,
                format!(
                    "index file {name} has {} bytes, the geometry ({slots} slots, {num} \
                     entries) needs {size}",
                    map.len()
                ),
            ));
            continue;
        }
        let count = be_i32(&map, 36).unwrap_or(0).max(0) as usize;
        sources.push(Source::Index {
            file: names.index_files.len(),
            first: INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE,
            count: count.min(num),
            // Entry 0 is unused.
            entry: 1,
            map,
        });
        names.index_files.push(name);
    }
    Ok((names, sources))
}
