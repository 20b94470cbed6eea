//! `GroupMember` against real files and the real clock (short intervals):
//! hand-over between members, a dead member's queues, a frozen member's
//! lease, fixed queues, a garbage state, the poll deadline.

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;
use crate::groups::admin;
use crate::groups::state::QueueOwner;

const BEAT: Duration = Duration::from_millis(50);
const TIMEOUT: Duration = Duration::from_millis(400);
/// How long a test waits for what a heartbeat thread does (a loaded
/// machine may starve it; timing claims are the process tests').
const PATIENCE: Duration = Duration::from_secs(10);

fn opts(root: &Path, strategy: Strategy, fixed: &[u32]) -> JoinOptions {
    JoinOptions {
        group_dir: root.join("consumerGroups").join("t@g"),
        lock_path: root.join("consumerLocks").join("t@g.lock"),
        group: "g".into(),
        topic: "t".into(),
        strategy,
        fixed: fixed.to_vec(),
        heartbeat_interval: BEAT,
        session_timeout: TIMEOUT,
        max_poll_interval: Duration::from_secs(300),
    }
}

fn join(root: &Path, queues: u32) -> GroupMember {
    let m = GroupMember::join(opts(root, Strategy::Average, &[])).unwrap();
    m.set_queues(&(0..queues).collect::<Vec<_>>());
    m.heartbeat_now().unwrap();
    m
}

fn owned(m: &GroupMember) -> Vec<u32> {
    m.owned().keys().copied().collect()
}

/// What a consumer reads at a poll: its changes taken, then `owned()`.
fn reads(m: &GroupMember) -> Vec<u32> {
    m.changes();
    owned(m)
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    t0.elapsed()
}

#[test]
fn two_members_split_the_queues_through_revoke_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let a = join(dir.path(), 8);
    assert!(
        owned(&a).is_empty(),
        "nothing is read before changes() told it"
    );
    assert_eq!(a.changes(), ((0..8).collect(), vec![]));
    assert_eq!(owned(&a), (0..8).collect::<Vec<_>>());
    let b = join(dir.path(), 8);
    assert!(reads(&b).is_empty(), "a's leases still run");
    // The first member by id takes queues 0..4, the other 4..8.
    let (keep, give): (Vec<u32>, Vec<u32>) = if a.member_id() < b.member_id() {
        ((0..4).collect(), (4..8).collect())
    } else {
        ((4..8).collect(), (0..4).collect())
    };
    // a's heartbeat marks b's share revoking; its consumer gives it up.
    a.heartbeat_now().unwrap();
    let (assigned, revoked) = a.changes();
    assert_eq!((assigned, revoked.clone()), (vec![], give.clone()));
    assert_eq!(owned(&a), keep);
    assert!(
        a.lease_left_ms(give[1]) > 0,
        "handed back, held until released"
    );
    a.release(&revoked);
    assert_eq!(a.lease_left_ms(give[1]), 0);
    wait_until("b owns its share", PATIENCE, || {
        give.iter().all(|&q| b.lease_left_ms(q) > 0)
    });
    assert_eq!(b.changes(), (give.clone(), vec![]));
    assert_eq!(owned(&b), give);
    let q = give[0];
    let e = b.owned()[&q].0;
    assert_eq!(e, 2, "a new owner, a new epoch");
    admin::check_owner(&b.options().group_dir, q, &b.member_id(), e).unwrap();
    let fenced = admin::check_owner(&b.options().group_dir, q, &a.member_id(), 1);
    let msg = fenced.unwrap_err().to_string();
    let named = msg.contains(&b.member_id()) && msg.contains(&format!("queue {q} "));
    assert!(named, "{msg}");
    // b leaves: a takes everything at its next heartbeat.
    b.leave();
    wait_until("a owns all", PATIENCE, || a.lease_left_ms(give[2]) > 0);
    assert_eq!(a.changes(), (give, vec![]));
    assert_eq!(owned(&a).len(), 8);
    a.leave();
    let left = std::fs::read_dir(dir.path().join("consumerGroups/t@g/members")).unwrap();
    assert_eq!(left.count(), 0, "member lock files are removed at leave");
}

/// Writes a member `x` into the state owning every queue with a lease of
/// `lease`, its lock file held by `hold` or not at all.
fn plant_member(
    m: &GroupMember,
    lease: Duration,
    hold: bool,
) -> (Option<crate::lock::FileLock>, u64) {
    let gd = GroupDir::new(&m.options().group_dir);
    let _l = gd.lock_state(Duration::from_secs(1)).unwrap();
    let Found::State(mut st) = gd.read_state(&boot_id(), "g", "t").unwrap() else {
        panic!("no state")
    };
    let now = monotonic_ms();
    let x = Member {
        id: "x-1-00".into(),
        pid: 4_000_000,
        host: "x".into(),
        since_ms: 0,
        heartbeat: now,
        session_timeout_ms: 100,
        poll_deadline: u64::MAX,
        strategy: Strategy::Average,
        fixed: vec![],
    };
    st.members.insert(0, x);
    for o in st.queues.values_mut() {
        *o = QueueOwner {
            owner: Some("x-1-00".into()),
            epoch: o.epoch + 1,
            lease_until: now + ms(lease),
            revoking: false,
        };
    }
    gd.write_state(&st).unwrap();
    (hold.then(|| gd.lock_member("x-1-00", 100).unwrap()), now)
}

