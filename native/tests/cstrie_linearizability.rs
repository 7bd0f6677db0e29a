//! Linearizability of snapshots. Writers apply known operation sequences while
//! other threads take snapshots. Writer `w` publishes how many of its
//! operations have returned. For a snapshot taken between reading `before` and
//! `after` from that counter, the snapshot's pairs owned by `w` must equal
//! `w`'s model state after exactly `k` operations for some `k` in
//! `[before, after + 1]`: `before` operations had finished when the snapshot
//! started, and at most the one operation still running when `after` was read
//! (and not yet counted) can have linearized before the snapshot did.
//! Each writer owns its subscriber ids, so these per-writer projections are
//! independent checks.

mod cstrie_common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use cstrie_common::*;
use spark_topic_router_native::cstrie::{CsTrie, Snapshot};

#[derive(Clone)]
enum Operation {
    Subscribe(String, Arc<str>),
    Unsubscribe(String, Arc<str>),
}

/// A writer's script and the model state after each prefix of it.
struct Script {
    owner: String,
    operations: Vec<Operation>,
    /// states[k] = the writer's pairs after its first k operations.
    states: Vec<BTreeSet<Pair>>,
}

fn script(writer: usize, length: usize) -> Script {
    let mut rng = Rng(0x5EED_0000 + writer as u64);
    let owner = format!("w{writer}-");
    let subscribers: Vec<Arc<str>> = (0..2).map(|n| Arc::from(format!("{owner}{n}"))).collect();
    let mut state = BTreeSet::new();
    let mut states = vec![state.clone()];
    let mut operations = Vec::with_capacity(length);
    for _ in 0..length {
        let held = state.iter().nth(rng.below(state.len() + 1)).cloned();
        let operation = match held {
            Some((pattern, subscriber)) if rng.below(2) == 0 => Operation::Unsubscribe(pattern, subscriber),
            _ => Operation::Subscribe(
                rng.text(PATTERN_ALPHABET, 3),
                subscribers[rng.below(subscribers.len())].clone(),
            ),
        };
        match &operation {
            Operation::Subscribe(pattern, subscriber) => state.insert((pattern.clone(), subscriber.clone())),
            Operation::Unsubscribe(pattern, subscriber) => state.remove(&(pattern.clone(), subscriber.clone())),
        };
        operations.push(operation);
        states.push(state.clone());
    }
    Script {
        owner,
        operations,
        states,
    }
}

fn run_writer(trie: &CsTrie, script: &Script, completed: &AtomicUsize) {
    for (index, operation) in script.operations.iter().enumerate() {
        // Return values are deterministic too: only this writer touches its pairs.
        let changed = match operation {
            Operation::Subscribe(pattern, subscriber) => trie.subscribe(pattern, subscriber),
            Operation::Unsubscribe(pattern, subscriber) => trie.unsubscribe(pattern, subscriber),
        };
        assert_eq!(
            changed,
            script.states[index] != script.states[index + 1],
            "{} op {index}",
            script.owner
        );
        completed.store(index + 1, Ordering::SeqCst);
    }
}

/// Check one snapshot against every writer's window.
fn check_snapshot(snapshot: &Snapshot, scripts: &[Script], before: &[usize], after: &[usize]) {
    let pairs = snapshot.subscriptions();
    for (writer, script) in scripts.iter().enumerate() {
        let own: BTreeSet<Pair> = pairs
            .iter()
            .filter(|(_, id)| id.starts_with(&script.owner))
            .cloned()
            .collect();
        let last = (after[writer] + 1).min(script.operations.len());
        let window = before[writer]..=last;
        assert!(
            window.clone().any(|k| script.states[k] == own),
            "writer {writer}: snapshot matches no state in {window:?}: {own:?}"
        );
    }
}

fn run(writers: usize, operations_per_writer: usize, snapshotters: usize) {
    let trie = CsTrie::new();
    let scripts: Vec<Script> = (0..writers)
        .map(|writer| script(writer, operations_per_writer))
        .collect();
    let completed: Vec<AtomicUsize> = (0..writers).map(|_| AtomicUsize::new(0)).collect();
    let writers_done = AtomicBool::new(false);
    let checked = AtomicUsize::new(0);
    thread::scope(|scope| {
        let handles: Vec<_> = scripts
            .iter()
            .zip(&completed)
            .map(|(script, completed)| {
                let trie = &trie;
                scope.spawn(move || run_writer(trie, script, completed))
            })
            .collect();
        for snapshotter in 0..snapshotters {
            let (trie, scripts, completed, writers_done, checked) =
                (&trie, &scripts, &completed, &writers_done, &checked);
            scope.spawn(move || {
                let mut rng = Rng(snapshotter as u64);
                let mut taken = 0usize;
                while !writers_done.load(Ordering::SeqCst) {
                    let before: Vec<usize> = completed.iter().map(|c| c.load(Ordering::SeqCst)).collect();
                    let snapshot = trie.snapshot();
                    let after: Vec<usize> = completed.iter().map(|c| c.load(Ordering::SeqCst)).collect();
                    check_snapshot(&snapshot, scripts, &before, &after);
                    taken += 1;
                    if taken.is_multiple_of(25) {
                        assert_snapshot_self_consistent(&snapshot, &mut rng, 3);
                    }
                }
                checked.fetch_add(taken, Ordering::SeqCst);
            });
        }
        let outcomes: Vec<_> = handles.into_iter().map(|handle| handle.join()).collect();
        // Stop the snapshotters before reporting a writer's failure, or the
        // scope would wait for them forever.
        writers_done.store(true, Ordering::SeqCst);
        for outcome in outcomes {
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert!(checked.load(Ordering::SeqCst) > 0, "no snapshot was checked");
    // The final state is every writer's last state.
    let finished: Vec<usize> = scripts.iter().map(|script| script.operations.len()).collect();
    check_snapshot(&trie.snapshot(), &scripts, &finished, &finished);
    let total: usize = scripts
        .iter()
        .map(|script| script.states.last().map_or(0, BTreeSet::len))
        .sum();
    assert_eq!(trie.len(), total);
}

#[test]
fn snapshots_linearize_with_one_writer() {
    run(1, 3_000, 3);
}

#[test]
fn snapshots_linearize_with_several_writers() {
    run(4, 1_500, 3);
}
