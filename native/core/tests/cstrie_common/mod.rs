//! Helpers shared by the CS-trie integration tests (included with `mod`).

#![allow(dead_code)]

pub mod history;

use spark_topic_router_core::cstrie::SmolStr;
use std::collections::BTreeSet;

use spark_topic_router_core::cstrie::Snapshot;
use spark_topic_router_core::topic::{pattern_words, split_words, words_match};

pub use spark_topic_router_core::rng::Rng;

/// Words shared by every thread, so all threads contend on the same nodes.
pub const PATTERN_ALPHABET: &[&str] = &["a", "b", "c", "", "*", "#"];
pub const KEY_ALPHABET: &[&str] = &["a", "b", "c", ""];

pub type Pair = (String, SmolStr);

/// Subscribers among `pairs` whose pattern matches `key`, via the oracle.
pub fn oracle_lookup<'a>(pairs: impl IntoIterator<Item = &'a Pair>, key: &str) -> Vec<SmolStr> {
    let key_words = split_words(key);
    let matched: BTreeSet<SmolStr> = pairs
        .into_iter()
        .filter(|(pattern, _)| words_match(&pattern_words(pattern), &key_words))
        .map(|(_, subscriber)| subscriber.clone())
        .collect();
    matched.into_iter().collect()
}

/// A snapshot must agree with itself: its lookups equal the oracle applied to
/// its own `subscriptions()`.
pub fn assert_snapshot_self_consistent(snapshot: &Snapshot, rng: &mut Rng, probes: usize) {
    let pairs = snapshot.subscriptions();
    assert_eq!(snapshot.len(), pairs.len());
    for _ in 0..probes {
        let key = rng.text(KEY_ALPHABET, 4);
        assert_eq!(
            snapshot.lookup(&key),
            oracle_lookup(&pairs, &key),
            "snapshot lookup of {key:?}"
        );
    }
}
