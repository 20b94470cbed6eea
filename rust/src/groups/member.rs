//! [`GroupMember`]: one member of a consumer group, its heartbeat thread
//! (`rocketstore-group`) and its local view of the queues it owns
//! (docs/format.md §13.2).
//!
//! ```text
//!  join ──> shared hold on the group lock, member lock, first heartbeat, thread
//!  thread: every heartbeat interval (or woken) ──> heartbeat
//!  heartbeat: state.lock ─> read ─> handover::step ─> write ─> local view
//!  consumer: changes() ─> (assigned, to_revoke); release(q) ─> heartbeat now
//!            owned(), lease_left(q): the local view, no file read
//!  leave ──> heartbeat that removes it, thread stopped, locks dropped
//! ```
//!
//! The local view changes only after a state write succeeded, so a failed
//! heartbeat (a full disk, a garbage state, a stuck lock) leaves the leases
//! to lapse. A member that finds itself dropped from the state (it was
//! frozen past its session timeout, or its lock file vanished) comes back
//! under a new id, owning nothing; one whose poll deadline passed leaves
//! and comes back at its next poll.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::sync::Mutex;

use super::files::{boot_id, host_name, monotonic_ms, Found, GroupDir};
use super::handover::step;
use super::state::{GroupState, Member, Strategy};
use super::view::{Status, View};
use crate::error::{Result, StoreError};
use crate::lock::{fork_generation, FileLock};
use crate::services::service_thread::{ServiceThread, Signal, STOP_TIMEOUT};

/// How long a join retries the shared hold on the group lock (a reset or
/// delete of the group's offsets holds it exclusively for a moment).
const GROUP_LOCK_PATIENCE: Duration = Duration::from_secs(1);

/// What a member is made with.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// The group's folder, `config/consumerGroups/<name>/`.
    pub group_dir: PathBuf,
    /// The group's lock, `config/consumerLocks/<name>.lock` (held shared).
    pub lock_path: PathBuf,
    /// The group's name (for messages and the state).
    pub group: String,
    /// The topic's name (for messages and the state).
    pub topic: String,
    /// How the member takes its share.
    pub strategy: Strategy,
    /// The queues a [`Strategy::Fixed`] member takes.
    pub fixed: Vec<u32>,
    /// Time between heartbeats.
    pub heartbeat_interval: Duration,
    /// A member without a heartbeat for this long loses its queues.
    pub session_timeout: Duration,
    /// A member that does not poll for this long leaves.
    pub max_poll_interval: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Join,
    Beat,
    /// A heartbeat in the consumer's thread: its outcome is held for the
    /// consumer's next `changes()` ([`View::hold_changes`]).
    BeatForConsumer,
    Leave,
}

/// Ends a heartbeat's `inflight` mark in the view, also when it failed.
struct EndInflight<'a>(&'a Mutex<View>);

impl Drop for EndInflight<'_> {
    fn drop(&mut self) {
        self.0.lock().inflight = None;
    }
}

/// Who the member is in the files; held while a heartbeat runs, so
/// heartbeats of one member never overlap.
#[derive(Debug)]
struct Identity {
    id: String,
    lock: Option<FileLock>,
    since_ms: i64,
}

#[derive(Debug)]
struct Shared {
    dir: GroupDir,
    opts: JoinOptions,
    boot: String,
    host: String,
    identity: Mutex<Identity>,
    view: Mutex<View>,
}

/// One member of a consumer group on one topic.
#[derive(Debug)]
pub struct GroupMember {
    shared: Arc<Shared>,
    thread: Mutex<Option<ServiceThread>>,
    group_lock: Mutex<Option<FileLock>>,
    generation: u64,
}

