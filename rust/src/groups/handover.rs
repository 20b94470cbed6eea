//! One heartbeat's change to a group's state, as a pure function of the
//! state read, the member making it, the time and who is alive
//! (docs/format.md §13.2, steps 2 to 5):
//!
//! ```text
//!  drop members: dead (lock free)        -> their queues free at once
//!                late (heartbeat > timeout) or past their poll deadline
//!                                        -> their queues free once the lease ends
//!  update self (or remove it, leaving)
//!  targets (assign.rs)
//!  each queue:  owner self, target self, lease running   -> lease extended
//!               lease ended (any owner)                  -> free
//!               owner != target                          -> revoking (not extended)
//!               owner self, never reported to its consumer, target other -> free now
//!               owner self, handed back by its consumer  -> revoking until released
//!               released by its owner                    -> free now
//!               free, lease ended, not in a quiet period -> target: epoch + 1, new lease
//! ```
//!
//! Nothing here reads a file or a clock, so every rule is tested with
//! made-up times.

use std::collections::{BTreeMap, BTreeSet};

use super::assign::targets;
use super::state::{GroupState, Member, QueueOwner};

/// The member making the heartbeat, and what it knows locally.
#[derive(Debug, Clone)]
pub struct Me {
    /// Its record, with `heartbeat` and `poll_deadline` current.
    pub member: Member,
    /// The queues its consumer reads (told it owns them), with epochs.
    pub known: BTreeMap<u32, u64>,
    /// Queues its consumer was told to give up and has not released yet.
    pub handed_back: BTreeMap<u32, u64>,
    /// Queues its consumer gave up (after `on_revoke` and commit).
    pub release: BTreeMap<u32, u64>,
    /// The topic's queue ids it sees.
    pub seen: BTreeSet<u32>,
    /// It leaves the group: removed, its queues free at once.
    pub leaving: bool,
}

/// What a step changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Members removed because their process ended.
    pub dead: Vec<String>,
    /// Members removed because they were late or did not poll in time.
    pub expired: Vec<String>,
}

fn free(o: &mut QueueOwner, at_once: bool) {
    o.owner = None;
    o.revoking = false;
    if at_once {
        o.lease_until = 0;
    }
}

/// Drops the members (other than `me`) that are dead or expired at `now`.
fn drop_members(
    st: &mut GroupState,
    me: Option<&str>,
    now: u64,
    alive: &mut dyn FnMut(&Member) -> bool,
) -> Outcome {
    let mut out = Outcome::default();
    let mut keep = Vec::with_capacity(st.members.len());
    for m in std::mem::take(&mut st.members) {
        if Some(m.id.as_str()) == me {
            keep.push(m);
        } else if !alive(&m) {
            out.dead.push(m.id);
        } else if now > m.heartbeat.saturating_add(m.session_timeout_ms) || now > m.poll_deadline {
            out.expired.push(m.id);
        } else {
            keep.push(m);
        }
    }
    st.members = keep;
    for o in st.queues.values_mut() {
        let Some(owner) = o.owner.as_deref() else {
            continue;
        };
        if out.dead.iter().any(|d| d == owner) {
            free(o, true);
        } else if out.expired.iter().any(|d| d == owner) {
            // A late member's lease is respected: the queue waits for it.
            free(o, false);
        }
    }
    if !out.dead.is_empty() || !out.expired.is_empty() {
        st.generation += 1;
    }
    out
}

/// Puts `me` into the state (or takes it out when leaving) and notes the
/// queues it sees.
fn update_self(st: &mut GroupState, me: &Me) {
    let id = &me.member.id;
    if me.leaving {
        let before = st.members.len();
        st.members.retain(|m| &m.id != id);
        if st.members.len() != before {
            st.generation += 1;
        }
        for o in st.queues.values_mut() {
            if o.owner.as_deref() == Some(id) {
                free(o, true);
            }
        }
        return;
    }
    match st.members.iter_mut().find(|m| &m.id == id) {
        Some(m) => *m = me.member.clone(),
        None => {
            st.members.push(me.member.clone());
            st.members.sort_by(|a, b| a.id.cmp(&b.id));
            st.generation += 1;
        }
    }
    for &q in me.seen.iter().chain(me.member.fixed.iter()) {
        st.queues.entry(q).or_default();
    }
}

/// One heartbeat's change to `st` by `me` (None: a cleanup by a process
/// that is not a member) at monotonic ms `now`; `alive` tells whether a
/// member's process lives.
pub fn step(
    st: &mut GroupState,
    me: Option<&Me>,
    now: u64,
    alive: &mut dyn FnMut(&Member) -> bool,
) -> Outcome {
    let my_id = me.map(|m| m.member.id.as_str());
    let out = drop_members(st, my_id, now, alive);
    if let Some(me) = me {
        update_self(st, me);
    }
    // An owner that is no member (a state edited by hand): free, lease kept.
    let ids: BTreeSet<&str> = st.members.iter().map(|m| m.id.as_str()).collect();
    for o in st.queues.values_mut() {
        if o.owner.as_deref().is_some_and(|w| !ids.contains(w)) {
            free(o, false);
        }
    }
    let queue_ids: Vec<u32> = st.queues.keys().copied().collect();
    let target = targets(&st.members, &queue_ids);
    let timeouts: BTreeMap<&str, u64> = st
        .members
        .iter()
        .map(|m| (m.id.as_str(), m.session_timeout_ms))
        .collect();
    for (q, o) in st.queues.iter_mut() {
        let want = target.get(q).map(String::as_str);
        hand_over(*q, o, want, me, now);
        if o.owner.is_none() && o.lease_until <= now && now >= st.quiet_until {
            if let Some(t) = want {
                o.owner = Some(t.to_owned());
                o.epoch += 1;
                o.lease_until = now.saturating_add(timeouts.get(t).copied().unwrap_or(0));
                o.revoking = false;
            }
        }
    }
    out
}

/// The rules for one owned queue (the free ones are handed out by the
/// caller).
fn hand_over(q: u32, o: &mut QueueOwner, want: Option<&str>, me: Option<&Me>, now: u64) {
    let Some(owner) = o.owner.clone() else {
        return;
    };
    if o.lease_until <= now {
        free(o, false);
        return;
    }
    let mine = me.filter(|m| m.member.id == owner && !m.leaving);
    let Some(me) = mine else {
        // Another member's queue: it extends its own lease.
        o.revoking = want != Some(owner.as_str());
        return;
    };
    let at = |set: &BTreeMap<u32, u64>| set.get(&q) == Some(&o.epoch);
    if at(&me.release) {
        free(o, true);
    } else if at(&me.handed_back) {
        // Its consumer is giving it up: the lease is not extended.
        o.revoking = true;
    } else if want != Some(owner.as_str()) {
        if at(&me.known) {
            // Its consumer gives it up at its next poll, or the lease ends.
            o.revoking = true;
        } else {
            // Its consumer never heard of it: nothing to commit first.
            free(o, true);
        }
    } else {
        o.revoking = false;
        o.lease_until = now.saturating_add(me.member.session_timeout_ms);
    }
}

#[cfg(test)]
#[path = "handover_tests.rs"]
mod tests;
