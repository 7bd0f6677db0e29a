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
//! The call first splits every pattern once and hashes every literal word
//! once (the hash the HAMTs index by). A work item is then an I-node of the
//! current generation plus the pairs whose pattern leads through it. For
//! each item:
//!
//! 1. Read its C-node and group the pairs by their next word: a sort of
//!    `(word hash, pair)` integers; only a run of equal hashes with different
//!    words (a 64-bit collision) is compared by text.
//! 2. For each group, compute the new branch. Pairs whose pattern ends here
//!    join its subscriber set (a new set is built once from all its ids,
//!    [`idset::build_many`]; a shared set takes them one at a time).
//!    Pairs that go deeper, when the branch has no live child, become a tail
//!    if they are all one pattern, else a brand-new subtree built offline (no
//!    other thread can see it until it is published, so it is built by plain
//!    construction, with tails wherever a path has one pattern). An existing
//!    tail gains the subscribers of its own pattern, or is expanded into an
//!    I-node (as a one-pair writer would expand it) that is queued with the
//!    pairs. An existing I-node child is queued as a work item (renewed into
//!    the current generation first if it is older, as a one-pair writer
//!    would renew it).
//! 3. Propose the new C-node (its literal table changed by one batch insert)
//!    with one GCAS.
//! 4. If the GCAS commits, the queued children are processed next. If it
//!    fails (a concurrent write, or a snapshot moved the generation) it is
//!    retried from a fresh read a few times; after that, or when the node
//!    turns out to be tombed, the item's pairs take the one-pair path, which
//!    handles every such case. So the fast path never has to be clever about
//!    contention; it only has to be right when it commits.
//!
//! # Cost
//!
//! For n pairs of k words: O(n k) to split and hash, O(n log n) integer sorts
//! per level, and each touched C-node copied once, with its tables merged in
//! one pass (O(slots touched), not O(n log n) path copies). Nothing is
//! allocated per pair beyond the trie's own nodes: subscriber ids of up to 23
//! bytes are stored inline ([`SmolStr`]).
//!
//! [`idset::build_many`]: super::idset::build_many
//!
//! # Concurrency contract
//!
//! Each pair is added exactly once, at the linearization point of the GCAS
//! that publishes it (or of its one-pair subscribe). The call as a whole is
//! not one linearizable step: concurrent readers can see some pairs of the
//! call before others. The count returned is of pairs that were new.

use std::sync::Arc;

use super::gcas::{gcas, gcas_read, read_root};
use super::hamt::{hash_word, prefetch, smol, sort_by_hash_key, Leaf, SmolStr};
use super::idset;
use super::node::{Branch, CNode, Child, Generation, INode, MainKind, MainNode, SubscriberSet};
use super::scratch::scratch_vec;
use super::sync::epoch::{self, Guard};
use super::{help_reclaim, CsTrie};
use crate::topic::{PatternWord, SEPARATOR};

/// Patterns longer than this (in words) take the one-pair path, which is
/// iterative; the offline subtree builder recurses once per word.
const MAX_BULK_WORDS: usize = 64;
/// GCAS attempts on one C-node before its pairs take the one-pair path.
const ATTEMPTS: usize = 3;
/// How many groups ahead the walks prefetch the pairs they will read: the
/// pairs are visited in hash order, so without it each one is a cache miss.
const AHEAD: usize = 8;

/// One pair: its pattern's words are `words[start..end]` of the batch.
struct Item {
    start: u32,
    end: u32,
    /// `hash_word` of the subscriber.
    subscriber_hash: u64,
    /// Made once, in input order: the walk visits pairs in hash order, and
    /// reading each text from the caller's buffer then cost a cache miss.
    subscriber: SmolStr,
}

/// One word of a pattern, parsed once.
struct Word<'a> {
    /// [`word_hash`] of the word.
    hash: u64,
    /// Its text, borrowed from the caller's pattern (no copy per word: a
    /// million-pair load made 24-byte copies of four million words only to
    /// read them): `*` and `#` are the wildcards (never literals, by the grammar).
    text: &'a str,
}

