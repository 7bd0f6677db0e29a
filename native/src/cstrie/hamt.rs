//! A persistent hash array mapped trie (HAMT) keyed by text: the branch
//! tables and subscriber sets of the CS-trie's C-nodes.
//!
//! # Why
//!
//! A C-node is immutable: a writer copies it, changes the copy and GCASes it
//! in. With a flat sorted table that copy is O(width), so loading a node with
//! a million distinct next words (`tenant<i>.orders.#`) or a million
//! subscribers of one pattern (`audit.#`) costs O(n²) in all. Here each table
//! is the Ctrie's own bitmap-indexed node, made persistent: a write copies
//! only the nodes on the path to its key, each at most 32 slots, and shares
//! everything else with the previous version.
//!
//! # Layout
//!
//! A key's 64-bit hash ([`hash_word`]) is consumed 5 bits per level, lowest
//! bits first. A bitmap node has one bit per 5-bit chunk value; its slots
//! hold, in bit order, either a leaf (key, hash, value) or the node for the
//! next 5 bits. When two distinct keys share all 64 bits, they sit together
//! in a collision node (a short unsorted list compared by text). The form is
//! canonical: no node below the root holds a single leaf (it is pulled up into
//! its parent's slot), and no node is empty, so equal contents give equal
//! depth and `remove` shrinks the trie back.
//!
//! # Complexity (n keys, w = 32)
//!
//! | operation | cost |
//! |---|---|
//! | `get` | O(log_w n) node visits, one text comparison |
//! | `insert` / `remove` (persistent) | O(w · log_w n) slots copied (Arc bumps, no text copied) |
//! | `len` | O(1) |
//! | iteration | O(n) |
//! | clone | O(1) (one Arc bump) |
//!
//! # Hashing
//!
//! `foldhash` with a seed drawn once per process: hostile keys cannot be
//! aimed at one chain without knowing the seed, and within a process a
//! word always hashes the same, so callers may hash a key word once and
//! probe many tables with it.

use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};

const BITS_PER_LEVEL: u32 = 5;
const CHUNK_MASK: u64 = (1 << BITS_PER_LEVEL) - 1;

/// The hash every table in this process uses for `word`.
pub(crate) fn hash_word(word: &str) -> u64 {
    static STATE: OnceLock<foldhash::fast::FixedState> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let seed = std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64);
            foldhash::fast::FixedState::with_seed(seed)
        })
        .hash_one(word)
}

