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
//! The call first reads the pairs once to find runs of one pattern and the
//! hash of each pattern's first word. A large load whose pairs are not in
//! that hash order already is then copied into it, patterns and subscribers
//! into one buffer ([`GroupOrder`]), so that the pairs under each branch of
//! the root sit together in memory for the rest of the call. It then splits
//! every run's pattern once; a word is hashed (the hash the HAMTs index by)
//! when a level groups pairs by it, so the words a tail keeps never are. A
//! work item is then an I-node of the
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
//! For n pairs of k words: O(n k) to split and to hash (and, for a large load,
//! O(n) to copy the pairs into group order: one radix sort of the runs), O(n
//! log n) integer sorts per level, and each touched C-node copied once, with its tables merged in
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
use super::hamt::{smol, sort_by_hash_key, Leaf, RADIX_SORT_MIN};
use super::idset;
use super::node::{Branch, CNode, Child, Generation, INode, MainKind, MainNode, SubscriberSet};
use super::scratch::scratch_vec;
use super::sync::epoch::{self, Guard};
use super::{help_reclaim, CsTrie};
use crate::prefetch::prefetch;
use crate::short_text::{append, same_text};
use crate::topic::{PatternWord, SEPARATOR};
use crate::word_hash::hash_word;

/// Patterns longer than this (in words) take the one-pair path, which is
/// iterative; the offline subtree builder recurses once per word.
const MAX_BULK_WORDS: usize = 64;
/// GCAS attempts on one C-node before its pairs take the one-pair path.
const ATTEMPTS: usize = 3;
/// How many groups ahead the walks prefetch the pairs they will read: the
/// pairs are visited in hash order, so without it each one is a cache miss.
const AHEAD: usize = 8;

/// One pair: its pattern's words are `words[start..end]` of the batch. 24
/// bytes: the subscriber's hash is taken only by a set of two ids or more
/// ([`with_all`]); a pattern's only subscriber (nearly every pair of a
/// distinct-pattern load) never needs it.
struct Item<'a> {
    start: u32,
    end: u32,
    /// Borrowed, and made a [`SmolStr`] only when a set takes it: in a large
    /// load it is a slice of [`GroupOrder`]'s buffer, near the pairs the walk
    /// visits with it (a `SmolStr` here, made in input order, cost the parse a
    /// 24-byte copy per pair and every set a copy of the copy).
    subscriber: &'a str,
}

/// One word of a pattern, parsed once. Hashed only when a level groups by it
/// ([`Batch::hash_of`]): the words a tail keeps are never hashed, and a word
/// is 16 bytes, not 24 (a realistic million-pair load has five million).
struct Word<'a> {
    /// Its text, borrowed from the caller's pattern (no copy per word: a
    /// million-pair load made 24-byte copies of four million words only to
    /// read them): `*` and `#` are the wildcards (never literals, by the grammar).
    text: &'a str,
}

/// The pairs of one call, parsed once.
struct Batch<'a> {
    patterns: Vec<&'a str>,
    words: Vec<Word<'a>>,
    items: Vec<Item<'a>>,
    /// Whether any pattern is the empty one (only the root holds it).
    has_empty_pattern: bool,
}

