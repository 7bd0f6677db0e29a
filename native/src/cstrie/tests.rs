//! Unit tests: the validity table, idempotence, queries, snapshot isolation,
//! pruning back to the empty trie, and a seeded property test against the
//! in-crate oracle `words_match`.

use std::collections::BTreeSet;

use super::*;
use crate::topic::{matches, words_match, VALIDITY};

fn ids(values: &[&str]) -> Vec<Arc<str>> {
    values.iter().map(|value| Arc::from(*value)).collect()
}

#[test]
fn validity_table_one_pattern_at_a_time() {
    for &(pattern, key, expected) in VALIDITY {
        assert_eq!(
            matches(pattern, key),
            expected,
            "the table itself disagrees with the oracle: {pattern:?} {key:?}"
        );
        let trie = CsTrie::new();
        trie.subscribe(pattern, "s");
        let expected_ids = if expected { ids(&["s"]) } else { Vec::new() };
        assert_eq!(trie.lookup(key), expected_ids, "live: {pattern:?} vs {key:?}");
        assert_eq!(
            trie.snapshot().lookup(key),
            expected_ids,
            "snapshot: {pattern:?} vs {key:?}"
        );
    }
}

#[test]
fn validity_table_all_patterns_together() {
    let trie = CsTrie::new();
    let patterns: BTreeSet<&str> = VALIDITY.iter().map(|case| case.0).collect();
    for pattern in &patterns {
        // The pattern is its own subscriber id, so results name the patterns.
        assert!(trie.subscribe(pattern, pattern));
    }
    let snapshot = trie.snapshot();
    for &(_, key, _) in VALIDITY {
        let expected: Vec<Arc<str>> = patterns
            .iter()
            .filter(|pattern| matches(pattern, key))
            .map(|pattern| Arc::from(*pattern))
            .collect();
        assert_eq!(trie.lookup(key), expected, "live, key {key:?}");
        assert_eq!(snapshot.lookup(key), expected, "snapshot, key {key:?}");
    }
}

#[test]
fn subscribe_is_idempotent_and_unsubscribe_of_absent_is_a_no_op() {
    let trie = CsTrie::new();
    assert!(trie.is_empty());
    assert!(trie.subscribe("a.*", "s1"));
    assert!(!trie.subscribe("a.*", "s1"));
    assert!(trie.subscribe("a.*", "s2"));
    assert!(trie.subscribe("", "s1"));
    assert!(!trie.subscribe("", "s1"));
    assert_eq!(trie.len(), 3);
    assert!(!trie.unsubscribe("a.*", "s3"));
    assert!(!trie.unsubscribe("a.b", "s1"));
    assert!(!trie.unsubscribe("a", "s1"));
    assert!(!trie.unsubscribe("a.*.c", "s1"));
    assert!(!trie.unsubscribe("#", "s1"));
    assert_eq!(trie.len(), 3);
    assert!(trie.unsubscribe("a.*", "s1"));
    assert!(!trie.unsubscribe("a.*", "s1"));
    assert!(trie.unsubscribe("", "s1"));
    assert_eq!(trie.len(), 1);
    assert_eq!(trie.lookup("a.x"), ids(&["s2"]));
    assert_eq!(trie.lookup(""), Vec::<Arc<str>>::new());
}

#[test]
fn one_subscriber_on_many_matching_patterns_is_returned_once() {
    let trie = CsTrie::new();
    for pattern in ["#", "a.#", "*.b", "a.b", "#.b", "#.#"] {
        trie.subscribe(pattern, "s");
    }
    trie.subscribe("a.b", "t");
    assert_eq!(trie.lookup("a.b"), ids(&["s", "t"]));
    assert_eq!(trie.snapshot().lookup("a.b"), ids(&["s", "t"]));
}

