//! The frozen matcher's bytes, which are also its memory: the format is read in place.
//!
//! A frozen matcher is one buffer in this layout, whether it was just built, decoded from a copy, or
//! mapped from a snapshot file that every process on a machine shares ([`crate::storage`]). Loading
//! one costs a validation pass ([`crate::codec::decode`]), never a rebuild.
//!
//! ```text
//! offset  size  field                   (all integers little-endian)
//! 0       8     magic "TOPICFRZ"
//! 8       2     format version (2)
//! 10      2     reserved, 0
//! 12      4     reserved, 0
//! 16      4     node_count        N >= 1 (node 0 is the root)
//! 20      4     edge_count        E, literal edges
//! 24      4     pair_count        P, (pattern, subscriber) pairs
//! 28      4     word_count        W
//! 32      4     subscriber_count  S
//! 36      4     word_slots        a power of two > W
//! 40      4     wide_slots        0, or a power of two > the wide nodes' edges
//! 44      4     hidden_count      H (a delta's hidden base pairs; 0 in a base)
//! 48      8     word_text_len     bytes of all words
//! 56      8     subscriber_text_len
//! 64      16    index_key         the SipHash-1-3 key of both indices (below)
//! 80      8     base              a delta's base (its `base_id`); 0: not a delta
//! 88      8     total_len         the whole matcher, trailer included
//! 96      16    reserved, 0
//! 112           sections, in this order, each starting at a multiple of 8 (zero padding between):
//!   nodes            N x Node {first_edge, edge_count, star, hash, subs_start, subs_len: u32}
//!   edges            E x Edge {word, child: u32}
//!   wide             wide_slots x u32: edge index or EMPTY
//!   pairs            P x u32 subscriber ids
//!   hidden           H x u64 (base node << 32 | base subscriber id), strictly ascending
//!   word_ends        W x u32: word i is word_text[end(i-1) .. end(i)]
//!   word_index       word_slots x u32: word id or EMPTY
//!   subscriber_ends  S x u32
//!   word_text        UTF-8, the words in id order
//!   subscriber_text  UTF-8, the subscribers in id order
//! trailer  CRC-32 (IEEE) of every byte before it, u32 | reserved u32, 0
//! ```
//!
//! # The structure
//!
//! * Words and subscribers are interned in strictly ascending text order (ids are ranks), so equal
//!   pair sets give equal bytes.
//! * Nodes form a tree rooted at 0: every child index is greater than its parent's, and every node but
//!   the root has exactly one parent. Node `i`'s literal children are `edges[first_edge ..][..
//!   edge_count]`, sorted by strictly ascending word id, and the edge ranges of nodes `0, 1, ..` tile
//!   `edges` in order; likewise the subscriber ranges tile `pairs`, each strictly ascending. `star`
//!   and `hash` are the `*` and `#` children, or [`NONE`].
//!
//! # The two indices
//!
//! Open addressing with linear probing, slot `sip13(index_key, bytes) & (slots - 1)`:
//!
//! * `word_index`: a word's UTF-8 bytes -> its id. Load at most 1/2.
//! * `wide`: for each node with more than [`WIDE_FANOUT`] literal children, `(node, word)` (as the 8
//!   bytes of `node << 32 | word`) -> the index of that edge in `edges`. A lookup accepts a slot only if
//!   the edge lies in the node's range and carries the word, so the index can speed a walk up but
//!   never lead it off the tree.
//!
//! `index_key` is derived from the words themselves (SipHash-1-3 under fixed keys of `word_text` and
//! then of `word_ends`), so building equal pairs gives equal bytes, and no one can aim words at one
//! probe chain: a word added to collide changes the key that places every word.
//!
//! # Deltas
//!
//! A delta is a matcher of the pairs added since a base plus `hidden`, the base's pairs removed since
//! (by the base's node and subscriber ids), and `base` = the base's [`base_id`]. Its lookups are
//! the base's minus the hidden pairs, plus its own.