impl<'a> Batch<'a> {
    /// [`word_hash`] of word `word` of the batch.
    #[inline]
    fn hash_of(&self, word: u32) -> u64 {
        word_hash(PatternWord::parse(self.words[word as usize].text))
    }

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
    /// so this is the pattern from the byte where word `depth` starts: a
    /// slice of it, which the tail copies once.
    fn suffix(&self, item: u32, depth: usize) -> &'a str {
        let words = &self.words[self.items[item as usize].start as usize..];
        // Both are slices of the text that was parsed (an equal earlier row's, when consecutive rows repeat a
        // pattern), so the difference is a byte offset into it, and so into this row's equal text.
        let offset = (words[depth].text.as_ptr() as usize).wrapping_sub(words[0].text.as_ptr() as usize);
        &self.patterns[item as usize][offset..]
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
            return vec![Group::new(batch.hash_of(word), word, 0..items.len(), true)];
        }
    }
    // (word hash, item, index of the word in `batch.words`). Pairs of one parse are nearly always adjacent
    // (they come in runs and share every key), so their word is hashed once per run, not per pair.
    let mut keyed: Vec<(u64, u32, u32)> = scratch_vec(items.len());
    let mut last = (u32::MAX, 0);
    keyed.extend(items.iter().map(|&item| {
        let word = batch.items[item as usize].start + depth as u32;
        if word != last.0 {
            last = (word, batch.hash_of(word));
        }
        (last.1, item, word)
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
        let same = |word: u32| word == run[0].2 || same_text(batch.words[word as usize].text, first.text);
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

/// Prefetch every cache line of `value`: a 24-byte [`Item`] crosses a line
/// boundary at a quarter of the indices (when items were 40 bytes, at half,
/// perf put a fifth of a wide load's walk on reading an item's `start`, at
/// offset 32, right after a prefetch of its first byte alone). Words measured
/// no better so.
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
        ([item], None) => return (SubscriberSet::One(smol(batch.items[*item as usize].subscriber)), 1),
        _ => {}
    }
    // Each id's hash, read several times by the build; the held id, if any, is the last.
    let mut hashes: Vec<u64> = scratch_vec(items.len() + 1);
    hashes.extend(
        items
            .iter()
            .map(|&item| hash_word(batch.items[item as usize].subscriber)),
    );
    hashes.extend(held.map(|(hash, _)| hash));
    let hash = |at: usize| hashes[at];
    let leaf = |at: usize| Leaf {
        hash: hash(at),
        key: match items.get(at) {
            Some(&item) => smol(batch.items[item as usize].subscriber),
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
fn one_pattern_suffix<'a>(batch: &Batch<'a>, items: &[u32], depth: usize, one_parse: bool) -> Option<&'a str> {
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
        let branch = Branch::new(subscribers, child);
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

/// Loads of fewer pairs are parsed in input order: their scratch fits in the
/// caches, so visiting it in hash order costs no misses that a copy into
/// group order would save.
const GROUP_ORDER_MIN: usize = 1 << 14;

#[cfg(test)]
thread_local! {
    /// Tests set it to take the group-order path with small loads.
    static FORCED_GROUP_ORDER_MIN: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
/// Run `body` with [`GROUP_ORDER_MIN`] replaced by `min` on this thread.
pub(crate) fn with_group_order_min<R>(min: usize, body: impl FnOnce() -> R) -> R {
    let previous = FORCED_GROUP_ORDER_MIN.with(|forced| forced.replace(Some(min)));
    let result = body();
    FORCED_GROUP_ORDER_MIN.with(|forced| forced.set(previous));
    result
}

fn group_order_min() -> usize {
    #[cfg(test)]
    if let Some(min) = FORCED_GROUP_ORDER_MIN.with(std::cell::Cell::get) {
        return min;
    }
    GROUP_ORDER_MIN
}

/// Consecutive pairs of one pattern (equal texts), in input order: the parse
/// splits and hashes the pattern once for all of them.
#[derive(Clone, Copy)]
struct Run {
    /// [`word_hash`] of the pattern's first word.
    hash: u64,
    /// The run is pairs `start..start + len` of the input.
    start: u32,
    len: u32,
}

/// What one read of the pairs finds, before anything is parsed.
struct Scan {
    pairs: usize,
    /// How many words the parse will push, at most (each run's pattern once;
    /// the empty pattern counts one and pushes none), so that it fills a
    /// buffer of its final size. A guess instead regrew the words
    /// past it: a realistic million-pair load (five words a pattern, against
    /// a guess of four) spent 7% of its time copying a 100 MB vector and
    /// faulting in the copy's pages.
    words: usize,
    /// Bytes of the runs' patterns (each once) and of every subscriber: what
    /// [`GroupOrder`] copies.
    bytes: usize,
    /// Every run, in input order (until [`GroupOrder::of`] sorts them).
    runs: Vec<Run>,
    /// Whether the runs are already in hash order (every pair of one pattern,
    /// a load sorted by its caller): then input order is group order.
    grouped: bool,
}

/// What the parse needs of a [`Scan`]: the sizes of its buffers.
#[derive(Clone, Copy)]
struct Counts {
    pairs: usize,
    words: usize,
}

impl Scan {
    fn counts(&self) -> Counts {
        Counts {
            pairs: self.pairs,
            words: self.words,
        }
    }

    fn of<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Scan {
        let mut scan = Scan {
            pairs: 0,
            words: 0,
            bytes: 0,
            // Never more runs than pairs; pages past the ones written are never touched.
            runs: scratch_vec(pairs.size_hint().0),
            grouped: true,
        };
        let mut previous: Option<&str> = None;
        for (pattern, subscriber) in pairs {
            scan.bytes += subscriber.len();
            match scan.runs.last_mut() {
                Some(run) if previous.is_some_and(|previous| same_text(previous, pattern)) => run.len += 1,
                last => {
                    let (mut first, mut separators) = (None, 0);
                    for_each_separator(pattern.as_bytes(), |at| {
                        first = first.or(Some(at));
                        separators += 1;
                    });
                    let first = first.unwrap_or(pattern.len());
                    scan.words += separators + 1;
                    scan.bytes += pattern.len();
                    // `.` is ASCII, so `first` is on a char boundary.
                    let hash = word_hash(PatternWord::parse(&pattern[..first]));
                    scan.grouped &= last.is_none_or(|run| run.hash <= hash);
                    scan.runs.push(Run {
                        hash,
                        start: scan.pairs as u32,
                        len: 1,
                    });
                }
            }
            scan.pairs += 1;
            previous = Some(pattern);
        }
        scan
    }

    /// `pairs` (the ones scanned) with whether each has the pattern of the
    /// pair before it: the first of each run does not.
    fn in_input_order<'a, 's>(
        &'s self,
        pairs: impl Iterator<Item = (&'a str, &'a str)> + 's,
    ) -> impl Iterator<Item = (&'a str, &'a str, bool)> + 's {
        let mut starts = self.runs.iter().map(|run| run.start as usize).peekable();
        pairs.enumerate().map(move |(at, (pattern, subscriber))| {
            let first_of_run = starts.next_if_eq(&at).is_some();
            (pattern, subscriber, !first_of_run)
        })
    }
}

/// The pairs of a load in group order: sorted by the hash of their first
/// word, and copied, patterns and subscribers, into one buffer in that order.
///
/// # Why
///
/// The walk visits a C-node's pairs in the hash order of their word there,
/// and then the pairs of each child, and so on down. In input order every
/// one of those visits, at every depth, reads a pair, its words and its text
/// from anywhere in a buffer of a hundred megabytes or more: a cache miss
/// each. A realistic million-pair load (five random words a pattern) ran a
/// third faster from input its caller had sorted. Here the load sorts itself
/// once: after the root, the pairs below each of its branches sit together,
/// a few hundred kilobytes that the caches hold while the walk goes down.
/// The copy reads each pair once at random (prefetched ahead), instead of
/// once per depth.
struct GroupOrder {
    text: String,
    /// Per pair in group order: its pattern's and its subscriber's byte
    /// ranges in `text`. The pairs of a run share one copy of the pattern,
    /// and stay together (the sort moves whole runs, and keeps input order
    /// among equal hashes).
    spans: Vec<[u32; 4]>,
}

/// How many runs ahead the copy into group order prefetches.
const COPY_AHEAD: usize = 16;

impl GroupOrder {
    /// `None` when input order will do: a small load, one already in group
    /// order, or one whose text does not fit 32-bit offsets. Otherwise it
    /// sorts `scan.runs` into group order in place: the parse of the copy
    /// needs them no more.
    fn of<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>, scan: &mut Scan) -> Option<GroupOrder> {
        if scan.pairs < group_order_min() || scan.grouped || scan.bytes > u32::MAX as usize {
            return None;
        }
        let mut rows: Vec<(&str, &str)> = scratch_vec(scan.pairs);
        rows.extend(pairs);
        let runs = &mut scan.runs;
        // Runs of equal hashes keep their input order: `sort_by_hash_key` is stable from RADIX_SORT_MIN
        // on (radix passes), and below it compares without keeping order.
        if runs.len() < RADIX_SORT_MIN {
            runs.sort_by_key(|run| run.hash);
        } else {
            sort_by_hash_key(runs, |run| run.hash);
        }
        let mut text = String::from_utf8(scratch_vec(scan.bytes)).expect("an empty buffer is UTF-8");
        let mut spans: Vec<[u32; 4]> = scratch_vec(rows.len());
        // `piece` appended to `text`; its byte range there.
        let copy = |text: &mut String, piece: &str| {
            let start = text.len() as u32;
            append(text, piece);
            [start, text.len() as u32]
        };
        for at in 0..runs.len() {
            if let Some(ahead) = runs.get(at + COPY_AHEAD) {
                prefetch(rows.as_ptr().wrapping_add(ahead.start as usize));
            }
            if let Some(ahead) = runs.get(at + COPY_AHEAD / 2) {
                let (pattern, subscriber) = rows[ahead.start as usize];
                prefetch(pattern.as_ptr());
                prefetch(subscriber.as_ptr());
            }
            let run = runs[at];
            let first = run.start as usize;
            let [start, end] = copy(&mut text, rows[first].0);
            for &(_, subscriber) in &rows[first..first + run.len as usize] {
                let [subscriber_start, subscriber_end] = copy(&mut text, subscriber);
                spans.push([start, end, subscriber_start, subscriber_end]);
            }
        }
        debug_assert!(
            text.len() <= scan.bytes,
            "Scan::bytes undercounted: the text was regrown"
        );
        Some(GroupOrder { text, spans })
    }

    /// Every pair of `spans` (in group order) in `text`, with whether it has
    /// the pattern of the pair before it (the same copy of it). The iterator
    /// owns the spans, so they are freed once the parse has read them, before
    /// the walk allocates its own buffers.
    fn pairs(text: &str, spans: Vec<[u32; 4]>) -> impl Iterator<Item = (&str, &str, bool)> + '_ {
        let slice = move |start: u32, end: u32| &text[start as usize..end as usize];
        let mut previous = [u32::MAX; 2];
        spans
            .into_iter()
            .map(move |[pattern, pattern_end, subscriber, subscriber_end]| {
                let same = previous == [pattern, pattern_end];
                previous = [pattern, pattern_end];
                (slice(pattern, pattern_end), slice(subscriber, subscriber_end), same)
            })
    }
}

/// A load's pairs parsed: the batch, and which of its pairs take the fast
/// path (`fast`) and which the one-pair path from the start (`slow`: patterns
/// too long for the offline builder).
struct Parsed<'t> {
    batch: Batch<'t>,
    fast: Vec<u32>,
    slow: Vec<u32>,
}

