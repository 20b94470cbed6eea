//! Which member each queue should belong to: the target assignment of a
//! heartbeat (docs/format.md §13.2).
//!
//! Fixed members get the queues they name. The others share the rest, in
//! queue-id order, over the members sorted by id, by RocketMQ's two
//! averaging strategies:
//!
//! ```text
//! 8 queues, 3 members     average (consecutive runs)   circle (every 3rd)
//!   member 0              0 1 2                        0 3 6
//!   member 1              3 4 5                        1 4 7
//!   member 2              6 7                          2 5
//! ```
//!
//! With more members than queues the members past the last queue get
//! nothing. Every computation of one state gives the same answer, whoever
//! makes it, so members never disagree about the target.

use std::collections::BTreeMap;

use super::state::{Member, Strategy};

/// The positions (in the sorted queue list of `queues` entries) that member
/// `index` of `members` takes by `AllocateMessageQueueAveragely`: the first
/// `queues % members` members take one more, each a consecutive run.
pub fn average(queues: usize, members: usize, index: usize) -> Vec<usize> {
    if members == 0 || index >= members || queues == 0 {
        return Vec::new();
    }
    let modulo = queues % members;
    let size = if queues <= members {
        1
    } else if modulo > 0 && index < modulo {
        queues / members + 1
    } else {
        queues / members
    };
    let start = if modulo > 0 && index < modulo {
        index * size
    } else {
        index * size + modulo
    };
    let take = size.min(queues.saturating_sub(start));
    (start..start + take).collect()
}

/// The positions member `index` takes by
/// `AllocateMessageQueueAveragelyByCircle`: `index`, `index + members`, ...
pub fn circle(queues: usize, members: usize, index: usize) -> Vec<usize> {
    if members == 0 || index >= members {
        return Vec::new();
    }
    (index..queues).step_by(members).collect()
}