use std::sync::Arc;

use crate::errors::BuildError;
use crate::prefetch::prefetch;
use crate::short_text::append;
use crate::siphash::sip13;
use crate::storage::{bytes_of, Array, Plain, Storage};

/// How many texts ahead a pass over texts in sorted order prefetches each one.
pub(crate) const PREFETCH_AHEAD: usize = 16;

pub const MAGIC: [u8; 8] = *b"TOPICFRZ";
pub const FORMAT_VERSION: u16 = 2;
pub const HEADER_LEN: usize = 112;
pub const TRAILER_LEN: usize = 8;

/// "No child" in [`Node::star`] and [`Node::hash`], and an empty index slot.
pub const NONE: u32 = u32::MAX;
/// An empty index slot.
pub const EMPTY: u32 = u32::MAX;

/// Texts per table are fewer than this (ids up to `u32::MAX - 2`).
pub const MAX_TEXTS: usize = (u32::MAX - 1) as usize;

/// Nodes with more literal children than this are in the `wide` index (part of the format).
pub const WIDE_FANOUT: u32 = 64;

/// The fixed keys `index_key` is derived under (see the module docs).
const KEY_OF_TEXT: [u64; 2] = [0x7472_6965_2d6b_6579, 0x746f_7069_632d_7274];
const KEY_OF_ENDS: [u64; 2] = [0x656e_6473_2d6b_6579, 0x7370_6172_6b2d_7472];

/// One trie node (a record of the `nodes` section).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// Literal children are `edges[first_edge .. first_edge + edge_count]`,
    /// sorted by strictly ascending word id.
    pub first_edge: u32,
    pub edge_count: u32,
    /// Child reached by a `*` pattern word, or [`NONE`]. Always > own index.
    pub star: u32,
    /// Child reached by a `#` pattern word, or [`NONE`]. Always > own index.
    pub hash: u32,
    /// Subscribers of the pattern ending here are
    /// `pairs[subs_start .. subs_start + subs_len]`, strictly ascending.
    pub subs_start: u32,
    pub subs_len: u32,
}

// SAFETY: repr(C) of six u32s: 24 bytes, no padding, alignment 4; every bit pattern is a Node.
unsafe impl Plain for Node {}

impl Node {
    pub(crate) const EMPTY: Node = Node {
        first_edge: 0,
        edge_count: 0,
        star: NONE,
        hash: NONE,
        subs_start: 0,
        subs_len: 0,
    };

    pub fn has_children(&self) -> bool {
        self.edge_count > 0 || self.star != NONE || self.hash != NONE
    }
}

/// A literal child: `word` is a word id, `child` a node index (> parent's).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub word: u32,
    pub child: u32,
}

// SAFETY: repr(C) of two u32s: 8 bytes, no padding, alignment 4.
unsafe impl Plain for Edge {}

/// The counts a header declares, from which every section's place follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub node_count: u32,
    pub edge_count: u32,
    pub pair_count: u32,
    pub word_count: u32,
    pub subscriber_count: u32,
    pub word_slots: u32,
    pub wide_slots: u32,
    pub hidden_count: u32,
    pub word_text_len: u64,
    pub subscriber_text_len: u64,
}

/// Byte offsets of every section (and the trailer, and the total) for some [`Counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub counts: Counts,
    pub nodes: usize,
    pub edges: usize,
    pub wide: usize,
    pub pairs: usize,
    pub hidden: usize,
    pub word_ends: usize,
    pub word_index: usize,
    pub subscriber_ends: usize,
    pub word_text: usize,
    pub subscriber_text: usize,
    pub trailer: usize,
    pub total: usize,
}

