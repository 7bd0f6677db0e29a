//! Publishes that cost what changed: a large base matcher plus a small delta of the changes since it,
//! matched together, and the builder that keeps the delta current.
//!
//! # Why
//!
//! Freezing ten million subscriptions takes seconds, and so does every process's first read of them.
//! A change of ten thousand rows should cost what ten thousand rows cost. So a published version is
//! either a whole matcher (a *base*) or a base plus a *delta* ([`crate::layout`], "Deltas"): a
//! frozen matcher of the pairs added since the base, plus the base's pairs removed since (as base
//! node and subscriber ids, the *hidden* pairs), bound to its base by [`base_id`]. A process that
//! holds the base maps only the delta for each new version; the driver freezes only the delta.
//!
//! # Lookup ([`Layered`])
//!
//! `lookup(key)` = (the base's matches minus the hidden pairs) ∪ the delta's matches, by subscriber
//! text. The base's walk drops a hidden pair where it collects a node's subscribers (a binary search
//! of the hidden list, only when it is non-empty), so a subscriber hidden under one pattern still
//! matches through another. Both walks return their ids in ascending text order, so the union is a
//! merge: O(matches) on top of the two walks. Ids name the base's subscribers below
//! `base.subscriber_count()` and the delta's (offset by it) above, so a batch spreads results and
//! reads texts as it does for one matcher.
//!
//! Exact when, as [`DeltaBuilder`] guarantees, the delta adds only pairs the base lacks and hides
//! only pairs the base holds: then the layered pair set is the base's minus the hidden plus the
//! delta's, and `len()` counts it.
//!
//! # The builder ([`DeltaBuilder`])
//!
//! It holds the latest state of every pair changed since the base, each with the table version of its
//! last change and where the base holds it (resolved once, when the change arrives: a walk of the
//! pattern's words through the base and a binary search of its subscribers). [`DeltaBuilder::freeze`]
//! turns the pairs whose state differs from the base's into a delta: O(changed pairs), never O(base).
//! [`DeltaBuilder::rebase`] moves it onto a newer base frozen at some version: changes up to that
//! version are in the new base, the rest are resolved against it again.

use std::sync::Arc;

use hashbrown::HashMap;

use crate::errors::{BuildError, NativeError};
use crate::frozen::{Builder, FrozenMatcher, Scratch};
use crate::layout::{base_id, NONE};
use crate::topic::{split_words, PatternWord};

/// A base and a delta of it, matched as one (see the module docs).
#[derive(Debug, Clone)]
pub struct Layered {
    base: Arc<FrozenMatcher>,
    delta: Arc<FrozenMatcher>,
    /// `base.subscriber_count()`: the first id of the delta's subscribers.
    offset: u32,
}

/// Lookup buffers of a [`Layered`] matcher: one [`Scratch`] per layer (each memo belongs to one
/// matcher) and the merged result.
#[derive(Debug, Default)]
pub struct LayeredScratch {
    base: Scratch,
    delta: Scratch,
    merged: Vec<u32>,
}

impl LayeredScratch {
    /// The base layer's buffers (what a batch's lookahead warms).
    pub(crate) fn base_mut(&mut self) -> &mut Scratch {
        &mut self.base
    }

    /// Buffers for a batch of about `keys` lookups, with a memo per layer.
    pub fn for_batch(keys: usize) -> Self {
        LayeredScratch {
            base: Scratch::for_batch(keys),
            delta: Scratch::for_batch(keys),
            merged: Vec::new(),
        }
    }
}

impl Layered {
    /// `delta` over `base`; refused unless the delta names this base and its hidden pairs are pairs the
    /// base holds.
    pub fn new(base: Arc<FrozenMatcher>, delta: Arc<FrozenMatcher>) -> Result<Self, NativeError> {
        if base.base != 0 || !base.hidden.is_empty() {
            return Err(NativeError::format("the base of a delta is itself a delta"));
        }
        if delta.base != base_id(base.bytes()) {
            return Err(NativeError::format(
                "the delta was built for another base (its base id does not match)",
            ));
        }
        for &pair in delta.hidden.iter() {
            let (node, subscriber) = ((pair >> 32) as u32, pair as u32);
            if !base.holds_at(node, subscriber) {
                return Err(NativeError::format(format!(
                    "the delta hides a pair its base does not hold (node {node}, subscriber {subscriber})"
                )));
            }
        }
        let offset = u32::try_from(base.subscriber_count()).map_err(|_| NativeError::TooLarge)?;
        if offset as u64 + delta.subscriber_count() as u64 >= u64::from(NONE - 1) {
            return Err(NativeError::TooLarge);
        }
        Ok(Layered { base, delta, offset })
    }

