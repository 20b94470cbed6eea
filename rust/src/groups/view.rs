//! A member's local view of what it owns: the leases of its last
//! successful heartbeat, and what its consumer was told (docs/format.md
//! §13.2). Pure: every method takes the time, so the protocol's model test
//! drives views and states together.
//!
//! ```text
//!  heartbeat wrote state ──apply──> leases (queue -> epoch, until, revoking)
//!  consumer ──changes(now)──> assigned: leases to read, not told yet
//!                             to_revoke: told, no longer to read (revoking: handed back)
//!  heartbeat in the consumer's thread ──hold_changes(now)──> the same, held
//!                             for its next changes(now)
//!  consumer ──release(qs)──> handed back -> released (freed by the next heartbeat)
//!  owned(now): told, still to read, lease running
//! ```

use std::collections::{BTreeMap, BTreeSet};

use super::handover::Me;
use super::state::{GroupState, Member};

/// A lease the member holds on a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The queue's owner epoch.
    pub epoch: u64,
    /// Monotonic ms until which it runs.
    pub until: u64,
    /// The member is asked to give the queue up.
    pub revoking: bool,
}

/// Where the member is in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// A member.
    Member,
    /// Left because its poll deadline passed; back at its next poll.
    PollExpired,
    /// Left for good.
    Left,
}

/// What the member believes it owns, and what its consumer knows.
#[derive(Debug, Clone)]
pub struct View {
    /// The member's id now.
    pub id: String,
    /// Its leases as of its last successful state write.
    pub leases: BTreeMap<u32, Lease>,
    /// What its consumer reads (reported assigned): queue -> epoch.
    pub known: BTreeMap<u32, u64>,
    /// Reported to revoke while still owned, not released yet.
    pub handed_back: BTreeMap<u32, u64>,
    /// Released by its consumer, to be freed by the next heartbeat.
    pub release: BTreeMap<u32, u64>,
    /// The topic's queue ids its consumer sees.
    pub seen: BTreeSet<u32>,
    /// Monotonic ms by which its consumer must poll again.
    pub poll_deadline: u64,
    /// The last heartbeat's error.
    pub error: Option<String>,
    /// Member, left for want of polls, or left.
    pub status: Status,
    /// A poll came after it left for want of polls: join again.
    pub rejoin: bool,
    /// While a heartbeat runs: what its consumer read when it began. Until
    /// the heartbeat's outcome is applied, nothing else is handed to the
    /// consumer (the heartbeat may give away, at once, a queue its consumer
    /// was not reading).
    pub inflight: Option<BTreeMap<u32, u64>>,
    /// Changes taken when a heartbeat in its consumer's thread ended
    /// ([`View::hold_changes`]): (assigned, to_revoke), returned by the
    /// next [`View::changes`].
    pub held: (BTreeSet<u32>, BTreeSet<u32>),
}

impl View {
    /// A view that owns nothing.
    pub fn new(poll_deadline: u64) -> Self {
        Self {
            id: String::new(),
            leases: BTreeMap::new(),
            known: BTreeMap::new(),
            handed_back: BTreeMap::new(),
            release: BTreeMap::new(),
            seen: BTreeSet::new(),
            poll_deadline,
            error: None,
            status: Status::Member,
            rejoin: false,
            inflight: None,
            held: (BTreeSet::new(), BTreeSet::new()),
        }
    }

    /// The leases its consumer should read: running at `now`, neither
    /// revoking nor handed back nor released.
    pub fn desired(&self, now: u64) -> BTreeMap<u32, u64> {
        self.leases
            .iter()
            .filter(|(q, l)| {
                l.until > now
                    && !l.revoking
                    && self.handed_back.get(q) != Some(&l.epoch)
                    && self.release.get(q) != Some(&l.epoch)
                    && self
                        .inflight
                        .as_ref()
                        .map_or(true, |k| k.get(q) == Some(&l.epoch))
            })
            .map(|(q, l)| (*q, l.epoch))
            .collect()
    }

    /// The queues its consumer reads at `now`: reported assigned (not only
    /// held for the next [`View::changes`]), and
    /// still to read with the lease running. Queue -> (epoch, ms left).
    pub fn owned(&self, now: u64) -> BTreeMap<u32, (u64, u64)> {
        self.desired(now)
            .into_iter()
            .filter(|(q, e)| self.known.get(q) == Some(e) && !self.held.0.contains(q))
            .filter_map(|(q, e)| {
                let l = self.leases.get(&q)?;
                Some((q, (e, l.until.saturating_sub(now))))
            })
            .collect()
    }