impl<'t> Parsed<'t> {
    /// `pairs`: each with whether it has the pattern of the pair before it.
    fn of(pairs: impl Iterator<Item = (&'t str, &'t str, bool)>, counts: Counts) -> Parsed<'t> {
        let mut batch = Batch {
            patterns: scratch_vec(counts.pairs),
            words: scratch_vec(counts.words),
            items: scratch_vec(counts.pairs),
            has_empty_pattern: false,
        };
        let mut slow: Vec<u32> = Vec::new();
        let mut fast: Vec<u32> = scratch_vec(counts.pairs);
        let mut previous: Option<(u32, u32)> = None;
        for (pattern, subscriber, same_pattern) in pairs {
            let index = batch.items.len() as u32;
            let (start, end) = match previous {
                // Many subscribers of one pattern often come together: parse it once.
                Some((start, end)) if same_pattern => (start, end),
                _ => {
                    let start = batch.words.len();
                    if !pattern.is_empty() {
                        let mut push = |text: &'t str| batch.words.push(Word { text });
                        // Not `str::split`, nor a byte loop: both cost a mispredicted branch per word.
                        let mut word_start = 0;
                        for_each_separator(pattern.as_bytes(), |at| {
                            // `.` is ASCII, so both slices are on char boundaries.
                            push(&pattern[word_start..at]);
                            word_start = at + 1;
                        });
                        push(&pattern[word_start..]);
                    }
                    if batch.words.len() - start > MAX_BULK_WORDS {
                        batch.words.truncate(start);
                    }
                    (start as u32, batch.words.len() as u32)
                }
            };
            previous = Some((start, end));
            batch.has_empty_pattern |= pattern.is_empty();
            if end == start && !pattern.is_empty() {
                slow.push(index);
            } else {
                fast.push(index);
            }
            batch.items.push(Item { start, end, subscriber });
            batch.patterns.push(pattern);
        }
        debug_assert!(
            batch.words.len() <= counts.words,
            "Scan::words undercounted: the words were regrown"
        );
        Parsed { batch, fast, slow }
    }
}

