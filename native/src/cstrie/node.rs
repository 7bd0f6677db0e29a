//! The node kinds of the CS-trie: I-nodes, main nodes (C-node or T-node) and
//! the immutable branch tables inside C-nodes.

use std::sync::Arc;

use super::atomic_arc::AtomicArc;
use super::hamt::{Hamt, Leaf, SmolStr};
use crate::topic::PatternWord;

/// A generation stamp. Each root I-node gets a fresh one (a per-trie counter),
/// so equality means "created for the same root".
pub(crate) type Generation = u64;

/// An indirection node: it stays in place while the main node it points to
/// is replaced by GCAS, which is what keeps concurrent updates below and above
/// it from being lost.
pub(crate) struct INode {
    /// The main node. Never null while the I-node is reachable. Changed only
    /// by GCAS (see `gcas.rs`); once a *committed* T-node is stored here it is
    /// never replaced (the T-node invariant).
    pub(crate) main: AtomicArc<MainNode>,
    /// Writers modify this I-node only while the root carries the same
    /// generation; otherwise they first copy it into the root's generation.
    pub(crate) gen: Generation,
}

/// What an I-node points to, plus the GCAS bookkeeping for that pointer.
/// `repr(C)` with `prev` first: every read checks `prev` before using
/// `kind`, so it must share the first cache line with the C-node's tables.
#[repr(C)]
pub(crate) struct MainNode {
    /// GCAS state: null once committed (and then forever null), otherwise the
    /// proposal's predecessor, marked `Pending` or `Failed`. Set before the
    /// node is published; never set back to non-null.
    pub(crate) prev: AtomicArc<GcasPrev>,
    pub(crate) kind: MainKind,
}

/// The state of an uncommitted GCAS proposal.
pub(crate) enum GcasPrev {
    /// Not yet decided; the predecessor main node is kept to roll back to.
    Pending(Arc<MainNode>),
    /// Decided against (the root generation moved on): the I-node must be
    /// rolled back to this predecessor.
    Failed(Arc<MainNode>),
}

pub(crate) enum MainKind {
    Branches(CNode),
    /// T-node: the I-node lost its last subscription and is dead; its parent
    /// must drop the reference ("compression"). Carries nothing because a
    /// subscription trie only tombs empty nodes.
    Tomb,
}

/// A subscriber set. Most patterns have one subscriber, so that case is held
/// inline (no table to chase on every lookup and freeze); larger sets are a
/// persistent set ([`Hamt`]), so adding or removing one id copies O(log n)
/// slots however many ids the pattern has. Immutable: writers build a new
/// set. The empty set allocates nothing.
#[derive(Clone, Default)]
pub(crate) enum SubscriberSet {
    #[default]
    Empty,
    One(SmolStr),
    /// Invariant: at least two ids.
    Many(Hamt<()>),
}