    pub fn base(&self) -> &Arc<FrozenMatcher> {
        &self.base
    }

    pub fn delta(&self) -> &Arc<FrozenMatcher> {
        &self.delta
    }

    /// Pairs of the layered set.
    pub fn len(&self) -> usize {
        self.base.len() - self.delta.hidden.len() + self.delta.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Text of id `id` (ids from [`Layered::lookup_ids`]).
    pub fn subscriber(&self, id: u32) -> &str {
        if id < self.offset {
            self.base.subscriber(id)
        } else {
            self.delta.subscriber(id - self.offset)
        }
    }

    /// Matching subscriber ids for `key`, in ascending text order and unique by text.
    pub fn lookup_ids<'s>(&self, key: &str, scratch: &'s mut LayeredScratch) -> &'s [u32] {
        let LayeredScratch { base, delta, merged } = scratch;
        let from_base = self.base.lookup_ids_hiding(key, base, &self.delta.hidden);
        let from_delta = self.delta.lookup_ids(key, delta);
        merged.clear();
        let (mut b, mut d) = (0, 0);
        while b < from_base.len() && d < from_delta.len() {
            let (in_base, in_delta) = (from_base[b], from_delta[d]);
            match self.base.subscriber(in_base).cmp(self.delta.subscriber(in_delta)) {
                std::cmp::Ordering::Less => {
                    merged.push(in_base);
                    b += 1;
                }
                std::cmp::Ordering::Greater => {
                    merged.push(self.offset + in_delta);
                    d += 1;
                }
                std::cmp::Ordering::Equal => {
                    merged.push(in_base);
                    b += 1;
                    d += 1;
                }
            }
        }
        merged.extend_from_slice(&from_base[b..]);
        merged.extend(from_delta[d..].iter().map(|&id| self.offset + id));
        merged
    }

    /// `(node, key position)` states the last lookup of `scratch` visited, in both layers.
    pub fn states_visited(scratch: &LayeredScratch) -> usize {
        scratch.base.states_visited() + scratch.delta.states_visited()
    }

    /// Matching subscribers for `key`, in ascending text order.
    pub fn lookup(&self, key: &str) -> Vec<&str> {
        let mut scratch = LayeredScratch::default();
        let ids = self.lookup_ids(key, &mut scratch).to_vec();
        ids.into_iter().map(|id| self.subscriber(id)).collect()
    }

    /// Every (pattern, subscriber) pair of the layered set.
    pub fn subscriptions(&self) -> Vec<(String, &str)> {
        let hidden = &self.delta.hidden;
        let mut pairs = self
            .base
            .subscriptions_where(|node, id| hidden.binary_search(&(u64::from(node) << 32 | u64::from(id))).is_err());
        pairs.extend(self.delta.subscriptions());
        pairs
    }
}

/// Where a base holds a pair: `(node, subscriber id)`.
type Held = Option<(u32, u32)>;

/// The latest change of one pair since the base.
#[derive(Debug, Clone, Copy)]
struct Change {
    active: bool,
    /// The table version of the change.
    version: u64,
    /// Where the base holds the pair, if it does.
    held: Held,
}

/// The changes since a base, as a delta (see the module docs).
#[derive(Debug)]
pub struct DeltaBuilder {
    base: Arc<FrozenMatcher>,
    /// `(pattern, subscriber)` -> its latest change.
    changes: HashMap<(Box<str>, Box<str>), Change>,
}

