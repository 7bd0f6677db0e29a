//! Bulk subscribe: many pairs with one GCAS per C-node they touch.
//!
//! # Why
//!
//! A one-pair `subscribe` walks from the root and GCASes the C-node it
//! changes, path-copying that C-node's HAMT. Loading n pairs that way costs n
//! GCASes on the same few top nodes and n path copies of their tables. Here
//! the pairs are grouped by word, level by level, so each C-node is changed
//! once for all the pairs that pass through it.
//!
//! # How
//!
//! A work item is an I-node of the current generation plus the pairs whose
//! pattern leads through it. For each item:
//!
//! 1. Read its C-node and group the pairs by their next word (a sort on the
//!    word's hash, text on ties).
//! 2. For each group, compute the new branch. Pairs whose pattern ends here
//!    join its subscriber set. Pairs that go deeper either go into a
//!    brand-new subtree built offline when the branch has no live child (no
//!    other thread can see it until it is published, so it is built by plain
//!    mutation), or are queued as a work item for the existing child (renewed
//!    into the current generation first if it is older, as a one-pair writer
//!    would renew it).
//! 3. Propose the new C-node (its literal table changed by one in-place batch
//!    insert, [`Hamt::insert_many`]) with one GCAS.
//! 4. If the GCAS commits, the queued children are processed next. If it
//!    fails (a concurrent write, or a snapshot moved the generation) it is
//!    retried from a fresh read a few times; after that, or when the node
//!    turns out to be tombed, the item's pairs take the one-pair path, which
//!    handles every such case. So the fast path never has to be clever about
//!    contention; it only has to be right when it commits.
//!
//! # Concurrency contract
//!
//! Each pair is added exactly once, at the linearization point of the GCAS
//! that publishes it (or of its one-pair subscribe). The call as a whole is
//! not one linearizable step: concurrent readers can see some pairs of the
//! call before others. The count returned is of pairs that were new.

use std::cmp::Ordering as CmpOrdering;
use std::sync::Arc;

use hashbrown::HashMap;

use super::gcas::{gcas, gcas_read, read_root};
use super::hamt::hash_word;
use super::node::{Branch, CNode, Generation, INode, MainKind, MainNode, SubscriberSet};
use super::sync::epoch::{self, Guard};
use super::{help_reclaim, CsTrie};
use crate::topic::{split_words, PatternWord};

/// Patterns longer than this (in words) take the one-pair path, which is
/// iterative; the offline subtree builder recurses once per word.
const MAX_BULK_WORDS: usize = 64;
/// GCAS attempts on one C-node before its pairs take the one-pair path.
const ATTEMPTS: usize = 3;

/// One pair: its pattern's words are `words[range]` of the batch.
struct Item {
    pattern_index: usize,
    words: std::ops::Range<usize>,
    subscriber: Arc<str>,
}

/// The pairs of one call, parsed once.
struct Batch<'a> {
    patterns: Vec<&'a str>,
    words: Vec<PatternWord<'a>>,
    items: Vec<Item>,
}

impl<'a> Batch<'a> {
    fn word(&self, item: u32, depth: usize) -> Option<PatternWord<'a>> {
        let item = &self.items[item as usize];
        let at = item.words.start + depth;
        (at < item.words.end).then(|| self.words[at])
    }

    fn len_of(&self, item: u32) -> usize {
        self.items[item as usize].words.len()
    }
}

fn word_hash(word: PatternWord<'_>) -> u64 {
    match word {
        PatternWord::Literal(literal) => hash_word(literal),
        PatternWord::Star => 0,
        PatternWord::Hash => 1,
    }
}

fn word_order(left: PatternWord<'_>, right: PatternWord<'_>) -> CmpOrdering {
    let rank = |word: PatternWord<'_>| match word {
        PatternWord::Literal(_) => 0,
        PatternWord::Star => 1,
        PatternWord::Hash => 2,
    };
    match (left, right) {
        (PatternWord::Literal(left), PatternWord::Literal(right)) => left.cmp(right),
        _ => rank(left).cmp(&rank(right)),
    }
}

/// `items` (all at least `depth + 1` words long) sorted so that equal words at
/// `depth` are contiguous; returns the groups as `(word, range)`.
fn group_by_word<'a>(
    batch: &Batch<'a>,
    items: &mut [u32],
    depth: usize,
) -> Vec<(PatternWord<'a>, std::ops::Range<usize>)> {
    let word = |item: u32| batch.word(item, depth).expect("items go deeper than depth");
    let mut keyed: Vec<(u64, u32)> = items.iter().map(|&item| (word_hash(word(item)), item)).collect();
    keyed.sort_unstable_by(|(left_hash, left), (right_hash, right)| {
        left_hash
            .cmp(right_hash)
            .then_with(|| word_order(word(*left), word(*right)))
    });
    for (slot, (_, item)) in items.iter_mut().zip(&keyed) {
        *slot = *item;
    }
    let mut groups = Vec::new();
    let mut start = 0;
    while start < items.len() {
        let first = word(items[start]);
        let mut end = start + 1;
        while end < items.len() && word(items[end]) == first {
            end += 1;
        }
        groups.push((first, start..end));
        start = end;
    }
    groups
}

