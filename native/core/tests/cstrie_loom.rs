//! Loom models of the CS-trie: the real `cstrie` code (GCAS, the RDCSS root
//! swap, generation renewal, tombing and compression) with its atomics
//! replaced by loom's, which runs every interleaving of them (up to a
//! preemption bound) and the weak-memory outcomes their orderings allow.
//!
//! Run with `make loom`, i.e.
//! `RUSTFLAGS="--cfg loom" cargo test --release --test cstrie_loom` (the
//! Makefile adds a separate target directory). Each model has its own
//! preemption bound, the largest that finishes in well under a minute on 2
//! cores; `LOOM_MAX_PREEMPTIONS` overrides them all.
//!
//! Each model sets up a trie single-threaded, runs a few operations on
//! concurrent loom threads, joins them and then checks the outcome against
//! every sequential order of those operations: some order must give each
//! operation's return value (a subscribe's or unsubscribe's bool, every pair a
//! snapshot holds) and the final state. The threads start together, so any
//! order is allowed; the check is exact linearizability for these histories.
//!
//! The first model is issue 9's lost update: a C-node holding an
//! old-generation child (`c.0`, from before a snapshot) beside a
//! current-generation one (`c.1`); writer A works inside `c.1` while writer B
//! enters `c.0` and so renews it. Renewal used to copy every child, `c.1`
//! included, so A's GCAS could commit on an unlinked I-node and vanish; with
//! that renewal put back, this model fails.
//!
//! The models also found that GCAS and the RDCSS root swap need a SeqCst
//! fence each (a store-buffering race; see `gcas.rs`): without them all three
//! fail within their first iterations.

#![cfg(loom)]

use std::collections::BTreeSet;
use std::sync::Arc;

use loom::thread;
use spark_topic_router_core::cstrie::{reclaim_after_model, CsTrie, Snapshot};

type Pairs = BTreeSet<(String, String)>;

#[derive(Clone, Debug)]
enum Op {
    Subscribe(&'static str, &'static str),
    Unsubscribe(&'static str, &'static str),
    Snapshot,
}

#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Changed(bool),
    /// Every pair the snapshot holds.
    Pairs(Pairs),
}

fn pair(pattern: &str, subscriber: &str) -> (String, String) {
    (pattern.to_owned(), subscriber.to_owned())
}

/// What a model thread returns. Snapshots are immutable, so reading them
/// after the join sees what they saw; `read_in_thread` reads them on their
/// thread as well.
enum Returned {
    Changed(bool),
    Snapshot(Snapshot),
}

fn run(trie: &CsTrie, op: &Op, read_in_thread: bool) -> Returned {
    match *op {
        Op::Subscribe(pattern, subscriber) => Returned::Changed(trie.subscribe(pattern, subscriber)),
        Op::Unsubscribe(pattern, subscriber) => Returned::Changed(trie.unsubscribe(pattern, subscriber)),
        Op::Snapshot => {
            let snapshot = trie.snapshot();
            if read_in_thread {
                // Reading rolls back writers' proposals that raced the
                // snapshot, concurrently with them: more for loom to explore.
                pairs_of(&snapshot);
            }
            Returned::Snapshot(snapshot)
        }
    }
}

fn pairs_of(snapshot: &Snapshot) -> Pairs {
    let pairs: Pairs = snapshot
        .subscriptions()
        .into_iter()
        .map(|(pattern, subscriber)| (pattern, subscriber.to_string()))
        .collect();
    assert_eq!(snapshot.len(), pairs.len(), "a snapshot's len() counts its pairs");
    pairs
}

fn outcome(returned: Returned) -> Outcome {
    match returned {
        Returned::Changed(changed) => Outcome::Changed(changed),
        Returned::Snapshot(snapshot) => Outcome::Pairs(pairs_of(&snapshot)),
    }
}

/// What `op` returns, applied sequentially to `state`.
fn apply(state: &mut Pairs, op: &Op) -> Outcome {
    match *op {
        Op::Subscribe(pattern, subscriber) => Outcome::Changed(state.insert(pair(pattern, subscriber))),
        Op::Unsubscribe(pattern, subscriber) => Outcome::Changed(state.remove(&pair(pattern, subscriber))),
        Op::Snapshot => Outcome::Pairs(state.clone()),
    }
}

/// Whether some order of `ops`, started from `initial`, returns `outcomes`
/// and ends in `last`.
fn linearizable(initial: &Pairs, ops: &[Op], outcomes: &[Outcome], last: &Pairs) -> bool {
    fn search(state: &Pairs, ops: &[Op], outcomes: &[Outcome], done: &mut Vec<bool>, last: &Pairs) -> bool {
        if done.iter().all(|&done| done) {
            return state == last;
        }
        for index in 0..ops.len() {
            if done[index] {
                continue;
            }
            let mut next = state.clone();
            if apply(&mut next, &ops[index]) != outcomes[index] {
                continue;
            }
            done[index] = true;
            let found = search(&next, ops, outcomes, done, last);
            done[index] = false;
            if found {
                return true;
            }
        }
        false
    }
    search(initial, ops, outcomes, &mut vec![false; ops.len()], last)
}