#[test]
fn subscribers_topics_and_subscriptions() {
    let trie = CsTrie::new();
    let pairs = [
        ("stock.*.msft", "alice"),
        ("stock.*.msft", "bob"),
        ("stock.#", "alice"),
        ("", "carol"),
        ("a..b", "carol"),
        (".", "alice"),
        ("*", "bob"),
        ("#", "dave"),
    ];
    for (pattern, subscriber) in pairs {
        trie.subscribe(pattern, subscriber);
    }
    let snapshot = trie.snapshot();
    assert_eq!(snapshot.subscribers("stock.*.msft"), ids(&["alice", "bob"]));
    // Exact text, no matching: a key-like text finds nothing.
    assert_eq!(snapshot.subscribers("stock.nasdaq.msft"), Vec::<Arc<str>>::new());
    assert_eq!(snapshot.subscribers("stock"), Vec::<Arc<str>>::new());
    assert_eq!(snapshot.subscribers("#"), ids(&["dave"]));
    assert_eq!(snapshot.subscribers(""), ids(&["carol"]));
    assert_eq!(snapshot.topics("alice"), vec![".", "stock.#", "stock.*.msft"]);
    assert_eq!(snapshot.topics("carol"), vec!["", "a..b"]);
    assert_eq!(snapshot.topics("nobody"), Vec::<String>::new());
    let mut expected: Vec<(String, Arc<str>)> = pairs
        .iter()
        .map(|(pattern, subscriber)| (pattern.to_string(), Arc::from(*subscriber)))
        .collect();
    expected.sort();
    assert_eq!(snapshot.subscriptions(), expected);
    assert_eq!(snapshot.len(), pairs.len());
    assert_eq!(trie.len(), pairs.len());
}

#[test]
fn snapshot_is_isolated_from_later_writes() {
    let trie = CsTrie::new();
    trie.subscribe("a.b", "s1");
    trie.subscribe("a.#", "s2");
    let before = trie.snapshot();
    trie.subscribe("a.b", "s3");
    trie.unsubscribe("a.#", "s2");
    trie.subscribe("x.y.z", "s4");
    let after = trie.snapshot();
    trie.unsubscribe("a.b", "s1");

    assert_eq!(before.lookup("a.b"), ids(&["s1", "s2"]));
    assert_eq!(before.lookup("x.y.z"), Vec::<Arc<str>>::new());
    assert_eq!(before.len(), 2);
    assert_eq!(after.lookup("a.b"), ids(&["s1", "s3"]));
    assert_eq!(after.lookup("x.y.z"), ids(&["s4"]));
    assert_eq!(after.len(), 3);
    assert_eq!(trie.lookup("a.b"), ids(&["s3"]));
    assert_eq!(trie.len(), 2);
    // A clone is the same frozen view, and survives the trie itself.
    let clone = before.clone();
    drop(trie);
    drop(before);
    assert_eq!(clone.lookup("a.b"), ids(&["s1", "s2"]));
}

#[test]
fn unsubscribing_everything_prunes_back_to_the_empty_trie() {
    let trie = CsTrie::new();
    assert_eq!(trie.node_count(), 1);
    let patterns = [
        "a.b.c.d",
        "a.b",
        "a.*.c",
        "#",
        "a.#.d",
        "#.#.#",
        "*.*.*.*.*",
        "",
        "x..y",
        "a.b.c.e",
    ];
    for pattern in patterns {
        trie.subscribe(pattern, "s1");
        trie.subscribe(pattern, "s2");
    }
    assert!(trie.node_count() > 10);
    // Remove in an order that empties inner nodes before leaves and back.
    for pattern in patterns.iter().rev() {
        assert!(trie.unsubscribe(pattern, "s1"));
    }
    for pattern in patterns {
        assert!(trie.unsubscribe(pattern, "s2"));
    }
    assert_eq!(trie.node_count(), 1);
    assert!(trie.is_empty());
    assert!(trie.snapshot().subscriptions().is_empty());
}