impl SubscriberSet {
    pub(crate) fn single(id: SmolStr) -> Self {
        SubscriberSet::One(id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, SubscriberSet::Empty)
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            SubscriberSet::Empty => 0,
            SubscriberSet::One(_) => 1,
            SubscriberSet::Many(ids) => ids.len(),
        }
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        match self {
            SubscriberSet::Empty => false,
            SubscriberSet::One(held) => **held == *id,
            SubscriberSet::Many(ids) => ids.get(id).is_some(),
        }
    }

    /// The ids, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &SmolStr> {
        let (one, many) = match self {
            SubscriberSet::Empty => (None, None),
            SubscriberSet::One(id) => (Some(id), None),
            SubscriberSet::Many(ids) => (None, Some(ids.iter().map(|leaf| &leaf.key))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The set plus `id`, or `None` when `id` is already present.
    pub(crate) fn with(&self, id: &SmolStr) -> Option<Self> {
        match self {
            SubscriberSet::Empty => Some(SubscriberSet::One(id.clone())),
            SubscriberSet::One(held) if held == id => None,
            SubscriberSet::One(held) => Some(SubscriberSet::Many(
                Hamt::default().insert(held.clone(), ()).insert(id.clone(), ()),
            )),
            SubscriberSet::Many(ids) => ids.insert_new(Leaf::new(id.clone(), ())).map(SubscriberSet::Many),
        }
    }

    /// The set plus every id of `ids` (duplicates allowed), and how many were
    /// new. Many additions go through one batch insert ([`Hamt::insert_many`])
    /// instead of one path copy per id.
    pub(crate) fn with_many(&self, ids: impl IntoIterator<Item = Leaf<()>>) -> (Self, usize) {
        let mut ids = ids.into_iter().peekable();
        let mut set = self.clone();
        let mut added = 0;
        // Empty and one-id sets grow one id at a time until they are a table.
        while !matches!(set, SubscriberSet::Many(_)) {
            let Some(id) = ids.next() else { return (set, added) };
            if let Some(grown) = set.with(&id.key) {
                set = grown;
                added += 1;
            }
        }
        let SubscriberSet::Many(table) = &set else {
            unreachable!("loop exits on Many")
        };
        if ids.peek().is_none() {
            return (set, added);
        }
        let (table, new) = table.insert_many(ids.collect());
        (SubscriberSet::Many(table), added + new)
    }

    /// The set minus `id`, or `None` when `id` is absent.
    pub(crate) fn without(&self, id: &str) -> Option<Self> {
        match self {
            SubscriberSet::Empty => None,
            SubscriberSet::One(held) => (**held == *id).then_some(SubscriberSet::Empty),
            SubscriberSet::Many(ids) => {
                let ids = ids.remove(id)?;
                Some(match ids.len() {
                    1 => SubscriberSet::One(ids.iter().next().expect("one id").key.clone()),
                    _ => SubscriberSet::Many(ids),
                })
            }
        }
    }
}

/// One edge of a C-node: the subscribers whose pattern ends with this word,
/// and the I-node holding the longer patterns.
#[derive(Clone, Default)]
pub(crate) struct Branch {
    pub(crate) subscribers: SubscriberSet,
    /// Invariant (in a freshly written C-node): a branch with no subscribers
    /// has a child. The child may later become a T-node; whoever sees that
    /// prunes the branch.
    pub(crate) child: Option<Arc<INode>>,
}

/// An immutable branch table. Writers copy it (O(1): the tables inside are
/// persistent and shared), change the copy, and GCAS it into the owning I-node.
#[derive(Clone, Default)]
pub(crate) struct CNode {
    /// Subscribers of the empty pattern (zero words). Only ever non-empty in
    /// the root's C-node: that is where a zero-word pattern ends.
    pub(crate) empty_pattern: SubscriberSet,
    /// Literal-word branches, by word. A persistent map: replacing one branch
    /// copies O(log width) slots, not the table.
    pub(crate) literals: Hamt<Branch>,
    /// The branch for a whole-word `*`.
    pub(crate) star: Option<Branch>,
    /// The branch for a whole-word `#`.
    pub(crate) hash: Option<Branch>,
}

impl CNode {
    pub(crate) fn is_empty(&self) -> bool {
        self.empty_pattern.is_empty() && self.literals.is_empty() && self.star.is_none() && self.hash.is_none()
    }

    /// The literal branch for key word `word` (what a lookup follows).
    pub(crate) fn literal(&self, word: &str) -> Option<&Branch> {
        self.literals.get(word)
    }

    /// `literal` with the word's [`hash_word`](super::hamt::hash_word) computed once by the caller.
    pub(crate) fn literal_hashed(&self, hash: u64, word: &str) -> Option<&Branch> {
        self.literals.get_hashed(hash, word)
    }

    /// The branch stored for pattern word `word` (no matching).
    pub(crate) fn branch(&self, word: PatternWord<'_>) -> Option<&Branch> {
        match word {
            PatternWord::Literal(literal) => self.literal(literal),
            PatternWord::Star => self.star.as_ref(),
            PatternWord::Hash => self.hash.as_ref(),
        }
    }

    /// A copy with the branch for `word` replaced (`None` removes it).
    pub(crate) fn with_branch(&self, word: PatternWord<'_>, branch: Option<Branch>) -> CNode {
        let mut copy = self.clone();
        match word {
            PatternWord::Star => copy.star = branch,
            PatternWord::Hash => copy.hash = branch,
            PatternWord::Literal(literal) => match branch {
                Some(branch) => copy.literals = copy.literals.insert(SmolStr::new(literal), branch),
                None => {
                    if let Some(literals) = copy.literals.remove(literal) {
                        copy.literals = literals;
                    }
                }
            },
        }
        copy
    }

    /// A C-node holding only `branch` under `word`.
    pub(crate) fn single(word: PatternWord<'_>, branch: Branch) -> CNode {
        CNode::default().with_branch(word, Some(branch))
    }

    /// Every branch with its pattern word: literals (in no particular order),
    /// then `*`, then `#`.
    pub(crate) fn branches(&self) -> impl Iterator<Item = (PatternWord<'_>, &Branch)> {
        self.literals
            .iter()
            .map(|leaf| (PatternWord::Literal(&leaf.key), &leaf.value))
            .chain(self.star.iter().map(|branch| (PatternWord::Star, branch)))
            .chain(self.hash.iter().map(|branch| (PatternWord::Hash, branch)))
    }

    /// Take the C-node apart, handing each branch it owns alone to `take`.
    fn dismantle(self, mut take: impl FnMut(Branch)) {
        self.literals.dismantle(&mut take);
        self.star.into_iter().chain(self.hash).for_each(take);
    }
}

impl MainNode {
    /// A committed main node (no GCAS pending), for nodes not yet published.
    pub(crate) fn committed(kind: MainKind) -> Arc<MainNode> {
        Arc::new(MainNode {
            kind,
            prev: AtomicArc::new(None),
        })
    }

    pub(crate) fn cnode(&self) -> Option<&CNode> {
        match &self.kind {
            MainKind::Branches(cnode) => Some(cnode),
            MainKind::Tomb => None,
        }
    }
}

impl INode {
    pub(crate) fn new(gen: Generation, main: Arc<MainNode>) -> Arc<INode> {
        Arc::new(INode {
            main: AtomicArc::new(Some(main)),
            gen,
        })
    }
}

impl Drop for INode {
    /// Dismantle the subtree iteratively: a pattern with very many words makes
    /// a chain that deep, and a recursive drop could overflow the stack.
    fn drop(&mut self) {
        let mut pending: Vec<Arc<MainNode>> = self.main.take().into_iter().collect();
        while let Some(main) = pending.pop() {
            // Only the last owner dismantles; shared nodes just lose a count.
            let Some(mut main) = Arc::into_inner(main) else {
                continue;
            };
            if let Some(prev) = main.prev.take().and_then(Arc::into_inner) {
                match prev {
                    GcasPrev::Pending(node) | GcasPrev::Failed(node) => pending.push(node),
                }
            }
            if let MainKind::Branches(cnode) = std::mem::replace(&mut main.kind, MainKind::Tomb) {
                cnode.dismantle(|mut branch| {
                    if let Some(mut child) = branch.child.take().and_then(Arc::into_inner) {
                        pending.extend(child.main.take());
                    }
                });
            }
        }
    }
}
