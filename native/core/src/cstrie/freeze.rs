//! Freezing a snapshot: the CS-trie laid out as a [`FrozenMatcher`].
//!
//! The frozen layout wants every word and subscriber numbered in text order
//! (so equal contents give equal bytes) and the nodes in preorder with each
//! node's literal children in that order. The CS-trie holds its tables in
//! hash order, so a freeze needs every distinct text ranked before any node
//! can be placed. Three passes:
//!
//! 1. **Walk** the snapshot once, depth first, into a compact temporary tree:
//!    per node a contiguous run of `(word, child)` kids and one of
//!    subscribers, all as temporary ids. Texts are interned by the hash the
//!    trie's tables already hold for them (no text is hashed twice, none is
//!    copied: the walk borrows them under the snapshot's guard).
//! 2. **Prune and rank.** A reverse pass marks the nodes with a subscriber at
//!    or below them (a tomb not yet compressed can leave a branch with none);
//!    only the words and subscribers of live nodes are then sorted, so the
//!    result is exactly [`FrozenMatcher::build`]'s of the snapshot's pairs.
//! 3. **Lay out** in preorder straight into the matcher's arrays, without a
//!    traversal: the size of every live subtree (from pass 2) gives each
//!    node's preorder index from its parent's and its elder siblings' (kids
//!    sorted by rank), so the temporary tree is read once, in its own order,
//!    and only each finished node is written out of order. Each node's edges
//!    and subscribers stay one contiguous range, in temporary order.
//!
//! Cost: O(nodes + pairs) for the walk, plus sorting the distinct texts and
//! each node's children; memory, a few words per node and pair besides the
//! result. No pattern text is ever built.

use hashbrown::HashTable;

use super::gcas::{gcas_read, Ctx};
use super::node::{Branch, CNode, Child, INode, SubscriberSet, Tail};
use super::sync::epoch::Guard;
use crate::errors::BuildError;
use crate::frozen::{sort_by_text, Edge, FrozenMatcher, Node, NONE, PREFETCH_AHEAD};
use crate::layout::Texts as Interned;
use crate::prefetch::prefetch;
use crate::short_text::same_text;
use crate::word_hash::hash_word;

/// Temporary kid keys of the wildcards: after every word rank (ranks stay
/// below `u32::MAX - 1`, as [`Interned::from_sorted`] requires), star first.
const STAR_KEY: u32 = u32::MAX - 1;
const HASH_KEY: u32 = u32::MAX;

/// One node of the temporary tree.
#[derive(Clone, Copy, Default)]
struct TempNode {
    /// `kids[kids_start..][..kids_len]`: `(word id or wildcard key, child)`.
    kids_start: u32,
    kids_len: u32,
    /// `subs[subs_start..][..subs_len]`: temporary subscriber ids.
    subs_start: u32,
    subs_len: u32,
}

/// Texts borrowed from the snapshot, each with its [`hash_word`], numbered by
/// temporary ids that [`Texts::rank`] maps to their final, text-ordered ones.
struct Texts<'g> {
    /// Some: equal texts share one id (words: a few hundred popular words
    /// recur in most patterns). None: every occurrence gets an id of its own
    /// and the ranking's sort finds the equal ones (subscribers: mostly few
    /// patterns each, where a hash probe per occurrence cost more than the
    /// sort saves).
    index: Option<HashTable<u32>>,
    texts: Vec<(&'g str, u64)>,
}

impl<'g> Texts<'g> {
    fn with_capacity(count: usize, dedupe: bool) -> Self {
        Texts {
            index: dedupe.then(|| HashTable::with_capacity(count)),
            texts: Vec::with_capacity(count),
        }
    }

    fn intern(&mut self, text: &'g str, hash: u64) -> u32 {
        let Texts { index, texts } = self;
        let next = texts.len() as u32;
        let Some(index) = index else {
            texts.push((text, hash));
            return next;
        };
        *index
            .entry(hash, |&id| texts[id as usize].0 == text, |&id| texts[id as usize].1)
            .or_insert_with(|| {
                texts.push((text, hash));
                next
            })
            .get()
    }

