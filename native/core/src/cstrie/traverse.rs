//! Read-side traversals shared by the live trie and snapshots: wildcard
//! matching, exact pattern lookup and enumeration.
//!
//! Matching walks states `(C-node, key position)` with an explicit stack (no
//! recursion, so deep tries cannot overflow the stack). A `#` branch can
//! consume any number of words, so the same state can be reached along many
//! paths (`#.#.#...`); for each C-node the walk remembers the lowest position
//! its `#` branch was taken from, and never takes it again for a position
//! already covered, so every `(#-child, position)` state is expanded once. Between two `#` edges each
//! edge consumes exactly one word, so deduplicating at `#` edges bounds the
//! whole walk by O(nodes x (key words + 1)).

use super::sync::epoch::Guard;
use hashbrown::HashMap;
use smallvec::SmallVec;

use super::gcas::{gcas_read, Ctx};
use super::hamt::SmolStr;
use super::node::{Branch, CNode, Child, INode, SubscriberSet};
use crate::topic::{PatternWord, SEPARATOR};
use crate::word_hash::hash_word;

/// Called with `(parent I-node, pattern word, tombed child)` when a traversal
/// meets a T-node, so live readers can help compress it.
pub(crate) type TombHelper<'h> = &'h dyn Fn(&INode, PatternWord<'_>, &INode);

/// The state of one matching walk (the part `follow` needs).
struct Walk<'w, 'g, 'h> {
    key_len: usize,
    ctx: Ctx<'w>,
    guard: &'g Guard,
    on_tomb: Option<TombHelper<'h>>,
    found: &'w mut SmallVec<[&'g SmolStr; 8]>,
    /// States still to expand: (I-node owning the C-node, its C-node, key
    /// position).
    stack: SmallVec<[(&'g INode, &'g CNode, usize); 16]>,
    /// The key's words (a tail is matched against the ones it has left).
    key: &'w [&'w str],
}