/// The pairs of one call, parsed once.
struct Batch<'a> {
    patterns: Vec<&'a str>,
    words: Vec<Word<'a>>,
    items: Vec<Item>,
    /// Whether any pattern is the empty one (only the root holds it).
    has_empty_pattern: bool,
}

impl<'a> Batch<'a> {
    #[inline]
    fn at(&self, item: u32, depth: usize) -> &Word<'a> {
        &self.words[self.items[item as usize].start as usize + depth]
    }

    #[inline]
    fn word(&self, item: u32, depth: usize) -> PatternWord<'_> {
        PatternWord::parse(self.at(item, depth).text)
    }

    #[inline]
    fn len_of(&self, item: u32) -> usize {
        let item = &self.items[item as usize];
        (item.end - item.start) as usize
    }

    /// The words of `item` from `depth` on, joined: a tail's text. The words
    /// are slices of one parse of the pattern's text, the first at its start,
    /// so this is the pattern from the byte where word `depth` starts: one
    /// copy, not one per word and separator.
    fn suffix(&self, item: u32, depth: usize) -> SmolStr {
        let words = &self.words[self.items[item as usize].start as usize..];
        // Both are slices of the text that was parsed (an equal earlier row's, when consecutive rows repeat a
        // pattern), so the difference is a byte offset into it, and so into this row's equal text.
        let offset = (words[depth].text.as_ptr() as usize).wrapping_sub(words[0].text.as_ptr() as usize);
        smol(&self.patterns[item as usize][offset..])
    }
}

/// The grouping key of a pattern word: the HAMT hash of a literal, and two
/// fixed values for the wildcards (their words compare unequal to any
/// literal, so a clash only costs a text comparison).
fn word_hash(word: PatternWord<'_>) -> u64 {
    match word {
        PatternWord::Literal(literal) => hash_word(literal),
        PatternWord::Star => 0,
        PatternWord::Hash => 1,
    }
}

/// A total order on pattern words, for the rare equal-hash runs.
fn word_rank(word: PatternWord<'_>) -> (u8, &str) {
    match word {
        PatternWord::Literal(literal) => (0, literal),
        PatternWord::Star => (1, ""),
        PatternWord::Hash => (2, ""),
    }
}

/// The items of one word at some depth: `items[start..end]` after
/// [`group_by_word`]. 24 bytes: a wide load makes one per tenant, and with the
/// word itself (a `PatternWord`) and a `Range<usize>` a million groups were
/// 56 MB of scratch to fault in and stream through the cache.
struct Group {
    /// [`word_hash`] of the word.
    hash: u64,
    /// The word: `batch.words[word]` (of one of the group's items).
    word: u32,
    start: u32,
    end: u32,
    /// Every item of the group is one parse of one pattern (consecutive rows
    /// of a pattern share its words): they all have its length and its words,
    /// so a partition by length or a check for one pattern needs to read only
    /// the first. A million subscribers of `audit.#` then cost no pass over
    /// the pairs beyond the one that collects their ids.
    one_parse: bool,
}

impl Group {
    fn new(hash: u64, word: u32, range: std::ops::Range<usize>, one_parse: bool) -> Self {
        // Items are indexed by u32 (the batch's `fast` list), so their ranges fit.
        let (start, end) = (range.start as u32, range.end as u32);
        Group {
            hash,
            word,
            start,
            end,
            one_parse,
        }
    }

    fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }

    fn word<'b>(&self, batch: &'b Batch<'_>) -> PatternWord<'b> {
        PatternWord::parse(batch.words[self.word as usize].text)
    }
}