#[cfg(test)]
thread_local! {
    /// Slots copied by persistent writes on this thread (tests only).
    static SLOTS_COPIED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Slots copied by persistent writes on this thread so far (tests only).
#[cfg(test)]
pub(crate) fn slots_copied() -> usize {
    SLOTS_COPIED.with(std::cell::Cell::get)
}

#[inline]
fn count_copied(_slots: usize) {
    #[cfg(test)]
    SLOTS_COPIED.with(|copied| copied.set(copied.get() + _slots));
}

struct Leaf<V> {
    hash: u64,
    key: Arc<str>,
    value: V,
}

enum Slot<V> {
    Leaf(Arc<Leaf<V>>),
    Node(Arc<Node<V>>),
}

impl<V> Clone for Slot<V> {
    fn clone(&self) -> Self {
        match self {
            Slot::Leaf(leaf) => Slot::Leaf(leaf.clone()),
            Slot::Node(node) => Slot::Node(node.clone()),
        }
    }
}

enum Node<V> {
    /// Invariant: `slots.len() == bitmap.count_ones()`, slots in ascending
    /// bit order; below the root never empty and never a lone leaf.
    Bitmap { bitmap: u32, slots: Box<[Slot<V>]> },
    /// Invariant: at least two leaves, all with hash `hash`, keys distinct.
    Collision { hash: u64, leaves: Box<[Arc<Leaf<V>>]> },
}

/// A persistent map from text to `V`. Cloning is O(1); writers build a new
/// map that shares all unchanged nodes with the old one.
pub(crate) struct Hamt<V> {
    /// Invariant: `None` exactly when `len == 0`.
    root: Option<Arc<Node<V>>>,
    len: usize,
}

impl<V> Clone for Hamt<V> {
    fn clone(&self) -> Self {
        Hamt {
            root: self.root.clone(),
            len: self.len,
        }
    }
}

impl<V> Default for Hamt<V> {
    fn default() -> Self {
        Hamt { root: None, len: 0 }
    }
}

fn chunk(hash: u64, shift: u32) -> u32 {
    ((hash >> shift) & CHUNK_MASK) as u32
}

/// Index of `bit`'s slot among the set bits below it.
fn slot_index(bitmap: u32, bit: u32) -> usize {
    (bitmap & ((1u32 << bit) - 1)).count_ones() as usize
}

fn copy_slots<V>(slots: &[Slot<V>]) -> Vec<Slot<V>> {
    count_copied(slots.len());
    slots.to_vec()
}

/// The smallest subtree holding two leaves with distinct keys, from `shift` on.
fn pair<V>(first: Arc<Leaf<V>>, second: Arc<Leaf<V>>, shift: u32) -> Node<V> {
    if first.hash == second.hash {
        return Node::Collision {
            hash: first.hash,
            leaves: Box::new([first, second]),
        };
    }
    let (a, b) = (chunk(first.hash, shift), chunk(second.hash, shift));
    if a == b {
        let below = pair(first, second, shift + BITS_PER_LEVEL);
        return Node::Bitmap {
            bitmap: 1 << a,
            slots: Box::new([Slot::Node(Arc::new(below))]),
        };
    }
    let slots = if a < b {
        [Slot::Leaf(first), Slot::Leaf(second)]
    } else {
        [Slot::Leaf(second), Slot::Leaf(first)]
    };
    Node::Bitmap {
        bitmap: (1 << a) | (1 << b),
        slots: Box::new(slots),
    }
}

/// What removing a key did to a subtree.
enum Removed<V> {
    Absent,
    /// The subtree is now empty.
    Empty,
    /// The subtree shrank to this single leaf (to be pulled up).
    Leaf(Arc<Leaf<V>>),
    Node(Arc<Node<V>>),
}

impl<V> Node<V> {
    fn get(&self, hash: u64, key: &str) -> Option<&V> {
        let mut node = self;
        let mut shift = 0;
        loop {
            match node {
                Node::Bitmap { bitmap, slots } => {
                    let bit = chunk(hash, shift);
                    if bitmap & (1 << bit) == 0 {
                        return None;
                    }
                    match &slots[slot_index(*bitmap, bit)] {
                        Slot::Leaf(leaf) => return (leaf.hash == hash && *leaf.key == *key).then_some(&leaf.value),
                        Slot::Node(child) => node = child,
                    }
                    shift += BITS_PER_LEVEL;
                }
                Node::Collision { leaves, .. } => {
                    return leaves.iter().find(|leaf| *leaf.key == *key).map(|leaf| &leaf.value);
                }
            }
        }
    }

    /// This subtree with `leaf` inserted (replacing a leaf with the same
    /// key), and whether the key is new.
    fn insert(&self, leaf: Arc<Leaf<V>>, shift: u32) -> (Node<V>, bool) {
        match self {
            Node::Bitmap { bitmap, slots } => {
                let bit = chunk(leaf.hash, shift);
                let at = slot_index(*bitmap, bit);
                if bitmap & (1 << bit) == 0 {
                    let mut copy = copy_slots(slots);
                    copy.insert(at, Slot::Leaf(leaf));
                    let node = Node::Bitmap {
                        bitmap: bitmap | (1 << bit),
                        slots: copy.into_boxed_slice(),
                    };
                    return (node, true);
                }
                let (slot, added) = match &slots[at] {
                    Slot::Leaf(held) if held.hash == leaf.hash && held.key == leaf.key => (Slot::Leaf(leaf), false),
                    Slot::Leaf(held) => (
                        Slot::Node(Arc::new(pair(held.clone(), leaf, shift + BITS_PER_LEVEL))),
                        true,
                    ),
                    Slot::Node(child) => {
                        let (child, added) = child.insert(leaf, shift + BITS_PER_LEVEL);
                        (Slot::Node(Arc::new(child)), added)
                    }
                };
                let mut copy = copy_slots(slots);
                copy[at] = slot;
                let node = Node::Bitmap {
                    bitmap: *bitmap,
                    slots: copy.into_boxed_slice(),
                };
                (node, added)
            }
            Node::Collision { hash, leaves } => {
                count_copied(leaves.len());
                let mut copy = leaves.to_vec();
                let added = match copy.iter().position(|held| held.key == leaf.key) {
                    Some(at) => {
                        copy[at] = leaf;
                        false
                    }
                    None => {
                        copy.push(leaf);
                        true
                    }
                };
                let node = Node::Collision {
                    hash: *hash,
                    leaves: copy.into_boxed_slice(),
                };
                (node, added)
            }
        }
    }

    fn remove(&self, hash: u64, key: &str, shift: u32) -> Removed<V> {
        match self {
            Node::Bitmap { bitmap, slots } => {
                let bit = chunk(hash, shift);
                if bitmap & (1 << bit) == 0 {
                    return Removed::Absent;
                }
                let at = slot_index(*bitmap, bit);
                let replacement = match &slots[at] {
                    Slot::Leaf(held) if held.hash == hash && *held.key == *key => None,
                    Slot::Leaf(_) => return Removed::Absent,
                    Slot::Node(child) => match child.remove(hash, key, shift + BITS_PER_LEVEL) {
                        Removed::Absent => return Removed::Absent,
                        Removed::Empty => None,
                        Removed::Leaf(leaf) => Some(Slot::Leaf(leaf)),
                        Removed::Node(node) => Some(Slot::Node(node)),
                    },
                };
                let mut copy = copy_slots(slots);
                let bitmap = match replacement {
                    Some(slot) => {
                        copy[at] = slot;
                        *bitmap
                    }
                    None => {
                        copy.remove(at);
                        bitmap & !(1 << bit)
                    }
                };
                match (copy.len(), copy.first()) {
                    (0, _) => Removed::Empty,
                    (1, Some(Slot::Leaf(leaf))) => Removed::Leaf(leaf.clone()),
                    _ => Removed::Node(Arc::new(Node::Bitmap {
                        bitmap,
                        slots: copy.into_boxed_slice(),
                    })),
                }
            }
            Node::Collision { hash: held, leaves } => {
                let Some(at) = leaves.iter().position(|leaf| *leaf.key == *key) else {
                    return Removed::Absent;
                };
                count_copied(leaves.len());
                let mut copy = leaves.to_vec();
                copy.remove(at);
                match copy.len() {
                    1 => Removed::Leaf(copy.remove(0)),
                    _ => Removed::Node(Arc::new(Node::Collision {
                        hash: *held,
                        leaves: copy.into_boxed_slice(),
                    })),
                }
            }
        }
    }
}

impl<V: Clone> Clone for Node<V> {
    /// A copy of this node's slots (counted): what `Arc::make_mut` does to a
    /// node it does not own alone.
    fn clone(&self) -> Self {
        match self {
            Node::Bitmap { bitmap, slots } => Node::Bitmap {
                bitmap: *bitmap,
                slots: copy_slots(slots).into_boxed_slice(),
            },
            Node::Collision { hash, leaves } => {
                count_copied(leaves.len());
                Node::Collision {
                    hash: *hash,
                    leaves: leaves.clone(),
                }
            }
        }
    }
}

/// The order in which [`build`] wants leaves: the hash's 5-bit chunks from
/// the root's down, most significant first, so that at every level the leaves
/// of one slot are contiguous and the slots come in ascending chunk order.
fn build_order(hash: u64) -> u64 {
    let mut order = 0;
    let mut shift = 0;
    while shift + BITS_PER_LEVEL <= 64 {
        order = (order << BITS_PER_LEVEL) | u64::from(chunk(hash, shift));
        shift += BITS_PER_LEVEL;
    }
    // The last level has the 4 bits left over (64 = 12 x 5 + 4).
    (order << (64 - shift)) | (hash >> shift)
}

/// The canonical subtree of `leaves` (non-empty, distinct keys, in
/// [`build_order`]) from `shift` on: a lone leaf as a leaf slot, equal hashes
/// as a collision node, otherwise a bitmap node with one slot per chunk.
/// Every node is allocated once at its final size.
fn build<V>(leaves: &[Arc<Leaf<V>>], range: std::ops::Range<usize>, shift: u32) -> Slot<V> {
    if range.len() == 1 {
        return Slot::Leaf(leaves[range.start].clone());
    }
    let group = &leaves[range.clone()];
    if group[0].hash == group[group.len() - 1].hash {
        // Sorted by hash chunks, so equal first and last means all equal.
        return Slot::Node(Arc::new(Node::Collision {
            hash: group[0].hash,
            leaves: group.to_vec().into_boxed_slice(),
        }));
    }
    Slot::Node(Arc::new(build_bitmap(leaves, range, shift)))
}

/// The runs of `leaves[range]` (in [`build_order`]) that share their chunk
/// at `shift`: `(chunk, run)`, in ascending chunk order.
fn chunk_runs<V>(
    leaves: &[Arc<Leaf<V>>],
    range: std::ops::Range<usize>,
    shift: u32,
) -> impl Iterator<Item = (u32, std::ops::Range<usize>)> + '_ {
    let mut start = range.start;
    std::iter::from_fn(move || {
        if start >= range.end {
            return None;
        }
        let bit = chunk(leaves[start].hash, shift);
        let mut end = start + 1;
        while end < range.end && chunk(leaves[end].hash, shift) == bit {
            end += 1;
        }
        let run = start..end;
        start = end;
        Some((bit, run))
    })
}

