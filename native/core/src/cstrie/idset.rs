//! Shared subscriber sets: a subscriber set of two ids or more as a Ctrie of its own.
//!
//! # Why
//!
//! A set held as an immutable value inside a C-node changes only by a GCAS of
//! that C-node: a new id copies the set's path and then the C-node's own path
//! to the branch that holds it. With a million subscribers of `audit.#`, the
//! set's 8-way persistent HAMT made a subscribe about 50 cold atomic writes
//! (the reference counts of every child of each copied node), and as many
//! releases when the old version went (perf: a quarter of `hamt::insert_in`
//! was one `lock incq`, and `Arc::drop_slow` 17% of a Python subscribe loop).
//! A small set under a wide node paid for the wide node instead: adding each
//! of 8 to 128 subscribers to 20,000 patterns `p<i>.x` took 3.1-6.6 µs a
//! subscribe with sets immutable up to 64 ids or always, against 1.4-2.0 µs
//! with every set of two ids shared (an ad hoc Rust probe, three rounds, each
//! threshold in every round).
//!
//! So a set of two ids or more is the Ctrie of Prokopec et al. in its original
//! form, keyed by the id's hash: every level of the HAMT is an I-node whose
//! main node ([`IdNode`]) is replaced by GCAS. A new id copies the one node it
//! lands in and GCASes that level's I-node; the holder
//! ([`SubscriberSet::Shared`]) keeps pointing to the same root I-node and is
//! not written at all. Heap per pair stays within ±20% of the immutable
//! sets' for sets of 2 to 128 ids (a counting allocator, 5,000 patterns each).
//!
//! Levels are 32 ways, the Ctrie's own choice, not the 8 of `hamt.rs`: a
//! write copies one node here, not one per level, so wider nodes cost a
//! larger copy once and save levels to read on every write. A million ids
//! take 4-5 levels instead of 7; a subscribe into them from Python ran
//! 1.10-1.43x faster than with 8-way levels (median 1.22x, six interleaved
//! pairs of runs), and no different at 100,000.
//!
//!
//! # Invariants
//!
//! * The holder's pointer to a shared set's root I-node is replaced only when
//!   the root's generation is older than the trie root's (renewal: the old
//!   root can never take a GCAS again, so its main node is final and shared by
//!   the copy) or when the root is a T-node (the set is empty and final). A
//!   C-node write for any other reason copies the pointer as it is. Replacing
//!   a current-generation set root by a copy would lose every write that
//!   commits on the old one meanwhile (the lost update the module docs of
//!   `mod.rs` describe for trie I-nodes).
//! * Levels are GCASed only under the generation of the trie's root, with the
//!   trie's own GCAS (`gcas.rs`), so a snapshot of the trie is a snapshot of
//!   every shared set in it, and snapshots stay O(1). A writer that meets a
//!   level of an older generation renews it in its parent first (one node
//!   copied), as the trie's writers renew their I-nodes.
//! * A level left empty by a removal becomes a T-node and is then compressed
//!   out of its parent; a parent left empty follows it. A root left empty
//!   becomes a T-node and its holder drops the set. When that chain stops
//!   short (a snapshot moved the generation, or a helper compressed a level
//!   and left its emptied parent to others), the removal reports
//!   [`SetWrite::RemovedLeftover`] and the trie's remover walks the id's path
//!   again with [`prune`], and drops the set once its root is dead, before it
//!   returns: no dead level and no dead root outlives the removal that
//!   emptied it. Left to later writers of the same set, an emptied set stayed
//!   in its holder for good when none came, and kept every trie node above it.
//!   A T-node is final, so an insert racing with the removal restarts
//!   instead of landing in a dead level. A level left with one id is not
//!   pulled up into its parent (the Ctrie's entombed S-node is left out):
//!   such chains only come from ids whose hashes share a long prefix, so they
//!   cost at most the levels of the live ids, and they go once those ids do.
//!
//! # Complexity (s ids, 32 ways)
//!
//! | operation | cost |
//! |---|---|
//! | insert / remove | O(log32 s) levels read, one node (at most 32 slots) copied, one GCAS |
//! | first write below a level after a snapshot | + one node copied per renewed level |
//! | `contains` | O(log32 s) levels read |
//! | iteration, `count` | O(s) |
//! | [`build`] from k ids | O(k log k) to sort, then each level allocated once |
//! | [`build_many`] from k ids | O(k): two passes to bucket them, each bucket sorted and built in cache |

use std::sync::Arc;

use smallvec::SmallVec;