/// `set` plus every subscriber of `items`; also returns how many were new.
fn with_all(set: &SubscriberSet, batch: &Batch<'_>, items: &[u32]) -> (SubscriberSet, usize) {
    let ids = items.iter().map(|&item| &batch.items[item as usize].subscriber);
    set.with_many(ids)
}

/// A new, unpublished subtree holding `items` (each at least `depth + 1`
/// words long) below depth `depth`, and how many distinct pairs it holds.
fn build_fresh(batch: &Batch<'_>, items: &mut [u32], depth: usize, gen: Generation) -> (Arc<INode>, usize) {
    if let [item] = items {
        return (build_chain(batch, *item, depth, gen), 1);
    }
    let mut cnode = CNode::default();
    let mut literals: Vec<(Arc<str>, Branch)> = Vec::new();
    let mut added = 0;
    for (word, range) in group_by_word(batch, items, depth) {
        let group = &mut items[range];
        // Those that end at this word first, then those that go deeper.
        group.sort_unstable_by_key(|&item| batch.len_of(item) > depth + 1);
        let enders = group
            .iter()
            .take_while(|&&item| batch.len_of(item) == depth + 1)
            .count();
        let (subscribers, new) = with_all(&SubscriberSet::default(), batch, &group[..enders]);
        added += new;
        let child = match &mut group[enders..] {
            [] => None,
            deeper => {
                let (child, new) = build_fresh(batch, deeper, depth + 1, gen);
                added += new;
                Some(child)
            }
        };
        let branch = Branch { subscribers, child };
        match word {
            PatternWord::Literal(literal) => literals.push((Arc::from(literal), branch)),
            PatternWord::Star => cnode.star = Some(branch),
            PatternWord::Hash => cnode.hash = Some(branch),
        }
    }
    cnode.literals = cnode.literals.insert_many(literals).0;
    (INode::new(gen, MainNode::committed(MainKind::Branches(cnode))), added)
}

/// [`build_fresh`] of a single pair: one C-node per word, built from the
/// last word up (most subtrees of a wide node hold one pattern, and this
/// allocates nothing but the nodes themselves).
fn build_chain(batch: &Batch<'_>, item: u32, depth: usize, gen: Generation) -> Arc<INode> {
    let len = batch.len_of(item);
    let mut below: Option<Arc<INode>> = None;
    for at in (depth..len).rev() {
        let subscribers = if at + 1 == len {
            SubscriberSet::single(batch.items[item as usize].subscriber.clone())
        } else {
            SubscriberSet::Empty
        };
        let branch = Branch {
            subscribers,
            child: below.take(),
        };
        let mut cnode = CNode::default();
        match batch.word(item, at).expect("at < len") {
            PatternWord::Literal(literal) => cnode.literals = cnode.literals.insert(Arc::from(literal), branch),
            PatternWord::Star => cnode.star = Some(branch),
            PatternWord::Hash => cnode.hash = Some(branch),
        }
        below = Some(INode::new(gen, MainNode::committed(MainKind::Branches(cnode))));
    }
    below.expect("items go deeper than depth")
}

/// What one attempt at a work item did.
enum Outcome {
    /// Committed: pairs added here, and the children to visit next.
    Committed(usize, Vec<(Arc<INode>, usize, Vec<u32>)>),
    /// Lost a race: read again and retry.
    Retry,
    /// Not for the fast path (tombed, or the generation moved): one pair at a time.
    OnePairAtATime,
}