/// The bitmap node of `leaves[range]` at `shift` (at least two distinct hashes).
fn build_bitmap<V>(leaves: &[Arc<Leaf<V>>], range: std::ops::Range<usize>, shift: u32) -> Node<V> {
    let mut bitmap = 0u32;
    let mut slots = Vec::new();
    for (bit, run) in chunk_runs(leaves, range, shift) {
        bitmap |= 1 << bit;
        slots.push(build(leaves, run, shift + BITS_PER_LEVEL));
    }
    Node::Bitmap {
        bitmap,
        slots: slots.into_boxed_slice(),
    }
}

/// `node` with `leaves[range]` (distinct keys, in [`build_order`]) merged in,
/// new leaves replacing held ones with the same key. Shared subtrees that
/// no new leaf reaches are kept as they are; every node on the way to a new
/// leaf is rebuilt once, at its final size. Adds the new keys to `added`.
fn merge<V>(
    node: &Arc<Node<V>>,
    leaves: &[Arc<Leaf<V>>],
    range: std::ops::Range<usize>,
    shift: u32,
    added: &mut usize,
) -> Arc<Node<V>> {
    let Node::Bitmap { bitmap, slots } = &**node else {
        // A collision node (a handful of leaves): rebuild it with the newcomers.
        return match rebuild_with(node_leaves(node), leaves, range, shift, added) {
            Slot::Node(node) => node,
            Slot::Leaf(_) => unreachable!("a collision node and newcomers make at least two leaves"),
        };
    };
    let mut merged_bitmap = *bitmap;
    let mut merged = Vec::with_capacity(slots.len() + 1);
    let mut held = slots.iter();
    let mut held_bits = *bitmap;
    for (bit, run) in chunk_runs(leaves, range, shift) {
        // Held slots below this chunk are kept as they are.
        while held_bits != 0 && held_bits.trailing_zeros() < bit {
            merged.push(held.next().expect("one slot per bit").clone());
            held_bits &= held_bits - 1;
        }
        let slot = if held_bits & (1 << bit) != 0 {
            held_bits &= !(1 << bit);
            match held.next().expect("one slot per bit") {
                Slot::Node(child) => Slot::Node(merge(child, leaves, run, shift + BITS_PER_LEVEL, added)),
                Slot::Leaf(leaf) => rebuild_with(vec![leaf.clone()], leaves, run, shift + BITS_PER_LEVEL, added),
            }
        } else {
            *added += run.len();
            merged_bitmap |= 1 << bit;
            build(leaves, run, shift + BITS_PER_LEVEL)
        };
        merged.push(slot);
    }
    merged.extend(held.cloned());
    // The held node's slots are what this copies; the rest are new.
    count_copied(slots.len());
    Arc::new(Node::Bitmap {
        bitmap: merged_bitmap,
        slots: merged.into_boxed_slice(),
    })
}