#[test]
fn a_dead_members_queues_are_taken_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let a = join(dir.path(), 4);
    // x owns everything for 10 s, but no process holds its lock: dead.
    let _ = plant_member(&a, Duration::from_secs(10), false);
    a.heartbeat_now().unwrap();
    assert_eq!(reads(&a), vec![0, 1, 2, 3]);
    let d = admin::describe(&a.options().group_dir).unwrap();
    assert_eq!(d.members.len(), 1);
    assert!(d.queues.values().all(|(o, _)| o.epoch == 3));
}

#[test]
fn a_frozen_members_lease_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let a = join(dir.path(), 4);
    // x (alive: its lock is held) froze now; its heartbeat ages past its
    // 100 ms timeout, but its leases run 600 ms.
    let (_held, planted) = plant_member(&a, Duration::from_millis(600), true);
    a.heartbeat_now().unwrap();
    assert!(reads(&a).is_empty());
    wait_until(
        "a takes the frozen member's queues",
        Duration::from_secs(3),
        || reads(&a).len() == 4,
    );
    let at = monotonic_ms();
    assert!(
        at >= planted + 600,
        "taken {} ms after the freeze, before the lease ended",
        at - planted
    );
    let d = admin::describe(&a.options().group_dir).unwrap();
    assert!(d.members.iter().all(|i| i.member.id != "x-1-00"));
}

#[test]
fn fixed_members_refuse_each_other_and_an_exclusive_holder_refuses_all() {
    let dir = tempfile::tempdir().unwrap();
    let f = GroupMember::join(opts(dir.path(), Strategy::Fixed, &[1, 2])).unwrap();
    let e = GroupMember::join(opts(dir.path(), Strategy::Fixed, &[2, 3])).unwrap_err();
    assert!(matches!(e, StoreError::GroupBusy(_)), "{e}");
    let pid = std::process::id().to_string();
    assert!(e.to_string().contains(&pid), "names the holder's pid: {e}");
    let g = GroupMember::join(opts(dir.path(), Strategy::Fixed, &[3])).unwrap();
    f.set_queues(&[0, 1, 2, 3]);
    f.heartbeat_now().unwrap();
    assert_eq!(reads(&f), vec![1, 2]);
    g.heartbeat_now().unwrap();
    assert_eq!(reads(&g), vec![3]);
    drop((f, g));
    let o = opts(dir.path(), Strategy::Average, &[]);
    let excl = crate::lock::FileLock::acquire(&o.lock_path, false)
        .unwrap()
        .unwrap();
    let e = GroupMember::join(o.clone()).unwrap_err();
    assert!(matches!(e, StoreError::GroupBusy(_)), "{e}");
    drop(excl);
    let m = GroupMember::join(o.clone()).unwrap();
    assert!(crate::lock::FileLock::acquire(&o.lock_path, false)
        .unwrap()
        .is_none());
    drop(m);
    assert!(crate::lock::FileLock::acquire(&o.lock_path, false)
        .unwrap()
        .is_some());
}

#[test]
fn a_garbage_state_stops_the_leases_and_expire_rebuilds_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = join(dir.path(), 4);
    let old_id = a.member_id();
    let state = a.options().group_dir.join("state");
    std::fs::write(&state, b"not a state\n").unwrap();
    let e = a.heartbeat_now().unwrap_err();
    assert!(matches!(e, StoreError::Corrupted { .. }), "{e}");
    assert!(e.to_string().contains("--expire"), "{e}");
    assert!(a.error().is_some_and(|s| s.contains("state")));
    let e = GroupMember::join(opts(dir.path(), Strategy::Average, &[])).unwrap_err();
    assert!(matches!(e, StoreError::Corrupted { .. }), "{e}");
    wait_until("the leases lapse", PATIENCE, || reads(&a).is_empty());
    admin::expire(&a.options().group_dir).unwrap();
    // Back under a new id; the rebuilt state hands nothing out for one
    // session timeout (a's old leases might still run elsewhere).
    let t0 = Instant::now();
    wait_until("a owns its queues again", PATIENCE, || reads(&a).len() == 4);
    assert!(t0.elapsed() >= TIMEOUT - Duration::from_millis(60));
    assert_ne!(a.member_id(), old_id);
    assert!(a.error().is_none());
}

