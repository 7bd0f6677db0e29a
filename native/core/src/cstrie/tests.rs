//! Unit tests: the validity table, idempotence, queries, snapshot isolation,
//! pruning back to the empty trie, and a seeded property test against the
//! in-crate oracle `words_match`.

use std::collections::BTreeSet;

use super::*;
use crate::rng::Rng;
use crate::topic::{matches, pattern_words, split_words, validity, words_match};

fn ids(values: &[&str]) -> Vec<SmolStr> {
    values.iter().map(|value| SmolStr::from(*value)).collect()
}

#[test]
fn validity_table_one_pattern_at_a_time() {
    for &(pattern, key, expected) in validity() {
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
    let patterns: BTreeSet<&str> = validity().iter().map(|case| case.0).collect();
    for pattern in &patterns {
        // The pattern is its own subscriber id, so results name the patterns.
        assert!(trie.subscribe(pattern, pattern));
    }
    let snapshot = trie.snapshot();
    for &(_, key, _) in validity() {
        let expected: Vec<SmolStr> = patterns
            .iter()
            .filter(|pattern| matches(pattern, key))
            .map(|pattern| SmolStr::from(*pattern))
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
    assert_eq!(trie.lookup(""), Vec::<SmolStr>::new());
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
    assert_eq!(snapshot.subscribers("stock.nasdaq.msft"), Vec::<SmolStr>::new());
    assert_eq!(snapshot.subscribers("stock"), Vec::<SmolStr>::new());
    assert_eq!(snapshot.subscribers("#"), ids(&["dave"]));
    assert_eq!(snapshot.subscribers(""), ids(&["carol"]));
    assert_eq!(snapshot.topics("alice"), vec![".", "stock.#", "stock.*.msft"]);
    assert_eq!(snapshot.topics("carol"), vec!["", "a..b"]);
    assert_eq!(snapshot.topics("nobody"), Vec::<String>::new());
    let mut expected: Vec<(String, SmolStr)> = pairs
        .iter()
        .map(|(pattern, subscriber)| (pattern.to_string(), SmolStr::from(*subscriber)))
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
    assert_eq!(before.lookup("x.y.z"), Vec::<SmolStr>::new());
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
    // I-nodes only where patterns share a path (the root, `a`, `a.b`, `a.b.c`);
    // a path one pattern takes alone is a tail.
    assert_eq!(trie.node_count(), 4);
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
    assert_eq!(trie.node_count(), 1, "one pattern: a tail below the root");
    assert!(trie.subscribe(&format!("{pattern}.#"), "t"));
    assert_eq!(
        trie.node_count(),
        words,
        "a second one expands the shared path, level by level"
    );
    assert_eq!(trie.lookup(&format!("{pattern}.x")), ids(&["t"]));
    assert!(trie.unsubscribe(&pattern, "s"));
    assert!(trie.unsubscribe(&format!("{pattern}.#"), "t"));
    assert_eq!(trie.node_count(), 1);
    drop(trie);
    drop(snapshot);
}

#[test]
fn random_operations_agree_with_a_sequential_model_and_the_oracle() {
    let pattern_alphabet = ["a", "b", "", "*", "#", "a*"];
    let key_alphabet = ["a", "b", "", "*", "#", "a*"];
    let subscribers = ["s0", "s1", "s2", "s3"];
    for seed in 0..40u64 {
        let mut rng = Rng(seed);
        let trie = CsTrie::new();
        let mut model: BTreeSet<(String, SmolStr)> = BTreeSet::new();
        for _ in 0..150 {
            let pattern = rng.text(&pattern_alphabet, 4);
            let subscriber: SmolStr = SmolStr::from(subscribers[rng.below(subscribers.len())]);
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
        // Freezing the trie directly gives exactly the matcher of its pairs.
        let built = crate::frozen::FrozenMatcher::build(model.iter().map(|(p, s)| (p.as_str(), &**s))).unwrap();
        let frozen = snapshot.freeze().unwrap();
        assert_eq!(
            crate::codec::encode(&frozen),
            crate::codec::encode(&built),
            "seed {seed}"
        );
        for _ in 0..60 {
            let key = rng.text(&key_alphabet, 5);
            let key_words = split_words(&key);
            let expected: BTreeSet<SmolStr> = model
                .iter()
                .filter(|(pattern, _)| words_match(&pattern_words(pattern), &key_words))
                .map(|(_, subscriber)| subscriber.clone())
                .collect();
            let expected: Vec<SmolStr> = expected.into_iter().collect();
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
    assert_eq!(trie.lookup("a.b"), Vec::<SmolStr>::new());
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
        .and_then(|b| b.child())
        .and_then(Child::inode);
    let child = child.expect("an I-node under the word");
    let current = gcas_read(child, trie.ctx(), &guard);
    assert!(gcas(child, current, MainKind::Tomb, trie.ctx(), &guard));
}

#[test]
fn a_live_lookup_that_meets_a_tomb_compresses_it() {
    let trie = CsTrie::new();
    // Two patterns below `a`, so it is an I-node (one alone would be a tail).
    trie.subscribe("a.b", "s");
    trie.subscribe("a.c", "s");
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
        trie.subscribe("a.x", "s");
        leave_uncompressed_tomb(&trie, "a");
        assert!(trie.subscribe(pattern, "t"), "{pattern}");
        assert_eq!(trie.lookup(key), ids(&["t"]), "{pattern}");
        assert!(trie.unsubscribe(pattern, "t"));
        assert_eq!(trie.node_count(), 1, "{pattern}");
    }
    let trie = CsTrie::new();
    trie.subscribe("a.b", "s");
    trie.subscribe("a.x", "s");
    trie.subscribe("a", "s");
    leave_uncompressed_tomb(&trie, "a");
    // The branch keeps its own subscribers; only the dead child goes.
    assert!(!trie.unsubscribe("a.b", "s"));
    assert_eq!(trie.node_count(), 1);
    assert_eq!(trie.lookup("a"), ids(&["s"]));
}

/// The live I-node reached from the root through the literal `path`.
fn live_inode<'g>(trie: &'g CsTrie, path: &[&str], guard: &'g Guard) -> &'g INode {
    let mut inode = read_root(&trie.root, false, guard);
    for word in path {
        let cnode = gcas_read(inode, trie.ctx(), guard).get().cnode().expect("a C-node");
        inode = cnode
            .literal(word)
            .and_then(|b| b.child())
            .and_then(Child::inode)
            .expect("an I-node child");
    }
    inode
}

/// The lost update of issue 9, replayed step by step. A C-node held an
/// old-generation child (`c.0`, from before a snapshot) beside a
/// current-generation one (`c.1`, added after it). Writer A is preempted just
/// before its GCAS on `c.1`; writer B descends into `c.0`, must renew it, and
/// used to renew *every* child, so `c.1` was replaced by a copy and A's
/// commit landed on an I-node no longer in the trie: A's subscribe returned
/// true yet the pair was gone. Renewal now copies only the old child.
#[test]
fn a_write_racing_the_renewal_of_a_sibling_is_not_lost() {
    let trie = CsTrie::new();
    // Two patterns below each of `c` and `c.0`, so both are I-nodes.
    assert!(trie.subscribe("c.0.a", "t"));
    assert!(trie.subscribe("c.0.z", "u"));
    let _snapshot = trie.snapshot();
    assert!(trie.subscribe("c.1.b", "t"), "renews `c` and adds `c.1` (a tail)");
    assert!(
        trie.subscribe("c.1.y", "u"),
        "expands `c.1` into a current-generation I-node"
    );
    let guard = epoch::pin();
    let current_gen = read_root(&trie.root, false, &guard).gen;
    let c1 = live_inode(&trie, &["c", "1"], &guard);
    assert_eq!(c1.gen, current_gen);
    assert_ne!(live_inode(&trie, &["c", "0"], &guard).gen, current_gen);

    // Writer A reads `c.1` and builds its change ...
    let main = gcas_read(c1, trie.ctx(), &guard);
    let leaf = Branch::new(SubscriberSet::single(SmolStr::from("t")), None);
    let proposal = main
        .cnode()
        .expect("C-node")
        .with_branch(PatternWord::Literal("q"), Some(leaf));
    // ... writer B runs a whole subscribe below the old sibling ...
    assert!(trie.subscribe("c.0.z", "t"));
    // ... and A's GCAS commits, because `c.1` is still in the current generation.
    assert!(gcas(c1, main, MainKind::Branches(proposal), trie.ctx(), &guard));
    drop(guard);

    assert_eq!(trie.lookup("c.1.q"), ids(&["t"]), "A's committed write is in the trie");
    let pairs: Vec<String> = trie.snapshot().subscriptions().into_iter().map(|(p, _)| p).collect();
    assert_eq!(pairs, ["c.0.a", "c.0.z", "c.0.z", "c.1.b", "c.1.q", "c.1.y"]);
}

/// Average HAMT slots copied per subscribe of `pattern(i)` for i in `range`.
fn slots_copied_per_subscribe(
    trie: &CsTrie,
    range: std::ops::Range<usize>,
    pair: impl Fn(usize) -> (String, String),
) -> usize {
    let count = range.len();
    let before = hamt::slots_copied();
    for i in range {
        let (pattern, subscriber) = pair(i);
        assert!(trie.subscribe(&pattern, &subscriber));
    }
    (hamt::slots_copied() - before) / count
}

/// Copy-on-write costs O(log n) slots, not O(n): with flat tables a write to
/// a wide node or a hot pattern copied the whole table or set (n entries),
/// so these counts grew linearly. Counted, not timed.
#[test]
fn writes_copy_a_logarithmic_number_of_slots_for_wide_nodes_and_hot_patterns() {
    type Shape = fn(usize) -> (String, String);
    let shapes: [(&str, Shape); 2] = [
        ("wide node", |i| (format!("tenant{i}.orders.#"), "s".to_owned())),
        ("hot pattern", |i| ("audit.#".to_owned(), format!("subscriber{i}"))),
    ];
    for (shape, pair) in shapes {
        let trie = CsTrie::new();
        let small = slots_copied_per_subscribe(&trie, 0..2_000, pair);
        slots_copied_per_subscribe(&trie, 2_000..40_000, pair);
        let large = slots_copied_per_subscribe(&trie, 40_000..42_000, pair);
        // ceil(log_w(40k)) levels of at most w slots each, plus slack for the
        // deeper paths of a random hash: far below n = 40,000.
        let levels = hamt::levels_for(40_000);
        assert!(
            large <= hamt::WAYS * (levels + 2),
            "{shape}: {large} slots copied per subscribe at n = 40k"
        );
        // From n = 2k to n = 40k (20x), the cost grows by log_w(20) levels.
        assert!(
            large <= small + hamt::WAYS * 2,
            "{shape}: {small} -> {large} slots per subscribe"
        );
        let _snapshot = trie.snapshot();
        let after_snapshot = slots_copied_per_subscribe(&trie, 42_000..44_000, pair);
        assert!(
            after_snapshot <= hamt::WAYS * (levels + 3),
            "{shape}: {after_snapshot} slots per subscribe after a snapshot"
        );
    }
}

#[test]
fn freezing_skips_tombs_not_yet_compressed() {
    let trie = CsTrie::new();
    trie.subscribe("a.b", "s");
    trie.subscribe("a.x", "s");
    trie.subscribe("c", "s");
    leave_uncompressed_tomb(&trie, "a");
    let frozen = trie.snapshot().freeze().unwrap();
    let built = crate::frozen::FrozenMatcher::build([("c", "s")]).unwrap();
    assert_eq!(crate::codec::encode(&frozen), crate::codec::encode(&built));
    assert_eq!(frozen.len(), 1);
}

#[test]
fn subscribe_many_agrees_with_a_sequential_model() {
    bulk_loads_agree_with_a_sequential_model(&["a", "b", "", "*", "#", "c"], 0..60);
}

/// The same loads copied into group order first (what a load of at least
/// `GROUP_ORDER_MIN` pairs does): the walk must not depend on the order.
#[test]
fn subscribe_many_in_group_order_agrees_with_a_sequential_model() {
    super::bulk_load::with_group_order_min(0, || {
        bulk_loads_agree_with_a_sequential_model(&["a", "b", "", "*", "#", "c"], 0..60);
    });
}

/// The bulk walk groups a level's pairs by word hash and compares texts only
/// within a run of one hash; a real 64-bit hash never collides in a test, so
/// this one makes words collide with each other and with the wildcards'
/// grouping keys (0 for `*`, 1 for `#`), and every table below collides too.
#[test]
fn subscribe_many_agrees_with_a_sequential_model_when_words_share_hashes() {
    fn colliding(word: &str) -> u64 {
        word.bytes().map(u64::from).sum::<u64>() % 3
    }
    crate::word_hash::with_forced_hash(colliding, || {
        bulk_loads_agree_with_a_sequential_model(&["a", "b", "ab", "ba", "c", "", "*", "#"], 0..40);
        super::bulk_load::with_group_order_min(0, || {
            bulk_loads_agree_with_a_sequential_model(&["a", "b", "ab", "ba", "c", "", "*", "#"], 40..80);
        });
    });
}

fn bulk_loads_agree_with_a_sequential_model(alphabet: &[&str], seeds: std::ops::Range<u64>) {
    let subscribers = ["s0", "s1", "s2"];
    for seed in seeds {
        let mut rng = Rng(seed);
        let trie = CsTrie::new();
        let mut model: BTreeSet<(String, SmolStr)> = BTreeSet::new();
        for _ in 0..40 {
            let pattern = rng.text(alphabet, 4);
            let subscriber: SmolStr = SmolStr::from(subscribers[rng.below(3)]);
            trie.subscribe(&pattern, &subscriber);
            model.insert((pattern, subscriber));
        }
        // A snapshot first, so the bulk call meets old-generation children.
        let before = (rng.below(2) == 0).then(|| trie.snapshot());
        let mut batch: Vec<(String, String)> = Vec::new();
        for _ in 0..120 {
            // A quarter repeat the pattern before them: runs of one pattern, which the parse splits once.
            let pattern = match batch.last() {
                Some((previous, _)) if rng.below(4) == 0 => previous.clone(),
                _ => rng.text(alphabet, 5),
            };
            batch.push((pattern, subscribers[rng.below(3)].to_owned()));
        }
        if seed % 10 == 0 {
            // Longer than the bulk path takes: these go one pair at a time.
            batch.push((vec!["w"; 70].join("."), "s0".to_owned()));
        }
        let new = batch
            .iter()
            .filter(|(p, s)| model.insert((p.clone(), SmolStr::from(s.as_str()))))
            .count();
        assert_eq!(
            trie.subscribe_many(batch.iter().map(|(p, s)| (p.as_str(), s.as_str()))),
            new,
            "seed {seed}"
        );
        assert_eq!(trie.len(), model.len(), "seed {seed}");
        let snapshot = trie.snapshot();
        assert_eq!(
            snapshot.subscriptions(),
            model.iter().cloned().collect::<Vec<_>>(),
            "seed {seed}"
        );
        let built = crate::frozen::FrozenMatcher::build(model.iter().map(|(p, s)| (p.as_str(), &**s))).unwrap();
        assert_eq!(
            crate::codec::encode(&snapshot.freeze().unwrap()),
            crate::codec::encode(&built)
        );
        for _ in 0..30 {
            let key = rng.text(alphabet, 5).replace(['*', '#'], "a");
            let expected: BTreeSet<SmolStr> = (model.iter())
                .filter(|(pattern, _)| matches(pattern, &key))
                .map(|(_, subscriber)| subscriber.clone())
                .collect();
            assert_eq!(trie.lookup(&key), Vec::from_iter(expected), "seed {seed} key {key:?}");
            assert_eq!(trie.lookup(&key), snapshot.lookup(&key), "seed {seed} key {key:?}");
        }
        if let Some(before) = before {
            assert!(before.len() <= 40, "the earlier snapshot is untouched");
        }
        for (pattern, subscriber) in &model {
            assert!(trie.unsubscribe(pattern, subscriber), "seed {seed} {pattern:?}");
        }
        assert_eq!(trie.node_count(), 1, "seed {seed}");
    }
}

#[test]
fn subscribe_many_copies_each_shared_table_once() {
    let trie = CsTrie::new();
    for i in 0..20_000 {
        trie.subscribe(&format!("tenant{i}.orders.#"), "s");
    }
    let pairs: Vec<String> = (20_000..40_000).map(|i| format!("tenant{i}.orders.#")).collect();
    let before = hamt::slots_copied();
    assert_eq!(trie.subscribe_many(pairs.iter().map(|p| (p.as_str(), "s"))), 20_000);
    let copied = hamt::slots_copied() - before;
    // One copy of the root table's ~20k slots (plus its inner nodes), where one
    // subscribe per pair would copy ~100 slots for each of the 20k pairs.
    assert!(copied < 25_000, "{copied} slots copied");
    assert_eq!(trie.len(), 40_000);
    assert_eq!(trie.lookup("tenant39999.orders.x"), ids(&["s"]));
}

#[test]
fn subscribe_many_races_writers_and_snapshots_without_losing_pairs() {
    bulk_load_races_writers_and_snapshots(|i| format!("t.{}.{i}", i % 7));
}

/// The same race with the bulk call copied into group order first (its
/// pairs alternate between two first words, so input order is not group
/// order).
#[test]
fn subscribe_many_in_group_order_races_writers_and_snapshots_without_losing_pairs() {
    super::bulk_load::with_group_order_min(0, || {
        bulk_load_races_writers_and_snapshots(|i| format!("{}.{}.{i}", ["t", "u"][i % 2], i % 7));
    });
}

/// A bulk call of 2,000 pairs (`pattern(i)` for subscriber `b`) against a
/// one-pair writer on the `t.*` nodes and a snapshotter: every bulk pair is
/// counted once and held at the end.
fn bulk_load_races_writers_and_snapshots(pattern: impl Fn(usize) -> String) {
    use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
    for round in 0..20 {
        let trie = CsTrie::new();
        let done = AtomicBool::new(false);
        let bulk: Vec<String> = (0..2_000).map(&pattern).collect();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // One-pair writers on the same nodes, with pairs of their own.
                let mut i = 0;
                while !done.load(AtomicOrdering::Relaxed) || i < 200 {
                    let pattern = format!("t.{}.w{i}", i % 7);
                    assert!(trie.subscribe(&pattern, "w"));
                    if i % 2 == 0 {
                        assert!(trie.unsubscribe(&pattern, "w"));
                    }
                    i += 1;
                }
            });
            scope.spawn(|| {
                while !done.load(AtomicOrdering::Relaxed) {
                    let _ = trie.snapshot();
                }
            });
            let added = trie.subscribe_many(bulk.iter().map(|p| (p.as_str(), "b")));
            done.store(true, AtomicOrdering::Relaxed);
            assert_eq!(added, 2_000, "round {round}");
        });
        let held: BTreeSet<String> = trie
            .snapshot()
            .subscriptions()
            .into_iter()
            .filter(|(_, s)| &**s == "b")
            .map(|(p, _)| p)
            .collect();
        assert_eq!(held, bulk.iter().cloned().collect::<BTreeSet<_>>(), "round {round}");
    }
}