impl DeltaBuilder {
    /// No changes yet over `base` (which must be a base, not a delta).
    pub fn new(base: Arc<FrozenMatcher>) -> Result<Self, NativeError> {
        if base.base != 0 || !base.hidden.is_empty() {
            return Err(NativeError::format("a delta's base must be a base, not a delta"));
        }
        Ok(DeltaBuilder {
            base,
            changes: HashMap::new(),
        })
    }

    pub fn base(&self) -> &Arc<FrozenMatcher> {
        &self.base
    }

    /// Pairs changed since the base (whether or not their state now differs from it).
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Record that each pair is now subscribed (`active`) or not, as of table `version`. Pairs are
    /// expected to be valid (the caller validated them, as `crate::bulk` does).
    pub fn record<'p>(&mut self, pairs: impl IntoIterator<Item = (&'p str, &'p str)>, active: bool, version: u64) {
        for (pattern, subscriber) in pairs {
            let held = self.base.holds(pattern, subscriber);
            self.changes
                .insert((pattern.into(), subscriber.into()), Change { active, version, held });
        }
    }

    /// Move onto `base`, a base frozen at table version `through`: changes up to it are in the new
    /// base and dropped; the later ones are resolved against it.
    pub fn rebase(&mut self, base: Arc<FrozenMatcher>, through: u64) -> Result<(), NativeError> {
        if base.base != 0 || !base.hidden.is_empty() {
            return Err(NativeError::format("a delta's base must be a base, not a delta"));
        }
        self.changes.retain(|_, change| change.version > through);
        for ((pattern, subscriber), change) in self.changes.iter_mut() {
            change.held = base.holds(pattern, subscriber);
        }
        self.base = base;
        Ok(())
    }

    /// The delta of the changes: the pairs now subscribed that the base lacks, and the base's pairs
    /// now unsubscribed, hidden.
    pub fn freeze(&self) -> Result<FrozenMatcher, BuildError> {
        let mut added: Vec<(&str, &str)> = Vec::new();
        let mut hidden: Vec<u64> = Vec::new();
        for ((pattern, subscriber), change) in &self.changes {
            match (change.active, change.held) {
                (true, None) => added.push((&**pattern, &**subscriber)),
                (false, Some((node, id))) => hidden.push(u64::from(node) << 32 | u64::from(id)),
                _ => {}
            }
        }
        hidden.sort_unstable();
        let mut builder = Builder::with_capacity(added.len());
        builder.add_pairs(added.iter().map(|&(pattern, subscriber)| (pattern, subscriber)))?;
        builder.finish_delta(hidden, base_id(self.base.bytes()))
    }
}

impl FrozenMatcher {
    /// Where this matcher holds `(pattern, subscriber)`: the node its pattern ends at and the
    /// subscriber's id, if it holds the pair.
    pub fn holds(&self, pattern: &str, subscriber: &str) -> Held {
        let mut index = 0u32;
        for word in split_words(pattern) {
            let node = &self.nodes[index as usize];
            let next = match PatternWord::parse(word) {
                PatternWord::Star => node.star,
                PatternWord::Hash => node.hash,
                PatternWord::Literal(text) => match self.words.find(text) {
                    Some(word) => self.literal_child_uncached(index, node, word).unwrap_or(NONE),
                    None => NONE,
                },
            };
            if next == NONE {
                return None;
            }
            index = next;
        }
        let id = self.subscribers.find(subscriber)?;
        self.holds_at(index, id).then_some((index, id))
    }