/// A new member id: `<host>-<pid>-<random>` (the host cut to file-name
/// characters).
fn new_member_id(host: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(monotonic_ms());
    h.write_u32(std::process::id());
    let clean: String = host
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{clean}-{}-{:08x}", std::process::id(), h.finish() as u32)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Shared {
    fn patience(&self) -> Duration {
        self.opts
            .heartbeat_interval
            .clamp(Duration::from_secs(1), Duration::from_secs(5))
    }

    /// The state as read, or an empty one. A missing state while other
    /// members' lock files are held, or while this member was one (someone
    /// removed the state, or the group's folder), starts with a quiet
    /// period as long as their longest session timeout, so no queue is
    /// handed out while a lease of before may run.
    fn load(&self, now: u64, me: &str, was_member: bool) -> Result<GroupState> {
        let o = &self.opts;
        let mut st = match self.dir.read_state(&self.boot, &o.group, &o.topic)? {
            Found::State(st) => st,
            Found::Missing => {
                let mut st = GroupState::empty(&self.boot, &o.group, &o.topic);
                let held = self.dir.member_files();
                let mine = was_member.then(|| ms(o.session_timeout));
                let longest = held
                    .iter()
                    .filter(|(id, alive, _)| *alive && id != me)
                    .map(|(_, _, t)| t.unwrap_or(ms(o.session_timeout)))
                    .chain(mine)
                    .max();
                if let Some(t) = longest {
                    st.quiet_until = now.saturating_add(t);
                }
                st
            }
        };
        st.group.clone_from(&o.group);
        st.topic.clone_from(&o.topic);
        Ok(st)
    }

    /// Refuses a fixed member whose queues a live fixed member names.
    fn check_fixed(&self, st: &GroupState, now: u64) -> Result<()> {
        let o = &self.opts;
        if o.strategy != Strategy::Fixed {
            return Ok(());
        }
        for m in st.members.iter().filter(|m| m.strategy == Strategy::Fixed) {
            let late = now > m.heartbeat.saturating_add(m.session_timeout_ms);
            let both: Vec<u32> = m
                .fixed
                .iter()
                .copied()
                .filter(|q| o.fixed.contains(q))
                .collect();
            if !both.is_empty() && !late && now <= m.poll_deadline && self.dir.member_alive(&m.id) {
                return Err(StoreError::GroupBusy(format!(
                    "queues {both:?} of topic {:?} (group {:?}) are named by member {} \
                     (pid {} on {}); a fixed member takes only queues no other fixed member names",
                    o.topic, o.group, m.id, m.pid, m.host
                )));
            }
        }
        Ok(())
    }

    /// Takes a new identity (a first join, or a comeback after being
    /// dropped): a new id and its held lock file; the old one is removed.
    fn register(&self, ident: &mut Identity, st: &GroupState, now: u64) -> Result<()> {
        self.check_fixed(st, now)?;
        let id = new_member_id(&self.host);
        let lock = self.dir.lock_member(&id, ms(self.opts.session_timeout))?;
        if let Some(old) = ident.lock.take() {
            drop(old);
            let _ = std::fs::remove_file(self.dir.member_lock_path(&ident.id));
        }
        ident.id = id;
        ident.lock = Some(lock);
        ident.since_ms = crate::clock::system_now_ms();
        Ok(())
    }

    /// One heartbeat (docs/format.md §13.2, steps 1 to 6).
    fn round(&self, mode: Mode) -> Result<()> {
        let mut ident = self.identity.lock();
        let (status, poll_deadline, rejoin) = {
            let v = self.view.lock();
            (v.status, v.poll_deadline, v.rejoin)
        };
        if status == Status::Left
            || (status == Status::PollExpired && mode != Mode::Join && !rejoin)
        {
            return Ok(());
        }
        let _state_lock = self.dir.lock_state(self.patience())?;
        let now = monotonic_ms();
        let mut st = self.load(now, &ident.id, mode != Mode::Join)?;
        let mut leaving = mode == Mode::Leave;
        let mut status_after = Status::Member;
        let fresh = mode == Mode::Join
            || status == Status::PollExpired
            || (!leaving && (st.member(&ident.id).is_none() || !self.dir.member_alive(&ident.id)));
        if leaving {
            status_after = Status::Left;
        } else if now > poll_deadline {
            // Its poll deadline passed: it leaves, back at its next poll.
            leaving = true;
            status_after = Status::PollExpired;
        } else if fresh {
            self.register(&mut ident, &st, now)?;
        }
        let o = &self.opts;
        let member = Member {
            id: ident.id.clone(),
            pid: std::process::id(),
            host: self.host.clone(),
            since_ms: ident.since_ms,
            heartbeat: now,
            session_timeout_ms: ms(o.session_timeout),
            poll_deadline,
            strategy: o.strategy,
            fixed: o.fixed.clone(),
        };
        // From here until the outcome is applied, the consumer is handed
        // nothing new (the view's `inflight`), whatever happens.
        let me = self.view.lock().me(member, fresh, leaving);
        let _inflight = EndInflight(&self.view);
        let outcome = step(&mut st, Some(&me), now, &mut |m| {
            self.dir.member_alive(&m.id)
        });
        self.dir.write_state(&st)?;
        if !outcome.dead.is_empty() || matches!(mode, Mode::Join | Mode::Leave) || fresh {
            self.dir.sweep(&st);
        }
        drop(_state_lock);
        let mut v = self.view.lock();
        v.apply(&st, &ident.id, &me, fresh);
        v.status = status_after;
        if status_after == Status::PollExpired && status != Status::PollExpired {
            v.error = Some(format!(
                "member of group {:?} on topic {:?} left: no poll within max_poll_interval \
                 ({:.1} s); it joins again at its next poll",
                o.group,
                o.topic,
                o.max_poll_interval.as_secs_f64()
            ));
            v.leases.clear();
        } else {
            v.error = None;
        }
        v.rejoin = false;
        if mode == Mode::BeatForConsumer {
            v.hold_changes(monotonic_ms());
        }
        drop(v);
        Ok(())
    }

    /// As [`Shared::round`], recording the outcome in the view.
    fn round_recorded(&self, mode: Mode) -> Result<()> {
        let r = self.round(mode);
        if let Err(e) = &r {
            self.view.lock().error = Some(e.to_string());
        }
        r
    }
}