/// A tail is matched by the glob algorithm of `traverse::tail_matches`;
/// the reference `words_match` (dynamic programming) is its oracle, over
/// random patterns and keys from a small alphabet (so they often match).
#[test]
fn tail_matching_agrees_with_the_reference_matcher() {
    let pattern_alphabet = ["a", "b", "", "*", "#"];
    let key_alphabet = ["a", "b", ""];
    let mut matched = 0;
    for seed in 0..20_000u64 {
        let mut rng = Rng(seed);
        let pattern_text = rng.text(&pattern_alphabet, 6);
        let key_text = rng.text(&key_alphabet, 7);
        let pattern = pattern_words(&pattern_text);
        let key = split_words(&key_text);
        let expected = words_match(&pattern, &key);
        matched += usize::from(expected);
        assert_eq!(
            traverse::tail_matches(&pattern, &key),
            expected,
            "{pattern_text:?} vs {key_text:?}"
        );
    }
    assert!(
        matched > 1_000,
        "the cases must match often enough to test both outcomes: {matched}"
    );
    for &(pattern, key, expected) in validity() {
        assert_eq!(
            traverse::tail_matches(&pattern_words(pattern), &split_words(key)),
            expected,
            "{pattern:?} vs {key:?}"
        );
    }
}

/// A path one pattern takes alone is a tail; a second pattern on it expands
/// the shared words into I-nodes, one pair at a time or in bulk, and removing
/// patterns never loses the others.
#[test]
fn tails_expand_where_patterns_share_a_path() {
    for bulk in [false, true] {
        let trie = CsTrie::new();
        assert!(trie.subscribe("a.b.c", "s0"));
        assert_eq!(trie.node_count(), 1, "one pattern: a tail below the root");
        let more = [("a.b.c", "s1"), ("a.b.d", "s2"), ("a.x", "s3"), ("a.b.c", "s0")];
        if bulk {
            assert_eq!(trie.subscribe_many(more), 3);
        } else {
            let added = more.iter().filter(|(p, s)| trie.subscribe(p, s)).count();
            assert_eq!(added, 3);
        }
        assert_eq!(trie.node_count(), 3, "bulk {bulk}: the root, `a` and `a.b`");
        assert_eq!(trie.lookup("a.b.c"), ids(&["s0", "s1"]), "bulk {bulk}");
        assert_eq!(trie.lookup("a.b.d"), ids(&["s2"]), "bulk {bulk}");
        assert_eq!(trie.lookup("a.x"), ids(&["s3"]), "bulk {bulk}");
        assert!(trie.lookup("a.b").is_empty(), "bulk {bulk}");
        // More subscribers of a tail's own pattern stay in the tail.
        assert_eq!(trie.subscribe_many([("a.x", "s4"), ("a.x", "s5")]), 2);
        assert_eq!(trie.node_count(), 3, "bulk {bulk}");
        assert_eq!(trie.lookup("a.x"), ids(&["s3", "s4", "s5"]), "bulk {bulk}");
        for (pattern, subscriber) in [("a.b.c", "s0"), ("a.x", "s3"), ("a.x", "s4"), ("a.x", "s5")] {
            assert!(
                trie.unsubscribe(pattern, subscriber),
                "bulk {bulk}: {pattern} {subscriber}"
            );
        }
        assert!(!trie.unsubscribe("a.x", "s3"), "bulk {bulk}: already gone");
        assert!(!trie.unsubscribe("a.b.c.d", "s1"), "bulk {bulk}: longer than the tail");
        assert_eq!(trie.lookup("a.b.c"), ids(&["s1"]), "bulk {bulk}");
        assert!(trie.unsubscribe("a.b.c", "s1"));
        assert!(trie.unsubscribe("a.b.d", "s2"));
        assert_eq!(trie.node_count(), 1, "bulk {bulk}: pruned back to the root");
        assert!(trie.is_empty());
    }
}