use super::gcas::{gcas, gcas_read, is_tombed, read_root, Ctx};
use super::hamt::{
    chunk_of, count_copied, insertion_sort_by_hash, slot_index, sorted_unique, unique_in_sorted, Leaf, SmolStr,
};
use super::node::{Generation, INode, IdNode, IdSlot, MainKind, MainNode, SubscriberSet};
use super::scratch::scratch_vec;
use super::sync::epoch::Guard;
use crate::prefetch::prefetch;
use crate::word_hash::hash_word;

/// Hash bits each level consumes, most significant first (as `hamt.rs` does).
const BITS_PER_LEVEL: u32 = 5;
/// Slots of a level node at most.
pub(crate) const WAYS: usize = 1 << BITS_PER_LEVEL;
/// Bitmap levels; the last takes the bits the others leave. Level `LEVELS`
/// itself, below every hash bit, is the collision list.
pub(crate) const LEVELS: u32 = 64u32.div_ceil(BITS_PER_LEVEL);

/// The chunk of `hash` that indexes a level node at `level` (< [`LEVELS`]).
#[inline]
fn chunk(hash: u64, level: u32) -> u32 {
    chunk_of::<BITS_PER_LEVEL>(hash, level)
}

impl IdNode {
    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Where `hash` goes at `level`: its bit and slot index, and whether the slot is held.
    fn locate(&self, hash: u64, level: u32) -> (u32, usize, bool) {
        let bit = chunk(hash, level);
        (bit, slot_index(self.bitmap, bit), self.bitmap & (1 << bit) != 0)
    }

    /// With `slot` inserted at `at` (`bit` `None` at the collision level).
    fn inserted(&self, bit: Option<u32>, at: usize, slot: IdSlot) -> IdNode {
        count_copied(self.slots.len());
        let mut slots = Vec::with_capacity(self.slots.len() + 1);
        slots.extend_from_slice(&self.slots[..at]);
        slots.push(slot);
        slots.extend_from_slice(&self.slots[at..]);
        IdNode {
            bitmap: bit.map_or(self.bitmap, |bit| self.bitmap | (1 << bit)),
            slots: slots.into_boxed_slice(),
        }
    }

    fn replaced(&self, at: usize, slot: IdSlot) -> IdNode {
        count_copied(self.slots.len());
        let mut slot = Some(slot);
        let slots = (self.slots.iter().enumerate())
            .map(|(index, held)| match index == at {
                true => slot.take().expect("one replacement"),
                false => held.clone(),
            })
            .collect();
        IdNode {
            bitmap: self.bitmap,
            slots,
        }
    }

    /// Without slot `at` (`bit` `None` at the collision level).
    fn removed(&self, bit: Option<u32>, at: usize) -> IdNode {
        count_copied(self.slots.len());
        let slots = (self.slots.iter().enumerate())
            .filter(|&(index, _)| index != at)
            .map(|(_, held)| held.clone())
            .collect();
        IdNode {
            bitmap: bit.map_or(self.bitmap, |bit| self.bitmap & !(1 << bit)),
            slots,
        }
    }
}

/// The reads and writes of a [`SubscriberSet`] (a value of `node.rs`) that
/// a shared set answers with this module's walks; the inline forms answer
/// them directly.
impl SubscriberSet {
    /// Whether the set holds no id as far as one read tells: the empty value,
    /// or a shared set whose root is a T-node.
    pub(crate) fn is_empty_in(&self, ctx: Ctx<'_>, guard: &Guard) -> bool {
        match self {
            SubscriberSet::Shared(root) => is_tombed(root, ctx, guard),
            other => other.is_empty(),
        }
    }

    pub(crate) fn count(&self, ctx: Ctx<'_>, guard: &Guard) -> usize {
        let mut count = 0;
        self.for_each(ctx, guard, |_, _| count += 1);
        count
    }

    pub(crate) fn contains(&self, id: &str, ctx: Ctx<'_>, guard: &Guard) -> bool {
        match self {
            SubscriberSet::Empty => false,
            SubscriberSet::One(held) => **held == *id,
            SubscriberSet::Shared(root) => contains(root, id, hash_word(id), ctx, guard),
        }
    }

    /// Call `visit` with every id and its [`hash_word`], in no particular order.
    pub(crate) fn for_each<'g>(&'g self, ctx: Ctx<'_>, guard: &'g Guard, mut visit: impl FnMut(&'g SmolStr, u64)) {
        match self {
            SubscriberSet::Empty => {}
            SubscriberSet::One(id) => visit(id, hash_word(id)),
            SubscriberSet::Shared(root) => for_each(root, ctx, guard, |leaf| visit(&leaf.key, leaf.hash)),
        }
    }