impl<'g> Walk<'_, 'g, '_> {
    /// Take `branch` of `inode`'s C-node, arriving at key position `next`.
    fn follow(&mut self, inode: &INode, word: PatternWord<'_>, branch: &'g Branch, next: usize) {
        if next == self.key_len {
            branch.subscribers().push_into(self.found, self.ctx, self.guard);
        }
        match branch.child() {
            None => {}
            Some(Child::Node(child)) => match gcas_read(child, self.ctx, self.guard).get().cnode() {
                Some(child_cnode) => self.stack.push((child, child_cnode, next)),
                None => {
                    if let Some(help) = self.on_tomb {
                        help(inode, word, child);
                    }
                }
            },
            Some(Child::Tail(tail)) => {
                let pattern: SmallVec<[PatternWord<'g>; 8]> = tail.pattern_words().collect();
                if tail_matches(&pattern, &self.key[next..]) {
                    tail.subscribers().push_into(self.found, self.ctx, self.guard);
                }
            }
        }
    }
}

/// Whether a tail's pattern words match the key words left after its branch
/// (`*` is one word, `#` zero or more). The glob algorithm with one backtrack
/// point, the last `#` met: without a `#` it is one pass in lockstep, and at
/// worst O(pattern words x key words), like the reference `words_match`,
/// but with no allocation.
pub(crate) fn tail_matches(pattern: &[PatternWord<'_>], key: &[&str]) -> bool {
    let (mut at, mut position) = (0, 0);
    // After the last `#`: the pattern index that follows it, and the key
    // position that pattern index is being tried at.
    let mut resume: Option<(usize, usize)> = None;
    while position < key.len() {
        match pattern.get(at) {
            Some(PatternWord::Hash) => {
                at += 1;
                resume = Some((at, position));
            }
            Some(PatternWord::Star) => (at, position) = (at + 1, position + 1),
            Some(PatternWord::Literal(literal)) if *literal == key[position] => (at, position) = (at + 1, position + 1),
            _ => match resume {
                // Let the last `#` take one more word and try again from there.
                Some((after_hash, from)) => {
                    resume = Some((after_hash, from + 1));
                    (at, position) = (after_hash, from + 1);
                }
                None => return false,
            },
        }
    }
    pattern[at..].iter().all(|&word| word == PatternWord::Hash)
}

/// The words of `text` (empty text: no words), split with a byte loop into a
/// buffer on the stack for the usual handful of words.
pub(crate) fn words_of(text: &str) -> SmallVec<[&str; 8]> {
    let mut words = SmallVec::new();
    if text.is_empty() {
        return words;
    }
    let mut start = 0;
    for (at, &byte) in text.as_bytes().iter().enumerate() {
        if byte == SEPARATOR as u8 {
            // `.` is ASCII, so both ends are char boundaries.
            words.push(&text[start..at]);
            start = at + 1;
        }
    }
    words.push(&text[start..]);
    words
}

/// [`words_of`] parsed as pattern words.
pub(crate) fn pattern_words_of(text: &str) -> SmallVec<[PatternWord<'_>; 8]> {
    words_of(text).into_iter().map(PatternWord::parse).collect()
}

/// Subscribers whose pattern matches `key`, deduplicated (sorted by text).
pub(crate) fn matching<'g>(
    root: &'g INode,
    key: &[&str],
    ctx: Ctx<'_>,
    guard: &'g Guard,
    on_tomb: Option<TombHelper<'_>>,
) -> Vec<SmolStr> {
    let mut found: SmallVec<[&'g SmolStr; 8]> = SmallVec::new();
    let Some(root_cnode) = gcas_read(root, ctx, guard).get().cnode() else {
        return Vec::new();
    };
    if key.is_empty() {
        root_cnode.empty_pattern().push_into(&mut found, ctx, guard);
    }
    // For each C-node whose `#` branch was taken: the lowest key position it
    // was taken from (C-node addresses are stable: the guard keeps them alive).
    let mut hash_expanded: HashMap<usize, usize> = HashMap::new();
    let mut walk = Walk {
        key_len: key.len(),
        ctx,
        guard,
        on_tomb,
        found: &mut found,
        stack: smallvec::smallvec![(root, root_cnode, 0)],
        key,
    };
    // Each key word is hashed once, then probed in every C-node it meets.
    let hashes: SmallVec<[u64; 8]> = key.iter().map(|word| hash_word(word)).collect();
    while let Some((inode, cnode, at)) = walk.stack.pop() {
        if at < key.len() {
            if let Some(branch) = cnode.literal_hashed(hashes[at], key[at]) {
                walk.follow(inode, PatternWord::Literal(key[at]), branch, at + 1);
            }
            if let Some(branch) = cnode.star() {
                walk.follow(inode, PatternWord::Star, branch, at + 1);
            }
        }
        if let Some(branch) = cnode.hash() {
            // `#` here was already expanded from `lowest` on, which covered
            // every later position; only positions before it are new.
            let lowest = hash_expanded
                .entry(cnode as *const CNode as usize)
                .or_insert(key.len() + 1);
            let end = *lowest;
            if at < end {
                *lowest = at;
                for next in at..end {
                    walk.follow(inode, PatternWord::Hash, branch, next);
                }
            }
        }
    }
    // Deduplicate before cloning: one refcount bump per distinct subscriber.
    found.sort_unstable();
    found.dedup_by(|left, right| left == right);
    // Cloned by reference into a buffer of the final size: collecting the references' iterator by value
    // moved each id through an `Option` on the stack, and perf put over a third of this function's own
    // time on those stores and loads.
    let mut ids = Vec::with_capacity(found.len());
    for &id in found.iter() {
        ids.push(id.clone());
    }
    ids
}

/// The ids of `set`, sorted.
fn sorted(set: &SubscriberSet, ctx: Ctx<'_>, guard: &Guard) -> Vec<SmolStr> {
    let mut ids = Vec::new();
    set.for_each(ctx, guard, |id, _| ids.push(id.clone()));
    ids.sort_unstable();
    ids
}

/// The subscribers stored under exactly `pattern` (no matching), sorted.
pub(crate) fn exact(root: &INode, pattern: &[PatternWord<'_>], ctx: Ctx<'_>, guard: &Guard) -> Vec<SmolStr> {
    let Some(mut cnode) = gcas_read(root, ctx, guard).get().cnode() else {
        return Vec::new();
    };
    let Some((last, inner)) = pattern.split_last() else {
        return sorted(cnode.empty_pattern(), ctx, guard);
    };
    for (at, word) in inner.iter().enumerate() {
        match cnode.branch(*word).and_then(|branch| branch.child()) {
            Some(Child::Node(child)) => match gcas_read(child, ctx, guard).get().cnode() {
                Some(child_cnode) => cnode = child_cnode,
                None => return Vec::new(),
            },
            Some(Child::Tail(tail)) if tail.is(&pattern[at + 1..]) => {
                return sorted(tail.subscribers(), ctx, guard);
            }
            Some(Child::Tail(_)) | None => return Vec::new(),
        }
    }
    cnode
        .branch(*last)
        .map(|branch| sorted(branch.subscribers(), ctx, guard))
        .unwrap_or_default()
}

/// Visit every stored `(pattern text, subscribers)` with a non-empty set.
pub(crate) fn for_each_pattern<'g>(
    root: &'g INode,
    ctx: Ctx<'_>,
    guard: &'g Guard,
    mut visit: impl FnMut(&str, &'g SubscriberSet),
) {
    let Some(root_cnode) = gcas_read(root, ctx, guard).get().cnode() else {
        return;
    };
    if !root_cnode.empty_pattern().is_empty_in(ctx, guard) {
        visit("", root_cnode.empty_pattern());
    }
    // (C-node, text of the pattern prefix leading to it; None at the root).
    let mut stack: Vec<(&'g CNode, Option<String>)> = vec![(root_cnode, None)];
    while let Some((cnode, prefix)) = stack.pop() {
        for (word, branch) in cnode.branches() {
            let word_text = match word {
                PatternWord::Literal(literal) => literal,
                PatternWord::Star => crate::topic::STAR,
                PatternWord::Hash => crate::topic::HASH,
            };
            let pattern = match &prefix {
                None => word_text.to_owned(),
                Some(prefix) => format!("{prefix}{}{word_text}", crate::topic::SEPARATOR),
            };
            if !branch.subscribers().is_empty_in(ctx, guard) {
                visit(&pattern, branch.subscribers());
            }
            match branch.child() {
                None => {}
                Some(Child::Node(child)) => {
                    if let Some(child_cnode) = gcas_read(child, ctx, guard).get().cnode() {
                        stack.push((child_cnode, Some(pattern)));
                    }
                }
                Some(Child::Tail(tail)) if tail.subscribers().is_empty_in(ctx, guard) => {}
                Some(Child::Tail(tail)) => {
                    visit(&format!("{pattern}{SEPARATOR}{}", tail.words()), tail.subscribers());
                }
            }
        }
    }
}

/// Number of I-nodes reachable from `root` (tombed ones included).
pub(crate) fn count_inodes(root: &INode, ctx: Ctx<'_>, guard: &Guard) -> usize {
    let mut count = 0;
    let mut stack: Vec<&INode> = vec![root];
    while let Some(inode) = stack.pop() {
        count += 1;
        if let Some(cnode) = gcas_read(inode, ctx, guard).get().cnode() {
            stack.extend(
                cnode
                    .branches()
                    .filter_map(|(_, branch)| branch.child().and_then(Child::inode))
                    .map(|child| &**child),
            );
        }
    }
    count
}