// --- shared subscriber sets (idset.rs) ---

/// The pairs of `model` whose pattern matches `key`: the subscribers a lookup must return.
fn expected_lookup(model: &BTreeSet<(String, SmolStr)>, key: &str) -> Vec<SmolStr> {
    let found: BTreeSet<SmolStr> = (model.iter())
        .filter(|(pattern, _)| matches(pattern, key))
        .map(|(_, id)| id.clone())
        .collect();
    found.into_iter().collect()
}

/// Every read of `snapshot` against `model`, the pairs it must hold.
fn assert_snapshot_holds(snapshot: &Snapshot, model: &BTreeSet<(String, SmolStr)>, label: &str) {
    let pairs: Vec<(String, SmolStr)> = model.iter().cloned().collect();
    assert_eq!(snapshot.subscriptions(), pairs, "{label}: subscriptions()");
    assert_eq!(snapshot.len(), model.len(), "{label}: len()");
    let frozen = snapshot.freeze().expect("freezes");
    for key in ["", "a", "a.b", "t.x.y", "t.x", "q.b", "z", "a.b.c"] {
        let expected = expected_lookup(model, key);
        assert_eq!(snapshot.lookup(key), expected, "{label}: lookup({key:?})");
        let mut from_frozen: Vec<&str> = frozen.lookup(key);
        from_frozen.sort_unstable();
        assert_eq!(from_frozen, expected, "{label}: frozen lookup({key:?})");
    }
}