#[test]
fn a_member_that_stops_polling_leaves_and_comes_back_at_its_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), Strategy::Average, &[]);
    o.max_poll_interval = Duration::from_millis(200);
    let a = GroupMember::join(o).unwrap();
    a.set_queues(&[0, 1]);
    a.heartbeat_now().unwrap();
    assert_eq!(reads(&a), vec![0, 1]);
    wait_until("a leaves", PATIENCE, || reads(&a).is_empty());
    assert!(a.error().is_some_and(|e| e.contains("max_poll_interval")));
    let d = admin::describe(&a.options().group_dir).unwrap();
    assert!(d.members.is_empty());
    a.polled();
    wait_until("a is back", PATIENCE, || reads(&a).len() == 2);
}

#[test]
fn a_failed_state_write_changes_nothing_and_the_leases_lapse() {
    let dir = tempfile::tempdir().unwrap();
    let a = join(dir.path(), 4);
    assert_eq!(reads(&a), vec![0, 1, 2, 3]);
    let epochs: Vec<u64> = a.owned().values().map(|(e, _)| *e).collect();
    // The next state cannot be written (as on a full disk).
    let tmp = a.options().group_dir.join("state.tmp");
    std::fs::create_dir(&tmp).unwrap();
    let e = a.heartbeat_now().unwrap_err();
    assert!(matches!(e, StoreError::Io { .. }), "{e}");
    assert!(a.error().is_some());
    // Its view is as it was, and lapses with the lease it had.
    assert_eq!(reads(&a), vec![0, 1, 2, 3]);
    wait_until("the leases lapse", PATIENCE, || reads(&a).is_empty());
    std::fs::remove_dir(&tmp).unwrap();
    a.heartbeat_now().unwrap();
    assert!(a.error().is_none());
    assert_eq!(reads(&a), vec![0, 1, 2, 3]);
    let again: Vec<u64> = a.owned().values().map(|(e, _)| *e).collect();
    assert!(
        again.iter().zip(&epochs).all(|(n, o)| n > o),
        "a lapsed lease comes back under a new epoch: {epochs:?} -> {again:?}"
    );
}

#[test]
fn a_removed_group_folder_hands_nothing_out_while_old_leases_may_run() {
    let dir = tempfile::tempdir().unwrap();
    // A session timeout long enough that a loaded machine runs the steps
    // below within it.
    let timeout = Duration::from_secs(3);
    let join = |_: &Path, n: u32| {
        let mut o = opts(dir.path(), Strategy::Average, &[]);
        o.session_timeout = timeout;
        let m = GroupMember::join(o).unwrap();
        m.set_queues(&(0..n).collect::<Vec<_>>());
        m.heartbeat_now().unwrap();
        m
    };
    let a = join(dir.path(), 2);
    let b = join(dir.path(), 2);
    a.heartbeat_now().unwrap();
    a.release(&a.changes().1);
    b.heartbeat_now().unwrap();
    assert_eq!(reads(&a).len() + reads(&b).len(), 2);
    // (The heartbeat threads may write into it meanwhile: try again.)
    for _ in 0..100 {
        if std::fs::remove_dir_all(&a.options().group_dir).is_ok() {
            break;
        }
    }
    let t0 = Instant::now();
    a.heartbeat_now().unwrap();
    b.heartbeat_now().unwrap();
    // Both come back under new ids, owning nothing for a session timeout:
    // the other's old lease may still run.
    assert!(reads(&a).is_empty() && reads(&b).is_empty());
    wait_until("the queues are handed out again", PATIENCE, || {
        reads(&a).len() + reads(&b).len() == 2
    });
    assert!(t0.elapsed() >= timeout - Duration::from_millis(60));
}

#[test]
fn a_heartbeat_starting_after_the_consumers_own_does_not_hide_its_queues() {
    let dir = tempfile::tempdir().unwrap();
    let a = GroupMember::join(opts(dir.path(), Strategy::Average, &[])).unwrap();
    // No heartbeat of the member's thread interferes: this test plays one.
    if let Some(t) = a.thread.lock().take() {
        t.stop(STOP_TIMEOUT);
    }
    for n in 1..4u32 {
        // A poll sees the topic gain queue n - 1 and heartbeats itself.
        a.set_queues(&(0..n).collect::<Vec<_>>());
        a.heartbeat_now().unwrap();
        assert!(
            owned(&a).len() < n as usize,
            "not read before changes() told it"
        );
        // The member's thread starts a heartbeat before the consumer asks
        // (what `View::me` does): its consumer is handed nothing new until
        // it ends, yet the queue the consumer's own heartbeat gained was
        // taken for it when that heartbeat ended.
        {
            let mut v = a.shared.view.lock();
            let known = v.known.clone();
            v.inflight = Some(known);
        }
        assert_eq!(a.changes(), (vec![n - 1], vec![]));
        assert_eq!(owned(&a), (0..n).collect::<Vec<_>>());
        assert!(a.lease_left_ms(n - 1) > 0);
        a.shared.view.lock().inflight = None;
        assert_eq!(a.changes(), (vec![], vec![]));
    }
    a.leave();
}
