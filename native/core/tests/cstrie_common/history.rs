//! Recorded concurrent histories of a CS-trie and a linearizability checker
//! for them, snapshots included.
//!
//! Every operation is stamped with an invocation and a response time from one
//! shared atomic counter, so "A returned before B was invoked" is exact.
//!
//! The abstract state is a set of (pattern, subscriber) pairs, and every
//! operation touches each pair independently, so linearizability is checked
//! per pair (P-compositionality: a history of independent objects is
//! linearizable iff each object's sub-history is):
//!
//! * `subscribe`/`unsubscribe` update one pair and return whether it changed;
//! * a snapshot reads every pair at once (one linearization point: it appears
//!   as a read in every pair's sub-history, and [`check_snapshot_points`]
//!   then asks for one instant that suits every pair);
//! * a live lookup is linearizable per subscription only (module docs of
//!   `cstrie`): a subscriber it leaves out must have been absent, at some
//!   point during the call, under every pattern that matches the key; a
//!   subscriber it returns must have been present under a matching pattern,
//!   which is a read of that one pair when only one pattern in the universe
//!   can explain it (otherwise only the subscriber's membership is checked).
//!
//! Each pair's sub-history is checked by Wing & Gong's search with Lowe's
//! memoisation of (linearized set, state), as in Porcupine.

use spark_topic_router_core::cstrie::SmolStr;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use spark_topic_router_core::cstrie::CsTrie;
use spark_topic_router_core::topic::{pattern_words, split_words, words_match};

use super::{oracle_lookup, Pair};

/// The shared clock: every stamp is distinct.
#[derive(Default)]
pub struct Clock(AtomicU64);