    /// Append the ids to `out` (what matching collects per matched branch).
    pub(crate) fn push_into<'g>(&'g self, out: &mut SmallVec<[&'g SmolStr; 8]>, ctx: Ctx<'_>, guard: &'g Guard) {
        match self {
            SubscriberSet::Empty => {}
            SubscriberSet::One(id) => out.push(id),
            SubscriberSet::Shared(root) => for_each(root, ctx, guard, |leaf| out.push(&leaf.key)),
        }
    }

    /// The set plus `id`, or `None` when `id` is already present: a second id
    /// makes a shared set in generation `gen`. Not for a shared set (it
    /// changes in place: [`insert`]).
    pub(crate) fn with(&self, id: &SmolStr, gen: Generation) -> Option<Self> {
        match self {
            SubscriberSet::Empty => Some(SubscriberSet::One(id.clone())),
            SubscriberSet::One(held) if held == id => None,
            SubscriberSet::One(held) => {
                let leaves = vec![Leaf::new(held.clone(), ()), Leaf::new(id.clone(), ())];
                Some(SubscriberSet::Shared(build(leaves, gen).0))
            }
            SubscriberSet::Shared(_) => unreachable!("a shared set changes in place"),
        }
    }
}

fn level_inode(gen: Generation, node: IdNode) -> Arc<INode> {
    INode::new(gen, MainNode::committed(MainKind::Ids(node)))
}

/// Whether the trie's root still has generation `gen` (writers give up
/// helping once a snapshot has moved it on).
fn generation_holds(gen: Generation, ctx: Ctx<'_>, guard: &Guard) -> bool {
    match ctx {
        Ctx::Live(root) => read_root(root, false, guard).gen == gen,
        Ctx::ReadOnly => false,
    }
}

/// A new, unpublished level at `level` holding `first` and `second` (distinct ids).
fn pair(first: Leaf<()>, second: Leaf<()>, level: u32, gen: Generation) -> Arc<INode> {
    if level == LEVELS {
        let slots = Box::new([IdSlot::Id(first), IdSlot::Id(second)]);
        return level_inode(gen, IdNode { bitmap: 0, slots });
    }
    let (a, b) = (chunk(first.hash, level), chunk(second.hash, level));
    let node = if a == b {
        IdNode {
            bitmap: 1 << a,
            slots: Box::new([IdSlot::Level(pair(first, second, level + 1, gen))]),
        }
    } else {
        let (low, high) = if a < b { (first, second) } else { (second, first) };
        IdNode {
            bitmap: (1 << a) | (1 << b),
            slots: Box::new([IdSlot::Id(low), IdSlot::Id(high)]),
        }
    };
    level_inode(gen, node)
}

/// A new, unpublished shared set of `leaves` (duplicates allowed, at least
/// one), in generation `gen`, and how many distinct ids it holds.
pub(crate) fn build(leaves: Vec<Leaf<()>>, gen: Generation) -> (Arc<INode>, usize) {
    let leaves = sorted_unique(leaves);
    (build_sorted(&leaves, gen), leaves.len())
}

/// [`build`] of `leaves` already sorted by hash and distinct (what
/// [`sorted_unique`] returns), for callers that sorted them already.
pub(crate) fn build_sorted(leaves: &[Leaf<()>], gen: Generation) -> Arc<INode> {
    debug_assert!(!leaves.is_empty());
    build_level(leaves, 0, gen)
}

/// The level `level` of `leaves` (sorted by hash, distinct, at least one).
fn build_level(leaves: &[Leaf<()>], level: u32, gen: Generation) -> Arc<INode> {
    if level == LEVELS {
        let slots = leaves.iter().cloned().map(IdSlot::Id).collect();
        return level_inode(gen, IdNode { bitmap: 0, slots });
    }
    let mut bitmap = 0u32;
    let mut slots = Vec::with_capacity(leaves.len().min(8));
    let mut start = 0;
    while start < leaves.len() {
        let bit = chunk(leaves[start].hash, level);
        let mut end = start + 1;
        while end < leaves.len() && chunk(leaves[end].hash, level) == bit {
            end += 1;
        }
        bitmap |= 1 << bit;
        slots.push(match end - start {
            1 => IdSlot::Id(leaves[start].clone()),
            _ => IdSlot::Level(build_level(&leaves[start..end], level + 1, gen)),
        });
        start = end;
    }
    level_inode(
        gen,
        IdNode {
            bitmap,
            slots: slots.into_boxed_slice(),
        },
    )
}

