//! The membership protocol as a model (docs/format.md §13.2): members that
//! join, heartbeat (from their thread, or their consumer's: its changes
//! held for its next poll), poll (or stop polling), release, leave, die,
//! freeze and fail their state writes, in random order and at random times (a
//! heartbeat's view update may come after its consumer polled), over the real state step
//! (`handover.rs`) and local views (`view.rs`). After every event:
//!
//! - no two living members may read one queue: their views never both
//!   hold a running lease on it that their consumer may read (a frozen
//!   member counts: it may resume at any moment);
//! - an epoch never goes back, and the state decodes as it was written.
//!
//! At the end, with everyone thawed and polling, every queue is read by
//! exactly one member (when any member averages).

use std::collections::BTreeMap;

use proptest::prelude::{prop_assert, prop_assert_eq, proptest};

use super::handover::{step, Me};
use super::state::{GroupState, Member, Strategy};
use super::view::View;

const QUEUES: u32 = 6;
const TIMEOUT: u64 = 1_000;
const MAX_POLL: u64 = 2_500;

#[derive(Debug, Clone)]
struct Sim {
    id: String,
    restarts: u32,
    alive: bool,
    frozen: bool,
    joined: bool,
    view: View,
    /// Its consumer must poll by then, or it leaves.
    poll_deadline: u64,
    /// Left for want of polls: back at its next poll.
    expired: bool,
    /// A heartbeat that wrote the state but has not applied it to the
    /// view yet (its consumer may poll meanwhile).
    pending: Option<(Me, bool)>,
}

struct World {
    st: GroupState,
    now: u64,
    sims: Vec<Sim>,
}

impl World {
    fn new(members: usize) -> Self {
        let sims = (0..members)
            .map(|_| Sim {
                id: String::new(),
                restarts: 0,
                alive: true,
                frozen: false,
                joined: false,
                view: View::new(u64::MAX),
                poll_deadline: u64::MAX,
                expired: false,
                pending: None,
            })
            .collect();
        Self {
            st: GroupState::empty("boot", "g", "t"),
            now: 1,
            sims,
        }
    }

    /// One heartbeat of member `i` (`write`: false for a failed write;
    /// `apply`: false to leave it pending).
    fn beat(&mut self, i: usize, leaving: bool, write: bool, apply: bool) {
        self.finish(i);
        let now = self.now;
        let alive_ids: Vec<String> = self
            .sims
            .iter()
            .filter(|s| s.alive && s.joined)
            .map(|s| s.id.clone())
            .collect();
        let s = &mut self.sims[i];
        if s.expired {
            return;
        }
        let mut leaving = leaving;
        if now > s.poll_deadline && !leaving {
            leaving = true;
            s.expired = true;
        }
        let fresh = self.st.member(&s.id).is_none() && !leaving;
        if fresh {
            s.restarts += 1;
            s.id = format!("m{i}-{:03}", s.restarts);
        }
        let member = Member {
            id: s.id.clone(),
            pid: i as u32,
            host: "h".into(),
            since_ms: 0,
            heartbeat: now,
            session_timeout_ms: TIMEOUT,
            poll_deadline: s.poll_deadline,
            strategy: Strategy::Average,
            fixed: Vec::new(),
        };
        let me = s.view.me(member, fresh, leaving);
        let my_id = s.id.clone();
        let mut next = self.st.clone();
        step(&mut next, Some(&me), now, &mut |m: &Member| {
            m.id == my_id || alive_ids.contains(&m.id)
        });
        if !write {
            s.view.inflight = None;
            return;
        }
        self.st = next;
        s.pending = Some((me, fresh));
        if apply {
            self.finish(i);
        }
    }

    /// Applies member `i`'s pending heartbeat to its view.
    fn finish(&mut self, i: usize) {
        let s = &mut self.sims[i];
        if let Some((me, fresh)) = s.pending.take() {
            s.view.apply(&self.st, &me.member.id, &me, fresh);
            if me.leaving {
                s.view.leases.clear();
            }
        }
    }

    /// Member `i`'s consumer polls: it takes its changes and releases what
    /// it was told to revoke (if `release`).
    fn poll(&mut self, i: usize, release: bool) {
        let now = self.now;
        let s = &mut self.sims[i];
        s.poll_deadline = now + MAX_POLL;
        if s.expired {
            s.expired = false;
            self.beat(i, false, true, true);
        }
        let (_, revoked) = self.sims[i].view.changes(now);
        if release && !revoked.is_empty() {
            self.sims[i].view.release(&revoked);
            self.beat(i, false, true, true);
        }
    }

    fn can_act(&self, i: usize) -> bool {
        let s = &self.sims[i];
        s.alive && !s.frozen && s.joined
    }