/// One model: `setup` runs first on one thread, then each of `concurrent` on
/// its own loom thread; the history must be linearizable and the trie's live
/// views must agree with its final state. `preemptions` bounds the search
/// unless `LOOM_MAX_PREEMPTIONS` is set.
fn model(setup: &'static [Op], concurrent: &'static [Op], read_in_thread: bool, preemptions: usize) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(preemptions));
    builder.check(move || {
        let trie = Arc::new(CsTrie::new());
        let mut initial = Pairs::new();
        for op in setup {
            assert_eq!(outcome(run(&trie, op, false)), apply(&mut initial, op), "setup {op:?}");
        }
        let handles: Vec<_> = concurrent
            .iter()
            .map(|op| {
                let trie = trie.clone();
                thread::spawn(move || run(&trie, op, read_in_thread))
            })
            .collect();
        let outcomes: Vec<Outcome> = handles
            .into_iter()
            .map(|handle| outcome(handle.join().expect("a model thread panicked")))
            .collect();
        let last = pairs_of(&trie.snapshot());
        assert!(
            linearizable(&initial, concurrent, &outcomes, &last),
            "no sequential order of {concurrent:?} from {initial:?} returns {outcomes:?} and ends in {last:?}"
        );
        assert_eq!(trie.len(), last.len(), "len() once quiescent");
        for (pattern, subscriber) in &last {
            // Patterns here are literal, so a pattern is also a key it matches.
            let found = trie.lookup(pattern);
            assert!(
                found.iter().any(|id| **id == **subscriber),
                "live lookup of {pattern:?} misses {subscriber:?}"
            );
        }
        drop(trie);
        // Every thread is joined and every trie dropped: free what the model retired.
        reclaim_after_model();
    });
}

/// Issue 9: `c` holds `c.0` (old generation) and `c.1` (current); writer A
/// subscribes inside `c.1`, writer B inside `c.0` (renewing it), and a third
/// thread snapshots. Two patterns below each of `c`, `c.0` and `c.1` make
/// them I-nodes (a path one pattern takes alone is a tail).
#[test]
fn two_writers_and_a_snapshotter_lose_no_update() {
    model(
        &[
            Op::Subscribe("c.0.a", "t"),
            Op::Subscribe("c.0.y", "t"),
            Op::Snapshot,
            Op::Subscribe("c.1.b", "t"),
            Op::Subscribe("c.1.x", "t"),
        ],
        &[Op::Subscribe("c.1.q", "t"), Op::Subscribe("c.0.z", "t"), Op::Snapshot],
        false,
        2,
    );
}

/// Tails: `c.0` and `c.1` are tails in `c`'s C-node (`c` renewed after a
/// snapshot); two writers each expand one into an I-node, both by GCAS on
/// `c`, while a third thread snapshots.
#[test]
fn two_tail_expansions_and_a_snapshotter_lose_no_update() {
    model(
        &[Op::Subscribe("c.0.a", "t"), Op::Snapshot, Op::Subscribe("c.1.b", "t")],
        &[Op::Subscribe("c.1.q", "t"), Op::Subscribe("c.0.z", "t"), Op::Snapshot],
        false,
        2,
    );
}

/// An unsubscribe that empties `c` (tombing its I-node, then compressing it
/// out of the root) races a subscribe that needs `c` and a snapshot swapping
/// the root: the subscribe must not land below the tomb, and a compression
/// must not commit on a root the snapshot has swapped out.
#[test]
fn a_subscribe_racing_a_tombing_unsubscribe_and_a_snapshot() {
    // `c.b` expands `c` into an I-node; removing it leaves `c` holding `c.a` alone.
    model(
        &[
            Op::Subscribe("c.a", "t"),
            Op::Subscribe("c.b", "t"),
            Op::Unsubscribe("c.b", "t"),
        ],
        &[Op::Unsubscribe("c.a", "t"), Op::Subscribe("c.z", "t"), Op::Snapshot],
        false,
        1,
    );
}

/// Two writers on the same pair (one adds it, one removes it) and a
/// snapshot: the return values must agree with one order, with no generation
/// change beforehand (writes race only each other's GCAS and the RDCSS).
#[test]
fn a_subscribe_and_an_unsubscribe_of_one_pair_and_a_snapshot() {
    model(
        &[Op::Subscribe("c.0", "t")],
        &[Op::Unsubscribe("c.0", "t"), Op::Subscribe("c.0", "t"), Op::Snapshot],
        true,
        1,
    );
}

/// Two writers inside one shared set (`idset.rs`: every set of two ids or
/// more) whose root is from before a snapshot
/// (so the first to arrive renews it in its holder, while the other may be
/// inside the old one), and a third thread snapshotting.
#[test]
fn two_writers_in_a_shared_set_and_a_snapshotter_lose_no_update() {
    model(
        &[Op::Subscribe("c", "s0"), Op::Subscribe("c", "s1"), Op::Snapshot],
        &[Op::Subscribe("c", "s2"), Op::Unsubscribe("c", "s0"), Op::Snapshot],
        false,
        1,
    );
}

/// An unsubscribe that empties a shared set (tombing its root, then dropping
/// it from its holder) races a subscribe into the same set and a snapshot:
/// the subscribe must not land in the dead set.
#[test]
fn a_subscribe_racing_the_removal_of_a_shared_sets_last_id() {
    model(
        &[
            Op::Subscribe("c", "s0"),
            Op::Subscribe("c", "s1"),
            Op::Unsubscribe("c", "s1"),
        ],
        &[Op::Unsubscribe("c", "s0"), Op::Subscribe("c", "s2"), Op::Snapshot],
        false,
        1,
    );
}