    /// The texts flagged in `used`, ranked in text order: `(rank of each id
    /// (unused ids: none; equal texts: one rank), the interned table)`.
    fn rank(&self, used: &[bool]) -> Result<(Vec<u32>, Interned), BuildError> {
        let used_ids = (0..self.texts.len() as u32).filter(|&id| used[id as usize]);
        let order = sort_by_text(used_ids, |id| self.texts[id as usize].0);
        let mut rank = vec![NONE; self.texts.len()];
        let mut distinct: Vec<&str> = Vec::with_capacity(order.len());
        for (at, &(prefix, id)) in order.iter().enumerate() {
            // In text order the ids (and so their texts and ranks) are anywhere in their arrays.
            if let Some(&(_, ahead)) = order.get(at + PREFETCH_AHEAD) {
                prefetch(self.texts.as_ptr().wrapping_add(ahead as usize));
                prefetch(rank.as_ptr().wrapping_add(ahead as usize));
            }
            let text = self.texts[id as usize];
            let repeat =
                at > 0 && order[at - 1].0 == prefix && distinct.last().is_some_and(|last| same_text(last, text.0));
            if !repeat {
                distinct.push(text.0);
            }
            rank[id as usize] = distinct.len() as u32 - 1;
        }
        let interned = Interned::from_sorted(&distinct)?;
        Ok((rank, interned))
    }
}

/// Temporary nodes (and kids) reserved per pair. A pair alone on its path is a
/// tail in the trie but one node per word here: a million `tenant<i>.orders.#`
/// make three million nodes, and a reserve of one per pair regrew both vectors
/// twice (copying them, and faulting in each new buffer). Unused capacity is
/// address space only: its pages are never touched.
const NODES_PER_PAIR: usize = 4;

/// The snapshot under `root` as a frozen matcher (see the module docs).
pub(crate) fn freeze(
    root: &INode,
    ctx: Ctx<'_>,
    guard: &Guard,
    pairs_hint: usize,
) -> Result<FrozenMatcher, BuildError> {
    let Some(root_cnode) = gcas_read(root, ctx, guard).get().cnode() else {
        return Ok(FrozenMatcher::empty());
    };
    let mut walk = Walk {
        nodes: Vec::with_capacity(NODES_PER_PAIR * pairs_hint + 1),
        kids: Vec::with_capacity(NODES_PER_PAIR * pairs_hint),
        subs: Vec::with_capacity(pairs_hint),
        words: Texts::with_capacity(pairs_hint.min(1 << 20), true),
        subscribers: Texts::with_capacity(pairs_hint, false),
    };
    walk.nodes.push(TempNode::default());
    walk.add_subscribers(0, root_cnode.empty_pattern(), ctx, guard);
    walk.run(root_cnode, ctx, guard)?;
    walk.lay_out()
}

/// What the walk still has to lay out below a temporary node.
enum Below<'g> {
    Node(&'g CNode),
    /// The remaining words of a tail (a suffix of its text).
    Tail(&'g str, &'g Tail),
}

struct Walk<'g> {
    nodes: Vec<TempNode>,
    kids: Vec<(u32, u32)>,
    subs: Vec<u32>,
    words: Texts<'g>,
    subscribers: Texts<'g>,
}

impl<'g> Walk<'g> {
    fn add_subscribers(&mut self, node: u32, set: &'g SubscriberSet, ctx: Ctx<'_>, guard: &'g Guard) {
        let start = self.subs.len() as u32;
        let (subscribers, subs) = (&mut self.subscribers, &mut self.subs);
        set.for_each(ctx, guard, |id, hash| subs.push(subscribers.intern(id, hash)));
        let temp = &mut self.nodes[node as usize];
        temp.subs_start = start;
        temp.subs_len = self.subs.len() as u32 - start;
    }