impl CsTrie {
    /// Subscribe every pair; returns how many were new. Much faster than one
    /// `subscribe` per pair when many pairs share nodes (see the module docs
    /// of `bulk_load.rs`, including what is and is not atomic).
    pub fn subscribe_many<'a>(&self, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> usize {
        let mut batch = Batch {
            patterns: Vec::new(),
            words: Vec::new(),
            items: Vec::new(),
        };
        let pairs = pairs.into_iter();
        let expected = match pairs.size_hint() {
            (_, Some(high)) => high,
            (low, None) => low,
        };
        batch.patterns.reserve(expected);
        batch.items.reserve(expected);
        // One shared Arc per distinct subscriber text.
        let mut interned: HashMap<&'a str, Arc<str>> = HashMap::with_capacity(expected);
        let mut slow: Vec<usize> = Vec::new();
        for (pattern, subscriber) in pairs {
            let start = batch.words.len();
            batch
                .words
                .extend(split_words(pattern).into_iter().map(PatternWord::parse));
            let subscriber = interned
                .entry(subscriber)
                .or_insert_with(|| Arc::from(subscriber))
                .clone();
            if batch.words.len() - start > MAX_BULK_WORDS {
                batch.words.truncate(start);
                slow.push(batch.patterns.len());
            }
            batch.items.push(Item {
                pattern_index: batch.patterns.len(),
                words: start..batch.words.len(),
                subscriber,
            });
            batch.patterns.push(pattern);
        }
        let mut added = 0;
        let mut one_by_one: Vec<u32> = slow.iter().map(|&index| index as u32).collect();
        let fast: Vec<u32> = {
            let mut is_slow = vec![false; batch.items.len()];
            slow.iter().for_each(|&index| is_slow[index] = true);
            (0..batch.items.len() as u32)
                .filter(|&item| !is_slow[item as usize])
                .collect()
        };
        if !fast.is_empty() {
            let guard = epoch::pin();
            let mut work = vec![(self.root_arc(&guard), 0usize, fast)];
            while let Some((inode, depth, mut items)) = work.pop() {
                let mut attempts = 0;
                loop {
                    match self.apply_at(&batch, &inode, depth, &mut items, &guard) {
                        Outcome::Committed(new, children) => {
                            added += new;
                            work.extend(children);
                            break;
                        }
                        Outcome::Retry if attempts + 1 < ATTEMPTS => attempts += 1,
                        Outcome::Retry | Outcome::OnePairAtATime => {
                            one_by_one.extend(items);
                            break;
                        }
                    }
                }
            }
            help_reclaim(&guard);
        }
        self.pairs.fetch_add(added as isize, super::sync::Ordering::Relaxed);
        for item in one_by_one {
            let item = &batch.items[item as usize];
            if self.subscribe(batch.patterns[item.pattern_index], &item.subscriber) {
                added += 1;
            }
        }
        added
    }

    /// One attempt at changing `inode`'s C-node for `items` (see module docs).
    fn apply_at(&self, batch: &Batch<'_>, inode: &INode, depth: usize, items: &mut [u32], guard: &Guard) -> Outcome {
        let ctx = self.ctx();
        let gen = inode.gen;
        if read_root(&self.root, false, guard).gen != gen {
            return Outcome::OnePairAtATime;
        }
        let main = gcas_read(inode, ctx, guard);
        let Some(cnode) = main.get().cnode() else {
            return Outcome::OnePairAtATime;
        };
        // Only the root holds the empty pattern; every other item goes deeper.
        items.sort_unstable_by_key(|&item| batch.len_of(item) > depth);
        let at_root = items.iter().take_while(|&&item| batch.len_of(item) == depth).count();
        let mut new = cnode.clone();
        let mut added = 0;
        if at_root > 0 {
            let (set, count) = with_all(&cnode.empty_pattern, batch, &items[..at_root]);
            new.empty_pattern = set;
            added += count;
        }
        let mut changed = added > 0;
        let mut children = Vec::new();
        let mut literals: Vec<(Arc<str>, Branch)> = Vec::new();
        let deeper = &mut items[at_root..];
        for (word, range) in group_by_word(batch, deeper, depth) {
            let group = &mut deeper[range];
            group.sort_unstable_by_key(|&item| batch.len_of(item) > depth + 1);
            let enders = group
                .iter()
                .take_while(|&&item| batch.len_of(item) == depth + 1)
                .count();
            let existing = cnode.branch(word);
            let held = existing.map(|branch| &branch.subscribers).cloned().unwrap_or_default();
            let (subscribers, count) = with_all(&held, batch, &group[..enders]);
            added += count;
            let live_child = existing
                .and_then(|branch| branch.child.as_ref())
                .filter(|child| gcas_read(child, ctx, guard).get().cnode().is_some());
            let child = match (&mut group[enders..], live_child) {
                ([], _) => existing.and_then(|branch| branch.child.clone()),
                (deeper, Some(child)) => {
                    let child = if child.gen == gen {
                        child.clone()
                    } else {
                        // Old generation: its main node is final (see "Generation renewal").
                        INode::new(gen, gcas_read(child, ctx, guard).to_arc())
                    };
                    children.push((child.clone(), depth + 1, deeper.to_vec()));
                    Some(child)
                }
                (deeper, None) => {
                    let (child, count) = build_fresh(batch, deeper, depth + 1, gen);
                    added += count;
                    Some(child)
                }
            };
            let unchanged = count == 0
                && match (existing.and_then(|branch| branch.child.as_ref()), &child) {
                    (Some(old), Some(new)) => Arc::ptr_eq(old, new),
                    (None, None) => true,
                    _ => false,
                };
            if unchanged {
                continue;
            }
            changed = true;
            let branch = Branch { subscribers, child };
            match word {
                PatternWord::Literal(literal) => literals.push((Arc::from(literal), branch)),
                PatternWord::Star => new.star = Some(branch),
                PatternWord::Hash => new.hash = Some(branch),
            }
        }
        if !changed {
            return Outcome::Committed(0, children);
        }
        new.literals = new.literals.insert_many(literals).0;
        if gcas(inode, main, MainKind::Branches(new), ctx, guard) {
            Outcome::Committed(added, children)
        } else {
            Outcome::Retry
        }
    }
}
