//! The frozen matcher: a compact, immutable trie built once from a set of
//! (pattern, subscriber) pairs and then only read (the data plane of the
//! Spark job, shipped to executors as a snapshot file or as bytes).
//!
//! # Layout
//!
//! A matcher is one buffer in the byte layout of [`crate::layout`], read in
//! place ([`crate::storage`]): built here, decoded from a copy, or mapped from
//! a file by [`crate::codec`], with no structure rebuilt on load. Everything is
//! a flat array indexed by `u32`:
//!
//! * `words` / `subscribers` – interned texts ([`Interned`]): one string of
//!   all texts plus end offsets, and for words an in-file hash index from
//!   text to id. Ids are in ascending text order, so building the same pairs
//!   always gives the same structure (and the same bytes).
//! * `nodes` – the trie, root at index 0, numbered in depth-first preorder
//!   (literal children in ascending word id, then the `star` child, then the
//!   `hash` child). Preorder makes every child index larger than its parent's,
//!   so the structure is a tree by construction.
//! * `edges` – the literal children of every node, one sorted `(word, child)`
//!   range per node (binary-searched, or probed through the in-file `wide`
//!   index past [`WIDE_FANOUT`] children); the wildcard children are the
//!   named fields [`Node::star`] and [`Node::hash`], never entries of that range.
//! * `subscriber_ids` – one ascending range per node: who subscribed to the
//!   pattern that ends at that node.
//!
//! # Lookup
//!
//! Each key word is resolved once to its word id (a word no pattern contains
//! can only be matched by `*` or `#`). Then an explicit-stack depth-first walk
//! over states `(node, key position)`: a literal or `*` child consumes one
//! word; a `#` child is entered at every position from the current one to the
//! end. Without care, patterns such as `#.#.#` reach the same state along
//! exponentially many paths, so for each `#` node the walk remembers the
//! lowest position it has been entered at: later entries only add positions
//! below it. Every other node has exactly one parent and its edge consumes
//! exactly one word, so each `(node, position)` state is visited at most once
//! and a lookup is O(nodes x key words²) in the worst case – usually a handful
//! of states. No recursion, so hostile depths cannot overflow the stack.
//!
//! A batch of lookups ([`crate::batch`]) also keeps a [`Memo`]: small
//! direct-mapped caches of the key words it resolved and the literal children
//! it followed. In a matcher of a million subscriptions most of a lookup's
//! time was cache misses in tables of millions of entries, for words and
//! edges that the batch's other keys had just resolved.

use std::sync::Arc;

use hashbrown::HashMap;

use crate::errors::BuildError;
use crate::layout::{home_slot, wide_key, Layout, Parts, Texts, Views, EMPTY, WIDE_FANOUT};
use crate::storage::{Array, Storage};
use crate::word_hash::hash_word;

pub use crate::layout::{Edge, Node, NONE};

use crate::topic::{split_words, PatternWord};

pub(crate) use crate::layout::PREFETCH_AHEAD;

/// Interned texts in strictly ascending text order, read in place: id -> text via `ends`, text -> id
/// via the in-file `index` (words, which lookups resolve by text) or a binary search (subscribers,
/// which are only ever read by id).
#[derive(Debug, Clone)]
pub struct Interned {
    /// All texts, concatenated in id order. Invariant: valid UTF-8, and every entry of `ends` is a
    /// char boundary of it (the decoder checks both; builders copy `str`s).
    pub(crate) text: Array<u8>,
    /// `text[ends[i-1] .. ends[i]]` is text `i` (`ends[-1]` = 0). Invariant: ascending, the last
    /// equal to `text.len()`.
    pub(crate) ends: Array<u32>,
    /// Open-addressing slots of ids (see [`crate::layout`]); empty when the table is not indexed.
    /// Invariant: every slot is [`EMPTY`] or an id below `ends.len()`, and the length is 0 or a
    /// power of two.
    pub(crate) index: Array<u32>,
    /// The SipHash key of `index`.
    key: [u64; 2],
}

impl Interned {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Text of id `id` (`id < len()`).
    pub fn get(&self, id: u32) -> &str {
        let bytes = &self.text[crate::layout::text_range(&self.ends, id)];
        // SAFETY: `text` is UTF-8 and both ends are char boundaries (field invariants), so the range
        // between them is UTF-8.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    pub fn find(&self, text: &str) -> Option<u32> {
        let slots = self.index.len();
        if slots == 0 {
            let (mut low, mut high) = (0u32, self.ends.len() as u32);
            while low < high {
                let mid = low + (high - low) / 2;
                match self.get(mid).cmp(text) {
                    std::cmp::Ordering::Less => low = mid + 1,
                    std::cmp::Ordering::Greater => high = mid,
                    std::cmp::Ordering::Equal => return Some(mid),
                }
            }
            return None;
        }
        self.find_from(self.home(text), text)
    }

    /// [`Interned::find`] in an indexed table, from `text`'s [`Interned::home`] slot (what a
    /// caller that prefetched the slot computed already).
    pub(crate) fn find_from(&self, home: usize, text: &str) -> Option<u32> {
        let slots = self.index.len();
        let mask = slots.wrapping_sub(1);
        let mut at = home;
        // At most one pass over the slots, whatever they hold.
        for _ in 0..slots {
            let id = *self.index.get(at)?;
            if id == EMPTY {
                return None;
            }
            if self.get(id) == text {
                return Some(id);
            }
            at = (at + 1) & mask;
        }
        None
    }

    /// The `index` slot where the probe for `text` starts (the index must not be empty).
    pub(crate) fn home(&self, text: &str) -> usize {
        home_slot(self.key, text.as_bytes(), self.index.len() as u32) as usize
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.ends.len() as u32).map(move |id| self.get(id))
    }

    /// Total text bytes.
    pub fn text_len(&self) -> usize {
        self.text.len()
    }
}

/// Byte ranges of the words of a non-empty key, appended to `spans`.
///
/// `.` is ASCII, so every range is on char boundaries. Eight bytes at a time
/// (SWAR): in `x = chunk ^ "........"` a separator is a zero byte, and
/// `!(((x & 0x7F..) + 0x7F..) | x | 0x7F..)` sets the high bit of exactly the
/// zero bytes (no carry crosses a byte), which beats `str::split` on keys of
/// short words.
fn split_spans(bytes: &[u8], spans: &mut Vec<(usize, usize)>) {
    const DOTS: u64 = u64::from_ne_bytes([b'.'; 8]);
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    let mut start = 0;
    let mut chunks = bytes.chunks_exact(8);
    let mut base = 0;
    for chunk in &mut chunks {
        let x = u64::from_le_bytes(chunk.try_into().expect("chunks of 8")) ^ DOTS;
        let mut zeros = !(((x & LOW7) + LOW7) | x | LOW7);
        while zeros != 0 {
            let index = base + (zeros.trailing_zeros() / 8) as usize;
            spans.push((start, index));
            start = index + 1;
            zeros &= zeros - 1;
        }
        base += 8;
    }
    for (offset, &byte) in chunks.remainder().iter().enumerate() {
        if byte == b'.' {
            spans.push((start, base + offset));
            start = base + offset + 1;
        }
    }
    spans.push((start, bytes.len()));
}