impl Layout {
    /// Where each section of `counts` lies; `None` when the sizes overflow the address space.
    pub fn of(counts: Counts) -> Option<Layout> {
        let mut at = HEADER_LEN;
        let mut place = |bytes: u64| -> Option<usize> {
            let offset = at;
            let end = offset.checked_add(usize::try_from(bytes).ok()?)?;
            at = end.checked_add(7)? & !7;
            Some(offset)
        };
        let c = counts;
        let size = |count: u32, width: usize| count as u64 * width as u64;
        let nodes = place(size(c.node_count, 24))?;
        let edges = place(size(c.edge_count, 8))?;
        let wide = place(size(c.wide_slots, 4))?;
        let pairs = place(size(c.pair_count, 4))?;
        let hidden = place(size(c.hidden_count, 8))?;
        let word_ends = place(size(c.word_count, 4))?;
        let word_index = place(size(c.word_slots, 4))?;
        let subscriber_ends = place(size(c.subscriber_count, 4))?;
        let word_text = place(c.word_text_len)?;
        let subscriber_text = place(c.subscriber_text_len)?;
        let trailer = at;
        let total = trailer.checked_add(TRAILER_LEN)?;
        Some(Layout {
            counts,
            nodes,
            edges,
            wide,
            pairs,
            hidden,
            word_ends,
            word_index,
            subscriber_ends,
            word_text,
            subscriber_text,
            trailer,
            total,
        })
    }
}

/// The slot where probing for `bytes` starts in an index of `slots` (a power of two) slots.
pub fn home_slot(key: [u64; 2], bytes: &[u8], slots: u32) -> u32 {
    (sip13(key, bytes) & u64::from(slots.wrapping_sub(1))) as u32
}

/// The `wide` index's key bytes of `(node, word)`.
pub fn wide_key(node: u32, word: u32) -> [u8; 8] {
    (u64::from(node) << 32 | u64::from(word)).to_le_bytes()
}

/// The slots of an index holding `count` entries at a load of at most 1/2 (at least one slot, so
/// there is always an empty one).
pub fn slots_for(count: u32) -> Option<u32> {
    count.checked_mul(2)?.max(1).checked_next_power_of_two()
}

/// How a delta names its base: the base's checksum and length, from its trailer and header.
pub fn base_id(bytes: &[u8]) -> u64 {
    let trailer = bytes.len().saturating_sub(TRAILER_LEN);
    let crc = bytes
        .get(trailer..trailer + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    u64::from(crc) << 32 | (bytes.len() as u64 & 0xFFFF_FFFF)
}

/// Where text `id` lies in a concatenation whose text `i` ends at `ends[i]` (text 0 starts at 0).
pub(crate) fn text_range(ends: &[u32], id: u32) -> std::ops::Range<usize> {
    let id = id as usize;
    let start = if id == 0 { 0 } else { ends[id - 1] as usize };
    start..ends[id] as usize
}

/// Texts in id order as they are laid out: the concatenation and the end offset of each.
#[derive(Debug, Clone, Default)]
pub struct Texts {
    pub text: String,
    pub ends: Vec<u32>,
}

impl Texts {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, id: u32) -> &str {
        &self.text[text_range(&self.ends, id)]
    }

    /// Room for `count` texts of `bytes` bytes in all.
    pub fn with_capacity(count: usize, bytes: usize) -> Self {
        Texts {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(count),
        }
    }

    /// Append `text` as the next id; `false` (and nothing added) unless it is strictly greater than
    /// the last text (so texts stay unique and ascending) and both the offsets and the ids fit
    /// (ids stay below [`MAX_TEXTS`]: lookups use the two highest values as sentinels).
    pub fn push(&mut self, text: &str) -> bool {
        let last = self.ends.len().checked_sub(1).map(|id| self.get(id as u32));
        if last.is_some_and(|last| last >= text)
            || self.text.len() + text.len() > u32::MAX as usize
            || self.ends.len() >= MAX_TEXTS
        {
            return false;
        }
        self.text.push_str(text);
        self.ends.push(self.text.len() as u32);
        true
    }

    /// The table of `texts`, which the caller guarantees are strictly ascending (a freeze, whose
    /// texts come sorted from a trie: no comparison per text as [`Texts::push`] makes).
    pub(crate) fn from_sorted(texts: &[&str]) -> Result<Self, BuildError> {
        let bytes: usize = texts.iter().map(|text| text.len()).sum();
        if bytes > u32::MAX as usize || texts.len() >= MAX_TEXTS {
            return Err(BuildError::TooLarge);
        }
        let mut table = Texts::with_capacity(texts.len(), bytes);
        for (id, text) in texts.iter().enumerate() {
            // Texts in sorted order lie anywhere in their source (a snapshot's nodes): each read missed.
            if let Some(ahead) = texts.get(id + PREFETCH_AHEAD) {
                prefetch(ahead.as_ptr());
            }
            debug_assert!(table.ends.is_empty() || table.get(id as u32 - 1) < *text);
            // Inline for short texts (sized up front): a call to memcpy each was 9% of a 1M freeze.
            append(&mut table.text, text);
            table.ends.push(table.text.len() as u32);
        }
        Ok(table)
    }
}

