//! A persistent hash array mapped trie (HAMT) keyed by text: the branch
//! tables of the CS-trie's C-nodes (subscriber sets were HAMTs too, until they
//! became Ctries of their own: `idset.rs`).
//!
//! # Why
//!
//! A C-node is immutable: a writer copies it, changes the copy and GCASes it
//! in. With a flat sorted table that copy is O(width), so loading a node with
//! a million distinct next words (`tenant<i>.orders.#`) or a million
//! subscribers of one pattern (`audit.#`) costs O(n²) in all. Here each table
//! is the Ctrie's own bitmap-indexed node, made persistent: a write copies
//! only the nodes on the path to its key, each at most [`WAYS`] (8) slots, and shares
//! everything else with the previous version.
//!
//! # Layout
//!
//! A key's 64-bit hash ([`hash_word`]) is consumed 3 bits per level, **most
//! significant bits first** (22 levels, the last one bit), so the leaves of a subtree are
//! exactly a range of hash values and a list of leaves sorted by hash is
//! already in the order a bulk build lays them out. A bitmap node is one slot
//! array (`Arc<[Slot]>`, a single allocation) plus a bitmap with one bit per
//! 4-bit chunk value, held by its parent's slot; its slots hold, in bit order,
//! either a leaf or the node for the next 3 bits. A leaf holds its key and value **inline** in the slot: no
//! allocation per binding and no pointer to chase before the key comparison.
//! It keeps no hash: a slot is as large as its largest variant, so every
//! slot, node slots included, would pay the 8 bytes, and only writes that
//! place a held key again (a split, a bulk merge into it) need it; they
//! compute it again. Writes take new bindings as [`Leaf`]s, with the hash
//! their caller computed once.
//! Keys are [`SmolStr`]s: texts of up to 23 bytes (nearly every word and
//! subscriber id) live inline too, so copying a slot copies bytes and bumps no
//! reference count, and dropping one releases nothing. Two distinct keys that
//! share all 64 bits (so all 22 levels) sit together in a collision list at
//! the bottom, compared by text.
//!
//! Why 8 ways and not the Ctrie's 32: a path copy clones every slot of each
//! node on the path, and a slot that holds a node bumps that node's reference
//! count, an atomic write to a cache line of its own (and, when the old version
//! goes, as many releases). With a million subscribers of one pattern the top
//! levels are all nodes, so a subscribe makes about w x log_w(n) such writes:
//! 3 x 32 at 32 ways, 4 x 16 at 16, 6 x 8 at 8, but 9 x 4 at 4 with twice the
//! node visits and allocations of 16. Measured from Python on a million
//! subscribers of `audit.#` (`bench/subscriptions.py`, two interleaved runs
//! each, same build otherwise): 16 ways ran 1.23x faster than 32; 8 ways
//! 1.07x faster than 16 (0.47x TrieMatcher's rate against 0.44x, and 0.60-0.62x
//! against 0.57-0.58x at 100,000), and 4 ways 0.9x of 8. Bulk loads and
//! freezes, which copy nothing, pay for the extra levels: the million-pair
//! bulk loads moved by -5% to +5% between 16 and 8 ways, within the runs'
//! noise. (Those figures predate shared sets: a subscriber set of two ids or
//! more is now a Ctrie of its own, `idset.rs`, with 32-way levels; HAMTs
//! remain the branch tables.)
//!
//! The form is canonical: no node below the root holds a single leaf (it is
//! pulled up into its parent's slot), and no node is empty, so equal contents
//! give equal shapes and `remove` shrinks the trie back.
//!
//! # Complexity (n keys, w = [`WAYS`] = 8)
//!
//! | operation | cost |
//! |---|---|
//! | `get` | O(log_w n) node visits (one pointer each), one text comparison |
//! | `insert` / `remove` (persistent) | O(w · log_w n) slots copied |
//! | `insert_many` of k keys | O(k log k) to sort them, then each touched node rebuilt once |
//! | `len` | O(1) |
//! | iteration | O(n) |
//! | clone | O(1) (one Arc bump) |
//!
//! Copying a slot bumps at most the reference counts its value holds (a
//! child I-node) and a key longer than 23 bytes; every copy is counted in test
//! builds ([`slots_copied`]).
//!
//! Keys are hashed with [`hash_word`] (`word_hash.rs` says how and why).

use std::sync::Arc;

use super::scratch::scratch_vec;
use crate::prefetch::prefetch;
use crate::word_hash::hash_word;

pub(crate) use smol_str::SmolStr;

/// `SmolStr::new(text)`, through the inline constructor when the text fits
/// inline (23 bytes): `new` copies it into a stack buffer with a memcpy call
/// and reloads that in other widths, stalling on store forwarding (perf put
/// 8% of a million-subscriber bulk load there). 30 against 21 ns per id in a
/// microbenchmark. The two make equal strings: `SmolStr` compares by text.
#[inline]
pub(crate) fn smol(text: &str) -> SmolStr {
    const INLINE_CAP: usize = 23;
    if text.len() <= INLINE_CAP {
        SmolStr::new_inline(text)
    } else {
        SmolStr::new(text)
    }
}

const BITS_PER_LEVEL: u32 = 3;
/// Slots of a bitmap node at most (its branching factor; the tests' copy bounds).
#[cfg(test)]
pub(crate) const WAYS: usize = 1 << BITS_PER_LEVEL;
/// Bitmap levels: 21 of 3 bits and a last one of the 1 bit left (64 = 21 x 3 + 1).
pub(crate) const LEVELS: u32 = 64u32.div_ceil(BITS_PER_LEVEL);

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

/// Levels a path through a full table of `n` keys takes: ceil(log_w(n)) (tests only).
#[cfg(test)]
pub(crate) fn levels_for(n: usize) -> usize {
    (usize::BITS - (n.max(2) - 1).leading_zeros()).div_ceil(BITS_PER_LEVEL) as usize
}

#[inline]
pub(crate) fn count_copied(_slots: usize) {
    #[cfg(test)]
    SLOTS_COPIED.with(|copied| copied.set(copied.get() + _slots));
}

/// The chunk of `hash` that indexes a bitmap node at `level` (< [`LEVELS`]).
#[inline]
pub(crate) fn chunk(hash: u64, level: u32) -> u32 {
    chunk_of::<BITS_PER_LEVEL>(hash, level)
}