#[test]
fn pruning_also_works_across_snapshots() {
    let trie = CsTrie::new();
    let patterns = ["a.b.c", "a.b", "a.#.c", "#.x", "a.b.c.d"];
    let mut snapshots = Vec::new();
    for pattern in patterns {
        trie.subscribe(pattern, "s");
        snapshots.push(trie.snapshot());
    }
    for pattern in patterns {
        assert!(trie.unsubscribe(pattern, "s"));
        snapshots.push(trie.snapshot());
    }
    assert_eq!(trie.node_count(), 1);
    for (taken, snapshot) in snapshots.iter().enumerate() {
        let expected = if taken < patterns.len() {
            taken + 1
        } else {
            2 * patterns.len() - taken - 1
        };
        assert_eq!(snapshot.len(), expected, "snapshot {taken}");
    }
}

#[test]
fn many_hash_words_stay_polynomial() {
    // Backtracking would explore ~C(46, 15) paths; the memoised walk ~15 x 32.
    let trie = CsTrie::new();
    let pattern = format!("{}.x", vec!["#"; 15].join("."));
    trie.subscribe(&pattern, "s");
    trie.subscribe(&vec!["#"; 15].join("."), "t");
    let key = vec!["a"; 31].join(".");
    assert_eq!(trie.lookup(&key), ids(&["t"]));
    assert_eq!(trie.lookup(&format!("{key}.x")), ids(&["s", "t"]));
}

#[test]
fn very_deep_patterns_do_not_overflow_the_stack() {
    // Everything (insert, lookup, enumerate, prune, drop) is iterative.
    let words = 100_000;
    let pattern = vec!["w"; words].join(".");
    let trie = CsTrie::new();
    assert!(trie.subscribe(&pattern, "s"));
    let snapshot = trie.snapshot();
    assert_eq!(trie.lookup(&pattern), ids(&["s"]));
    assert_eq!(snapshot.topics("s").len(), 1);
    assert_eq!(trie.node_count(), words);
    assert!(trie.subscribe(&format!("{pattern}.#"), "t"));
    assert!(trie.unsubscribe(&pattern, "s"));
    assert!(trie.unsubscribe(&format!("{pattern}.#"), "t"));
    assert_eq!(trie.node_count(), 1);
    drop(trie);
    drop(snapshot);
}

/// SplitMix64: a tiny seeded generator so failures reproduce exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    fn text(&mut self, alphabet: &[&str], max_words: usize) -> String {
        let count = self.below(max_words + 1);
        (0..count)
            .map(|_| alphabet[self.below(alphabet.len())])
            .collect::<Vec<_>>()
            .join(".")
    }
}

#[test]
fn random_operations_agree_with_a_sequential_model_and_the_oracle() {
    let pattern_alphabet = ["a", "b", "", "*", "#", "a*"];
    let key_alphabet = ["a", "b", "", "*", "#", "a*"];
    let subscribers = ["s0", "s1", "s2", "s3"];
    for seed in 0..40u64 {
        let mut rng = Rng(seed);
        let trie = CsTrie::new();
        let mut model: BTreeSet<(String, Arc<str>)> = BTreeSet::new();
        for _ in 0..150 {
            let pattern = rng.text(&pattern_alphabet, 4);
            let subscriber: Arc<str> = Arc::from(subscribers[rng.below(subscribers.len())]);
            if rng.below(3) == 0 {
                let present = model.remove(&(pattern.clone(), subscriber.clone()));
                assert_eq!(trie.unsubscribe(&pattern, &subscriber), present, "seed {seed}");
            } else {
                let added = model.insert((pattern.clone(), subscriber.clone()));
                assert_eq!(trie.subscribe(&pattern, &subscriber), added, "seed {seed}");
            }
        }
        let snapshot = trie.snapshot();
        assert_eq!(
            snapshot.subscriptions(),
            model.iter().cloned().collect::<Vec<_>>(),
            "seed {seed}"
        );
        assert_eq!(trie.len(), model.len());
        for _ in 0..60 {
            let key = rng.text(&key_alphabet, 5);
            let key_words = split_words(&key);
            let expected: BTreeSet<Arc<str>> = model
                .iter()
                .filter(|(pattern, _)| words_match(&pattern_words(pattern), &key_words))
                .map(|(_, subscriber)| subscriber.clone())
                .collect();
            let expected: Vec<Arc<str>> = expected.into_iter().collect();
            assert_eq!(trie.lookup(&key), expected, "seed {seed}, key {key:?}");
            assert_eq!(snapshot.lookup(&key), expected, "seed {seed}, key {key:?}");
        }
        for (pattern, subscriber) in &model {
            assert!(trie.unsubscribe(pattern, subscriber));
        }
        assert_eq!(trie.node_count(), 1, "seed {seed}");
        assert_eq!(snapshot.len(), model.len(), "the snapshot kept its pairs");
    }
}