#[test]
fn shared_sets_agree_with_a_model_under_random_writes_and_snapshots() {
    // A set in each kind of holder: the root's empty pattern, literal branches,
    // a tail (`t.x.#` is the only pattern under `t`) and the wildcard branches.
    let patterns = ["", "a", "a.b", "t.x.#", "*.b", "#"];
    for seed in 1..4u64 {
        let mut rng = Rng(seed);
        let trie = CsTrie::new();
        let mut model: BTreeSet<(String, SmolStr)> = BTreeSet::new();
        let mut snapshots = Vec::new();
        for step in 0..30_000 {
            // Phases of growth and of shrinking, so sets go from one id to
            // shared and back, and empty out entirely.
            let growing = (step / 3_000) % 2 == 0;
            let pattern = patterns[rng.below(patterns.len())];
            let id = SmolStr::from(format!("id{}", rng.below(150)));
            let pair = (pattern.to_owned(), id.clone());
            let subscribe = rng.below(10) < if growing { 7 } else { 2 };
            if subscribe {
                assert_eq!(
                    trie.subscribe(pattern, &id),
                    model.insert(pair),
                    "step {step}: subscribe"
                );
            } else {
                assert_eq!(
                    trie.unsubscribe(pattern, &id),
                    model.remove(&pair),
                    "step {step}: unsubscribe"
                );
            }
            if step % 997 == 0 {
                snapshots.push((step, trie.snapshot(), model.clone()));
            }
        }
        let label = format!("seed {seed}");
        assert_eq!(trie.len(), model.len(), "{label}: len()");
        for key in ["", "a", "a.b", "t.x.y", "q.b"] {
            assert_eq!(
                trie.lookup(key),
                expected_lookup(&model, key),
                "{label}: live lookup({key:?})"
            );
        }
        assert_snapshot_holds(&trie.snapshot(), &model, &format!("{label}, at the end"));
        for (step, snapshot, then) in &snapshots {
            assert_snapshot_holds(snapshot, then, &format!("{label}, snapshot at step {step}"));
        }
    }
}