/// The chunk of `hash` at `level` of a hash trie whose levels take `BITS`
/// bits each, most significant first; the last level takes the bits the
/// others leave. Shared by these tables (3 bits) and shared sets (5 bits).
#[inline]
pub(crate) fn chunk_of<const BITS: u32>(hash: u64, level: u32) -> u32 {
    let levels = 64u32.div_ceil(BITS);
    debug_assert!(level < levels);
    if level + 1 < levels {
        ((hash >> (64 - BITS * (level + 1))) & ((1 << BITS) - 1)) as u32
    } else {
        (hash & ((1 << (64 - BITS * (levels - 1))) - 1)) as u32
    }
}

/// Index of `bit`'s slot among the set bits below it.
#[inline]
pub(crate) fn slot_index(bitmap: u32, bit: u32) -> usize {
    (bitmap & ((1u32 << bit) - 1)).count_ones() as usize
}

/// One binding with its key's hash: what writes take (and shared-set
/// levels hold, `idset.rs`); a table slot holds it as an [`Entry`].
#[derive(Clone)]
pub(crate) struct Leaf<V> {
    /// Invariant: `hash_word(&key)` (tests may force other values).
    pub(crate) hash: u64,
    pub(crate) key: SmolStr,
    pub(crate) value: V,
}

impl<V> Leaf<V> {
    pub(crate) fn new(key: SmolStr, value: V) -> Self {
        Leaf {
            hash: hash_word(&key),
            key,
            value,
        }
    }

    pub(crate) fn is(&self, hash: u64, key: &str) -> bool {
        self.hash == hash && self.key == key
    }

    /// The binding as a slot holds it (the hash dropped).
    fn into_entry(self) -> Entry<V> {
        Entry {
            key: self.key,
            value: self.value,
        }
    }
}

/// The size of a table slot holding `V`s (`node.rs` asserts the branch
/// tables' at compile time).
pub(crate) const fn slot_size<V>() -> usize {
    std::mem::size_of::<Slot<V>>()
}

/// One binding as a table slot holds it, inline: its key and value, without
/// the key's hash. Lookups compare texts (a short `SmolStr` comparison is as
/// cheap as the hash one that used to screen it), and the few writes that
/// need a held key's hash (splitting a slot, merging a bulk load into a held
/// leaf) compute it again. 8 bytes less in every slot, node slots included:
/// a slot is as large as this.
#[derive(Clone)]
pub(crate) struct Entry<V> {
    pub(crate) key: SmolStr,
    pub(crate) value: V,
}

impl<V: Clone> Entry<V> {
    /// The binding with its hash, for a write that places it again.
    fn to_leaf(&self) -> Leaf<V> {
        Leaf::new(self.key.clone(), self.value.clone())
    }
}

#[derive(Clone)]
enum Slot<V> {
    /// Invariant: the key's [`hash_word`] leads to this slot.
    Leaf(Entry<V>),
    /// A bitmap node. Invariant: `slots.len() == bitmap.count_ones()`, slots in
    /// ascending bit order; never empty and never a lone leaf.
    Node { bitmap: u32, slots: Arc<[Slot<V>]> },
    /// Invariant: only below the last level (all 64 bits equal), at least two
    /// leaves, all with the same hash, keys distinct.
    Collision(Arc<[Entry<V>]>),
}

/// A persistent map from text to `V`. Cloning is O(1); writers build a new
/// map that shares all unchanged nodes with the old one.
pub(crate) struct Hamt<V> {
    /// The root node's bitmap (as a parent slot would hold it).
    bitmap: u32,
    /// Bindings; `u32` keeps the header at one word (4 billion per table).
    len: u32,
    /// Invariant: `None` exactly when `len == 0`; otherwise the root bitmap
    /// node's slots (it may hold a single leaf: the root is exempt).
    slots: Option<Arc<[Slot<V>]>>,
}

impl<V> Clone for Hamt<V> {
    fn clone(&self) -> Self {
        Hamt {
            bitmap: self.bitmap,
            len: self.len,
            slots: self.slots.clone(),
        }
    }
}

impl<V> Default for Hamt<V> {
    fn default() -> Self {
        Hamt {
            bitmap: 0,
            len: 0,
            slots: None,
        }
    }
}

/// Start loading the reference count of every child node of `slots` but the
/// one at `skip`, which a path copy is about to clone.
///
/// Each clone is a locked increment on a line of the child's own, and a
/// locked instruction waits for its miss before the next one can start: in a
/// million-id table (a million-id subscriber set, when sets were HAMTs) nearly
/// every such line is cold, and a subscribe spent most of its time in up to
/// 4 x 15 misses taken one after another.
/// Prefetched first, the misses overlap each other and the walk down.
#[inline]
fn prefetch_children<V>(slots: &[Slot<V>], skip: usize) {
    for (index, slot) in slots.iter().enumerate() {
        match slot {
            Slot::Node { slots: child, .. } if index != skip => prefetch_count(Arc::as_ptr(child) as *const u8),
            Slot::Collision(leaves) if index != skip => prefetch_count(Arc::as_ptr(leaves) as *const u8),
            _ => {}
        }
    }
}

/// A hint that the reference count of the `Arc` whose data starts at `data`
/// will soon be written. The counts sit just before the data in today's
/// `Arc` layout; a wrong guess costs nothing but the hint.
#[inline(always)]
fn prefetch_count(data: *const u8) {
    prefetch(data.wrapping_sub(2 * std::mem::size_of::<usize>()));
}

fn copy_slots<V: Clone>(slots: &[Slot<V>]) -> Vec<Slot<V>> {
    count_copied(slots.len());
    slots.to_vec()
}

/// A copy of `slots` with `new` in place of slot `at`: one allocation, and
/// the replaced slot is never cloned (no reference count bumped just to be
/// dropped again).
fn replaced<V: Clone>(slots: &[Slot<V>], at: usize, new: Slot<V>) -> Arc<[Slot<V>]> {
    count_copied(slots.len());
    let mut new = Some(new);
    // An exact-size iterator: `Arc<[_]>` is allocated once, at its final size.
    slots
        .iter()
        .enumerate()
        .map(|(index, slot)| match index == at {
            true => new.take().expect("one replacement"),
            false => slot.clone(),
        })
        .collect()
}

/// A copy of `slots` with `new` inserted at `at` (one allocation).
fn inserted<V: Clone>(slots: &[Slot<V>], at: usize, new: Slot<V>) -> Arc<[Slot<V>]> {
    count_copied(slots.len());
    slots[..at]
        .iter()
        .cloned()
        .chain(std::iter::once(new))
        .chain(slots[at..].iter().cloned())
        .collect()
}

