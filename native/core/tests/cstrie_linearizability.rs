//! Linearizability of the CS-trie, checked two ways.
//!
//! **Histories with snapshots, on shared pairs** (`histories_*`): 2 to 8
//! threads run seeded mixes of subscribe, unsubscribe, lookup and snapshot
//! over a small universe of pairs they all share, so they race on the same
//! I-nodes, tomb and renew them around snapshots (the patterns under `c`
//! give a C-node several children, the shape issue 9 needed). Every call is
//! recorded with its result and invocation/response stamps from one atomic
//! counter, and the history is checked per pair by Wing & Gong's search, with
//! each snapshot a read of every pair at one instant (`cstrie_common::history`);
//! each snapshot must also agree with itself (`len()` and a lookup against
//! its own pairs). Bounded by operation counts, so a run's length does not
//! depend on the machine's speed. With renewal as it was before a9476af these
//! fail in most runs (lost subscribes and unsubscribes, reported per pair with
//! the operations around the one no linearization gets past).
//!
//! **Per-writer windows** (`snapshots_linearize_*`): writers apply known
//! operation sequences while other threads take snapshots. Writer `w` publishes how many of its
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
use std::sync::Barrier;

use spark_topic_router_core::cstrie::SmolStr;
use std::thread;

use cstrie_common::history::{self, Call, Clock, Record, Request};
use cstrie_common::*;
use spark_topic_router_core::cstrie::{CsTrie, Snapshot};