fn node_leaves<V>(node: &Node<V>) -> Vec<Arc<Leaf<V>>> {
    match node {
        Node::Collision { leaves, .. } => leaves.to_vec(),
        Node::Bitmap { .. } => unreachable!("only collision nodes are taken apart"),
    }
}

/// The subtree of the `held` leaves plus `leaves[range]` (a newcomer replaces
/// a held leaf with its key), from `shift` on.
fn rebuild_with<V>(
    held: Vec<Arc<Leaf<V>>>,
    leaves: &[Arc<Leaf<V>>],
    range: std::ops::Range<usize>,
    shift: u32,
    added: &mut usize,
) -> Slot<V> {
    let newcomers = &leaves[range];
    let held_count = held.len();
    let kept: Vec<Arc<Leaf<V>>> = held
        .into_iter()
        .filter(|old| !newcomers.iter().any(|new| new.hash == old.hash && new.key == old.key))
        .collect();
    *added += newcomers.len() - (held_count - kept.len());
    let mut all: Vec<Arc<Leaf<V>>> = kept.into_iter().chain(newcomers.iter().cloned()).collect();
    all.sort_by_key(|leaf| build_order(leaf.hash));
    build(&all, 0..all.len(), shift)
}

impl<V: Clone> Hamt<V> {
    /// A map with every binding of `entries` added (replacing equal keys; a
    /// later entry wins over an earlier one), and how many keys were new.
    ///
    /// The entries are sorted once by their hash chunks ([`build_order`]) and
    /// merged in one pass down the trie: a node that gains leaves is rebuilt
    /// once at its final size, a subtree that gains none is shared untouched,
    /// and a slot that held nothing gets a subtree built bottom-up. So k
    /// entries copy O(k + 32 · log32 n) slots and allocate each new node
    /// once, where k separate `insert`s would copy O(32 · k · log32 n).
    pub(crate) fn insert_many(&self, entries: impl IntoIterator<Item = (Arc<str>, V)>) -> (Hamt<V>, usize) {
        let entries = entries.into_iter();
        let mut keyed: Vec<(u64, u32, Arc<Leaf<V>>)> = Vec::with_capacity(entries.size_hint().0);
        for (position, (key, value)) in entries.enumerate() {
            let hash = hash_word(&key);
            keyed.push((build_order(hash), position as u32, Arc::new(Leaf { hash, key, value })));
        }
        if keyed.is_empty() {
            return (self.clone(), 0);
        }
        // Input position breaks ties, so of two equal keys (equal hashes, adjacent
        // unless a full-hash collision interleaves them) the later one is kept.
        keyed.sort_unstable_by_key(|&(order, position, _)| (order, position));
        let mut leaves: Vec<Arc<Leaf<V>>> = Vec::with_capacity(keyed.len());
        let mut run_start = 0;
        for (order, _, leaf) in keyed {
            if leaves
                .last()
                .is_some_and(|last: &Arc<Leaf<V>>| build_order(last.hash) != order)
            {
                run_start = leaves.len();
            }
            // Within a run of one hash, a later equal key replaces the earlier one.
            match leaves[run_start..].iter().position(|held| held.key == leaf.key) {
                Some(at) => leaves[run_start + at] = leaf,
                None => leaves.push(leaf),
            }
        }
        let mut added = 0;
        let end = leaves.len();
        let root = match &self.root {
            None => {
                added = end;
                match build(&leaves, 0..end, 0) {
                    Slot::Node(node) if matches!(*node, Node::Bitmap { .. }) => node,
                    // A lone leaf or a collision node sits in a one-slot root.
                    slot => Arc::new(Node::Bitmap {
                        bitmap: 1 << chunk(leaves[0].hash, 0),
                        slots: Box::new([slot]),
                    }),
                }
            }
            Some(root) => merge(root, &leaves, 0..end, 0, &mut added),
        };
        (
            Hamt {
                root: Some(root),
                len: self.len + added,
            },
            added,
        )
    }
}

