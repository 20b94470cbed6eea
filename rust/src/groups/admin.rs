//! What a process that is not the member does with a group's folder: check
//! a commit's ownership (the fence), describe the group, expire dead
//! members and rebuild a garbage state (docs/format.md §13.2).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::files::{boot_id, monotonic_ms, Found, GroupDir};
use super::handover::step;
use super::state::{GroupState, Member, QueueOwner};
use crate::error::{Result, StoreError};

/// How long an expiry waits for the state lock.
const EXPIRE_PATIENCE: Duration = Duration::from_secs(2);
/// The quiet period of a rebuilt state when no live member says its
/// session timeout.
const DEFAULT_QUIET_MS: u64 = 60_000;

/// A member as [`describe`] shows it.
#[derive(Debug, Clone)]
pub struct MemberInfo {
    /// Its record.
    pub member: Member,
    /// Its process lives (its lock is held).
    pub alive: bool,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: u64,
}

/// A group as [`describe`] shows it.
#[derive(Debug, Clone, Default)]
pub struct Description {
    /// The group's name ("" without a state).
    pub group: String,
    /// The topic's name ("" without a state).
    pub topic: String,
    /// The state's generation.
    pub generation: u64,
    /// The members, by id.
    pub members: Vec<MemberInfo>,
    /// Each known queue's owner, and its lease left (ms, 0 when ended).
    pub queues: BTreeMap<u32, (QueueOwner, u64)>,
}

fn read(dir: &GroupDir) -> Result<Option<GroupState>> {
    match dir.read_state(&boot_id(), "", "")? {
        Found::State(st) => Ok(Some(st)),
        Found::Missing => Ok(None),
    }
}

/// Refuses a commit of `queue` by `member_id` with `epoch` unless that
/// member owns the queue at that epoch with its lease running now
/// ([`StoreError::Fenced`], naming the queue, the owner and its pid). Reads
/// the state without its lock (it is replaced whole).
pub fn check_owner(group_dir: &Path, queue: u32, member_id: &str, epoch: u64) -> Result<()> {
    check_owners(group_dir, member_id, &[(queue, epoch)])
}

/// [`check_owner`] for several queues with one read of the state: the
/// first queue refused raises.
pub fn check_owners(group_dir: &Path, member_id: &str, epochs: &[(u32, u64)]) -> Result<()> {
    let dir = GroupDir::new(group_dir);
    let st = read(&dir)?.unwrap_or_default();
    let now = monotonic_ms();
    for &(queue, epoch) in epochs {
        check_one(&st, now, queue, member_id, epoch)?;
    }
    Ok(())
}

fn check_one(st: &GroupState, now: u64, queue: u32, member_id: &str, epoch: u64) -> Result<()> {
    let o = st.queues.get(&queue).cloned().unwrap_or_default();
    let what = format!(
        "queue {queue} of topic '{}' (group '{}')",
        st.topic, st.group
    );
    match o.owner.as_deref() {
        Some(owner) if owner == member_id && o.epoch == epoch => {
            if o.lease_until > now {
                return Ok(());
            }
            Err(StoreError::Fenced(format!(
                "the lease of member {member_id} on {what} ended {:.1} s ago (epoch {epoch}); \
                 its position is not committed",
                (now - o.lease_until) as f64 / 1000.0
            )))
        }
        Some(owner) => {
            let pid = st
                .member(owner)
                .map_or_else(|| "?".to_owned(), |m| m.pid.to_string());
            Err(StoreError::Fenced(format!(
                "{what} now belongs to member {owner} (pid {pid}) since epoch {}; the lease of \
                 member {member_id} (epoch {epoch}) lapsed",
                o.epoch
            )))
        }
        None => Err(StoreError::Fenced(format!(
            "{what} has no owner now (epoch {}); the lease of member {member_id} (epoch \
             {epoch}) lapsed",
            o.epoch
        ))),
    }
}

/// The group's members and queues now (empty without a state).
pub fn describe(group_dir: &Path) -> Result<Description> {
    let dir = GroupDir::new(group_dir);
    let Some(st) = read(&dir)? else {
        return Ok(Description::default());
    };
    let now = monotonic_ms();
    let members = st
        .members
        .iter()
        .map(|m| MemberInfo {
            alive: dir.member_alive(&m.id),
            heartbeat_age_ms: now.saturating_sub(m.heartbeat),
            member: m.clone(),
        })
        .collect();
    let queues = st
        .queues
        .iter()
        .map(|(q, o)| (*q, (o.clone(), o.lease_until.saturating_sub(now))))
        .collect();
    Ok(Description {
        group: st.group,
        topic: st.topic,
        generation: st.generation,
        members,
        queues,
    })
}

/// Removes dead members (their process ended), late ones and those past
/// their poll deadline, hands their queues on as a heartbeat does, and
/// deletes the lock files of members gone. A state that cannot be read is
/// rebuilt empty, with a quiet period as long as the longest session
/// timeout of the members still alive, so no queue is handed out while
/// their leases may run. Returns the ids removed.
pub fn expire(group_dir: &Path) -> Result<Vec<String>> {
    let dir = GroupDir::new(group_dir);
    if !group_dir.is_dir() {
        return Ok(Vec::new());
    }
    let _lock = dir.lock_state(EXPIRE_PATIENCE)?;
    let boot = boot_id();
    let now = monotonic_ms();
    let mut removed = Vec::new();
    let st = match dir.read_state(&boot, "", "") {
        Ok(Found::State(mut st)) => {
            let out = step(&mut st, None, now, &mut |m| dir.member_alive(&m.id));
            removed.extend(out.dead);
            removed.extend(out.expired);
            st
        }
        Ok(Found::Missing) => GroupState::empty(&boot, "", ""),
        Err(StoreError::Corrupted { .. }) | Err(StoreError::Io { .. }) => {
            let files = dir.member_files();
            let quiet = files
                .iter()
                .filter(|(_, alive, _)| *alive)
                .map(|(_, _, t)| t.unwrap_or(DEFAULT_QUIET_MS))
                .max();
            let mut st = GroupState::empty(&boot, "", "");
            if let Some(q) = quiet {
                st.quiet_until = now.saturating_add(q);
            }
            log::warn!(
                "rebuilt the consumer group state {} (it could not be read); queues are handed \
                 out again from {} ms on",
                dir.state_path().display(),
                quiet.unwrap_or(0)
            );
            st
        }
        Err(e) => return Err(e),
    };
    dir.write_state(&st)?;
    for id in dir.sweep(&st) {
        if !removed.contains(&id) {
            removed.push(id);
        }
    }
    Ok(removed)
}