/// The smallest subtree holding two leaves with distinct keys, from `level` on.
fn pair<V>(first: Leaf<V>, second: Leaf<V>, level: u32) -> Slot<V> {
    if level == LEVELS {
        debug_assert_eq!(first.hash, second.hash);
        return Slot::Collision(Arc::from([first.into_entry(), second.into_entry()]));
    }
    let (a, b) = (chunk(first.hash, level), chunk(second.hash, level));
    if a == b {
        let below = pair(first, second, level + 1);
        return Slot::Node {
            bitmap: 1 << a,
            slots: Arc::from([below]),
        };
    }
    let slots: Arc<[Slot<V>]> = if a < b {
        Arc::from([Slot::Leaf(first.into_entry()), Slot::Leaf(second.into_entry())])
    } else {
        Arc::from([Slot::Leaf(second.into_entry()), Slot::Leaf(first.into_entry())])
    };
    Slot::Node {
        bitmap: (1 << a) | (1 << b),
        slots,
    }
}

fn get_in<'a, V>(mut bitmap: u32, mut slots: &'a [Slot<V>], hash: u64, key: &str) -> Option<&'a V> {
    let mut level = 0;
    loop {
        let bit = chunk(hash, level);
        if bitmap & (1 << bit) == 0 {
            return None;
        }
        match &slots[slot_index(bitmap, bit)] {
            Slot::Leaf(leaf) => return (leaf.key == key).then_some(&leaf.value),
            Slot::Node {
                bitmap: below,
                slots: child,
            } => {
                bitmap = *below;
                slots = child;
            }
            Slot::Collision(leaves) => {
                return leaves.iter().find(|leaf| leaf.key == key).map(|leaf| &leaf.value);
            }
        }
        level += 1;
    }
}

/// A rebuilt bitmap node (its bitmap and slots) and whether the key was new.
type Inserted<V> = (u32, Arc<[Slot<V>]>, bool);

/// The bitmap node `(bitmap, slots)` at `level` with `leaf` inserted, and
/// whether the key is new (a held key is bound to the leaf's value).
fn insert_in<V: Clone>(bitmap: u32, slots: &[Slot<V>], leaf: Leaf<V>, level: u32) -> Inserted<V> {
    let bit = chunk(leaf.hash, level);
    let at = slot_index(bitmap, bit);
    if bitmap & (1 << bit) == 0 {
        prefetch_children(slots, usize::MAX);
        return (
            bitmap | (1 << bit),
            inserted(slots, at, Slot::Leaf(leaf.into_entry())),
            true,
        );
    }
    prefetch_children(slots, at);
    let (slot, added) = match &slots[at] {
        Slot::Leaf(held) if held.key == leaf.key => (Slot::Leaf(leaf.into_entry()), false),
        Slot::Leaf(held) => (pair(held.to_leaf(), leaf, level + 1), true),
        Slot::Node {
            bitmap: below,
            slots: child,
        } => {
            let (below, child, added) = insert_in(*below, child, leaf, level + 1);
            (
                Slot::Node {
                    bitmap: below,
                    slots: child,
                },
                added,
            )
        }
        Slot::Collision(leaves) => {
            // Below the last level: every leaf that gets here has the same hash.
            let held = leaves.iter().position(|held| held.key == leaf.key);
            count_copied(leaves.len());
            let mut list = leaves.to_vec();
            let added = match held {
                Some(at) => {
                    list[at] = leaf.into_entry();
                    false
                }
                None => {
                    list.push(leaf.into_entry());
                    true
                }
            };
            (Slot::Collision(Arc::from(list)), added)
        }
    };
    (bitmap, replaced(slots, at, slot), added)
}

/// What removing a key did to a subtree.
enum Removed<V> {
    Absent,
    /// The subtree is now empty.
    Empty,
    /// The subtree is now this slot: a lone leaf (to be pulled up) or a node.
    Slot(Slot<V>),
}

fn remove_in<V: Clone>(bitmap: u32, slots: &[Slot<V>], hash: u64, key: &str, level: u32) -> Removed<V> {
    let bit = chunk(hash, level);
    if bitmap & (1 << bit) == 0 {
        return Removed::Absent;
    }
    let at = slot_index(bitmap, bit);
    let replacement = match &slots[at] {
        Slot::Leaf(held) if held.key == key => None,
        Slot::Leaf(_) => return Removed::Absent,
        Slot::Node {
            bitmap: below,
            slots: child,
        } => match remove_in(*below, child, hash, key, level + 1) {
            Removed::Absent => return Removed::Absent,
            Removed::Empty => None,
            Removed::Slot(slot) => Some(slot),
        },
        Slot::Collision(leaves) => {
            let Some(gone) = leaves.iter().position(|leaf| leaf.key == key) else {
                return Removed::Absent;
            };
            count_copied(leaves.len());
            let mut list = leaves.to_vec();
            list.remove(gone);
            Some(match list.len() {
                1 => Slot::Leaf(list.pop().expect("one leaf")),
                _ => Slot::Collision(Arc::from(list)),
            })
        }
    };
    let mut copy = copy_slots(slots);
    let bitmap = match replacement {
        Some(slot) => {
            copy[at] = slot;
            bitmap
        }
        None => {
            copy.remove(at);
            bitmap & !(1 << bit)
        }
    };
    match copy.len() {
        0 => Removed::Empty,
        1 if matches!(copy[0], Slot::Leaf(_)) => Removed::Slot(copy.pop().expect("one slot")),
        _ => Removed::Slot(Slot::Node {
            bitmap,
            slots: Arc::from(copy),
        }),
    }
}

/// The first run of `hashes[start..end]` (sorted, `start < end`) that shares
/// its chunk at `level`: that chunk and the run's end.
fn next_run(hashes: &[u64], start: usize, end: usize, level: u32) -> (u32, usize) {
    let bit = chunk(hashes[start], level);
    let mut run_end = start + 1;
    while run_end < end && chunk(hashes[run_end], level) == bit {
        run_end += 1;
    }
    (bit, run_end)
}

/// New leaves for a bulk build or merge: sorted by hash, distinct keys, each
/// moved into its slot as the walk reaches it (`hashes[i]` is the hash of the
/// i-th leaf `next` yields), so nothing is cloned.
struct Newcomers<V> {
    hashes: Vec<u64>,
    leaves: std::vec::IntoIter<Leaf<V>>,
}