#[derive(Clone)]
enum Operation {
    Subscribe(String, SmolStr),
    Unsubscribe(String, SmolStr),
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
    let subscribers: Vec<SmolStr> = (0..2).map(|n| SmolStr::from(format!("{owner}{n}"))).collect();
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
    // Every thread starts at once: on 2 busy cores the writers could otherwise
    // finish before a snapshotter ran at all, and nothing would be checked.
    let start = Barrier::new(writers + snapshotters);
    thread::scope(|scope| {
        let handles: Vec<_> = scripts
            .iter()
            .zip(&completed)
            .map(|(script, completed)| {
                let (trie, start) = (&trie, &start);
                scope.spawn(move || {
                    start.wait();
                    run_writer(trie, script, completed)
                })
            })
            .collect();
        for snapshotter in 0..snapshotters {
            let (trie, scripts, completed, writers_done, checked, start) =
                (&trie, &scripts, &completed, &writers_done, &checked, &start);
            scope.spawn(move || {
                start.wait();
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

/// Patterns of the shared universe: `c` gets several children (`c.0`, `c.1`,
/// `c.2`, `c.*`, `c.#`) so one C-node holds old- and current-generation
/// siblings after a snapshot; the rest cover the root's own subscribers and
/// wildcards.
const SHARED_PATTERNS: &[&str] = &[
    "c.0.a", "c.0.b", "c.1.a", "c.1.b", "c.2.a", "c.0", "c.1", "c.*.a", "c.#", "d", "",
];
const SHARED_SUBSCRIBERS: &[&str] = &["s0", "s1"];
/// The first pairs of the universe: the patterns `c.<k>.<x>`.
const SIBLING_PAIRS: usize = 5 * 2;
const LOOKUP_KEYS: &[&str] = &["c.0.a", "c.1.b", "c.2.a", "c.0", "c.3.a", "c", "d", ""];

fn shared_universe() -> Vec<Pair> {
    SHARED_PATTERNS
        .iter()
        .flat_map(|pattern| {
            SHARED_SUBSCRIBERS
                .iter()
                .map(move |subscriber| (pattern.to_string(), SmolStr::from(*subscriber)))
        })
        .collect()
}

/// One seeded run: `threads` threads of `operations` calls each, then a
/// final snapshot once they are all done. Returns the whole history and the
/// trie's `len()` at the end.
fn record_history(threads: usize, operations: usize, seed: u64) -> (Vec<Record>, usize) {
    let trie = CsTrie::new();
    let clock = Clock::default();
    let universe = shared_universe();
    let start = Barrier::new(threads);
    let mut records: Vec<Record> = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (trie, clock, universe, start) = (&trie, &clock, &universe, &start);
                scope.spawn(move || {
                    let mut rng = Rng(seed.wrapping_mul(0x1_0000) + thread as u64);
                    let mut records = Vec::with_capacity(operations);
                    start.wait();
                    for _ in 0..operations {
                        // Three writes in four go below `c.0`, `c.1` or `c.2`:
                        // sibling subtrees of one C-node.
                        let pair = match rng.below(4) {
                            0 => &universe[rng.below(universe.len())],
                            _ => &universe[rng.below(SIBLING_PAIRS)],
                        };
                        let request = match rng.below(20) {
                            0..=7 => Request::Subscribe(pair),
                            8..=13 => Request::Unsubscribe(pair),
                            14..=15 => Request::Lookup(LOOKUP_KEYS[rng.below(LOOKUP_KEYS.len())]),
                            _ => Request::Snapshot(Some(LOOKUP_KEYS[rng.below(LOOKUP_KEYS.len())])),
                        };
                        records.push(history::perform(trie, clock, thread, request));
                    }
                    records
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    records.push(history::perform(&trie, &clock, threads, Request::Snapshot(None)));
    (records, trie.len())
}

/// `seeds` seeded runs at each thread count, every history checked.
fn check_histories(threads: usize, operations: usize, seeds: std::ops::Range<u64>) {
    let universe = shared_universe();
    for seed in seeds {
        let label = format!("{threads} threads, seed {seed}");
        let (records, len) = record_history(threads, operations, seed);
        let snapshots = records
            .iter()
            .filter(|record| matches!(record.call, Call::Snapshot(_)))
            .count();
        assert!(snapshots > 1, "{label}: no snapshot during the run");
        history::check(&records, &universe, &label);
        let Some(Record {
            call: Call::Snapshot(last),
            ..
        }) = records.last()
        else {
            unreachable!("the history ends with the final snapshot")
        };
        assert_eq!(len, last.len(), "{label}: len() once quiescent");
    }
}

#[test]
fn histories_with_snapshots_linearize_with_2_threads() {
    check_histories(2, 500, 0..60);
}

#[test]
fn histories_with_snapshots_linearize_with_3_threads() {
    check_histories(3, 500, 100..140);
}

#[test]
fn histories_with_snapshots_linearize_with_4_threads() {
    check_histories(4, 500, 200..230);
}

#[test]
fn histories_with_snapshots_linearize_with_8_threads() {
    check_histories(8, 400, 300..320);
}

/// The checker itself, on hand-made histories.
mod checker {
    use spark_topic_router_core::cstrie::SmolStr;

    use crate::cstrie_common::history::{check, Call, Record};
    use crate::cstrie_common::Pair;

    fn pair(pattern: &str) -> Pair {
        (pattern.to_owned(), SmolStr::from("s"))
    }

    fn record(invoked: u64, returned: u64, call: Call) -> Record {
        Record {
            thread: 0,
            invoked,
            returned,
            call,
        }
    }

    fn snapshot(patterns: &[&str]) -> Call {
        Call::Snapshot(patterns.iter().map(|pattern| pair(pattern)).collect())
    }

    #[test]
    fn accepts_overlapping_operations_in_either_order() {
        let universe = [pair("a"), pair("b")];
        let history = [
            record(0, 5, Call::Subscribe(pair("a"), true)),
            record(1, 4, snapshot(&["a"])),
            record(2, 3, snapshot(&[])),
            record(6, 7, Call::Unsubscribe(pair("a"), true)),
        ];
        check(&history, &universe, "overlap");
    }

    #[test]
    #[should_panic(expected = "not linearizable")]
    fn rejects_a_lost_update() {
        let universe = [pair("a")];
        let history = [
            record(0, 1, Call::Subscribe(pair("a"), true)),
            record(2, 3, snapshot(&[])),
        ];
        check(&history, &universe, "lost");
    }

    #[test]
    #[should_panic(expected = "never had at one instant")]
    fn rejects_a_snapshot_mixing_two_instants() {
        // `a` is added and then `b`, one after the other; a snapshot overlapping
        // both sees `b` but not `a`: each pair alone is fine, together they are not.
        let universe = [pair("a"), pair("b")];
        let history = [
            record(0, 10, snapshot(&["b"])),
            record(1, 2, Call::Subscribe(pair("a"), true)),
            record(3, 4, Call::Subscribe(pair("b"), true)),
        ];
        check(&history, &universe, "mixed");
    }
}