impl<V> Hamt<V> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        self.get_hashed(hash_word(key), key)
    }

    /// `get` with the key's [`hash_word`] computed by the caller.
    pub(crate) fn get_hashed(&self, hash: u64, key: &str) -> Option<&V> {
        self.root.as_deref()?.get(hash, key)
    }

    /// A map with `key` bound to `value` (replacing any binding).
    pub(crate) fn insert(&self, key: Arc<str>, value: V) -> Hamt<V> {
        let leaf = Arc::new(Leaf {
            hash: hash_word(&key),
            key,
            value,
        });
        match &self.root {
            None => Hamt {
                root: Some(Arc::new(Node::Bitmap {
                    bitmap: 1 << chunk(leaf.hash, 0),
                    slots: Box::new([Slot::Leaf(leaf)]),
                })),
                len: 1,
            },
            Some(root) => {
                let (root, added) = root.insert(leaf, 0);
                Hamt {
                    root: Some(Arc::new(root)),
                    len: self.len + usize::from(added),
                }
            }
        }
    }

    /// A map without `key`, or `None` when `key` is absent.
    pub(crate) fn remove(&self, key: &str) -> Option<Hamt<V>> {
        let root = self.root.as_ref()?;
        let root = match root.remove(hash_word(key), key, 0) {
            Removed::Absent => return None,
            Removed::Empty => None,
            Removed::Leaf(leaf) => Some(Arc::new(Node::Bitmap {
                bitmap: 1 << chunk(leaf.hash, 0),
                slots: Box::new([Slot::Leaf(leaf)]),
            })),
            Removed::Node(node) => Some(node),
        };
        Some(Hamt {
            root,
            len: self.len - 1,
        })
    }

    /// Every binding, in hash order (not text order).
    pub(crate) fn iter(&self) -> Iter<'_, V> {
        let mut iter = Iter {
            path: std::array::from_fn(|_| [].iter()),
            depth: 0,
            leaves: [].iter(),
        };
        if let Some(root) = self.root.as_deref() {
            iter.enter(root);
        }
        iter
    }

    /// Take this map apart, handing every value it owns alone to `take`.
    /// Nodes and leaves shared with other maps are only released. Iterative,
    /// so a value that owns a map that owns a value ... (a very deep trie)
    /// can be dismantled without recursion by a caller that loops.
    pub(crate) fn dismantle(self, mut take: impl FnMut(V)) {
        let mut pending: Vec<Arc<Node<V>>> = self.root.into_iter().collect();
        let mut take_leaf = |leaf: Arc<Leaf<V>>| {
            if let Some(leaf) = Arc::into_inner(leaf) {
                take(leaf.value);
            }
        };
        while let Some(node) = pending.pop() {
            let Some(node) = Arc::into_inner(node) else { continue };
            match node {
                Node::Bitmap { slots, .. } => {
                    for slot in slots.into_vec() {
                        match slot {
                            Slot::Leaf(leaf) => take_leaf(leaf),
                            Slot::Node(child) => pending.push(child),
                        }
                    }
                }
                Node::Collision { leaves, .. } => leaves.into_vec().into_iter().for_each(&mut take_leaf),
            }
        }
    }
}