    fn event(&mut self, kind: u8, i: usize, dt: u64) {
        self.now += dt;
        match kind {
            0 => {
                let s = &mut self.sims[i];
                if !s.joined {
                    // A new process (or the same one joining again).
                    s.alive = true;
                    s.frozen = false;
                    s.joined = true;
                    s.view = View::new(u64::MAX);
                    s.view.seen = (0..QUEUES).collect();
                    s.id = format!("m{i}-new");
                    s.poll_deadline = self.now + MAX_POLL;
                    s.expired = false;
                    s.pending = None;
                    self.beat(i, false, true, true);
                }
            }
            1 if self.can_act(i) => self.beat(i, false, true, true),
            2 if self.can_act(i) => self.beat(i, false, true, false),
            3 | 4 if self.can_act(i) => self.poll(i, kind == 3),
            5 => {
                // kill -9: its lock dies with it.
                let s = &mut self.sims[i];
                s.alive = false;
                s.joined = false;
                s.pending = None;
            }
            6 if self.sims[i].alive && self.sims[i].joined => {
                let s = &mut self.sims[i];
                s.frozen = !s.frozen;
            }
            7 if self.can_act(i) => {
                self.beat(i, true, true, true);
                let s = &mut self.sims[i];
                s.joined = false;
                s.view = View::new(u64::MAX);
            }
            8 if self.can_act(i) => self.beat(i, false, false, true),
            9 if self.can_act(i) => self.finish(i),
            10 if self.can_act(i) => {
                self.beat(i, false, true, true);
                let now = self.now;
                self.sims[i].view.hold_changes(now);
            }
            _ => {}
        }
    }

    /// Who may read each queue now: living members whose view holds a
    /// running lease their consumer may read.
    fn readers(&self) -> BTreeMap<u32, Vec<usize>> {
        let mut out: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, s) in self.sims.iter().enumerate() {
            if !s.alive || !s.joined {
                continue;
            }
            for q in s.view.desired(self.now).keys() {
                out.entry(*q).or_default().push(i);
            }
        }
        out
    }
}

proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

    #[test]
    fn no_queue_is_read_by_two_members(
        members in 2usize..5,
        events in proptest::collection::vec((0u8..11, 0usize..5, 0u64..700), 1..150),
    ) {
        let mut w = World::new(members);
        let mut epochs: BTreeMap<u32, u64> = BTreeMap::new();
        for (kind, i, dt) in events {
            w.event(kind, i % members, dt);
            for (q, readers) in w.readers() {
                prop_assert!(readers.len() <= 1, "queue {} read by {:?} at {}: {:?}", q, readers, w.now, w.st);
            }
            for (q, o) in &w.st.queues {
                let before = epochs.insert(*q, o.epoch).unwrap_or(0);
                prop_assert!(o.epoch >= before, "queue {} epoch went back", q);
            }
            let round = GroupState::decode(&w.st.encode(), "boot", "g", "t");
            prop_assert_eq!(round.as_ref().ok(), Some(&w.st));
        }
        // Everyone thawed and polling: the group settles, each queue read
        // by exactly one member.
        for s in &mut w.sims {
            s.frozen = false;
        }
        if w.sims.iter().any(|s| s.alive && s.joined) {
            for _ in 0..8 {
                for i in 0..members {
                    w.event(3, i, 150);
                    w.event(1, i, 0);
                }
            }
            for i in 0..members {
                w.event(3, i, 0);
            }
            let readers = w.readers();
            prop_assert_eq!(readers.len() as u32, QUEUES, "{:?}", w.st);
            prop_assert!(readers.values().all(|r| r.len() == 1));
            // And each reader's consumer was told: owned() lists them.
            for (q, r) in readers {
                prop_assert!(w.sims[r[0]].view.owned(w.now).contains_key(&q));
            }
        }
    }
}

/// The race `View::inflight` closes: a heartbeat gives away at once a
/// queue its consumer was never told of, and the new owner takes it
/// before the old owner's view is updated.
#[test]
fn a_queue_given_away_mid_heartbeat_is_not_read_twice() {
    let mut w = World::new(2);
    w.event(0, 0, 0); // a joins: it owns every queue, its consumer not told yet
    w.event(0, 1, 10); // b joins: half of a's queues are b's target
    w.event(2, 0, 10); // a's heartbeat gives them to b, its view not updated yet
    w.event(1, 1, 10); // b's heartbeat: b owns them
    let readers = w.readers();
    assert!(readers.values().all(|r| r.len() == 1), "{readers:?}");
    w.event(9, 0, 0); // a's view catches up
    let readers = w.readers();
    assert_eq!(readers.len() as u32, QUEUES, "{:?}", w.st);
    assert!(readers.values().all(|r| r.len() == 1), "{readers:?}");
}