/// `items` (all at least `depth + 1` words long) reordered so that equal words
/// at `depth` are contiguous; returns the groups.
///
/// After the sort the pairs are visited in hash order, all over the batch, so
/// each sort entry carries the index of its word (the entry's padding had room
/// for it) and the loop prefetches the word [`AHEAD`] runs ahead.
fn group_by_word(batch: &Batch<'_>, items: &mut [u32], depth: usize) -> Vec<Group> {
    // Every item one parse (a call of one pattern's subscribers): one group, found by one read-only pass
    // that stops at the first other parse, instead of sorting and scanning keys (three passes and a
    // copy back over a million items of `audit.#`).
    if let Some(&first) = items.first() {
        let start = batch.items[first as usize].start;
        if items.iter().all(|&item| batch.items[item as usize].start == start) {
            let word = start + depth as u32;
            return vec![Group::new(batch.words[word as usize].hash, word, 0..items.len(), true)];
        }
    }
    // (word hash, item, index of the word in `batch.words`)
    let mut keyed: Vec<(u64, u32, u32)> = scratch_vec(items.len());
    keyed.extend(items.iter().map(|&item| {
        let word = batch.items[item as usize].start + depth as u32;
        (batch.words[word as usize].hash, item, word)
    }));
    if !keyed.is_sorted_by_key(|&(hash, _, _)| hash) {
        sort_by_hash_key(&mut keyed, |&(hash, _, _)| hash);
    }
    // At most one group per item: reserved at once (a million groups are not regrown step by step), so the
    // buffer is advised to huge pages with the others.
    let mut groups = scratch_vec(keyed.len());
    let mut start = 0;
    while start < keyed.len() {
        if let Some(&(_, _, ahead)) = keyed.get(start + AHEAD) {
            prefetch(&batch.words[ahead as usize]);
        }
        let hash = keyed[start].0;
        let mut end = start + 1;
        while end < keyed.len() && keyed[end].0 == hash {
            end += 1;
        }
        let run = &mut keyed[start..end];
        let first = &batch.words[run[0].2 as usize];
        // Pairs of one (consecutive, parsed-once) pattern share their words.
        let one_parse = run.iter().all(|&(_, _, word)| word == run[0].2);
        let same = |word: u32| word == run[0].2 || batch.words[word as usize].text == first.text;
        if !one_parse && !run.iter().all(|&(_, _, word)| same(word)) {
            // Different words with one hash: order them by text.
            run.sort_unstable_by(|&(_, left, _), &(_, right, _)| {
                word_rank(batch.word(left, depth)).cmp(&word_rank(batch.word(right, depth)))
            });
            let mut at = start;
            while at < end {
                let word = batch.word(keyed[at].1, depth);
                let mut next = at + 1;
                while next < end && batch.word(keyed[next].1, depth) == word {
                    next += 1;
                }
                groups.push(Group::new(hash, keyed[at].2, at..next, false));
                at = next;
            }
        } else {
            groups.push(Group::new(hash, run[0].2, start..end, one_parse));
        }
        start = end;
    }
    for (slot, &(_, item, _)) in items.iter_mut().zip(&keyed) {
        *slot = item;
    }
    groups
}

/// Ahead of visiting group `at` of `groups` (ranges of `items`, which go at
/// least one word past `depth`), prefetch what the visit will read, in three
/// stages: the first item of the group [`AHEAD`] groups on; the next word and
/// the pattern of the one `AHEAD / 2` on (whose item was prefetched earlier);
/// and that word's text for the one `AHEAD / 4` on.
#[inline]
fn prefetch_groups(batch: &Batch<'_>, items: &[u32], groups: &[Group], at: usize, depth: usize) {
    if let Some(group) = groups.get(at + AHEAD) {
        prefetch_whole(&batch.items[items[group.start as usize] as usize]);
    }
    if let Some(group) = groups.get(at + AHEAD / 2) {
        // The group's own word (its text and hash key the branch).
        prefetch(batch.words.as_ptr().wrapping_add(group.word as usize));
        let index = items[group.start as usize] as usize;
        let item = &batch.items[index];
        prefetch(batch.words.as_ptr().wrapping_add(item.start as usize + depth + 1));
        prefetch(batch.patterns.as_ptr().wrapping_add(index));
    }
    // The text itself, which a tail's suffix and the branch's key copy.
    if let Some(group) = groups.get(at + AHEAD / 4) {
        let item = &batch.items[items[group.start as usize] as usize];
        if let Some(word) = batch.words.get(item.start as usize + depth + 1) {
            prefetch(word.text.as_ptr());
        }
    }
}