/// Everything a matcher holds, as built: [`write`] lays it out.
#[derive(Debug, Default)]
pub struct Parts {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub pairs: Vec<u32>,
    pub hidden: Vec<u64>,
    pub base: u64,
    pub words: Texts,
    pub subscribers: Texts,
}

/// The index key of `words` (see the module docs).
fn index_key(words: &Texts) -> [u64; 2] {
    [
        sip13(KEY_OF_TEXT, words.text.as_bytes()),
        sip13(KEY_OF_ENDS, bytes_of(&words.ends)),
    ]
}

/// Copy `values` to `out` at `offset` (their little-endian bytes: this target is little-endian).
fn put<T: Plain>(out: &mut [u8], offset: usize, values: &[T]) {
    let bytes = bytes_of(values);
    out[offset..offset + bytes.len()].copy_from_slice(bytes);
}

/// The layout the header of `bytes` declares, when it is exactly their length (no other check:
/// [`crate::codec::decode`] is the validating reader).
pub fn layout_of(bytes: &[u8]) -> Option<Layout> {
    let header = bytes.get(..HEADER_LEN)?;
    let (counts, _, _, total) = read_counts(header);
    Layout::of(counts).filter(|layout| layout.total == bytes.len() && total == bytes.len() as u64)
}

/// `parts` laid out as a matcher's bytes, indices and checksum included. The parts must hold the
/// invariants of the module docs (builders guarantee them; [`crate::codec::decode`] checks them), except
/// that each node's edge and subscriber ranges may lie anywhere in `edges` and `pairs`: they are written
/// out in node order.
pub fn write(parts: &Parts) -> Result<Storage, BuildError> {
    let too_large = |_| BuildError::TooLarge;
    let count = |len: usize| u32::try_from(len).map_err(too_large);
    let wide_edges: u64 = parts
        .nodes
        .iter()
        .filter(|node| node.edge_count > WIDE_FANOUT)
        .map(|node| u64::from(node.edge_count))
        .sum();
    let wide_slots = if wide_edges == 0 {
        0
    } else {
        slots_for(u32::try_from(wide_edges).map_err(too_large)?).ok_or(BuildError::TooLarge)?
    };
    let counts = Counts {
        node_count: count(parts.nodes.len())?,
        edge_count: count(parts.edges.len())?,
        pair_count: count(parts.pairs.len())?,
        word_count: count(parts.words.len())?,
        subscriber_count: count(parts.subscribers.len())?,
        word_slots: slots_for(count(parts.words.len())?).ok_or(BuildError::TooLarge)?,
        wide_slots,
        hidden_count: count(parts.hidden.len())?,
        word_text_len: parts.words.text.len() as u64,
        subscriber_text_len: parts.subscribers.text.len() as u64,
    };
    let layout = Layout::of(counts).ok_or(BuildError::TooLarge)?;
    let key = index_key(&parts.words);

    let mut words = vec![0u64; layout.total / 8].into_boxed_slice();
    // SAFETY: the u64 buffer holds exactly `total` bytes (`total` is a multiple of 8: every section
    // end is rounded up to 8 and the trailer is 8), and u8 needs no alignment.
    let out = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), layout.total) };

    out[..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    let c = counts;
    for (at, value) in [
        (16, c.node_count),
        (20, c.edge_count),
        (24, c.pair_count),
        (28, c.word_count),
        (32, c.subscriber_count),
        (36, c.word_slots),
        (40, c.wide_slots),
        (44, c.hidden_count),
    ] {
        out[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }
    for (at, value) in [
        (48, c.word_text_len),
        (56, c.subscriber_text_len),
        (64, key[0]),
        (72, key[1]),
        (80, parts.base),
        (88, layout.total as u64),
    ] {
        out[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }
    // Nodes in index order, each node's edges and subscribers copied to the next free place: the ranges then
    // tile their sections in node order, however the builder laid them out (a freeze writes them in its own
    // traversal order), so equal pairs give equal bytes.
    let (mut next_edge, mut next_pair) = (0usize, 0usize);
    let mut wide_nodes: Vec<(u32, Node)> = Vec::new();
    for (index, node) in parts.nodes.iter().enumerate() {
        let edges = &parts.edges[node.first_edge as usize..][..node.edge_count as usize];
        let pairs = &parts.pairs[node.subs_start as usize..][..node.subs_len as usize];
        put(out, layout.edges + next_edge * 8, edges);
        put(out, layout.pairs + next_pair * 4, pairs);
        let placed = Node {
            first_edge: next_edge as u32,
            subs_start: next_pair as u32,
            ..*node
        };
        put(out, layout.nodes + index * 24, &[placed]);
        if node.edge_count > WIDE_FANOUT {
            wide_nodes.push((index as u32, placed));
        }
        next_edge += edges.len();
        next_pair += pairs.len();
    }
    debug_assert_eq!((next_edge, next_pair), (parts.edges.len(), parts.pairs.len()));
    put(out, layout.hidden, &parts.hidden);
    put(out, layout.word_ends, &parts.words.ends);
    put(out, layout.subscriber_ends, &parts.subscribers.ends);
    put(out, layout.word_text, parts.words.text.as_bytes());
    put(out, layout.subscriber_text, parts.subscribers.text.as_bytes());

    let mut word_index = vec![EMPTY; c.word_slots as usize];
    for id in 0..c.word_count {
        insert(
            &mut word_index,
            home_slot(key, parts.words.get(id).as_bytes(), c.word_slots),
            id,
        );
    }
    put(out, layout.word_index, &word_index);
    drop(word_index);
    if wide_slots > 0 {
        let mut wide = vec![EMPTY; wide_slots as usize];
        for &(index, placed) in &wide_nodes {
            let built = &parts.nodes[index as usize];
            let edges = &parts.edges[built.first_edge as usize..][..built.edge_count as usize];
            for (at, edge) in edges.iter().enumerate() {
                let home = home_slot(key, &wide_key(index, edge.word), wide_slots);
                insert(&mut wide, home, placed.first_edge + at as u32);
            }
        }
        put(out, layout.wide, &wide);
    }

    let crc = crc32(&out[..layout.trailer]);
    out[layout.trailer..layout.trailer + 4].copy_from_slice(&crc.to_le_bytes());
    Ok(Storage::owned(words, layout.total))
}

/// Put `value` in the first empty slot from `home` on (the index has an empty slot: load <= 1/2).
fn insert(slots: &mut [u32], home: u32, value: u32) {
    let mask = slots.len() - 1;
    let mut at = home as usize;
    while slots[at] != EMPTY {
        at = (at + 1) & mask;
    }
    slots[at] = value;
}

/// CRC-32 (IEEE 802.3, as zlib's `crc32`).
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The sections of a matcher's storage as typed arrays (offsets from a layout already checked to
/// fit the storage).
pub struct Views {
    pub nodes: Array<Node>,
    pub edges: Array<Edge>,
    pub wide: Array<u32>,
    pub pairs: Array<u32>,
    pub hidden: Array<u64>,
    pub word_ends: Array<u32>,
    pub word_index: Array<u32>,
    pub subscriber_ends: Array<u32>,
    pub word_text: Array<u8>,
    pub subscriber_text: Array<u8>,
}

impl Views {
    /// Panics when `layout.total` is not the storage's length (a bug: layouts are checked first).
    pub fn of(storage: &Arc<Storage>, layout: &Layout) -> Views {
        assert_eq!(storage.bytes().len(), layout.total, "layout of another length");
        let c = &layout.counts;
        Views {
            nodes: Array::view(storage, layout.nodes, c.node_count as usize),
            edges: Array::view(storage, layout.edges, c.edge_count as usize),
            wide: Array::view(storage, layout.wide, c.wide_slots as usize),
            pairs: Array::view(storage, layout.pairs, c.pair_count as usize),
            hidden: Array::view(storage, layout.hidden, c.hidden_count as usize),
            word_ends: Array::view(storage, layout.word_ends, c.word_count as usize),
            word_index: Array::view(storage, layout.word_index, c.word_slots as usize),
            subscriber_ends: Array::view(storage, layout.subscriber_ends, c.subscriber_count as usize),
            word_text: Array::view(storage, layout.word_text, c.word_text_len as usize),
            subscriber_text: Array::view(storage, layout.subscriber_text, c.subscriber_text_len as usize),
        }
    }
}

/// The counts and index key in a header (of bytes at least [`HEADER_LEN`] long).
pub fn read_counts(header: &[u8]) -> (Counts, [u64; 2], u64, u64) {
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let counts = Counts {
        node_count: u32_at(16),
        edge_count: u32_at(20),
        pair_count: u32_at(24),
        word_count: u32_at(28),
        subscriber_count: u32_at(32),
        word_slots: u32_at(36),
        wide_slots: u32_at(40),
        hidden_count: u32_at(44),
        word_text_len: u64_at(48),
        subscriber_text_len: u64_at(56),
    };
    (counts, [u64_at(64), u64_at(72)], u64_at(80), u64_at(88))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn sections_are_aligned_and_in_order() {
        let layout = Layout::of(Counts {
            node_count: 3,
            edge_count: 1,
            pair_count: 3,
            word_count: 1,
            subscriber_count: 2,
            word_slots: 2,
            wide_slots: 0,
            hidden_count: 0,
            word_text_len: 5,
            subscriber_text_len: 9,
        })
        .unwrap();
        let offsets = [
            layout.nodes,
            layout.edges,
            layout.wide,
            layout.pairs,
            layout.hidden,
            layout.word_ends,
            layout.word_index,
            layout.subscriber_ends,
            layout.word_text,
            layout.subscriber_text,
            layout.trailer,
        ];
        assert!(offsets.iter().all(|offset| offset % 8 == 0));
        assert!(offsets.windows(2).all(|pair| pair[0] <= pair[1]));
        assert_eq!(layout.nodes, HEADER_LEN);
        assert_eq!(layout.edges, HEADER_LEN + 72);
        assert_eq!(layout.hidden, layout.pairs + 16, "3 ids, padded to 16 bytes");
        assert_eq!(layout.total, layout.subscriber_text + 16 + TRAILER_LEN);
        let huge = Counts {
            word_text_len: u64::MAX,
            ..Counts::default()
        };
        assert_eq!(Layout::of(huge), None);
    }

    #[test]
    fn index_slots_keep_the_load_at_most_a_half() {
        assert_eq!(slots_for(0), Some(1));
        assert_eq!(slots_for(1), Some(2));
        assert_eq!(slots_for(3), Some(8));
        assert_eq!(slots_for(4), Some(8));
        assert_eq!(slots_for(u32::MAX / 2 + 1), None);
    }
}