#[test]
fn trie_and_snapshot_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CsTrie>();
    assert_send_sync::<Snapshot>();
}

/// Install `kind` as a GCAS proposal on `inode` *without* committing it, as a
/// writer preempted between its CAS and its commit would leave it.
fn leave_proposal_pending(inode: &INode, kind: MainKind, guard: &Guard) {
    let old = inode.main.load(guard).expect("main node");
    let proposal = Arc::new(MainNode {
        kind,
        prev: AtomicArc::new(Some(Arc::new(node::GcasPrev::Pending(old.to_arc())))),
    });
    assert!(inode.main.compare_exchange(Some(old), Some(proposal), guard).is_ok());
}

fn root_inode(trie: &CsTrie) -> Arc<INode> {
    let guard = epoch::pin();
    match trie.root.load(&guard).expect("root").get() {
        RootState::Stable(root) => root.clone(),
        RootState::Swapping(_) => unreachable!("no snapshot is running"),
    }
}

#[test]
fn a_pending_proposal_under_the_current_generation_is_committed_by_readers() {
    let trie = CsTrie::new();
    trie.subscribe("a.b", "s");
    let root = root_inode(&trie);
    let guard = epoch::pin();
    leave_proposal_pending(&root, MainKind::Branches(CNode::default()), &guard);
    // The live reader finishes the writer's GCAS: the generation still holds.
    assert_eq!(trie.lookup("a.b"), Vec::<Arc<str>>::new());
    assert!(
        root.main.load(&guard).expect("main").prev.load(&guard).is_none(),
        "committed"
    );
}

#[test]
fn a_pending_proposal_is_committed_before_a_snapshot_takes_the_root() {
    let trie = CsTrie::new();
    trie.subscribe("a.b", "s");
    let root = root_inode(&trie);
    let guard = epoch::pin();
    leave_proposal_pending(&root, MainKind::Branches(CNode::default()), &guard);
    // The snapshot reads the root's main node first, completing the GCAS, so
    // the write is ordered before the snapshot in both views.
    let snapshot = trie.snapshot();
    assert!(snapshot.is_empty());
    assert!(trie.lookup("a.b").is_empty());
}