/// The items of group `at` of `groups` (ranges of `items` at `depth`), those
/// that end at its word first, and how many end there; what later groups'
/// visits will read is prefetched first.
fn enter_group<'i>(
    batch: &Batch<'_>,
    items: &'i mut [u32],
    groups: &[Group],
    at: usize,
    depth: usize,
) -> (&'i mut [u32], usize) {
    prefetch_groups(batch, items, groups, at, depth);
    let group = &mut items[groups[at].range()];
    let enders = partition_by_length(batch, group, depth + 1, groups[at].one_parse);
    (group, enders)
}

/// Prefetch every cache line of `value`: a 40-byte [`Item`] in an array
/// crosses a line boundary at half the indices, and a prefetch of its first
/// byte alone then left the fields past the boundary to miss (perf put a
/// fifth of a wide load's walk on reading an item's `start`, at offset 32,
/// right after its prefetch). Words (24 bytes) measured no better so.
#[inline]
fn prefetch_whole<T>(value: &T) {
    let first = value as *const T as *const u8;
    prefetch(first);
    prefetch(first.wrapping_add(size_of::<T>() - 1));
}

/// Reorder `items` so that those with exactly `length` words come first;
/// returns how many there are. `one_parse`: see [`Group::one_parse`].
fn partition_by_length(batch: &Batch<'_>, items: &mut [u32], length: usize, one_parse: bool) -> usize {
    if one_parse {
        return match items.first() {
            Some(&first) if batch.len_of(first) == length => items.len(),
            _ => 0,
        };
    }
    let mut first_longer = 0;
    for at in 0..items.len() {
        if batch.len_of(items[at]) == length {
            items.swap(first_longer, at);
            first_longer += 1;
        }
    }
    first_longer
}

/// `set` plus every subscriber of `items`; also returns how many were new.
/// Not for a shared set: its pairs take the one-pair path, which writes it in place.
fn with_all(set: &SubscriberSet, batch: &Batch<'_>, items: &[u32], gen: Generation) -> (SubscriberSet, usize) {
    let held = match set {
        SubscriberSet::Empty => None,
        SubscriberSet::One(id) => Some((hash_word(id), id)),
        SubscriberSet::Shared(_) => unreachable!("a shared set changes in place"),
    };
    match (items, held) {
        ([], _) => return (set.clone(), 0),
        // The common case, one subscriber of a new pattern: nothing to sort.
        ([item], None) => return (SubscriberSet::One(batch.items[*item as usize].subscriber.clone()), 1),
        _ => {}
    }
    // The held id, if any, is the last.
    let hash = |at: usize| match items.get(at) {
        Some(&item) => batch.items[item as usize].subscriber_hash,
        None => held.expect("one past the items is the held id").0,
    };
    let leaf = |at: usize| Leaf {
        hash: hash(at),
        key: match items.get(at) {
            Some(&item) => batch.items[item as usize].subscriber.clone(),
            None => held.expect("one past the items is the held id").1.clone(),
        },
        value: (),
    };
    let (built, distinct) = idset::build_many(items.len() + usize::from(held.is_some()), hash, leaf, gen);
    let set = match built {
        idset::Built::One(id) => SubscriberSet::One(id),
        idset::Built::Set(root) => SubscriberSet::Shared(root),
    };
    (set, distinct - usize::from(held.is_some()))
}