impl GroupMember {
    /// Joins the group: a shared hold on its lock, a member lock, one
    /// heartbeat, then the heartbeat thread.
    ///
    /// Errors: [`StoreError::GroupBusy`] when an exclusive consumer (or a
    /// reset of the group's offsets) holds the group, or a fixed queue is
    /// named by another live fixed member; [`StoreError::Corrupted`] for a
    /// garbage state; [`StoreError::InvalidArgument`] for bad timings.
    pub fn join(opts: JoinOptions) -> Result<Self> {
        if opts.heartbeat_interval.is_zero() || opts.session_timeout <= opts.heartbeat_interval {
            return Err(StoreError::InvalidArgument(format!(
                "the heartbeat interval ({:.3} s) must be above 0 and below the session \
                 timeout ({:.3} s)",
                opts.heartbeat_interval.as_secs_f64(),
                opts.session_timeout.as_secs_f64()
            )));
        }
        if opts.strategy == Strategy::Fixed && opts.fixed.is_empty() {
            return Err(StoreError::InvalidArgument(
                "a fixed member names at least one queue".into(),
            ));
        }
        let group_lock = Self::hold_group(&opts)?;
        std::fs::create_dir_all(opts.group_dir.join(super::files::MEMBERS_DIR))
            .map_err(|e| StoreError::io(format!("create {}", opts.group_dir.display()), e))?;
        let host = host_name();
        let now = monotonic_ms();
        let view = View::new(now.saturating_add(ms(opts.max_poll_interval)));
        let shared = Arc::new(Shared {
            dir: GroupDir::new(&opts.group_dir),
            boot: boot_id(),
            host,
            identity: Mutex::new(Identity {
                id: String::new(),
                lock: None,
                since_ms: 0,
            }),
            view: Mutex::new(view),
            opts,
        });
        shared.round(Mode::Join)?;
        let member = Self {
            shared: shared.clone(),
            thread: Mutex::new(None),
            group_lock: Mutex::new(Some(group_lock)),
            generation: fork_generation(),
        };
        let interval = shared.opts.heartbeat_interval;
        let (beat, on_panic) = (shared.clone(), shared.clone());
        let thread = ServiceThread::start(
            "group",
            move |why| on_panic.view.lock().error = Some(why),
            move |sig: &Signal| {
                sig.wait(interval);
                if !sig.is_stopped() {
                    let _ = beat.round_recorded(Mode::Beat);
                }
            },
        )
        .map_err(|e| StoreError::io("start the consumer group heartbeat thread", e));
        match thread {
            Ok(t) => *member.thread.lock() = Some(t),
            Err(e) => {
                member.leave();
                return Err(e);
            }
        }
        Ok(member)
    }