#[test]
fn emptying_shared_sets_returns_the_trie_to_a_lone_root() {
    let patterns = ["", "a", "a.b.c", "x.#"];
    let trie = CsTrie::new();
    let mut pairs = Vec::new();
    for pattern in patterns {
        for i in 0..300 {
            pairs.push((pattern, format!("id{i}")));
        }
    }
    let mut rng = Rng(7);
    for (pattern, id) in &pairs {
        assert!(trie.subscribe(pattern, id));
    }
    let full = trie.snapshot();
    // Unsubscribe in random order, with snapshots on the way: writers then
    // renew set roots and levels into the new generation as they go.
    for at in (1..pairs.len()).rev() {
        pairs.swap(at, rng.below(at + 1));
    }
    for (done, (pattern, id)) in pairs.iter().enumerate() {
        assert!(trie.unsubscribe(pattern, id), "{pattern:?} {id}");
        if done % 250 == 0 {
            drop(trie.snapshot());
        }
    }
    assert!(trie.is_empty());
    assert_eq!(trie.node_count(), 1, "only the root I-node is left");
    let guard = epoch::pin();
    let root = read_root(&trie.root, false, &guard);
    let root_cnode = gcas_read(root, trie.ctx(), &guard)
        .get()
        .cnode()
        .expect("the root is never tombed");
    assert!(root_cnode.is_empty(), "no holder keeps a dead set");
    assert_eq!(full.len(), 1_200, "the snapshot kept every pair");
}