/// Bitmap levels a 64-bit hash allows: shifts 0, 5, ..., 60. Two distinct
/// hashes differ in some bit below 64, so [`pair`] never goes deeper; only a
/// collision node (which has no children) can sit below the last level.
const MAX_DEPTH: usize = 64usize.div_ceil(BITS_PER_LEVEL as usize);

/// Iterator over a [`Hamt`]'s bindings: a depth-first walk keeping one slot
/// iterator per level, inline (a freeze iterates every C-node's table, so a
/// heap allocation per iteration would dominate small tables).
pub(crate) struct Iter<'a, V> {
    /// Invariant: `path[..depth]` are the slot iterators of the bitmap nodes
    /// from the root down to the one being visited; `depth <= MAX_DEPTH`
    /// because each entry is one level deeper than the one before it.
    path: [std::slice::Iter<'a, Slot<V>>; MAX_DEPTH],
    depth: usize,
    /// The collision node being visited, if any (it is always a leaf level).
    leaves: std::slice::Iter<'a, Arc<Leaf<V>>>,
}

impl<'a, V> Iter<'a, V> {
    fn enter(&mut self, node: &'a Node<V>) {
        match node {
            Node::Bitmap { slots, .. } => {
                self.path[self.depth] = slots.iter();
                self.depth += 1;
            }
            Node::Collision { leaves, .. } => self.leaves = leaves.iter(),
        }
    }
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (&'a Arc<str>, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(leaf) = self.leaves.next() {
                return Some((&leaf.key, &leaf.value));
            }
            let level = self.depth.checked_sub(1)?;
            match self.path[level].next() {
                Some(Slot::Leaf(leaf)) => return Some((&leaf.key, &leaf.value)),
                Some(Slot::Node(node)) => self.enter(node),
                None => self.depth = level,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn node_depth<V>(node: &Node<V>) -> usize {
        match node {
            Node::Bitmap { slots, .. } => {
                1 + slots
                    .iter()
                    .map(|slot| match slot {
                        Slot::Leaf(_) => 0,
                        Slot::Node(child) => node_depth(child),
                    })
                    .max()
                    .unwrap_or(0)
            }
            Node::Collision { .. } => 1,
        }
    }

    /// Every invariant of the layout, checked on a whole map.
    fn check<V>(map: &Hamt<V>) {
        check_shape(map, true);
    }

    /// `check`, optionally for leaves whose hashes a test forced (not `hash_word`'s).
    fn check_shape<V>(map: &Hamt<V>, real_hashes: bool) {
        fn walk<V>(node: &Node<V>, shift: u32, prefix: u64, is_root: bool, real_hashes: bool) -> usize {
            match node {
                Node::Bitmap { bitmap, slots } => {
                    assert_eq!(slots.len(), bitmap.count_ones() as usize);
                    if !is_root {
                        assert!(!slots.is_empty());
                        assert!(
                            !(slots.len() == 1 && matches!(slots[0], Slot::Leaf(_))),
                            "lone leaf below root"
                        );
                    }
                    let bits: Vec<u32> = (0..32).filter(|bit| bitmap & (1 << bit) != 0).collect();
                    bits.iter()
                        .zip(slots.iter())
                        .map(|(&bit, slot)| {
                            let prefix = prefix | (u64::from(bit) << shift);
                            let low = (1u64 << (shift + BITS_PER_LEVEL).min(63)) - 1;
                            match slot {
                                Slot::Leaf(leaf) => {
                                    if real_hashes {
                                        assert_eq!(leaf.hash, hash_word(&leaf.key));
                                    }
                                    assert_eq!(leaf.hash & low, prefix & low, "leaf in the wrong slot");
                                    1
                                }
                                Slot::Node(child) => walk(child, shift + BITS_PER_LEVEL, prefix, false, real_hashes),
                            }
                        })
                        .sum()
                }
                Node::Collision { hash, leaves } => {
                    assert!(leaves.len() >= 2);
                    assert!(leaves.iter().all(|leaf| leaf.hash == *hash));
                    leaves.len()
                }
            }
        }
        let counted = map
            .root
            .as_deref()
            .map_or(0, |root| walk(root, 0, 0, true, real_hashes));
        assert_eq!(counted, map.len);
        assert_eq!(map.root.is_none(), map.len == 0);
    }

    #[test]
    fn agrees_with_a_btreemap_under_random_inserts_and_removes() {
        let mut model = BTreeMap::new();
        let mut map: Hamt<u32> = Hamt::default();
        let mut versions = Vec::new();
        let mut state = 0x1234_5678_u64;
        for step in 0..20_000u32 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = format!("k{}", (state >> 33) % 3_000);
            if (state >> 20).is_multiple_of(3) {
                assert_eq!(map.remove(&key).is_some(), model.remove(&key).is_some());
                if let Some(next) = map.remove(&key) {
                    map = next;
                }
            } else {
                map = map.insert(Arc::from(key.as_str()), step);
                model.insert(key, step);
            }
            if step % 2_000 == 0 {
                check(&map);
                versions.push((map.clone(), model.clone()));
            }
        }
        check(&map);
        // Persistence: every older version still holds exactly what it held.
        for (old, old_model) in versions {
            let held: BTreeMap<String, u32> = old.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            assert_eq!(held, old_model);
            for (key, value) in &old_model {
                assert_eq!(old.get(key), Some(value));
            }
        }
        // Removing everything shrinks back to nothing.
        for key in model.keys() {
            map = map.remove(key).expect("present");
        }
        check(&map);
        assert!(map.root.is_none() && map.is_empty());
    }