impl<V> Newcomers<V> {
    fn new(leaves: Vec<Leaf<V>>) -> Self {
        let mut hashes = scratch_vec(leaves.len());
        hashes.extend(leaves.iter().map(|leaf| leaf.hash));
        Newcomers {
            hashes,
            leaves: leaves.into_iter(),
        }
    }

    fn next(&mut self) -> Leaf<V> {
        self.leaves.next().expect("one leaf per hash, taken in order")
    }

    fn take(&mut self, count: usize) -> Vec<Leaf<V>> {
        (0..count).map(|_| self.next()).collect()
    }
}

/// The canonical subtree of the newcomers in `range` (non-empty) from `level`
/// on: a lone leaf as a leaf slot, equal hashes below the last level as a
/// collision list, otherwise a bitmap node. Every node is allocated once at
/// its final size.
fn build<V>(new: &mut Newcomers<V>, range: std::ops::Range<usize>, level: u32) -> Slot<V> {
    if range.len() == 1 {
        return Slot::Leaf(new.next().into_entry());
    }
    if level == LEVELS {
        return Slot::Collision(new.take(range.len()).into_iter().map(Leaf::into_entry).collect());
    }
    let (bitmap, slots) = build_node(new, range, level);
    Slot::Node { bitmap, slots }
}

/// The bitmap node of the newcomers in `range` (at least one) at `level`.
fn build_node<V>(new: &mut Newcomers<V>, range: std::ops::Range<usize>, level: u32) -> (u32, Arc<[Slot<V>]>) {
    // The bitmap first (a scan of the hashes), so that the slots can be
    // collected straight into an `Arc<[_]>` of known length: one allocation.
    let mut bitmap = 0u32;
    for &hash in &new.hashes[range.clone()] {
        bitmap |= 1 << chunk(hash, level);
    }
    let mut start = range.start;
    let slots = (0..bitmap.count_ones())
        .map(|_| {
            let (_, end) = next_run(&new.hashes, start, range.end, level);
            let slot = build(new, start..end, level + 1);
            start = end;
            slot
        })
        .collect();
    (bitmap, slots)
}

/// The bitmap node `(bitmap, slots)` at `level` with the newcomers in `range`
/// merged in, a newcomer replacing a held leaf with the same key. Subtrees
/// that no newcomer reaches are shared untouched; every node on the way to a
/// newcomer is rebuilt once, at its final size. Adds the new keys to `added`.
fn merge<V: Clone>(
    bitmap: u32,
    slots: &[Slot<V>],
    new: &mut Newcomers<V>,
    range: std::ops::Range<usize>,
    level: u32,
    added: &mut usize,
) -> (u32, Arc<[Slot<V>]>) {
    let mut merged_bitmap = bitmap;
    let mut merged = Vec::with_capacity(slots.len() + 1);
    let mut held = slots.iter();
    let mut held_bits = bitmap;
    let mut start = range.start;
    while start < range.end {
        let (bit, end) = next_run(&new.hashes, start, range.end, level);
        let run = start..end;
        start = end;
        // Held slots below this chunk are kept as they are.
        while held_bits != 0 && held_bits.trailing_zeros() < bit {
            merged.push(held.next().expect("one slot per bit").clone());
            held_bits &= held_bits - 1;
        }
        let slot = if held_bits & (1 << bit) != 0 {
            held_bits &= !(1 << bit);
            match held.next().expect("one slot per bit") {
                Slot::Node {
                    bitmap: below,
                    slots: child,
                } => {
                    let (below, child) = merge(*below, child, new, run, level + 1, added);
                    Slot::Node {
                        bitmap: below,
                        slots: child,
                    }
                }
                Slot::Leaf(leaf) => rebuild_with(std::slice::from_ref(leaf), new, run, level + 1, added),
                Slot::Collision(list) => {
                    count_copied(list.len());
                    rebuild_with(list, new, run, level + 1, added)
                }
            }
        } else {
            *added += run.len();
            merged_bitmap |= 1 << bit;
            build(new, run, level + 1)
        };
        merged.push(slot);
    }
    merged.extend(held.cloned());
    // The held node's slots are what this copies; the rest are new.
    count_copied(slots.len());
    (merged_bitmap, Arc::from(merged))
}

/// The subtree of the `held` leaves plus the newcomers in `range` (a
/// newcomer replaces a held leaf with its key), from `level` on.
fn rebuild_with<V: Clone>(
    held: &[Entry<V>],
    new: &mut Newcomers<V>,
    range: std::ops::Range<usize>,
    level: u32,
    added: &mut usize,
) -> Slot<V> {
    let newcomers = new.take(range.len());
    let mut all: Vec<Leaf<V>> = held
        .iter()
        .filter(|old| !newcomers.iter().any(|leaf| leaf.key == old.key))
        .map(Entry::to_leaf)
        .collect();
    *added += newcomers.len() + all.len() - held.len();
    all.extend(newcomers);
    all.sort_by_key(|leaf| leaf.hash);
    let end = all.len();
    build(&mut Newcomers::new(all), 0..end, level)
}

/// `leaves` sorted by hash, with one leaf per key (which of several equal
/// keys is kept is unspecified). Leaves that come sorted (a bulk load groups
/// its words by hash) are not moved at all.
pub(crate) fn sorted_unique<V>(mut leaves: Vec<Leaf<V>>) -> Vec<Leaf<V>> {
    if !leaves.is_sorted_by_key(|leaf| leaf.hash) {
        sort_by_hash_key(&mut leaves, |leaf| leaf.hash);
    }
    unique_in_sorted(&mut leaves);
    leaves
}

/// `leaves` (sorted by hash) with one leaf per key, in place: within a run of
/// one hash (a repeated key, or a 64-bit collision) the first of each key is
/// kept.
pub(crate) fn unique_in_sorted<V>(leaves: &mut Vec<Leaf<V>>) {
    if leaves.windows(2).all(|pair| pair[0].hash != pair[1].hash) {
        return;
    }
    let mut run_start = 0;
    let mut kept = 0;
    for at in 0..leaves.len() {
        if kept > 0 && leaves[kept - 1].hash != leaves[at].hash {
            run_start = kept;
        }
        if !leaves[run_start..kept].iter().any(|held| held.key == leaves[at].key) {
            leaves.swap(kept, at);
            kept += 1;
        }
    }
    leaves.truncate(kept);
}

/// Below this many leaves a comparison sort beats the radix passes. (At 4,096
/// the realistic bulk load's ~300 groups of ~3,300 pairs under each branch of
/// the root were comparison-sorted: 1.5% of the load more than radix passes.)
pub(crate) const RADIX_SORT_MIN: usize = 1024;
/// Bits of the hash each radix pass orders by (two passes: the top 22 bits).
const RADIX_BITS: u32 = 11;