/// For items sorted by owner: `starts[i] .. starts[i + 1]` are the items of owner `i`.
/// `items` grouped by owner (a counting sort: O(n + owners), no comparisons),
/// each group sorted and deduplicated; returns them with `starts`, where
/// owner `o`'s group is `items[starts[o]..starts[o + 1]]`. Sources hand the
/// builder each node's children together, so the groups are mostly already
/// in place; a global sort of millions of entries was most of a freeze.
fn group_by_owner<T: Copy + Default + Ord>(
    owners: usize,
    items: Vec<T>,
    owner: impl Fn(&T) -> u32,
) -> (Vec<u32>, Vec<T>) {
    let mut starts = vec![0u32; owners + 1];
    for item in &items {
        starts[owner(item) as usize + 1] += 1;
    }
    for i in 0..owners {
        starts[i + 1] += starts[i];
    }
    let mut next = starts.clone();
    let mut grouped = vec![T::default(); items.len()];
    for item in items {
        let slot = &mut next[owner(&item) as usize];
        grouped[*slot as usize] = item;
        *slot += 1;
    }
    // Sort and deduplicate each group, compacting in place.
    let mut kept = 0usize;
    for o in 0..owners {
        let (start, end) = (starts[o] as usize, starts[o + 1] as usize);
        starts[o] = kept as u32;
        let group = &mut grouped[start..end];
        group.sort_unstable();
        for i in start..end {
            if i == start || grouped[i] != grouped[i - 1] {
                grouped[kept] = grouped[i];
                kept += 1;
            }
        }
    }
    starts[owners] = kept as u32;
    grouped.truncate(kept);
    (starts, grouped)
}

/// Append the ids of node `node` that `hidden` (`node << 32 | id`, strictly ascending) does not hold.
fn extend_visible(found: &mut Vec<u32>, ids: &[u32], node: u32, hidden: &[u64]) {
    let low = u64::from(node) << 32;
    let from = hidden.partition_point(|&pair| pair < low);
    let to = from + hidden[from..].partition_point(|&pair| pair >> 32 == u64::from(node));
    if from == to {
        found.extend_from_slice(ids);
        return;
    }
    let mut hiding = hidden[from..to].iter().map(|&pair| pair as u32).peekable();
    for &id in ids {
        while hiding.next_if(|&hidden| hidden < id).is_some() {}
        if hiding.peek() != Some(&id) {
            found.push(id);
        }
    }
}

/// Reusable per-thread buffers for lookups, so a batch allocates once.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Byte range of every key word within the key.
    word_spans: Vec<(usize, usize)>,
    /// Word id of every key word: [`NONE`] when no pattern has that word,
    /// [`UNRESOLVED`] until the walk first needs it (a miss usually stops
    /// after the first word or two, so later words are never hashed).
    word_ids: Vec<u32>,
    /// Pending `(node, key position)` states.
    stack: Vec<(u32, usize)>,
    /// Lowest key position each `#` node has been entered at in this lookup.
    hash_low: HashLow,
    /// Matching subscriber ids (deduplicated by [`FrozenMatcher::lookup_ids`]).
    found: Vec<u32>,
    /// `(node, key position)` states the last lookup visited: the work it did, which
    /// `limits.max_match_cost_per_subscriber` bounds (see `routing/validation.py`).
    states_visited: usize,
    /// A batch's caches of resolved words and followed literal children
    /// ([`Scratch::for_batch`]); `None` in a thread's long-lived scratch.
    memo: Option<Box<Memo>>,
}

impl Scratch {
    /// Buffers larger than this (after a huge key) are freed rather than kept.
    const KEEP_CAPACITY: usize = 4096;

    /// A scratch for a batch of about `keys` lookups, with a [`Memo`] of what
    /// they resolve (dropped whenever the scratch serves another matcher).
    pub fn for_batch(keys: usize) -> Self {
        Scratch {
            memo: Some(Box::new(Memo::new(keys))),
            ..Scratch::default()
        }
    }

    /// The batch memo, when this scratch has one.
    pub(crate) fn memo_mut(&mut self) -> Option<&mut Memo> {
        self.memo.as_deref_mut()
    }

    /// `(node, key position)` states the last [`FrozenMatcher::lookup_ids`] visited.
    pub fn states_visited(&self) -> usize {
        self.states_visited
    }

    /// Release buffers a hostile key grew, so a long-lived thread-local scratch stays small.
    pub fn trim(&mut self) {
        let largest = self
            .word_spans
            .capacity()
            .max(self.stack.capacity())
            .max(self.found.capacity());
        if largest > Self::KEEP_CAPACITY {
            *self = Scratch::default();
        }
    }
}

/// `#` node -> lowest key position it was entered at. Lookups meet a few `#`
/// nodes at most, so a short list scanned linearly is fastest; past
/// [`HashLow::LINEAR`] entries (hostile pattern sets) it moves to a hash map
/// so the walk stays polynomial.
#[derive(Debug, Default)]
struct HashLow {
    few: Vec<(u32, usize)>,
    many: HashMap<u32, usize>,
}

impl HashLow {
    const LINEAR: usize = 16;

    fn clear(&mut self) {
        self.few.clear();
        if !self.many.is_empty() {
            self.many.clear();
        }
    }

    fn entry(&mut self, node: u32, default: usize) -> &mut usize {
        if self.many.is_empty() {
            if let Some(index) = self.few.iter().position(|&(n, _)| n == node) {
                return &mut self.few[index].1;
            }
            if self.few.len() < Self::LINEAR {
                self.few.push((node, default));
                return &mut self.few.last_mut().expect("just pushed").1;
            }
            self.many.extend(self.few.drain(..));
        }
        self.many.entry(node).or_insert(default)
    }
}