    #[test]
    fn insert_many_agrees_with_inserts_and_leaves_the_old_map_alone() {
        let mut base: Hamt<u32> = Hamt::default();
        for i in 0..5_000u32 {
            base = base.insert(Arc::from(format!("k{i}").as_str()), i);
        }
        let snapshot: Vec<(String, u32)> = base.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let entries: Vec<(Arc<str>, u32)> = (2_500..12_500u32)
            .map(|i| (Arc::from(format!("k{i}").as_str()), i + 1))
            .chain([(Arc::from("k1"), 7), (Arc::from("k1"), 8)])
            .collect();
        let before = slots_copied();
        let (bulk, added) = base.insert_many(entries.iter().cloned());
        let bulk_copies = slots_copied() - before;
        let mut one_by_one = base.clone();
        for (key, value) in &entries {
            one_by_one = one_by_one.insert(key.clone(), *value);
        }
        assert_eq!(added, 7_500);
        check(&bulk);
        let held = |map: &Hamt<u32>| map.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>();
        assert_eq!(held(&bulk), held(&one_by_one));
        assert_eq!(bulk.get("k1"), Some(&8), "the later entry wins");
        let unchanged: Vec<(String, u32)> = base.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(unchanged, snapshot, "the old map is persistent");
        // Each shared node is copied at most once, not once per entry.
        fn slots<V>(node: &Node<V>) -> usize {
            match node {
                Node::Bitmap { slots: held, .. } => {
                    held.len()
                        + held
                            .iter()
                            .map(|slot| match slot {
                                Slot::Node(child) => slots(child),
                                Slot::Leaf(_) => 0,
                            })
                            .sum::<usize>()
                }
                Node::Collision { leaves, .. } => leaves.len(),
            }
        }
        let shared = slots(base.root.as_deref().unwrap());
        assert!(
            bulk_copies <= shared,
            "{bulk_copies} slots copied, the old map has {shared}"
        );
    }