impl Clock {
    pub fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

#[derive(Clone, Debug)]
pub enum Call {
    Subscribe(Pair, bool),
    Unsubscribe(Pair, bool),
    /// The key and the subscribers found.
    Lookup(String, Vec<SmolStr>),
    /// Every pair the snapshot holds.
    Snapshot(BTreeSet<Pair>),
}

#[derive(Clone, Debug)]
pub struct Record {
    pub thread: usize,
    pub invoked: u64,
    pub returned: u64,
    pub call: Call,
}

/// Run one operation on `trie`, stamped by `clock`.
pub enum Request<'a> {
    Subscribe(&'a Pair),
    Unsubscribe(&'a Pair),
    Lookup(&'a str),
    /// With a key to look up in the snapshot: it must agree with the
    /// snapshot's own pairs (a snapshot is consistent with itself).
    Snapshot(Option<&'a str>),
}

pub fn perform(trie: &CsTrie, clock: &Clock, thread: usize, request: Request<'_>) -> Record {
    let invoked = clock.tick();
    let call = match request {
        Request::Subscribe(pair) => Call::Subscribe(pair.clone(), trie.subscribe(&pair.0, &pair.1)),
        Request::Unsubscribe(pair) => Call::Unsubscribe(pair.clone(), trie.unsubscribe(&pair.0, &pair.1)),
        Request::Lookup(key) => Call::Lookup(key.to_owned(), trie.lookup(key)),
        Request::Snapshot(probe) => {
            // Read inside the window too: reading a snapshot rolls back
            // proposals that raced it, concurrently with their writers.
            let snapshot = trie.snapshot();
            let pairs: BTreeSet<Pair> = snapshot.subscriptions().into_iter().collect();
            assert_eq!(snapshot.len(), pairs.len(), "a snapshot's len() counts its own pairs");
            if let Some(key) = probe {
                assert_eq!(
                    snapshot.lookup(key),
                    oracle_lookup(&pairs, key),
                    "a snapshot's lookup of {key:?} disagrees with its own pairs"
                );
            }
            Call::Snapshot(pairs)
        }
    };
    let returned = clock.tick();
    Record {
        thread,
        invoked,
        returned,
        call,
    }
}

/// One operation of a single pair's sub-history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PairOp {
    /// `subscribe` returned this.
    Add(bool),
    /// `unsubscribe` returned this.
    Remove(bool),
    /// A snapshot or lookup saw the pair present (true) or absent.
    Read(bool),
}

#[derive(Clone, Copy, Debug)]
struct Timed {
    invoked: u64,
    returned: u64,
    op: PairOp,
    /// Index of the record it came from (for reports).
    record: usize,
}

/// The pair's state after `op` from `present`, or `None` if `op` cannot
/// return what it did there.
fn step(present: bool, op: PairOp) -> Option<bool> {
    match op {
        PairOp::Add(changed) => (changed != present).then_some(true),
        PairOp::Remove(changed) => (changed == present).then_some(false),
        PairOp::Read(seen) => (seen == present).then_some(present),
    }
}

/// Split a history into per-pair sub-histories over `universe` (every pair
/// any operation may touch). Also checks what cannot be split: a lookup
/// returns only subscribers of the universe, and each one it returns has some
/// pattern in the universe matching the key.
fn split(records: &[Record], universe: &[Pair]) -> BTreeMap<Pair, Vec<Timed>> {
    let mut per_pair: BTreeMap<Pair, Vec<Timed>> = universe.iter().map(|pair| (pair.clone(), Vec::new())).collect();
    let subscribers: BTreeSet<&SmolStr> = universe.iter().map(|(_, subscriber)| subscriber).collect();
    for (index, record) in records.iter().enumerate() {
        let timed = |op| Timed {
            invoked: record.invoked,
            returned: record.returned,
            op,
            record: index,
        };
        let mut push = |pair: &Pair, op| {
            per_pair
                .get_mut(pair)
                .unwrap_or_else(|| panic!("record {index} touches {pair:?}, outside the universe"))
                .push(timed(op));
        };
        match &record.call {
            Call::Subscribe(pair, changed) => push(pair, PairOp::Add(*changed)),
            Call::Unsubscribe(pair, changed) => push(pair, PairOp::Remove(*changed)),
            Call::Snapshot(pairs) => {
                for pair in pairs {
                    assert!(universe.contains(pair), "record {index}: snapshot holds {pair:?}");
                }
                for pair in universe {
                    push(pair, PairOp::Read(pairs.contains(pair)));
                }
            }
            Call::Lookup(key, found) => {
                let key_words = split_words(key);
                for subscriber in found {
                    assert!(
                        subscribers.contains(subscriber),
                        "record {index}: lookup {key:?} returned {subscriber:?}"
                    );
                }
                for subscriber in &subscribers {
                    let candidates: Vec<&Pair> = universe
                        .iter()
                        .filter(|(pattern, id)| id == *subscriber && words_match(&pattern_words(pattern), &key_words))
                        .collect();
                    let returned = found.contains(subscriber);
                    match (returned, candidates.as_slice()) {
                        (true, []) => {
                            panic!("record {index}: lookup {key:?} returned {subscriber:?}, which no pattern explains")
                        }
                        // Absent under every candidate, each at some point of the call.
                        (false, _) => candidates.iter().for_each(|pair| push(pair, PairOp::Read(false))),
                        (true, [only]) => push(only, PairOp::Read(true)),
                        // Present under one of several: not a single-pair fact.
                        (true, _) => {}
                    }
                }
            }
        }
    }
    per_pair
}

/// Wing & Gong's search over one pair's sub-history (initially absent).
/// On failure returns the record at which the longest partial linearization
/// got stuck (an operation that returned before it could be linearized).
fn check_pair(ops: &[Timed]) -> Result<(), usize> {
    const NONE: usize = usize::MAX;
    // Events sorted by time: call of op i at invoked, return at returned.
    let mut events: Vec<(u64, usize, bool)> = Vec::with_capacity(ops.len() * 2);
    for (index, op) in ops.iter().enumerate() {
        events.push((op.invoked, index, true));
        events.push((op.returned, index, false));
    }
    events.sort_unstable();
    // A doubly linked list over the events, node 0 the head sentinel.
    let count = events.len() + 1;
    let mut next: Vec<usize> = (1..=count).collect();
    next[count - 1] = NONE;
    let mut prev: Vec<usize> = (0..count).map(|node| node.wrapping_sub(1)).collect();
    let mut return_node = vec![0; ops.len()];
    for (position, &(_, index, is_call)) in events.iter().enumerate() {
        if !is_call {
            return_node[index] = position + 1;
        }
    }
    let node_op = |node: usize| events[node - 1].1;
    let is_call = |node: usize| events[node - 1].2;
    let unlink = |node: usize, next: &mut Vec<usize>, prev: &mut Vec<usize>| {
        next[prev[node]] = next[node];
        if next[node] != NONE {
            prev[next[node]] = prev[node];
        }
    };
    let relink = |node: usize, next: &mut Vec<usize>, prev: &mut Vec<usize>| {
        next[prev[node]] = node;
        if next[node] != NONE {
            prev[next[node]] = node;
        }
    };

    let words = ops.len().div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut state = false;
    let mut seen: HashSet<(Vec<u64>, bool)> = HashSet::new();
    // (call node linearized, state before it)
    let mut stack: Vec<(usize, bool)> = Vec::new();
    // (operations linearized, the op whose return stopped them), the deepest.
    let mut deepest = (0, 0);
    let mut entry = next[0];
    while next[0] != NONE {
        if is_call(entry) {
            let index = node_op(entry);
            if let Some(after) = step(state, ops[index].op) {
                let mut candidate = linearized.clone();
                candidate[index / 64] |= 1 << (index % 64);
                if seen.insert((candidate.clone(), after)) {
                    stack.push((entry, state));
                    state = after;
                    linearized = candidate;
                    unlink(entry, &mut next, &mut prev);
                    unlink(return_node[index], &mut next, &mut prev);
                    entry = next[0];
                    continue;
                }
            }
            entry = next[entry];
        } else {
            // A return with its call not linearized: undo the last choice.
            if stack.len() >= deepest.0 {
                deepest = (stack.len(), node_op(entry));
            }
            let Some((call, before)) = stack.pop() else {
                return Err(ops[deepest.1].record);
            };
            let index = node_op(call);
            state = before;
            linearized[index / 64] &= !(1 << (index % 64));
            relink(return_node[index], &mut next, &mut prev);
            relink(call, &mut next, &mut prev);
            entry = next[call];
        }
    }
    Ok(())
}

/// Check a whole history: every pair's sub-history is linearizable, and
/// every snapshot has one instant at which it agrees with every pair
/// (see [`check_snapshot_points`]). Panics with a report otherwise.
pub fn check(records: &[Record], universe: &[Pair], label: &str) {
    let per_pair = split(records, universe);
    for (pair, ops) in &per_pair {
        if let Err(stuck) = check_pair(ops) {
            panic!(
                "{label}: the history of {pair:?} is not linearizable\n{}",
                report(records, ops, stuck)
            );
        }
    }
    check_snapshot_points(records, &per_pair, label);
}

/// A snapshot linearizes at one instant. Each pair's state at an instant `t`
/// is known without any search unless `t` falls inside the window of an
/// operation that changed that pair: changes alternate (an added pair must
/// be removed before it can be added again), so outside those windows the
/// pair is present iff an odd number of changes returned before `t`. Some
/// instant within the snapshot's own window must be, for every pair, either
/// inside such a window or one where the known state equals what the
/// snapshot holds. This is implied by linearizability; it is checked
/// separately because the per-pair search lets each pair pick its own
/// instant for the same snapshot.
fn check_snapshot_points(records: &[Record], per_pair: &BTreeMap<Pair, Vec<Timed>>, label: &str) {
    struct Changes {
        /// Response times of the changing operations, sorted.
        returns: Vec<u64>,
        /// Their windows, merged into disjoint sorted (start, end) blocks.
        blocks: Vec<(u64, u64)>,
    }
    let changes: Vec<(&Pair, Changes)> = per_pair
        .iter()
        .map(|(pair, ops)| {
            let mut windows: Vec<(u64, u64)> = ops
                .iter()
                .filter(|op| matches!(op.op, PairOp::Add(true) | PairOp::Remove(true)))
                .map(|op| (op.invoked, op.returned))
                .collect();
            let mut returns: Vec<u64> = windows.iter().map(|window| window.1).collect();
            returns.sort_unstable();
            windows.sort_unstable();
            let mut blocks: Vec<(u64, u64)> = Vec::new();
            for (start, end) in windows {
                match blocks.last_mut() {
                    Some(last) if start < last.1 => last.1 = last.1.max(end),
                    _ => blocks.push((start, end)),
                }
            }
            (pair, Changes { returns, blocks })
        })
        .collect();
    // The state at the instant just after stamp `at` (stamps are distinct
    // integers, so "just after" is strictly inside every window that
    // contains `at` but does not end there): None when unknown.
    let known = |changes: &Changes, at: u64| -> Option<bool> {
        let block = changes.blocks.partition_point(|block| block.0 <= at);
        if block > 0 && changes.blocks[block - 1].1 > at {
            return None;
        }
        Some(changes.returns.partition_point(|&returned| returned <= at) % 2 == 1)
    };
    for (index, record) in records.iter().enumerate() {
        let Call::Snapshot(pairs) = &record.call else { continue };
        // Candidate instants: just after the invocation and just after every
        // change boundary inside the window (the known states change only there).
        let mut instants: Vec<u64> = vec![record.invoked];
        for (_, pair_changes) in &changes {
            for &(start, end) in &pair_changes.blocks {
                for boundary in [start, end] {
                    if boundary > record.invoked && boundary < record.returned {
                        instants.push(boundary);
                    }
                }
            }
        }
        instants.sort_unstable();
        instants.dedup();
        let fits = |at: u64| {
            changes.iter().all(|(pair, pair_changes)| {
                known(pair_changes, at).is_none_or(|present| present == pairs.contains(*pair))
            })
        };
        assert!(
            instants.iter().any(|&at| fits(at)),
            "{label}: snapshot (record {index}, {}..{}) holds {pairs:?}, a state the trie never had at one instant of its call",
            record.invoked,
            record.returned
        );
    }
}

/// The operations of one pair's sub-history around the one where the
/// search got stuck.
fn report(records: &[Record], ops: &[Timed], stuck: usize) -> String {
    let around = records[stuck].invoked;
    let mut lines: Vec<(u64, String)> = ops
        .iter()
        .filter(|op| op.returned + 150 >= around && op.invoked <= around + 150)
        .map(|op| {
            let record = &records[op.record];
            let mark = if op.record == stuck {
                "  <- the longest linearization stops here"
            } else {
                ""
            };
            (
                op.invoked,
                format!(
                    "  [{:>7}, {:>7}] thread {} {:?}{mark}",
                    op.invoked, op.returned, record.thread, op.op
                ),
            )
        })
        .collect();
    lines.sort();
    lines.into_iter().map(|(_, line)| line).collect::<Vec<_>>().join("\n")
}