/// What a bulk build of ids made: the lone id when they were all one.
pub(crate) enum Built {
    One(SmolStr),
    Set(Arc<INode>),
}

/// Below this many ids [`build_many`] sorts them whole and builds from the
/// sorted run; from it on, bucket by bucket.
pub(crate) const BUCKETED_MIN: usize = 1 << 14;
/// The bits of a hash that pick a bucket of [`build_many`]: the chunks of
/// levels 0 and 1, so that each bucket is one subtree from level 2 down.
const BUCKET_BITS: u32 = 2 * BITS_PER_LEVEL;
/// The bits after those that a bucket's counting pass orders by.
const IN_BUCKET_BITS: u32 = 8;
/// How many leaves ahead the scatter of [`build_many`] prefetches the slot a
/// leaf goes to.
const SCATTER_AHEAD: usize = 16;
/// Buckets up to this size are insertion-sorted without a counting pass.
const INSERTION_MAX: usize = 32;

/// The set of `count` ids (at least one, duplicates allowed), the i-th made
/// by `leaf(i)` with hash `hash(i)` (the same as the leaf's), in generation
/// `gen`, and how many distinct ids it holds. Each `leaf(i)` is called once,
/// in order of `i`.
///
/// The result is the tree [`build_sorted`] makes of the sorted ids. A big set
/// is built bucket by bucket, not from one sorted run: a counting pass over
/// the hashes and one scatter of the leaves by the chunks of levels 0 and 1
/// (1,024 buckets, about a thousand ids each in a million), then each bucket
/// is sorted (one counting pass over the next 8 bits, then an insertion pass)
/// and built from level 2 down while it is in cache. A whole sort moved every
/// leaf three times through memory (two radix passes and an insertion pass),
/// checked it for duplicates in a fourth, and the build then read it again;
/// on this memory-bound host that was most of a million-id load.
pub(crate) fn build_many(
    count: usize,
    hash: impl Fn(usize) -> u64,
    leaf: impl Fn(usize) -> Leaf<()>,
    gen: Generation,
) -> (Built, usize) {
    assert!(count > 0, "a set of no ids");
    if count < BUCKETED_MIN || count > u32::MAX as usize {
        let mut leaves: Vec<Leaf<()>> = scratch_vec(count);
        leaves.extend((0..count).map(&leaf));
        let mut leaves = sorted_unique(leaves);
        return match leaves.len() {
            1 => (Built::One(leaves.pop().expect("one id").key), 1),
            distinct => (Built::Set(build_sorted(&leaves, gen)), distinct),
        };
    }
    let bucket_of = |hash: u64| (hash >> (64 - BUCKET_BITS)) as usize;
    // Bucket b is `scattered[starts[b]..starts[b + 1]]`.
    let mut starts = vec![0u32; (1 << BUCKET_BITS) + 1];
    for at in 0..count {
        starts[bucket_of(hash(at)) + 1] += 1;
    }
    for bucket in 0..1 << BUCKET_BITS {
        starts[bucket + 1] += starts[bucket];
    }
    let mut scattered: Vec<std::mem::MaybeUninit<Leaf<()>>> = scratch_vec(count);
    scattered.resize_with(count, std::mem::MaybeUninit::uninit);
    let mut next = starts.clone();
    for at in 0..count {
        if at + SCATTER_AHEAD < count {
            // The slot a later leaf goes to (its bucket's place now: the same line, or the next).
            let place = next[bucket_of(hash(at + SCATTER_AHEAD))] as usize;
            prefetch(scattered.as_ptr().wrapping_add(place));
        }
        // By `hash(at)`, as counted: a leaf with another hash would land in a wrong bucket (a wrong
        // tree), never outside the counted places.
        let slot = &mut next[bucket_of(hash(at))];
        let made = leaf(at);
        debug_assert_eq!(made.hash, hash(at), "hash(i) is the hash of leaf(i)");
        scattered[*slot as usize].write(made);
        *slot += 1;
    }
    let largest = starts
        .windows(2)
        .map(|pair| (pair[1] - pair[0]) as usize)
        .max()
        .unwrap_or(0);
    let mut bucket: Vec<Leaf<()>> = Vec::with_capacity(largest);
    let mut spare: Vec<Leaf<()>> = Vec::with_capacity(largest);
    let mut distinct = 0;
    let (mut root_bitmap, mut root_slots) = (0u32, SmallVec::<[IdSlot; WAYS]>::new());
    for upper in 0..WAYS {
        let (mut bitmap, mut slots) = (0u32, SmallVec::<[IdSlot; WAYS]>::new());
        let mut below = 0;
        for lower in 0..WAYS {
            let index = upper * WAYS + lower;
            let range = starts[index] as usize..starts[index + 1] as usize;
            if range.is_empty() {
                continue;
            }
            bucket.clear();
            // SAFETY: the scatter wrote every index of `scattered` exactly once (`starts` are the prefix
            // sums of the exact counts per bucket, and each leaf advanced its bucket's place by one), and
            // the buckets' ranges are disjoint, so each index is read (moved out) here exactly once.
            // `scattered` holds `MaybeUninit`, so nothing is dropped twice when it goes; a panic
            // between two reads only leaks the leaves not yet read.
            bucket.extend(scattered[range].iter().map(|slot| unsafe { slot.assume_init_read() }));
            sort_bucket(&mut bucket, &mut spare);
            unique_in_sorted(&mut bucket);
            below += bucket.len();
            let slot = match bucket.len() {
                1 => IdSlot::Id(bucket.pop().expect("one id")),
                _ => IdSlot::Level(build_level(&bucket, 2, gen)),
            };
            bitmap |= 1 << lower;
            slots.push(slot);
        }
        if slots.is_empty() {
            continue;
        }
        distinct += below;
        let slot = match below {
            1 => slots.pop().expect("one id"),
            _ => IdSlot::Level(level_inode(
                gen,
                IdNode {
                    bitmap,
                    slots: slots.into_iter().collect(),
                },
            )),
        };
        root_bitmap |= 1 << upper;
        root_slots.push(slot);
    }
    if distinct == 1 {
        let Some(IdSlot::Id(only)) = root_slots.pop() else {
            unreachable!("a lone id is a slot of its own at level 0")
        };
        return (Built::One(only.key), 1);
    }
    let root = IdNode {
        bitmap: root_bitmap,
        slots: root_slots.into_iter().collect(),
    };
    (Built::Set(level_inode(gen, root)), distinct)
}