    /// Whether node `node` (any number) holds subscriber id `id`.
    pub fn holds_at(&self, node: u32, id: u32) -> bool {
        let Some(node) = self.nodes.get(node as usize) else {
            return false;
        };
        let start = node.subs_start as usize;
        self.subscriber_ids[start..start + node.subs_len as usize]
            .binary_search(&id)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::topic::matches;
    use std::collections::BTreeSet;

    type Pairs = BTreeSet<(String, String)>;

    fn oracle(pairs: &Pairs, key: &str) -> Vec<String> {
        let found: BTreeSet<String> = pairs
            .iter()
            .filter(|(p, _)| matches(p, key))
            .map(|(_, s)| s.clone())
            .collect();
        found.into_iter().collect()
    }

    fn frozen(pairs: &Pairs) -> Arc<FrozenMatcher> {
        Arc::new(FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap())
    }

    fn texts(layered: &Layered, key: &str) -> Vec<String> {
        layered.lookup(key).into_iter().map(String::from).collect()
    }

    /// Random changes on a random base, applied in several versions and rebased halfway: the layered
    /// matcher agrees with a model of the whole pair set after every version.
    #[test]
    fn base_plus_delta_matches_the_sequential_model() {
        let mut rng = Rng(0xde17a);
        for _ in 0..60 {
            let pool: Vec<(String, String)> = (0..30)
                .map(|_| (rng.topic(true), format!("s{}", rng.below(6))))
                .collect();
            let mut model: Pairs = pool.iter().filter(|_| rng.below(2) == 0).cloned().collect();
            let mut builder = DeltaBuilder::new(frozen(&model)).unwrap();
            for version in 1..=6u64 {
                // A change feed gives each changed pair once, with its final state in the version.
                let mut last: std::collections::BTreeMap<(String, String), bool> = Default::default();
                for _ in 0..rng.below(8) {
                    last.insert(pool[rng.below(pool.len())].clone(), rng.below(2) == 0);
                }
                let pairs_of = |active: bool| {
                    last.iter()
                        .filter(move |entry| *entry.1 == active)
                        .map(|((p, s), _)| (p.as_str(), s.as_str()))
                };
                builder.record(pairs_of(false), false, version);
                builder.record(pairs_of(true), true, version);
                for (pair, &active) in &last {
                    if active {
                        model.insert(pair.clone());
                    } else {
                        model.remove(pair);
                    }
                }
                if version == 3 {
                    builder.rebase(frozen(&model), version).unwrap();
                }
                let delta = Arc::new(builder.freeze().unwrap());
                let layered = Layered::new(builder.base().clone(), delta).unwrap();
                assert_eq!(layered.len(), model.len(), "version {version}");
                let mut held: Vec<(String, String)> = layered
                    .subscriptions()
                    .into_iter()
                    .map(|(p, s)| (p, s.to_owned()))
                    .collect();
                held.sort();
                assert_eq!(held, model.iter().cloned().collect::<Vec<_>>());
                for _ in 0..20 {
                    let key = rng.topic(false);
                    assert_eq!(texts(&layered, &key), oracle(&model, &key), "{key:?} at {version}");
                }
            }
        }
    }

    #[test]
    fn a_hidden_pair_still_matches_through_another_pattern() {
        let base: Pairs = [("a.*", "s"), ("a.#", "s"), ("a.b", "t")]
            .iter()
            .map(|&(p, s)| (p.to_owned(), s.to_owned()))
            .collect();
        let mut builder = DeltaBuilder::new(frozen(&base)).unwrap();
        builder.record([("a.*", "s"), ("a.b", "t")], false, 1);
        builder.record([("a.b", "u")], true, 1);
        let layered = Layered::new(builder.base().clone(), Arc::new(builder.freeze().unwrap())).unwrap();
        assert_eq!(layered.lookup("a.b"), ["s", "u"]);
        assert_eq!(layered.lookup("a.b.c"), ["s"]);
        assert_eq!(layered.len(), 2);
    }

    #[test]
    fn a_delta_is_refused_over_another_base() {
        let one = frozen(&[("a".to_owned(), "s".to_owned())].into_iter().collect());
        let other = frozen(&[("b".to_owned(), "s".to_owned())].into_iter().collect());
        let mut builder = DeltaBuilder::new(one.clone()).unwrap();
        builder.record([("a", "s")], false, 1);
        let delta = Arc::new(builder.freeze().unwrap());
        assert!(Layered::new(one.clone(), delta.clone()).is_ok());
        assert!(
            matches!(Layered::new(other, delta.clone()), Err(NativeError::Format(m)) if m.contains("another base"))
        );
        assert!(Layered::new(delta.clone(), delta).is_err(), "a delta is no base");
        // A delta survives its bytes: decoded, it layers the same.
        let decoded = Arc::new(crate::codec::decode(&crate::codec::encode(&builder.freeze().unwrap())).unwrap());
        assert!(Layered::new(one, decoded).unwrap().lookup("a").is_empty());
    }
}