fn forced(id: &str, hash: u64) -> hamt::Leaf<()> {
    hamt::Leaf {
        hash,
        key: SmolStr::from(id),
        value: (),
    }
}

#[test]
fn shared_sets_keep_colliding_and_near_hashes_apart() {
    use super::idset::{self, SetWrite};
    const H: u64 = 0x9E37_79B9_7F4A_7C15;
    // Three ids with one hash (a collision list below every level), two that
    // part only at the last bits, one that parts at the first level.
    let ids = [
        ("c0", H),
        ("c1", H),
        ("c2", H),
        ("n0", H ^ 1),
        ("n1", H ^ 2),
        ("f0", H ^ (1 << 63)),
    ];
    let trie = CsTrie::new();
    let guard = epoch::pin();
    let ctx = trie.ctx();
    let gen = read_root(&trie.root, false, &guard).gen;
    let held = |set: &INode| {
        let mut found = Vec::new();
        idset::for_each(set, ctx, &guard, |leaf| found.push((leaf.key.to_string(), leaf.hash)));
        found.sort_unstable();
        found
    };
    let (set, count) = idset::build(vec![forced("c0", H), forced("f0", H ^ (1 << 63)), forced("c0", H)], gen);
    assert_eq!(count, 2, "a duplicate is counted once");
    let mut model: BTreeSet<(String, u64)> = [("c0".to_owned(), H), ("f0".to_owned(), H ^ (1 << 63))].into();
    for (id, hash) in ids {
        let added = model.insert((id.to_owned(), hash));
        assert_eq!(
            idset::insert(&set, &SmolStr::from(id), hash, gen, ctx, &guard),
            SetWrite::Done(added),
            "{id}"
        );
        assert!(idset::contains(&set, id, hash, ctx, &guard), "{id}");
        assert_eq!(held(&set), model.iter().cloned().collect::<Vec<_>>());
    }
    assert!(!idset::contains(&set, "c3", H, ctx, &guard), "same hash, other text");
    assert!(
        idset::level_count(&set, ctx, &guard) > idset::LEVELS as usize,
        "the collisions sit below every level"
    );
    let (rebuilt, _) = idset::build(ids.iter().map(|&(id, hash)| forced(id, hash)).collect(), gen);
    assert_eq!(held(&rebuilt), held(&set), "a build holds what the inserts made");
    for (index, (id, hash)) in ids.into_iter().enumerate() {
        assert_eq!(idset::remove(&set, "c3", H, gen, ctx, &guard), SetWrite::Done(false));
        let expected = if index + 1 == ids.len() {
            SetWrite::Emptied
        } else {
            SetWrite::Done(true)
        };
        assert_eq!(idset::remove(&set, id, hash, gen, ctx, &guard), expected, "{id}");
        assert_eq!(
            idset::remove(&set, id, hash, gen, ctx, &guard),
            match expected {
                SetWrite::Emptied => SetWrite::Tombed,
                _ => SetWrite::Done(false),
            }
        );
        model.remove(&(id.to_owned(), hash));
        assert_eq!(held(&set), model.iter().cloned().collect::<Vec<_>>());
        if index == 4 {
            // Only `f0` is left, in the root: every level below was emptied,
            // tombed and compressed away, up the chain.
            assert_eq!(idset::level_count(&set, ctx, &guard), 1);
        }
    }
    assert!(is_tombed(&set, ctx, &guard));
    assert_eq!(
        idset::insert(&set, &SmolStr::from("c0"), H, gen, ctx, &guard),
        SetWrite::Tombed,
        "a tombed set is final"
    );
}