/// Direct-mapped caches of one batch's resolutions: key word -> word id, and
/// `(node, word)` -> literal child (every node's, narrow ones included: with
/// a memo the walk compares ids, not the edges' texts).
///
/// In a matcher of a million subscriptions both are probes into tables of
/// millions of entries (the word index, [`FrozenMatcher::wide`], edge ranges
/// and texts all over the matcher), so nearly every probe is a cache miss,
/// and a lookup takes ~20 of them: matching took four times as long per key
/// as at 10,000 subscriptions for 25% more states. Traffic repeats its words
/// (a few hundred carry most keys), so a batch resolves the same ones over
/// and over; these caches keep them in at most 320 KB. Entries are exact: a
/// word entry is used only when the cached id's text equals the key word, a
/// child entry only for the same `(node, word)` key. They belong to the
/// matcher that filled them (`matcher`, its [`FrozenMatcher::id`]) and are
/// cleared when another one uses the scratch.
#[derive(Debug)]
pub(crate) struct Memo {
    /// The [`FrozenMatcher::id`] the entries belong to (0: none yet).
    matcher: u64,
    /// `(hash_word(text), word id)`; `NONE` id: an empty slot. Only words
    /// the matcher has are cached (an absent word has no id to verify).
    words: Box<[(u64, u32)]>,
    /// `(child_key(node, word), child or NONE)`; `u64::MAX` key: an empty
    /// slot (node indices are below `NONE`, so no real key is all ones).
    children: Box<[(u64, u32)]>,
}

impl Memo {
    /// Table sizes (powers of two) for the largest batches: 64 KB of words and
    /// 256 KB of children, within a core's L2 cache. Smaller batches get
    /// smaller tables, so a call with a few keys does not clear 320 KB.
    const MAX_WORD_SLOTS: usize = 1 << 12;
    const MAX_CHILD_SLOTS: usize = 1 << 14;
    const MIN_SLOTS: usize = 64;

    fn new(keys: usize) -> Self {
        let slots = |per_key: usize, max: usize| {
            keys.saturating_mul(per_key)
                .next_power_of_two()
                .clamp(Self::MIN_SLOTS, max)
        };
        Memo {
            matcher: 0,
            words: vec![(0, NONE); slots(1, Self::MAX_WORD_SLOTS)].into_boxed_slice(),
            children: vec![(u64::MAX, NONE); slots(4, Self::MAX_CHILD_SLOTS)].into_boxed_slice(),
        }
    }

    /// Make the entries `matcher`'s, dropping any of another matcher.
    pub(crate) fn serve(&mut self, matcher: &FrozenMatcher) {
        if self.matcher != matcher.id {
            self.words.fill((0, NONE));
            self.children.fill((u64::MAX, NONE));
            self.matcher = matcher.id;
        }
    }

    /// The slot of `hash` in a table of `len` (a power of two) slots: its top bits.
    fn slot(hash: u64, len: usize) -> usize {
        (hash >> (64 - len.trailing_zeros())) as usize
    }

    fn word_slot(&self, hash: u64) -> usize {
        Self::slot(hash, self.words.len())
    }

    fn child_slot(&self, key: u64) -> usize {
        Self::slot(key.wrapping_mul(0x9E37_79B9_7F4A_7C15), self.children.len())
    }

    /// Record that word `id` has the text whose [`hash_word`] is `hash` (the caller resolved it
    /// exactly, with [`Interned::find`]).
    pub(crate) fn remember_word(&mut self, hash: u64, id: u32) {
        let at = self.word_slot(hash);
        self.words[at] = (hash, id);
    }

    /// The recorded literal child of `(node, word)`: `Some(NONE)` when it has none, `None` when
    /// nothing is recorded.
    pub(crate) fn child(&self, node: u32, word: u32) -> Option<u32> {
        let key = child_key(node, word);
        let slot = self.children[self.child_slot(key)];
        (slot.0 == key).then_some(slot.1)
    }

    /// Record the literal child of `(node, word)` (or [`NONE`]), as
    /// [`FrozenMatcher::literal_child_uncached`] found it.
    pub(crate) fn remember_child(&mut self, node: u32, word: u32, child: u32) {
        let key = child_key(node, word);
        let at = self.child_slot(key);
        self.children[at] = (key, child);
    }
}

/// A key word whose id has not been looked up yet (never a valid word id:
/// [`Texts::push`] keeps ids below it).
const UNRESOLVED: u32 = u32::MAX - 1;

/// Nodes with at most this many literal children are searched by comparing
/// the key word's text; wider ones by its interned id.
const SMALL_FANOUT: u32 = 4;

/// The immutable matcher: views of one [`Storage`] in the layout of
/// [`crate::layout`]. Invariants (established by the builders and checked by
/// the decoder in [`crate::codec`]) are stated there and on [`Node`], [`Edge`]
/// and [`Interned`]; in addition every word and subscriber id in
/// `edges`/`subscriber_ids` is in range, every `wide` slot is [`EMPTY`] or an
/// edge index, and `nodes` is non-empty.
#[derive(Debug, Clone)]
pub struct FrozenMatcher {
    pub(crate) nodes: Array<Node>,
    pub(crate) edges: Array<Edge>,
    pub(crate) subscriber_ids: Array<u32>,
    pub(crate) words: Interned,
    pub(crate) subscribers: Interned,
    /// Open-addressing slots of edge indices for every literal edge of a node
    /// with more than [`WIDE_FANOUT`] of them. A binary search over a node with
    /// 100,000 children (a popular prefix above many tenants) costs ~17
    /// dependent cache misses; a probe here costs one or two.
    pub(crate) wide: Array<u32>,
    /// A delta's hidden base pairs, `base node << 32 | base subscriber id`,
    /// strictly ascending; empty in a base ([`crate::layout`], "Deltas").
    pub(crate) hidden: Array<u64>,
    /// A delta's base ([`crate::layout::base_id`]); 0 in a base.
    pub(crate) base: u64,
    /// The SipHash key of the `wide` index (the words' index holds its own copy).
    pub(crate) index_key: [u64; 2],
    /// The bytes every array above views.
    storage: Arc<Storage>,
    /// A number no other matcher built in this process has (a clone keeps it:
    /// same contents), so a [`Memo`] knows whose ids it holds. Not in the bytes.
    id: u64,
}

/// Source of [`FrozenMatcher::id`]; starts at 1 (0: a memo serving no matcher yet).
static NEXT_MATCHER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A [`Memo`]'s key of the literal child `(node, word)`.
fn child_key(node: u32, word: u32) -> u64 {
    u64::from(node) << 32 | u64::from(word)
}

/// Build-time sort keys of the wildcard children: after every literal word
/// rank (ranks are below [`UNRESOLVED`]), star before hash, as in preorder.
const STAR_KEY: u32 = u32::MAX - 1;
const HASH_KEY: u32 = u32::MAX;