/// Call `found` with the byte offset of every `.` in `bytes`, in order.
///
/// Eight bytes at a time: each word of the text is XORed with eight dots, and
/// the zero bytes of the result (the dots) are marked exactly, with no carry
/// between bytes, by `!(((x & 0x7f..) + 0x7f..) | x | 0x7f..)`. The loop over
/// a word's marks ends once per eight bytes; a byte loop's `if` mispredicted
/// at every separator (perf: a sixth of a realistic load's parse on its exit
/// branch, five words a pattern).
#[inline]
fn for_each_separator(bytes: &[u8], mut found: impl FnMut(usize)) {
    const DOTS: u64 = u64::from_ne_bytes([SEPARATOR as u8; 8]);
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // Bit 8i + 7 set exactly where byte i of `word` (little-endian) is a dot, for i >= `from`.
    let marks = |word: u64, from: usize| {
        let x = word ^ DOTS;
        !(((x & LOW7) + LOW7) | x | LOW7) & (u64::MAX << (8 * from))
    };
    let mut report = |mut mask: u64, base: usize| {
        while mask != 0 {
            found(base + (mask.trailing_zeros() / 8) as usize);
            mask &= mask - 1;
        }
    };
    let len = bytes.len();
    if len < 8 {
        for (at, &byte) in bytes.iter().enumerate() {
            if byte == SEPARATOR as u8 {
                found(at);
            }
        }
        return;
    }
    let word_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
    let whole = len / 8 * 8;
    for base in (0..whole).step_by(8) {
        report(marks(word_at(base), 0), base);
    }
    if whole < len {
        // The last eight bytes, of which the first `len - whole` were read already.
        report(marks(word_at(len - 8), 8 - (len - whole)), len - 8);
    }
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
    /// The pairs are read more than once (hence `Clone`): once to count their
    /// words and bytes, so that the parse fills buffers of their final size,
    /// and, for a large load, once more to copy them into group order.
    pub fn subscribe_many<'a, I>(&self, pairs: I) -> usize
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
        I::IntoIter: Clone,
    {
        let pairs = pairs.into_iter();
        let mut scan = Scan::of(pairs.clone());
        // Each scratch buffer is freed as soon as it has been read for the last time, so that the walk's
        // buffers reuse its memory: a fresh page costs more than the work on it in a first load.
        match GroupOrder::of(pairs.clone(), &mut scan) {
            Some(GroupOrder { text, spans }) => {
                let counts = scan.counts();
                drop(scan);
                self.load(Parsed::of(GroupOrder::pairs(&text, spans), counts))
            }
            None => {
                let parsed = Parsed::of(scan.in_input_order(pairs), scan.counts());
                drop(scan);
                self.load(parsed)
            }
        }
    }

    /// Subscribe the parsed pairs: the fast path, then one pair at a time for
    /// what it leaves.
    fn load(&self, parsed: Parsed<'_>) -> usize {
        let Parsed { batch, fast, slow } = parsed;
        let mut added = 0;
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
            let subscriber = batch.items[item as usize].subscriber;
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
            let held = existing.map(Branch::subscribers).cloned().unwrap_or_default();
            let (subscribers, count) = match held.shared() {
                Some(_) => {
                    shared.extend_from_slice(&group[..enders]);
                    (held, 0)
                }
                None => with_all(&held, batch, &group[..enders], gen),
            };
            added += count;
            let existing_child = existing.and_then(|branch| branch.child());
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
                    if one_pattern_suffix(batch, deeper, depth + 1, one_parse)
                        .is_some_and(|words| words == tail.words())
                    {
                        if tail.subscribers().shared().is_some() {
                            shared.extend_from_slice(deeper);
                            existing_child.cloned()
                        } else {
                            // More subscribers of the tail's own pattern.
                            let (set, count) = with_all(tail.subscribers(), batch, deeper, gen);
                            added += count;
                            match count {
                                0 => existing_child.cloned(),
                                _ => Some(Child::tail(tail.words(), set)),
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
            let branch = Branch::new(subscribers, child);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs_of<'a>(rows: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a str, &'a str)> + Clone + 'a {
        rows.iter().copied()
    }

    #[test]
    fn for_each_separator_finds_every_dot_like_a_byte_loop() {
        let mut rng = crate::rng::Rng(5);
        // Dots next to '/', '-' and bytes one off '.' (where a carry between bytes would show), multi-byte
        // characters, and every length from 0 to 80 (whole words, a partial last one, under eight bytes).
        let alphabet = [".", "/", "-", "a", "é", "部", "\u{1}", "\u{7f}", "\u{ae}"];
        for len in 0..=80 {
            for _ in 0..50 {
                let mut text = String::new();
                while text.len() < len {
                    text.push_str(alphabet[rng.below(alphabet.len())]);
                }
                let expected: Vec<usize> = text
                    .bytes()
                    .enumerate()
                    .filter(|&(_, b)| b == b'.')
                    .map(|(at, _)| at)
                    .collect();
                let mut got = Vec::new();
                for_each_separator(text.as_bytes(), |at| got.push(at));
                assert_eq!(got, expected, "{text:?}");
            }
        }
    }

    #[test]
    fn a_scan_finds_runs_words_and_bytes() {
        let rows = [
            ("a.b", "s1"),
            ("a.b", "s2"),
            ("c", "s3"),
            ("a.b", "s4"),
            ("", "s5"),
            ("", "s6"),
        ];
        let scan = Scan::of(pairs_of(&rows));
        assert_eq!(scan.pairs, 6);
        let runs: Vec<(u32, u32)> = scan.runs.iter().map(|run| (run.start, run.len)).collect();
        assert_eq!(runs, [(0, 2), (2, 1), (3, 1), (4, 2)]);
        // Each run's pattern once: a.b (2 words), c, a.b, the empty pattern (counted as one word).
        assert_eq!(scan.words, 2 + 1 + 2 + 1);
        assert_eq!(scan.bytes, 3 + 1 + 3 + 5 * 2 + 2 * 3 - 4);
        assert_eq!(scan.runs[0].hash, word_hash(PatternWord::parse("a")));
        assert_eq!(scan.runs[3].hash, word_hash(PatternWord::parse("")));
        let flagged: Vec<bool> = scan.in_input_order(pairs_of(&rows)).map(|(_, _, same)| same).collect();
        assert_eq!(flagged, [false, true, false, false, false, true]);
    }

    #[test]
    fn group_order_is_only_for_large_unsorted_loads() {
        let rows: Vec<(String, String)> = (0..100).map(|i| (format!("w{}.x", 99 - i), format!("s{i}"))).collect();
        let rows: Vec<(&str, &str)> = rows.iter().map(|(p, s)| (p.as_str(), s.as_str())).collect();
        let mut scan = Scan::of(pairs_of(&rows));
        assert!(
            GroupOrder::of(pairs_of(&rows), &mut scan).is_none(),
            "under GROUP_ORDER_MIN"
        );
        with_group_order_min(0, || {
            assert!(GroupOrder::of(pairs_of(&rows), &mut scan).is_some());
            let one_pattern = [("a.#", "s1"), ("a.#", "s2")];
            let mut scan = Scan::of(pairs_of(&one_pattern));
            assert!(scan.grouped);
            assert!(
                GroupOrder::of(pairs_of(&one_pattern), &mut scan).is_none(),
                "already grouped"
            );
        });
    }

    /// Every pair comes out once, whole, with the pairs of each first word
    /// together, runs kept together and flagged, and equal hashes in input order.
    #[test]
    fn group_order_groups_by_first_word_and_keeps_every_pair() {
        let mut rng = crate::rng::Rng(7);
        let words = ["a", "b", "c", "d", "*", "#", "long-word-past-the-inline-size"];
        let mut rows: Vec<(String, String)> = Vec::new();
        for i in 0..500 {
            let pattern = match rows.last() {
                Some((previous, _)) if rng.below(3) == 0 => previous.clone(),
                _ => (0..1 + rng.below(3))
                    .map(|_| words[rng.below(words.len())])
                    .collect::<Vec<_>>()
                    .join("."),
            };
            rows.push((pattern, format!("subscriber-{i}")));
        }
        let borrowed: Vec<(&str, &str)> = rows.iter().map(|(p, s)| (p.as_str(), s.as_str())).collect();
        with_group_order_min(0, || {
            let mut scan = Scan::of(pairs_of(&borrowed));
            let GroupOrder { text, spans } = GroupOrder::of(pairs_of(&borrowed), &mut scan).expect("unsorted");
            let out: Vec<(&str, &str, bool)> = GroupOrder::pairs(&text, spans).collect();
            let mut got: Vec<(&str, &str)> = out.iter().map(|&(p, s, _)| (p, s)).collect();
            let mut want = borrowed.clone();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "every pair once");
            let first = |pattern: &str| word_hash(PatternWord::parse(pattern.split('.').next().unwrap()));
            assert!(
                out.windows(2).all(|pair| first(pair[0].0) <= first(pair[1].0)),
                "by first word"
            );
            let index = |subscriber: &str| subscriber["subscriber-".len()..].parse::<usize>().unwrap();
            for pair in out.windows(2) {
                let (previous, next) = (pair[0], pair[1]);
                if first(previous.0) == first(next.0) {
                    assert!(index(previous.1) < index(next.1), "input order among equal hashes");
                }
                // Flagged exactly when the pair before is of the same run (adjacent in the input, equal text).
                let same_run = previous.0 == next.0 && index(next.1) == index(previous.1) + 1;
                assert_eq!(next.2, same_run, "{previous:?} {next:?}");
            }
            assert!(!out[0].2);
        });
    }
}