#[test]
fn a_pending_proposal_on_a_snapshotted_inode_is_rolled_back() {
    let trie = CsTrie::new();
    trie.subscribe("a.b", "s");
    let old_root = root_inode(&trie);
    let snapshot = trie.snapshot();
    assert!(Arc::ptr_eq(&old_root, &snapshot.root));
    let guard = epoch::pin();

    // A writer that read the root before the snapshot proposes on it after:
    // a snapshot reader must roll it back (read-only decides "failed").
    leave_proposal_pending(&old_root, MainKind::Branches(CNode::default()), &guard);
    assert_eq!(snapshot.lookup("a.b"), ids(&["s"]));
    assert_eq!(snapshot.len(), 1);

    // So must a live reader: the root's generation moved on.
    leave_proposal_pending(&old_root, MainKind::Branches(CNode::default()), &guard);
    let main = gcas::gcas_read(&old_root, trie.ctx(), &guard);
    assert!(
        main.cnode().is_some_and(|cnode| cnode.literal("a").is_some()),
        "rolled back to the old C-node"
    );

    // And the writer's own commit reports failure, so it retries.
    let current = gcas::gcas_read(&old_root, trie.ctx(), &guard);
    assert!(!gcas::gcas(
        &old_root,
        current,
        MainKind::Branches(CNode::default()),
        trie.ctx(),
        &guard
    ));
    assert_eq!(snapshot.lookup("a.b"), ids(&["s"]));
    assert_eq!(trie.lookup("a.b"), ids(&["s"]));
}

#[test]
fn a_root_write_racing_a_snapshot_aborts_the_swap_not_the_write() {
    let trie = CsTrie::new();
    let guard = epoch::pin();
    let state = trie.root.load(&guard).expect("root");
    let RootState::Stable(root) = state.get() else {
        unreachable!()
    };
    let expected = gcas::gcas_read(root, trie.ctx(), &guard);
    // The root's main node changes between the snapshot's read and its swap.
    trie.subscribe("x", "s");
    let new_root = INode::new(99, expected.to_arc());
    assert!(!gcas::rdcss_root(
        &trie.root,
        state,
        root.clone(),
        expected.to_arc(),
        new_root,
        &guard
    ));
    assert_eq!(root_inode(&trie).gen, root.gen, "the root was not swapped");
    assert_eq!(trie.lookup("x"), ids(&["s"]));
}

/// Tomb the I-node under root branch `word` without compressing it, as a
/// remover preempted between its two steps would leave it.
fn leave_uncompressed_tomb(trie: &CsTrie, word: &str) {
    let guard = epoch::pin();
    let root = read_root(&trie.root, false, &guard);
    let root_main = gcas_read(root, trie.ctx(), &guard);
    let child = root_main
        .get()
        .cnode()
        .and_then(|cnode| cnode.literal(word))
        .and_then(|b| b.child.as_deref());
    let child = child.expect("a child under the word");
    let current = gcas_read(child, trie.ctx(), &guard);
    assert!(gcas(child, current, MainKind::Tomb, trie.ctx(), &guard));
}

#[test]
fn a_live_lookup_that_meets_a_tomb_compresses_it() {
    let trie = CsTrie::new();
    trie.subscribe("a.b", "s");
    leave_uncompressed_tomb(&trie, "a");
    assert_eq!(trie.node_count(), 2, "the tombed I-node is still linked");
    assert!(trie.lookup("a.b").is_empty());
    assert_eq!(trie.node_count(), 1, "the lookup helped remove it");
}

#[test]
fn writers_that_meet_a_tomb_compress_it_and_retry() {
    for (pattern, key) in [("a.b", "a.b"), ("a.c.d", "a.c.d"), ("a", "a")] {
        let trie = CsTrie::new();
        trie.subscribe("a.b", "s");
        leave_uncompressed_tomb(&trie, "a");
        assert!(trie.subscribe(pattern, "t"), "{pattern}");
        assert_eq!(trie.lookup(key), ids(&["t"]), "{pattern}");
        assert!(trie.unsubscribe(pattern, "t"));
        assert_eq!(trie.node_count(), 1, "{pattern}");
    }
    let trie = CsTrie::new();
    trie.subscribe("a.b", "s");
    trie.subscribe("a", "s");
    leave_uncompressed_tomb(&trie, "a");
    // The branch keeps its own subscribers; only the dead child goes.
    assert!(!trie.unsubscribe("a.b", "s"));
    assert_eq!(trie.node_count(), 1);
    assert_eq!(trie.lookup("a"), ids(&["s"]));
}