/// Temporary interning by first appearance, re-numbered in text order at the end.
#[derive(Default)]
struct Interner<'a> {
    ids: HashMap<&'a str, u32>,
    texts: Vec<&'a str>,
}

impl<'a> Interner<'a> {
    fn with_capacity(count: usize) -> Self {
        Interner {
            ids: HashMap::with_capacity(count),
            texts: Vec::with_capacity(count),
        }
    }

    fn intern(&mut self, text: &'a str) -> u32 {
        let next = self.texts.len() as u32;
        *self.ids.entry(text).or_insert_with(|| {
            self.texts.push(text);
            next
        })
    }

    /// `(temporary id -> final id, interned texts in final order)`.
    fn finish(self) -> Result<(Vec<u32>, Texts), BuildError> {
        let order = sort_by_text(0..self.texts.len() as u32, |id| self.texts[id as usize]);
        let order: Vec<u32> = order.into_iter().map(|(_, id)| id).collect();
        let mut rank = vec![0u32; order.len()];
        let bytes = self.texts.iter().map(|t| t.len()).sum();
        let mut interned = Texts::with_capacity(order.len(), bytes);
        for (final_id, &temporary) in order.iter().enumerate() {
            rank[temporary as usize] = final_id as u32;
            // Texts are unique by construction, so only the size limits can refuse.
            if !interned.push(self.texts[temporary as usize]) {
                return Err(BuildError::TooLarge);
            }
        }
        Ok((rank, interned))
    }
}

/// `ids` sorted by `text(id)` in `str` order, each with its text's prefix key.
///
/// Compared first on the first 16 bytes as one big-endian integer
/// (zero-padded): integer order is byte order on the prefix, and equal
/// prefixes fall back to the whole text, so the order is exactly `str`'s.
/// Most words differ within 16 bytes, which saves a memcmp per comparison of
/// a million `tenant<i>` words. Equal prefixes mean the texts may be equal.
pub(crate) fn sort_by_text<'t>(ids: impl Iterator<Item = u32>, text: impl Fn(u32) -> &'t str) -> Vec<(u128, u32)> {
    let mut order: Vec<(u128, u32)> = ids.map(|id| (text_prefix(text(id)), id)).collect();
    order.sort_unstable_by(|(left_prefix, left), (right_prefix, right)| {
        left_prefix
            .cmp(right_prefix)
            .then_with(|| text(*left).cmp(text(*right)))
    });
    order
}

/// The first 16 bytes of `text`, zero-padded, as a big-endian integer.
fn text_prefix(text: &str) -> u128 {
    let mut prefix = [0u8; 16];
    let bytes = &text.as_bytes()[..text.len().min(16)];
    prefix[..bytes.len()].copy_from_slice(bytes);
    u128::from_be_bytes(prefix)
}

/// Builds a [`FrozenMatcher`] from any trie-shaped source: add children with
/// [`Builder::new_child`] (each `(parent, word)` at most once) and subscribers
/// with [`Builder::subscribe`], then [`Builder::finish`]. Texts are borrowed
/// until then, so a caller walking another trie copies no strings.
///
/// `finish` sorts only the *distinct* words and subscribers (their ids are in
/// text order, so equal contents give equal bytes), then each node's children
/// and subscribers, and numbers the nodes in preorder.
#[derive(Default)]
pub struct Builder<'a> {
    words: Interner<'a>,
    subscribers: Interner<'a>,
    /// (parent, temporary word id or STAR_KEY/HASH_KEY, child).
    children: Vec<(u32, u32, u32)>,
    /// (node, temporary subscriber id); duplicates allowed.
    ends: Vec<(u32, u32)>,
    /// Nodes so far, the root (0) included once `finish` runs.
    node_count: u32,
}

impl<'a> Builder<'a> {
    /// The root's temporary id.
    pub const ROOT: u32 = 0;

    /// A builder sized for about `pairs` subscriptions, so that interning a
    /// large source never re-hashes its tables while they grow.
    pub fn with_capacity(pairs: usize) -> Self {
        Builder {
            words: Interner::with_capacity(pairs),
            subscribers: Interner::with_capacity(pairs),
            children: Vec::with_capacity(pairs),
            ends: Vec::with_capacity(pairs),
            node_count: 0,
        }
    }

    fn key(&mut self, word: PatternWord<'a>) -> u32 {
        match word {
            PatternWord::Star => STAR_KEY,
            PatternWord::Hash => HASH_KEY,
            PatternWord::Literal(literal) => self.words.intern(literal),
        }
    }

    fn new_child_keyed(&mut self, parent: u32, key: u32) -> Result<u32, BuildError> {
        // Node ids stay below `UNRESOLVED`, which lookups use as a sentinel.
        let child = self
            .node_count
            .checked_add(1)
            .filter(|&id| id < UNRESOLVED)
            .ok_or(BuildError::TooLarge)?;
        self.node_count = child;
        self.children.push((parent, key, child));
        Ok(child)
    }

    /// A new child of `parent` under `word`. The caller must not add the same
    /// `(parent, word)` twice.
    pub fn new_child(&mut self, parent: u32, word: PatternWord<'a>) -> Result<u32, BuildError> {
        let key = self.key(word);
        self.new_child_keyed(parent, key)
    }

    /// `subscriber` holds the pattern that ends at `node` (duplicates are harmless).
    pub fn subscribe(&mut self, node: u32, subscriber: &'a str) -> Result<(), BuildError> {
        if subscriber.is_empty() {
            return Err(BuildError::EmptySubscriber);
        }
        let subscriber = self.subscribers.intern(subscriber);
        self.ends.push((node, subscriber));
        Ok(())
    }

    /// Add (pattern, subscriber) pairs, with one `(parent, word) -> child` map
    /// for every trie edge (no per-node allocations); duplicates are harmless.
    pub fn add_pairs<P, S>(&mut self, pairs: impl IntoIterator<Item = (&'a P, &'a S)>) -> Result<(), BuildError>
    where
        P: AsRef<str> + ?Sized + 'a,
        S: AsRef<str> + ?Sized + 'a,
    {
        let mut edge_map: HashMap<(u32, u32), u32> = HashMap::new();
        for (pattern, subscriber) in pairs {
            let mut node = Builder::ROOT;
            for word in split_words(pattern.as_ref()) {
                let key = self.key(PatternWord::parse(word));
                node = match edge_map.entry((node, key)) {
                    hashbrown::hash_map::Entry::Occupied(entry) => *entry.get(),
                    hashbrown::hash_map::Entry::Vacant(entry) => *entry.insert(self.new_child_keyed(node, key)?),
                };
            }
            self.subscribe(node, subscriber.as_ref())?;
        }
        Ok(())
    }