    /// The shared hold on the group's lock, retried for a second.
    fn hold_group(opts: &JoinOptions) -> Result<FileLock> {
        let deadline = std::time::Instant::now() + GROUP_LOCK_PATIENCE;
        loop {
            if let Some(lock) = FileLock::acquire_shared(&opts.lock_path, false)? {
                return Ok(lock);
            }
            if std::time::Instant::now() >= deadline {
                return Err(StoreError::GroupBusy(format!(
                    "consumer group {:?} on topic {:?} is held by an exclusive consumer or a \
                     reset of its offsets (lock {}); close it first",
                    opts.group,
                    opts.topic,
                    opts.lock_path.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// True in a process forked after the member was made: its locks and
    /// thread are the parent's.
    pub fn is_forked_copy(&self) -> bool {
        fork_generation() != self.generation
    }

    /// The member's id now (it changes when the member comes back after
    /// being dropped).
    pub fn member_id(&self) -> String {
        self.shared.view.lock().id.clone()
    }

    /// The options it was made with.
    pub fn options(&self) -> &JoinOptions {
        &self.shared.opts
    }

    /// The topic's queue ids this member sees (the next heartbeat adds the
    /// new ones to the group's; it is woken when the set changed).
    pub fn set_queues(&self, ids: &[u32]) {
        let ids: BTreeSet<u32> = ids.iter().copied().collect();
        let changed = {
            let mut v = self.shared.view.lock();
            let changed = v.seen != ids;
            v.seen = ids;
            changed
        };
        if changed {
            self.wakeup();
        }
    }

    /// A poll happened: the poll deadline moves on; a member that left for
    /// want of polls joins again.
    pub fn polled(&self) {
        let now = monotonic_ms();
        let mut v = self.shared.view.lock();
        v.poll_deadline = now.saturating_add(ms(self.shared.opts.max_poll_interval));
        if v.status == Status::PollExpired && !v.rejoin {
            v.rejoin = true;
            drop(v);
            self.wakeup();
        }
    }

    fn wakeup(&self) {
        if let Some(t) = self.thread.lock().as_ref() {
            t.wakeup();
        }
    }

    /// The queues its consumer reads: reported assigned by
    /// [`GroupMember::changes`], still to read, with their lease running.
    /// Queue -> (epoch, ms of lease left).
    pub fn owned(&self) -> BTreeMap<u32, (u64, u64)> {
        self.shared.view.lock().owned(monotonic_ms())
    }

    /// What changed since the last call: (queues assigned, queues to
    /// revoke), sorted. A queue whose lease ended or that another member
    /// took is in `to_revoke` as well (its commit will be refused); a queue
    /// may be in both when it came back under a new epoch, or when it was
    /// assigned and taken back since the last call.
    pub fn changes(&self) -> (Vec<u32>, Vec<u32>) {
        self.shared.view.lock().changes(monotonic_ms())
    }

    /// Gives up queues its consumer was told to revoke (after `on_revoke`
    /// and their commit), then writes the state at once. Others are
    /// ignored. A failed write is recorded in [`GroupMember::error`]; the
    /// leases lapse then.
    pub fn release(&self, queues: &[u32]) {
        self.shared.view.lock().release(queues);
        let _ = self.shared.round_recorded(Mode::Beat);
    }

    /// Milliseconds left on the lease of `queue` (0: not held, or ended).
    pub fn lease_left_ms(&self, queue: u32) -> u64 {
        self.shared.view.lock().lease_left(queue, monotonic_ms())
    }

    /// One heartbeat now, in the caller's thread (its consumer's): what it
    /// changed is taken as it ends and returned by the next
    /// [`GroupMember::changes`], so a heartbeat of the member's thread
    /// starting in between does not hide it.
    pub fn heartbeat_now(&self) -> Result<()> {
        let status = self.shared.view.lock().status;
        if status == Status::Left {
            return Err(StoreError::InvalidArgument(
                "this consumer group member has left".into(),
            ));
        }
        self.shared.round_recorded(Mode::BeatForConsumer)
    }

    /// The last heartbeat's error, if it failed.
    pub fn error(&self) -> Option<String> {
        self.shared.view.lock().error.clone()
    }

    /// True once [`GroupMember::leave`] ran.
    pub fn has_left(&self) -> bool {
        self.shared.view.lock().status == Status::Left
    }

    /// Leaves the group: its queues are freed for the others at once, its
    /// thread stops and its locks are dropped (idempotent). A failed final
    /// write is logged: the others then wait for its leases to end.
    pub fn leave(&self) {
        if self.is_forked_copy() || self.has_left() {
            return;
        }
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            t.stop(STOP_TIMEOUT);
        }
        if let Err(e) = self.shared.round_recorded(Mode::Leave) {
            log::warn!("leaving consumer group {:?}: {e}", self.shared.opts.group);
        }
        let mut ident = self.shared.identity.lock();
        if let Some(lock) = ident.lock.take() {
            drop(lock);
            let _ = std::fs::remove_file(self.shared.dir.member_lock_path(&ident.id));
        }
        drop(ident);
        let mut v = self.shared.view.lock();
        v.status = Status::Left;
        v.leases.clear();
        v.known.clear();
        v.held = Default::default();
        drop(v);
        drop(self.group_lock.lock().take());
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        if self.is_forked_copy() {
            // The parent's thread and locks: nothing to stop or write here.
            if let Some(t) = self.thread.get_mut().take() {
                std::mem::forget(t);
            }
            return;
        }
        self.leave();
    }
}

#[cfg(test)]
#[path = "member_tests.rs"]
mod tests;