/// Sort `items` by a 64-bit hash of each (`hash`, uniformly spread). Large
/// inputs (a million subscribers of one pattern, a million distinct first
/// words) take two counting passes over the top 22 bits, which leave a
/// uniformly hashed input almost sorted, then an insertion pass fixes the few
/// items that share those bits: O(n) moves in all, where a comparison sort of
/// 32-byte leaves made ~20 comparisons and moves per leaf. Runs of equal
/// hashes (one word repeated) cost the insertion pass nothing.
pub(crate) fn sort_by_hash_key<T>(items: &mut Vec<T>, hash: impl Fn(&T) -> u64) {
    let n = items.len();
    if n < RADIX_SORT_MIN || n > u32::MAX as usize {
        items.sort_unstable_by_key(&hash);
        return;
    }
    let digit = |hash: u64, pass: u32| ((hash >> (64 - RADIX_BITS * (pass + 1))) & ((1 << RADIX_BITS) - 1)) as usize;
    // Least significant digit first: pass 0 orders by bits 42..53, pass 1 by 53..64.
    let mut counts = vec![[0u32; 2]; 1 << RADIX_BITS];
    for item in items.iter() {
        let hash = hash(item);
        counts[digit(hash, 1)][0] += 1;
        counts[digit(hash, 0)][1] += 1;
    }
    let mut starts = vec![[0u32; 2]; 1 << RADIX_BITS];
    for pass in 0..2 {
        let mut sum = 0;
        for (start, count) in starts.iter_mut().zip(&counts) {
            start[pass] = sum;
            sum += count[pass];
        }
    }
    let mut scratch: Vec<std::mem::MaybeUninit<T>> = scratch_vec(n);
    scratch.resize_with(n, std::mem::MaybeUninit::uninit);
    for item in items.drain(..) {
        let slot = &mut starts[digit(hash(&item), 1)][0];
        scratch[*slot as usize].write(item);
        *slot += 1;
    }
    let spare = items.spare_capacity_mut();
    for slot in scratch.iter() {
        // SAFETY: the first pass wrote every index of `scratch` exactly once
        // (its positions are the prefix sums of the exact digit counts, and
        // each item advances its digit's position by one), and this pass
        // reads each index exactly once, moving the item out; `scratch` holds
        // `MaybeUninit`, so nothing is dropped twice when it goes.
        let item = unsafe { slot.assume_init_read() };
        let at = &mut starts[digit(hash(&item), 0)][1];
        spare[*at as usize].write(item);
        *at += 1;
    }
    // SAFETY: `drain(..)` left `items` empty with capacity for `n`, and the
    // loop above wrote each of its first `n` slots exactly once (prefix sums
    // of the exact counts of the top digit, as for the first pass).
    unsafe { items.set_len(n) };
    // Items that share the top 22 bits are in input order.
    insertion_sort_by_hash(items, hash);
}

/// Insertion-sort `items` by `hash`: O(n) moves when they are nearly sorted
/// (what a radix pass over the top bits of uniform hashes leaves).
pub(crate) fn insertion_sort_by_hash<T>(items: &mut [T], hash: impl Fn(&T) -> u64) {
    for at in 1..items.len() {
        let mut place = at;
        while place > 0 && hash(&items[place - 1]) > hash(&items[place]) {
            items.swap(place - 1, place);
            place -= 1;
        }
    }
}

impl<V: Clone> Hamt<V> {
    /// The map of `leaves` alone (see [`Hamt::insert_many`]).
    #[cfg(test)]
    pub(crate) fn from_leaves(leaves: Vec<Leaf<V>>) -> Hamt<V> {
        Hamt::default().insert_many(leaves).0
    }

    /// A map with every binding of `leaves` added, a leaf replacing a held
    /// binding with its key, and how many keys were new. Of equal keys within
    /// `leaves` one is kept, unspecified which: callers pass distinct keys, or
    /// values that are interchangeable (a set's).
    ///
    /// The leaves are sorted once by hash (the layout's own order) and
    /// merged in one pass down the trie: a node that gains leaves is rebuilt
    /// once at its final size, a subtree that gains none is shared untouched,
    /// and a slot that held nothing gets a subtree built bottom-up. So k
    /// leaves copy O(k + 32 · log32 n) slots and allocate each new node
    /// once, where k separate `insert`s would copy O(32 · k · log32 n).
    pub(crate) fn insert_many(&self, leaves: Vec<Leaf<V>>) -> (Hamt<V>, usize) {
        if leaves.is_empty() {
            return (self.clone(), 0);
        }
        let leaves = sorted_unique(leaves);
        let mut added = 0;
        let end = leaves.len();
        let new = &mut Newcomers::new(leaves);
        let (bitmap, slots) = match &self.slots {
            None => {
                added = end;
                build_node(new, 0..end, 0)
            }
            Some(slots) => merge(self.bitmap, slots, new, 0..end, 0, &mut added),
        };
        let map = Hamt {
            bitmap,
            len: self.len + added as u32,
            slots: Some(slots),
        };
        (map, added)
    }

    /// A map with `key` bound to `value` (replacing any binding).
    pub(crate) fn insert(&self, key: SmolStr, value: V) -> Hamt<V> {
        self.insert_leaf(Leaf::new(key, value))
    }

    /// `insert` of a leaf whose hash the caller computed.
    pub(crate) fn insert_leaf(&self, leaf: Leaf<V>) -> Hamt<V> {
        let Some(slots) = &self.slots else {
            return Hamt {
                bitmap: 1 << chunk(leaf.hash, 0),
                len: 1,
                slots: Some(Arc::from([Slot::Leaf(leaf.into_entry())])),
            };
        };
        let (bitmap, slots, added) = insert_in(self.bitmap, slots, leaf, 0);
        Hamt {
            bitmap,
            len: self.len + u32::from(added),
            slots: Some(slots),
        }
    }