#[test]
fn pruning_finishes_a_removal_whose_compression_stopped_short() {
    use super::idset::{self, SetWrite};
    // `a` and `b` share the chunks of levels 0 and 1 and part at level 2; `c` parts at level 0.
    const A: u64 = 0x9E37_79B9_7F4A_7C15;
    let (b, c) = (A ^ (1 << 50), A ^ (1 << 63));
    let trie = CsTrie::new();
    let guard = epoch::pin();
    let ctx = trie.ctx();
    let gen = read_root(&trie.root, false, &guard).gen;
    let (set, _) = idset::build(vec![forced("a", A), forced("b", b), forced("c", c)], gen);
    assert_eq!(idset::level_count(&set, ctx, &guard), 3, "root, level 1, level 2");
    assert_eq!(idset::remove(&set, "a", A, gen, ctx, &guard), SetWrite::Done(true));
    // `b`'s removal tombs level 2 and is cut short before compressing it: level 1 holds a dead level.
    idset::tomb_level_for_test(&set, b, 2, ctx, &guard);
    assert_eq!(
        idset::prune(&set, c, gen, ctx, &guard),
        SetWrite::Done(false),
        "nothing dead on c's path"
    );
    let mut walks = 0;
    loop {
        walks += 1;
        assert!(walks < 10, "pruning makes progress");
        match idset::prune(&set, b, gen, ctx, &guard) {
            SetWrite::Restart => continue,
            done => {
                assert_eq!(done, SetWrite::Done(false));
                break;
            }
        }
    }
    assert_eq!(
        walks, 3,
        "level 2 out of level 1, then the emptied level 1 out of the root, then clean"
    );
    assert_eq!(idset::level_count(&set, ctx, &guard), 1, "only the root is left");
    assert!(idset::contains(&set, "c", c, ctx, &guard) && !idset::contains(&set, "b", b, ctx, &guard));
    // The same cut-short removal of the last ids leaves a root that holds no id: pruning tombs it.
    let (set, _) = idset::build(vec![forced("a", A), forced("b", b)], gen);
    assert_eq!(idset::remove(&set, "a", A, gen, ctx, &guard), SetWrite::Done(true));
    idset::tomb_level_for_test(&set, b, 2, ctx, &guard);
    let mut outcomes = Vec::new();
    while outcomes.last() != Some(&SetWrite::Tombed) {
        assert!(outcomes.len() < 10, "pruning makes progress: {outcomes:?}");
        outcomes.push(idset::prune(&set, b, gen, ctx, &guard));
    }
    assert_eq!(outcomes, [SetWrite::Restart, SetWrite::Restart, SetWrite::Tombed]);
    assert!(
        is_tombed(&set, ctx, &guard),
        "a set that holds no id is dead, so its holder drops it"
    );
}