/// The text of the words from `depth` on, when every one of `items` (each at
/// least `depth + 1` words long) is the same pattern: what a [`Child::Tail`]
/// of them holds. Items sharing a word path are one pattern exactly when
/// their texts are equal.
fn one_pattern_suffix(batch: &Batch<'_>, items: &[u32], depth: usize, one_parse: bool) -> Option<SmolStr> {
    let (&first, others) = items.split_first()?;
    if !one_parse && !others.is_empty() {
        let start = batch.items[first as usize].start;
        let text = batch.patterns[first as usize];
        let same = |&item: &u32| batch.items[item as usize].start == start || batch.patterns[item as usize] == text;
        if !others.iter().all(same) {
            return None;
        }
    }
    Some(batch.suffix(first, depth))
}

/// What goes below a new branch for `items` (each at least `depth + 1` words
/// long): a tail when they are one pattern, else a new, unpublished subtree;
/// and how many distinct pairs it holds.
fn fresh_child(batch: &Batch<'_>, items: &mut [u32], depth: usize, one_parse: bool, gen: Generation) -> (Child, usize) {
    if let Some(words) = one_pattern_suffix(batch, items, depth, one_parse) {
        let (subscribers, new) = with_all(&SubscriberSet::default(), batch, items, gen);
        return (Child::tail(words, subscribers), new);
    }
    let (inode, new) = build_fresh(batch, items, depth, gen);
    (Child::Node(inode), new)
}

/// A new, unpublished subtree holding `items` (each at least `depth + 1`
/// words long) below depth `depth`, and how many distinct pairs it holds.
/// No other thread can see it until it is published, so it is built by plain
/// construction.
fn build_fresh(batch: &Batch<'_>, items: &mut [u32], depth: usize, gen: Generation) -> (Arc<INode>, usize) {
    let mut cnode = CNode::default();
    let groups = group_by_word(batch, items, depth);
    let mut literals: Vec<Leaf<Branch>> = scratch_vec(groups.len());
    let mut added = 0;
    for at in 0..groups.len() {
        let (word, hash, one_parse) = (groups[at].word(batch), groups[at].hash, groups[at].one_parse);
        let (group, enders) = enter_group(batch, items, &groups, at, depth);
        let (subscribers, new) = with_all(&SubscriberSet::default(), batch, &group[..enders], gen);
        added += new;
        let child = match &mut group[enders..] {
            [] => None,
            deeper => {
                let (child, new) = fresh_child(batch, deeper, depth + 1, one_parse, gen);
                added += new;
                Some(child)
            }
        };
        let branch = Branch { subscribers, child };
        match word {
            PatternWord::Literal(literal) => literals.push(Leaf {
                hash,
                key: smol(literal),
                value: branch,
            }),
            PatternWord::Star => cnode.set_wildcard(PatternWord::Star, Some(branch)),
            PatternWord::Hash => cnode.set_wildcard(PatternWord::Hash, Some(branch)),
        }
    }
    cnode.literals = cnode.literals.insert_many(literals).0;
    (INode::new(gen, MainNode::committed(MainKind::Branches(cnode))), added)
}

/// How many pairs there are, and how many words the parse will push for them
/// (an upper bound: a run of equal consecutive patterns is parsed once). A
/// guess instead regrew the words past it: a realistic million-pair load (five
/// words a pattern, against a guess of four) spent 7% of its time copying a
/// 100 MB vector and faulting in the copy's pages.
fn count_words<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> (usize, usize) {
    let mut previous: Option<&str> = None;
    let (mut count, mut words) = (0, 0);
    for (pattern, _) in pairs {
        count += 1;
        if previous != Some(pattern) {
            words += pattern.bytes().filter(|&byte| byte == SEPARATOR as u8).count() + 1;
            previous = Some(pattern);
        }
    }
    (count, words)
}

/// What one attempt at a work item did.
enum Outcome {
    /// Committed: pairs added here, the children to visit next, and the
    /// pairs of shared sets met here (they take the one-pair path).
    Committed(usize, Vec<(Arc<INode>, usize, Vec<u32>)>, Vec<u32>),
    /// Lost a race: read again and retry.
    Retry,
    /// Not for the fast path (tombed, or the generation moved): one pair at a time.
    OnePairAtATime,
}