    /// A map without `key`, or `None` when `key` is absent.
    pub(crate) fn remove(&self, key: &str) -> Option<Hamt<V>> {
        let slots = self.slots.as_ref()?;
        let (bitmap, slots) = match remove_in(self.bitmap, slots, hash_word(key), key, 0) {
            Removed::Absent => return None,
            Removed::Empty => (0, None),
            // The root keeps its own node, even around a single leaf.
            Removed::Slot(Slot::Node { bitmap, slots }) => (bitmap, Some(slots)),
            Removed::Slot(Slot::Leaf(leaf)) => {
                (1 << chunk(hash_word(&leaf.key), 0), Some(Arc::from([Slot::Leaf(leaf)])))
            }
            Removed::Slot(Slot::Collision(_)) => unreachable!("a collision list is never at the root"),
        };
        Some(Hamt {
            bitmap,
            len: self.len - 1,
            slots,
        })
    }
}

impl<V> Hamt<V> {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        self.get_hashed(hash_word(key), key)
    }

    /// `get` with the key's [`hash_word`] computed by the caller.
    #[inline]
    pub(crate) fn get_hashed(&self, hash: u64, key: &str) -> Option<&V> {
        get_in(self.bitmap, self.slots.as_deref()?, hash, key)
    }

    /// Every binding, in hash order (not text order).
    pub(crate) fn iter(&self) -> Iter<'_, V> {
        let mut iter = Iter {
            path: std::array::from_fn(|_| [].iter()),
            depth: 0,
            leaves: [].iter(),
        };
        if let Some(slots) = self.slots.as_deref() {
            iter.path[0] = slots.iter();
            iter.depth = 1;
        }
        iter
    }
}

impl<V: Default> Hamt<V> {
    /// Take this map apart, handing every value it owns alone to `take`.
    /// Nodes shared with other maps are only released. Iterative, so a value
    /// that owns a map that owns a value ... (a very deep trie) can be
    /// dismantled without recursion by a caller that loops.
    pub(crate) fn dismantle(self, mut take: impl FnMut(V)) {
        let mut pending: Vec<Arc<[Slot<V>]>> = self.slots.into_iter().collect();
        let mut lists: Vec<Arc<[Entry<V>]>> = Vec::new();
        while let Some(mut node) = pending.pop() {
            // Only the last owner takes the contents; shared nodes just lose a count.
            let Some(slots) = Arc::get_mut(&mut node) else { continue };
            for slot in slots.iter_mut() {
                match slot {
                    Slot::Leaf(leaf) => take(std::mem::take(&mut leaf.value)),
                    Slot::Node { slots: child, .. } => pending.push(child.clone()),
                    Slot::Collision(list) => lists.push(list.clone()),
                }
            }
            // The clones above made this node's children shared; drop it now
            // so that each child is owned by `pending` (or `lists`) alone.
            drop(node);
        }
        for mut list in lists {
            if let Some(leaves) = Arc::get_mut(&mut list) {
                leaves.iter_mut().for_each(|leaf| take(std::mem::take(&mut leaf.value)));
            }
        }
    }
}

/// Bitmap levels a 64-bit hash allows, plus the root's slot array: the
/// deepest path the iterator keeps.
const MAX_DEPTH: usize = LEVELS as usize + 1;

