//! The hand-over rules of `handover.rs`, with made-up times and liveness.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::groups::state::Strategy;

const T: u64 = 1_000; // every member's session timeout (ms)

fn member(id: &str, heartbeat: u64) -> Member {
    Member {
        id: id.to_owned(),
        pid: 7,
        host: "h".into(),
        since_ms: 0,
        heartbeat,
        session_timeout_ms: T,
        poll_deadline: u64::MAX,
        strategy: Strategy::Average,
        fixed: Vec::new(),
    }
}

fn me(id: &str, now: u64, queues: u32) -> Me {
    Me {
        member: member(id, now),
        known: BTreeMap::new(),
        handed_back: BTreeMap::new(),
        release: BTreeMap::new(),
        seen: (0..queues).collect(),
        leaving: false,
    }
}

fn owners(st: &GroupState) -> Vec<Option<&str>> {
    st.queues.values().map(|o| o.owner.as_deref()).collect()
}

fn everyone_alive(_: &Member) -> bool {
    true
}

/// The state after `a` joined alone at time 0 (it owns queues 0..4).
fn alone() -> GroupState {
    let mut st = GroupState::empty("b", "g", "t");
    step(&mut st, Some(&me("a", 0, 4)), 0, &mut everyone_alive);
    st
}

#[test]
fn a_free_queue_goes_to_its_target_with_the_next_epoch() {
    let st = alone();
    assert_eq!(owners(&st), vec![Some("a"); 4]);
    for o in st.queues.values() {
        assert_eq!((o.epoch, o.lease_until, o.revoking), (1, T, false));
    }
    assert_eq!(st.generation, 1);
}

#[test]
fn the_owner_extends_its_lease_and_the_epoch_stays() {
    let mut st = alone();
    let mut a = me("a", 300, 4);
    a.known = (0..4).map(|q| (q, 1)).collect();
    step(&mut st, Some(&a), 300, &mut everyone_alive);
    for o in st.queues.values() {
        assert_eq!((o.epoch, o.lease_until), (1, 300 + T));
    }
}

#[test]
fn a_joiner_marks_the_old_owners_queues_revoking_until_they_lapse() {
    let mut st = alone();
    step(&mut st, Some(&me("b", 100, 4)), 100, &mut everyone_alive);
    // Target: a takes 0 1, b takes 2 3; a's queues 2 and 3 are revoking,
    // still a's, with their lease not extended.
    assert_eq!(owners(&st), vec![Some("a"); 4]);
    let revoking: Vec<bool> = st.queues.values().map(|o| o.revoking).collect();
    assert_eq!(revoking, vec![false, false, true, true]);
    // a, whose consumer reads all four, keeps 2 and 3 revoking and does not
    // extend them.
    let mut a = me("a", 200, 4);
    a.known = (0..4).map(|q| (q, 1)).collect();
    step(&mut st, Some(&a), 200, &mut everyone_alive);
    assert_eq!(st.queues[&2].lease_until, T);
    assert_eq!(st.queues[&0].lease_until, 200 + T);
    // Once the lease ended, b's heartbeat takes them: epoch 2.
    let mut b = me("b", T, 4);
    b.member.heartbeat = T;
    step(&mut st, Some(&b), T, &mut everyone_alive);
    assert_eq!(
        owners(&st),
        vec![Some("a"), Some("a"), Some("b"), Some("b")]
    );
    assert_eq!((st.queues[&2].epoch, st.queues[&2].lease_until), (2, 2 * T));
}

#[test]
fn a_released_queue_moves_at_once() {
    let mut st = alone();
    step(&mut st, Some(&me("b", 100, 4)), 100, &mut everyone_alive);
    let mut a = me("a", 150, 4);
    a.known = [(0, 1), (1, 1)].into_iter().collect();
    a.handed_back = [(3, 1)].into_iter().collect();
    a.release = [(2, 1)].into_iter().collect();
    step(&mut st, Some(&a), 150, &mut everyone_alive);
    // 2 released: b's now (epoch 2); 3 handed back, not released: still a's
    // and revoking.
    assert_eq!(st.queues[&2].owner.as_deref(), Some("b"));
    assert_eq!(st.queues[&2].epoch, 2);
    assert_eq!(st.queues[&3].owner.as_deref(), Some("a"));
    assert!(st.queues[&3].revoking);
}

#[test]
fn a_queue_the_consumer_never_heard_of_moves_at_once() {
    let mut st = alone();
    step(&mut st, Some(&me("b", 100, 4)), 100, &mut everyone_alive);
    // a's consumer never asked for its changes: nothing to commit.
    step(&mut st, Some(&me("a", 150, 4)), 150, &mut everyone_alive);
    assert_eq!(
        owners(&st),
        vec![Some("a"), Some("a"), Some("b"), Some("b")]
    );
}