    /// Pass 1: every node reachable from the root C-node, depth first.
    fn run(&mut self, root: &'g CNode, ctx: Ctx<'_>, guard: &'g Guard) -> Result<(), BuildError> {
        let mut stack: Vec<(Below<'g>, u32)> = vec![(Below::Node(root), 0)];
        while let Some((below, node)) = stack.pop() {
            let cnode = match below {
                Below::Node(cnode) => cnode,
                Below::Tail(words, tail) => {
                    self.tail(node, words, tail, ctx, guard, &mut stack)?;
                    continue;
                }
            };
            let kids_start = self.kids.len() as u32;
            for leaf in cnode.literals.iter() {
                let key = self.words.intern(&leaf.key, hash_word(&leaf.key));
                self.branch(key, &leaf.value, ctx, guard, &mut stack)?;
            }
            if let Some(branch) = cnode.star() {
                self.branch(STAR_KEY, branch, ctx, guard, &mut stack)?;
            }
            if let Some(branch) = cnode.hash() {
                self.branch(HASH_KEY, branch, ctx, guard, &mut stack)?;
            }
            let temp = &mut self.nodes[node as usize];
            temp.kids_start = kids_start;
            temp.kids_len = self.kids.len() as u32 - kids_start;
        }
        if self.kids.len() > u32::MAX as usize || self.subs.len() > u32::MAX as usize {
            return Err(BuildError::TooLarge);
        }
        Ok(())
    }

    /// A kid under `key` for `branch`, unless the branch leads nowhere (a tomb
    /// not yet compressed); what lies below it, if anything, goes on `stack`.
    fn branch(
        &mut self,
        key: u32,
        branch: &'g Branch,
        ctx: Ctx<'_>,
        guard: &'g Guard,
        stack: &mut Vec<(Below<'g>, u32)>,
    ) -> Result<(), BuildError> {
        let below = match branch.child() {
            None => None,
            Some(Child::Node(child)) => gcas_read(child, ctx, guard)
                .get()
                .cnode()
                .filter(|child| !child.is_empty())
                .map(Below::Node),
            // A tail whose shared set died and is not yet dropped holds nothing.
            Some(Child::Tail(tail)) if tail.subscribers().is_empty_in(ctx, guard) => None,
            Some(Child::Tail(tail)) => Some(Below::Tail(tail.words(), tail)),
        };
        if branch.subscribers().is_empty_in(ctx, guard) && below.is_none() {
            return Ok(());
        }
        let child = self.new_node()?;
        self.kids.push((key, child));
        self.add_subscribers(child, branch.subscribers(), ctx, guard);
        if let Some(below) = below {
            stack.push((below, child));
        }
        Ok(())
    }

    fn new_node(&mut self) -> Result<u32, BuildError> {
        let id = u32::try_from(self.nodes.len())
            .ok()
            .filter(|&id| id < STAR_KEY)
            .ok_or(BuildError::TooLarge)?;
        self.nodes.push(TempNode::default());
        Ok(id)
    }

    /// `node`'s one kid: the first of a tail's remaining `words`, holding the
    /// tail's subscribers when it is the last word, else the rest of it.
    fn tail(
        &mut self,
        node: u32,
        words: &'g str,
        tail: &'g Tail,
        ctx: Ctx<'_>,
        guard: &'g Guard,
        stack: &mut Vec<(Below<'g>, u32)>,
    ) -> Result<(), BuildError> {
        let (first, rest) = match words.split_once(crate::topic::SEPARATOR) {
            Some((first, rest)) => (first, Some(rest)),
            None => (words, None),
        };
        let key = match first {
            crate::topic::STAR => STAR_KEY,
            crate::topic::HASH => HASH_KEY,
            literal => self.words.intern(literal, hash_word(literal)),
        };
        let kids_start = self.kids.len() as u32;
        let child = self.new_node()?;
        self.kids.push((key, child));
        let temp = &mut self.nodes[node as usize];
        temp.kids_start = kids_start;
        temp.kids_len = 1;
        match rest {
            None => self.add_subscribers(child, tail.subscribers(), ctx, guard),
            Some(rest) => stack.push((Below::Tail(rest, tail), child)),
        }
        Ok(())
    }

    fn kids_of(&self, node: u32) -> &[(u32, u32)] {
        let temp = self.nodes[node as usize];
        &self.kids[temp.kids_start as usize..][..temp.kids_len as usize]
    }

    fn subs_of(&self, node: u32) -> &[u32] {
        let temp = self.nodes[node as usize];
        &self.subs[temp.subs_start as usize..][..temp.subs_len as usize]
    }

    /// Passes 2 and 3.
    fn lay_out(self) -> Result<FrozenMatcher, BuildError> {
        // Children are numbered after their parents, so one reverse pass sees
        // every child before its parent: liveness, and the size of each live
        // subtree (what its preorder index range spans).
        let mut size = vec![0u32; self.nodes.len()];
        for node in (0..self.nodes.len() as u32).rev() {
            let below: u32 = self.kids_of(node).iter().map(|&(_, child)| size[child as usize]).sum();
            if node == 0 || below > 0 || !self.subs_of(node).is_empty() {
                size[node as usize] = 1 + below;
            }
        }
        let live = |node: u32| size[node as usize] > 0;
        let mut word_used = vec![false; self.words.texts.len()];
        let mut subscriber_used = vec![false; self.subscribers.texts.len()];
        let (mut live_edges, mut live_pairs) = (0, 0);
        for node in (0..self.nodes.len() as u32).filter(|&node| live(node)) {
            for &(key, child) in self.kids_of(node) {
                if live(child) && key < STAR_KEY {
                    word_used[key as usize] = true;
                    live_edges += 1;
                }
            }
            for &id in self.subs_of(node) {
                subscriber_used[id as usize] = true;
                live_pairs += 1;
            }
        }
        let (word_rank, words) = self.words.rank(&word_used)?;
        let (subscriber_rank, subscribers) = self.subscribers.rank(&subscriber_used)?;

        // Preorder indices without a traversal: parents come before their
        // children in temporary order, so when a node is reached its own
        // index is known, and its kids (sorted by rank) follow it one subtree
        // after another. Everything is read in temporary order; only the
        // finished node lands at its preorder place.
        let live_nodes = size[0] as usize;
        let mut index = vec![NONE; self.nodes.len()];
        index[0] = 0;
        let mut nodes: Vec<Node> = vec![Node::EMPTY; live_nodes];
        let mut edges: Vec<Edge> = Vec::with_capacity(live_edges);
        let mut subscriber_ids: Vec<u32> = Vec::with_capacity(live_pairs);
        let mut kids: Vec<u64> = Vec::new();
        for temp in (0..self.nodes.len() as u32).filter(|&node| live(node)) {
            let at = index[temp as usize];
            // Live kids as (sort key << 32 | child): literal ranks, then star, then hash.
            kids.clear();
            kids.extend(
                self.kids_of(temp)
                    .iter()
                    .filter(|&&(_, child)| live(child))
                    .map(|&(key, child)| {
                        let sort_key = if key >= STAR_KEY { key } else { word_rank[key as usize] };
                        u64::from(sort_key) << 32 | u64::from(child)
                    }),
            );
            if !kids.is_sorted() {
                kids.sort_unstable();
            }
            let mut node = Node {
                first_edge: edges.len() as u32,
                subs_start: subscriber_ids.len() as u32,
                ..Node::EMPTY
            };
            let mut next = at + 1;
            for &kid in &kids {
                let (sort_key, child) = ((kid >> 32) as u32, kid as u32);
                index[child as usize] = next;
                match sort_key {
                    STAR_KEY => node.star = next,
                    HASH_KEY => node.hash = next,
                    rank => edges.push(Edge {
                        word: rank,
                        child: next,
                    }),
                }
                next += size[child as usize];
            }
            node.edge_count = edges.len() as u32 - node.first_edge;
            let subs_start = subscriber_ids.len();
            subscriber_ids.extend(self.subs_of(temp).iter().map(|&id| subscriber_rank[id as usize]));
            let subs = &mut subscriber_ids[subs_start..];
            // A subscriber set holds each id once: ordering is all it needs.
            sort_distinct(subs, subscribers.len());
            debug_assert!(subs.windows(2).all(|pair| pair[0] < pair[1]));
            node.subs_len = subs.len() as u32;
            nodes[at as usize] = node;
        }
        FrozenMatcher::assemble(nodes, edges, subscriber_ids, words, subscribers)
    }
}

/// Sort `ids`, distinct values below `bound`. A set that covers a good share
/// of `0..bound` (a million subscribers of one pattern) is sorted by setting
/// bits in a bitmap of `bound` bits and reading them back in order, O(bound /
/// 64 + n); others by a comparison sort.
fn sort_distinct(ids: &mut [u32], bound: usize) {
    if ids.len() < 4096 || ids.len() * 16 < bound {
        ids.sort_unstable();
        return;
    }
    let mut bits = vec![0u64; bound.div_ceil(64)];
    for &id in ids.iter() {
        bits[id as usize / 64] |= 1 << (id % 64);
    }
    let mut out = ids.iter_mut();
    for (word_index, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            let bit = word.trailing_zeros();
            *out.next().expect("one bit per distinct id") = (word_index * 64) as u32 + bit;
            word &= word - 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn sort_distinct_agrees_with_a_sort_on_dense_and_sparse_sets() {
        let mut rng = Rng(0xde75e);
        for (count, bound) in [
            (10_000, 10_000),
            (5_000, 60_000),
            (5_000, 100_000),
            (100, 100),
            (4_096, 5_000),
        ] {
            let mut all: Vec<u32> = (0..bound as u32).collect();
            for at in (1..all.len()).rev() {
                all.swap(at, rng.below(at + 1));
            }
            let mut ids = all[..count].to_vec();
            let mut expected = ids.clone();
            expected.sort_unstable();
            sort_distinct(&mut ids, bound);
            assert_eq!(ids, expected, "{count} of {bound}");
        }
    }

    /// A hot pattern (one set past the bitmap-sort threshold) and a wide node
    /// freeze to exactly the bytes of a matcher built from the same pairs.
    #[test]
    fn large_sets_and_wide_nodes_freeze_like_a_build() {
        let trie = crate::cstrie::CsTrie::new();
        let mut pairs: Vec<(String, String)> = (0..10_000)
            .map(|i| ("audit.#".to_owned(), format!("sub-{i}")))
            .collect();
        pairs.extend((0..3_000).map(|i| (format!("tenant{i}.orders.#"), format!("tenant{i}"))));
        trie.subscribe_many(pairs.iter().map(|(p, s)| (p.as_str(), s.as_str())));
        let frozen = trie.snapshot().freeze().unwrap();
        let built = FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap();
        assert_eq!(
            crate::codec::encode(&frozen),
            crate::codec::encode(&built),
            "equal pairs, equal bytes"
        );
    }
}