/// Sort one bucket of [`build_many`] by hash (its leaves share the top
/// [`BUCKET_BITS`]), with `spare` as room for the counting pass.
fn sort_bucket(bucket: &mut Vec<Leaf<()>>, spare: &mut Vec<Leaf<()>>) {
    if bucket.len() > INSERTION_MAX {
        let digit = |leaf: &Leaf<()>| ((leaf.hash >> (64 - BUCKET_BITS - IN_BUCKET_BITS)) & 0xff) as usize;
        let mut starts = [0u32; 1 << IN_BUCKET_BITS];
        for leaf in bucket.iter() {
            starts[digit(leaf)] += 1;
        }
        let mut sum = 0;
        for start in starts.iter_mut() {
            (*start, sum) = (sum, sum + *start);
        }
        spare.clear();
        let places = spare.spare_capacity_mut();
        for leaf in bucket.drain(..) {
            let place = &mut starts[digit(&leaf)];
            places[*place as usize].write(leaf);
            *place += 1;
        }
        // SAFETY: `spare` has room for the whole bucket (both are made with the largest bucket's
        // capacity), and the pass above wrote each of its first `n` places exactly once (prefix sums
        // of the exact counts per digit, each leaf advancing its digit's place by one).
        unsafe { spare.set_len(sum as usize) };
        std::mem::swap(bucket, spare);
    }
    // Leaves that share the bits sorted so far are in input order: a few per run.
    insertion_sort_by_hash(bucket, |leaf| leaf.hash);
}

/// What a write to a shared set did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SetWrite {
    /// Finished: whether the set changed.
    Done(bool),
    /// Removed the last id: the root is now a T-node, and the holder should drop the set.
    Emptied,
    /// A GCAS lost a race or the generation moved: start again from the trie's root.
    Restart,
    /// The root is a T-node: the set is empty and final; the holder must drop it.
    Tombed,
    /// Removed the id, but the compression of the levels it emptied stopped
    /// short (a snapshot moved the generation, or a helper compressed a level
    /// and left its emptied parent): a tombed level may still be held on the
    /// id's path, and the root may hold no id. The caller runs [`prune`] on the
    /// path; otherwise an empty set could stay alive in its holder for good.
    RemovedLeftover,
}