    /// [`Builder::finish`] as a delta over the base `base` (its [`crate::layout::base_id`]) that
    /// hides the base's pairs `hidden` (`node << 32 | subscriber id`, strictly ascending).
    pub fn finish_delta(self, hidden: Vec<u64>, base: u64) -> Result<FrozenMatcher, BuildError> {
        debug_assert!(hidden.windows(2).all(|pair| pair[0] < pair[1]));
        let mut parts = self.finish_parts()?;
        parts.hidden = hidden;
        parts.base = base;
        FrozenMatcher::assemble_parts(parts)
    }

    /// Lay the trie out: final ids in text order, children and subscribers as
    /// ranges, nodes in preorder.
    pub fn finish(self) -> Result<FrozenMatcher, BuildError> {
        FrozenMatcher::assemble_parts(self.finish_parts()?)
    }

    fn finish_parts(self) -> Result<Parts, BuildError> {
        let Builder {
            words,
            subscribers,
            children,
            ends,
            node_count,
        } = self;
        let (word_rank, words) = words.finish()?;
        let (subscriber_rank, subscribers) = subscribers.finish()?;
        let node_total = node_count as usize + 1;

        // Keep only nodes with a subscriber at or below them, so a source
        // with dead branches (a CS-trie tomb not yet compressed) freezes to
        // the same matcher as its pairs. Children are numbered after their
        // parents and pushed in that order, so one reverse pass suffices.
        let mut live = vec![false; node_total];
        for &(node, _) in &ends {
            live[node as usize] = true;
        }
        for &(parent, _, child) in children.iter().rev() {
            if live[child as usize] {
                live[parent as usize] = true;
            }
        }

        // Children of each node, contiguous and in preorder order (literal ranks, star, hash).
        let children: Vec<(u32, u32, u32)> = children
            .into_iter()
            .filter(|&(_, _, child)| live[child as usize])
            .map(|(parent, key, child)| {
                let key = if key >= STAR_KEY { key } else { word_rank[key as usize] };
                (parent, key, child)
            })
            .collect();
        let ends: Vec<(u32, u32)> = ends
            .into_iter()
            .map(|(node, subscriber)| (node, subscriber_rank[subscriber as usize]))
            .collect();
        if children.len() > u32::MAX as usize || ends.len() > u32::MAX as usize {
            return Err(BuildError::TooLarge);
        }
        let (child_start, children) = group_by_owner(node_total, children, |&(parent, _, _)| parent);
        let (subs_start, ends) = group_by_owner(node_total, ends, |&(node, _)| node);

        // Number the nodes in preorder: pop a node, push its children reversed.
        let mut order: Vec<u32> = Vec::with_capacity(node_total);
        let mut final_index = vec![NONE; node_total];
        let mut stack = vec![0u32];
        while let Some(built) = stack.pop() {
            final_index[built as usize] = order.len() as u32;
            order.push(built);
            let range = child_start[built as usize] as usize..child_start[built as usize + 1] as usize;
            stack.extend(children[range].iter().rev().map(|&(_, _, child)| child));
        }

        let mut nodes = Vec::with_capacity(node_total);
        let mut edges: Vec<Edge> = Vec::with_capacity(children.len());
        let mut subscriber_ids: Vec<u32> = Vec::with_capacity(ends.len());
        for &built in &order {
            let built = built as usize;
            let mut node = Node {
                first_edge: edges.len() as u32,
                subs_start: subscriber_ids.len() as u32,
                ..Node::EMPTY
            };
            for &(_, key, child) in &children[child_start[built] as usize..child_start[built + 1] as usize] {
                let child = final_index[child as usize];
                match key {
                    STAR_KEY => node.star = child,
                    HASH_KEY => node.hash = child,
                    word => edges.push(Edge { word, child }),
                }
            }
            node.edge_count = edges.len() as u32 - node.first_edge;
            let subs = &ends[subs_start[built] as usize..subs_start[built + 1] as usize];
            subscriber_ids.extend(subs.iter().map(|&(_, subscriber)| subscriber));
            node.subs_len = subs.len() as u32;
            nodes.push(node);
        }
        Ok(Parts {
            nodes,
            edges,
            pairs: subscriber_ids,
            words,
            subscribers,
            ..Parts::default()
        })
    }
}

impl FrozenMatcher {
    /// The matcher of parts laid out with every invariant of [`crate::layout`]
    /// (by [`Builder::finish`] or the CS-trie's freeze): written into one buffer,
    /// indices included, and viewed in place.
    pub(crate) fn assemble(
        nodes: Vec<Node>,
        edges: Vec<Edge>,
        subscriber_ids: Vec<u32>,
        words: Texts,
        subscribers: Texts,
    ) -> Result<Self, BuildError> {
        FrozenMatcher::assemble_parts(Parts {
            nodes,
            edges,
            pairs: subscriber_ids,
            words,
            subscribers,
            ..Parts::default()
        })
    }

    /// [`FrozenMatcher::assemble`] of all the parts, a delta's included.
    pub(crate) fn assemble_parts(parts: Parts) -> Result<Self, BuildError> {
        debug_assert!(!parts.nodes.is_empty());
        let storage = crate::layout::write(&parts)?;
        drop(parts);
        let layout = crate::layout::layout_of(storage.bytes()).expect("a written layout reads back");
        Ok(FrozenMatcher::view(Arc::new(storage), &layout))
    }