/// The target owner of every queue of `queues` (sorted, no repeats) among
/// `members` (sorted by id). Fixed members take their named queues that
/// `queues` holds (the first by id, should two name one); the averaging
/// members share the rest by the strategy of the first of them by id. A
/// queue without a target (no averaging member) is missing from the map.
pub fn targets(members: &[Member], queues: &[u32]) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for m in members.iter().filter(|m| m.strategy == Strategy::Fixed) {
        for &q in &m.fixed {
            if queues.binary_search(&q).is_ok() {
                out.entry(q).or_insert_with(|| m.id.clone());
            }
        }
    }
    let rest: Vec<u32> = queues
        .iter()
        .copied()
        .filter(|q| !out.contains_key(q))
        .collect();
    let sharing: Vec<&Member> = members
        .iter()
        .filter(|m| m.strategy != Strategy::Fixed)
        .collect();
    let Some(first) = sharing.first() else {
        return out;
    };
    let by = match first.strategy {
        Strategy::Circle => circle,
        _ => average,
    };
    for (index, m) in sharing.iter().enumerate() {
        for pos in by(rest.len(), sharing.len(), index) {
            if let Some(&q) = rest.get(pos) {
                out.insert(q, m.id.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{prop_assert, prop_assert_eq, proptest};

    fn member(id: &str, strategy: Strategy, fixed: &[u32]) -> Member {
        Member {
            id: id.to_owned(),
            pid: 1,
            host: "h".into(),
            since_ms: 0,
            heartbeat: 0,
            session_timeout_ms: 1000,
            poll_deadline: u64::MAX,
            strategy,
            fixed: fixed.to_vec(),
        }
    }

    #[test]
    fn rocketmq_examples() {
        // 8 queues over 3 consumers: 3, 3, 2 consecutive; by circle 0 3 6 ...
        assert_eq!(average(8, 3, 0), vec![0, 1, 2]);
        assert_eq!(average(8, 3, 1), vec![3, 4, 5]);
        assert_eq!(average(8, 3, 2), vec![6, 7]);
        assert_eq!(circle(8, 3, 0), vec![0, 3, 6]);
        assert_eq!(circle(8, 3, 2), vec![2, 5]);
        // More consumers than queues: the first ones take one each.
        assert_eq!(average(2, 4, 1), vec![1]);
        assert!(average(2, 4, 2).is_empty());
        assert!(average(2, 4, 3).is_empty());
        assert!(circle(2, 4, 3).is_empty());
    }

    #[test]
    fn fixed_members_keep_their_queues_and_the_rest_is_shared() {
        let ms = vec![
            member("a", Strategy::Average, &[]),
            member("b", Strategy::Fixed, &[0, 5, 9]),
            member("c", Strategy::Average, &[]),
        ];
        let t = targets(&ms, &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(t[&0], "b");
        assert_eq!(t[&5], "b");
        let a: Vec<u32> = t.iter().filter(|e| e.1 == "a").map(|e| *e.0).collect();
        let c: Vec<u32> = t.iter().filter(|e| e.1 == "c").map(|e| *e.0).collect();
        assert_eq!(a, vec![1, 2, 3]);
        assert_eq!(c, vec![4, 6, 7]);
        // Queue 9 is not one of the topic's: nobody gets it.
        assert!(!t.contains_key(&9));
    }

    #[test]
    fn only_fixed_members_leave_the_rest_without_target() {
        let ms = vec![member("b", Strategy::Fixed, &[1])];
        let t = targets(&ms, &[0, 1, 2]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[&1], "b");
    }

    proptest! {
        /// Whatever the numbers, each strategy hands every queue to exactly
        /// one member, and no member gets more than one queue above another.
        #[test]
        fn strategies_are_disjoint_covering_and_even(queues in 0usize..70, members in 1usize..70) {
            for by in [average as fn(usize, usize, usize) -> Vec<usize>, circle] {
                let mut count = vec![0u32; queues];
                let mut sizes = Vec::new();
                for i in 0..members {
                    let got = by(queues, members, i);
                    sizes.push(got.len());
                    for p in got {
                        prop_assert!(p < queues);
                        count[p] += 1;
                    }
                }
                prop_assert!(count.iter().all(|&c| c == 1), "{:?}", count);
                let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
                prop_assert!(hi.unwrap_or(&0) - lo.unwrap_or(&0) <= 1);
            }
        }

        /// With fixed members mixed in, the targets cover the topic's queues
        /// when any member averages, and each fixed member gets exactly its
        /// named queues that the topic has (those no earlier fixed member
        /// named).
        #[test]
        fn targets_respect_fixed_and_cover(
            queues in proptest::collection::btree_set(0u32..40, 0..30),
            spec in proptest::collection::vec(
                (0u8..3, proptest::collection::btree_set(0u32..45, 0..6)), 1..12),
        ) {
            let queues: Vec<u32> = queues.into_iter().collect();
            let ms: Vec<Member> = spec.iter().enumerate().map(|(i, (kind, fixed))| {
                let strategy = match kind { 0 => Strategy::Average, 1 => Strategy::Circle, _ => Strategy::Fixed };
                let fixed: Vec<u32> = if strategy == Strategy::Fixed { fixed.iter().copied().collect() } else { Vec::new() };
                member(&format!("m{i:02}"), strategy, &fixed)
            }).collect();
            let t = targets(&ms, &queues);
            prop_assert!(t.keys().all(|q| queues.binary_search(q).is_ok()));
            let mut claimed = std::collections::BTreeSet::new();
            for m in ms.iter().filter(|m| m.strategy == Strategy::Fixed) {
                for q in &m.fixed {
                    if queues.binary_search(q).is_ok() && claimed.insert(*q) {
                        prop_assert_eq!(&t[q], &m.id);
                    }
                }
            }
            if ms.iter().any(|m| m.strategy != Strategy::Fixed) {
                prop_assert_eq!(t.len(), queues.len());
                for (q, owner) in &t {
                    if !claimed.contains(q) {
                        let m = ms.iter().find(|m| &m.id == owner);
                        prop_assert!(m.is_some_and(|m| m.strategy != Strategy::Fixed));
                    }
                }
            } else {
                prop_assert_eq!(t.len(), claimed.len());
            }
        }
    }
}