/// What one [`compress`] did.
#[derive(PartialEq, Eq)]
enum Compressed {
    /// Its GCAS removed the tombed level, and the parent still holds slots.
    Kept,
    /// Its GCAS removed the tombed level and left the parent a T-node.
    Emptied,
    /// It wrote nothing: the parent no longer held the level (another writer
    /// compressed it, and may have left the parent empty), or a snapshot moved
    /// the generation.
    NotDone,
}

/// Add `id` (hash `hash`) to the set rooted at `root`, whose generation is
/// the trie root's `gen` (the caller renews an older root first).
/// Linearizes at the committing GCAS, or at the read that found `id`.
pub(crate) fn insert(root: &INode, id: &SmolStr, hash: u64, gen: Generation, ctx: Ctx<'_>, guard: &Guard) -> SetWrite {
    debug_assert_eq!(root.gen, gen, "the holder renews an old-generation root first");
    let mut inode = root;
    let mut parent: Option<(&INode, u32)> = None;
    let mut level = 0;
    loop {
        let main = gcas_read(inode, ctx, guard);
        let MainKind::Ids(node) = &main.get().kind else {
            return met_tomb(parent, hash, inode, gen, ctx, guard);
        };
        let commit = |new: IdNode| match gcas(inode, main, MainKind::Ids(new), ctx, guard) {
            true => SetWrite::Done(true),
            false => SetWrite::Restart,
        };
        let leaf = || Leaf {
            hash,
            key: id.clone(),
            value: (),
        };
        if level == LEVELS {
            if node
                .slots
                .iter()
                .any(|slot| matches!(slot, IdSlot::Id(held) if held.key == *id))
            {
                return SetWrite::Done(false);
            }
            return commit(node.inserted(None, node.slots.len(), IdSlot::Id(leaf())));
        }
        let (bit, at, held) = node.locate(hash, level);
        if !held {
            return commit(node.inserted(Some(bit), at, IdSlot::Id(leaf())));
        }
        match &node.slots[at] {
            IdSlot::Id(held) if held.is(hash, id) => return SetWrite::Done(false),
            IdSlot::Id(held) => {
                let below = pair(held.clone(), leaf(), level + 1, gen);
                return commit(node.replaced(at, IdSlot::Level(below)));
            }
            IdSlot::Level(child) if child.gen == gen => {
                parent = Some((inode, level));
                inode = child;
                level += 1;
            }
            IdSlot::Level(child) => {
                if !renew(inode, main, node, at, child, gen, ctx, guard) {
                    return SetWrite::Restart;
                }
            }
        }
    }
}

/// Remove `id` from the set rooted at `root` (generation `gen`, as for
/// [`insert`]). Linearizes at the committing GCAS, or at the read that found
/// `id` absent.
pub(crate) fn remove(root: &INode, id: &str, hash: u64, gen: Generation, ctx: Ctx<'_>, guard: &Guard) -> SetWrite {
    debug_assert_eq!(root.gen, gen, "the holder renews an old-generation root first");
    // The levels above `inode`, each with its level number.
    let mut path: SmallVec<[(&INode, u32); 16]> = SmallVec::new();
    let mut inode = root;
    loop {
        let level = path.len() as u32;
        let main = gcas_read(inode, ctx, guard);
        let MainKind::Ids(node) = &main.get().kind else {
            return met_tomb(path.last().copied(), hash, inode, gen, ctx, guard);
        };
        let new = if level == LEVELS {
            let found = node
                .slots
                .iter()
                .position(|slot| matches!(slot, IdSlot::Id(held) if held.key == id));
            let Some(at) = found else {
                return SetWrite::Done(false);
            };
            node.removed(None, at)
        } else {
            let (bit, at, held) = node.locate(hash, level);
            if !held {
                return SetWrite::Done(false);
            }
            match &node.slots[at] {
                IdSlot::Id(held) if held.is(hash, id) => node.removed(Some(bit), at),
                IdSlot::Id(_) => return SetWrite::Done(false),
                IdSlot::Level(child) if child.gen == gen => {
                    path.push((inode, level));
                    inode = child;
                    continue;
                }
                IdSlot::Level(child) => {
                    if !renew(inode, main, node, at, child, gen, ctx, guard) {
                        return SetWrite::Restart;
                    }
                    continue;
                }
            }
        };
        if !new.is_empty() {
            return match gcas(inode, main, MainKind::Ids(new), ctx, guard) {
                true => SetWrite::Done(true),
                false => SetWrite::Restart,
            };
        }
        // The level is empty: a T-node (final, so no insert can land in it),
        // then compressed out of its parent, and so on up while parents empty.
        if !gcas(inode, main, MainKind::Tomb, ctx, guard) {
            return SetWrite::Restart;
        }
        let mut tombed = inode;
        for &(parent, parent_level) in path.iter().rev() {
            match compress(parent, parent_level, hash, tombed, gen, ctx, guard) {
                Compressed::Kept => return SetWrite::Done(true),
                Compressed::Emptied => tombed = parent,
                Compressed::NotDone => return SetWrite::RemovedLeftover,
            }
        }
        return SetWrite::Emptied;
    }
}

