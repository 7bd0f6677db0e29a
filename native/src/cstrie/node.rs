//! The node kinds of the CS-trie: I-nodes, main nodes (C-node or T-node) and
//! the immutable branch tables inside C-nodes.

use std::sync::Arc;

use super::atomic_arc::AtomicArc;
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
pub(crate) struct MainNode {
    pub(crate) kind: MainKind,
    /// GCAS state: null once committed (and then forever null), otherwise the
    /// proposal's predecessor, marked `Pending` or `Failed`. Set before the
    /// node is published; never set back to non-null.
    pub(crate) prev: AtomicArc<GcasPrev>,
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

/// A subscriber set: sorted by text, without duplicates, immutable (writers
/// build a new set). `None` is the empty set, so empty sets cost nothing.
#[derive(Clone, Default)]
pub(crate) struct SubscriberSet {
    /// Invariant: `Some` only with at least one id; ids strictly increasing.
    ids: Option<Arc<[Arc<str>]>>,
}

impl SubscriberSet {
    pub(crate) fn single(id: Arc<str>) -> Self {
        SubscriberSet {
            ids: Some(Arc::from(vec![id])),
        }
    }

    pub(crate) fn as_slice(&self) -> &[Arc<str>] {
        self.ids.as_deref().unwrap_or(&[])
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_none()
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn position(&self, id: &str) -> Result<usize, usize> {
        self.as_slice().binary_search_by(|held| (**held).cmp(id))
    }

    /// The set plus `id`, or `None` when `id` is already present.
    pub(crate) fn with(&self, id: &Arc<str>) -> Option<Self> {
        let at = self.position(id).err()?;
        let mut ids = Vec::with_capacity(self.len() + 1);
        ids.extend_from_slice(&self.as_slice()[..at]);
        ids.push(id.clone());
        ids.extend_from_slice(&self.as_slice()[at..]);
        Some(SubscriberSet {
            ids: Some(Arc::from(ids)),
        })
    }

    /// The set minus `id`, or `None` when `id` is absent.
    pub(crate) fn without(&self, id: &str) -> Option<Self> {
        let at = self.position(id).ok()?;
        if self.len() == 1 {
            return Some(SubscriberSet::default());
        }
        let mut ids = self.as_slice().to_vec();
        ids.remove(at);
        Some(SubscriberSet {
            ids: Some(Arc::from(ids)),
        })
    }
}

/// One edge of a C-node: the subscribers whose pattern ends with this word,
/// and the I-node holding the longer patterns.
#[derive(Clone)]
pub(crate) struct Branch {
    pub(crate) subscribers: SubscriberSet,
    /// Invariant (in a freshly written C-node): a branch with no subscribers
    /// has a child. The child may later become a T-node; whoever sees that
    /// prunes the branch.
    pub(crate) child: Option<Arc<INode>>,
}

/// An immutable branch table. Writers copy it, change the copy, and GCAS the
/// copy into the owning I-node.
#[derive(Clone, Default)]
pub(crate) struct CNode {
    /// Subscribers of the empty pattern (zero words). Only ever non-empty in
    /// the root's C-node: that is where a zero-word pattern ends.
    pub(crate) empty_pattern: SubscriberSet,
    /// Literal-word branches. Invariant: sorted by word, words unique.
    /// Words are `Arc`s so copying the table on write allocates no strings.
    pub(crate) literals: Vec<(Arc<str>, Branch)>,
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
        self.literals
            .binary_search_by(|(held, _)| (**held).cmp(word))
            .ok()
            .map(|at| &self.literals[at].1)
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
            PatternWord::Literal(literal) => {
                match (
                    copy.literals.binary_search_by(|(held, _)| (**held).cmp(literal)),
                    branch,
                ) {
                    (Ok(at), Some(branch)) => copy.literals[at].1 = branch,
                    (Ok(at), None) => {
                        copy.literals.remove(at);
                    }
                    (Err(at), Some(branch)) => copy.literals.insert(at, (Arc::from(literal), branch)),
                    (Err(_), None) => {}
                }
            }
        }
        copy
    }

    /// A C-node holding only `branch` under `word`.
    pub(crate) fn single(word: PatternWord<'_>, branch: Branch) -> CNode {
        CNode::default().with_branch(word, Some(branch))
    }

    /// Every branch with its pattern word, literals first.
    pub(crate) fn branches(&self) -> impl Iterator<Item = (PatternWord<'_>, &Branch)> {
        self.literals
            .iter()
            .map(|(word, branch)| (PatternWord::Literal(word), branch))
            .chain(self.star.iter().map(|branch| (PatternWord::Star, branch)))
            .chain(self.hash.iter().map(|branch| (PatternWord::Hash, branch)))
    }

    fn branches_mut(&mut self) -> impl Iterator<Item = &mut Branch> {
        self.literals
            .iter_mut()
            .map(|(_, branch)| branch)
            .chain(self.star.iter_mut())
            .chain(self.hash.iter_mut())
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
            if let MainKind::Branches(cnode) = &mut main.kind {
                for branch in cnode.branches_mut() {
                    if let Some(mut child) = branch.child.take().and_then(Arc::into_inner) {
                        pending.extend(child.main.take());
                    }
                }
            }
        }
    }
}