#[test]
fn a_bucketed_set_build_makes_the_tree_of_a_sorted_build() {
    // Sizes on both sides of the bucketed build's threshold, with repeated ids, ids whose hashes
    // collide in full (the collision level), share every bucket bit (one crowded bucket), or
    // differ only in the last bucket bit; and the lone id a build of one repeated id makes.
    use super::idset;
    const H: u64 = 0x9E37_79B9_7F4A_7C15;
    let trie = CsTrie::new();
    let guard = epoch::pin();
    let ctx = trie.ctx();
    let gen = read_root(&trie.root, false, &guard).gen;
    let mut rng = crate::rng::Rng(11);
    for size in [2, 3, 100, idset::BUCKETED_MIN - 1, idset::BUCKETED_MIN, 70_000] {
        let mut leaves: Vec<hamt::Leaf<()>> = (0..size)
            .map(|i| hamt::Leaf::new(SmolStr::from(format!("s{i}")), ()))
            .collect();
        for i in 0..size / 7 {
            let again = leaves[rng.below(size)].clone();
            leaves.insert(rng.below(leaves.len()), again);
            if i % 100 == 0 {
                leaves.push(forced(&format!("c{i}"), H));
                leaves.push(forced(&format!("b{i}"), H & (u64::MAX >> 10) | (0x2a << 54) | i as u64));
                leaves.push(forced(&format!("d{i}"), H ^ (1 << 54)));
            }
        }
        let (sorted, sorted_count) = idset::build(leaves.clone(), gen);
        let (bucketed, count) = idset::build_many(leaves.len(), |at| leaves[at].hash, |at| leaves[at].clone(), gen);
        let idset::Built::Set(bucketed) = bucketed else {
            panic!("{size} ids made one")
        };
        assert_eq!(count, sorted_count, "{size}");
        assert_eq!(
            idset::shape(&bucketed, ctx, &guard),
            idset::shape(&sorted, ctx, &guard),
            "{size}"
        );
    }
    for size in [1, 5, idset::BUCKETED_MIN + 5] {
        let leaves = vec![forced("only", H); size];
        let (built, count) = idset::build_many(size, |at| leaves[at].hash, |at| leaves[at].clone(), gen);
        assert!(
            matches!(built, idset::Built::One(id) if id == "only") && count == 1,
            "{size}"
        );
    }
}

#[test]
fn a_subscribe_into_a_shared_set_copies_one_node_however_big_the_set() {
    let trie = CsTrie::new();
    let pair = |i: usize| ("audit.#".to_owned(), format!("subscriber{i}"));
    let small = slots_copied_per_subscribe(&trie, 100..2_100, pair);
    slots_copied_per_subscribe(&trie, 2_100..40_000, pair);
    let large = slots_copied_per_subscribe(&trie, 40_000..42_000, pair);
    // One node of at most w slots, and nothing of the C-node holding the set.
    assert!(
        small <= idset::WAYS && large <= idset::WAYS,
        "{small} and {large} slots per subscribe"
    );
    let _snapshot = trie.snapshot();
    // Renewal copies each level once per snapshot, the first time a writer passes.
    let after_snapshot = slots_copied_per_subscribe(&trie, 42_000..44_000, pair);
    assert!(
        after_snapshot <= idset::WAYS * 3,
        "{after_snapshot} slots per subscribe after a snapshot"
    );
}

#[test]
fn subscribe_many_into_shared_sets_agrees_with_a_model() {
    let patterns = ["", "a", "a.b", "t.x.#", "*.b"];
    for seed in 21..23u64 {
        let mut rng = Rng(seed);
        let trie = CsTrie::new();
        let mut model: BTreeSet<(String, SmolStr)> = BTreeSet::new();
        let mut snapshots = Vec::new();
        for round in 0..30 {
            // A bulk load with duplicates, into sets of every form (empty, one id,
            // a table, shared), then one-pair removals that shrink and empty them.
            let batch: Vec<(String, String)> = (0..rng.below(500))
                .map(|_| {
                    (
                        patterns[rng.below(patterns.len())].to_owned(),
                        format!("id{}", rng.below(300)),
                    )
                })
                .collect();
            let new: BTreeSet<(String, SmolStr)> = (batch.iter())
                .map(|(pattern, id)| (pattern.clone(), SmolStr::from(id)))
                .filter(|pair| !model.contains(pair))
                .collect();
            let added = trie.subscribe_many(batch.iter().map(|(pattern, id)| (pattern.as_str(), id.as_str())));
            assert_eq!(added, new.len(), "round {round}: pairs reported new");
            model.extend(new);
            for _ in 0..rng.below(600) {
                let pair = (
                    patterns[rng.below(patterns.len())].to_owned(),
                    SmolStr::from(format!("id{}", rng.below(300))),
                );
                assert_eq!(
                    trie.unsubscribe(&pair.0, &pair.1),
                    model.remove(&pair),
                    "round {round}: unsubscribe"
                );
            }
            if round % 4 == 0 {
                snapshots.push((round, trie.snapshot(), model.clone()));
            }
        }
        let label = format!("seed {seed}");
        assert_eq!(trie.len(), model.len(), "{label}: len()");
        assert_snapshot_holds(&trie.snapshot(), &model, &label);
        for (round, snapshot, then) in &snapshots {
            assert_snapshot_holds(snapshot, then, &format!("{label}, snapshot after round {round}"));
        }
    }
}