/// Replace the old-generation `child` at slot `at` of `inode`'s node by a
/// copy in generation `gen` with the same main node: its generation is dead,
/// so no GCAS on it can commit again and its main node is final.
#[allow(clippy::too_many_arguments)]
fn renew(
    inode: &INode,
    main: super::atomic_arc::Guarded<'_, MainNode>,
    node: &IdNode,
    at: usize,
    child: &INode,
    gen: Generation,
    ctx: Ctx<'_>,
    guard: &Guard,
) -> bool {
    debug_assert_ne!(child.gen, gen, "only an old-generation level is renewed");
    let child_main = gcas_read(child, ctx, guard).to_arc();
    let renewed = IdSlot::Level(INode::new(gen, child_main));
    gcas(inode, main, MainKind::Ids(node.replaced(at, renewed)), ctx, guard)
}

/// What a walk on `hash`'s path does on meeting the T-node `tombed`, reached
/// from `parent` (the level above and its number; `None` for the root): a
/// tombed root means the set is dead ([`SetWrite::Tombed`]); a tombed level is
/// compressed out of its parent, and the walk starts again.
fn met_tomb(
    parent: Option<(&INode, u32)>,
    hash: u64,
    tombed: &INode,
    gen: Generation,
    ctx: Ctx<'_>,
    guard: &Guard,
) -> SetWrite {
    match parent {
        None => SetWrite::Tombed,
        Some((parent, parent_level)) => {
            compress(parent, parent_level, hash, tombed, gen, ctx, guard);
            SetWrite::Restart
        }
    }
}

/// Remove the tombed level `tombed` (on the path of `hash`) from `parent`, at
/// `level`; a parent left empty becomes a T-node. The caller decides what a
/// tombed root means.
#[allow(clippy::too_many_arguments)]
fn compress(
    parent: &INode,
    level: u32,
    hash: u64,
    tombed: &INode,
    gen: Generation,
    ctx: Ctx<'_>,
    guard: &Guard,
) -> Compressed {
    if parent.gen != gen {
        return Compressed::NotDone;
    }
    loop {
        let main = gcas_read(parent, ctx, guard);
        let MainKind::Ids(node) = &main.get().kind else {
            return Compressed::NotDone;
        };
        let (bit, at, held) = node.locate(hash, level);
        if !held || !matches!(&node.slots[at], IdSlot::Level(child) if std::ptr::eq(&**child, tombed)) {
            return Compressed::NotDone;
        }
        if !is_tombed(tombed, ctx, guard) {
            return Compressed::NotDone;
        }
        let new = node.removed(Some(bit), at);
        let empty = new.is_empty();
        let kind = if empty { MainKind::Tomb } else { MainKind::Ids(new) };
        if gcas(parent, main, kind, ctx, guard) {
            return if empty { Compressed::Emptied } else { Compressed::Kept };
        }
        if !generation_holds(gen, ctx, guard) {
            return Compressed::NotDone;
        }
    }
}

/// Finish what a removal of an id of hash `hash` left undone on its path
/// ([`SetWrite::RemovedLeftover`]): compress the tombed level nearest the
/// root, if any, out of its parent. `Done(false)` when no level on the path
/// is tombed (nothing is left), `Tombed` when the root is (the holder must
/// drop the set), `Restart` after any write or lost race (walk again: a
/// compression can leave its parent tombed, to be compressed in turn).
/// Changes no id: a tombed level is empty and final.
pub(crate) fn prune(root: &INode, hash: u64, gen: Generation, ctx: Ctx<'_>, guard: &Guard) -> SetWrite {
    debug_assert_eq!(root.gen, gen, "the holder renews an old-generation root first");
    let mut parent: Option<(&INode, u32)> = None;
    let mut inode = root;
    let mut level = 0;
    loop {
        let main = gcas_read(inode, ctx, guard);
        let MainKind::Ids(node) = &main.get().kind else {
            return met_tomb(parent, hash, inode, gen, ctx, guard);
        };
        if level == LEVELS {
            return SetWrite::Done(false);
        }
        let (_, at, held) = node.locate(hash, level);
        match held.then(|| &node.slots[at]) {
            Some(IdSlot::Level(child)) if child.gen == gen => {
                parent = Some((inode, level));
                inode = child;
                level += 1;
            }
            Some(IdSlot::Level(child)) => {
                if !renew(inode, main, node, at, child, gen, ctx, guard) {
                    return SetWrite::Restart;
                }
            }
            _ => return SetWrite::Done(false),
        }
    }
}