#[test]
fn a_dead_members_queues_are_free_at_once() {
    let mut st = alone();
    let mut b = me("b", 10, 4);
    b.known = BTreeMap::new();
    // a died (its lock is free) right after joining: its leases run until
    // T, yet b takes everything now.
    let out = step(&mut st, Some(&b), 10, &mut |m: &Member| m.id != "a");
    assert_eq!(out.dead, vec!["a".to_owned()]);
    assert_eq!(owners(&st), vec![Some("b"); 4]);
    assert!(st.queues.values().all(|o| o.epoch == 2));
    assert!(st.member("a").is_none());
}

#[test]
fn a_frozen_members_lease_is_respected() {
    let mut st = alone();
    // a froze at 0 (alive: its lock is held). At T - 1 its heartbeat is
    // not late yet, and its queues stay its own.
    step(
        &mut st,
        Some(&me("b", T - 1, 4)),
        T - 1,
        &mut everyone_alive,
    );
    assert_eq!(owners(&st), vec![Some("a"); 4]);
    // Just past its session timeout it is dropped, and its leases (until
    // T) have ended: b takes everything, epoch 2.
    let out = step(
        &mut st,
        Some(&me("b", T + 1, 4)),
        T + 1,
        &mut everyone_alive,
    );
    assert_eq!(out.expired, vec!["a".to_owned()]);
    assert_eq!(owners(&st), vec![Some("b"); 4]);
    assert!(st.queues.values().all(|o| o.epoch == 2));
}

#[test]
fn a_late_members_lease_still_running_is_waited_for() {
    let mut st = alone();
    // a's lease on queue 0 runs until 10T (say a longer timeout wrote it);
    // a itself is late at 2T.
    if let Some(o) = st.queues.get_mut(&0) {
        o.lease_until = 10 * T;
    }
    let out = step(
        &mut st,
        Some(&me("b", 2 * T, 4)),
        2 * T,
        &mut everyone_alive,
    );
    assert_eq!(out.expired, vec!["a".to_owned()]);
    assert_eq!(st.queues[&0].owner, None, "dropped, its lease waited for");
    assert_eq!(st.queues[&1].owner.as_deref(), Some("b"));
    step(
        &mut st,
        Some(&me("b", 10 * T, 4)),
        10 * T,
        &mut everyone_alive,
    );
    assert_eq!(st.queues[&0].owner.as_deref(), Some("b"));
}

#[test]
fn a_member_past_its_poll_deadline_is_dropped() {
    let mut st = alone();
    st.members[0].poll_deadline = 50;
    let out = step(&mut st, Some(&me("b", 60, 4)), 60, &mut everyone_alive);
    assert_eq!(out.expired, vec!["a".to_owned()]);
    // Its leases (until T) still run: the queues wait.
    assert_eq!(owners(&st), vec![None; 4]);
}

#[test]
fn leaving_frees_everything_at_once_for_the_others() {
    let mut st = alone();
    step(&mut st, Some(&me("b", 100, 4)), 100, &mut everyone_alive);
    let mut a = me("a", 200, 4);
    a.leaving = true;
    step(&mut st, Some(&a), 200, &mut everyone_alive);
    assert!(st.member("a").is_none());
    assert_eq!(owners(&st), vec![Some("b"); 4]);
}

#[test]
fn a_quiet_period_hands_nothing_out() {
    let mut st = GroupState::empty("b", "g", "t");
    st.quiet_until = 500;
    step(&mut st, Some(&me("a", 100, 2)), 100, &mut everyone_alive);
    assert_eq!(owners(&st), vec![None, None]);
    step(&mut st, Some(&me("a", 500, 2)), 500, &mut everyone_alive);
    assert_eq!(owners(&st), vec![Some("a"), Some("a")]);
}

#[test]
fn a_cleanup_without_a_member_drops_the_dead_and_hands_over() {
    let mut st = alone();
    step(&mut st, Some(&me("b", 100, 4)), 100, &mut everyone_alive);
    let out = step(&mut st, None, 200, &mut |m: &Member| m.id != "a");
    assert_eq!(out.dead, vec!["a".to_owned()]);
    assert_eq!(owners(&st), vec![Some("b"); 4]);
    let ids: BTreeSet<&str> = st.members.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["b"].into_iter().collect());
}

#[test]
fn a_fixed_member_takes_its_queues_from_an_averaging_one() {
    let mut st = alone();
    let mut f = me("f", 100, 4);
    f.member.strategy = Strategy::Fixed;
    f.member.fixed = vec![1];
    step(&mut st, Some(&f), 100, &mut everyone_alive);
    assert!(st.queues[&1].revoking);
    let mut a = me("a", 120, 4);
    a.known = (0..4).map(|q| (q, 1)).collect();
    a.handed_back = [(1, 1)].into_iter().collect();
    a.known.remove(&1);
    a.release = [(1, 1)].into_iter().collect();
    step(&mut st, Some(&a), 120, &mut everyone_alive);
    assert_eq!(st.queues[&1].owner.as_deref(), Some("f"));
    assert_eq!(
        owners(&st),
        vec![Some("a"), Some("f"), Some("a"), Some("a")]
    );
}