    /// What changed for its consumer since the last call: (assigned,
    /// to_revoke), sorted, with those [`View::hold_changes`] took. A queue
    /// still owned that leaves the consumer's set is handed back: its lease
    /// is no longer extended.
    pub fn changes(&mut self, now: u64) -> (Vec<u32>, Vec<u32>) {
        self.hold_changes(now);
        let (assigned, revoked) = std::mem::take(&mut self.held);
        (
            assigned.into_iter().collect(),
            revoked.into_iter().collect(),
        )
    }

    /// Takes what changed for its consumer now and holds it for the next
    /// [`View::changes`]. Called where a heartbeat made in the consumer's
    /// own thread applies its outcome: a heartbeat of the member's thread
    /// starting before the consumer asks (its `inflight` hides what the
    /// consumer was not told) then cannot hide the queues this one gave.
    pub fn hold_changes(&mut self, now: u64) {
        let desired = self.desired(now);
        let revoked: Vec<(u32, u64)> = self
            .known
            .iter()
            .filter(|(q, e)| desired.get(q) != Some(e))
            .map(|(q, e)| (*q, *e))
            .collect();
        for (q, e) in &desired {
            if self.known.get(q) != Some(e) {
                self.held.0.insert(*q);
            }
        }
        for &(q, e) in &revoked {
            if self
                .leases
                .get(&q)
                .is_some_and(|l| l.epoch == e && l.until > now)
            {
                self.handed_back.insert(q, e);
            }
            self.held.1.insert(q);
        }
        self.known = desired;
    }

    /// Its consumer gave up `queues` (those handed back; others ignored).
    pub fn release(&mut self, queues: &[u32]) {
        for q in queues {
            if let Some(e) = self.handed_back.remove(q) {
                self.release.insert(*q, e);
            }
        }
    }

    /// Ms left on the lease of `queue` at `now` (0: none, or released).
    pub fn lease_left(&self, queue: u32, now: u64) -> u64 {
        let held = |l: &Lease| {
            self.release.get(&queue) != Some(&l.epoch)
                && self
                    .inflight
                    .as_ref()
                    .map_or(true, |k| k.get(&queue) == Some(&l.epoch))
        };
        match self.leases.get(&queue) {
            Some(l) if held(l) => l.until.saturating_sub(now),
            _ => 0,
        }
    }

    /// What a heartbeat of `member` takes from the view (`fresh`: the
    /// member has just taken a new id, so it knows nothing yet).
    pub fn me(&mut self, member: Member, fresh: bool, leaving: bool) -> Me {
        self.inflight = Some(self.known.clone());
        let keep = |m: &BTreeMap<u32, u64>| if fresh { BTreeMap::new() } else { m.clone() };
        Me {
            member,
            known: keep(&self.known),
            handed_back: keep(&self.handed_back),
            release: keep(&self.release),
            seen: self.seen.clone(),
            leaving,
        }
    }

    /// After `st` was written by member `id` with `me` (`fresh`: under a
    /// new id): the leases are the state's, and what was released is done.
    /// Under a new id nothing of before is the member's: its consumer is
    /// told to revoke every queue it reads.
    pub fn apply(&mut self, st: &GroupState, id: &str, me: &Me, fresh: bool) {
        if fresh {
            self.handed_back.clear();
            self.release.clear();
            for e in self.known.values_mut() {
                *e = u64::MAX; // matches no lease: reported in to_revoke
            }
        }
        self.inflight = None;
        self.id = id.to_owned();
        self.leases = st
            .queues
            .iter()
            .filter(|(_, o)| o.owner.as_deref() == Some(id))
            .map(|(q, o)| {
                let lease = Lease {
                    epoch: o.epoch,
                    until: o.lease_until,
                    revoking: o.revoking,
                };
                (*q, lease)
            })
            .collect();
        let leases = &self.leases;
        let still = |q: &u32, e: &u64| leases.get(q).is_some_and(|l| l.epoch == *e);
        self.handed_back.retain(|q, e| still(q, e));
        self.release
            .retain(|q, e| still(q, e) && me.release.get(q) != Some(e));
    }
}