/// Iterator over a [`Hamt`]'s bindings: a depth-first walk keeping one slot
/// iterator per level, inline (a freeze iterates every C-node's table, so a
/// heap allocation per iteration would dominate small tables).
pub(crate) struct Iter<'a, V> {
    /// Invariant: `path[..depth]` are the slot iterators of the bitmap nodes
    /// from the root down to the one being visited; `depth <= MAX_DEPTH`
    /// because each entry is one level deeper than the one before it.
    path: [std::slice::Iter<'a, Slot<V>>; MAX_DEPTH],
    depth: usize,
    /// The collision list being visited, if any (it is always a leaf level).
    leaves: std::slice::Iter<'a, Entry<V>>,
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = &'a Entry<V>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(leaf) = self.leaves.next() {
                return Some(leaf);
            }
            let level = self.depth.checked_sub(1)?;
            match self.path[level].next() {
                Some(Slot::Leaf(leaf)) => return Some(leaf),
                Some(Slot::Node { slots, .. }) => {
                    self.path[self.depth] = slots.iter();
                    self.depth += 1;
                }
                Some(Slot::Collision(list)) => self.leaves = list.iter(),
                None => self.depth = level,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn slot_depth<V>(slot: &Slot<V>) -> usize {
        match slot {
            Slot::Leaf(_) => 0,
            Slot::Node { slots, .. } => 1 + slots.iter().map(slot_depth).max().unwrap_or(0),
            Slot::Collision(_) => 1,
        }
    }

    fn depth<V>(map: &Hamt<V>) -> usize {
        map.slots
            .as_deref()
            .map_or(0, |slots| 1 + slots.iter().map(slot_depth).max().unwrap_or(0))
    }

    /// Every invariant of the layout, checked on a whole map (hashes are
    /// `hash_word`'s, forced or not: slots hold none of their own).
    fn check<V>(map: &Hamt<V>) {
        /// Leaves under a bitmap node at `level` whose hashes agree with `prefix` on the levels above.
        fn walk<V>(bitmap: u32, slots: &[Slot<V>], level: u32, prefix: u64, is_root: bool) -> usize {
            assert_eq!(slots.len(), bitmap.count_ones() as usize);
            if !is_root {
                assert!(!slots.is_empty());
                assert!(
                    !(slots.len() == 1 && matches!(slots[0], Slot::Leaf(_))),
                    "lone leaf below root"
                );
            }
            let bits: Vec<u32> = (0..32).filter(|bit| bitmap & (1 << bit) != 0).collect();
            // The hash bits the levels down to this one fix.
            let fixed = |level: u32| -> u64 {
                let bits = (BITS_PER_LEVEL * level).min(64);
                if bits == 0 {
                    0
                } else {
                    !0u64 << (64 - bits)
                }
            };
            bits.iter()
                .zip(slots.iter())
                .map(|(&bit, slot)| {
                    let leaf_ok = |hash: u64| {
                        assert_eq!(chunk(hash, level), bit, "leaf in the wrong slot");
                        assert_eq!(
                            hash & fixed(level),
                            prefix & fixed(level),
                            "leaf under the wrong prefix"
                        );
                    };
                    match slot {
                        Slot::Leaf(leaf) => {
                            leaf_ok(hash_word(&leaf.key));
                            1
                        }
                        Slot::Node {
                            bitmap: below,
                            slots: child,
                        } => {
                            assert!(level + 1 < LEVELS, "a bitmap node below the last level");
                            let first = first_hash(child);
                            leaf_ok(first);
                            walk(*below, child, level + 1, first, false)
                        }
                        Slot::Collision(list) => {
                            assert_eq!(level + 1, LEVELS, "a collision list above the bottom");
                            assert!(list.len() >= 2);
                            let hash = hash_word(&list[0].key);
                            assert!(list.iter().all(|leaf| hash_word(&leaf.key) == hash));
                            leaf_ok(hash);
                            list.len()
                        }
                    }
                })
                .sum()
        }
        fn first_hash<V>(slots: &[Slot<V>]) -> u64 {
            match &slots[0] {
                Slot::Leaf(leaf) => hash_word(&leaf.key),
                Slot::Node { slots, .. } => first_hash(slots),
                Slot::Collision(list) => hash_word(&list[0].key),
            }
        }
        let counted = map
            .slots
            .as_deref()
            .map_or(0, |slots| walk(map.bitmap, slots, 0, 0, true));
        assert_eq!(counted, map.len());
        assert_eq!(map.slots.is_none(), map.len == 0);
        // Iteration is in hash order.
        let hashes: Vec<u64> = map.iter().map(|leaf| hash_word(&leaf.key)).collect();
        assert!(hashes.is_sorted(), "iteration out of hash order");
    }

    fn leaf(key: &str, hash: u64, value: u32) -> Leaf<u32> {
        Leaf {
            hash,
            key: SmolStr::new(key),
            value,
        }
    }

    fn model_of(map: &Hamt<u32>) -> BTreeMap<String, u32> {
        map.iter().map(|leaf| (leaf.key.to_string(), leaf.value)).collect()
    }

    #[test]
    fn smol_makes_the_string_smol_str_new_makes() {
        let long = "x".repeat(24);
        let spaces = " ".repeat(23);
        for text in [
            "",
            "a",
            "sub-12345",
            "ünïcödé-id",
            "\n\n  ",
            spaces.as_str(),
            &long[..23],
            long.as_str(),
            "#",
        ] {
            let (ours, theirs) = (smol(text), SmolStr::new(text));
            assert_eq!(ours, theirs, "{text:?}");
            assert_eq!(ours.as_str(), text);
            assert_eq!(ours.is_heap_allocated(), theirs.is_heap_allocated(), "{text:?}");
        }
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
            // Some keys longer than 23 bytes, so both key layouts are exercised.
            let key = match (state >> 40) % 4 {
                0 => format!("a-long-key-that-is-not-inline-{}", (state >> 33) % 3_000),
                _ => format!("k{}", (state >> 33) % 3_000),
            };
            if (state >> 20).is_multiple_of(3) {
                assert_eq!(map.remove(&key).is_some(), model.remove(&key).is_some());
                if let Some(next) = map.remove(&key) {
                    map = next;
                }
            } else {
                map = map.insert(SmolStr::new(&key), step);
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
            assert_eq!(model_of(&old), old_model);
            for (key, value) in &old_model {
                assert_eq!(old.get(key), Some(value));
            }
        }
        // Removing everything shrinks back to nothing.
        for key in model.keys() {
            map = map.remove(key).expect("present");
        }
        check(&map);
        assert!(map.slots.is_none() && map.is_empty());
    }

    #[test]
    fn sort_by_hash_key_sorts_like_a_comparison_sort() {
        let mut rng = crate::rng::Rng(11);
        // Below and above the radix threshold; uniform hashes, a few repeated ones (one word in many
        // patterns), and keys that share their top 22 bits (the insertion pass's work).
        for n in [0, 1, 100, RADIX_SORT_MIN, 50_000] {
            let mut items: Vec<(u64, usize)> = (0..n)
                .map(|at| {
                    let hash = match rng.below(4) {
                        0 => 42,
                        1 => (7 << 42) | rng.below(1 << 20) as u64,
                        _ => rng.next_u64(),
                    };
                    (hash, at)
                })
                .collect();
            let mut expected = items.clone();
            expected.sort_by_key(|&(hash, _)| hash);
            sort_by_hash_key(&mut items, |&(hash, _)| hash);
            let hashes = |items: &[(u64, usize)]| items.iter().map(|&(hash, _)| hash).collect::<Vec<_>>();
            assert_eq!(hashes(&items), hashes(&expected), "n = {n}");
            let mut payloads: Vec<usize> = items.iter().map(|&(_, at)| at).collect();
            payloads.sort_unstable();
            assert_eq!(payloads, (0..n).collect::<Vec<_>>(), "every item once, n = {n}");
        }
    }

    #[test]
    fn insert_many_agrees_with_inserts_and_leaves_the_old_map_alone() {
        let mut base: Hamt<u32> = Hamt::default();
        for i in 0..5_000u32 {
            base = base.insert(SmolStr::new(format!("k{i}")), i);
        }
        let snapshot = model_of(&base);
        let entries: Vec<Leaf<u32>> = (2_500..12_500u32)
            .map(|i| Leaf::new(SmolStr::new(format!("k{i}")), i + 1))
            .chain([Leaf::new("k1".into(), 7), Leaf::new("k1".into(), 7)])
            .collect();
        let before = slots_copied();
        let (bulk, added) = base.insert_many(entries.clone());
        let bulk_copies = slots_copied() - before;
        let mut one_by_one = base.clone();
        for leaf in &entries {
            one_by_one = one_by_one.insert_leaf(leaf.clone());
        }
        assert_eq!(added, 7_500);
        check(&bulk);
        assert_eq!(model_of(&bulk), model_of(&one_by_one));
        assert_eq!(
            bulk.get("k1"),
            Some(&7),
            "a held key is replaced; a repeated one counts once"
        );
        assert_eq!(model_of(&base), snapshot, "the old map is persistent");
        // Each shared node is copied at most once, not once per entry.
        fn slots<V>(slots_of: &[Slot<V>]) -> usize {
            slots_of.len()
                + slots_of
                    .iter()
                    .map(|slot| match slot {
                        Slot::Node { slots: child, .. } => slots(child),
                        Slot::Collision(list) => list.len(),
                        Slot::Leaf(_) => 0,
                    })
                    .sum::<usize>()
        }
        let shared = slots(base.slots.as_deref().unwrap());
        assert!(
            bulk_copies <= shared,
            "{bulk_copies} slots copied, the old map has {shared}"
        );
        // A bulk build from nothing equals the same keys inserted one by one.
        let fresh = Hamt::from_leaves(entries.clone());
        let mut single: Hamt<u32> = Hamt::default();
        for leaf in entries {
            single = single.insert_leaf(leaf);
        }
        check(&fresh);
        assert_eq!(model_of(&fresh), model_of(&single));
    }

    /// The hash the collision test forces: most keys share one; `c`, `g` and
    /// `z` differ from it in the last level only, `d` in the first.
    const COLLIDING: u64 = 0xdead_beef_0bad_cafe;
    fn forced_hash(key: &str) -> u64 {
        match key {
            "c" | "g" | "z" => COLLIDING ^ 1,
            "d" => COLLIDING ^ (1 << 63),
            _ => COLLIDING,
        }
    }

    /// Full 64-bit collisions (forced hashes, through `hash_word`: a slot
    /// keeps no hash of its own): a collision list at the bottom, reached
    /// through one-slot bitmap nodes, split again by removal.
    #[test]
    fn full_hash_collisions_are_kept_apart_by_text() {
        crate::word_hash::with_forced_hash(forced_hash, full_hash_collisions);
    }

    fn full_hash_collisions() {
        let hash = COLLIDING;
        let near = hash ^ 1; // differs in the last level only
        let far = hash ^ (1 << 63); // differs in the first level
        let mut map: Hamt<u32> = Hamt::default();
        for (key, forced, value) in [("a", hash, 1), ("b", hash, 2), ("c", near, 3), ("d", far, 4)] {
            map = map.insert_leaf(leaf(key, forced, value));
            check(&map);
        }
        assert_eq!(map.len(), 4);
        assert_eq!(map.get_hashed(hash, "a"), Some(&1));
        assert_eq!(map.get_hashed(hash, "b"), Some(&2));
        assert_eq!(map.get_hashed(hash, "x"), None);
        assert_eq!(map.get_hashed(near, "c"), Some(&3));
        let rebound = map.insert_leaf(leaf("b", hash, 0));
        assert_eq!(
            (rebound.len(), rebound.get_hashed(hash, "b")),
            (4, Some(&0)),
            "a key held in the collision list"
        );
        let grown = map.insert_leaf(leaf("h", hash, 0));
        assert_eq!(
            (grown.len(), grown.get_hashed(hash, "h")),
            (5, Some(&0)),
            "a new key joins the collision list"
        );
        map = map.insert_leaf(leaf("e", hash, 5));
        map = map.insert_leaf(leaf("a", hash, 9));
        check(&map);
        assert_eq!((map.len(), map.get_hashed(hash, "a")), (5, Some(&9)));
        // A bulk merge into the collision list, and a bulk build of one.
        let (merged, added) = map.insert_many(vec![leaf("f", hash, 6), leaf("b", hash, 7), leaf("g", near, 8)]);
        check(&merged);
        assert_eq!(added, 2);
        assert_eq!(merged.get_hashed(hash, "b"), Some(&7));
        assert_eq!(merged.get_hashed(hash, "f"), Some(&6));
        let built = Hamt::from_leaves(vec![leaf("x", hash, 1), leaf("y", hash, 2), leaf("z", near, 3)]);
        check(&built);
        assert_eq!(built.get_hashed(hash, "y"), Some(&2));
        // Removal shrinks the list back to a leaf pulled all the way up.
        let mut shrinking = map.clone();
        for key in ["b", "e", "c"] {
            shrinking = shrinking.remove_hashed_for_test(hash_of(key, hash, near), key);
            check(&shrinking);
        }
        assert_eq!(shrinking.len(), 2);
        assert_eq!(
            depth(&shrinking),
            1,
            "two leaves that differ in the first level sit in the root"
        );
        assert_eq!(map.get_hashed(hash, "b"), Some(&2), "the old map is persistent");
    }

    fn hash_of(key: &str, hash: u64, near: u64) -> u64 {
        if key == "c" {
            near
        } else {
            hash
        }
    }

    impl<V: Clone> Hamt<V> {
        fn remove_hashed_for_test(&self, hash: u64, key: &str) -> Hamt<V> {
            let slots = self.slots.as_ref().expect("non-empty");
            let (bitmap, slots) = match remove_in(self.bitmap, slots, hash, key, 0) {
                Removed::Absent => panic!("{key} is absent"),
                Removed::Empty => (0, None),
                Removed::Slot(Slot::Node { bitmap, slots }) => (bitmap, Some(slots)),
                Removed::Slot(Slot::Leaf(leaf)) => {
                    (1 << chunk(hash_word(&leaf.key), 0), Some(Arc::from([Slot::Leaf(leaf)])))
                }
                Removed::Slot(Slot::Collision(_)) => unreachable!(),
            };
            Hamt {
                bitmap,
                len: self.len - 1,
                slots,
            }
        }
    }

    #[test]
    fn a_write_copies_a_logarithmic_number_of_slots() {
        let mut map: Hamt<()> = Hamt::default();
        for i in 0..100_000 {
            map = map.insert(SmolStr::new(format!("tenant{i}")), ());
        }
        // log8(100k) is 5.5: paths are ~6 levels, the deepest a few more. The
        // hash seed is random per process, and a path of depth d + 1 needs two
        // of the 5 x 10^9 key pairs to share d x BITS_PER_LEVEL hash bits: at
        // 56 bits that is about one seed in ten million.
        let deepest = 56_u32.div_ceil(BITS_PER_LEVEL) as usize;
        let levels = depth(&map);
        assert!(levels <= deepest, "depth {levels} for 100k keys");
        let before = slots_copied();
        for i in 0..1_000 {
            map = map.insert(SmolStr::new(format!("new{i}")), ());
        }
        // At most WAYS slots per level on the path (mostly fewer below the
        // top levels), never anything near n = 100,000.
        let bound = WAYS * (levels_for(100_000) + 1);
        let per_write = (slots_copied() - before) / 1_000;
        assert!(per_write <= bound, "{per_write} slots copied per insert");
        let before = slots_copied();
        for i in 0..1_000 {
            map = map.remove(&format!("new{i}")).unwrap();
        }
        let per_write = (slots_copied() - before) / 1_000;
        assert!(per_write <= bound, "{per_write} slots copied per remove");
    }

    #[test]
    fn dismantle_takes_exactly_the_values_owned_alone() {
        let mut map: Hamt<u32> = Hamt::default();
        for i in 0..3_000u32 {
            map = map.insert(SmolStr::new(format!("k{i}")), i);
        }
        let kept = map.clone();
        let mut taken = Vec::new();
        map.clone().dismantle(|value| taken.push(value));
        assert!(taken.is_empty(), "every node is shared with `kept`");
        drop(map);
        let mut taken = Vec::new();
        kept.dismantle(|value| taken.push(value));
        taken.sort_unstable();
        assert_eq!(taken, (0..3_000).collect::<Vec<_>>());
    }
}