    #[test]
    fn bulk_merges_into_collision_nodes_and_splits_them() {
        let leaf = |key: &str, hash: u64, value: u32| {
            Arc::new(Leaf {
                hash,
                key: Arc::from(key),
                value,
            })
        };
        let map = Hamt {
            root: Some(Arc::new(Node::Bitmap {
                bitmap: 1 << 7,
                slots: Box::new([Slot::Node(Arc::new(pair(leaf("a", 7, 1), leaf("b", 7, 2), 5)))]),
            })),
            len: 2,
        };
        // "a" replaced, "c" joins the collision, "d" shares 40 low bits with it
        // (so the collision node must become a bitmap path), "e" goes elsewhere.
        let mut newcomers = vec![
            leaf("a", 7, 9),
            leaf("c", 7, 3),
            leaf("d", 7 | 1 << 40, 4),
            leaf("e", 3, 5),
        ];
        newcomers.sort_by_key(|leaf| build_order(leaf.hash));
        let mut added = 0;
        let root = merge(
            map.root.as_ref().unwrap(),
            &newcomers,
            0..newcomers.len(),
            0,
            &mut added,
        );
        assert_eq!(added, 3);
        let merged = Hamt {
            root: Some(root),
            len: 2 + added,
        };
        check_shape(&merged, false);
        for (key, hash, value) in [
            ("a", 7, 9),
            ("b", 7, 2),
            ("c", 7, 3),
            ("d", 7 | 1 << 40, 4),
            ("e", 3, 5),
        ] {
            assert_eq!(merged.get_hashed(hash, key), Some(&value), "{key}");
        }
        assert_eq!(map.get_hashed(7, "a"), Some(&1), "the old map is persistent");
    }

    #[test]
    fn full_hash_collisions_are_kept_apart_by_text() {
        let leaf = |key: &str, value: u32| {
            Arc::new(Leaf {
                hash: 7,
                key: Arc::from(key),
                value,
            })
        };
        // Build a collision node by hand: distinct keys forced onto one hash.
        let map = Hamt {
            root: Some(Arc::new(Node::Bitmap {
                bitmap: 1 << 7,
                slots: Box::new([Slot::Node(Arc::new(pair(leaf("a", 1), leaf("b", 2), 5)))]),
            })),
            len: 2,
        };
        assert_eq!(map.get_hashed(7, "a"), Some(&1));
        assert_eq!(map.get_hashed(7, "b"), Some(&2));
        assert_eq!(map.get_hashed(7, "c"), None);
        let (node, added) = map.root.as_ref().unwrap().insert(leaf("c", 3), 0);
        assert!(added);
        assert_eq!(node.get(7, "c"), Some(&3));
        let (node, added) = node.insert(leaf("a", 9), 0);
        assert!(!added);
        assert_eq!(node.get(7, "a"), Some(&9));
        match node.remove(7, "b", 0) {
            Removed::Node(node) => {
                assert_eq!(node.get(7, "b"), None);
                assert_eq!(node.get(7, "c"), Some(&3));
                match node.remove(7, "c", 0) {
                    // Down to one leaf: the subtree collapses to it (pulled up).
                    Removed::Leaf(leaf) => assert_eq!((&*leaf.key, leaf.value), ("a", 9)),
                    _ => panic!("one leaf remains"),
                }
            }
            _ => panic!("two leaves remain"),
        }
    }

    #[test]
    fn a_write_copies_a_logarithmic_number_of_slots() {
        let mut map: Hamt<()> = Hamt::default();
        for i in 0..100_000 {
            map = map.insert(Arc::from(format!("tenant{i}").as_str()), ());
        }
        // log32(100k) is 3.3: paths are ~4 levels, the deepest a few more.
        let depth = node_depth(map.root.as_deref().unwrap());
        assert!(depth <= 9, "depth {depth} for 100k keys");
        let before = slots_copied();
        for i in 0..1_000 {
            map = map.insert(Arc::from(format!("new{i}").as_str()), ());
        }
        // At most 32 slots per level on the path (mostly fewer below the
        // top levels), never anything near n = 100,000.
        let per_write = (slots_copied() - before) / 1_000;
        assert!(per_write <= 32 * 5, "{per_write} slots copied per insert");
        let before = slots_copied();
        for i in 0..1_000 {
            map = map.remove(&format!("new{i}")).unwrap();
        }
        let per_write = (slots_copied() - before) / 1_000;
        assert!(per_write <= 32 * 5, "{per_write} slots copied per remove");
    }
}