/// Whether the set rooted at `root` holds `id`.
pub(crate) fn contains(root: &INode, id: &str, hash: u64, ctx: Ctx<'_>, guard: &Guard) -> bool {
    let mut inode = root;
    let mut level = 0;
    loop {
        let main = gcas_read(inode, ctx, guard);
        let MainKind::Ids(node) = &main.get().kind else {
            return false;
        };
        if level == LEVELS {
            return node
                .slots
                .iter()
                .any(|slot| matches!(slot, IdSlot::Id(held) if held.key == id));
        }
        let (_, at, held) = node.locate(hash, level);
        if !held {
            return false;
        }
        match &node.slots[at] {
            IdSlot::Id(held) => return held.is(hash, id),
            IdSlot::Level(child) => {
                inode = child;
                level += 1;
            }
        }
    }
}

/// Call `visit` with every id of the set rooted at `root`, in no particular order.
pub(crate) fn for_each<'g>(root: &'g INode, ctx: Ctx<'_>, guard: &'g Guard, mut visit: impl FnMut(&'g Leaf<()>)) {
    let mut stack: SmallVec<[&'g INode; 32]> = SmallVec::new();
    stack.push(root);
    while let Some(inode) = stack.pop() {
        if let MainKind::Ids(node) = &gcas_read(inode, ctx, guard).get().kind {
            for slot in node.slots.iter() {
                match slot {
                    IdSlot::Id(leaf) => visit(leaf),
                    IdSlot::Level(child) => stack.push(child),
                }
            }
        }
    }
}

/// Tomb the level at depth `depth` (> 0) on `hash`'s path, whatever it holds,
/// and compress nothing: the state a removal leaves when it tombed its
/// emptied level and its compression then stopped short (tests of [`prune`]).
#[cfg(test)]
pub(crate) fn tomb_level_for_test(root: &INode, hash: u64, depth: u32, ctx: Ctx<'_>, guard: &Guard) {
    let mut inode = root;
    for level in 0..depth {
        let MainKind::Ids(node) = &gcas_read(inode, ctx, guard).get().kind else {
            panic!("level {level} is not a live level");
        };
        let (_, at, held) = node.locate(hash, level);
        let Some(IdSlot::Level(child)) = held.then(|| &node.slots[at]) else {
            panic!("no level below {level} on the path");
        };
        inode = child;
    }
    let main = gcas_read(inode, ctx, guard);
    assert!(
        gcas(inode, main, MainKind::Tomb, ctx, guard),
        "an uncontended GCAS commits"
    );
}

/// The tree of a set rooted at `root`, written out: each level's bitmap and
/// slots in order, an id by its text (tests that two builds agree node for node).
#[cfg(test)]
pub(crate) fn shape(root: &INode, ctx: Ctx<'_>, guard: &Guard) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    match &gcas_read(root, ctx, guard).get().kind {
        MainKind::Ids(node) => {
            write!(out, "{:x}[", node.bitmap).expect("to a string");
            for slot in node.slots.iter() {
                match slot {
                    IdSlot::Id(leaf) => write!(out, "{},", leaf.key),
                    IdSlot::Level(child) => write!(out, "{},", shape(child, ctx, guard)),
                }
                .expect("to a string");
            }
            out.push(']');
        }
        _ => out.push_str("not a set level"),
    }
    out
}

/// The I-nodes of a set rooted at `root`, the root included (tests of pruning).
#[cfg(test)]
pub(crate) fn level_count(root: &INode, ctx: Ctx<'_>, guard: &Guard) -> usize {
    let mut count = 0;
    let mut stack = vec![root];
    while let Some(inode) = stack.pop() {
        count += 1;
        if let MainKind::Ids(node) = &gcas_read(inode, ctx, guard).get().kind {
            stack.extend(node.slots.iter().filter_map(|slot| match slot {
                IdSlot::Level(child) => Some(&**child),
                IdSlot::Id(_) => None,
            }));
        }
    }
    count
}