    /// The matcher whose bytes `storage` holds in `layout` (which the caller
    /// checked against them: written by [`crate::layout::write`] or validated
    /// by [`crate::codec`]).
    pub(crate) fn view(storage: Arc<Storage>, layout: &Layout) -> Self {
        let views = Views::of(&storage, layout);
        let (_, index_key, base, _) = crate::layout::read_counts(storage.bytes());
        FrozenMatcher {
            nodes: views.nodes,
            edges: views.edges,
            subscriber_ids: views.pairs,
            words: Interned {
                text: views.word_text,
                ends: views.word_ends,
                index: views.word_index,
                key: index_key,
            },
            subscribers: Interned {
                text: views.subscriber_text,
                ends: views.subscriber_ends,
                index: Array::view(&storage, 0, 0),
                key: index_key,
            },
            wide: views.wide,
            hidden: views.hidden,
            base,
            index_key,
            storage,
            id: NEXT_MATCHER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The matcher's bytes: its whole storage, in the layout of [`crate::layout`].
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Whether the bytes are a mapped file (shared through the page cache) rather than a heap copy.
    pub fn is_mapped(&self) -> bool {
        self.storage.is_mapped()
    }

    /// The matcher with no subscriptions.
    pub fn empty() -> Self {
        FrozenMatcher::assemble(
            vec![Node::EMPTY],
            Vec::new(),
            Vec::new(),
            Texts::default(),
            Texts::default(),
        )
        .expect("the empty matcher fits")
    }

    /// Build from (pattern, subscriber) pairs; duplicates are harmless.
    ///
    /// One pass interns the texts and records every trie edge
    /// ([`Builder::add_pairs`]); then [`Builder::finish`] lays the trie out.
    pub fn build<P, S>(pairs: impl IntoIterator<Item = (P, S)>) -> Result<Self, BuildError>
    where
        P: AsRef<str>,
        S: AsRef<str>,
    {
        let pairs: Vec<(P, S)> = pairs.into_iter().collect();
        let mut builder = Builder::with_capacity(pairs.len());
        builder.add_pairs(pairs.iter().map(|(pattern, subscriber)| (pattern, subscriber)))?;
        builder.finish()
    }

    /// Number of (pattern, subscriber) pairs.
    pub fn len(&self) -> usize {
        self.subscriber_ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.subscriber_ids.is_empty()
    }

    /// Number of distinct patterns (nodes where at least one pattern ends).
    pub fn pattern_count(&self) -> usize {
        self.nodes.iter().filter(|node| node.subs_len > 0).count()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn word_count(&self) -> usize {
        self.words.len()
    }

    pub fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// Text of subscriber id `id` (ids come from [`FrozenMatcher::lookup_ids`]).
    pub fn subscriber(&self, id: u32) -> &str {
        self.subscribers.get(id)
    }

    /// The id of word `text`, or [`NONE`] when no pattern has it.
    fn word_id(&self, text: &str, memo: Option<&mut Memo>) -> u32 {
        let Some(memo) = memo else {
            return self.words.find(text).unwrap_or(NONE);
        };
        let hash = hash_word(text);
        let at = memo.word_slot(hash);
        let slot = &mut memo.words[at];
        if slot.1 != NONE && slot.0 == hash && self.words.get(slot.1) == text {
            return slot.1;
        }
        let id = self.words.find(text).unwrap_or(NONE);
        if id != NONE {
            *slot = (hash, id);
        }
        id
    }

    fn literal_child(&self, index: u32, node: &Node, word: u32, memo: Option<&mut Memo>) -> Option<u32> {
        let Some(memo) = memo else {
            return self.literal_child_uncached(index, node, word);
        };
        let key = child_key(index, word);
        let at = memo.child_slot(key);
        let slot = &mut memo.children[at];
        if slot.0 != key {
            *slot = (key, self.literal_child_uncached(index, node, word).unwrap_or(NONE));
        }
        (slot.1 != NONE).then_some(slot.1)
    }

    pub(crate) fn literal_child_uncached(&self, index: u32, node: &Node, word: u32) -> Option<u32> {
        if node.edge_count > WIDE_FANOUT && !self.wide.is_empty() {
            return self.wide_child(index, node, word);
        }
        let start = node.first_edge as usize;
        let range = &self.edges[start..start + node.edge_count as usize];
        range
            .binary_search_by_key(&word, |edge| edge.word)
            .ok()
            .map(|i| range[i].child)
    }

    /// The literal child of wide node `index` under `word`, through the `wide` index. A slot counts
    /// only if its edge lies in the node's range and carries `word`, so whatever the slots hold the
    /// walk stays on the tree; the loop ends after one pass over them at most.
    fn wide_child(&self, index: u32, node: &Node, word: u32) -> Option<u32> {
        let slots = self.wide.len();
        let mask = slots - 1;
        let range = node.first_edge as usize..node.first_edge as usize + node.edge_count as usize;
        let mut at = home_slot(self.index_key, &wide_key(index, word), slots as u32) as usize;
        for _ in 0..slots {
            let edge = self.wide[at];
            if edge == EMPTY {
                return None;
            }
            if range.contains(&(edge as usize)) && self.edges[edge as usize].word == word {
                return Some(self.edges[edge as usize].child);
            }
            at = (at + 1) & mask;
        }
        None
    }

    /// Matching subscriber ids for `key`, ascending and unique, in `scratch.found`.
    pub fn lookup_ids<'s>(&self, key: &str, scratch: &'s mut Scratch) -> &'s [u32] {
        self.lookup_ids_hiding(key, scratch, &[])
    }

    /// [`FrozenMatcher::lookup_ids`] without the pairs in `hidden` (`node << 32 | subscriber id`,
    /// strictly ascending): a base under a delta ([`crate::layered`]).
    pub fn lookup_ids_hiding<'s>(&self, key: &str, scratch: &'s mut Scratch, hidden: &[u64]) -> &'s [u32] {
        let Scratch {
            word_spans,
            word_ids,
            stack,
            hash_low,
            found,
            states_visited,
            memo,
        } = scratch;
        if let Some(memo) = memo.as_deref_mut() {
            memo.serve(self);
        }
        *states_visited = 0;
        word_spans.clear();
        stack.clear();
        hash_low.clear();
        found.clear();
        if !key.is_empty() {
            split_spans(key.as_bytes(), word_spans);
        }
        word_ids.clear();
        word_ids.resize(word_spans.len(), UNRESOLVED);
        let end = word_spans.len();
        stack.push((0, 0));
        while let Some((index, position)) = stack.pop() {
            *states_visited += 1;
            let node = &self.nodes[index as usize];
            if position == end {
                let start = node.subs_start as usize;
                let ids = &self.subscriber_ids[start..start + node.subs_len as usize];
                if hidden.is_empty() {
                    found.extend_from_slice(ids);
                } else {
                    extend_visible(found, ids, index, hidden);
                }
            } else {
                let child = if node.edge_count == 0 {
                    None
                } else if node.edge_count <= SMALL_FANOUT && memo.is_none() {
                    // Comparing a few texts is cheaper than hashing the key word (with
                    // a memo, resolving it is a cache hit, and the edges' texts are not).
                    let (start, stop) = word_spans[position];
                    let text = &key[start..stop];
                    let first = node.first_edge as usize;
                    self.edges[first..first + node.edge_count as usize]
                        .iter()
                        .find(|edge| self.words.get(edge.word) == text)
                        .map(|edge| edge.child)
                } else {
                    let mut word = word_ids[position];
                    if word == UNRESOLVED {
                        let (start, stop) = word_spans[position];
                        word = self.word_id(&key[start..stop], memo.as_deref_mut());
                        word_ids[position] = word;
                    }
                    if word == NONE {
                        None
                    } else {
                        self.literal_child(index, node, word, memo.as_deref_mut())
                    }
                };
                if let Some(child) = child {
                    stack.push((child, position + 1));
                }
                if node.star != NONE {
                    stack.push((node.star, position + 1));
                }
            }
            if node.hash != NONE {
                // Enter the `#` child at every position not entered before.
                let low = hash_low.entry(node.hash, end + 1);
                if position < *low {
                    stack.extend((position..*low).map(|p| (node.hash, p)));
                    *low = position;
                }
            }
        }
        if found.len() > 1 {
            found.sort_unstable();
            found.dedup();
        }
        found
    }

    /// Matching subscribers for `key`, in ascending text order.
    pub fn lookup(&self, key: &str) -> Vec<&str> {
        let mut scratch = Scratch::default();
        self.lookup_ids(key, &mut scratch)
            .iter()
            .map(|&id| self.subscribers.get(id))
            .collect()
    }

    /// Every (pattern, subscriber) pair, in preorder of the patterns.
    pub fn subscriptions(&self) -> Vec<(String, &str)> {
        self.subscriptions_where(|_, _| true)
    }

    /// The (pattern, subscriber) pairs whose `(node, subscriber id)` passes `keep`, in preorder.
    pub fn subscriptions_where(&self, keep: impl Fn(u32, u32) -> bool) -> Vec<(String, &str)> {
        let mut pairs = Vec::with_capacity(self.subscriber_ids.len());
        // (node, depth, word that led here); `path` holds the words above.
        let mut stack: Vec<(u32, usize, Option<PatternWord<'_>>)> = vec![(0, 0, None)];
        let mut path: Vec<PatternWord<'_>> = Vec::new();
        while let Some((index, depth, word)) = stack.pop() {
            path.truncate(depth);
            if let Some(word) = word {
                path.push(word);
            }
            let node = &self.nodes[index as usize];
            if node.subs_len > 0 {
                let pattern = path
                    .iter()
                    .map(|word| match word {
                        PatternWord::Literal(text) => *text,
                        PatternWord::Star => crate::topic::STAR,
                        PatternWord::Hash => crate::topic::HASH,
                    })
                    .collect::<Vec<_>>()
                    .join(".");
                let start = node.subs_start as usize;
                for &id in &self.subscriber_ids[start..start + node.subs_len as usize] {
                    if keep(index, id) {
                        pairs.push((pattern.clone(), self.subscribers.get(id)));
                    }
                }
            }
            let depth = path.len();
            if node.hash != NONE {
                stack.push((node.hash, depth, Some(PatternWord::Hash)));
            }
            if node.star != NONE {
                stack.push((node.star, depth, Some(PatternWord::Star)));
            }
            let start = node.first_edge as usize;
            for edge in self.edges[start..start + node.edge_count as usize].iter().rev() {
                stack.push((edge.child, depth, Some(PatternWord::Literal(self.words.get(edge.word)))));
            }
        }
        pairs
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::topic::{pattern_words, words_match};

    use crate::rng::Rng;

    fn oracle(pairs: &[(String, String)], key: &str) -> Vec<String> {
        crate::fuzzing::expected(pairs, key)
            .into_iter()
            .map(String::from)
            .collect()
    }

    #[test]
    fn validity_table() {
        for &(pattern, key, expected) in crate::topic::validity() {
            let frozen = FrozenMatcher::build([(pattern, "s")]).unwrap();
            assert_eq!(!frozen.lookup(key).is_empty(), expected, "{pattern:?} vs {key:?}");
        }
    }

    #[test]
    fn agrees_with_words_match_on_random_sets() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..300 {
            let pairs: Vec<(String, String)> = (0..rng.below(12))
                .map(|_| (rng.topic(true), format!("s{}", rng.below(4))))
                .collect();
            let frozen = FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap();
            for _ in 0..20 {
                let key = rng.topic(false);
                let got: Vec<String> = frozen.lookup(&key).into_iter().map(String::from).collect();
                assert_eq!(got, oracle(&pairs, &key), "key {key:?} pairs {pairs:?}");
            }
            // Keys containing wildcard characters are plain text.
            let key = rng.topic(true);
            let got: Vec<String> = frozen.lookup(&key).into_iter().map(String::from).collect();
            assert_eq!(got, oracle(&pairs, &key));
            let mut expected: Vec<(String, String)> = pairs.clone();
            expected.sort();
            expected.dedup();
            let mut held: Vec<(String, String)> = frozen
                .subscriptions()
                .into_iter()
                .map(|(p, s)| (p, s.to_string()))
                .collect();
            held.sort();
            assert_eq!(held, expected);
            assert_eq!(frozen.len(), expected.len());
        }
    }

    #[test]
    fn word_spans_match_split_words() {
        let mut rng = Rng(21);
        let alphabet: &[&str] = &[".", "a", "é", "\u{2e80}", "..", "#", "\u{00ae}"];
        let mut spans = Vec::new();
        for _ in 0..3000 {
            let key: String = (0..1 + rng.below(40))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect();
            spans.clear();
            split_spans(key.as_bytes(), &mut spans);
            let words: Vec<&str> = spans.iter().map(|&(start, stop)| &key[start..stop]).collect();
            assert_eq!(words, split_words(&key), "{key:?}");
        }
    }

    #[test]
    fn many_hashes_stay_polynomial() {
        let pattern = vec!["#"; 15].join(".") + ".x";
        let frozen = FrozenMatcher::build([(pattern.as_str(), "s"), ("#.#.#.#.#.#.#.#", "t")]).unwrap();
        let key = vec!["a"; 31].join(".");
        assert_eq!(frozen.lookup(&key), vec!["t"]);
        assert!(!words_match(&pattern_words(&pattern), &split_words(&key)));
    }

    #[test]
    fn many_hash_nodes_switch_the_memo_to_a_map() {
        // More `#` nodes on one path than HashLow keeps in its linear list.
        let deep = vec!["#"; HashLow::LINEAR * 3].join(".") + ".x";
        let shallow = "#.a.#.x";
        let frozen = FrozenMatcher::build([(deep.as_str(), "deep"), (shallow, "shallow")]).unwrap();
        let mut key_words = vec!["a"; 60];
        assert!(frozen.lookup(&key_words.join(".")).is_empty());
        key_words.push("x");
        assert_eq!(frozen.lookup(&key_words.join(".")), vec!["deep", "shallow"]);
        assert_eq!(frozen.lookup("x"), vec!["deep"]);
    }

    #[test]
    fn build_is_canonical_and_rejects_empty_subscribers() {
        let a = FrozenMatcher::build([("x.*", "s1"), ("#", "s2"), ("x.*", "s1")]).unwrap();
        let b = FrozenMatcher::build([("#", "s2"), ("x.*", "s1")]).unwrap();
        assert_eq!(a.nodes[..], b.nodes[..]);
        assert_eq!(a.edges[..], b.edges[..]);
        assert_eq!(a.bytes(), b.bytes(), "equal pairs, equal bytes");
        assert_eq!(a.len(), 2);
        assert_eq!(a.pattern_count(), 2);
        assert_eq!(
            FrozenMatcher::build([("x", "")]).unwrap_err(),
            BuildError::EmptySubscriber
        );
        assert!(FrozenMatcher::empty().lookup("").is_empty());
    }

    /// Nodes past `WIDE_FANOUT` children are probed through the hash index,
    /// built by every constructor (built here, decoded, and frozen from a
    /// CS-trie), and agree with the oracle on hits and misses alike.
    #[test]
    fn wide_nodes_match_through_the_index_in_every_constructor() {
        let mut pairs: Vec<(String, String)> = (0..500)
            .map(|i| (format!("t{i}.orders.#"), format!("s{}", i % 7)))
            .collect();
        pairs.extend((0..200).map(|i| (format!("t{}.x{i}", i % 3), "w".to_owned())));
        pairs.push(("*.orders.#".to_owned(), "star".to_owned()));
        let built = FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap();
        let decoded = crate::codec::decode(&crate::codec::encode(&built)).unwrap();
        let trie = crate::cstrie::CsTrie::new();
        for (pattern, subscriber) in &pairs {
            trie.subscribe(pattern, subscriber);
        }
        let frozen = trie.snapshot().freeze().unwrap();
        // The root (500 tenants) and t0, t1, t2 (`orders` and ~67 `x` words each).
        let wide: Vec<u32> = built
            .nodes
            .iter()
            .map(|node| node.edge_count)
            .filter(|&count| count > WIDE_FANOUT)
            .collect();
        assert_eq!(wide, [500, 68, 68, 67]);
        for matcher in [&built, &decoded, &frozen] {
            let indexed = matcher.wide.iter().filter(|&&slot| slot != EMPTY).count();
            assert_eq!(indexed, 703, "every edge of the wide nodes is indexed");
            for key in [
                "t7.orders.z",
                "t499.orders",
                "t500.orders.z",
                "t2.x197",
                "t2.x198",
                "nope",
                "t1.x1.y",
            ] {
                let expected: Vec<String> = oracle(&pairs, key);
                let got: Vec<String> = matcher.lookup(key).into_iter().map(String::from).collect();
                assert_eq!(got, expected, "{key:?}");
            }
        }
    }

    /// Ids to texts, for comparing lookups of different matchers.
    fn texts(matcher: &FrozenMatcher, ids: &[u32]) -> Vec<String> {
        ids.iter().map(|&id| matcher.subscriber(id).to_owned()).collect()
    }

    #[test]
    fn a_batch_memo_agrees_with_uncached_lookups() {
        let mut rng = Rng(0x005E_ED0F_BA7C);
        // Wide nodes (the root and t0..t3 hold > WIDE_FANOUT literals), narrow ones, wildcards.
        let mut pairs: Vec<(String, String)> = (0..400)
            .map(|i| (format!("t{}.w{}.#", i % 4, i), format!("s{}", i % 9)))
            .collect();
        pairs.extend((0..300).map(|i| (format!("t{i}.*"), format!("u{i}"))));
        pairs.extend((0..150).map(|_| (rng.topic(true), format!("r{}", rng.below(20)))));
        let matcher = FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap();
        assert!(
            matcher
                .nodes
                .iter()
                .filter(|node| node.edge_count > WIDE_FANOUT)
                .count()
                >= 4
        );
        let mut keys: Vec<String> = (0..800)
            .map(|i| match i % 4 {
                0 => format!("t{}.w{}.x", rng.below(5), rng.below(450)),
                1 => format!("t{}.{}", rng.below(320), rng.below(3)),
                2 => rng.topic(false),
                _ => format!("absent{}.t{}", rng.below(50), rng.below(4)),
            })
            .collect();
        // Every key again, now with the memo warm. The smallest memo (64 slots)
        // makes most entries collide and be replaced.
        keys.extend(keys.clone());
        for mut batch in [Scratch::for_batch(1), Scratch::for_batch(keys.len())] {
            let mut uncached = Scratch::default();
            for key in &keys {
                let got = texts(&matcher, matcher.lookup_ids(key, &mut batch));
                let expected = texts(&matcher, matcher.lookup_ids(key, &mut uncached));
                assert_eq!(got, expected, "{key:?}");
                assert_eq!(got, oracle(&pairs, key), "{key:?}");
            }
        }
    }

    #[test]
    fn a_batch_memo_moved_to_another_matcher_forgets_the_first() {
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter().map(|&(p, s)| (p.to_owned(), s.to_owned())).collect()
        };
        // Word ids a=0, b=1, c=2 in both, but other node numbers: (root, b) is node 5 in the
        // first and node 3 in the second, where node 5 is `c`, a leaf.
        let first = pairs(&[("b.c", "one"), ("c.b", "two"), ("a.a.a.a", "pad")]);
        let second = pairs(&[("a.b", "x"), ("b.c", "y"), ("c", "z")]);
        let [first_matcher, second_matcher] =
            [&first, &second].map(|pairs| FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap());
        let mut scratch = Scratch::for_batch(8);
        for (matcher, pairs) in [(&first_matcher, &first), (&second_matcher, &second)] {
            for key in ["b.c", "c.b", "c", "a.b"] {
                let ids = matcher.lookup_ids(key, &mut scratch).to_vec();
                assert_eq!(texts(matcher, &ids), oracle(pairs, key), "{key:?}");
            }
        }
    }

    #[test]
    fn children_follow_parents() {
        let mut rng = Rng(7);
        let pairs: Vec<(String, String)> = (0..200).map(|i| (rng.topic(true), format!("s{i}"))).collect();
        let frozen = FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap();
        for (index, node) in frozen.nodes.iter().enumerate() {
            let start = node.first_edge as usize;
            let range = &frozen.edges[start..start + node.edge_count as usize];
            assert!(range.windows(2).all(|w| w[0].word < w[1].word));
            for child in range.iter().map(|e| e.child).chain([node.star, node.hash]) {
                assert!(child == NONE || child as usize > index);
            }
        }
    }
}