impl CsTrie {
    /// Subscribe every pair; returns how many were new. Much faster than one
    /// `subscribe` per pair when many pairs share nodes (see the module docs
    /// of `bulk_load.rs`, including what is and is not atomic).
    ///
    /// The pairs are read twice (hence `Clone`): once to count their words,
    /// so that the parse fills buffers of their final size.
    pub fn subscribe_many<'a, I>(&self, pairs: I) -> usize
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
        I::IntoIter: Clone,
    {
        let pairs = pairs.into_iter();
        let (expected, word_count) = count_words(pairs.clone());
        let mut batch = Batch {
            patterns: scratch_vec(expected),
            words: scratch_vec(word_count),
            items: scratch_vec(expected),
            has_empty_pattern: false,
        };
        let mut slow: Vec<u32> = Vec::new();
        let mut fast: Vec<u32> = scratch_vec(expected);
        let mut previous: Option<(&str, u32, u32)> = None;
        for (pattern, subscriber) in pairs {
            let index = batch.items.len() as u32;
            let (start, end) = match previous {
                // Many subscribers of one pattern often come together: parse it once.
                Some((text, start, end)) if text == pattern => (start, end),
                _ => {
                    let start = batch.words.len();
                    if !pattern.is_empty() {
                        let mut push = |text: &'a str| {
                            batch.words.push(Word {
                                hash: word_hash(PatternWord::parse(text)),
                                text,
                            })
                        };
                        // A byte loop: `str::split` cost more than the hashing on short words.
                        let bytes = pattern.as_bytes();
                        let mut word_start = 0;
                        for (at, &byte) in bytes.iter().enumerate() {
                            if byte == SEPARATOR as u8 {
                                // `.` is ASCII, so both slices are on char boundaries.
                                push(&pattern[word_start..at]);
                                word_start = at + 1;
                            }
                        }
                        push(&pattern[word_start..]);
                    }
                    if batch.words.len() - start > MAX_BULK_WORDS {
                        batch.words.truncate(start);
                    }
                    (start as u32, batch.words.len() as u32)
                }
            };
            previous = Some((pattern, start, end));
            batch.has_empty_pattern |= pattern.is_empty();
            if end == start && !pattern.is_empty() {
                slow.push(index);
            } else {
                fast.push(index);
            }
            batch.items.push(Item {
                start,
                end,
                subscriber_hash: hash_word(subscriber),
                subscriber: smol(subscriber),
            });
            batch.patterns.push(pattern);
        }
        let mut added = 0;
        debug_assert!(
            batch.words.len() <= word_count,
            "count_words undercounted: the words were regrown"
        );
        let mut one_by_one = slow;
        if !fast.is_empty() {
            let guard = epoch::pin();
            let mut work = vec![(self.root_arc(&guard), 0usize, fast)];
            while let Some((inode, depth, mut items)) = work.pop() {
                let mut attempts = 0;
                loop {
                    match self.apply_at(&batch, &inode, depth, &mut items, &guard) {
                        Outcome::Committed(new, children, shared) => {
                            added += new;
                            work.extend(children);
                            one_by_one.extend(shared);
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
            let subscriber = &batch.items[item as usize].subscriber;
            if self.subscribe(batch.patterns[item as usize], subscriber) {
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
        // Only the root holds the empty pattern; every other item goes deeper (an item of `depth` words
        // below the root ended at its parent's branch).
        let at_root = match depth {
            0 if batch.has_empty_pattern => partition_by_length(batch, items, 0, false),
            _ => 0,
        };
        debug_assert!(items.iter().all(|&item| depth == 0 || batch.len_of(item) > depth));
        let mut new = cnode.clone();
        let mut added = 0;
        // Pairs whose set is shared: it changes in place, never by a C-node write.
        let mut shared = Vec::new();
        if at_root > 0 {
            if cnode.empty_pattern().shared().is_some() {
                shared.extend_from_slice(&items[..at_root]);
            } else {
                let (set, count) = with_all(cnode.empty_pattern(), batch, &items[..at_root], gen);
                new.set_empty_pattern(set);
                added += count;
            }
        }
        let mut changed = added > 0;
        let mut children = Vec::new();
        let deeper = &mut items[at_root..];
        let groups = group_by_word(batch, deeper, depth);
        let mut literals: Vec<Leaf<Branch>> = scratch_vec(groups.len());
        for at in 0..groups.len() {
            let (word, hash, one_parse) = (groups[at].word(batch), groups[at].hash, groups[at].one_parse);
            let (group, enders) = enter_group(batch, deeper, &groups, at, depth);
            let existing = match word {
                PatternWord::Literal(literal) => cnode.literal_hashed(hash, literal),
                wildcard => cnode.branch(wildcard),
            };
            let held = existing.map(|branch| &branch.subscribers).cloned().unwrap_or_default();
            let (subscribers, count) = match held.shared() {
                Some(_) => {
                    shared.extend_from_slice(&group[..enders]);
                    (held, 0)
                }
                None => with_all(&held, batch, &group[..enders], gen),
            };
            added += count;
            let existing_child = existing.and_then(|branch| branch.child.as_ref());
            let child = match (&mut group[enders..], existing_child) {
                ([], _) => existing_child.cloned(),
                (deeper, Some(Child::Node(child))) if gcas_read(child, ctx, guard).get().cnode().is_some() => {
                    let child = if child.gen == gen {
                        child.clone()
                    } else {
                        // Old generation: its main node is final (see "Generation renewal").
                        INode::new(gen, gcas_read(child, ctx, guard).to_arc())
                    };
                    children.push((child.clone(), depth + 1, deeper.to_vec()));
                    Some(Child::Node(child))
                }
                (deeper, Some(Child::Tail(tail))) => {
                    if one_pattern_suffix(batch, deeper, depth + 1, one_parse).is_some_and(|words| words == tail.words)
                    {
                        if tail.subscribers.shared().is_some() {
                            shared.extend_from_slice(deeper);
                            existing_child.cloned()
                        } else {
                            // More subscribers of the tail's own pattern.
                            let (set, count) = with_all(&tail.subscribers, batch, deeper, gen);
                            added += count;
                            match count {
                                0 => existing_child.cloned(),
                                _ => Some(Child::tail(tail.words.clone(), set)),
                            }
                        }
                    } else {
                        // Other patterns too: the tail becomes an I-node (the same
                        // pairs), published by this GCAS and then visited.
                        let child = tail.expand(&[], gen);
                        children.push((child.clone(), depth + 1, deeper.to_vec()));
                        Some(Child::Node(child))
                    }
                }
                // None, or a tombed child (its branch is rebuilt).
                (deeper, _) => {
                    let (child, count) = fresh_child(batch, deeper, depth + 1, one_parse, gen);
                    added += count;
                    Some(child)
                }
            };
            let unchanged = count == 0
                && match (existing_child, &child) {
                    (Some(old), Some(new)) => old.same(new),
                    (None, None) => true,
                    _ => false,
                };
            if unchanged {
                continue;
            }
            changed = true;
            let branch = Branch { subscribers, child };
            match word {
                PatternWord::Literal(literal) => literals.push(Leaf {
                    hash,
                    key: smol(literal),
                    value: branch,
                }),
                PatternWord::Star => new.set_wildcard(PatternWord::Star, Some(branch)),
                PatternWord::Hash => new.set_wildcard(PatternWord::Hash, Some(branch)),
            }
        }
        if !changed {
            return Outcome::Committed(0, children, shared);
        }
        new.literals = new.literals.insert_many(literals).0;
        if gcas(inode, main, MainKind::Branches(new), ctx, guard) {
            Outcome::Committed(added, children, shared)
        } else {
            Outcome::Retry
        }
    }
}
